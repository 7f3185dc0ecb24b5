"""Property test of route designs (issue 20): hypothesis draws edit histories of the routing
panel (pick, drag, move, delete, add a wire or via, undo, redo, save the DEF elsewhere or over
the open file, reopen the design) on the small two-net design, through the window's real undo
history and autosave, and after every step checks that

- nothing raised and nothing was reported as an error (a command may only be refused);
- the pick names an element that exists, highlighted where it is, or there is none;
- the design equals a fresh read of the file with the history's applied edits replayed
  (a canonical summary of the wiring: rows by names, in any order);
- a saved DEF reads back equal to the design;

and at the end that undoing everything gives the file as read (as last saved over). The "ci"
profile runs 25 derandomized examples of 6 to 30 steps (~4 s here)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from PySide6.QtCore import QRectF

from engine.vlsi.def_ import SEG, VIA
from panels.routing.model import RouteModel, decode
from panels.routing.view import RoutingPanel
from tests.panels.conftest import HistoryHost, close_widget
from tests.panels.routing.conftest import SMALL_DEF
from tests.panels.routing.picks import pick_problem, wiring

PITCH = 100  # dbu: 0.1 µm, the pitch without a LEF
NETS = ("a", "b")
coordinate = st.integers(1, 99).map(lambda k: k * PITCH)  # inside the 10 µm die
steps = st.integers(-4, 4)

PICK = st.tuples(st.just("pick"), st.sampled_from(NETS), st.integers(0, 7))
ACTIONS = st.one_of(
    PICK, PICK,  # twice as likely: most edits need a pick
    st.tuples(st.just("drag"), steps, steps),
    st.tuples(st.just("move"), steps, steps),
    st.tuples(st.just("delete")),
    st.tuples(st.just("add wire"), st.sampled_from(("metal2", "metal3")), coordinate,
              coordinate, coordinate, coordinate),
    st.tuples(st.just("add via"), coordinate, coordinate),
    st.tuples(st.just("undo")),
    st.tuples(st.just("redo")),
    st.tuples(st.just("save")),
    st.tuples(st.just("save over")),
    st.tuples(st.just("reopen")),
)


def fresh_read(path: Path, commands=()) -> RouteModel:
    """The file read anew, with commands (their JSON form, as autosaved) applied."""
    model = RouteModel()
    model.load_def(path)
    for command in commands:
        decode(command.to_json()).apply(model)
    return model


def element_point(panel: RoutingPanel, k: int) -> tuple[float, float] | None:
    """The middle (µm) of the k-th segment or via of the selected net, counting round."""
    design = panel.model.design
    segments, vias = design.net_wiring(panel.model.selected)
    points = [((r[SEG["x1"]] + r[SEG["x2"]]) / 2, (r[SEG["y1"]] + r[SEG["y2"]]) / 2)
              for r in segments.tolist()] + [(r[VIA["x"]], r[VIA["y"]]) for r in vias.tolist()]
    if not points:
        return None
    x, y = points[k % len(points)]
    return x / design.dbu_per_micron, y / design.dbu_per_micron


def act(panel: RoutingPanel, host: HistoryHost, action: tuple, folder: Path) -> None:
    """One user action, through the panel's own handlers."""
    name, *args = action
    if name == "pick":
        panel.select_net(args[0], focus=False)
        point = element_point(panel, args[1])
        if point is not None:
            panel.click(*point, 0.05)
    elif name == "drag":
        if panel.element is None:
            return
        kind, row = panel.element
        x, y = (row[1:3] if kind == "segment" else row[2:4])
        scale = panel.model.design.dbu_per_micron
        start = (x / scale, y / scale)
        end = (start[0] + args[0] * PITCH / scale, start[1] + args[1] * PITCH / scale)
        if panel._on_canvas_drag("start", start, start, None):
            panel._on_canvas_drag("move", start, end, None)
            panel._on_canvas_drag("finish", start, end, None)
    elif name == "move":
        panel.move_element(args[0] * PITCH, args[1] * PITCH)
    elif name == "delete":
        panel.delete_element()
    elif name == "add wire":
        layer, x1, y1, x2, y2 = args
        panel.add_segment(layer, (x1, y1), (x2, y2))
    elif name == "add via":
        panel.add_via("v23", tuple(args))
    elif name == "undo":
        host.undo()
    elif name == "redo":
        host.redo()
    elif name == "save":
        saved = folder / "saved.def"
        assert panel.save_def(saved)
        assert wiring(fresh_read(saved)) == wiring(panel.model), "the saved DEF differs"
    elif name == "save over":  # the open file: the edits are the file's from now on
        assert panel.save_def(panel.model.design.path)
        assert wiring(fresh_read(panel.model.design.path)) == wiring(panel.model)
    elif name == "reopen":
        assert panel.open_design(panel.model.design.path, None)


@given(st.lists(ACTIONS, min_size=6, max_size=30))
def test_route_design_edit_histories_keep_the_design_and_the_pick_true(qapp, actions) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "small.def"
        path.write_text(SMALL_DEF)
        host = HistoryHost(folder / "runs", folder / "workspace")
        host.history.on_error = lambda title, message: host.errors.append((title, message))
        panel = RoutingPanel(host)
        try:
            panel.resize(1000, 700)
            assert panel.open_design(path, None)
            panel.canvas.box.setRange(QRectF(0, 0, 10, 10), padding=0)
            panel.select_net("a", focus=False)  # adding needs a net; picking changes it
            for step, action in enumerate(actions):
                act(panel, host, action, folder)
                where = f"after step {step} {action}"
                assert host.errors == [], f"{where}: {host.errors}"
                problem = pick_problem(panel)
                assert problem is None, f"{where}: {problem}"
                applied = host.history.applied(panel.model.document)
                assert wiring(panel.model) == wiring(fresh_read(path, applied)), where
            while host.history.stack.canUndo():
                host.undo()
            assert wiring(panel.model) == wiring(fresh_read(path))
            assert pick_problem(panel) is None
        finally:
            panel.shutdown()
            close_widget(panel)

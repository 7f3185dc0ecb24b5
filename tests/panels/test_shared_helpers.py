"""The helpers every panel shares (panels/widgets): the plots' right-click Export goes to the
panel's own export, the status line words a command's outcome, edits leave the history and
jobs go through the view or the host."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from panels.widgets.command_status import show_outcome
from panels.widgets.panel_state import DocumentState, forget_edits, submit_job
from panels.widgets.plot_export import route_export, route_exports
from studio.command_widgets import commands_of
from studio.commands import Command, Invocation


def _export_actions(view: pg.GraphicsView) -> list:
    return [action for action in view.scene().contextMenu if action.text().startswith("Export")]


def test_a_plots_export_asks_for_the_panels_export_and_is_marked_as_it(qtbot) -> None:
    parent = QWidget()
    qtbot.addWidget(parent)
    layout = QVBoxLayout(parent)
    plots = [pg.PlotWidget(), pg.PlotWidget()]
    for plot in plots:
        layout.addWidget(plot)
    asked: list[str] = []
    route_exports(parent, "demo.export_figure", lambda: asked.append("all"))
    for plot in plots:
        (action,) = _export_actions(plot)
        assert commands_of(action) == ["demo.export_figure"]
        action.trigger()  # pyqtgraph's exporter dialog would open here, were it connected
    assert asked == ["all", "all"]
    route_export(plots[0], "demo.export_histogram", lambda: asked.append("one"))
    _export_actions(plots[0])[0].trigger()
    assert asked[-1] == "one" and len(asked) == 3  # replaced, not added


def _invocation(scope: str, refused: str = "", result: object = None) -> Invocation:
    command = Command(f"{scope}.act", "Act", "Does it.", lambda state: None)
    return Invocation(command, {}, refused=refused, result=result)


def test_the_status_line_says_a_refusal_a_line_and_with_exports_a_path(qtbot) -> None:
    line = QLabel("before")
    assert not show_outcome(line, _invocation("other", result="no"), "demo")
    assert line.text() == "before"
    assert show_outcome(line, _invocation("demo", refused="no file"), "demo")
    assert line.text() == "Act refused: no file"
    show_outcome(line, _invocation("demo", result=Path("a.png")), "demo")
    assert line.text() == "Act refused: no file"  # without exports a path says nothing
    show_outcome(line, _invocation("demo", result=Path("a.png")), "demo", exports=True)
    assert line.text() == "Exported a.png"
    show_outcome(line, _invocation("demo", refused="no"), "demo", exports=True)
    show_outcome(line, _invocation("demo"), "demo", exports=True)
    assert line.text() == "Act: done"  # an old refusal never reads as this one's
    show_outcome(line, _invocation("demo", result="opened"), "demo")
    assert line.text() == "opened"


class _Host:
    def __init__(self) -> None:
        self.forgotten: list[str] = []
        self.jobs: list[tuple] = []
        self.errors: list[tuple[str, str]] = []

    def forget_edits(self, document: str) -> None:
        self.forgotten.append(document)

    def submit_job(self, method, params, inputs, on_error=None) -> None:
        self.jobs.append((method, params, inputs))
        on_error("the engine is busy")

    def show_error(self, title: str, message: str) -> None:
        self.errors.append((title, message))


class _State(DocumentState):
    def __init__(self, host, document, submit=None) -> None:
        self.host, self.document, self.submit = host, document, submit


def test_edits_leave_the_history_and_jobs_go_through_the_view_or_the_host() -> None:
    host = _Host()
    forget_edits(host, "a", None, "b")
    forget_edits(object(), "c")  # a host without a history: nothing
    state = _State(host, "doc")
    state.leave_document()
    assert host.forgotten == ["a", "b", "doc"] and state.document is None
    state.leave_document()
    assert host.forgotten == ["a", "b", "doc"]
    state.send("m.run", {"k": 1}, {})
    assert host.jobs == [("m.run", {"k": 1}, {})]
    assert host.errors == [("m.run not started", "the engine is busy")]
    sent: list[tuple] = []
    submit_job(host, lambda *job: sent.append(job), "m.run", {}, {"x": "f"})
    assert sent == [("m.run", {}, {"x": "f"})] and len(host.jobs) == 1

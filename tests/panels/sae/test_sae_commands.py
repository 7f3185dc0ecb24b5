"""The SAE browser's commands (issue 37): run without a window on the model and a real undo
history, refused with the reason and no change for a bad argument and for an element that
does not exist, logged as the Python line a script would write and replayed on another run
with the same SAE names, undone through the history; the panel's widgets run them;
``view_state`` / ``restore_view_state`` round-trip as data and as a picture (issue 39).

The run: the property test's tiny hand-made ``sae_pc1.train`` folder, two SAEs ("L0-raw-s0",
"L0-raw-s1") of six features over twelve tokens w0..w4, plus a summary figure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from engine import provenance
from engine.methods import sae_pc1
from panels.sae.commands import COMMANDS, SCOPE, SaeState, register
from panels.sae.model import SAEBrowserModel
from panels.sae.view import COLUMNS, SAEPanel
from studio.commands import CommandRefused, CommandRegistry, Invocation
from tests.panels.sae.test_label_properties import write_tiny_run
from tests.panels.windowless import bind_windowless, list_methods
from tests.studio.test_sessions import _difference, _picture

MISSING = "/dev/null/studio-test"  # under a device: no file or folder can be made there
SUMMARY = {"kind": "plot", "title": "recovery", "xlabel": "seed", "ylabel": "cosine",
           "series": [{"name": "bypass", "x": [0, 1, 2], "y": [0.2, 0.6, 0.9]}], "hlines": []}


def make_run(folder: Path) -> Path:
    run = write_tiny_run(folder)
    (run / "artifacts" / "recovery.json").write_text(json.dumps(SUMMARY))
    return run


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return make_run(tmp_path / "run")


@pytest.fixture
def sae_host(history_host):
    """The history host listing the sae_pc1 methods, as the engine does."""
    return list_methods(history_host, sae_pc1.SPECS)


@pytest.fixture
def windowless(sae_host, run) -> tuple[CommandRegistry, SaeState, list]:
    """The SAE commands over the model and the host's real history: no panel."""
    registry, state, seen = bind_windowless(register, SCOPE, SaeState(SAEBrowserModel(), sae_host))
    registry.run("sae.open", path=str(run))
    return registry, state, seen


@pytest.fixture
def shown(make_widget, sae_host, run, qtbot) -> SAEPanel:
    panel = make_widget(SAEPanel, sae_host)
    assert panel.open_path(run), sae_host.errors
    panel.resize(1300, 800)
    panel.show()
    qtbot.waitExposed(panel)
    return panel


def test_an_edit_is_one_undo_step_and_one_python_line(windowless, sae_host) -> None:
    registry, state, seen = windowless
    model = state.model
    assert model.current_sae == "L0-raw-s0" and model.current == 0  # most important first
    registry.run("sae.label_feature", sae="L0-raw-s0", feature=3, label="rivers")
    assert model.label_of(3) == "rivers" and sae_host.history.stack.count() == 1
    assert seen[-1].python() == \
        'studio.command("sae.label_feature", sae="L0-raw-s0", feature=3, label="rivers")'
    assert sae_host.history.stack.undoText() == "Label feature 3 of L0-raw-s0"
    sae_host.undo()
    assert model.label_of(3) == ""
    sae_host.redo()
    assert model.label_of(3) == "rivers"
    registry.run("sae.annotate_feature", feature=3, note="near water")
    assert sae_host.history.stack.undoText() == "Annotate feature 3 of L0-raw-s0"
    assert model.notes["L0-raw-s0"][3] == {"label": "rivers", "note": "near water"}
    with pytest.raises(CommandRefused, match="has this note already"):
        registry.run("sae.annotate_feature", feature=3, note="near water")
    assert sae_host.history.stack.count() == 2
    sae_host.undo()
    sae_host.undo()
    assert model.notes["L0-raw-s0"][3] == {}


def test_choosing_sorting_searching_and_exporting_without_a_window(windowless, sae_host,
                                                                   run, tmp_path) -> None:
    registry, state, _seen = windowless
    model = state.model
    registry.run("sae.select_sae", sae="L0-raw-s1")
    assert model.current_sae == "L0-raw-s1" and model.current == 0
    registry.run("sae.sort_features", column="density", descending=True)
    assert list(model.ordered_features()) == [5, 4, 3, 2, 1, 0]
    registry.run("sae.select_feature", feature=4)
    assert model.current == 4
    hits = registry.run("sae.search", text="w1")
    assert hits and hits == [{"feature": f, "sum": s, "tokens": n}
                             for f, s, n in model.search("w1")]
    assert model.query == "w1"
    registry.run("sae.label_feature", feature=4, label="fourth")
    page = registry.run("sae.export_dashboard", path=str(tmp_path / "f4.html"))
    assert "feature 4" in page.read_text() and "fourth" in page.read_text()
    assert provenance.read(page)["view"]["features"] == [4]
    labels = registry.run("sae.export_labels", path=str(tmp_path / "labels.json"))
    assert json.loads(labels.read_text())["features"] == [{"feature": 4, "label": "fourth"}]
    said = registry.run("sae.export_sae", folder=str(tmp_path / "exported"))
    assert said == f"Exported L0-raw-s1 to {tmp_path / 'exported'}"  # no window: at once
    assert json.loads((tmp_path / "exported" / "labels.json").read_text())["sae"] == \
        "L0-raw-s1"
    assert registry.run("sae.train", params={"steps": 10}) == "Submitted sae_pc1.train"
    assert sae_host.submitted[-1]["params"] == {"steps": 10}
    with pytest.raises(CommandRefused, match="steering needs a run on the decoder LM"):
        registry.run("sae.steer", prompt="The river")


def test_commands_that_draw_need_the_panel(windowless, tmp_path) -> None:
    registry, _state, _seen = windowless
    for command_id, args, reason in (
            ("sae.show_tab", {"tab": "density"}, "without the panel's window"),
            ("sae.show_summary", {"figure": "recovery"}, "without the panel's window"),
            ("sae.export_dashboard", {"path": str(tmp_path / "f.png")},
             "a figure is drawn by the panel's window")):
        with pytest.raises(CommandRefused, match=reason):
            registry.run(command_id, **args)
    assert not (tmp_path / "f.png").exists()


def test_nothing_open_is_refused(sae_host) -> None:
    registry = register(CommandRegistry())
    registry.bind(SCOPE, SaeState(SAEBrowserModel(), sae_host))
    for command_id, args in (("sae.select_feature", {"feature": 0}),
                             ("sae.search", {"text": "x"}),
                             ("sae.label_feature", {"feature": 0, "label": "x"}),
                             ("sae.export_labels", {"path": "x.json"})):
        with pytest.raises(CommandRefused, match="no SAE is open"):
            registry.run(command_id, **args)


def test_logged_commands_mean_the_same_on_another_run(windowless, sae_host, tmp_path) -> None:
    """SAEs are named by name and features by id: replayed on another run with the same
    SAE names (other weights, another sort), the same features are labelled."""
    registry, _state, seen = windowless
    registry.run("sae.select_sae", sae="L0-raw-s1")
    registry.run("sae.sort_features", column="label")
    registry.run("sae.label_feature", sae="L0-raw-s1", feature=2, label="second")
    registry.run("sae.select_feature", feature=5)
    registry.run("sae.annotate_feature", sae="L0-raw-s1", feature=5, note="last")
    replay = [(i.command.id, i.args) for i in seen[1:]]
    other = make_run(tmp_path / "other")
    tokens = other / "artifacts" / "tokens.json"  # other content: the labels are not its own
    tokens.write_text(json.dumps([f"v{i % 3}" for i in range(12)]))
    again = register(CommandRegistry())
    moved = SaeState(SAEBrowserModel(), sae_host)
    again.bind(SCOPE, moved)
    again.run("sae.open", path=str(other))
    assert moved.model.notes == {}
    for command_id, args in replay:
        again.run(command_id, **args)
    assert moved.model.current_sae == "L0-raw-s1" and moved.model.current == 5
    assert moved.model.notes["L0-raw-s1"] == {2: {"label": "second"}, 5: {"note": "last"}}
    assert moved.model.sort_column == "label"


# Each SAE command with a bad argument and with an element that does not exist (None: it
# names no element): (bad arguments, reason), (arguments naming nothing, reason).
CASES: dict[str, tuple[tuple[dict, str], tuple[dict, str] | None]] = {
    "sae.open": (({"path": 5}, "path: Input should be a valid string"),
                 ({"path": MISSING}, "studio-test")),
    "sae.select_sae": (({"sae": 3}, "sae: Input should be a valid string"),
                       ({"sae": "L9-raw-s0"}, "no SAE 'L9-raw-s0' in run (its SAEs: "
                                              "L0-raw-s0, L0-raw-s1)")),
    "sae.select_feature": (({"feature": -1}, "feature: Input should be greater than or "
                                             "equal to 0"),
                           ({"feature": 99}, "no feature 99 in L0-raw-s0 of run (features "
                                             "0 to 5)")),
    "sae.sort_features": (({"column": "nope"}, "column: Input should be 'feature'"), None),
    "sae.search": (({"text": None}, "text: Input should be a valid string"), None),
    "sae.label_feature": (({"feature": "one", "label": "x"},
                           "feature: Input should be a valid integer"),
                          ({"feature": 9, "label": "x"}, "no feature 9 in L0-raw-s0")),
    "sae.annotate_feature": (({"feature": 0}, "note is required"),
                             ({"sae": "nope", "feature": 0, "note": "x"},
                              "no SAE 'nope' in run")),
    "sae.export_dashboard": (({"path": "x.png", "dpi": 5}, "dpi: Input should be greater"),
                             ({"path": "x.html", "feature": 77}, "no feature 77")),
    "sae.export_labels": (({"path": 1}, "path: Input should be a valid string"),
                          ({"path": MISSING + "/x.json"}, "/dev/null/studio-test")),
    "sae.export_sae": (({"folder": []}, "folder: Input should be a valid string"),
                       ({"folder": MISSING + "/x"}, "/dev/null is not a folder")),
    "sae.train": (({"params": 5}, "params: Input should be a valid dictionary"), None),
    "sae.steer": (({"new_tokens": 0}, "new_tokens: Input should be greater than or equal "
                                      "to 1"),
                  ({"feature": 50}, "no feature 50 in L0-raw-s0")),
    "sae.show_tab": (({"tab": "lineage"}, "tab: Input should be 'features'"), None),
    "sae.show_summary": (({"figure": "nope"}, "figure: Input should be 'anisotropy'"),
                         ({"figure": "anisotropy"}, "run has no anisotropy figure")),
}


def test_every_sae_command_has_refusal_cases() -> None:
    assert set(CASES) == {command.id for command in COMMANDS}


def looks(panel: SAEPanel, host) -> tuple:
    """Everything an SAE command may change, to compare before and after a refusal."""
    model = panel.model
    return (json.dumps({f"{sae}/{f}": v for sae, fs in model.notes.items()
                        for f, v in fs.items()}, sort_keys=True),
            str(model.run_dir), model.current_sae, model.current, model.sort_column,
            model.descending, model.query, list(model.hits), panel.tabs.currentIndex(),
            panel.page_tabs.currentIndex(), panel.summary_box.currentText(),
            panel.sae_box.currentText(), panel.title_label.text(), len(host.submitted),
            host.history.stack.count(), sorted(p.name for p in Path.cwd().iterdir()))


@pytest.mark.parametrize("command_id", sorted(CASES))
def test_refusals_change_nothing(shown, sae_host, command_id, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)  # a relative export path would land in the test's folder
    registry = shown.commands
    registry.run("sae.label_feature", feature=1, label="one")
    registry.run("sae.search", text="w2")
    before = looks(shown, sae_host)
    bad, missing = CASES[command_id]
    for args, reason in [bad] + ([missing] if missing else []):
        with pytest.raises(CommandRefused) as caught:
            registry.run(command_id, **args)
        assert str(caught.value).startswith(f"{command_id}: ") and reason in str(caught.value)
        assert looks(shown, sae_host) == before, args
    # from a button or key: said in the status line and an error box, never raised
    shown.commands.trigger(command_id, **bad[0])
    assert sae_host.errors[-1][1].startswith(command_id)
    assert "refused" in shown.status.text()


def click_header(panel: SAEPanel, column: str, qtbot) -> None:
    """A click on a column's header, as the user sorts."""
    header = panel.table.horizontalHeader()
    at = QPoint(header.sectionViewportPosition(COLUMNS.index(column)) + 8,
                header.height() // 2)
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=at)


def test_widgets_run_commands_that_are_logged_and_undo(shown, sae_host, qtbot) -> None:
    seen: list[Invocation] = []
    shown.commands.listen(seen.append)
    shown.sae_box.setCurrentText("L0-raw-s1")
    click_header(shown, "density", qtbot)
    shown.table.selectRow(shown.features.row_of(4))
    shown.label_edit.setText("fourth")
    shown.label_edit.editingFinished.emit()
    shown.label_edit.editingFinished.emit()  # the focus leaving, nothing changed: no command
    shown.search_edit.setText("w3")
    shown.search_edit.returnPressed.emit()
    shown.tabs.setCurrentIndex(2)
    shown.page_tabs.setCurrentIndex(1)
    order = shown.model.descending
    assert [i.python() for i in seen] == [
        'studio.command("sae.select_sae", sae="L0-raw-s1")',
        f'studio.command("sae.sort_features", column="density"{", descending=True" * order})',
        'studio.command("sae.select_feature", feature=4)',
        'studio.command("sae.label_feature", sae="L0-raw-s1", feature=4, label="fourth")',
        'studio.command("sae.search", text="w3")',
        'studio.command("sae.show_tab", tab="summary")',
        'studio.command("sae.show_tab", tab="neighbours")']
    assert all(i.source == "user" and not i.refused for i in seen)
    assert shown.model.sort_column == "density"
    shown_order = [shown.feature_at_row(r) for r in range(6)]
    assert shown_order == list(shown.model.ordered_features())
    assert shown.page.feature == 4 and shown.feature_at_row(shown.table.currentIndex()
                                                            .row()) == 4
    assert shown.search_list.count() == len(shown.model.hits) > 0
    sae_host.undo()  # Ctrl+Z: the label, one step
    assert shown.model.label_of(4) == "" and shown.label_edit.text() == ""
    assert not sae_host.history.stack.canUndo()


def test_a_script_steers_and_the_box_shows_what_was_steered(shown, sae_host, monkeypatch
                                                           ) -> None:
    """A decoder run's steering from a command fills the Steer box with its arguments, so
    the continuations shown are read against the prompt that was sent."""
    decoder = shown.model.run_dir / "checkpoints" / "decoder"
    decoder.mkdir()
    (decoder / "cfg.json").write_text("{}")
    shown.commands.run("sae.steer", feature=2, alpha=-3.5, prompt="A stone", new_tokens=5)
    submitted = sae_host.submitted[-1]
    assert submitted["method"] == "sae_pc1.steer"
    assert submitted["params"] == {"feature": 2, "alpha": -3.5, "prompt": "A stone",
                                   "new_tokens": 5}
    assert (shown.steer_prompt.text(), shown.steer_alpha.value(),
            shown.steer_tokens.value()) == ("A stone", -3.5, 5)


def test_the_sae_folder_export_is_refused_before_a_worker_starts(shown, sae_host, tmp_path
                                                                 ) -> None:
    (tmp_path / "a-file").write_text("x")
    for folder, reason in ((tmp_path / "a-file", "is a file, not a folder"),
                           (tmp_path / "a-file" / "below", "a-file is not a folder"),
                           (shown.model.sae_folder, "is the SAE's own folder")):
        assert shown.export_sae(folder) is None
        assert reason in sae_host.errors[-1][1]
        assert not shown.status.text().startswith("Exporting")


def _settled(panel: SAEPanel) -> None:
    """The status lines (what the last command said, which differs between a panel used and
    one restored) emptied; plots drawn and laid out."""
    panel.status.setText("")
    panel.run_status.setText("")
    for plot in (panel.density_plot, panel.summary_plot, panel.histogram):
        plot.flush()
    for _ in range(5):
        QApplication.processEvents()


def test_view_state_round_trips_as_data_and_picture(shown, sae_host, make_widget, qtbot, run,
                                                    tmp_path) -> None:
    commands = shown.commands
    commands.run("sae.select_sae", sae="L0-raw-s1")
    commands.run("sae.label_feature", feature=2, label="second")
    commands.run("sae.sort_features", column="density", descending=True)
    commands.run("sae.search", text="w1")
    commands.run("sae.select_feature", feature=2)
    commands.run("sae.show_summary", figure="recovery")
    commands.run("sae.show_tab", tab="summary")
    commands.run("sae.show_tab", tab="neighbours")
    shown.form.set_values({"steps": 77, "d_sae": 64})
    shown.steer_prompt.setText("The river")
    shown.steer_alpha.setValue(12.5)
    _settled(shown)
    saved = json.loads(json.dumps(shown.view_state()))   # what a session file holds
    assert saved["path"] == str(run.resolve()) and saved["sae"] == "L0-raw-s1"
    assert saved["feature"] == 2 and saved["search"] == "w1"
    assert saved["sort"] == {"column": "density", "descending": True}
    assert (saved["tab"], saved["page_tab"], saved["summary"]) == \
        ("summary", "neighbours", "recovery")
    assert saved["form"]["steps"] == 77 and saved["steer"]["alpha"] == 12.5
    before = _picture(shown)

    other = make_widget(SAEPanel, sae_host)
    other.resize(shown.size())
    other.show()
    qtbot.waitExposed(other)
    assert other.restore_view_state(saved) == []
    _settled(other)
    assert json.loads(json.dumps(other.view_state())) == saved
    assert other.model.label_of(2) == "second"  # from the journal
    assert _difference(before, _picture(other)) < 0.01
    plain = make_widget(SAEPanel, sae_host)  # only opened: the picture tells them apart
    plain.resize(shown.size())
    plain.show()
    qtbot.waitExposed(plain)
    assert plain.open_path(run)
    _settled(plain)
    assert _difference(before, _picture(plain)) > 0.05
    shown.tabs.setCurrentIndex(0)  # the table's picture too, at the same scroll
    other.tabs.setCurrentIndex(0)
    _settled(shown)
    _settled(other)
    assert _difference(_picture(shown), _picture(other)) < 0.01

    broken = {**saved, "sae": "L7-raw-s0", "feature": 40, "summary": "anisotropy"}
    problems = other.restore_view_state(broken)
    assert any("no SAE 'L7-raw-s0' in run" in p for p in problems)
    assert any("no feature 40" in p for p in problems)
    assert any("run has no anisotropy figure" in p for p in problems)
    missing = other.restore_view_state({"path": str(tmp_path / "moved")})
    assert len(missing) == 1 and "moved" in missing[0]


def test_the_header_click_sorts_through_the_command_and_keeps_the_feature(shown, qtbot
                                                                          ) -> None:
    seen: list[Invocation] = []
    shown.commands.listen(seen.append)
    shown.commands.run("sae.select_feature", feature=3)
    header = shown.table.horizontalHeader()
    click_header(shown, "feature", qtbot)
    assert seen[-1].command.id == "sae.sort_features" and seen[-1].args["column"] == "feature"
    assert header.sortIndicatorSection() == COLUMNS.index("feature")
    expected = Qt.SortOrder.DescendingOrder if shown.model.descending else \
        Qt.SortOrder.AscendingOrder
    assert header.sortIndicatorOrder() == expected
    assert shown.feature_at_row(shown.table.currentIndex().row()) == 3 == shown.page.feature


def test_the_dashboard_figure_is_black_on_white_in_the_dark_theme(shown, qapp, tmp_path
                                                                  ) -> None:
    """Found using the app: under the dark theme the exported dashboard's labels were light
    grey on white paper and its histogram a dark box."""
    from studio.theme import apply_theme

    style, sheet, palette = qapp.style().name(), qapp.styleSheet(), qapp.palette()
    apply_theme(qapp, "dark")
    try:
        written = shown.commands.run("sae.export_dashboard", path=str(tmp_path / "d.png"))
    finally:
        qapp.setStyleSheet(sheet)
        qapp.setPalette(palette)
        qapp.setStyle(style)
    image = QImage(str(written)).convertToFormat(QImage.Format.Format_Grayscale8)
    grey = np.frombuffer(image.constBits(), np.uint8, image.bytesPerLine() * image.height()
                         ).reshape(image.height(), image.bytesPerLine())[:, :image.width()]
    title = grey[: image.height() // 12]           # the title and measures lines
    assert title.min() < 60 and np.median(title) > 240  # black text on white
    assert np.median(grey) > 200, np.median(grey)   # the histogram is on white too

"""The dialogue panel against an in-process host: load transcripts, search, edit turns through
the window's real undo history, run the simulator from the form, export."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from engine.methods import scicl
from panels.dialogue import MANIFEST
from panels.dialogue.model import DialogueModel, SetTurnField, decode
from panels.dialogue.view import COL_LABEL, COL_NOTE, TAB_FIGURES, DialoguePanel
from tests.panels.conftest import FakeHost

HH = {"chosen": "\n\nHuman: is my plan good?\n\nAssistant: yes, a great plan\n\nHuman: thanks",
      "rejected": "\n\nHuman: is my plan good?\n\nAssistant: it has risks"}


@pytest.fixture
def transcripts(tmp_path) -> Path:
    path = tmp_path / "pairs.jsonl.gz"
    lines = [json.dumps(HH), "{broken", json.dumps(HH)]
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return path


class UndoHost(FakeHost):
    """A FakeHost whose edits go through the shell's own undo adapter (studio.undo)."""

    def __init__(self, run_root: Path) -> None:
        from studio.undo import EditHistory

        super().__init__(run_root, methods=[spec.describe() for spec in scicl.SPECS])
        self._params.update({spec.id: spec.params for spec in scicl.SPECS})
        self.history = EditHistory()

    def push_edit(self, document, command, model) -> None:
        self.history.push(document, command, model)

    def forget_edits(self, document) -> None:
        self.history.forget(document)


@pytest.fixture
def host(tmp_path, qapp):
    return UndoHost(tmp_path / "runs")


@pytest.fixture
def panel(host, make_widget):
    widget = make_widget(DialoguePanel, host)
    widget.resize(1200, 700)
    widget.show()
    return widget


def test_manifest_names_the_view_factory():
    import importlib

    module, name = MANIFEST.factory.split(":")
    assert getattr(importlib.import_module(module), name) is DialoguePanel
    assert MANIFEST.id == "dialogue" and MANIFEST.papers == ("scicl",)
    assert "transcripts" in MANIFEST.formats


def test_loads_transcripts_and_reports_bad_lines(panel, transcripts):
    assert panel.open_file(transcripts)
    assert panel.transcript_list.count() == 4
    assert panel.turns_table.rowCount() == 3
    assert panel.turns_table.item(1, 2).text() == "yes, a great plan"
    assert "1 malformed line(s) skipped: line 2 (first: not JSON" in panel.status.text()
    panel.transcript_list.setCurrentRow(1)
    assert panel.model.transcript.id == "1/rejected" and panel.turns_table.rowCount() == 2


def test_a_bad_file_is_reported_not_raised(panel, host, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json at all\n")
    assert not panel.open_file(bad)
    assert host.errors and str(bad) in host.errors[0][1]


def test_search_moves_to_the_hit(panel, transcripts):
    panel.open_file(transcripts)
    panel.search_edit.setText("RISKS")
    assert panel.hits_label.text() == "2 hit(s)"
    assert panel.model.transcript.id == "1/rejected" and panel.turns_table.currentRow() == 1


def test_relabel_is_undoable_through_the_window_history(panel, host, transcripts):
    panel.open_file(transcripts)
    panel.turns_table.item(1, COL_LABEL).setText("sycophantic")
    panel.turns_table.item(0, COL_NOTE).setText("asks for approval")
    turns = panel.model.transcript.turns
    assert turns[1].meta["label"] == "sycophantic" and turns[0].meta["note"] == "asks for approval"
    assert host.history.stack.count() == 2
    host.history.stack.undo()
    assert "note" not in turns[0].meta and panel.turns_table.item(0, COL_NOTE).text() == ""
    host.history.stack.undo()
    assert "label" not in turns[1].meta and panel.turns_table.item(1, COL_LABEL).text() == ""
    host.history.stack.redo()
    assert panel.turns_table.item(1, COL_LABEL).text() == "sycophantic"


def test_edits_survive_as_json(transcripts):
    model = DialogueModel()
    model.load(transcripts)
    command = model.edit(0, "label", "opening")
    again = decode(json.loads(json.dumps(command.to_json())))
    assert isinstance(again, SetTurnField) and again == command
    again.apply(model)
    assert model.transcript.turns[0].meta["label"] == "opening"
    again.revert(model)
    assert "label" not in model.transcript.turns[0].meta
    with pytest.raises(ValueError):
        model.edit(0, "role", "assistant")


def test_exports_transcripts_and_metrics(panel, transcripts, tmp_path):
    panel.open_file(transcripts)
    panel.turns_table.item(1, COL_LABEL).setText("agrees")
    panel.export_transcripts(tmp_path / "out.jsonl")
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(lines) == 10 and lines[1]["label"] == "agrees"
    panel.export_metrics(tmp_path / "out.csv")
    header, first = (tmp_path / "out.csv").read_text().splitlines()[:2]
    assert header.startswith("transcript,turn,role,label") and first.startswith("1/chosen,0,")
    panel.export_figure(tmp_path / "beliefs.png")
    assert (tmp_path / "beliefs.png").stat().st_size > 0


def test_scored_transcript_is_plotted_and_the_turn_marked(panel, tmp_path):
    path = tmp_path / "scored.jsonl"
    rows = [{"transcript": "d", "role": r, "content": f"t{i}", "belief": 0.1 * i}
            for i, r in enumerate(["user", "assistant"] * 3)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    panel.open_file(path)
    assert set(panel.belief_plot.series_names()) >= {"user", "assistant"}
    assert panel.belief_plot.point_count("user") == 3
    panel.turns_table.setCurrentCell(3, 2)
    assert panel.belief_plot.point_count("selected turn") == 1


def test_runs_the_simulator_from_the_form_and_shows_its_figures(panel, host, tmp_path):
    assert panel.method_box.currentText() == "scicl.simulate"
    panel.form.set_values({"turns": 50, "seeds": 3})
    panel.run()
    (submitted,) = host.submitted
    assert submitted["method"] == "scicl.simulate" and submitted["params"]["turns"] == 50
    job = next(iter(panel.jobs))
    figure = Path(host.run_dir(job)) / "artifacts" / "trajectories.json"
    figure.write_text(json.dumps({"kind": "plot", "title": "t", "series": [
        {"name": "b_a", "x": [0, 1], "y": [0, 1], "style": "line"}]}))
    host.emit(job, "job_artifact", name="trajectories", kind="plot",
              path="artifacts/trajectories.json", meta={})
    assert panel.figure_list.count() == 1 and panel.tabs.currentIndex() == TAB_FIGURES
    assert panel.figure_plot.series_names() == ["b_a"]
    host.emit(job, "job_progress", step=20, total=150, metrics={"collapsed": 0.0})
    assert panel.run_status.text() == \
        f"scicl.simulate ({job}): running, step 20 / 150 · collapsed 0"
    host.emit(job, "job_state", state="failed", reason="ChatError: HTTP 500")
    assert panel.run_status.text() == f"scicl.simulate ({job}): failed: ChatError: HTTP 500"


def test_invalid_parameters_are_shown_on_the_form(panel, host):
    panel.form.set_values({"turns": 5})  # below the minimum of 10
    panel.run()
    assert not panel.jobs
    assert "turns" in (panel.form.errors() or {}) or "not started" in panel.run_status.text()


def test_a_finished_llm_dialogue_opens_its_transcript(panel, host):
    panel.select_method("scicl.llm_dialogue")
    panel.form.set_values({"turns": 2})
    panel.run()
    job = next(iter(panel.jobs))
    artifacts = Path(host.run_dir(job)) / "artifacts"
    (artifacts / "transcript.jsonl").write_text(
        json.dumps({"transcript": "dialogue", "role": "user", "content": "hi", "score": 0.7})
        + "\n")
    host.emit(job, "job_result", outputs={"transcript": "artifacts/transcript.jsonl"})
    assert panel.model.transcript.id == "dialogue" and panel.turns_table.rowCount() == 1


def test_rewrite_a_turn_then_continue_the_dialogue_from_it(panel, host, transcripts):
    panel.open_file(transcripts)
    panel.turns_table.item(2, 2).setText("actually, I am not sure")
    assert panel.model.transcript.turns[2].content == "actually, I am not sure"
    panel.rerun_from_turn(2)
    (submitted,) = host.submitted
    assert submitted["method"] == "scicl.llm_dialogue"
    assert submitted["params"]["prefix_turns"] == 3
    prefix = [json.loads(line) for line in
              Path(submitted["inputs"]["prefix"]).read_text().splitlines()]
    assert [line["content"] for line in prefix][-1] == "actually, I am not sure"
    host.history.stack.undo()
    assert panel.model.transcript.turns[2].content == "thanks"


def test_a_simulated_dialogue_shows_both_beliefs_per_turn(panel, host, tmp_path):
    from engine.context import JobContext

    panel.form.set_values({"turns": 40, "seeds": 2, "bootstrap": 10, "spectral_window": 20})
    panel.run()
    job = next(iter(panel.jobs))
    run_dir = Path(host.run_dir(job))
    spec = next(s for s in scicl.SPECS if s.id == "scicl.simulate")
    outputs = spec.run(JobContext(job, run_dir, emit=lambda e: None),
                       spec.params(**host.submitted[0]["params"]), {})
    host.emit(job, "job_result", outputs=outputs)
    assert panel.turns_table.rowCount() == 40
    assert panel.belief_plot.point_count("user belief") == 40
    assert panel.belief_plot.point_count("assistant belief") == 40


def test_labelling_a_turn_keeps_its_text_through_undo_and_redo(panel, host, transcripts):
    """Issue 20, finding 5: the content column was rewritten from the edit's metadata (blank)."""
    panel.open_file(transcripts)
    text = panel.turns_table.item(1, 2).text()
    assert text == "yes, a great plan"
    panel.turns_table.item(1, COL_LABEL).setText("sycophantic")
    assert panel.turns_table.item(1, 2).text() == text
    host.history.stack.undo()
    assert panel.turns_table.item(1, 2).text() == text
    assert panel.turns_table.item(1, COL_LABEL).text() == ""
    host.history.stack.redo()
    assert panel.turns_table.item(1, 2).text() == text
    assert panel.turns_table.item(1, COL_LABEL).text() == "sycophantic"
    panel.turns_table.item(1, 2).setText("no, it has risks")  # rewriting the text itself
    host.history.stack.undo()
    assert panel.turns_table.item(1, 2).text() == text
    assert panel.model.transcript.turns[1].content == text


def finish_simulation(panel: DialoguePanel, host: UndoHost) -> tuple[str, Path]:
    """Run scicl.simulate from the form and finish it with a one-turn CSV of its own."""
    panel.select_method("scicl.simulate")
    panel.run()
    job = list(panel.jobs)[-1]
    made = Path(host.run_dir(job)) / "artifacts" / "turns.csv"
    made.write_text("transcript,turn,role,content,belief_user,belief_assistant\n"
                    "sim,0,user,simulated turn,0.4,0.6\n")
    host.emit(job, "job_result", outputs={"turns_csv": "artifacts/turns.csv"})
    return job, made


def test_a_run_never_replaces_open_transcripts_unasked(panel, host, transcripts):
    """Issue 20, finding 6: scicl.simulate replaced the opened transcripts, and the search box
    went on counting hits in the old ones."""
    asked = []
    panel.outputs.ask = lambda output, current, answer: asked.append((output, current, answer))
    panel.open_file(transcripts)
    panel.turns_table.item(1, COL_LABEL).setText("sycophantic")
    panel.search_edit.setText("risks")
    assert panel.hits_label.text() == "2 hit(s)"
    job, made = finish_simulation(panel, host)
    ((output, current, answer),) = asked
    assert current == "pairs.jsonl.gz" and output.path == made and job in output.label
    answer(False)  # "Keep pairs.jsonl.gz"
    assert panel.model.file.path == str(transcripts) and host.history.stack.count() == 1
    assert str(made) in panel.status.text() and panel.outputs.button.isVisibleTo(panel)
    assert panel.hits_label.text() == "2 hit(s)"
    assert panel.outputs.open_waiting()  # the button, later
    assert panel.model.transcript.id == "sim" and panel.turns_table.item(0, 2).text() == \
        "simulated turn"
    assert host.history.stack.count() == 0  # the old file left the history
    assert panel.search_edit.text() == "" and panel.hits_label.text() == ""
    assert not panel.outputs.button.isVisibleTo(panel) and len(asked) == 1


def test_the_keep_or_open_question_opens_the_output_when_chosen(panel, host, transcripts):
    from PySide6.QtWidgets import QMessageBox

    panel.open_file(transcripts)
    _job, made = finish_simulation(panel, host)
    (box,) = [b for b in panel.findChildren(QMessageBox) if b.isVisible()]
    texts = [button.text() for button in box.buttons()]
    assert texts == ["Open the run's output", "Keep pairs.jsonl.gz"]
    assert panel.model.file.path == str(transcripts)  # nothing changes while it asks
    box.buttons()[0].click()
    assert panel.model.file.path == str(made) and panel.model.transcript.id == "sim"


def test_a_run_opens_at_once_when_nothing_is_open(panel, host):
    asked = []
    panel.outputs.ask = lambda *args: asked.append(args)
    _job, made = finish_simulation(panel, host)
    assert not asked and panel.model.file.path == str(made)


def test_a_failing_command_is_reported_not_raised_to_the_event_loop(panel, host, transcripts,
                                                                    monkeypatch, caplog):
    panel.open_file(transcripts)

    def broken(*_args):
        raise RuntimeError("index out of date")

    monkeypatch.setattr(panel.model, "edit", broken)
    panel.turns_table.item(1, COL_LABEL).setText("sycophantic")  # Qt calls the slot
    assert host.errors[-1] == ("Cannot label a turn",
                               "dialogue.label_turn: RuntimeError: index out of date")
    assert panel.status.text() == "Label a turn refused: RuntimeError: index out of date"
    assert "dialogue.label_turn failed" in caplog.text and host.history.stack.count() == 0
    assert panel.turns_table.item(1, COL_LABEL).text() == ""  # the cell shows the turn again


def scored_file(tmp_path: Path) -> Path:
    path = tmp_path / "scored.jsonl"
    rows = [{"transcript": "d", "role": r, "content": f"t{i}", "belief": 0.1 * i}
            for i, r in enumerate(["user", "assistant"] * 3)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("suffix", ["png", "svg", "pdf"])
def test_a_figure_names_the_file_transcript_turn_and_metric(panel, tmp_path, suffix):
    """Issue 21: dialogue figures carried only {"exported_by", "studio_version"}."""
    from engine import provenance
    from engine.content import content_hash

    path = scored_file(tmp_path)
    panel.open_file(path)
    panel.turns_table.setCurrentCell(3, 2)
    written = panel.export_figure(tmp_path / f"beliefs.{suffix}", dpi=192, caption=True)
    record = provenance.read(written)
    (source,) = record["sources"]
    assert source["path"] == str(path.resolve()) and source["hash"] == content_hash(path)
    view = record["view"]
    assert view["transcript"] == "d" and view["selected_turn"] == 3
    assert view["selected_role"] == "assistant" and view["metric"] == ["belief"]
    assert view["dpi"] == 192 and view["skipped_lines"] == []
    if suffix == "png":  # drawn for the page: twice the on-screen pixels
        from PySide6.QtGui import QImage

        image = QImage(str(written))
        assert image.width() == 2 * panel.belief_plot.width()


def test_ctrl_e_plot_carries_the_provenance_of_what_it_shows(panel, tmp_path):
    """The shell's Ctrl+E exports ``current_plot()`` with the plot's provenance."""
    from engine import provenance

    panel.open_file(scored_file(tmp_path))
    panel.turns_table.setCurrentCell(1, 2)
    plot = panel.current_plot()
    assert plot.provenance["view"]["selected_turn"] == 1
    plot.export(tmp_path / "ctrl-e.png")
    assert provenance.read(tmp_path / "ctrl-e.png")["view"]["transcript"] == "d"


def test_a_run_figure_names_its_run(panel, host, tmp_path):
    from engine import provenance

    panel.run()
    job = next(iter(panel.jobs))
    run_dir = Path(host.run_dir(job))
    (run_dir / "artifacts").mkdir(parents=True, exist_ok=True)
    (run_dir / "params.json").write_text(json.dumps(
        {"method": "scicl.simulate", "params": {"turns": 150}, "seed": 7}))
    (run_dir / "artifacts" / "trajectories.json").write_text(json.dumps(
        {"kind": "plot", "title": "t", "series": [
            {"name": "b_a", "x": [0, 1], "y": [0, 1], "style": "line"}]}))
    host.emit(job, "job_artifact", name="trajectories", kind="plot",
              path="artifacts/trajectories.json", meta={})
    record = provenance.read(panel.export_figure(tmp_path / "run.png"))
    assert record["runs"] == [{"run_id": job, "method": "scicl.simulate",
                               "params": {"turns": 150}, "seed": 7}]
    assert record["sources"][0]["path"].endswith("trajectories.json")


def test_data_exports_get_provenance_sidecars(panel, transcripts, tmp_path):
    from engine import provenance

    panel.open_file(transcripts)
    panel.export_transcripts(tmp_path / "out.jsonl")
    panel.export_metrics(tmp_path / "out.csv")
    for name in ("out.jsonl", "out.csv"):
        record = json.loads((tmp_path / f"{name}.provenance.json").read_text())
        assert record == provenance.read(tmp_path / name)
        assert record["sources"][0]["path"] == str(transcripts.resolve())
        assert record["view"]["skipped_lines"] == [2] and record["view"]["transcripts"] == 4


def test_the_export_dialog_passes_its_dpi_and_caption(panel, tmp_path, monkeypatch):
    from PySide6.QtGui import QImage

    from engine import provenance
    from panels.dialogue import view
    from studio.widgets.figure_export import ExportChoice

    panel.open_file(scored_file(tmp_path))
    asked = []
    monkeypatch.setattr(view, "ask_export", lambda parent, title, name, caption: asked.append(
        caption) or ExportChoice(tmp_path / "chosen.png", 288, False))
    panel.choose_figure_path()
    assert asked == [panel.info_line()] and "transcript d" in asked[0]
    assert provenance.read(tmp_path / "chosen.png")["view"]["dpi"] == 288
    assert QImage(str(tmp_path / "chosen.png")).width() == 3 * panel.belief_plot.width()


def test_a_transcript_a_run_wrote_names_the_run_and_the_selected_turns(panel, tmp_path):
    from PySide6.QtCore import QItemSelectionModel

    from engine import provenance

    run = tmp_path / "job-7"
    run.mkdir()
    (run / "params.json").write_text(json.dumps(
        {"method": "scicl.llm_dialogue", "params": {"turns": 8}, "seed": 3}))
    path = scored_file(run)
    panel.open_file(path)
    selection = panel.turns_table.selectionModel()
    for row in (2, 4):
        selection.select(panel.turns_table.model().index(row, 2),
                         QItemSelectionModel.SelectionFlag.Select)
    record = provenance.read(panel.export_figure(tmp_path / "beliefs.svg"))
    assert record["runs"] == [{"run_id": "job-7", "method": "scicl.llm_dialogue",
                               "params": {"turns": 8}, "seed": 3}]
    assert record["view"]["selected_turns"] == [2, 4]

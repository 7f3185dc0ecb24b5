"""The dialogue panel's commands (issue 37): run without a window on the model and a real undo
history, refused with the reason and no change for a bad argument and for an element that
does not exist, logged as the Python line a script would write and replayed on another file
with the same transcript ids, undone through the history; the panel's widgets run them;
``view_state`` / ``restore_view_state`` round-trip as data and as a picture (issue 39).

The file: two scored transcripts, "plan" (3 turns) and "risks" (2 turns)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from engine.methods import scicl
from panels.dialogue.commands import COMMANDS, SCOPE, DialogueState, register
from panels.dialogue.model import DialogueModel
from panels.dialogue.view import COL_LABEL, DialoguePanel
from studio.commands import CommandRefused, CommandRegistry, Invocation
from tests.panels.windowless import bind_windowless, list_methods
from tests.studio.test_sessions import _difference, _picture

MISSING = "/dev/null/studio-test"  # under a device: no file or folder can be made there
LINES = [
    {"transcript": "plan", "role": "user", "content": "is my plan good?", "belief": 0.2},
    {"transcript": "plan", "role": "assistant", "content": "yes, a great plan", "belief": 0.7},
    {"transcript": "plan", "role": "user", "content": "thanks", "belief": 0.9},
    {"transcript": "risks", "role": "user", "content": "is my plan good?", "belief": 0.3},
    {"transcript": "risks", "role": "assistant", "content": "it has risks", "belief": 0.1},
]


def write_lines(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def chats(tmp_path: Path) -> Path:
    return write_lines(tmp_path / "chats.jsonl", LINES)


@pytest.fixture
def scicl_host(history_host):
    """The history host listing the scicl methods, as the engine does."""
    return list_methods(history_host, scicl.SPECS)


@pytest.fixture
def windowless(scicl_host, chats) -> tuple[CommandRegistry, DialogueState, list]:
    """The dialogue commands over the model and the host's real history: no panel."""
    state = DialogueState(DialogueModel(), scicl_host)
    registry, state, seen = bind_windowless(register, SCOPE, state)
    registry.run("dialogue.open", path=str(chats))
    return registry, state, seen


@pytest.fixture
def shown(make_widget, scicl_host, chats, qtbot) -> DialoguePanel:
    panel = make_widget(DialoguePanel, scicl_host)
    assert panel.open_file(chats), scicl_host.errors
    panel.resize(1200, 700)
    panel.show()
    qtbot.waitExposed(panel)
    return panel


def test_an_edit_is_one_undo_step_and_one_python_line(windowless, scicl_host) -> None:
    registry, state, seen = windowless
    registry.run("dialogue.label_turn", transcript="risks", turn=1, label="honest")
    turn = state.model.find("risks").turns[1]
    assert turn.meta["label"] == "honest" and scicl_host.history.stack.count() == 1
    assert seen[-1].python() == \
        'studio.command("dialogue.label_turn", transcript="risks", turn=1, label="honest")'
    assert scicl_host.history.stack.undoText() == "Relabel turn 1 of risks"
    scicl_host.undo()
    assert "label" not in turn.meta
    scicl_host.redo()
    assert turn.meta["label"] == "honest"
    registry.run("dialogue.rewrite_turn", transcript="plan", turn=2, text="not sure")
    registry.run("dialogue.annotate_turn", transcript="plan", turn=2, note="doubt")
    assert scicl_host.history.stack.count() == 3
    scicl_host.undo()
    scicl_host.undo()
    assert state.model.find("plan").turns[2].content == "thanks"


def test_search_selection_and_runs_without_a_window(windowless, scicl_host) -> None:
    registry, state, _seen = windowless
    registry.run("dialogue.search", query="RISKS")
    assert state.model.transcript.id == "risks" and state.model.turn == 1
    registry.run("dialogue.search", query="zzz")
    with pytest.raises(CommandRefused, match="no search hits to go to"):
        registry.run("dialogue.next_hit")
    registry.run("dialogue.select_turn", transcript="plan", turn=2)
    assert (state.model.transcript.id, state.model.turn) == ("plan", 2)
    said = registry.run("dialogue.continue_from_turn", params={"turns": 4})
    assert said == "Continuing plan after turn 2…"
    (submitted,) = scicl_host.submitted
    assert submitted["method"] == "scicl.llm_dialogue"
    assert submitted["params"] == {"turns": 4, "prefix_turns": 3}
    prefix = Path(submitted["inputs"]["prefix"])
    assert prefix.parent == Path(scicl_host.workspace_path()) / "dialogue"
    assert [json.loads(line)["content"] for line in prefix.read_text().splitlines()][-1] == \
        "thanks"
    registry.run("dialogue.run_method", method="scicl.simulate", params={"turns": 20})
    assert scicl_host.submitted[-1]["method"] == "scicl.simulate"
    scicl_host.set_methods([])
    with pytest.raises(CommandRefused, match="the engine lists no scicl.simulate"):
        registry.run("dialogue.run_method", method="scicl.simulate")


def test_commands_that_draw_need_the_panel(windowless) -> None:
    registry, _state, _seen = windowless
    for command_id, args in (("dialogue.export_figure", {"path": "x.png"}),
                             ("dialogue.show_tab", {"tab": "run"}),
                             ("dialogue.choose_method", {"method": "scicl.simulate"}),
                             ("dialogue.show_figure", {"figure": "f"})):
        with pytest.raises(CommandRefused, match="without the panel's window"):
            registry.run(command_id, **args)


def test_nothing_open_is_refused(scicl_host) -> None:
    registry = register(CommandRegistry())
    registry.bind(SCOPE, DialogueState(DialogueModel(), scicl_host))
    for command_id, args in (("dialogue.search", {"query": "x"}),
                             ("dialogue.export_metrics", {"path": "x.csv"}),
                             ("dialogue.continue_from_turn", {})):
        with pytest.raises(CommandRefused, match="no transcripts are open"):
            registry.run(command_id, **args)


def test_logged_commands_mean_the_same_on_another_file(windowless, scicl_host, tmp_path
                                                       ) -> None:
    """Transcripts are named by id: replayed on a file listing them in another order, the
    same turns are labelled."""
    registry, state, seen = windowless
    registry.run("dialogue.select_transcript", transcript="risks")
    registry.run("dialogue.label_turn", transcript="risks", turn=0, label="asks")
    registry.run("dialogue.annotate_turn", transcript="plan", turn=1, note="flatters")
    replay = [(i.command.id, i.args) for i in seen[1:]]
    other = write_lines(tmp_path / "reordered.jsonl", LINES[3:] + LINES[:3])
    again = register(CommandRegistry())
    moved = DialogueState(DialogueModel(), scicl_host)
    again.bind(SCOPE, moved)
    again.run("dialogue.open", path=str(other))
    for command_id, args in replay:
        again.run(command_id, **args)
    assert [t.id for t in moved.model.transcripts] == ["risks", "plan"]
    assert moved.model.find("risks").turns[0].meta["label"] == "asks"
    assert moved.model.find("plan").turns[1].meta["note"] == "flatters"
    assert moved.model.transcript.id == "risks"


# Each dialogue command with a bad argument and with an element that does not exist (None: it
# names no element): (bad arguments, reason), (arguments naming nothing, reason).
CASES: dict[str, tuple[tuple[dict, str], tuple[dict, str] | None]] = {
    "dialogue.open": (({"path": 5}, "path: Input should be a valid string"),
                      ({"path": MISSING + ".jsonl"}, "studio-test.jsonl: cannot read it")),
    "dialogue.select_transcript": (({"transcript": 3}, "transcript: Input should be a valid "
                                                       "string"),
                                   ({"transcript": "nope"}, "no transcript 'nope' in "
                                                            "chats.jsonl")),
    "dialogue.select_turn": (({"turn": -1}, "turn: Input should be greater than or equal "
                                            "to 0"),
                             ({"transcript": "plan", "turn": 9}, "transcript 'plan' has no "
                                                                 "turn 9 (turns 0 to 2)")),
    "dialogue.search": (({"query": None}, "query: Input should be a valid string"), None),
    "dialogue.next_hit": (({"x": 1}, "takes no arguments, got x"),
                          ({}, "no search hits to go to")),
    "dialogue.label_turn": (({"transcript": "plan", "turn": "one", "label": "x"},
                             "turn: Input should be a valid integer"),
                            ({"transcript": "gone", "turn": 0, "label": "x"},
                             "no transcript 'gone' in chats.jsonl")),
    "dialogue.annotate_turn": (({"transcript": "plan", "turn": 0}, "note is required"),
                               ({"transcript": "plan", "turn": 7, "note": "x"},
                                "transcript 'plan' has no turn 7")),
    "dialogue.rewrite_turn": (({"transcript": "plan", "turn": 0, "text": 1},
                               "text: Input should be a valid string"),
                              ({"transcript": "risks", "turn": 5, "text": "x"},
                               "transcript 'risks' has no turn 5")),
    "dialogue.export_transcripts": (({"path": 1}, "path: Input should be a valid string"),
                                    ({"path": MISSING + "/x.jsonl"}, "/dev/null/studio-test")),
    "dialogue.export_metrics": (({"path": []}, "path: Input should be a valid string"),
                                ({"path": MISSING + "/x.csv"}, "/dev/null/studio-test")),
    "dialogue.export_figure": (({"path": "x.png", "dpi": 5}, "dpi: Input should be greater"),
                               ({"path": MISSING + "/x.png"}, "/dev/null/studio-test")),
    "dialogue.run_method": (({"method": "scicl.nope"}, "method: Input should be "
                                                       "'scicl.simulate'"), None),
    "dialogue.continue_from_turn": (({"turn": -2}, "turn: Input should be greater"),
                                    ({"transcript": "plan", "turn": 8},
                                     "transcript 'plan' has no turn 8")),
    "dialogue.choose_method": (({"method": 4}, "method: Input should be"), None),
    "dialogue.show_tab": (({"tab": "lineage"}, "tab: Input should be 'beliefs', 'run' or "
                                               "'figures'"), None),
    "dialogue.show_figure": (({"figure": 1}, "figure: Input should be a valid string"),
                             ({"figure": "nope"}, "no run figure 'nope' (figures: none yet)")),
}


def test_every_dialogue_command_has_refusal_cases() -> None:
    assert set(CASES) == {command.id for command in COMMANDS}


def looks(panel: DialoguePanel, host) -> tuple:
    """Everything a dialogue command may change, to compare before and after a refusal."""
    model = panel.model
    return ([(t.id, [(u.content, dict(u.meta)) for u in t.turns]) for t in model.transcripts],
            model.file.path, model.current, model.turn, model.query, list(model.hits),
            model.hit_index, panel.tabs.currentIndex(), panel.method_box.currentText(),
            panel.figure_list.count(), panel.search_edit.text(), len(host.submitted),
            host.history.stack.count(), sorted(p.name for p in Path.cwd().iterdir()))


@pytest.mark.parametrize("command_id", sorted(CASES))
def test_refusals_change_nothing(shown, scicl_host, command_id, monkeypatch, tmp_path
                                 ) -> None:
    monkeypatch.chdir(tmp_path)  # a relative export path would land in the test's folder
    registry = shown.commands
    registry.run("dialogue.select_turn", transcript="plan", turn=1)
    before = looks(shown, scicl_host)
    bad, missing = CASES[command_id]
    for args, reason in [bad] + ([missing] if missing else []):
        with pytest.raises(CommandRefused) as caught:
            registry.run(command_id, **args)
        assert str(caught.value).startswith(f"{command_id}: ") and reason in str(caught.value)
        assert looks(shown, scicl_host) == before, args
    # from a button or key: said in the status line and an error box, never raised
    shown.commands.trigger(command_id, **bad[0])
    assert scicl_host.errors[-1][1].startswith(command_id)
    assert "refused" in shown.status.text()


def test_widgets_run_commands_that_are_logged_and_undo(shown, scicl_host) -> None:
    seen: list[Invocation] = []
    shown.commands.listen(seen.append)
    shown.transcript_list.setCurrentRow(1)
    shown.turns_table.setCurrentCell(1, 2)
    shown.turns_table.item(1, COL_LABEL).setText("honest")
    shown.search_edit.setText("plan")
    shown.search_edit.returnPressed.emit()
    shown.tabs.setCurrentIndex(1)
    shown.method_box.setCurrentText("scicl.gain_map")
    assert [i.python() for i in seen] == [
        'studio.command("dialogue.select_transcript", transcript="risks")',
        'studio.command("dialogue.select_turn", transcript="risks", turn=1)',
        'studio.command("dialogue.label_turn", transcript="risks", turn=1, label="honest")',
        'studio.command("dialogue.search", query="plan")',
        'studio.command("dialogue.next_hit")',
        'studio.command("dialogue.show_tab", tab="run")',
        'studio.command("dialogue.choose_method", method="scicl.gain_map")']
    assert all(i.source == "user" and not i.refused for i in seen)
    # "plan" is in risks' turn 0 (searched first: it is shown), then plan's turns 0 and 1:
    # the search went to the first, Enter to the second
    assert shown.model.hits == [(1, 0), (0, 0), (0, 1)] and shown.model.hit_index == 1
    assert (shown.model.transcript.id, shown.model.turn) == ("plan", 0)
    assert shown.turns_table.currentRow() == 0 and shown.transcript_list.currentRow() == 0
    scicl_host.undo()  # Ctrl+Z: the label, one step
    assert "label" not in shown.model.find("risks").turns[1].meta
    shown.transcript_list.setCurrentRow(1)
    assert shown.turns_table.item(1, COL_LABEL).text() == ""
    assert not scicl_host.history.stack.canUndo() and shown.form is not None


def _settled(panel: DialoguePanel) -> None:
    """The status line (what the last command said, which differs between a panel used and
    one restored) emptied; plots drawn and laid out."""
    panel.status.setText("")
    panel.run_status.setText("")
    panel.belief_plot.flush()
    for _ in range(5):
        QApplication.processEvents()


def test_view_state_round_trips_as_data_and_picture(shown, scicl_host, make_widget, qtbot,
                                                    chats, tmp_path) -> None:
    shown.commands.run("dialogue.label_turn", transcript="plan", turn=1, label="flatters")
    shown.commands.run("dialogue.search", query="plan")
    shown.commands.run("dialogue.select_transcript", transcript="plan")
    shown.commands.run("dialogue.select_turn", transcript="plan", turn=2)
    shown.commands.run("dialogue.choose_method", method="scicl.gain_map")
    shown.form.set_values({"seeds": 3})
    job = "20260101-000000-00abcd"
    artifacts = Path(scicl_host.run_dir(job)) / "artifacts"
    artifacts.mkdir(parents=True)
    (artifacts / "map.json").write_text(json.dumps({"kind": "plot", "title": "gain map",
                                                    "series": [{"name": "collapse", "x": [0, 1],
                                                                "y": [1, 0]}]}))
    shown._add_figure(job, "scicl.gain_map", {"name": "map", "kind": "plot",
                                              "path": "artifacts/map.json"})
    shown.commands.run("dialogue.show_tab", tab="beliefs")
    shown._belief_box().setRange(xRange=[0.5, 2.5], yRange=[0.1, 1.0], padding=0)
    _settled(shown)
    saved = json.loads(json.dumps(shown.view_state()))   # what a session file holds
    assert saved["path"] == str(chats.resolve()) and saved["transcript"] == "plan"
    assert saved["turn"] == 2 and saved["search"] == "plan" and saved["tab"] == "beliefs"
    assert saved["method"] == "scicl.gain_map" and saved["form"]["seeds"] == 3
    assert saved["figure"] == f"scicl.gain_map / map  ({job})"
    before = _picture(shown)

    other = make_widget(DialoguePanel, scicl_host)
    other.resize(shown.size())
    other.show()
    qtbot.waitExposed(other)
    assert other.restore_view_state(saved) == []
    assert other.status.text().startswith("chats.jsonl · transcript plan (3 turns) · turn 2")
    _settled(other)
    again = json.loads(json.dumps(other.view_state()))
    for key in set(saved) - {"belief_zoom"}:
        assert again[key] == saved[key], key
    for axis in ("x", "y"):
        assert again["belief_zoom"][axis] == pytest.approx(saved["belief_zoom"][axis],
                                                           abs=1e-6)
    assert other.model.find("plan").turns[1].meta["label"] == "flatters"  # from the journal
    assert _difference(before, _picture(other)) < 0.01  # measured: 0 (the same pixels)

    broken = {**saved, "transcript": "gone", "turn": 1,
              "figures": [{**saved["figures"][0], "run": "no-such-run"}]}
    problems = other.restore_view_state(broken)
    assert any("no transcript 'gone' in chats.jsonl" in p for p in problems)
    assert any("no-such-run" in p and "is gone" in p for p in problems)
    missing = other.restore_view_state({"path": str(tmp_path / "moved.jsonl")})
    assert len(missing) == 1 and "moved.jsonl: cannot read it" in missing[0]


def test_a_form_restored_before_the_engine_lists_its_method_shows_once_it_does(
        make_widget, history_host) -> None:
    """A session reopened while the engine starts: the method's form and its values are
    shown when the engine lists the method, not lost."""
    history_host.set_methods([])
    panel = make_widget(DialoguePanel, history_host)
    saved = {"method": "scicl.gain_map", "form": {"seeds": 3}, "tab": "run"}
    assert panel.restore_view_state(saved) == [] and panel.form is None
    history_host.set_methods([spec.describe() for spec in scicl.SPECS])
    history_host.emit("engine", "methods")  # the engine's list arrived
    assert panel.method_box.currentText() == "scicl.gain_map"
    assert panel.form.values()["seeds"] == 3 and panel.view_state()["tab"] == "run"
    assert panel.restore_view_state({"method": "scicl.nope"}) == [
        "dialogue: no method 'scicl.nope' to show the form of"]

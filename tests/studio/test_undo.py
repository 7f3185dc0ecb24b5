"""Undo, redo and autosave of panels' edit commands, including after a SIGKILL."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.workspace import Workspace
from studio.undo import EditHistory


class SetKey:
    """A tiny edit command on a dict model (what a panel's commands look like)."""

    def __init__(self, key: str, value, old=None, had: bool | None = None) -> None:
        self.key, self.value, self.old, self.had = key, value, old, had
        self.label = f"set {key}"

    def apply(self, model: dict) -> None:
        if self.had is None:  # first application remembers what it replaces
            self.had = self.key in model
            self.old = model.get(self.key)
        model[self.key] = self.value

    def revert(self, model: dict) -> None:
        if self.had:
            model[self.key] = self.old
        else:
            model.pop(self.key, None)

    def to_json(self) -> dict:
        return {"key": self.key, "value": self.value, "old": self.old, "had": self.had}

    @classmethod
    def from_json(cls, data: dict) -> SetKey:
        return cls(data["key"], data["value"], data.get("old"), data.get("had"))


def replayed(workspace: Workspace, document: str) -> dict:
    """The model a fresh session rebuilds from the autosave."""
    model: dict = {}
    for data in workspace.load_edits(document):
        SetKey.from_json(data).apply(model)
    return model


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_edit_undo_redo_sequences_restore_the_saved_state(qapp, workspace, seed):
    rng = random.Random(seed)
    history = EditHistory(workspace)
    models = {"doc-a": {}, "doc-b": {}}
    for _ in range(120):
        move = rng.choice(["edit", "edit", "undo", "redo"])
        if move == "edit":
            document = rng.choice(list(models))
            history.push(document, SetKey(rng.choice("xyz"), rng.randint(0, 9)),
                         models[document])
        elif move == "undo":
            history.stack.undo()
        else:
            history.stack.redo()
        for name, model in models.items():
            assert replayed(workspace, name) == model, (move, name)
    while history.stack.canUndo():
        history.stack.undo()
    assert models == {"doc-a": {}, "doc-b": {}}
    assert replayed(workspace, "doc-a") == {} and replayed(workspace, "doc-b") == {}


def test_autosave_survives_a_reload_and_stays_undoable(qapp, workspace):
    history = EditHistory(workspace)
    model: dict = {}
    for key, value in [("a", 1), ("b", 2), ("a", 3)]:
        history.push("doc", SetKey(key, value), model)
    history.stack.undo()
    assert model == {"a": 1, "b": 2}

    fresh: dict = {}
    reopened = EditHistory(Workspace(workspace.root))
    assert reopened.restore("doc", fresh, SetKey.from_json) == 2
    assert fresh == model
    reopened.stack.undo()
    assert fresh == {"a": 1}
    assert replayed(workspace, "doc") == {"a": 1}
    reopened.stack.redo()
    assert replayed(workspace, "doc") == {"a": 1, "b": 2}


def test_grouped_edits_are_one_undo_step(qapp, workspace):
    history = EditHistory(workspace)
    model: dict = {}
    with history.group("two keys"):
        history.push("doc", SetKey("a", 1), model)
        history.push("doc", SetKey("b", 2), model)
    assert history.stack.count() == 1
    assert replayed(workspace, "doc") == {"a": 1, "b": 2}
    history.stack.undo()
    assert model == {} and replayed(workspace, "doc") == {}


def test_edits_survive_a_sigkill_of_the_gui(tmp_path, workspace):
    """A GUI process pushes edits and is killed with SIGKILL: reopening restores them."""
    script = textwrap.dedent(f"""
        import os, sys, time
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from PySide6.QtWidgets import QApplication
        from engine.workspace import Workspace
        from studio.undo import EditHistory
        from tests.studio.test_undo import SetKey
        app = QApplication([])
        history = EditHistory(Workspace({str(workspace.root)!r}))
        model = {{}}
        for i in range(30):
            history.push("volume", SetKey(f"k{{i % 7}}", i), model)
            if i % 5 == 4:
                history.stack.undo()
        import json
        print(json.dumps(model), flush=True)
        time.sleep(60)
    """)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                               text=True)
    try:
        expected = json.loads(process.stdout.readline())
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL
    restored: dict = {}
    EditHistory(Workspace(workspace.root)).restore("volume", restored, SetKey.from_json)
    assert restored == expected and expected


def test_host_push_edit_goes_through_the_window_history(main_window):
    model: dict = {}
    main_window.host.push_edit("doc", SetKey("a", 1), model)
    assert model == {"a": 1}
    assert main_window.undo_action.isEnabled()
    main_window.undo_action.trigger()
    assert model == {}
    main_window.redo_action.trigger()
    assert model == {"a": 1}
    fresh: dict = {}
    assert main_window.host.restore_edits("doc", fresh, SetKey.from_json) == 1
    assert fresh == {"a": 1}


# -- forget: a panel left a document -----------------------------------------------------------

class Logged(SetKey):
    """A SetKey that writes every apply and revert into ``calls`` (forget must make none)."""

    def __init__(self, calls: list, key: str, value) -> None:
        super().__init__(key, value)
        self.calls = calls

    def apply(self, model: dict) -> None:
        self.calls.append(("apply", self.label))
        super().apply(model)

    def revert(self, model: dict) -> None:
        self.calls.append(("revert", self.label))
        super().revert(model)


def entries(history: EditHistory) -> list[tuple[str, list[str]]]:
    """The stack as (entry text, its steps' labels); a lone step lists itself."""
    found = []
    for i in range(history.stack.count()):
        command = history.stack.command(i)
        children = [command.child(j).text() for j in range(command.childCount())]
        found.append((command.text(), children or [command.text()]))
    return found


def saved(workspace: Workspace, documents) -> dict[str, list[dict]]:
    return {document: workspace.load_edits(document) for document in documents}


def test_forget_takes_one_documents_steps_off_without_touching_any_model(qapp, workspace):
    calls: list = []
    history = EditHistory(workspace)
    models: dict[str, dict] = {"a": {}, "b": {}}
    for document, key in [("a", "a1"), ("b", "b1"), ("a", "a2"), ("b", "b2"), ("a", "a3")]:
        history.push(document, Logged(calls, key, 1), models[document])
    before, files = {k: dict(v) for k, v in models.items()}, saved(workspace, "ab")
    calls.clear()
    assert history.forget("a") == 3
    assert calls == [] and models == before and saved(workspace, "ab") == files
    assert entries(history) == [("set b1", ["set b1"]), ("set b2", ["set b2"])]
    assert history.stack.index() == 2 and history.stack.undoText() == "set b2"
    history.stack.undo()  # the first press already changes what is shown
    assert calls == [("revert", "set b2")] and models["b"] == {"b1": 1}
    assert replayed(workspace, "b") == {"b1": 1}
    assert replayed(workspace, "a") == before["a"]  # the forgotten autosave stays whole
    assert history.forget("a") == 0 and history.stack.count() == 2


def test_forget_keeps_the_redoable_steps_redoable(qapp, workspace):
    calls: list = []
    history = EditHistory(workspace)
    models: dict[str, dict] = {"a": {}, "b": {}}
    for document, key in [("a", "a1"), ("b", "b1"), ("a", "a2"), ("b", "b2"), ("b", "b3"),
                          ("a", "a3")]:
        history.push(document, Logged(calls, key, 1), models[document])
    for _ in range(3):  # a3, b3 and b2 undone; b1 and everything before it applied
        history.stack.undo()
    assert models == {"a": {"a1": 1, "a2": 1}, "b": {"b1": 1}}
    files = saved(workspace, "ab")
    calls.clear()
    history.forget("a")
    assert calls == [] and models == {"a": {"a1": 1, "a2": 1}, "b": {"b1": 1}}
    assert [text for text, _ in entries(history)] == ["set b1", "set b2", "set b3"]
    assert history.stack.index() == 1
    assert (history.stack.undoText(), history.stack.redoText()) == ("set b1", "set b2")
    assert saved(workspace, "ab") == files
    history.stack.redo()  # a rebuilt redo-able step applies when redone
    history.stack.redo()
    assert calls == [("apply", "set b2"), ("apply", "set b3")] and not history.stack.canRedo()
    assert models["b"] == {"b1": 1, "b2": 1, "b3": 1} == replayed(workspace, "b")
    while history.stack.canUndo():
        history.stack.undo()
    assert models == {"a": {"a1": 1, "a2": 1}, "b": {}} and replayed(workspace, "b") == {}
    assert workspace.load_edits("a") == files["a"] and replayed(workspace, "a") == models["a"]


def test_forget_keeps_other_documents_groups_as_one_step(qapp, workspace):
    calls: list = []
    history = EditHistory(workspace)
    models: dict[str, dict] = {"a": {}, "b": {}}
    history.push("b", Logged(calls, "b1", 1), models["b"])
    with history.group("both"):
        history.push("a", Logged(calls, "a1", 1), models["a"])
        history.push("b", Logged(calls, "b2", 1), models["b"])
        with history.group("inner"):
            history.push("b", Logged(calls, "b3", 1), models["b"])
            history.push("a", Logged(calls, "a2", 1), models["a"])
    with history.group("only a"):
        history.push("a", Logged(calls, "a3", 1), models["a"])
    history.push("b", Logged(calls, "b4", 1), models["b"])
    history.stack.undo()
    history.stack.undo()  # "only a" redo-able too: it goes, the index stays after "both"
    calls.clear()
    history.forget("a")
    assert calls == []
    assert entries(history) == [("set b1", ["set b1"]), ("both", ["set b2", "set b3"]),
                                ("set b4", ["set b4"])]
    assert history.stack.index() == 2 and history.stack.undoText() == "both"
    history.stack.undo()  # one press reverts the group's steps of b, and only them
    assert calls == [("revert", "set b3"), ("revert", "set b2")]
    assert models == {"a": {"a1": 1, "a2": 1}, "b": {"b1": 1}} and history.stack.index() == 1
    history.stack.redo()
    assert models["b"] == {"b1": 1, "b2": 1, "b3": 1} == replayed(workspace, "b")


def test_forget_saves_nothing_and_a_reopened_document_replays_its_edits(qapp, workspace,
                                                                        monkeypatch):
    history = EditHistory(workspace)
    models: dict[str, dict] = {"a": {}, "b": {}}
    for document, key in [("a", "x"), ("b", "x"), ("a", "y"), ("a", "z")]:
        history.push(document, SetKey(key, 1), models[document])
    history.stack.undo()  # a's z: undone, so not in a's autosave
    writes: list[str] = []
    save_edits = workspace.save_edits
    monkeypatch.setattr(workspace, "save_edits",
                        lambda document, commands: (writes.append(document),
                                                    save_edits(document, commands)))
    history.forget("a")
    assert writes == []  # the rebuild moved the index: no autosave may follow it
    history.stack.undo()  # b's edit: only b is saved
    assert writes == ["b"] and replayed(workspace, "b") == {}
    reopened: dict = {}
    assert history.restore("a", reopened, SetKey.from_json) == 2
    assert reopened == {"x": 1, "y": 1} == models["a"]
    history.stack.undo()  # the replayed steps undo as before, and are saved again
    assert reopened == {"x": 1} == replayed(workspace, "a")


def test_forget_maps_the_clean_state_and_refuses_an_open_group(qapp):
    history = EditHistory()
    models: dict[str, dict] = {"a": {}, "b": {}}
    for document, key in [("a", "a1"), ("b", "b1"), ("a", "a2")]:
        history.push(document, SetKey(key, 1), models[document])
    history.stack.setClean()  # saved after a2
    history.push("b", SetKey("b2", 1), models["b"])
    history.forget("a")
    assert history.stack.cleanIndex() == 1 and not history.stack.isClean()
    history.stack.undo()
    assert history.stack.isClean()  # b as it was when saved
    history.stack.resetClean()
    history.push("a", SetKey("a3", 1), models["a"])
    history.forget("a")
    assert history.stack.cleanIndex() == -1
    with history.group("open"), pytest.raises(RuntimeError, match="edit group"):
        history.forget("b")


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_forget_after_random_histories(qapp, workspace, seed):
    """Whatever the history, forgetting one document leaves the others' entries, order,
    applied steps and autosave as they were, and calls no command."""
    rng = random.Random(seed)
    calls: list = []
    history = EditHistory(workspace)
    models: dict[str, dict] = {"a": {}, "b": {}, "c": {}}

    def edit() -> None:
        document = rng.choice(list(models))
        history.push(document, Logged(calls, f"{document}{rng.randint(0, 3)}",
                                      rng.randint(0, 9)), models[document])

    for n in range(80):
        move = rng.choice(["edit", "edit", "group", "undo", "redo"])
        if move == "edit":
            edit()
        elif move == "group":
            with history.group(f"group {n}"):
                for _ in range(rng.randint(1, 3)):
                    edit()
        else:
            getattr(history.stack, move)()
    gone = rng.choice(list(models))
    before, index = entries(history), history.stack.index()
    kept = [(text, [label for label in labels if not label.startswith(f"set {gone}")])
            for text, labels in before]
    expected = [entry for entry in kept if entry[1]]
    shown, files = {k: dict(v) for k, v in models.items()}, saved(workspace, models)
    calls.clear()
    history.forget(gone)
    assert calls == [] and models == shown and saved(workspace, models) == files
    assert entries(history) == expected
    assert history.stack.index() == sum(1 for entry in kept[:index] if entry[1])
    others = [document for document in models if document != gone]
    while history.stack.canRedo():
        history.stack.redo()
        assert all(replayed(workspace, d) == models[d] for d in others)
    while history.stack.canUndo():
        history.stack.undo()
        assert all(replayed(workspace, d) == models[d] for d in others)
    assert all(models[d] == {} for d in others)
    assert models[gone] == shown[gone] and saved(workspace, [gone]) == {gone: files[gone]}


def test_host_forget_edits_clears_the_undo_action(main_window):
    models: dict[str, dict] = {"a": {}, "b": {}}
    main_window.host.push_edit("a", SetKey("x", 1), models["a"])
    main_window.host.push_edit("b", SetKey("y", 1), models["b"])
    assert "set y" in main_window.undo_action.text()
    main_window.host.forget_edits("b")
    assert "set x" in main_window.undo_action.text() and main_window.history.stack.count() == 1
    main_window.host.forget_edits("a")
    assert not main_window.undo_action.isEnabled() and models == {"a": {"x": 1}, "b": {"y": 1}}

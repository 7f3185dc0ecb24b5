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

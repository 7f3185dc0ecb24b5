"""Autosaved edits follow the document's content, not the path as typed (issue: edits replayed
onto the wrong file), and saved edits that no longer match are never replayed silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.workspace import Workspace
from panels.molecules.model import MoleculeSetModel, decode
from studio.undo import DISCARD, KEEP_ASIDE, REPLAY, EditHistory, SavedEditsConflict

DRUGS = "CCO ethanol\nc1ccccc1 benzene\nCC(=O)O acetic\n"
OTHER = "CCN ethylamine\nCCCl chloroethane\nC1CC1 cyclopropane\n"


def opened(history: EditHistory, path: str | Path) -> MoleculeSetModel:
    """What the molecules panel does on open: read the file, replay its saved edits."""
    model = MoleculeSetModel()
    model.load(path)
    history.restore(model.document, model, decode)
    return model


def closed(history: EditHistory, model: MoleculeSetModel) -> None:
    history.forget(model.document)


def triage(history: EditHistory, model: MoleculeSetModel) -> None:
    """Accept molecule 0, flag 1, edit 2: three saved edits."""
    history.push(model.document, model.flagging(0, "accepted"), model)
    history.push(model.document, model.flagging(1, "rejected"), model)
    history.push(model.document, model.edit(2, "CC(=O)OC"), model)


def state(model: MoleculeSetModel) -> list[tuple[str, str]]:
    return [(entry.smiles, entry.flag) for entry in model.entries]


@pytest.fixture
def two_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    first, second = tmp_path / "project-a", tmp_path / "project-b"
    for folder, text in ((first, DRUGS), (second, OTHER)):
        (folder / "data").mkdir(parents=True)
        (folder / "data" / "drugs.smi").write_text(text)
    return first, second


def test_edits_never_replay_onto_another_file_at_the_same_typed_path(
        qapp, workspace, two_folders, monkeypatch) -> None:
    """Finding 1: the same relative path in another folder is another document; the first
    file opened by its absolute path finds its edits."""
    first, second = two_folders
    history = EditHistory(workspace)
    asked: list[SavedEditsConflict] = []
    history.ask = lambda conflict, answer: asked.append(conflict)
    monkeypatch.chdir(first)
    model = opened(history, "data/drugs.smi")
    triage(history, model)
    edited = state(model)
    closed(history, model)

    monkeypatch.chdir(second)
    other = opened(history, "data/drugs.smi")
    fresh = MoleculeSetModel()
    fresh.load(second / "data" / "drugs.smi")
    assert state(other) == state(fresh) and not asked  # nothing replayed, nothing asked
    closed(history, other)

    again = opened(EditHistory(Workspace(workspace.root)), first / "data" / "drugs.smi")
    assert state(again) == edited


def test_a_moved_or_copied_file_finds_its_edits_by_content(qapp, workspace, tmp_path) -> None:
    source = tmp_path / "drugs.smi"
    source.write_text(DRUGS)
    history = EditHistory(workspace)
    model = opened(history, source)
    triage(history, model)
    edited = state(model)
    closed(history, model)
    moved = tmp_path / "elsewhere" / "renamed.smi"
    moved.parent.mkdir()
    source.rename(moved)
    assert state(opened(EditHistory(workspace), moved)) == edited
    link = tmp_path / "link.smi"
    link.symlink_to(moved)
    assert state(opened(EditHistory(workspace), link)) == edited


@pytest.mark.parametrize("choice", [REPLAY, DISCARD, KEEP_ASIDE])
def test_a_file_changed_on_disk_asks_before_its_edits_come_back(
        qapp, workspace, tmp_path, choice) -> None:
    path = tmp_path / "drugs.smi"
    path.write_text(DRUGS)
    history = EditHistory(workspace)
    model = opened(history, path)
    triage(history, model)
    closed(history, model)
    path.write_text(DRUGS + "CCCC butane\n")  # changed on disk since the edits were made

    asked: list[SavedEditsConflict] = []
    history = EditHistory(workspace)
    history.ask = lambda conflict, answer: (asked.append(conflict), answer(choice))
    reopened = opened(history, path)
    assert len(asked) == 1 and asked[0].count == 3 and asked[0].path == path.resolve()
    assert "changed on disk" in asked[0].message()
    flags = [entry.flag for entry in reopened.entries]
    if choice == REPLAY:
        assert flags[:2] == ["accepted", "rejected"] and reopened.entries[2].smiles == "COC(C)=O"
        assert history.stack.count() == 1  # one undoable step: the replay
        history.stack.undo()
        assert [entry.flag for entry in reopened.entries] == [""] * 4
        history.stack.redo()
    else:
        assert flags == [""] * 4 and history.stack.count() == 0
    closed(history, reopened)

    later: list[SavedEditsConflict] = []
    history = EditHistory(workspace)
    history.ask = lambda conflict, answer: later.append(conflict)
    third = opened(history, path)
    assert not later  # settled: never asked twice
    assert [entry.flag for entry in third.entries][:2] == (
        ["accepted", "rejected"] if choice == REPLAY else ["", ""])
    kept = [r for r in workspace.documents("molecules") if r["aside"]]
    assert len(kept) == (choice == KEEP_ASIDE)  # kept aside: still in the workspace


def test_without_a_chooser_changed_files_keep_their_edits_aside(qapp, workspace,
                                                                 tmp_path) -> None:
    path = tmp_path / "drugs.smi"
    path.write_text(DRUGS)
    history = EditHistory(workspace)
    triage(history, opened(history, path))
    path.write_text(OTHER)
    model = opened(EditHistory(workspace), path)
    assert [entry.flag for entry in model.entries] == [""] * 3
    assert len(workspace.load_edits(workspace.documents("molecules")[0]["identity"])) == 3


def test_edits_saved_by_path_by_an_older_studio_are_offered(qapp, workspace, tmp_path) -> None:
    path = tmp_path / "drugs.smi"
    path.write_text(DRUGS)
    workspace.save_edits(f"molecules:{path}", [{"type": "set_flag", "index": 0, "flag": "accepted",
                                                "previous": ""}])
    history = EditHistory(workspace)
    history.ask = lambda conflict, answer: answer(REPLAY)
    model = opened(history, path)
    assert model.entries[0].flag == "accepted"
    assert workspace.load_edits(f"molecules:{path}") == []


def test_a_document_that_rewrites_its_file_finds_its_edits_after_a_crash(
        qapp, workspace, tmp_path) -> None:
    """A crowd scene saves itself on every edit: its file's content at the last autosave
    identifies it too."""
    from panels.crowd.scene import SceneModel
    from panels.crowd.scene import decode as decode_scene

    path = tmp_path / "scene.json"
    SceneModel().save(path)
    history = EditHistory(workspace)
    history.ask = lambda conflict, answer: pytest.fail("asked about the scene's own edits")
    scene = SceneModel(path)
    history.restore(scene.document, scene, decode_scene)
    history.push(scene.document, scene.propose_add_box("buildings", (2.0, 3.0)), scene)
    history.push(scene.document, scene.propose_add_box("buildings", (8.0, 3.0)), scene)
    after = scene.data

    crashed = EditHistory(Workspace(workspace.root))  # a new session, file as last written
    crashed.ask = history.ask
    again = SceneModel(path)
    assert crashed.restore(again.document, again, decode_scene) == 2
    assert again.data == after
    crashed.stack.undo()
    crashed.stack.undo()
    assert again.data == SceneModel().data


def test_a_document_saved_over_its_file_never_offers_its_edits_again(qapp, workspace,
                                                                      tmp_path) -> None:
    """Save over the opened file, reopen: the edits are in the file, nothing to replay."""
    path = tmp_path / "drugs.smi"
    path.write_text(DRUGS)
    history = EditHistory(workspace)
    model = opened(history, path)
    triage(history, model)
    model.export_smiles(path)  # the panel writes the triaged set over the file it opened
    history.document_saved(model.document)
    assert history.stack.count() == 0
    saved = state(model)

    asked: list[SavedEditsConflict] = []
    again = EditHistory(workspace)
    again.ask = lambda conflict, answer: asked.append(conflict)
    reopened = opened(again, path)
    assert not asked and again.stack.count() == 0
    assert [entry.smiles for entry in reopened.entries] == [smiles for smiles, _ in saved]
    again.push(reopened.document, reopened.flagging(0, "flagged"), reopened)
    again.forget(reopened.document)
    assert opened(EditHistory(workspace), path).entries[0].flag == "flagged"


def test_saved_edits_that_do_not_fit_leave_the_model_as_read_and_are_kept_aside(
        qapp, workspace, tmp_path) -> None:
    path = tmp_path / "drugs.smi"
    path.write_text(DRUGS)
    history = EditHistory(workspace)
    triage(history, opened(history, path))
    calls = []

    def failing_decode(data: dict):
        calls.append(data)
        if len(calls) == 3:
            raise ValueError("molecule 3 is not there")
        return decode(data)

    model = MoleculeSetModel()
    model.load(path)
    with pytest.raises(ValueError, match="3 saved edit\\(s\\) of .*edit 3: molecule 3"):
        EditHistory(workspace).restore(model.document, model, failing_decode)
    assert [entry.flag for entry in model.entries] == ["", "", ""]  # the first two reverted
    assert [r["aside"] for r in workspace.documents("molecules")] == [1]
    assert state(opened(EditHistory(workspace), path)) == [(e.smiles, "") for e in model.entries]


class _Watchdog:
    """A 10 ms QTimer on the main thread: it ticks only while the event loop runs."""

    def __init__(self) -> None:
        from PySide6.QtCore import QTimer

        self.ticks = 0
        self.timer = QTimer()
        self.timer.setInterval(10)
        self.timer.timeout.connect(self._tick)
        self.timer.start()

    def _tick(self) -> None:
        self.ticks += 1


def test_hashing_a_big_new_document_does_not_block_the_main_thread(
        qapp, workspace, tmp_path, monkeypatch) -> None:
    """Review of issue 22: the first hash of a big file (about 1.2 s per GiB) ran on the Qt
    main thread when the document was opened and when its edits were saved. It runs on a
    worker now while the main thread keeps its timers going; a hash the cache knows needs no
    worker."""
    import threading
    import time

    import engine.content

    path = tmp_path / "drugs.smi"
    path.write_text(DRUGS)
    hashed_on: list[bool] = []
    real_hash = engine.content._file_hash

    def slow_hash(file: Path, size: int) -> str:  # a GiB-sized read, in time
        hashed_on.append(threading.current_thread() is threading.main_thread())
        time.sleep(0.4)
        return real_hash(file, size)

    monkeypatch.setattr(engine.content, "_file_hash", slow_hash)
    history = EditHistory(workspace)
    watchdog = _Watchdog()
    model = opened(history, path)
    assert hashed_on == [False] and watchdog.ticks >= 10
    triage(history, model)  # each save asks for the hash again: the cache answers
    assert hashed_on == [False]
    assert len(workspace.load_edits(history._identify(model.document)[0].key)) == 3
    watchdog.timer.stop()


def test_work_waited_for_on_a_worker_hands_back_its_result_or_its_error(qapp) -> None:
    import threading

    from studio.background import wait_responsively

    assert wait_responsively(lambda: threading.current_thread() is threading.main_thread()) \
        is False
    with pytest.raises(ZeroDivisionError):
        wait_responsively(lambda: 1 / 0)


def test_waiting_inside_a_coroutine_loses_no_other_task(qasync_loop, qtbot) -> None:
    """A panel opening a run's output from an engine task hashes the file: a local event loop
    inside that task's step made the asyncio loop refuse to step the other tasks ("Cannot
    enter into task") and their wakeups were lost (a screenshot run hung). Inside a coroutine
    the work runs in place; every task finishes."""
    import asyncio
    import time

    from studio.background import wait_responsively

    finished: list[str] = []

    async def ticker() -> None:
        for _ in range(5):
            await asyncio.sleep(0.01)
        finished.append("ticker")

    async def opener() -> None:
        await asyncio.sleep(0.005)
        wait_responsively(lambda: time.sleep(0.2))
        finished.append("opener")

    tasks = [qasync_loop.create_task(ticker()), qasync_loop.create_task(opener())]
    qtbot.waitUntil(lambda: all(task.done() for task in tasks), timeout=5000)
    assert sorted(finished) == ["opener", "ticker"]
    assert all(task.exception() is None for task in tasks)

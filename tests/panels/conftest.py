"""A PanelHost that lives in the test process: panels are tested without an engine.

``FakeHost`` validates submissions with the methods' real pydantic Params (and the engine's
own error format), hands out job ids, and lets a test play the engine's events
(``host.emit(job, "job_progress", step=..., metrics=...)``).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field

from engine.api import MethodParams, MethodSpec, ReproduceParams, reproduce_spec
from tests.conftest import close_widget, make_widget  # noqa: F401 (fixtures and helper)

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


class ToyTrainParams(MethodParams):
    steps: int = Field(100, ge=1, le=10_000, description="training steps")
    lr: float = Field(0.1, gt=0, le=10, description="step size")
    loss: Literal["logistic", "cross_entropy"] = Field("logistic", description="which loss")
    verbose: bool = Field(False, description="log every step")


class ToyReproduceParams(ReproduceParams):
    pass


def _never(ctx, params, inputs):  # the fake host never runs methods
    raise AssertionError("not run in tests")


TOY_SPECS = [
    MethodSpec(id="toy.train", title="Train the toy", paper="toy", params=ToyTrainParams,
               run=_never, description="a method of a paper that does not exist"),
    MethodSpec(id="toy.embed", title="Embed with the toy", paper="toy", params=MethodParams,
               run=_never, inputs={"data": "array"}),
    reproduce_spec("toy", "Reproduce the toy claim", _never, params=ToyReproduceParams),
]


def described_methods() -> list[dict]:
    from engine.methods import diagnostics

    return [spec.describe() for spec in TOY_SPECS + diagnostics.SPECS]


class FakeHost:
    """``panels.api.PanelHost`` in-process. Records what the panel asked for."""

    def __init__(self, run_root: Path, methods: list[dict] | None = None) -> None:
        from engine.methods import diagnostics

        self.run_root = Path(run_root)
        self._methods = described_methods() if methods is None else methods
        self._params = {spec.id: spec.params for spec in TOY_SPECS + diagnostics.SPECS}
        self._subscribers: list[Callable[[dict], None]] = []
        self._ids = itertools.count(1)
        self._seq: dict[str, int] = {}
        self.submitted: list[dict] = []
        self.cancelled: list[tuple[str, bool]] = []
        self.requests: list[tuple[str, dict]] = []
        self.errors: list[tuple[str, str]] = []
        self.forgotten: list[str] = []  # documents the panel left (forget_edits)
        self.opened_elsewhere: list[str] = []  # files sent to another panel (open_in_panel)
        self.early_events = False   # emit "queued" before answering job_accepted

    def methods(self) -> list[dict]:
        return list(self._methods)

    def set_methods(self, methods: list[dict]) -> None:
        self._methods = methods

    def subscribe(self, callback: Callable[[dict], None]) -> Callable[[], None]:
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def submit_job(self, method, params, inputs=None, seed=0, on_accepted=None, on_error=None,
                   cluster=None):
        from pydantic import ValidationError

        from engine.jobs import format_validation_error

        self.submitted.append({"method": method, "params": params, "inputs": inputs or {},
                               "seed": seed, "cluster": cluster})
        try:
            self._params[method].model_validate(params)
        except ValidationError as exc:
            if on_error:
                on_error(format_validation_error(method, exc))
            return
        job = f"20260101-000000-{next(self._ids):06x}"
        (self.run_root / job / "artifacts").mkdir(parents=True)
        if self.early_events:
            self.emit(job, "job_state", state="queued", reason="")
        if on_accepted:
            on_accepted(job)
        if not self.early_events:
            self.emit(job, "job_state", state="queued", reason="")

    def emit(self, job: str, type_: str, **content) -> dict:
        self._seq[job] = self._seq.get(job, 0) + 1
        envelope = {"v": 1, "id": f"e{self._seq[job]}", "type": type_, "session": None,
                    "job": job, "seq": self._seq[job], "parent": None, "content": content}
        for callback in list(self._subscribers):
            callback(envelope)
        return envelope

    def cancel_job(self, job_id: str, hard: bool = False) -> None:
        self.cancelled.append((job_id, hard))

    def request(self, name, args, on_reply, on_error=None) -> None:
        self.requests.append((name, args))
        if name == "figure.export":  # the engine renders it (tested there); answer as it does
            Path(args["path"]).write_bytes(b"%PDF-1.4 (stand-in)\n")
            on_reply({"path": args["path"]})
        elif on_error:
            on_error(f"unknown request {name}")

    def run_dir(self, run_id: str) -> str:
        return str(self.run_root / run_id)

    def push_edit(self, document, command, model) -> None:
        command.apply(model)

    def forget_edits(self, document: str) -> None:
        self.forgotten.append(document)

    def document_saved(self, document: str) -> None:
        self.forgotten.append(document)  # its steps leave the history

    def panel_for(self, path) -> str | None:
        from studio.panel_registry import PanelRegistry

        entry = PanelRegistry().for_file(path)
        return entry.title if entry is not None else None

    def open_in_panel(self, path) -> None:
        self.opened_elsewhere.append(str(path))

    def show_error(self, title: str, message: str) -> None:
        self.errors.append((title, message))


class HistoryHost(FakeHost):
    """A ``FakeHost`` whose edits go through the window's real ``studio.undo.EditHistory``,
    autosaved to a real workspace: undo, redo, restore and forget behave as in the app.
    ``host.undo()`` / ``host.redo()`` press Ctrl+Z / Ctrl+Shift+Z on this panel's history."""

    def __init__(self, run_root: Path, workspace_root: Path) -> None:
        from engine.workspace import Workspace
        from studio.undo import EditHistory

        super().__init__(run_root)
        self.workspace = Workspace(workspace_root)
        self.history = EditHistory(self.workspace)

    def push_edit(self, document, command, model) -> None:
        self.history.push(document, command, model)

    def restore_edits(self, document, model, decode) -> int:
        return self.history.restore(document, model, decode)

    def forget_edits(self, document: str) -> None:
        super().forget_edits(document)
        self.history.forget(document)

    def document_saved(self, document: str) -> None:
        self.history.document_saved(document)

    def edit_group(self, label: str):
        return self.history.group(label)

    def workspace_path(self) -> str:
        return str(self.workspace.root)

    def undo(self) -> None:
        self.history.stack.undo()

    def redo(self) -> None:
        self.history.stack.redo()


@pytest.fixture
def developer_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The diagnostics methods (diag.*) listed, as developers see them (``STUDIO_DEV=1``)."""
    monkeypatch.setenv("STUDIO_DEV", "1")


@pytest.fixture
def fake_host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "runs")


@pytest.fixture
def history_host(tmp_path: Path, qapp) -> HistoryHost:
    """A host with a real undo history and autosave (see ``HistoryHost``)."""
    return HistoryHost(tmp_path / "runs", tmp_path / "workspace")

"""The jobs the shell knows about: live ones from engine events, older ones from the workspace.

Qt-free, so it can be tested without a window: the bridge feeds it protocol envelopes, the runs
dock listens to it. Stale events (a ``seq`` not above the last one seen for that job) are
dropped, as the protocol allows.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

QUEUED, RUNNING, CANCELLING = "queued", "running", "cancelling"
SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
ENGINE_DIED = "engine died"  # the reason of jobs lost with their engine
MAX_LOG_LINES = 5000

# What changed in a record, passed to listeners.
ADDED, STATE, PROGRESS, LOG, ARTIFACT, RESULT, REMOVED, NOTES = (
    "added", "state", "progress", "log", "artifact", "result", "removed", "notes")

Listener = Callable[["JobRecord", str], None]


@dataclass
class JobRecord:
    id: str
    method: str = ""
    params: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)
    seed: int = 0
    state: str = QUEUED
    reason: str = ""
    step: int = 0
    total: int | None = None
    created: float = field(default_factory=time.time)
    started: float | None = None
    ended: float | None = None
    elapsed_s: float | None = None     # the engine's own figure, once the job is over
    run_dir: str = ""
    notes: str = ""
    live: bool = True                  # seen in this session (events), not only in the index
    last_seq: int = 0
    log: deque = field(default_factory=lambda: deque(maxlen=MAX_LOG_LINES))
    log_total: int = 0                 # lines received, including those the deque dropped
    metrics: dict[str, tuple[list, list]] = field(default_factory=dict)  # name -> (steps, values)
    artifacts: list[dict] = field(default_factory=list)
    outputs: dict = field(default_factory=dict)
    error: dict | None = None

    @property
    def active(self) -> bool:
        return self.state not in TERMINAL

    @property
    def fraction(self) -> float | None:
        """Progress in [0, 1], or None when the job gives no total."""
        if self.state == SUCCEEDED:
            return 1.0
        if not self.total:
            return None
        return max(0.0, min(1.0, self.step / self.total))

    def elapsed(self, now: float | None = None) -> float | None:
        if self.elapsed_s is not None and not self.active:
            return self.elapsed_s
        if self.started is None:
            return None
        end = self.ended if self.ended is not None else (now or time.time())
        return max(0.0, end - self.started)

    def submission(self) -> dict:
        """What it takes to submit this job again."""
        return {"method": self.method, "params": dict(self.params), "inputs": dict(self.inputs),
                "seed": self.seed}


class JobBook:
    """Records by job id, newest first, with listeners for every change."""

    def __init__(self) -> None:
        self._records: dict[str, JobRecord] = {}
        self._listeners: list[Listener] = []

    # -- reading -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._records

    def get(self, job_id: str) -> JobRecord | None:
        return self._records.get(job_id)

    def records(self) -> list[JobRecord]:
        return sorted(self._records.values(), key=lambda r: (r.created, r.id), reverse=True)

    def active(self) -> list[JobRecord]:
        return [r for r in self._records.values() if r.active and r.live]

    # -- listening ---------------------------------------------------------------------------
    def listen(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _notify(self, record: JobRecord, what: str) -> None:
        for listener in list(self._listeners):
            listener(record, what)

    # -- changes -----------------------------------------------------------------------------
    def register(self, job_id: str, method: str, params: dict, inputs: dict | None = None,
                 seed: int = 0, run_dir: str = "") -> JobRecord:
        """A job this session submitted (its events may have arrived before the reply)."""
        record = self._records.get(job_id)
        is_new = record is None
        if is_new:
            record = self._records[job_id] = JobRecord(id=job_id)
        record.method, record.params = method, dict(params)
        record.inputs, record.seed = dict(inputs or {}), seed
        record.run_dir = run_dir or record.run_dir
        self._notify(record, ADDED if is_new else STATE)
        return record

    def add_history(self, rows: list[dict]) -> None:
        """Runs from the workspace index (``Workspace.runs()``). Live records win; older
        ones are refreshed (an engine starting marks runs of a dead one failed)."""
        for row in rows:
            known = self._records.get(row["id"])
            if known is not None:
                if not known.live and (known.state, known.reason) != (row["state"],
                                                                      row.get("reason") or ""):
                    known.state, known.reason = row["state"], row.get("reason") or ""
                    known.ended = row.get("ended")
                    self._notify(known, STATE)
                continue
            record = JobRecord(
                id=row["id"], method=row["method"], params=row.get("params") or {},
                seed=row.get("seed") or 0, state=row["state"], reason=row.get("reason") or "",
                created=row.get("created") or 0.0, started=row.get("started"),
                ended=row.get("ended"), run_dir=row.get("run_dir", ""),
                notes=row.get("notes") or "", live=False,
                artifacts=list(row.get("artifacts") or []))
            self._records[record.id] = record
            self._notify(record, ADDED)

    def apply(self, message: dict) -> JobRecord | None:
        """One protocol envelope; returns the record it changed, or None if it was stale."""
        job_id = message.get("job")
        kind = message.get("type")
        if not job_id or kind not in _HANDLERS:
            return None
        record = self._records.get(job_id)
        is_new = record is None
        if is_new:
            record = self._records[job_id] = JobRecord(id=job_id)
        seq = message.get("seq") or 0
        if seq and seq <= record.last_seq:
            return None
        record.last_seq = max(record.last_seq, seq)
        record.live = True
        what = _HANDLERS[kind](record, message.get("content") or {})
        self._notify(record, ADDED if is_new else what)
        return record

    def set_notes(self, job_id: str, notes: str) -> None:
        record = self._records[job_id]
        record.notes = notes
        self._notify(record, NOTES)

    def remove(self, job_id: str) -> None:
        record = self._records.pop(job_id, None)
        if record is not None:
            self._notify(record, REMOVED)


def _set_state(record: JobRecord, content: dict) -> str:
    state = content.get("state", record.state)
    now = time.time()
    record.state = state
    record.reason = content.get("reason") or ""
    if state == RUNNING and record.started is None:
        record.started = now
    if state in TERMINAL:
        record.ended = now
        if record.started is None:
            record.started = now
        if content.get("elapsed_s") is not None:
            record.elapsed_s = float(content["elapsed_s"])
        if state == SUCCEEDED and record.total:
            record.step = record.total
    if content.get("error"):
        record.error = content["error"]
    return STATE


def _set_progress(record: JobRecord, content: dict) -> str:
    record.step = int(content.get("step") or 0)
    record.total = content.get("total") or record.total
    if record.started is None:
        record.started = time.time()
    for name, value in (content.get("metrics") or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        steps, values = record.metrics.setdefault(name, ([], []))
        steps.append(record.step)
        values.append(float(value))
    return PROGRESS


def _add_log(record: JobRecord, content: dict) -> str:
    lines = [str(line) for line in content.get("lines", [])]
    record.log.extend(lines)
    record.log_total += len(lines)
    return LOG


def _add_artifact(record: JobRecord, content: dict) -> str:
    record.artifacts = [a for a in record.artifacts if a.get("name") != content.get("name")]
    record.artifacts.append(dict(content))
    return ARTIFACT


def _set_result(record: JobRecord, content: dict) -> str:
    record.outputs = dict(content.get("outputs") or {})
    return RESULT


_HANDLERS = {"job_state": _set_state, "job_progress": _set_progress, "job_log": _add_log,
             "job_artifact": _add_artifact, "job_result": _set_result}

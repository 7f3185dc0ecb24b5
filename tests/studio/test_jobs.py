"""The shell's job records (Qt-free): events in any order, stale ones dropped, history."""

from __future__ import annotations

from engine.protocol import envelope
from studio.jobs import JobBook


def event(kind: str, job: str, seq: int, **content) -> dict:
    return envelope(kind, content, job=job, seq=seq)


def test_events_before_the_reply_and_stale_ones():
    book = JobBook()
    changes = []
    book.listen(lambda record, what: changes.append((record.id, what)))
    book.apply(event("job_state", "r1", 1, state="queued", reason=""))  # before job_accepted
    book.register("r1", "diag.count", {"steps": 3}, seed=2)
    book.apply(event("job_state", "r1", 2, state="running", reason=""))
    book.apply(event("job_progress", "r1", 4, step=2, total=3, metrics={"value": 0.5}))
    assert book.apply(event("job_progress", "r1", 3, step=1, total=3,
                            metrics={"value": 0.1})) is None  # stale: dropped
    book.apply(event("job_log", "r1", 5, lines=["a", "b"]))
    book.apply(event("job_state", "r1", 6, state="succeeded", reason="", elapsed_s=1.5))
    record = book.get("r1")
    assert (record.method, record.seed, record.state) == ("diag.count", 2, "succeeded")
    assert record.metrics == {"value": ([2], [0.5])}
    assert list(record.log) == ["a", "b"] and record.log_total == 2
    assert record.fraction == 1.0 and record.elapsed() == 1.5
    assert changes[0] == ("r1", "added")
    assert book.active() == []


def test_history_does_not_override_live_records():
    book = JobBook()
    book.apply(event("job_state", "live", 1, state="running", reason=""))
    book.add_history([
        {"id": "live", "method": "x", "state": "failed", "created": 1.0},
        {"id": "old", "method": "diag.echo", "state": "succeeded", "created": 0.5,
         "params": {"message": "hi"}, "notes": "kept"},
    ])
    assert book.get("live").state == "running"
    old = book.get("old")
    assert (old.live, old.notes, old.params) == (False, "kept", {"message": "hi"})
    assert [r.id for r in book.active()] == ["live"]
    assert old.submission() == {"method": "diag.echo", "params": {"message": "hi"},
                                "inputs": {}, "seed": 0}
    book.remove("old")
    assert "old" not in book

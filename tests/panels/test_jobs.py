"""PanelJobs: the engine jobs a panel started, followed through the host's envelopes."""

from __future__ import annotations

import pytest

from panels.widgets.jobs import PanelJobs
from tests.panels.conftest import FakeHost


class Recorder:
    """What the tracker told the panel: status lines, results and artifacts."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.results: list[tuple[str, str, dict]] = []
        self.artifacts: list[tuple[str, str, dict]] = []

    @property
    def line(self) -> str:
        return self.lines[-1]

    def result(self, job: str, method: str, outputs: dict) -> None:
        self.results.append((job, method, outputs))

    def artifact(self, job: str, method: str, artifact: dict) -> None:
        self.artifacts.append((job, method, artifact))


@pytest.fixture
def seen() -> Recorder:
    return Recorder()


@pytest.fixture
def jobs(fake_host, seen) -> PanelJobs:
    tracker = PanelJobs(fake_host, seen.lines.append, on_result=seen.result,
                        on_artifact=seen.artifact)
    yield tracker
    tracker.close()


def submitted(jobs: PanelJobs, method: str = "toy.train", **kwargs) -> str:
    """Submit a valid job and return its id."""
    before = set(jobs)
    jobs.submit(method, {"steps": 10} if method == "toy.train" else {}, **kwargs)
    (job,) = set(jobs) - before
    return job


def test_a_submission_goes_through_the_host_and_is_followed(jobs, fake_host, seen):
    jobs.submit("toy.train", {"steps": 10}, {"data": "run:x/a"})
    assert fake_host.submitted[-1]["method"] == "toy.train"
    assert fake_host.submitted[-1]["params"] == {"steps": 10}
    assert fake_host.submitted[-1]["inputs"] == {"data": "run:x/a"}
    (job,) = jobs
    assert jobs[job] == "toy.train" and dict(jobs) == {job: "toy.train"}
    assert seen.line == f"toy.train ({job}): queued"


def test_states_and_progress_read_the_same_in_every_panel(jobs, fake_host, seen):
    job = submitted(jobs)
    fake_host.emit(job, "job_state", state="running", reason="")
    assert seen.line == f"toy.train ({job}): running"
    fake_host.emit(job, "job_progress", step=3, total=10,
                   metrics={"loss": 0.123456, "ok": True, "note": "text", "acc": 1})
    assert seen.line == f"toy.train ({job}): running, step 3 / 10 · loss 0.123, acc 1"
    fake_host.emit(job, "job_progress", step=4, metrics={})
    assert seen.line == f"toy.train ({job}): running, step 4"
    fake_host.emit(job, "job_state", state="cancelling", reason="")
    assert seen.line == f"toy.train ({job}): cancelling"
    fake_host.emit(job, "job_state", state="cancelled", reason="cancelled")
    assert seen.line == f"toy.train ({job}): cancelled"


def test_a_failure_says_why_from_its_reason_or_its_error(jobs, fake_host, seen):
    first, second = submitted(jobs), submitted(jobs)
    fake_host.emit(first, "job_state", state="failed", reason="ChatError: HTTP 500")
    assert seen.line == f"toy.train ({first}): failed: ChatError: HTTP 500"
    fake_host.emit(second, "job_state", state="failed", reason="",
                   error={"message": "no routed tree", "traceback": "..."})
    assert seen.line == f"toy.train ({second}): failed: no routed tree"


def test_the_chosen_metrics_only_and_a_label_in_place_of_the_method(fake_host, seen):
    jobs = PanelJobs(fake_host, seen.lines.append, metrics=("mse",))
    job = submitted(jobs, label="train the toy")
    assert seen.line == f"train the toy ({job}): queued"
    fake_host.emit(job, "job_progress", step=5, total=10, metrics={"mse": 0.5, "lr": 0.1})
    assert seen.line == f"train the toy ({job}): running, step 5 / 10 · mse 0.5"
    jobs.close()


def test_events_of_other_jobs_are_ignored(jobs, fake_host, seen):
    job = submitted(jobs)
    before = list(seen.lines)
    other = "20260101-000000-0000ff"
    for kind, content in (("job_state", {"state": "failed", "reason": "not ours"}),
                          ("job_progress", {"step": 1, "total": 2}),
                          ("job_artifact", {"kind": "plot", "name": "p", "path": "p.json"}),
                          ("job_result", {"outputs": {"x": "y"}})):
        fake_host.emit(other, kind, **content)
    assert seen.lines == before and not seen.results and not seen.artifacts
    assert list(jobs) == [job]


def test_results_and_artifacts_reach_the_panel_with_their_method(jobs, fake_host, seen):
    job = submitted(jobs, method="toy.embed")
    artifact = {"kind": "plot", "name": "loss", "path": "artifacts/loss.json", "meta": {}}
    fake_host.emit(job, "job_artifact", **artifact)
    assert seen.artifacts == [(job, "toy.embed", artifact)]
    fake_host.emit(job, "job_result", outputs={"embedding": "artifacts/e.npy"})
    assert seen.results == [(job, "toy.embed", {"embedding": "artifacts/e.npy"})]
    assert seen.line == f"toy.embed ({job}): succeeded"


def test_what_the_panel_says_about_a_result_outlives_the_succeeded_state(fake_host):
    lines: list[str] = []
    jobs = PanelJobs(fake_host, lines.append,
                     on_result=lambda job, method, outputs: lines.append("opened 3 clips"))
    job = submitted(jobs)
    fake_host.emit(job, "job_result", outputs={})
    fake_host.emit(job, "job_state", state="succeeded", reason="")
    assert lines[-1] == "opened 3 clips"
    fake_host.emit(job, "job_state", state="failed", reason="could not write result.json")
    assert lines[-1] == f"toy.train ({job}): failed: could not write result.json"
    without_result = submitted(jobs)
    fake_host.emit(without_result, "job_state", state="succeeded", reason="")
    assert lines[-1] == f"toy.train ({without_result}): succeeded"
    jobs.close()


def test_a_refused_submission_is_shown_and_passed_on(jobs, fake_host, seen):
    refusals: list[str] = []
    jobs.submit("toy.train", {"steps": 0}, on_error=refusals.append)
    assert not jobs
    (message,) = refusals
    assert "steps" in message
    assert seen.line == f"toy.train: not started: {message}"


class EagerHost(FakeHost):
    """A host whose engine is quick: the job's events arrive before its job_accepted."""

    def __init__(self, run_root) -> None:
        super().__init__(run_root)
        self.early_events = True  # the queued state first, as the engine sends it

    def submit_job(self, method, params, inputs=None, seed=0, on_accepted=None, on_error=None,
                   cluster=None):
        def late(job: str) -> None:
            self.emit("20260101-000000-0000aa", "job_result", outputs={"not": "ours"})
            self.emit(job, "job_state", state="running", reason="")
            self.emit(job, "job_progress", step=2, total=2, metrics={})
            self.emit(job, "job_result", outputs={"model": "checkpoints/m"})
            on_accepted(job)

        super().submit_job(method, params, inputs, seed, late, on_error, cluster)


def test_events_that_come_before_the_acceptance_are_replayed(tmp_path, seen):
    host = EagerHost(tmp_path / "runs")
    jobs = PanelJobs(host, seen.lines.append, on_result=seen.result)
    job = submitted(jobs)
    assert seen.results == [(job, "toy.train", {"model": "checkpoints/m"})]
    assert seen.lines[-2:] == [f"toy.train ({job}): running, step 2 / 2",
                               f"toy.train ({job}): succeeded"]
    # nothing waits now: another job's early events were forgotten, not kept for later
    jobs.follow("20260101-000000-0000aa", "toy.train")
    assert seen.results == [(job, "toy.train", {"model": "checkpoints/m"})]
    jobs.close()


def test_the_fake_hosts_early_queued_state_is_not_lost(fake_host, jobs, seen):
    fake_host.early_events = True
    job = submitted(jobs)
    assert list(jobs) == [job] and seen.line == f"toy.train ({job}): queued"


def test_close_stops_listening(fake_host, seen):
    jobs = PanelJobs(fake_host, seen.lines.append, on_result=seen.result)
    assert fake_host.subscriber_count == 1
    job = submitted(jobs)
    jobs.close()
    jobs.close()
    assert fake_host.subscriber_count == 0
    fake_host.emit(job, "job_result", outputs={})
    assert not seen.results and seen.line == f"toy.train ({job}): queued"

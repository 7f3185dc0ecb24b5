"""The bridge against a real engine: handshake, ping, events, and surviving the engine's death.

One bridge serves the module (a fresh engine's first job waits seconds for its worker to
import torch); the tests that kill or freeze the engine run last.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from studio.bridge import READY, STOPPED, EngineBridge
from tests.conftest import qt_asyncio_loop

TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def module_loop(qapp):
    """One asyncio loop for the module (two qasync loops on one Qt loop would mix tasks)."""
    with qt_asyncio_loop(qapp) as loop:
        yield loop


@pytest.fixture(scope="module")
def bridge(qapp, module_loop, tmp_path_factory):
    home = tmp_path_factory.mktemp("bridge")
    bridge = EngineBridge(home / "workspace", workers=1, log_dir=home / "logs",
                          ping_interval_s=0.2, ping_timeout_s=2.0)
    bridge.start()
    deadline = time.monotonic() + 60
    while not bridge.is_ready:
        assert time.monotonic() < deadline, "the engine did not start"
        qapp.processEvents()
        time.sleep(0.005)
    yield bridge
    bridge.stop_now()


def run(qtbot, coro, timeout_s: float = 60.0):
    """Drive a coroutine on the Qt-hosted loop until it finishes; returns its result."""
    task = asyncio.ensure_future(coro)
    qtbot.waitUntil(task.done, timeout=int(timeout_s * 1000))
    return task.result()


def test_handshake_lists_methods_and_answers_pings(bridge, qtbot):
    assert bridge.state == READY
    assert bridge.welcome["protocol"] == 1
    assert {"diag.echo", "diag.count"} <= {m["id"] for m in bridge.methods}
    assert run(qtbot, bridge._client.ping())["active_jobs"] == []


def test_events_reach_subscribers_in_order(bridge, qtbot):
    seen = []
    unsubscribe = bridge.subscribe(seen.append)
    states = []
    bridge.state_changed.connect(states.append)
    job = run(qtbot, bridge.submit("diag.count", {"steps": 5, "delay_s": 0.01}))
    qtbot.waitUntil(lambda: bridge.jobs.get(job).state == "succeeded", timeout=TIMEOUT_MS)
    unsubscribe()
    mine = [m for m in seen if m.get("job") == job]
    assert [m["seq"] for m in mine] == sorted(m["seq"] for m in mine)
    assert [m["content"]["state"] for m in mine if m["type"] == "job_state"][-1] == "succeeded"
    assert bridge.jobs.get(job).metrics["value"][0][-1] == 5
    assert states[0] == "busy" and states[-1] == "ready"


def test_invalid_parameters_are_refused_with_their_name(bridge, qtbot):
    from engine.client import EngineError

    with pytest.raises(EngineError, match="steps"):
        run(qtbot, bridge.submit("diag.count", {"steps": 0}))
    assert bridge.state == READY


def test_engine_killed_under_a_running_job(bridge, qtbot):
    lost, offered = [], []
    bridge.engine_lost.connect(lost.append)
    bridge.resubmit_offered.connect(offered.append)
    job = run(qtbot, bridge.submit("diag.count", {"steps": 1000, "delay_s": 0.05}))
    qtbot.waitUntil(lambda: bridge.jobs.get(job).state == "running", timeout=TIMEOUT_MS)
    waiting = run(qtbot, bridge.submit("diag.echo", {"message": "queued"}))
    first_pid = bridge.pid
    os.kill(first_pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: bridge.jobs.get(job).state == "failed", timeout=TIMEOUT_MS)
    assert bridge.jobs.get(job).reason == "engine died"
    assert bridge.jobs.get(waiting).state == "failed"
    assert offered == [[{"method": "diag.echo", "params": {"message": "queued"},
                         "inputs": {}, "seed": 0}]]
    qtbot.waitUntil(lambda: bridge.is_ready and bridge.pid != first_pid, timeout=TIMEOUT_MS)
    assert bridge.state == READY
    assert lost and lost[0].startswith("engine died")  # "(killed by signal 9)" when known
    assert run(qtbot, bridge._client.ping())["active_jobs"] == []


def test_a_frozen_engine_is_noticed_by_its_pings_and_replaced(bridge, qtbot):
    lost = []
    bridge.engine_lost.connect(lost.append)
    frozen = bridge.pid
    os.kill(frozen, signal.SIGSTOP)
    qtbot.waitUntil(lambda: bool(lost), timeout=TIMEOUT_MS)
    assert "stopped answering" in lost[0]
    qtbot.waitUntil(lambda: bridge.is_ready and bridge.pid != frozen, timeout=TIMEOUT_MS)


def test_restarts_are_bounded(module_loop, qtbot, tmp_path):
    """An engine that cannot start is retried a few times, then the bridge waits for the
    user (Engine > Restart)."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the workspace should be")
    bridge = EngineBridge(blocker / "workspace", workers=1, log_dir=tmp_path / "logs",
                          max_restarts=1, restart_window_s=60)
    states = []
    bridge.state_changed.connect(states.append)
    bridge.start()
    try:
        qtbot.waitUntil(lambda: bridge.state == STOPPED and "restarting" in states,
                        timeout=TIMEOUT_MS)
        assert bridge.restarts == 1
        assert (tmp_path / "logs" / "engine.log").read_text()  # the reason is in the log
    finally:
        bridge.stop_now()

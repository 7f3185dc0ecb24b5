"""Engine test fixtures: a real engine subprocess and an asyncio client for it."""

from __future__ import annotations

import asyncio

import pytest

from engine.client import EngineClient, launch_engine


@pytest.fixture(scope="module")
def engine_process(tmp_path_factory):
    """One engine per test module (workers warm up once); cancel grace of 1 s."""
    workspace = tmp_path_factory.mktemp("workspace")
    process = launch_engine(str(workspace), workers=1, extra=["--cancel-grace", "1"])
    process.workspace = workspace
    yield process
    process.kill()


class Session:
    """A connected client that records every event, for assertions on order and content."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.client = EngineClient(self.events.append)

    def for_job(self, job_id: str) -> list[dict]:
        return [e for e in self.events if e.get("job") == job_id]

    def states(self, job_id: str) -> list[str]:
        return [e["content"]["state"] for e in self.for_job(job_id) if e["type"] == "job_state"]

    async def wait_state(self, job_id: str, states: set[str], timeout_s: float = 60) -> dict:
        async def poll() -> dict:
            while True:
                for event in self.for_job(job_id):
                    if event["type"] == "job_state" and event["content"]["state"] in states:
                        return event
                await asyncio.sleep(0.02)

        return await asyncio.wait_for(poll(), timeout_s)

    async def wait_terminal(self, job_id: str, timeout_s: float = 60) -> dict:
        return await self.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout_s)


async def connect(engine_process) -> Session:
    session = Session()
    await session.client.connect(engine_process.socket_path, engine_process.token, "tests")
    return session

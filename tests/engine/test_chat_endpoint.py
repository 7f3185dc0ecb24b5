"""The chat client against a local server speaking /v1/chat/completions, which can also answer
429, 500, 400 and hang; retries, backoff, the cache, offline replay, and the key's privacy."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.chat_endpoint import ChatClient, ChatError, EndpointConfig

KEY = "sk-test-9f8e7d6c5b4a"
HANG_S = 1.5


class FakeChatServer:
    """Scripted answers: ``script`` holds modes for the next requests ("ok", "429", "500",
    "400", "hang", "garbage"); then every request gets ``answer(body)``."""

    def __init__(self, answer: Callable[[dict], str] | None = None) -> None:
        self.answer = answer or (lambda body: "echo: " + body["messages"][-1]["content"])
        self.script: deque[str] = deque()
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                mode = server.script.popleft() if server.script else "ok"
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": "no such route"}})
                if mode == "hang":
                    time.sleep(HANG_S)
                    return self._send(200, _completion(body, "too late"))
                if mode == "garbage":
                    return self._send_raw(200, b"<html>not json")
                if mode in ("429", "500", "400"):
                    return self._send(int(mode), {"error": {"message": f"scripted {mode}"}},
                                      {"Retry-After": "0"} if mode == "429" else {})
                return self._send(200, _completion(body, server.answer(body)))

            def _send(self, code: int, payload: dict, extra: dict | None = None) -> None:
                self._send_raw(code, json.dumps(payload).encode(), extra)

            def _send_raw(self, code: int, data: bytes, extra: dict | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                with suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @contextmanager
    def running(self) -> Iterator[FakeChatServer]:
        thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()


def _completion(body: dict, text: str) -> dict:
    return {"id": "c1", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}]}


@pytest.fixture
def server():
    with FakeChatServer().running() as running:
        yield running


def client(server, tmp_path=None, sleeps=None, **config) -> ChatClient:
    settings = {"timeout_s": 0.4, "retries": 2, "backoff_s": 0.01, **config}
    return ChatClient(EndpointConfig(server.base_url, "test-model", **settings), api_key=KEY,
                      cache_dir=tmp_path, sleep=(sleeps.append if sleeps is not None
                                                 else lambda s: None))


def test_a_completion_records_model_temperature_and_seed(server):
    reply = client(server, temperature=0.3, seed=11).complete([{"role": "user", "content": "hi"}])
    assert reply.text == "echo: hi" and not reply.cached and reply.attempts == 1
    body = server.requests[0]
    assert body["model"] == "test-model" and body["temperature"] == 0.3 and body["seed"] == 11
    assert server.headers[0]["Authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("mode", ["429", "500", "hang", "garbage"])
def test_transient_failures_are_retried_with_growing_backoff(server, mode):
    server.script.extend([mode, mode])
    sleeps: list[float] = []
    reply = client(server, sleeps=sleeps).complete([{"role": "user", "content": "x"}])
    assert reply.text == "echo: x" and reply.attempts == 3
    assert sleeps == [0.01, 0.02]


def test_persistent_errors_fail_with_the_reason_and_never_the_key(server):
    server.script.extend(["500"] * 3)
    with pytest.raises(ChatError) as caught:
        client(server).complete([{"role": "user", "content": "x"}])
    message = str(caught.value)
    assert "HTTP 500" in message and "scripted 500" in message and "3 attempts" in message
    assert server.base_url in message and KEY not in message
    server.script.extend(["hang"] * 3)
    with pytest.raises(ChatError, match="no answer within 0.4 s"):
        client(server).complete([{"role": "user", "content": "y"}])


def test_client_errors_are_not_retried(server):
    server.script.append("400")
    with pytest.raises(ChatError, match="HTTP 400: scripted 400"):
        client(server).complete([{"role": "user", "content": "x"}])
    assert len(server.requests) == 1


def test_an_unreachable_endpoint_fails_at_once():
    lonely = ChatClient(EndpointConfig("http://127.0.0.1:9/v1", "m", timeout_s=0.5, retries=0))
    with pytest.raises(ChatError, match="127.0.0.1:9"):
        lonely.complete([{"role": "user", "content": "x"}])


def test_the_cache_replays_without_calling_and_holds_no_key(server, tmp_path):
    messages = [{"role": "user", "content": "cache me"}]
    first = client(server, tmp_path).complete(messages)
    replay = ChatClient(EndpointConfig(server.base_url, "test-model", timeout_s=0.4),
                        cache_dir=tmp_path, offline=True)
    again = replay.complete(messages)
    assert again.text == first.text and again.cached and len(server.requests) == 1
    other_model = ChatClient(EndpointConfig(server.base_url, "other", timeout_s=0.4),
                             cache_dir=tmp_path, offline=True)
    with pytest.raises(ChatError, match="not in the cache"):
        other_model.complete(messages)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text()
    assert KEY not in json.dumps(client(server).describe())


def test_the_key_can_come_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("STUDIO_CHAT_API_KEY", "sk-from-env")
    ChatClient(EndpointConfig(server.base_url, "m")).complete([{"role": "user", "content": "x"}])
    assert server.headers[-1]["Authorization"] == "Bearer sk-from-env"

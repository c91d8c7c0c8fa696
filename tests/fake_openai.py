"""A fake OpenAI-compatible server on 127.0.0.1 for tests (stdlib only).

    with FakeOpenAI() as fake:
        fake.script(("text", "Hello from fake"), ("status", 500))
        ... point a client at fake.base_url ...
        fake.requests      # every request body (parsed JSON), in arrival order
        fake.headers       # the matching request headers (lower-case names)

Scripted responses are consumed one per request, in order; when the queue is empty the server
answers with `default_text`. A script item is one of:

    ("text", "reply")                         a normal answer (SSE when the request streams)
    ("status", code)                          an error with a generic OpenAI-style body
    ("status", code, body)                    an error with this JSON body
    ("status", code, body, {"Header": "v"})   ... and these extra headers
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

CONTEXT_OVERFLOW_BODY = {"error": {
    "message": "This model's maximum context length is 8192 tokens. However, your messages "
               "resulted in 9000 tokens. Please reduce the length of the messages.",
    "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}
AUTH_BODY = {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                       "param": None, "code": "invalid_api_key"}}
RATE_LIMIT_BODY = {"error": {"message": "Rate limit reached for requests.",
                             "type": "requests", "param": None, "code": "rate_limit_exceeded"}}


def _words(text: str) -> list[str]:
    """Split a reply into streamed pieces that join back to exactly `text`."""
    pieces, start = [], 0
    for i, ch in enumerate(text):
        if ch == " " and i > start:
            pieces.append(text[start:i])
            start = i
    pieces.append(text[start:])
    return [p for p in pieces if p]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: "FakeOpenAI"

    def get_request(self):  # type: ignore[override]
        conn, addr = super().get_request()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # else ~40 ms per response
        return conn, addr


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        item = self.server.fake._record(body, {k.lower(): v for k, v in self.headers.items()})
        kind = item[0]
        if kind == "text":
            if body.get("stream"):
                self._stream(body, item[1])
            else:
                self._complete(body, item[1])
        elif kind == "status":
            code = item[1]
            payload = item[2] if len(item) > 2 else {
                "error": {"message": f"fake error {code}", "type": "server_error", "code": None}}
            self._json(code, payload, item[3] if len(item) > 3 else None)
        else:
            raise ValueError(f"unknown script item {item!r}")

    # --- replies -------------------------------------------------------------------------------

    def _json(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _usage(self, body: dict[str, Any], text: str) -> dict[str, int]:
        return self.server.fake.usage_for(body, text)

    def _complete(self, body: dict[str, Any], text: str) -> None:
        self._json(200, {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "fake-model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": self._usage(body, text)})

    def _stream(self, body: dict[str, Any], text: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body.get("model", "fake-model")}

        def send(obj: Any) -> None:
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        first = True
        for piece in _words(text):
            delta = {"role": "assistant", "content": piece} if first else {"content": piece}
            first = False
            send({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            send({**base, "choices": [], "usage": self._usage(body, text)})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class FakeOpenAI:
    """The fake server; use as a context manager (or call start()/stop())."""

    def __init__(self, default_text: str = "Hello from fake",
                 usage: dict[str, int] | None = None) -> None:
        self.default_text = default_text
        self.usage = usage  # fixed usage numbers; None: derived from the request size
        self._lock = threading.Lock()
        self._script: deque[tuple[Any, ...]] = deque()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> "FakeOpenAI":
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True,
                                        name="fake-openai")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # --- for tests -----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *items: tuple[Any, ...]) -> None:
        with self._lock:
            self._script.extend(items)

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        with self._lock:
            return list(self._headers)

    def usage_for(self, body: dict[str, Any], text: str) -> dict[str, int]:
        if self.usage is not None:
            u = dict(self.usage)
        else:
            prompt = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
            u = {"prompt_tokens": max(1, prompt // 4), "completion_tokens": max(1, len(text) // 4)}
        u.setdefault("total_tokens", u["prompt_tokens"] + u["completion_tokens"])
        return u

    def _record(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[Any, ...]:
        with self._lock:
            self._requests.append(body)
            self._headers.append(headers)
            return self._script.popleft() if self._script else ("text", self.default_text)


@pytest.fixture
def fake_openai():
    with FakeOpenAI() as fake:
        yield fake

"""A small HTTP proxy on 127.0.0.1 in front of the real server: it records what picochat sends,
and can make the real server behave like other real servers do.

    with Proxy(server.base_url) as proxy:          # point picochat at proxy.base_url
        proxy.requests                             # every chat request body, in order
        proxy.statuses                             # the status each one was answered with
        proxy.answers                              # and the bytes of each answer's body

- pass-through (the default): every byte of the server's answer, as it streams;
- `reject_tools=(status, body)`: a request that offers tools is refused with that answer, the
  way vLLM without `--enable-auto-tool-choice` (400) and llama.cpp without `--jinja` (500) refuse
  every such request (llama-cpp-python's server cannot be made to: it has no option to load a
  chat template that refuses tools, and its templates ignore them);
- `length_first=True`: a streamed request is asked of the server without streaming, so a prompt
  over the server's context is refused with its own 400 ("maximum context length is N tokens")
  before any byte of a stream, as vLLM, OpenAI and llama.cpp's own server do; an answer is sent
  on as a stream, with the usage the server counted (those servers report it in the stream,
  llama-cpp-python's does not);
- `calls_first=fn`: a turn's first request (its last message the user's) is answered by the
  proxy with the one tool call `fn(user_text)` names, `(name, arguments)`, when it names one;
  the request that carries the result goes to the real model. SmolLM2 calls no tool by itself,
  so this is how a real session gets tool results in its history;
- `answer_cap=N`: the server writes at most N tokens of a chat answer (summary requests keep
  picochat's own cap). SmolLM2 ignores "answer in one short sentence" now and then and writes
  300 tokens, seconds each: the cap keeps a session's cost steady. What picochat sent is
  recorded unchanged.

Requests reach the server one at a time (it misbehaves with two at once).
"""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import urlsplit

from tests.helpers.fakes.openai import is_summary_request

VLLM_NO_AUTO_TOOLS = (400, {
    "object": "error",
    "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
               "to be set",
    "type": "BadRequestError", "param": None, "code": 400})
LLAMA_CPP_NO_JINJA = (500, {"error": {"code": 500, "message": "tools param requires --jinja flag",
                                      "type": "server_error"}})

_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "date",
                  "server"})


class Proxy:
    def __init__(self, upstream: str, *, reject_tools: tuple[int, dict[str, Any]] | None = None,
                 length_first: bool = False, answer_cap: int | None = None,
                 calls_first: Callable[[str], tuple[str, str] | None] | None = None) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.reject_tools = reject_tools
        self.length_first = length_first
        self.answer_cap = answer_cap
        self.calls_first = calls_first
        self.requests: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self.answers: list[bytes] = []
        self._upstream_lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> "Proxy":
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(proxy: Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            self._forward(None)

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            if isinstance(body, dict) and self.path.endswith("/chat/completions"):
                proxy.requests.append(body)
                if proxy.reject_tools and body.get("tools"):
                    status, answer = proxy.reject_tools
                    self._send(status, json.dumps(answer).encode())
                    return
                if (call := _call_first(proxy, body)) is not None:
                    self._send(200, _as_stream(call, False), "text/event-stream")
                    return
                if proxy.answer_cap and not is_summary_request(body):
                    body = {**body, "max_tokens": min(body.get("max_tokens") or proxy.answer_cap,
                                                      proxy.answer_cap)}
                    raw = json.dumps(body).encode()
                if proxy.length_first and body.get("stream"):
                    self._answer_length_first(body)
                    return
            self._forward(raw)

        def _send(self, status: int, data: bytes, kind: str = "application/json") -> None:
            proxy.statuses.append(status)
            proxy.answers.append(data)
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def _answer_length_first(self, body: dict[str, Any]) -> None:
            asked = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
            with proxy._upstream_lock:
                status, data = _exchange(self.path, json.dumps(asked).encode(), proxy.upstream)
            if status != 200:
                self._send(status, data)
                return
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._send(200, _as_stream(json.loads(data), usage), "text/event-stream")

        def _forward(self, raw: bytes | None) -> None:
            with proxy._upstream_lock:
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=600)
                try:
                    conn.request(self.command, self.path, raw,
                                 {"content-type": "application/json"} if raw else {})
                    response = conn.getresponse()
                    self._relay(response)
                finally:
                    conn.close()

        def _relay(self, response: http.client.HTTPResponse) -> None:
            """The server's answer as it arrives; a stream it cut is cut here too."""
            answer = bytearray()
            if self.command == "POST":
                proxy.statuses.append(response.status)
                proxy.answers.append(b"")
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in _HOP:
                    self.send_header(name, value)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            while True:
                try:
                    piece = response.read1(65536)
                except (http.client.HTTPException, OSError):
                    self.close_connection = True  # no last chunk: the client sees the cut
                    return
                if not piece:
                    break
                if self.command == "POST":
                    answer += piece
                    proxy.answers[-1] = bytes(answer)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def _call_first(proxy: Proxy, body: dict[str, Any]) -> dict[str, Any] | None:
    """The completion that calls the tool `proxy.calls_first` names for this turn, or None."""
    messages = body.get("messages") or []
    if (proxy.calls_first is None or not body.get("tools") or is_summary_request(body)
            or not messages or messages[-1].get("role") != "user"):
        return None
    named = proxy.calls_first(str(messages[-1].get("content") or ""))
    if named is None:
        return None
    name, arguments = named
    call = {"id": f"call_{len(proxy.requests)}", "type": "function",
            "function": {"name": name, "arguments": arguments}}
    return {"id": "proxy", "created": 0, "model": body.get("model"),
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": None,
                                     "tool_calls": [call]}}]}


def _exchange(path: str, data: bytes, upstream: tuple[str, int]) -> tuple[int, bytes]:
    """One POST to the server, read whole: (status, body)."""
    conn = http.client.HTTPConnection(*upstream, timeout=600)
    try:
        conn.request("POST", path, data, {"content-type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _as_stream(completion: dict[str, Any], include_usage: bool) -> bytes:
    """A non-streamed completion as the SSE stream an OpenAI-style server would have sent."""
    base = {k: completion.get(k) for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    message = choice.get("message") or {}
    events: list[dict[str, Any]] = [{**base, "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    for word in _pieces(message.get("content") or ""):
        events.append({**base, "choices": [
            {"index": 0, "delta": {"content": word}, "finish_reason": None}]})
    for i, call in enumerate(message.get("tool_calls") or ()):
        events.append({**base, "choices": [
            {"index": 0, "delta": {"tool_calls": [{"index": i, **call}]},
             "finish_reason": None}]})
    events.append({**base, "choices": [
        {"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason") or "stop"}]})
    if include_usage and completion.get("usage"):
        events.append({**base, "choices": [], "usage": completion["usage"]})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + \
        b"data: [DONE]\n\n"


def _pieces(text: str) -> list[str]:
    """The answer in word-sized deltas, as a server streams it."""
    out, start = [], 0
    for i, ch in enumerate(text):
        if ch == " " and i > start:
            out.append(text[start:i])
            start = i
    if start < len(text):
        out.append(text[start:])
    return out


def overflowed(proxy: Proxy) -> int:
    """Requests the server refused as too long: a 400, or a 200 stream with no event at all."""
    return sum(1 for status, body in zip(proxy.statuses, proxy.answers)
               if status == 400 or (status == 200 and not body.strip()))

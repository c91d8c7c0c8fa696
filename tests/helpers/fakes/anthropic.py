"""A fake Anthropic Messages API on 127.0.0.1 for tests (stdlib only), so litellm's real
`anthropic/...` code path (its request transformation, SSE parser and exception mapping) runs
with no network.

    with FakeAnthropic() as fake:
        fake.script(("error", 529, "overloaded_error", "Overloaded"))
        ... api_base = fake.base_url, model = "anthropic/claude-sonnet-4-5" ...
        fake.requests      # every request body (parsed JSON), in arrival order
        fake.headers       # the matching request headers (lower-case names)
        fake.paths         # the matching request paths

litellm posts to `<api_base>/v1/messages` (it appends the route unless api_base already ends
with it); any other path gets Anthropic's 404 shape. Scripted responses are consumed one per
request, in order; when the queue is empty the server answers `default_text` (a summary
request, told by its transcript markers, gets `summary_text(n)` as in openai.py).
A script item is one of:

    ("text", "reply")                          an answer: SSE events when the request streams
                                               (message_start with usage.input_tokens,
                                               content_block_start, content_block_delta
                                               text_delta per word, content_block_stop,
                                               message_delta with stop_reason and
                                               usage.output_tokens, message_stop), else one
                                               Message object
    ("error", code, type, message)             Anthropic's error body: {"type": "error",
                                               "error": {"type": type, "message": message}}
    ("error", code, type, message, headers)    ... with these extra headers (retry-after)
    ("stream_error", type, message)            200 and message_start, then an `error` event,
                                               as the API reports overloading mid-stream

Anthropic's own rule for a long request, off by default: with `fake.window` set, a request whose
input (about `chars_per_token` characters a token, system prompt and tool schemas included) is
larger than the window gets 400 "prompt is too long: N tokens > W maximum"; one whose input plus
its `max_tokens` is larger gets 400 "input length and `max_tokens` exceed context limit: N + M >
W, ...". Such a request consumes no script item; `fake.refusals` keeps their messages. A
request without `max_tokens` gets the API's 400 "max_tokens: Field required".
"""

from __future__ import annotations

import json
import threading
from collections import deque
from typing import Any

from tests.helpers.fakes.http import QuietHandler, Served
from tests.helpers.fakes.openai import _words, is_summary_request, summary_text

OVERLOADED = ("error", 529, "overloaded_error", "Overloaded")
PROMPT_TOO_LONG = "prompt is too long: 210000 tokens > 200000 maximum"
CONTEXT_LIMIT = ("input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
                 "decrease input length or `max_tokens` and try again")


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _text_of(content: Any) -> str:
    """A message's or system prompt's text: a string, or a list of content blocks."""
    if isinstance(content, str):
        return content
    out = []
    for block in content or ():
        if isinstance(block, dict):
            out.append(str(block.get("text") or ""))
            if block.get("type") in ("tool_use", "tool_result"):
                out.append(json.dumps(block.get("input") or block.get("content") or ""))
    return "".join(out)


def input_tokens(body: dict[str, Any], chars_per_token: float = 4.0) -> int:
    """The fake's count of a request's input: about four characters a token."""
    chars = len(_text_of(body.get("system")))
    for m in body.get("messages") or ():
        chars += len(_text_of(m.get("content"))) + 16
    chars += len(json.dumps(body.get("tools") or []))
    return max(1, int(chars / chars_per_token))


class _Handler(QuietHandler):
    def do_POST(self) -> None:
        body = self.read_json()
        headers = {k.lower(): v for k, v in self.headers.items()}
        item = self.server.fake._record(self.path, body, headers)
        self._answer(body, item)

    def _answer(self, body: dict[str, Any], item: tuple[Any, ...]) -> None:
        kind = item[0]
        if kind == "text":
            if body.get("stream"):
                self._stream(body, item[1])
            else:
                self._message(body, item[1])
        elif kind == "error":
            self._json(item[1], error_body(item[2], item[3]), item[4] if len(item) > 4 else None)
        elif kind == "stream_error":
            self._stream(body, "", error=error_body(item[1], item[2]))
        else:
            raise ValueError(f"unknown script item {item!r}")

    def _json(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_fake")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _start(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"id": "msg_fake", "type": "message", "role": "assistant",
                "model": body.get("model", "claude-fake"), "stop_sequence": None}

    def _message(self, body: dict[str, Any], text: str) -> None:
        usage = self.server.fake.usage_for(body, text)
        self._json(200, {**self._start(body), "content": [{"type": "text", "text": text}],
                         "stop_reason": "end_turn", "usage": usage})

    def _stream(self, body: dict[str, Any], text: str,
                error: dict[str, Any] | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        usage = self.server.fake.usage_for(body, text)
        self._event("message_start", {"type": "message_start", "message": {
            **self._start(body), "content": [], "stop_reason": None,
            "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1}}})
        if error is not None:
            self._event("error", error)
            self._chunk(b"")
            return
        self._event("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": {"type": "text", "text": ""}})
        self._event("ping", {"type": "ping"})
        for piece in _words(text):
            self._event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "text_delta", "text": piece}})
        self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
        self._event("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                      "usage": {"output_tokens": usage["output_tokens"]}})
        self._event("message_stop", {"type": "message_stop"})
        self._chunk(b"")  # the last chunk: the connection stays open for the next request

    def _event(self, name: str, data: dict[str, Any]) -> None:
        self._chunk(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class FakeAnthropic(Served):
    """The fake server; use as a context manager (or call start()/stop())."""

    handler = _Handler
    thread_name = "fake-anthropic"

    def __init__(self, default_text: str = "Hello from Claude") -> None:
        self.default_text = default_text
        self.usage: dict[str, int] | None = None  # fixed usage; None: counted from the request
        self.window: int | None = None            # Anthropic's context-limit rule, when set
        self.chars_per_token = 4.0
        self.refusals: list[str] = []             # the messages of requests refused for size
        self._lock = threading.Lock()
        self._script: deque[tuple[Any, ...]] = deque()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._paths: list[str] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

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

    @property
    def paths(self) -> list[str]:
        with self._lock:
            return list(self._paths)

    def usage_for(self, body: dict[str, Any], text: str) -> dict[str, int]:
        if self.usage is not None:
            return dict(self.usage)
        return {"input_tokens": input_tokens(body, self.chars_per_token),
                "output_tokens": max(1, len(text) // 4)}

    def _record(self, path: str, body: dict[str, Any],
                headers: dict[str, str]) -> tuple[Any, ...]:
        with self._lock:
            self._requests.append(body)
            self._headers.append(headers)
            self._paths.append(path)
            if path.rstrip("/") != "/v1/messages":
                return ("error", 404, "not_found_error", f"Not Found: {path}")
            cap = body.get("max_tokens")
            if not isinstance(cap, int):
                return ("error", 400, "invalid_request_error", "max_tokens: Field required")
            size = input_tokens(body, self.chars_per_token)
            refusal = None
            if self.window is not None and size > self.window:
                refusal = f"prompt is too long: {size} tokens > {self.window} maximum"
            elif self.window is not None and size + cap > self.window:
                refusal = (f"input length and `max_tokens` exceed context limit: {size} + {cap} "
                           f"> {self.window}, decrease input length or `max_tokens` and try "
                           "again")
            if refusal is not None:
                self.refusals.append(refusal)
                return ("error", 400, "invalid_request_error", refusal)
            if self._script:
                return self._script.popleft()
            if is_summary_request(body):
                return ("text", summary_text(sum(map(is_summary_request, self._requests))))
            return ("text", self.default_text)

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
    ("tool_calls", [(id, name, arguments)])   stream these tool calls (arguments in two pieces;
                                              any string, invalid JSON too, is sent as given)
    ("reasoning", "thinking", "reply")        stream "thinking" as `reasoning_content` deltas (as
                                              DeepSeek, vLLM with a reasoning parser and
                                              llama.cpp do), then "reply" as the answer
    ("reasoning", "thinking", [(id, name, args)])
                                              ... then these tool calls instead of an answer
    ("chunks", ["<thi", "nk>a</think>b"])     stream exactly these content pieces
    ("length", item)                          stream a "text", "reasoning" or "chunks" item (or
                                              a plain string) ending with finish_reason "length"
    ("delay", seconds, "reply")               wait `seconds`, then answer "reply"
    ("delay", seconds, item)                  wait, then answer with any other item
    ("delay", seconds)                        wait, then answer as if unscripted
    ("delay", event[, item])                  wait until the threading.Event is set (at most
                                              HOLD_LIMIT_S), then answer
    ("hold", "before", event, "after")        stream "before", then hold the stream open until
                                              the event is set, then stream "after"; a client
                                              that goes away meanwhile sets `fake.disconnected`

Faults, for the reliability tests (each is one response; none keeps a teardown waiting):

    ("cut", "before")                         stream "before", then close the connection in the
                                              middle of the body: no finish chunk, no [DONE],
                                              no last (zero-length) HTTP chunk
    ("cut", item, n)                          stream a "text" or "tool_calls" item, but cut it
                                              like that after its first n `data:` events
    ("garbage", "before", "after")            stream "before", then a `data:` line that is not
                                              JSON, then "after" and a normal end
    ("no_usage", "reply")                     a streamed answer with no usage chunk, even when
                                              the request asks for `include_usage`
    ("empty",)                                a stream whose one delta is role assistant with
                                              content "", then finish_reason "stop" and usage
    ("hang", "headers")                       send 200 and the SSE headers, then nothing until
                                              the client goes away (sets `fake.disconnected`),
                                              the server stops, or HOLD_LIMIT_S pass
    ("hang", "silence")                       the same, but send nothing at all, not even headers
    ("drop",)                                 read the request, then close the connection
                                              without a response (a server that crashed on it)
    ("flood", size)                           send 200 and one `data:` line that never ends:
                                              `size` bytes of answer text and no newline, then
                                              close; `fake.flooded` counts what was written
    ("flood", size, "before")                 ... after "before" streamed as normal events
    ("raw", code, content_type, body)         an error whose body is exactly these bytes (an
                                              HTML page, nothing at all)
With `fake.window` set, a request whose prompt is larger than that many tokens (`prompt_tokens`:
about four characters a token, tool schemas included) gets OpenAI's context_length_exceeded
error naming the window, and consumes no script item: an overflow that begins at a given
prompt size, as a real model's does. `fake.chars_per_token` sets how fine its tokenizer is.
Real servers' ways, each off by default:

    fake.counts_answer = True     the request's max_tokens counts into the window too
                                  (llama.cpp: "you requested N tokens (a in the messages, b in
                                  the completion)")
    fake.stream_overflow = "void" a streamed request over the window gets 200 and an empty
                                  body, as llama-cpp-python's server answers; unstreamed, 400
    fake.refuse_tools = (code, message)
                                  every request that offers tools gets this error (vLLM without
                                  --enable-auto-tool-choice, llama.cpp without --jinja)
    fake.thinking_back = True     a request with an assistant message whose
                                  `reasoning_content` is missing or empty gets DeepSeek's
                                  thinking-mode 400

A delay ends early when the server stops (the request then gets no answer), so a held
request never keeps a test's teardown waiting.

Summary requests (picochat's compaction calls) are told from turn requests by the transcript
markers in their user message (`is_summary_request`). `fake.summary_requests` and
`fake.turn_requests` split `fake.requests`; `script_summary(...)` and `script_turn(...)` queue
items consumed only by requests of that kind (before the shared `script` queue). An unscripted
summary request gets `summary_text(n)`: the nine headings and the marker "fake summary n".
`wait_for(count, kind)` blocks until that many requests (of that kind) have arrived.
"""

from __future__ import annotations

import json
import re
import select
import socket
import threading
import time
from collections import deque
from typing import Any

from tests.helpers.fakes.http import Flooded, QuietHandler, Served, flood

CONTEXT_OVERFLOW_BODY = {"error": {
    "message": "This model's maximum context length is 8192 tokens. However, your messages "
               "resulted in 9000 tokens. Please reduce the length of the messages.",
    "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}
AUTH_BODY = {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                       "param": None, "code": "invalid_api_key"}}
RATE_LIMIT_BODY = {"error": {"message": "Rate limit reached for requests.",
                             "type": "requests", "param": None, "code": "rate_limit_exceeded"}}

HOLD_LIMIT_S = 60.0  # the longest a ("delay", event, ...) item waits for its event

# The contract's markers of a summary request (picochat.summary_contract spells the same).
TRANSCRIPT_BEGIN, TRANSCRIPT_END = "<<<TRANSCRIPT", "TRANSCRIPT>>>"
PREVIOUS_BEGIN, PREVIOUS_END = "<<<PREVIOUS SUMMARY", "PREVIOUS SUMMARY>>>"
SUMMARY_HEADINGS = ("Objective", "Constraints", "Progress", "Decisions", "Files and Operations",
                    "Tool Results and Failures", "Outstanding Work", "Exact Facts",
                    "Recent User Corrections")
_RECORD = re.compile(r"^### #(\d+) (\w+)", re.M)


VOID_CLOSE_DELAY_S = 0.3


# DeepSeek's answer to a thinking-mode history with an assistant message missing its thinking.
THINKING_NOT_BACK = {"error": {"message": "The `reasoning_content` in the thinking mode must be "
                               "passed back to the API.", "type": "invalid_request_error",
                               "param": None, "code": "invalid_request_error"}}


def overflow_body(window: int, size: int) -> dict[str, Any]:
    return {"error": {
        "message": f"This model's maximum context length is {window} tokens. However, your "
                   f"messages resulted in {size} tokens. Please reduce the length of the "
                   "messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}


def prompt_tokens(body: dict[str, Any], chars_per_token: float = 4.0) -> int:
    """The fake's own count of a request's prompt: about four characters a token."""
    chars = 0
    for m in body.get("messages", []):
        chars += len(str(m.get("content") or "")) + 16
        for call in m.get("tool_calls") or ():
            chars += len(json.dumps(call))
    chars += len(json.dumps(body.get("tools") or []))
    return max(1, int(chars / chars_per_token))


def summary_text(n: int) -> str:
    """The default answer to the n-th summary request (1-based): a well-formed summary."""
    lines = []
    for heading in SUMMARY_HEADINGS:
        lines += [f"## {heading}", f"- fake summary {n}" if heading == "Progress" else "- (none)"]
    return "\n".join(lines)


def _prompt_text(body: dict[str, Any]) -> str:
    """The text of a request's user messages, joined (content parts flattened)."""
    out = []
    for m in body.get("messages") or ():
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        out.append(str(content or ""))
    return "\n".join(out)


def is_summary_request(body: dict[str, Any]) -> bool:
    """A compaction summary call: a user message holding a whole marked transcript."""
    text = _prompt_text(body)
    begin = text.find("\n" + TRANSCRIPT_BEGIN + "\n")
    return begin >= 0 and text.find("\n" + TRANSCRIPT_END, begin) > begin


def transcript_of(body: dict[str, Any]) -> str:
    """The text between the transcript markers of a summary request ("" if there is none)."""
    text = _prompt_text(body)
    begin = text.find("\n" + TRANSCRIPT_BEGIN + "\n")
    if begin < 0:
        return ""
    begin += len(TRANSCRIPT_BEGIN) + 2
    end = text.rfind("\n" + TRANSCRIPT_END)
    return text[begin:end] if end >= begin else ""


def previous_summary_of(body: dict[str, Any]) -> str | None:
    """The previous summary inside a summary request's transcript, or None."""
    text = transcript_of(body)
    begin = text.find(PREVIOUS_BEGIN + "\n")
    if begin < 0:
        return None
    begin += len(PREVIOUS_BEGIN) + 1
    end = text.find("\n" + PREVIOUS_END, begin - 1)
    return text[begin:end] if end >= 0 else None


def record_seqs(body: dict[str, Any]) -> list[int]:
    """The seqs of the raw message records ("### #<seq> <role>") in a summary request."""
    return [int(m.group(1)) for m in _RECORD.finditer(transcript_of(body))]


def _words(text: str) -> list[str]:
    """Split a reply into streamed pieces that join back to exactly `text`."""
    pieces, start = [], 0
    for i, ch in enumerate(text):
        if ch == " " and i > start:
            pieces.append(text[start:i])
            start = i
    pieces.append(text[start:])
    return [p for p in pieces if p]


def _shaped(item: tuple[Any, ...]) -> dict[str, Any]:
    """The stream shape of a "reasoning", "chunks" or "length" item (keywords of `_events`)."""
    kind = item[0]
    if kind == "length":
        inner = ("text", item[1]) if isinstance(item[1], str) else tuple(item[1])
        return {**_shaped(inner), "finish": "length"}
    if kind == "reasoning" and not isinstance(item[2], str):
        return {"reasoning": item[1], "pieces": [], "calls": list(item[2])}
    if kind == "reasoning":
        return {"reasoning": item[1], "pieces": _words(item[2])}
    if kind == "chunks":
        return {"pieces": list(item[1])}
    if kind == "text":
        return {"pieces": _words(item[1])}
    raise ValueError(f"cannot shape script item {item!r}")


class _Cut(Exception):
    """A ("cut", ...) item reached its cut: the handler stops writing mid-body."""


class _Handler(QuietHandler):
    def do_POST(self) -> None:
        body = self.read_json()
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        item = self.server.fake._record(body, {k.lower(): v for k, v in self.headers.items()})
        self._answer(body, item)

    def _answer(self, body: dict[str, Any], item: tuple[Any, ...]) -> None:
        kind = item[0]
        if kind == "delay":
            if not self.server.fake._wait(item[1]):
                self.close_connection = True  # the server is stopping: no answer
                return
            rest = item[2]
            self._answer(body, ("text", rest) if isinstance(rest, str) else tuple(rest))
        elif kind == "text":
            if body.get("stream"):
                self._stream(body, item[1])
            else:
                self._complete(body, item[1])
        elif kind == "tool_calls":
            self._stream(body, "", item[1])
        elif kind in ("reasoning", "chunks", "length"):
            self._stream(body, "", **_shaped(item))
        elif kind == "hold":
            self._stream(body, item[1], hold=item[2], after=item[3])
        elif kind == "cut":
            inner = ("text", item[1]) if isinstance(item[1], str) else tuple(item[1])
            text, calls = (inner[1], None) if inner[0] == "text" else ("", inner[1])
            cut = item[2] if len(item) > 2 else len(_words(text))
            self._stream(body, text, calls, cut_after=cut)
        elif kind == "garbage":
            self._stream(body, item[1], garbage=True, after=item[2])
        elif kind == "no_usage":
            self._stream(body, item[1], usage=False)
        elif kind == "empty":
            self._stream(body, "", empty=True)
        elif kind == "hang":
            if item[1] == "headers":
                self._sse_headers()
            self._hang()
        elif kind == "void":  # 200, stream headers, then the body ends with nothing in it
            self._sse_headers()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            # then, as uvicorn does after logging the error, the connection closes a moment
            # later, unread: a next request the client sent on it meanwhile gets no answer
            time.sleep(VOID_CLOSE_DELAY_S)
            self.close_connection = True
        elif kind == "drop":
            self.close_connection = True  # nothing written: the client sees the close
        elif kind == "flood":
            self._flood(body, item[1], item[2] if len(item) > 2 else "")
        elif kind == "raw":
            self._raw(item[1], item[2], item[3])
        elif kind == "status":
            code = item[1]
            payload = item[2] if len(item) > 2 else {
                "error": {"message": f"fake error {code}", "type": "server_error", "code": None}}
            self._json(code, payload, item[3] if len(item) > 3 else None)
        else:
            raise ValueError(f"unknown script item {item!r}")

    # --- replies -------------------------------------------------------------------------------

    def _json(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._raw(code, "application/json", json.dumps(payload).encode(), headers)

    def _raw(self, code: int, content_type: str, data: bytes,
             headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _flood(self, body: dict[str, Any], size: int, before: str) -> None:
        """Normal events for `before`, then a content delta whose line never ends."""
        self._sse_headers()
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body.get("model", "fake-model")}
        head = b"data: " + json.dumps({**base, "choices": [
            {"index": 0, "delta": {"content": ""}, "finish_reason": None}]}).encode()
        try:
            for piece in _words(before):
                self._chunk(b"data: " + json.dumps({**base, "choices": [
                    {"index": 0, "delta": {"content": piece}, "finish_reason": None}]}).encode()
                    + b"\n\n")
            self._chunk(head[:head.rindex(b'""') + 1])  # the content string opens, never closes
        except OSError:
            pass
        self.server.fake.flooded.record(flood(self._chunk, size))
        self.close_connection = True

    def _usage(self, body: dict[str, Any], text: str) -> dict[str, int]:
        return self.server.fake.usage_for(body, text)

    def _complete(self, body: dict[str, Any], text: str) -> None:
        self._json(200, {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "fake-model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": self._usage(body, text)})

    def _sse_headers(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")  # keep-alive, as real servers do
        self.end_headers()
        self.wfile.flush()

    def _stream(self, body: dict[str, Any], text: str,
                calls: list[tuple[str, str, str]] | None = None,
                hold: threading.Event | None = None, after: str = "", *,
                cut_after: int | None = None, garbage: bool = False, usage: bool = True,
                empty: bool = False, **shape: Any) -> None:
        self._sse_headers()
        try:
            self._events(body, text, calls, hold, after, cut_after, garbage, usage, empty,
                         **shape)
        except _Cut:
            self.close_connection = True  # the body ends here, unfinished

    def _events(self, body: dict[str, Any], text: str,
                calls: list[tuple[str, str, str]] | None, hold: threading.Event | None,
                after: str, cut_after: int | None, garbage: bool, usage: bool,
                empty: bool, reasoning: str = "", pieces: list[str] | None = None,
                finish: str | None = None) -> None:
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body.get("model", "fake-model")}
        sent = 0

        def send(obj: Any) -> None:
            nonlocal sent
            if cut_after is not None and sent >= cut_after:
                raise _Cut
            self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")
            sent += 1

        first = True
        if empty:
            send({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                       "finish_reason": None}]})
        for piece in _words(reasoning):
            delta = {"role": "assistant", "content": None, "reasoning_content": piece}
            first = False
            send({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        if pieces is not None:
            text = "".join(pieces)
        for piece in pieces if pieces is not None else _words(text):
            delta = {"role": "assistant", "content": piece} if first else {"content": piece}
            first = False
            send({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        if garbage:
            self._chunk(b"data: {\"choices\": [{\"delta\": <not json>\n\n")
        if hold is not None and not self._hold(hold):
            raise _Cut
        if hold is not None or garbage:
            for piece in _words(after):
                send({**base, "choices": [{"index": 0, "delta": {"content": piece},
                                           "finish_reason": None}]})
            text += after
        for i, (cid, name, args) in enumerate(calls or ()):
            half = len(args) // 2
            for j, part in enumerate((args[:half], args[half:])):
                call: dict[str, Any] = {"index": i, "function": {"arguments": part}}
                if j == 0:
                    call.update(id=cid, type="function")
                    call["function"]["name"] = name
                delta = {"role": "assistant", "content": None, "tool_calls": [call]}
                send({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        finish = finish or ("tool_calls" if calls else "stop")
        send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if usage and (body.get("stream_options") or {}).get("include_usage"):
            send({**base, "choices": [], "usage": self._usage(body, reasoning + text)})
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")  # the last chunk: the connection stays open for the next request

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _hang(self) -> None:
        """Send nothing more until the client goes away, the server stops, or HOLD_LIMIT_S."""
        fake = self.server.fake
        deadline = time.monotonic() + HOLD_LIMIT_S
        self.close_connection = True
        while not fake._stopping.is_set() and time.monotonic() < deadline:
            readable, _, _ = select.select([self.connection], [], [], 0.05)
            if readable:
                try:
                    gone = not self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    gone = True
                if gone:
                    fake.disconnected.set()
                    return

    def _hold(self, event: threading.Event) -> bool:
        """Keep the stream open (SSE comments, which clients ignore) until `event`; False when
        the client went away or the server stops."""
        fake = self.server.fake
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not event.wait(0.02):
            if fake._stopping.is_set() or time.monotonic() > deadline:
                return False
            try:
                self._chunk(b": held\n\n")
            except OSError:
                fake.disconnected.set()
                return False
        return True


class FakeOpenAI(Served):
    """The fake server; use as a context manager (or call start()/stop())."""

    handler = _Handler
    thread_name = "fake-openai"

    def __init__(self, default_text: str = "Hello from fake",
                 usage: dict[str, int] | None = None) -> None:
        self.default_text = default_text
        self.usage = usage  # fixed usage numbers; None: derived from the request size
        self.window: int | None = None  # prompts above this many tokens overflow
        self.chars_per_token = 4.0      # the fake's tokenizer: lower is finer than picochat's
        self.overflows = 0              # requests refused for their size
        self.counts_answer = False      # max_tokens counts into the window (llama.cpp)
        self.stream_overflow = "error"  # "void": a streamed overflow is 200 with an empty body
        self.refuse_tools: tuple[int, str] | None = None
        self.thinking_back = False      # DeepSeek's thinking mode: every assistant message
        # in the history must carry `reasoning_content`
        self.disconnected = threading.Event()  # a client left a held stream
        self.flooded = Flooded()               # what ("flood", ...) items wrote
        self._lock = threading.Lock()
        self._script: deque[tuple[Any, ...]] = deque()
        self._summary_script: deque[tuple[Any, ...]] = deque()
        self._turn_script: deque[tuple[Any, ...]] = deque()
        self._arrived = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []

    # --- lifecycle -----------------------------------------------------------------------------

    def _starting(self) -> None:
        self._stopping.clear()

    def _stopping_now(self) -> None:
        self._stopping.set()  # ends every delay at once

    # --- for tests -----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *items: tuple[Any, ...]) -> None:
        with self._lock:
            self._script.extend(items)

    def script_summary(self, *items: tuple[Any, ...]) -> None:
        """Items for summary requests only; they go before the shared script."""
        with self._lock:
            self._summary_script.extend(items)

    def script_turn(self, *items: tuple[Any, ...]) -> None:
        """Items for turn (non-summary) requests only; they go before the shared script."""
        with self._lock:
            self._turn_script.extend(items)

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._requests)

    @property
    def summary_requests(self) -> list[dict[str, Any]]:
        return [b for b in self.requests if is_summary_request(b)]

    @property
    def turn_requests(self) -> list[dict[str, Any]]:
        return [b for b in self.requests if not is_summary_request(b)]

    def wait_for(self, count: int, kind: str | None = None, timeout: float = 30.0) -> bool:
        """Block until `count` requests (of `kind`: "summary" | "turn" | None for any) have
        arrived; False on timeout."""
        def enough() -> bool:
            if kind is None:
                return len(self._requests) >= count
            want = kind == "summary"
            return sum(is_summary_request(b) == want for b in self._requests) >= count
        with self._arrived:
            return self._arrived.wait_for(enough, timeout)

    def _wait(self, until: Any) -> bool:
        """A delay item's wait: seconds, or a threading.Event; False if the server stopped."""
        if isinstance(until, threading.Event):
            deadline = time.monotonic() + HOLD_LIMIT_S
            while not until.wait(0.05):
                if self._stopping.is_set() or time.monotonic() > deadline:
                    break
        else:
            self._stopping.wait(float(until))
        return not self._stopping.is_set()

    @property
    def headers(self) -> list[dict[str, str]]:
        with self._lock:
            return list(self._headers)

    def usage_for(self, body: dict[str, Any], text: str) -> dict[str, int]:
        if self.usage is not None:
            u = dict(self.usage)
        else:
            u = {"prompt_tokens": prompt_tokens(body, self.chars_per_token),
                 "completion_tokens": max(1, len(text) // 4)}
        u.setdefault("total_tokens", u["prompt_tokens"] + u["completion_tokens"])
        return u

    def _record(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[Any, ...]:
        with self._lock:
            self._requests.append(body)
            self._headers.append(headers)
            self._arrived.notify_all()
            size = prompt_tokens(body, self.chars_per_token)
            if self.counts_answer:
                size += int(body.get("max_tokens") or 0)
            if self.window is not None and size > self.window:
                self.overflows += 1
                if body.get("stream") and self.stream_overflow == "void":
                    return ("void",)
                return ("status", 400, overflow_body(self.window, size))
            if self.refuse_tools is not None and body.get("tools"):
                code, message = self.refuse_tools
                return ("status", code, {"error": {"message": message, "code": code,
                                                   "type": "BadRequestError"}})
            if self.thinking_back and any(m.get("role") == "assistant"
                                          and not m.get("reasoning_content")
                                          for m in body.get("messages", [])):
                return ("status", 400, THINKING_NOT_BACK)
            summary = is_summary_request(body)
            own = self._summary_script if summary else self._turn_script
            default = (("text", summary_text(sum(map(is_summary_request, self._requests))))
                       if summary else ("text", self.default_text))
            item = own.popleft() if own else self._script.popleft() if self._script else default
            if item[0] == "delay" and len(item) == 2:
                item = (*item, default)
            return item


def kinds(fake: FakeOpenAI) -> list[str]:
    return ["summary" if is_summary_request(b) else "turn" for b in fake.requests]


def chains_whole(messages):
    open_ids: set = set()
    for m in messages:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_ids, m
            open_ids.discard(m["tool_call_id"])
        else:
            assert not open_ids, ("a tool call without its result", m)
            open_ids = {c["id"] for c in m.get("tool_calls") or ()}
    assert not open_ids

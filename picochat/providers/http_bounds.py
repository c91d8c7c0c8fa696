"""Bounds on what one provider response can make picochat hold, enforced under litellm.

litellm reads a stream through the OpenAI SDK's SSE decoder or httpx's `aiter_lines`, and
neither bounds a line or an event: a server that sent one 3 GB line with no newline grew the
process to 2.4 GB before the turn failed with a misleading line (issue 31). So every HTTP
transport litellm creates is wrapped (`install`), and each response body is metered as its
bytes arrive, before any decoder buffers them: past MAX_EVENT_BYTES without an event boundary
(a blank line in an SSE stream, a newline in anything else: Ollama's NDJSON, a JSON body; an
error response's body, which the SDK reads whole, is one event), reading stops with
`EventTooLarge`, which the provider names in one line. A compressed body is metered as
decoded, so a small gzip of a huge line is caught too.

The same wrapper keeps the start of an error response's body for the call that `watch`es:
litellm swallows a 422 when `drop_params` is on and returns None instead of raising, so the
server's own words would otherwise be lost.

Standard library only at import: httpx and litellm are imported by `install`, which runs once
litellm is (providers.litellm_env).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

log = logging.getLogger("picochat.providers")

# The most one stream event (an SSE event, an NDJSON line, a whole JSON body) may hold. Real
# events are a few hundred bytes; a whole answer sent as one event is well under a megabyte.
MAX_EVENT_BYTES = 16 << 20
ERROR_BODY_KEPT = 64 << 10  # of an error response's body, for the line that quotes it
SSE_ENDS = (b"\r\n\r\n", b"\n\n", b"\r\r")  # a blank line ends an SSE event
LINE_ENDS = (b"\n", b"\r")                  # a newline ends an NDJSON event


class EventTooLarge(Exception):
    """One event of a response went past `limit` bytes: reading it stopped. `status`: the
    HTTP status when the response was an error (its whole body is the one event)."""

    def __init__(self, limit: int, status: int | None = None) -> None:
        super().__init__(f"a stream event over {limit} bytes")
        self.limit = limit
        self.status = status


def size_text(n: int) -> str:
    """A byte bound as the user reads it (16 MiB, 512 KiB), as the message limit is said."""
    if n >= 1 << 20:
        return f"{n / (1 << 20):,.4g} MiB"
    return f"{n / (1 << 10):,.4g} KiB" if n >= 1 << 10 else f"{n:,} bytes"


class EventMeter:
    """Bytes since the last event boundary (one of `ends`; none: the whole body is one
    event); `feed` raises EventTooLarge past the limit."""

    def __init__(self, limit: int, ends: tuple[bytes, ...], status: int | None = None) -> None:
        self.limit = limit
        self.ends = ends
        self.status = status  # an error response's, told with the failure
        self.pending = 0   # bytes after the last boundary seen
        self._tail = b""   # the last bytes seen: a boundary may straddle two chunks

    def feed(self, data: bytes) -> None:
        window = self._tail + data
        cut = max((_after(window, end) for end in self.ends), default=-1)
        self.pending = len(window) - cut if cut >= 0 else self.pending + len(data)
        self._tail = window[-3:]
        if self.pending > self.limit:
            raise EventTooLarge(self.limit, self.status)


def _after(data: bytes, end: bytes) -> int:
    """Where the last `end` in `data` finishes, -1 if there is none."""
    at = data.rfind(end)
    return at + len(end) if at >= 0 else -1


@dataclass
class Refusal:
    """An error response seen during a watched call: its status and the start of its body."""

    status: int
    content_type: str
    body: bytearray = field(default_factory=bytearray)


_watched: contextvars.ContextVar[list[Refusal] | None] = contextvars.ContextVar(
    "picochat_refusals", default=None)


@contextlib.contextmanager
def watch() -> Iterator[list[Refusal]]:
    """Collect the error responses of the requests made inside this block (this task)."""
    seen: list[Refusal] = []
    token = _watched.set(seen)
    try:
        yield seen
    finally:
        _watched.reset(token)


def install() -> bool:
    """Wrap every async transport litellm creates from now on (idempotent); False when this
    litellm has no such factory to wrap, and streams are then unbounded."""
    try:
        from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler
    except ImportError:
        log.warning("http_bounds unavailable reason=no_handler")
        return False
    wrapped = 0
    for name in ("create_aiohttp_transport", "_create_httpx_transport"):
        make = getattr(AsyncHTTPHandler, name, None)
        if make is None:
            continue
        if not getattr(make, "_picochat_bounded", False):
            setattr(AsyncHTTPHandler, name, staticmethod(_bounding(make)))
        wrapped += 1
    if not wrapped:
        log.warning("http_bounds unavailable reason=no_factory")
    return bool(wrapped)


def _bounding(make: Callable[..., Any]) -> Callable[..., Any]:
    """A transport factory whose transports meter every response body."""
    @functools.wraps(make)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        return bound_transport(make(*args, **kwargs))
    bounded._picochat_bounded = True  # type: ignore[attr-defined]
    return bounded


def bound_transport(transport: Any) -> Any:
    """The same transport (its type matters to litellm), its responses metered. The method is
    replaced on the instance, so isinstance checks and every other attribute still hold."""
    if transport is None or getattr(transport, "_picochat_bounded", False):
        return transport
    inner = transport.handle_async_request

    async def handle_async_request(request: Any) -> Any:
        seen = _watched.get()  # the calling task's watch, read before the response arrives
        response = await inner(request)
        refusal = None
        if seen is not None and response.status_code >= 400:
            refusal = Refusal(response.status_code, response.headers.get("content-type", ""))
            seen.append(refusal)
        response.stream = _stream_class()(response.stream, _meter(response), refusal,
                                           _decoder(response.headers))
        return response

    transport.handle_async_request = handle_async_request
    transport._picochat_bounded = True
    return transport


def _meter(response: Any) -> EventMeter:
    """An SSE stream's events end at a blank line, other bodies' at a newline; an error body
    is read whole by the SDK, so all of it is one event."""
    if response.status_code >= 400:
        return EventMeter(MAX_EVENT_BYTES, (), response.status_code)
    sse = response.headers.get("content-type", "").lower().startswith("text/event-stream")
    return EventMeter(MAX_EVENT_BYTES, SSE_ENDS if sse else LINE_ENDS)


def _decoder(headers: Any) -> Callable[[bytes], bytes] | None:
    """A decoder of the body's Content-Encoding, for metering only (httpx decodes the body
    it hands on with its own); None for an unencoded body."""
    names = [v.strip().lower() for v in headers.get("content-encoding", "").split(",")]
    names = [n for n in names if n and n != "identity"]
    if not names:
        return None
    try:
        from httpx import _decoders
    except ImportError:
        return None
    made = [_decoders.SUPPORTED_DECODERS[n]() for n in names if n in _decoders.SUPPORTED_DECODERS]
    if not made:
        return None
    decoder = made[0] if len(made) == 1 else _decoders.MultiDecoder(children=made)
    return decoder.decode


@functools.cache
def _stream_class() -> type:
    """httpx requires an AsyncByteStream; httpx is imported only once litellm is."""
    import httpx

    class BoundedStream(httpx.AsyncByteStream):
        """A response body metered as it arrives; an error body's start kept."""

        def __init__(self, inner: Any, meter: EventMeter, refusal: Refusal | None,
                     decode: Callable[[bytes], bytes] | None) -> None:
            self._inner, self._meter, self._refusal, self._decode = inner, meter, refusal, decode

        async def __aiter__(self) -> Any:
            chunks = self._inner.__aiter__()
            try:
                async for chunk in chunks:
                    self._seen(self._decode(chunk) if self._decode else chunk)
                    yield chunk
            finally:
                closing = getattr(chunks, "aclose", None)
                if closing is not None:
                    await closing()

        def _seen(self, data: bytes) -> None:
            if self._refusal is not None and len(self._refusal.body) < ERROR_BODY_KEPT:
                self._refusal.body += data[:ERROR_BODY_KEPT - len(self._refusal.body)]
            self._meter.feed(data)

        async def aclose(self) -> None:
            await self._inner.aclose()

    return BoundedStream

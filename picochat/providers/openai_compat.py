"""An OpenAI-compatible server at an `api_base` (llama.cpp, vLLM, LM Studio, a gateway), spoken
to directly over httpx: the request is the chat-completions JSON, the reply its SSE stream.

Why not litellm here: its import takes 2-3 s and 190 MiB (measured on this machine; the first
request after it another second), and for this wire protocol it adds nothing picochat uses. httpx
takes 0.15 s and 24 MiB. What the model gets, how the stream is read and how failures are told
are shared with litellm's carrier (providers.chat_completions, providers.translate), so both say
the same thing for the same fault; the tests' fake server checks the lines through this one.

As litellm would: the model string loses its `openai/` prefix; the key is the configured
`api_key_env`'s value, else OPENAI_API_KEY, else a placeholder (a local server needs none); no
retries (the session decides); `timeout` bounds each read; every response body is metered
(providers.http_bounds), so no line or event can grow without bound; a model that sends the same
piece of text 100 times in a row is stopped (litellm's REPEATED_STREAMING_CHUNK_LIMIT).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import ssl
import sys
from typing import Any, AsyncIterator, Mapping

from picochat.providers import errors as pe
from picochat.providers import http_bounds, keys
from picochat.providers.base import ProviderRequest
from picochat.providers.chat_completions import READ_TIMEOUT_S, ChatCompletionsProvider
from picochat.providers.translate import ErrorTranslator, ServerAnswered

log = logging.getLogger("picochat.providers")
# litellm's limit: this many identical pieces of text (over 2 characters) in a row is a loop
REPEAT_LIMIT = 100
# OpenAI's reasoning models want `max_completion_tokens` and no temperature: litellm knows how
# to ask them, so they go through it even behind an `api_base` gateway.
_OPENAI_REASONING = re.compile(r"^(?:o\d|gpt-5)", re.I)


def speaks_directly(model: str, provider_kind: str, api_base: str | None) -> bool:
    """Whether a model goes to the direct client: an `openai/` model at an `api_base`."""
    if provider_kind != "openai" or not api_base or not model.startswith("openai/"):
        return False
    return not _OPENAI_REASONING.match(model.split("/", 1)[1].rsplit("/", 1)[-1])


class ModelLooping(Exception):
    """The stream repeated one piece of text past REPEAT_LIMIT (told as ModelRepeating)."""


class OpenAICompatProvider(ChatCompletionsProvider):
    def __init__(self, model: str, provider_kind: str, api_base: str,
                 api_key: str | None = None, api_key_env: str | None = None,
                 read_timeout: float = READ_TIMEOUT_S,
                 extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(model, provider_kind, api_base, api_key, api_key_env, read_timeout,
                         extra)
        self.url = api_base.rstrip("/") + "/chat/completions"
        self.wire_model = model.split("/", 1)[1] if "/" in model else model
        self._client: Any = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    # --- the connection --------------------------------------------------------------------

    async def warm_up(self) -> None:
        """Import httpx, build the client and read the model's output limit off the event loop
        (0.2 s, once). Never raises: a client that cannot be built is said by the request."""
        try:
            await self._client_now()
            await asyncio.to_thread(lambda: self.max_output)
        except Exception as exc:
            log.info("client_warm_up failed kind=%s", type(exc).__name__)

    async def _client_now(self) -> Any:
        """This loop's client (a client's connections belong to the loop that opened them)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            client = await asyncio.to_thread(self._new_client)
            if self._client is None or self._client_loop is not loop:  # no one beat us to it
                self._client, self._client_loop = client, loop
        return self._client

    def _new_client(self) -> Any:
        """A client as litellm's: proxies from the environment (HTTP(S)_PROXY, NO_PROXY),
        SSL_VERIFY honoured, no redirects followed; every transport it may use metered."""
        if "httpx" not in sys.modules:  # its command line (click, rich: 80 ms) is never used
            sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
        import httpx

        client = httpx.AsyncClient(timeout=httpx.Timeout(self.read_timeout),
                                   verify=_verify(self.url))
        for transport in (getattr(client, "_transport", None),
                          *getattr(client, "_mounts", {}).values()):
            http_bounds.bound_transport(transport)
        return client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._client_loop is asyncio.get_running_loop():
            try:
                await client.aclose()
            except Exception:  # best effort at shutdown
                pass

    def _headers(self) -> dict[str, str]:
        key = self.api_key or os.environ.get(keys.own_variable(self.info.provider_kind)) \
            or keys.PLACEHOLDER
        return {"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                "Accept": "application/json"}

    def _payload(self, body: dict[str, Any]) -> bytes:
        data = {"model": self.wire_model, **body}
        for name, value in self.extra.items():
            data.setdefault(name, value)
        try:
            return json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: escaped, as the OpenAI SDK would send it
            return json.dumps(data).encode("ascii")

    # --- the carrier -----------------------------------------------------------------------

    async def _send(self, body: dict[str, Any]) -> Any:
        """The response to one request, its body not yet read; an error status (a redirect
        too: litellm's client followed none either) raised."""
        try:
            client = await self._client_now()
        except Exception as exc:  # SSL_CERT_FILE naming no file, a bad proxy variable, ...
            log.warning("client_setup_failed kind=%s", type(exc).__name__)
            raise pe.ProviderUnavailable(
                f"cannot set up a connection to {self.api_base}: {type(exc).__name__}: {exc}",
                "check SSL_CERT_FILE, SSL_VERIFY and the proxy variables") from None
        sent = client.build_request("POST", self.url, content=self._payload(body),
                                    headers=self._headers())
        response = await client.send(sent, stream=True)
        if response.status_code >= 300:
            raise await _refusal(response)
        return response

    async def _open(self, body: dict[str, Any], request: ProviderRequest) -> Any:
        response = await self._send(body)
        kind = response.headers.get("content-type", "").lower()
        if "json" in kind and "event-stream" not in kind:  # the server did not stream
            return _Whole(await _json_body(response))
        if not kind.startswith("text/event-stream") and kind:
            words = pe.refusal_words(await _body(response, http_bounds.ERROR_BODY_KEPT), kind)
            raise pe.ProviderUnavailable(
                f"{self.api_base} answered HTTP {response.status_code} with {kind.split(';')[0]}"
                f", not a chat stream{': ' + words if words else ''}",
                "is api_base the address of the model's API (often ending in /v1)?")
        return _Events(response)

    async def _fetch(self, body: dict[str, Any], request: ProviderRequest) -> Any:
        return await _json_body(await self._send(body))

    def _errors(self) -> ErrorTranslator:
        return ErrorTranslator(self.info, self.api_base, self.api_key_env, self._redact,
                               self.request_tokens, carrier="picochat",
                               read_timeout=self.read_timeout)


def _verify(url: str) -> Any:
    """SSL_VERIFY as litellm reads it: false turns checking off, a file is the CA bundle.
    A plain-http address with no proxy set never speaks TLS: its client gets a context that
    trusts nothing (a TLS connection would fail, not pass) instead of loading the CA bundle
    (60 ms)."""
    if url.lower().startswith("http://") and not _proxies_set():
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    value = os.environ.get("SSL_VERIFY", "").strip()
    if value.lower() in ("false", "0", "no", "off"):
        return False
    return value if value and os.path.isfile(value) else True


def _proxies_set() -> bool:
    """Whether the environment names a proxy httpx would use (HTTP_PROXY, ALL_PROXY, ...)."""
    import urllib.request

    return any(urllib.request.getproxies_environment())


async def _body(response: Any, limit: int) -> bytes:
    """At most `limit` bytes of a response's body (the rest is not read); closed after."""
    body = bytearray()
    try:
        async for chunk in response.aiter_bytes():
            body += chunk[:limit - len(body)]
            if len(body) >= limit:
                break
    except Exception as exc:  # the status is the answer; a body cut short still has words
        log.info("response_body_unread kind=%s", type(exc).__name__)
    finally:
        await response.aclose()
    return bytes(body)


async def _json_body(response: Any) -> Any:
    """A whole JSON reply, bounded like one stream event; an `error` in it is the server's."""
    try:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > http_bounds.MAX_EVENT_BYTES:
                raise http_bounds.EventTooLarge(http_bounds.MAX_EVENT_BYTES)
    finally:
        await response.aclose()
    reply = _parse(bytes(body).decode("utf-8", "replace"))
    if isinstance(reply, dict) and reply.get("error") is not None:
        raise ServerAnswered(None, pe.refusal_words(bytes(body), "application/json"))
    return reply


def _parse(payload: str) -> Any:
    """JSON, or the error the translation names a malformed stream (a number of 5,000 digits
    and nesting past the recursion limit are no JSON a chat server sends)."""
    try:
        return json.loads(payload)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as exc:
        raise json.JSONDecodeError(f"not a chat chunk ({type(exc).__name__})", payload[:80],
                                   0) from None


async def _refusal(response: Any) -> ServerAnswered:
    """An error response as the exception the translation reads: its status, its headers and
    the server's words from the start of its body (at most ERROR_BODY_KEPT bytes are read);
    a redirect names where it points."""
    body = await _body(response, http_bounds.ERROR_BODY_KEPT)
    content_type = response.headers.get("content-type", "")
    words = pe.refusal_words(body, content_type)
    if pe.only_the_status(words, response.status_code):
        words = ""
    if response.status_code < 400:
        words = f"redirected to {response.headers.get('location') or 'another address'}"
    return ServerAnswered(response.status_code, words, response.headers)


class _Whole:
    """A whole (unstreamed) reply read as a stream of one chunk: a server that ignored
    `stream` still answers."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply

    async def _one(self) -> AsyncIterator[Any]:
        reply = self.reply
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            first = choices[0]
            yield {"choices": [{"index": 0, "delta": first.get("message") or {},
                                "finish_reason": first.get("finish_reason")}],
                   "usage": reply.get("usage")}

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._one()

    async def aclose(self) -> None:
        pass


_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"
DRAIN_BYTES = 64 << 10  # read after [DONE] so the connection can be used again
DRAIN_S = 1.0


class _Events:
    """An SSE response as its chunks (parsed JSON), ending at `[DONE]` or the body's end."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self._last = ""
        self._repeats = 0

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._chunks()

    async def _lines(self) -> AsyncIterator[str]:
        """The body's lines, split on CR, LF and CRLF only: never on U+2028 or U+0085, which
        JSON carries raw inside a model's text (str.splitlines, httpx's way, cut an event
        there); a leading BOM is dropped. A line's length is bounded by the transport's meter."""
        pending, first = b"", True
        async for chunk in self.response.aiter_bytes():
            data = pending + chunk if pending else chunk
            held = data.endswith(b"\r")  # maybe half of a CRLF split across two chunks
            *lines, pending = _EOL.split(data[:-1] if held else data)
            if held:
                pending += b"\r"
            for line in lines:
                if first:
                    line, first = line.removeprefix(_BOM), False
                yield line.decode("utf-8", "replace")
        for line in _EOL.split(pending) if pending else ():
            yield (line.removeprefix(_BOM) if first else line).decode("utf-8", "replace")
            first = False

    async def _chunks(self) -> AsyncIterator[Any]:
        data: list[str] = []
        lines = self._lines()
        async for line in lines:
            if line:
                name, _, value = line.partition(":")
                if name == "data":
                    data.append(value[1:] if value.startswith(" ") else value)
                continue  # a comment, `event:`, `id:` or `retry:` line
            if not data:
                continue
            payload, data = "\n".join(data), []
            if payload.strip() == "[DONE]":
                await _drain(lines)
                await self.aclose()  # read to its end: the connection goes back to the pool
                return
            yield self._chunk(payload)
        if data and "\n".join(data).strip() != "[DONE]":  # a last event with no blank line
            yield self._chunk("\n".join(data))
        await self.aclose()

    def _chunk(self, payload: str) -> Any:
        chunk = _parse(payload)  # not JSON: a malformed stream (providers.translate)
        if isinstance(chunk, dict) and chunk.get("error") is not None:
            raise ServerAnswered(None, pe.refusal_words(payload.encode(), "application/json"))
        self._watch(chunk)
        return chunk

    def _watch(self, chunk: Any) -> None:
        """litellm's loop check: the same text (over 2 characters) REPEAT_LIMIT times."""
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        delta = choices[0].get("delta") if isinstance(choices, list) and choices and \
            isinstance(choices[0], dict) else None
        text = delta.get("content") if isinstance(delta, dict) else None
        if not isinstance(text, str) or len(text) <= 2:
            self._repeats = 0
            return
        self._repeats = self._repeats + 1 if text == self._last else 1
        self._last = text
        if self._repeats >= REPEAT_LIMIT:
            raise ModelLooping("the model is repeating the same chunk")

    async def aclose(self) -> None:
        await self.response.aclose()


async def _drain(lines: AsyncIterator[str]) -> None:
    """The rest of a body after [DONE], read (a little, briefly) so its connection goes back
    to the pool; a server that keeps it open past that just has it closed."""
    read = 0
    try:
        async with asyncio.timeout(DRAIN_S):
            async for line in lines:
                read += len(line) + 1
                if read > DRAIN_BYTES:
                    break
    except TimeoutError:
        pass

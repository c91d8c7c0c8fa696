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
        (0.2 s, once)."""
        await self._client_now()
        await asyncio.to_thread(lambda: self.max_output)

    async def _client_now(self) -> Any:
        """This loop's client (a client's connections belong to the loop that opened them)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            client = await asyncio.to_thread(self._new_client)
            if self._client is None or self._client_loop is not loop:  # no one beat us to it
                self._client, self._client_loop = client, loop
        return self._client

    def _new_client(self) -> Any:
        import httpx

        transport = http_bounds.bound_transport(httpx.AsyncHTTPTransport(retries=0))
        return httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(self.read_timeout))

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
        """The response to one request, its body not yet read; an error status raised."""
        client = await self._client_now()
        sent = client.build_request("POST", self.url, content=self._payload(body),
                                    headers=self._headers())
        response = await client.send(sent, stream=True)
        if response.status_code >= 400:
            raise await _refusal(response)
        return response

    async def _open(self, body: dict[str, Any], request: ProviderRequest) -> Any:
        return _Events(await self._send(body))

    async def _fetch(self, body: dict[str, Any], request: ProviderRequest) -> Any:
        response = await self._send(body)
        try:
            return json.loads(await response.aread())
        finally:
            await response.aclose()

    def _errors(self) -> ErrorTranslator:
        return ErrorTranslator(self.info, self.api_base, self.api_key_env, self._redact,
                               self.request_tokens, carrier="picochat")


async def _refusal(response: Any) -> ServerAnswered:
    """An error response as the exception the translation reads: its status, its headers and
    the server's words from the start of its body (at most ERROR_BODY_KEPT bytes are read)."""
    body = bytearray()
    try:
        async for chunk in response.aiter_bytes():
            body += chunk[:http_bounds.ERROR_BODY_KEPT - len(body)]
            if len(body) >= http_bounds.ERROR_BODY_KEPT:
                break
    except Exception as exc:  # the status is the answer; a body cut short still has words
        log.info("refusal_body_unread kind=%s", type(exc).__name__)
    finally:
        await response.aclose()
    content_type = response.headers.get("content-type", "")
    words = pe.refusal_words(bytes(body), content_type)
    if pe.only_the_status(words, response.status_code):
        words = ""
    return ServerAnswered(response.status_code, words, response.headers)


class _Events:
    """An SSE response as its chunks (parsed JSON), ending at `[DONE]` or the body's end."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self._last = ""
        self._repeats = 0

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[Any]:
        data: list[str] = []
        async for line in self.response.aiter_lines():
            if line:
                name, _, value = line.partition(":")
                if name == "data":
                    data.append(value[1:] if value.startswith(" ") else value)
                continue  # a comment, `event:`, `id:` or `retry:` line
            if not data:
                continue
            payload, data = "\n".join(data), []
            if payload.strip() == "[DONE]":
                return
            yield self._chunk(payload)
        if data and "\n".join(data).strip() != "[DONE]":  # a last event with no blank line
            yield self._chunk("\n".join(data))

    def _chunk(self, payload: str) -> Any:
        chunk = json.loads(payload)  # not JSON: a malformed stream (providers.translate)
        if isinstance(chunk, dict) and chunk.get("error") is not None:
            raise ServerAnswered(None, pe.refusal_words(payload.encode(), "application/json"))
        self._watch(chunk)
        return chunk

    def _watch(self, chunk: Any) -> None:
        """litellm's loop check: the same text (over 2 characters) REPEAT_LIMIT times."""
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        delta = choices[0].get("delta") if choices and isinstance(choices[0], dict) else None
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

"""Any litellm model behind the provider seam: streaming with real usage, typed errors.

Retries are off (`num_retries=0`, `max_retries=0`): one user action is one request, and the
session decides what to retry. `timeout` bounds each read; the session worker bounds the whole
call with `asyncio.timeout`.

The key: a configured `api_key_env`'s value is sent; otherwise litellm reads the provider's
own variable (OPENAI_API_KEY, ...), also for an `api_base` server such as a LiteLLM proxy or a
gateway; only when no key is there at all does an `api_base` server get a placeholder, since
the OpenAI SDK refuses to send none (providers.keys). What the model gets and how its stream is
read are shared with the direct OpenAI-compatible client (providers.chat_completions).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Mapping

from picochat.providers import http_bounds, keys
from picochat.providers.base import ProviderRequest
from picochat.providers.chat_completions import (
    ANTHROPIC_DEFAULT_MAX_TOKENS,
    MAX_ANSWER_PIECES,
    READ_TIMEOUT_S,
    ChatCompletionsProvider,
    wants_thinking_back,
)
from picochat.providers.litellm_env import import_litellm

__all__ = ["ANTHROPIC_DEFAULT_MAX_TOKENS", "MAX_ANSWER_PIECES", "READ_TIMEOUT_S",
           "LiteLLMProvider", "close_clients", "forget_old_chunks", "wants_thinking_back"]

log = logging.getLogger("picochat.providers")
# litellm's stream wrapper keeps every chunk until the stream ends (`chunks`, about 3.9 KB each,
# measured: 722 MB after 40 s of one-character chunks), only to log a whole reply picochat never
# reads. Of those, the first, the ones with usage and this many of the newest are kept.
KEPT_CHUNKS = 1_000
WARM_UP_LIMIT_S = 30.0


class LiteLLMProvider(ChatCompletionsProvider):
    def __init__(self, model: str, provider_kind: str, api_base: str | None = None,
                 api_key: str | None = None, api_key_env: str | None = None,
                 read_timeout: float = READ_TIMEOUT_S,
                 extra: Mapping[str, Any] | None = None) -> None:
        """`api_key`: the value of the configured `api_key_env`; without one, the key is the
        provider's own variable, named by litellm's check at the first request. `extra`:
        provider options sent with every request (Ollama's `num_ctx`)."""
        super().__init__(model, provider_kind, api_base, api_key, api_key_env, read_timeout,
                         extra)
        # until the first request asks litellm, a set variable named after the provider
        self._key_settled = bool(api_key or api_key_env)
        self._placeholder = False
        self._warm: asyncio.Task[None] | None = None
        self._warmed_loop: asyncio.AbstractEventLoop | None = None

    def _settle_key(self) -> None:
        """Once, at the first request (litellm is imported by then): which variable supplies
        the key, and whether an `api_base` server needs the placeholder for lack of any."""
        if self._key_settled:
            return
        self._key_settled = True
        found = keys.source(self.info.model, self.info.provider_kind, self.api_base,
                            import_litellm())
        self.api_key_env = found.env or self.api_key_env
        self._placeholder = bool(self.api_base) and not found.present
        log.info("provider_key source=%s placeholder=%s", "env" if found.present else "none",
                 self._placeholder)

    def _kwargs(self, body: dict[str, Any]) -> dict[str, Any]:
        self._settle_key()
        kwargs: dict[str, Any] = {"model": self.info.model, **body,
                                  "timeout": self.read_timeout, "num_retries": 0,
                                  "max_retries": 0}
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self.api_key:
            kwargs["api_key"] = self.api_key
        elif self._placeholder:
            kwargs["api_key"] = keys.PLACEHOLDER  # no key anywhere: the server takes none
        for name, value in self.extra.items():
            kwargs.setdefault(name, value)
        return kwargs

    async def aclose(self) -> None:
        await close_clients()

    async def warm_up(self) -> None:
        """Import litellm off the event loop, then stream one `mock_response` reply; once.

        The first real call after the import costs a second or more of lazy set-up (measured
        1.4 s cold, 0.1 s after this); the mock call pays it without touching the network.
        `collect` awaits this before it starts a call's timer, so a short `timeout` is never
        spent importing; a UI starts it early, while the user types."""
        loop = asyncio.get_running_loop()
        if self._warmed_loop is loop:
            return
        if self._warm is None or self._warm.get_loop() is not loop or self._warm.cancelled():
            self._warm = loop.create_task(self._warm_up())  # a task belongs to one loop
        try:
            await asyncio.wait_for(asyncio.shield(self._warm), WARM_UP_LIMIT_S)
        except TimeoutError:  # a slow warm-up must not hold the call: go on without it
            log.info("litellm_warm_up slow limit_s=%g", WARM_UP_LIMIT_S)
            return
        self._warmed_loop = loop

    async def _warm_up(self) -> None:
        try:
            litellm = await asyncio.to_thread(import_litellm)
            response = await litellm.acompletion(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "warm-up"}],
                mock_response="ok", stream=True, stream_options={"include_usage": True})
            async for _chunk in response:
                pass
            log.info("litellm_warm_up ok")
        except Exception as exc:  # a failed warm-up only means a slower first call
            log.info("litellm_warm_up failed kind=%s", type(exc).__name__)

    async def _call(self, kwargs: dict[str, Any], request: ProviderRequest) -> Any:
        """litellm's answer to one request (a stream when `kwargs` ask for one); litellm's
        exception, untranslated, when it raises one. litellm (with `drop_params`) answers a 422
        by sending the request once more without the fields its body names, and when that is
        refused too returns None instead of raising: the server's words then come from the
        error response the transport kept (providers.http_bounds)."""
        litellm = import_litellm()
        with http_bounds.watch() as refused:
            try:
                response = await litellm.acompletion(**kwargs)
            except litellm.APIConnectionError:
                # litellm's word for a body it could not read (a 422 whose message is a
                # number): the server did answer, so it is told in its words, never as
                # "cannot connect"
                if refused:
                    raise self._errors().refused(refused, request) from None
                raise
        if response is None or (kwargs.get("stream") and not hasattr(response, "__aiter__")):
            raise self._errors().refused(refused, request)
        return response

    async def _open(self, body: dict[str, Any], request: ProviderRequest) -> Any:
        return await self._call(self._kwargs(body), request)

    async def _fetch(self, body: dict[str, Any], request: ProviderRequest) -> Any:
        return await self._call(self._kwargs(body), request)

    def _seen(self, stream: Any, chunk: Any) -> None:
        forget_old_chunks(stream)

    def _server_counted(self, stream: Any) -> bool:
        return _server_counted(stream)


def forget_old_chunks(response: Any) -> None:
    """Past twice KEPT_CHUNKS, drop the middle of litellm's kept `chunks`: the first (its id and
    model), the newest of the middle's chunks with usage (litellm takes the newest usage as the
    total, `_server_counted` needs one) and the newest KEPT_CHUNKS (litellm's repetition check
    reads the last few) stay. Memory per answer is then bounded whatever the number of chunks,
    even when every chunk carries usage (vLLM's continuous usage stats), and each trim is paid
    for by the KEPT_CHUNKS appended since the last; only litellm's log of the whole reply is
    left partial."""
    chunks = getattr(response, "chunks", None)
    if not isinstance(chunks, list) or len(chunks) <= 2 * KEPT_CHUNKS:
        return
    counted = [c for c in chunks[1:-KEPT_CHUNKS] if getattr(c, "usage", None) is not None]
    chunks[1:-KEPT_CHUNKS] = counted[-1:]


def _server_counted(response: Any) -> bool:
    """Whether the server itself sent a usage figure in this stream. litellm's stream wrapper
    keeps the chunks it received (`chunks`; a usage-bearing one keeps its usage) and, when the
    server sent none (llama-cpp-python never does), makes one up with its own tokenizer for the
    last chunk: that figure must not pass for the provider's. A wrapper without `chunks` (a
    mock stream) is believed."""
    chunks = getattr(response, "chunks", None)
    if not isinstance(chunks, list):
        return True
    return any(getattr(c, "usage", None) is not None for c in chunks)


async def close_clients() -> None:
    """Close litellm's cached async HTTP clients (else an unclosed-transport warning prints),
    and forget them: litellm would hand a closed client to the next request, and a process
    goes on after one session closes (the app's /new, /model, switching sessions)."""
    from picochat.providers import litellm_env

    litellm = litellm_env._module
    if litellm is None:
        return
    try:
        await litellm.close_litellm_async_clients()
    except Exception:  # best effort at shutdown
        pass
    cache = getattr(litellm, "in_memory_llm_clients_cache", None)
    if cache is not None and hasattr(cache, "flush_cache"):
        cache.flush_cache()
    handler = getattr(litellm, "base_llm_aiohttp_handler", None)
    session = getattr(handler, "client_session", None)
    if handler is not None and session is not None and getattr(session, "closed", False):
        handler.client_session = None  # opened again on its next use

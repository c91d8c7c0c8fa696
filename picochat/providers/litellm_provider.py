"""Any litellm model behind the provider seam: streaming with real usage, typed errors.

Retries are off (`num_retries=0`, `max_retries=0`): one user action is one request, and the
session decides what to retry. `timeout` bounds each read; the session worker bounds the whole
call with `asyncio.timeout`.

The key: a configured `api_key_env`'s value is sent; otherwise litellm reads the provider's
own variable (OPENAI_API_KEY, ...), also for an `api_base` server such as a LiteLLM proxy or a
gateway; only when no key is there at all does an `api_base` server get a placeholder, since
the OpenAI SDK refuses to send none (providers.keys). `max_tokens` never exceeds the model's
output limit, and Anthropic models always get one (litellm would fill in the model's whole
output limit, which with a long prompt overflows the window). Kept thinking
(`reasoning_content`) goes only to DeepSeek, which requires it (providers.base).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, AsyncIterator, Mapping

from picochat import tokens
from picochat.providers import errors as pe
from picochat.providers import http_bounds, keys, model_map, redact
from picochat.providers.base import (
    Finish,
    ModelInfo,
    Provider,
    ProviderRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    Usage,
    answer_too_large,
    close_quietly,
)
from picochat.providers.litellm_env import import_litellm
from picochat.providers.litellm_errors import CONNECTION, DROPPED, ErrorTranslator, transport_fault
from picochat.providers.thinking import ThinkSplitter, starts_inside

log = logging.getLogger("picochat.providers")
READ_TIMEOUT_S = 60.0
# The most stream chunks one answer may take: twelve times the default answer cap in tokens,
# so a server that streams one character at a time without end is stopped in under a minute.
MAX_ANSWER_PIECES = 200_000
# litellm's stream wrapper keeps every chunk until the stream ends (`chunks`, about 3.9 KB each,
# measured: 722 MB after 40 s of one-character chunks), only to log a whole reply picochat never
# reads. Of those, the first, the ones with usage and this many of the newest are kept.
KEPT_CHUNKS = 1_000
WARM_UP_LIMIT_S = 30.0
# Anthropic's API requires max_tokens; when a request names none, this, not litellm's fill-in
# of the model's whole output limit (64,000 for Claude Sonnet 4.5), which with a long prompt
# is refused as larger than the window.
ANTHROPIC_DEFAULT_MAX_TOKENS = 8192
# Providers that require an assistant's thinking behind its tool calls in later requests: their
# litellm prefix, or a word of their address when reached as an OpenAI-compatible server.
THINKING_SENT_BACK = ("deepseek",)
# What such a provider gets for an assistant message with no thinking kept: DeepSeek refuses an
# empty string as missing; one space is the least it takes (litellm's DeepSeek transform agrees).
NO_THINKING = " "


def wants_thinking_back(provider_kind: str, api_base: str | None) -> bool:
    """DeepSeek's thinking mode refuses a tool-call history without its thinking."""
    base = (api_base or "").lower()
    return provider_kind in THINKING_SENT_BACK or any(
        f"{name}." in base for name in THINKING_SENT_BACK)


class LiteLLMProvider(Provider):
    _opens_thinking = False  # learned: a reply ended thinking with `</think>` it never opened

    def __init__(self, model: str, provider_kind: str, api_base: str | None = None,
                 api_key: str | None = None, api_key_env: str | None = None,
                 read_timeout: float = READ_TIMEOUT_S,
                 extra: Mapping[str, Any] | None = None) -> None:
        """`api_key`: the value of the configured `api_key_env`; without one, the key is the
        provider's own variable, named by litellm's check at the first request. `extra`:
        provider options sent with every request (Ollama's `num_ctx`)."""
        self.info = ModelInfo(provider_kind=provider_kind, model=model)
        self.api_base = api_base
        self.api_key = api_key
        # The variable that supplies the key (or should), for the auth error's hint; until
        # the first request asks litellm, a set variable named after the provider.
        self.api_key_env = api_key_env or keys.named_after(provider_kind)
        self._key_settled = bool(api_key or api_key_env)
        self._placeholder = False
        self.extra = dict(extra or {})
        self.keeps_thinking = wants_thinking_back(provider_kind, api_base)
        self.max_output = model_map.max_output_tokens(model)
        redact.register(api_key)  # masked in every error line and log record from now on
        self.read_timeout = read_timeout
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

    def _max_tokens(self, asked: int | None) -> int | None:
        """The request's answer cap: never above the model's output limit (a reserve of 16,384
        is refused by a model that writes at most 4,096), and always one for Anthropic."""
        if asked is None and (self.info.provider_kind == "anthropic"
                              or "claude" in self.info.model.rsplit("/", 1)[-1].lower()):
            asked = ANTHROPIC_DEFAULT_MAX_TOKENS
        if asked is not None and self.max_output:
            asked = min(asked, self.max_output)
        return asked

    def _message(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """A message as this provider gets it: kept thinking only where it is wanted. DeepSeek
        in thinking mode refuses a history with an assistant message whose `reasoning_content`
        is missing or empty ("must be passed back to the API"), so one whose thinking was not
        kept (a plain turn, a tool round it did not think in, a partial answer, a row written
        under another model) carries a single space, which it accepts and, where it does not
        need it, ignores."""
        out = dict(message)
        if not self.keeps_thinking:
            out.pop("reasoning_content", None)
        elif out.get("role") == "assistant" and not out.get("reasoning_content"):
            out["reasoning_content"] = NO_THINKING
        return out

    def _kwargs(self, request: ProviderRequest) -> dict[str, Any]:
        self._settle_key()
        kwargs: dict[str, Any] = {
            "model": self.info.model,
            "messages": [self._message(m) for m in request.messages],
            "stream": True,
            "stream_options": {"include_usage": True},
            "timeout": self.read_timeout,
            "num_retries": 0,
            "max_retries": 0,
        }
        if request.tools:
            kwargs["tools"] = [dict(t) for t in request.tools]
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        max_tokens = self._max_tokens(request.max_tokens)
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self.api_key:
            kwargs["api_key"] = self.api_key
        elif self._placeholder:
            kwargs["api_key"] = keys.PLACEHOLDER  # no key anywhere: the server takes none
        for name, value in self.extra.items():
            kwargs.setdefault(name, value)
        return kwargs

    def set_options(self, options: Mapping[str, Any]) -> None:
        self.extra.update(options)

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

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamEvent]:
        kwargs = self._kwargs(request)
        try:
            response = await self._call(kwargs, request)
        except Exception as exc:  # litellm maps provider errors onto its own exception types
            raise self.translate(exc, request) from None
        # From here the server has accepted the request and sent its headers: a failure is a
        # broken or unreadable stream, never "cannot connect".
        finish, received, heard, pieces, done = "stop", 0, False, 0, False
        # Thinking comes as `reasoning_content` (litellm's name for it, also for a provider's
        # `reasoning`) or inline as <think>…</think> text: both become ThinkingDelta.
        split = ThinkSplitter(self._opens_thinking or starts_inside(self.info.model))
        try:
            async for chunk in response:
                pieces += 1
                if pieces > MAX_ANSWER_PIECES:
                    raise answer_too_large(received > 0, MAX_ANSWER_PIECES)
                forget_old_chunks(response)
                usage = _usage(chunk)
                if usage is not None:
                    if _server_counted(response):
                        heard = True
                        yield usage
                    else:  # litellm's own count: the budget's estimate is as good, and honest
                        log.info("stream_usage_not_reported model=%s", self.info.model)
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                delta = choice.delta
                thought = (getattr(delta, "reasoning_content", None)
                           or getattr(delta, "reasoning", None))
                if thought and isinstance(thought, str):
                    heard = True
                    split.server_thinks()
                    yield ThinkingDelta(thought)
                text = getattr(delta, "content", None)
                if text:
                    heard = True
                    for piece in split.feed(text):
                        if isinstance(piece, TextDelta):
                            received += len(piece.text)  # answer text: thinking is not kept
                        yield piece
                for call in getattr(delta, "tool_calls", None) or ():
                    heard = True
                    yield _tool_call_delta(call)
                if choice.finish_reason:
                    finish = choice.finish_reason
            done = True
        except Exception as exc:
            raise self.translate(exc, request, received) from None
        finally:
            if not done:  # left early: the server sees the connection close now
                await close_quietly(response)
        for piece in split.flush():
            yield piece
        if split.stray_close:  # this model's template opens the block: its replies start inside
            self._opens_thinking = True
        if not heard:  # not a reply: the server said nothing at all (see `_probe`)
            async for event in self._probe(kwargs, request):
                yield event
            return
        yield Finish(finish)

    async def _probe(self, kwargs: dict[str, Any],
                     request: ProviderRequest) -> AsyncIterator[StreamEvent]:
        """The same request once more, without streaming, after a stream that ended with no
        text, no tool call and no usage. llama-cpp-python's server answers a streamed request
        over its context with `200` and an empty body (the error only reaches its own log);
        unstreamed, the same server says `400 maximum context length is N`. So the probe
        surfaces the real error (an overflow the session recovers from), or, if the server
        answers after all, that answer."""
        plain = {k: v for k, v in kwargs.items() if k not in ("stream", "stream_options")}
        plain["stream"] = False
        for attempt in (1, 2):
            try:
                response = await self._call(plain, request)
                break
            except Exception as exc:
                # that server closes the connection after such a stream; the pooled one the
                # probe reused is dead before it answers: one more try, on a new connection
                if attempt == 1 and transport_fault(exc) in (DROPPED, CONNECTION):
                    log.info("empty_stream_probe_reconnect model=%s", self.info.model)
                    continue
                error = self.translate(exc, request)
                log.info("empty_stream_probed model=%s outcome=%s", self.info.model, error.kind)
                raise error from None
        log.info("empty_stream_probed model=%s outcome=answered", self.info.model)
        choice = response.choices[0] if getattr(response, "choices", None) else None
        message = getattr(choice, "message", None)
        text = getattr(message, "content", None) if message is not None else None
        thought = getattr(message, "reasoning_content", None) if message is not None else None
        split = ThinkSplitter(self._opens_thinking or starts_inside(self.info.model))
        if thought and isinstance(thought, str):
            split.server_thinks()
            yield ThinkingDelta(thought)
        for piece in [*split.feed(text or ""), *split.flush()]:
            yield piece
        for index, call in enumerate(getattr(message, "tool_calls", None) or ()):
            yield _tool_call_delta(call, index)
        usage = _usage(response)
        if usage is not None:
            yield usage
        yield Finish(getattr(choice, "finish_reason", None) or "stop")

    def translate(self, exc: Exception, request: ProviderRequest | None = None,
                  received: int | None = None) -> pe.ProviderError:
        """`exc` as one clear line (providers/litellm_errors.py)."""
        return self._errors().translate(exc, request, received)

    def _errors(self) -> ErrorTranslator:
        """The error translator for this provider as it stands (the key's variable is known
        only after the first request asked litellm)."""
        return ErrorTranslator(self.info, self.api_base, self.api_key_env, self._redact,
                               self.request_tokens)

    def request_tokens(self, request: ProviderRequest) -> int:
        """picochat's estimate of a request in this model's tokens (as budgets count it)."""
        counted = tokens.count_provider_messages(request.messages)
        if request.tools:
            counted += tokens.count_tools(request.tools)
        return tokens.scale(counted, tokens.family_factor(self.info.provider_kind,
                                                          self.info.model))

    def _redact(self, text: str) -> str:
        """Servers quote what they were sent: the key never reaches the user's terminal,
        an error line or the JSON output through their words."""
        return redact.redact(text, (self.api_key, os.environ.get(self.api_key_env or "")))


def _usage(reply: Any) -> Usage | None:
    """The usage a chunk or a whole reply carries, as our type (None: it carries none)."""
    usage = getattr(reply, "usage", None)
    if not usage or getattr(usage, "prompt_tokens", None) is None:
        return None
    return Usage(int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0))


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


def _tool_call_delta(call: Any, index: int | None = None) -> ToolCallDelta:
    """A streamed tool-call fragment, or a whole call from an unstreamed reply, as our type."""
    fn = getattr(call, "function", None)
    return ToolCallDelta(index=int(getattr(call, "index", index or 0) or 0),
                         id=getattr(call, "id", None),
                         name=getattr(fn, "name", None) if fn else None,
                         arguments=(getattr(fn, "arguments", None) or "") if fn else "")


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

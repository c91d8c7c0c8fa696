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

import ast
import asyncio
import json
import logging
import os
import re
from typing import Any, AsyncIterator, Mapping

from picochat import tokens
from picochat.providers import errors as pe
from picochat.providers import http_bounds, keys, model_map, ollama, redact
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
                    raise self._refused(refused, request) from None
                raise
        if response is None or (kwargs.get("stream") and not hasattr(response, "__aiter__")):
            raise self._refused(refused, request)
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
                if attempt == 1 and _transport_fault(exc) in (DROPPED, CONNECTION):
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
        """One clear line per failure kind; the raw message is kept short and its keys masked.

        `received` is None while connecting (no response yet), else the characters of answer
        text that arrived before the stream failed."""
        if isinstance(exc, pe.ProviderError):
            return exc  # already said: a bound reached in the stream, a refusal
        litellm = import_litellm()
        where = self.api_base or self.info.provider_kind
        stopped = self._stopped(exc, received)
        if stopped is not None:
            return stopped
        transport = self._transport_error(exc, litellm, received)
        if transport is not None:
            return transport
        raw = self._redact(_provider_words(_strip_prefixes(str(exc))))
        text = _short(raw)
        if isinstance(exc, litellm.ContextWindowExceededError) or pe.looks_like_overflow(raw):
            return self._overflow(str(exc), request)
        if request is not None and request.tools and pe.refuses_tools(raw):
            return self._no_tools(text)
        if isinstance(exc, (litellm.AuthenticationError, litellm.PermissionDeniedError)):
            env = self.api_key_env
            return pe.ProviderAuthError(f"{where} refused the API key",
                                        f"set {env} to a valid key" if env else "check the key")
        if isinstance(exc, litellm.RateLimitError):
            after = _retry_after(exc)
            return pe.RateLimited(f"{where} is rate limiting requests",
                                  after, f"retry in {after:g} s" if after else "retry later")
        if _overloaded(exc, raw):
            after, status = _retry_after(exc), _status(exc)
            said = f" ({status})" if status in (503, 529) else ""  # not litellm's stand-in 500
            return pe.Overloaded(f"{where} is overloaded{said}", after,
                                 f"retry in {after:g} s" if after else "retry later")
        if isinstance(exc, litellm.NotFoundError):
            if ollama.is_ollama(self.info.model):  # named as the user knows it, not litellm's
                name = ollama.model_name(self.info.model)
                return pe.ModelNotFound(f"{where} does not have the model {name!r}",
                                        f"pull it there (ollama pull {name}), or check the "
                                        "name and the address")
            return pe.ModelNotFound(f"{where} does not know the model {self.info.model!r}",
                                    "check the model name")
        if isinstance(exc, litellm.Timeout):
            return pe.ProviderTimeout(f"{where} did not answer in time", "retry, or check the server")
        if isinstance(exc, litellm.APIConnectionError):
            return pe.ProviderUnavailable(f"cannot connect to {where}",
                                          "is the server running and the address right?")
        if isinstance(exc, (litellm.InternalServerError, litellm.ServiceUnavailableError,
                            litellm.BadGatewayError)):
            return pe.ProviderUnavailable(f"{where} failed with a server error: {text}",
                                          "retry later")
        if isinstance(exc, litellm.BadRequestError):
            return pe.BadProviderRequest(f"{where} rejected the request: {text}")
        return self._unexpected(exc, text)

    def _no_tools(self, text: str) -> pe.ToolsUnsupported:
        """A server that takes no tools (the session sends the turn again without them)."""
        where = self.api_base or self.info.provider_kind
        return pe.ToolsUnsupported(f"{where} does not accept tools for {self.info.model!r}: "
                                   f"{text}", "set [tools] enabled = [] for this model's server")

    def _unexpected(self, exc: Exception, text: str) -> pe.ProviderError:
        """A failure no case above names: the server's words with its HTTP status when it
        answered; an error inside litellm itself (a TypeError, ...) is named as that, without
        Python's words, which tell the user nothing."""
        where = self.api_base or self.info.provider_kind
        status = _status(exc)
        if status is not None and 400 <= status < 500:
            return pe.ProviderError(f"{where} refused the request (HTTP {status}): {text}",
                                    "the server's log may say more")
        if status is not None and status >= 500:
            return pe.ProviderUnavailable(f"{where} failed with a server error (HTTP {status}): "
                                          f"{text}", "retry later")
        if type(exc).__module__.split(".")[0] in ("litellm", "openai"):
            return pe.ProviderError(f"{where} failed: {text}", "retry, or check the server")
        log.warning("provider_internal_error model=%s kind=%s", self.info.model,
                    type(exc).__name__)
        return pe.ProviderError(f"the answer from {where} could not be read (an error inside "
                                "litellm)", "retry; picochat's log names the error")

    def _stopped(self, exc: Exception, received: int | None) -> pe.ProviderError | None:
        """A stream stopped on purpose: one event past its bound (providers.http_bounds), or
        a model that kept sending the same piece of text (litellm stops that stream after
        REPEATED_STREAMING_CHUNK_LIMIT identical chunks; its words are matched, as it has no
        type of its own). Whatever arrived before is kept, like any mid-stream failure."""
        kept = "the answer so far is kept where it is; " if received else ""
        chain = _chain(exc)
        big = next((e for e in chain if isinstance(e, http_bounds.EventTooLarge)), None)
        if big is not None:
            log.warning("stream_event_too_large model=%s limit=%d received=%d",
                        self.info.model, big.limit, received or 0)
            server = f"the server at {self.api_base}" if self.api_base else self.info.provider_kind
            size = http_bounds.size_text(big.limit)
            said = (f"answered HTTP {big.status} with an error body of more than {size}"
                    if big.status else f"sent one event of more than {size}")
            return pe.StreamTooLarge(f"{server} {said}; stopped reading it",
                                     f"{kept}retry, or check the server")
        if any(_REPEATING.search(str(e)) for e in chain):
            log.warning("stream_repeating model=%s received=%d", self.info.model, received or 0)
            return pe.ModelRepeating("the model kept repeating the same text, so the answer "
                                     "was stopped", f"{kept}ask again, lower the temperature, "
                                     "or try another model")
        return None

    def _refused(self, refused: list[http_bounds.Refusal],
                 request: ProviderRequest) -> pe.ProviderError:
        """A request litellm answered with nothing (see `_call`): the last error response the
        transport saw, in the server's words (an overflow or a refusal of tools is still
        told as one), else that no reason came back."""
        where = self.api_base or self.info.provider_kind
        last = refused[-1] if refused else None
        log.warning("provider_refused model=%s status=%s responses=%d", self.info.model,
                    last.status if last else "none", len(refused))
        if last is None:
            return pe.BadProviderRequest(f"{where} refused the request without saying why",
                                         "the server's log may say why")
        raw = self._redact(pe.refusal_words(bytes(last.body), last.content_type))
        if pe.only_the_status(raw, last.status):  # "(HTTP 422): 422" tells nothing twice
            raw = ""
        if raw and pe.looks_like_overflow(raw):
            return self._overflow(raw, request)
        if raw and request.tools and pe.refuses_tools(raw):
            return self._no_tools(_short(raw))
        said = f": {_short(raw)}" if raw else ", with no reason given"
        return pe.BadProviderRequest(f"{where} refused the request (HTTP {last.status}){said}",
                                     "check this model's settings in the config, or the "
                                     "server's log")

    def _transport_error(self, exc: Exception, litellm: Any,
                         received: int | None) -> pe.ProviderError | None:
        """A failure of the connection or the stream itself, told apart by stage: no
        connection, a connection closed before any response, or a stream that broke."""
        where = self.api_base or self.info.provider_kind
        timeout = isinstance(exc, litellm.Timeout)
        fault = None if timeout else _transport_fault(exc)
        if received is not None and fault is not None:
            return _stream_failure(fault, where, self.api_base, received)
        if received and timeout:
            return pe.ProviderTimeout(f"{where} stopped sending mid-answer",
                                      "the answer so far is kept where it is; retry, or check "
                                      "the server")
        if fault in (CONNECT, CONNECTION) or (fault is None and
                                              _is_connection_failure(exc, litellm)):
            return pe.ProviderUnavailable(f"cannot connect to {where}",
                                          "is the server running and the address right?")
        if fault == DROPPED:
            return pe.ProviderUnavailable(
                f"{where} accepted the connection, then closed it without answering",
                "retry, or check the server's log")
        if fault == NOT_HTTP:
            return pe.ProviderUnavailable(f"{where} answered with something that is not HTTP",
                                          "is api_base the address of the model server?")
        return None

    def _overflow(self, raw: str, request: ProviderRequest | None) -> pe.ContextOverflow:
        """An overflow, with figures when the stated window cannot be the whole story: a
        request far smaller than the window the server names (twice picochat's count, plus
        the answer cap, still fits) was refused because its real context is smaller (llama.cpp's
        -c, a per-slot context), not because it is long."""
        window = pe.parse_context_window(raw)
        said = f" of {window:,} tokens" if window else ""
        sent = self.request_tokens(request) if request is not None else None
        answer = (request.max_tokens or 0) if request is not None else 0
        if window and sent is not None and sent * 2 + answer <= window:
            where = self.api_base or self.info.provider_kind
            return pe.ContextOverflow(
                f"{where} refused the request as too long for its window{said}", window,
                f"picochat counts only about {sent:,} tokens in it, so the server's real context "
                "must be smaller (llama.cpp's -c / n_ctx, or a per-slot context): set "
                "token_limit for this model in the config to it, or raise the server's context",
                misfit=True)
        if window and sent is not None and answer and sent < window < sent + answer:
            return pe.ContextOverflow(
                f"the request (about {sent:,} tokens) plus the {answer:,} tokens asked for the "
                f"answer are larger than the model's window{said}", window,
                "compact the session or pick a larger model")
        if not window:  # the server's word only: no figure to weigh it against
            return pe.ContextOverflow(
                f"{self.api_base or self.info.provider_kind} refused the request as too long "
                "for the model's window", None, "compact the session or pick a larger model")
        return pe.ContextOverflow(f"the request is larger than the model's window{said}",
                                  window, "compact the session or pick a larger model")

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


def _short(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _strip_prefixes(text: str) -> str:
    """litellm wraps messages as 'litellm.X: X: OpenAIException - …', sometimes twice (a stream
    error), with its own 'Original exception: …' appended; keep the provider's words."""
    text = text.split(" Original exception:", 1)[0]
    for _ in range(3):
        stripped = _PREFIX.sub("", text, count=1).strip()
        if stripped == text:
            break
        text = stripped
    return text.strip() or "no details"


_PREFIX = re.compile(r"^(?:litellm\.\w+:\s*)?(?:\w+Error:\s*)?(?:\w+Exception\s*-\s*)?")


# Where a transport failed, read from the exception chain (aiohttp under httpx under the OpenAI
# SDK under litellm; names, so no transport library need be imported to tell them apart).
CONNECT, DROPPED, NOT_HTTP, MALFORMED = "connect", "dropped", "not_http", "malformed"
CONNECTION = "connection"  # a connection error that does not say at which stage
_CONNECT_NAMES = frozenset({"ConnectError", "ClientConnectorError", "ConnectionRefusedError",
                            "gaierror"})
_DROPPED_NAMES = frozenset({"ReadError", "RemoteProtocolError", "ServerDisconnectedError",
                            "ClientPayloadError", "ConnectionResetError",
                            "ConnectionAbortedError", "BrokenPipeError", "IncompleteRead"})
_NOT_HTTP_NAMES = frozenset({"BadHttpMessage", "BadStatusLine"})


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception, its causes and contexts, and litellm's wrapped `original_exception`."""
    out: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or any(current is seen for seen in out):
            continue
        out.append(current)
        original = getattr(current, "original_exception", None)
        todo += [current.__context__, current.__cause__,
                 original if isinstance(original, BaseException) else None]
    return out


def _transport_fault(exc: BaseException) -> str | None:
    """CONNECT: no connection was made; DROPPED: the server closed or reset it; NOT_HTTP: the
    reply was not HTTP; MALFORMED: a stream line was not JSON; CONNECTION: a connection error
    that names no stage; None: no transport fault seen."""
    names: set[str] = set()
    for e in _chain(exc):
        if isinstance(e, json.JSONDecodeError):
            return MALFORMED
        names.update(c.__name__ for c in type(e).__mro__)
    if names & _CONNECT_NAMES:
        return CONNECT
    if names & _NOT_HTTP_NAMES:
        return NOT_HTTP
    if names & _DROPPED_NAMES:
        return DROPPED
    return CONNECTION if "APIConnectionError" in names else None


def _stream_failure(fault: str, where: str, api_base: str | None,
                    received: int) -> pe.ProviderError:
    """A stream that failed after the server accepted the request (its headers arrived)."""
    kept = "the answer so far is kept where it is; " if received else ""
    if fault == MALFORMED:
        server = f"the server at {api_base}" if api_base else where
        return pe.MalformedStream(
            f"{server} sent a malformed stream (a data line that is not JSON)",
            f"{kept}retry, or check the server")
    if received:
        return pe.StreamBroken(f"the connection to {where} broke mid-answer",
                               f"{kept}retry, or check the server")
    return pe.StreamBroken(f"{where} accepted the request, then closed the connection before "
                           "any answer text", "retry, or check the server's log")


def _is_connection_failure(exc: BaseException, litellm: Any) -> bool:
    """litellm reports a refused connection as an InternalServerError; look at the cause."""
    if isinstance(exc, litellm.Timeout):
        return False
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (ConnectionError, litellm.APIConnectionError)):
            return True
        name = type(current).__name__
        if name in ("ConnectError", "APIConnectionError"):
            return True
        current = current.__cause__ or current.__context__
    return bool(re.search(r"\bConnection (?:error|refused)\b", str(exc), re.I))


def _status(exc: Exception) -> int | None:
    """The HTTP status a provider answered with (Anthropic's 529 hides behind a 500)."""
    for name in ("provider_status_code", "status_code"):
        value = getattr(exc, name, None)
        if isinstance(value, int):
            return value
    return None


def _overloaded(exc: Exception, text: str) -> bool:
    """503 and 529 are a busy server (worth one wait); other 5xx are not."""
    return _status(exc) in (503, 529) or bool(re.search(r"\boverloaded", text, re.I))


def _retry_after(exc: Exception) -> float | None:
    """The Retry-After the provider sent: on the response litellm passes on, or, when it
    builds a stand-in response (Anthropic's 429 and 529), on `litellm_response_headers`."""
    response = getattr(exc, "response", None)
    for headers in (getattr(response, "headers", None),
                    getattr(exc, "litellm_response_headers", None)):
        try:
            value = (headers or {}).get("retry-after") or (headers or {}).get("Retry-After")
            if value is not None:
                return float(value)
        except (AttributeError, TypeError, ValueError):
            continue
    return None


# litellm's words when it stops a stream that repeats one chunk (streaming_handler.py)
_REPEATING = re.compile(r"model is repeating the same chunk", re.I)
_LITELLM_ADVICE = re.compile(r"\.?\s*Handle with `litellm\.\w+`\.?\s*$")
_BYTES_REPR = re.compile(r"b'\{.*\}'|b\"\{.*\}\"", re.S)


def _provider_words(text: str) -> str:
    """The provider's own message. litellm passes Anthropic's error body on as the repr of
    bytes (b'{"type": "error", "error": {"type": ..., "message": ...}}'), followed by its own
    advice ("Handle with `litellm.InternalServerError`."); keep the message alone."""
    text = _LITELLM_ADVICE.sub("", text)
    body = text
    try:
        if _BYTES_REPR.fullmatch(text):
            body = ast.literal_eval(text).decode("utf-8", "replace")
        error = json.loads(body).get("error")
        message = error.get("message") if isinstance(error, dict) else None
    except (ValueError, SyntaxError, AttributeError, TypeError, RecursionError):
        return text
    return message.strip() if isinstance(message, str) and message.strip() else text


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

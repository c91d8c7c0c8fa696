"""What every chat-completions provider shares, whoever carries the request: the messages and
answer cap a model gets, the stream read into typed events, the empty-stream probe, and the one
error translation (providers.translate).

Two carriers sit on it: `openai_compat.OpenAICompatProvider` speaks the OpenAI wire protocol
itself over httpx, for an OpenAI-compatible server at an `api_base` (llama.cpp, vLLM, LM Studio,
a gateway), so the first request never waits for litellm's import (2-3 s, 190 MiB); and
`litellm_provider.LiteLLMProvider` for every other model. A chunk is read the same way whether
it is litellm's object or the wire's JSON (`part`).
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any, AsyncIterator, Mapping

from picochat import tokens
from picochat.providers import errors as pe
from picochat.providers import keys, model_map, redact
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
from picochat.providers.thinking import ThinkSplitter, starts_inside
from picochat.providers.translate import CONNECTION, DROPPED, ErrorTranslator, transport_fault

log = logging.getLogger("picochat.providers")
READ_TIMEOUT_S = 60.0
# The most stream chunks one answer may take: twelve times the default answer cap in tokens,
# so a server that streams one character at a time without end is stopped in under a minute.
MAX_ANSWER_PIECES = 200_000
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


def part(obj: Any, name: str) -> Any:
    """A field of a chunk, read alike from litellm's objects and the wire's JSON."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


class ChatCompletionsProvider(Provider):
    """A provider whose replies are OpenAI-style chat-completion chunks. A carrier implements
    `_open` (the stream), `_fetch` (one unstreamed reply, for the probe) and `_server_counted`."""

    _opens_thinking = False  # learned: a reply ended thinking with `</think>` it never opened

    def __init__(self, model: str, provider_kind: str, api_base: str | None,
                 api_key: str | None, api_key_env: str | None, read_timeout: float,
                 extra: Mapping[str, Any] | None) -> None:
        self.info = ModelInfo(provider_kind=provider_kind, model=model)
        self.api_base = api_base
        self.api_key = api_key
        # The variable that supplies the key (or should), for the auth error's hint.
        self.api_key_env = api_key_env or keys.named_after(provider_kind)
        self.extra = dict(extra or {})
        self.keeps_thinking = wants_thinking_back(provider_kind, api_base)
        redact.register(api_key)  # masked in every error line and log record from now on
        self.read_timeout = read_timeout

    # --- what the model gets ---------------------------------------------------------------

    @functools.cached_property
    def max_output(self) -> int | None:
        """The model's output limit from litellm's map: read at the first request, not when
        the provider is made (the map is a 1 MB JSON, 20-40 ms before the first frame)."""
        return model_map.max_output_tokens(self.info.model)

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

    def _body(self, request: ProviderRequest) -> dict[str, Any]:
        """The request's fields as the chat-completions API names them, streamed."""
        body: dict[str, Any] = {
            "messages": [self._message(m) for m in request.messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [dict(t) for t in request.tools]
        if request.temperature is not None:
            body["temperature"] = request.temperature
        max_tokens = self._max_tokens(request.max_tokens)
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        return body

    def set_options(self, options: Mapping[str, Any]) -> None:
        self.extra.update(options)

    # --- what a carrier does ---------------------------------------------------------------

    async def _open(self, body: dict[str, Any], request: ProviderRequest) -> Any:
        """The stream for one request: an async iterator of chunks (with `aclose`); raises the
        carrier's exception, untranslated, when the request fails."""
        raise NotImplementedError

    async def _fetch(self, body: dict[str, Any], request: ProviderRequest) -> Any:
        """The same request unstreamed: the whole reply, or the carrier's exception."""
        raise NotImplementedError

    def _server_counted(self, stream: Any) -> bool:
        """Whether a usage figure in this stream came from the server (not made up)."""
        return True

    def _seen(self, stream: Any, chunk: Any) -> None:
        """Each chunk as it arrives, before it is read (a carrier's own bookkeeping)."""

    # --- the stream ------------------------------------------------------------------------

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamEvent]:
        body = self._body(request)
        try:
            response = await self._open(body, request)
        except Exception as exc:
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
                self._seen(response, chunk)
                usage = _usage(chunk)
                if usage is not None:
                    if self._server_counted(response):
                        heard = True
                        yield usage
                    else:  # litellm's own count: the budget's estimate is as good, and honest
                        log.info("stream_usage_not_reported model=%s", self.info.model)
                choices = part(chunk, "choices")
                if not isinstance(choices, (list, tuple)) or not choices:
                    continue
                choice = choices[0]
                delta = part(choice, "delta") or {}
                thought = part(delta, "reasoning_content") or part(delta, "reasoning")
                if thought and isinstance(thought, str):
                    heard = True
                    split.server_thinks()
                    yield ThinkingDelta(thought)
                text = part(delta, "content")
                if text and isinstance(text, str):
                    heard = True
                    for piece in split.feed(text):
                        if isinstance(piece, TextDelta):
                            received += len(piece.text)  # answer text: thinking is not kept
                        yield piece
                for call in _calls(part(delta, "tool_calls")):
                    heard = True
                    yield _tool_call_delta(call)
                if part(choice, "finish_reason"):
                    finish = str(part(choice, "finish_reason"))
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
            async for event in self._probe(body, request):
                yield event
            return
        yield Finish(finish)

    async def _probe(self, body: dict[str, Any],
                     request: ProviderRequest) -> AsyncIterator[StreamEvent]:
        """The same request once more, without streaming, after a stream that ended with no
        text, no tool call and no usage. llama-cpp-python's server answers a streamed request
        over its context with `200` and an empty body (the error only reaches its own log);
        unstreamed, the same server says `400 maximum context length is N`. So the probe
        surfaces the real error (an overflow the session recovers from), or, if the server
        answers after all, that answer."""
        plain = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        plain["stream"] = False
        for attempt in (1, 2):
            try:
                response = await self._fetch(plain, request)
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
        choices = part(response, "choices")
        choice = choices[0] if isinstance(choices, (list, tuple)) and choices else None
        message = part(choice, "message") if choice is not None else None
        text = part(message, "content") if message is not None else None
        thought = part(message, "reasoning_content") if message is not None else None
        split = ThinkSplitter(self._opens_thinking or starts_inside(self.info.model))
        if thought and isinstance(thought, str):
            split.server_thinks()
            yield ThinkingDelta(thought)
        for piece in [*split.feed(text if isinstance(text, str) else ""), *split.flush()]:
            yield piece
        for index, call in enumerate(_calls(part(message, "tool_calls")
                                            if message is not None else None)):
            yield _tool_call_delta(call, index)
        usage = _usage(response)
        if usage is not None:
            yield usage
        yield Finish(str((part(choice, "finish_reason") if choice is not None else None)
                         or "stop"))

    # --- failures --------------------------------------------------------------------------

    def translate(self, exc: Exception, request: ProviderRequest | None = None,
                  received: int | None = None) -> pe.ProviderError:
        """`exc` as one clear line (providers/translate.py)."""
        return self._errors().translate(exc, request, received)

    def _errors(self) -> ErrorTranslator:
        """The error translator for this provider as it stands (litellm's carrier learns the
        key's variable only at the first request)."""
        return ErrorTranslator(self.info, self.api_base, self.api_key_env, self._redact,
                               self.request_tokens, read_timeout=self.read_timeout)

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
    usage = part(reply, "usage")
    if not usage or part(usage, "prompt_tokens") is None:
        return None
    try:
        return Usage(int(part(usage, "prompt_tokens") or 0),
                     int(part(usage, "completion_tokens") or 0))
    except (TypeError, ValueError, OverflowError):  # figures that are not counts: none
        return None


def _calls(value: Any) -> list[Any]:
    """A delta's tool calls: a list of objects or mappings; anything else a server sends in
    their place (a string, a number) is no call at all."""
    if not isinstance(value, (list, tuple)):
        return []
    return [c for c in value if isinstance(c, Mapping) or hasattr(c, "function")]


def _tool_call_delta(call: Any, index: int | None = None) -> ToolCallDelta:
    """A streamed tool-call fragment, or a whole call from an unstreamed reply, as our type."""
    fn = part(call, "function")
    at = part(call, "index")
    name = part(fn, "name") if fn else None
    arguments = (part(fn, "arguments") or "") if fn else ""
    call_id = part(call, "id")
    return ToolCallDelta(index=int(at if isinstance(at, int) else (index or 0)),
                         id=call_id if isinstance(call_id, str) else None,
                         name=name if isinstance(name, str) else None,
                         arguments=arguments if isinstance(arguments, str) else "")

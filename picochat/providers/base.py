"""What every provider implements, and the typed events its stream yields.

Callers never see litellm types: a stream is `ThinkingDelta`/`TextDelta`/`ToolCallDelta` parts,
then `Usage` when the provider reports it, then exactly one `Finish`. Failures are
`ProviderError`s (`picochat.providers.errors`).

Thinking (a reasoning model's `reasoning_content`, or its inline `<think>…</think>` text) is its
own event: it is shown while it streams and never becomes the answer. For plain turns no
provider wants it back: OpenAI-compatible servers (vLLM, llama.cpp, Ollama) ignore or drop
earlier thinking, and Anthropic's signed thinking blocks are needed only with extended thinking
switched on, which picochat never asks for. One provider does: DeepSeek in thinking mode
requires the thinking of every assistant message of a turn that called tools (the calls and the
answer after their results) to come back in later requests. A provider with `keeps_thinking` set
gets it: the session stores that thinking with those rows and their messages carry it as
`reasoning_content`; every other provider's request leaves the field out.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Mapping, Union

from picochat.providers.errors import StreamTooLarge
from picochat.providers.http_bounds import size_text

log = logging.getLogger("picochat.providers")


@dataclass(frozen=True)
class ProviderRequest:
    messages: tuple[dict[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...] = ()
    temperature: float | None = None
    max_tokens: int | None = None
    purpose: str = "turn"  # "turn" or "summary": summary requests never carry tools


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ThinkingDelta:
    """A piece of the model's thinking: shown, never part of the answer (module docstring)."""

    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A fragment of one tool call; fragments with the same `index` concatenate."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Finish:
    reason: str = "stop"  # "stop" | "length" | "tool_calls" | ...


StreamEvent = Union[ThinkingDelta, TextDelta, ToolCallDelta, Usage, Finish]


@dataclass(frozen=True)
class ModelInfo:
    """How the UI and logs name a provider's model."""

    provider_kind: str  # "offline", "openai", "anthropic", "ollama", ...
    model: str          # the model string sent to the provider
    offline: bool = False
    labels: tuple[str, ...] = field(default=())


class Provider(ABC):
    info: ModelInfo
    keeps_thinking: bool = False  # it wants the thinking of tool turns back (docstring)

    @abstractmethod
    def stream(self, request: ProviderRequest) -> AsyncIterator[StreamEvent]:
        """Yield the reply as typed events; raise `ProviderError` subclasses on failure."""

    async def warm_up(self) -> None:
        """Pay one-time start-up costs before the first real request (idempotent, never
        raises); awaited before a call's timeout starts."""

    async def aclose(self) -> None:
        """Release connections; called once when the session worker stops."""

    def set_options(self, options: Mapping[str, Any]) -> None:
        """Provider options sent with every request from now on (Ollama's `num_ctx`, which
        follows the window the session works with); a provider that takes none ignores them."""


@dataclass(frozen=True)
class Reply:
    """Everything one stream produced; `thinking` is kept apart from the answer `text`."""

    text: str
    tool_calls: tuple[ToolCallDelta, ...]
    usage: Usage | None
    finish: str | None
    thinking: str = ""


# The most one answer may hold, its text, thinking and tool-call arguments together (UTF-8):
# the size of the largest message picochat takes from the user. A model that never stops, or a
# server that streams without end, is cut off here, not when memory runs out.
MAX_ANSWER_BYTES = 32 << 20


async def collect(provider: Provider, request: ProviderRequest, timeout: float,
                  on_text: Callable[[TextDelta], None] | None = None,
                  on_thinking: Callable[[ThinkingDelta], None] | None = None) -> Reply:
    """Drain one stream, bounded in total by `timeout` seconds (`TimeoutError` past it) and in
    size by MAX_ANSWER_BYTES (`StreamTooLarge`; the stream is closed either way).

    `on_text` sees each text piece as it arrives, so a caller that is cancelled or times out
    still holds what came before; `on_thinking` sees each piece of thinking."""
    parts: list[str] = []
    thought: list[str] = []
    calls: list[ToolCallDelta] = []
    usage: Usage | None = None
    finish: str | None = None
    size = 0
    await provider.warm_up()  # one-time set-up is not the call's time
    events = provider.stream(request)
    try:
        async with asyncio.timeout(timeout):
            async for event in events:
                size += _answer_bytes(event)
                if size > MAX_ANSWER_BYTES:
                    raise answer_too_large(bool(parts))
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                    if on_text is not None:
                        on_text(event)
                elif isinstance(event, ThinkingDelta):
                    thought.append(event.text)
                    if on_thinking is not None:
                        on_thinking(event)
                elif isinstance(event, ToolCallDelta):
                    calls.append(event)
                elif isinstance(event, Usage):
                    usage = event
                elif isinstance(event, Finish):
                    finish = event.reason
                    break
    finally:
        await close_quietly(events)
    return Reply("".join(parts), tuple(calls), usage, finish, "".join(thought))


async def close_quietly(stream: Any) -> None:
    """Close a stream left early (its bound, a failure, a stop): the provider lets go of the
    connection now, and the server sees it, instead of whenever the stream is collected. A
    failure to close changes nothing the user is told."""
    close = getattr(stream, "aclose", None)
    if close is None:
        return
    try:
        await close()
    except Exception as exc:  # the call's own outcome, not the clean-up's, is the one to tell
        log.info("stream_close_failed kind=%s", type(exc).__name__)


def _answer_bytes(event: StreamEvent) -> int:
    """What an event adds to the answer's size: its text, thinking or call fragment."""
    if isinstance(event, (TextDelta, ThinkingDelta)):
        return len(event.text.encode("utf-8", "surrogatepass"))
    if isinstance(event, ToolCallDelta):
        return sum(len(s.encode("utf-8", "surrogatepass"))
                   for s in (event.arguments, event.name or "", event.id or ""))
    return 0


def answer_too_large(kept: bool, pieces: int | None = None) -> StreamTooLarge:
    """The line for an answer cut off at its bound: its size, or (`pieces`) its count of
    stream events."""
    what = (f"the server sent more than {pieces:,} pieces for one answer" if pieces is not None
            else f"the answer grew past {size_text(MAX_ANSWER_BYTES)} (text, thinking and tool "
                 "calls together)")
    so_far = "the answer so far is kept where it is; " if kept else ""
    return StreamTooLarge(f"{what}; stopped reading it", f"{so_far}ask for less at once, or "
                                                         "check the server")

"""What every provider implements, and the typed events its stream yields.

Callers never see litellm types: a stream is `TextDelta`/`ToolCallDelta` parts, then `Usage`
when the provider reports it, then exactly one `Finish`. Failures are `ProviderError`s
(`picochat.providers.errors`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Union


@dataclass(frozen=True)
class ProviderRequest:
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] = ()
    temperature: float | None = None
    max_tokens: int | None = None
    purpose: str = "turn"  # "turn" or "summary": summary requests never carry tools


@dataclass(frozen=True)
class TextDelta:
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


StreamEvent = Union[TextDelta, ToolCallDelta, Usage, Finish]


@dataclass(frozen=True)
class ModelInfo:
    """How the UI and logs name a provider's model."""

    provider_kind: str  # "offline", "openai", "anthropic", "ollama", ...
    model: str          # the model string sent to the provider
    offline: bool = False
    labels: tuple[str, ...] = field(default=())


class Provider(ABC):
    info: ModelInfo

    @abstractmethod
    def stream(self, request: ProviderRequest) -> AsyncIterator[StreamEvent]:
        """Yield the reply as typed events; raise `ProviderError` subclasses on failure."""

    async def aclose(self) -> None:
        """Release connections; called once when the session worker stops."""

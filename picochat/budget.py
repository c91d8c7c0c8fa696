"""ContextBudget: how full the next request is, and whether to compact first (design §7.2, §8).

Pure functions over numbers that were counted once, at append: nothing here tokenizes history.
The same `ContextBudget` value decides auto compaction and fills `/info` (§21.10).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from picochat.errors import PicochatError


@dataclass(frozen=True)
class BudgetLimits:
    """Configured and effective limits side by side (§8.2), so `/info` can show both."""

    configured_window: int
    window: int
    configured_reserve: int
    reserve: int
    configured_keep_recent: int
    keep_recent: int
    threshold: int


def effective_window(model_window: int, agent_limit: int | None) -> int:
    """§10.3, §21.14: an agent's limit may only tighten the model's window."""
    return model_window if agent_limit is None else min(model_window, agent_limit)


def budget_limits(model_window: int, agent_limit: int | None, reserve_tokens: int,
                  keep_recent_tokens: int) -> BudgetLimits:
    """§8.2 and §21.14: the agent only tightens; reserve and keep shrink with small windows."""
    window = effective_window(model_window, agent_limit)
    reserve = min(reserve_tokens, window // 2)
    threshold = window - reserve
    keep = min(keep_recent_tokens, threshold // 2)
    return BudgetLimits(model_window, window, reserve_tokens, reserve, keep_recent_tokens, keep,
                        threshold)


def should_compact(enabled: bool, context_tokens: int, threshold: int) -> bool:
    """The one auto-compaction rule (§8.3): strictly above the threshold, and only if enabled."""
    return enabled and context_tokens > threshold


@dataclass(frozen=True)
class CalibrationKey:
    """Identifies one exact request (§7.2); provider usage is reused only on a full match."""

    provider: str
    model: str
    context_generation: int
    last_raw_seq: int | None
    digest: str


def request_digest(messages: Iterable[Mapping[str, Any]],
                   tools: Iterable[Mapping[str, Any]] = ()) -> str:
    payload = json.dumps([list(messages), list(tools)], ensure_ascii=False, sort_keys=True,
                         separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RequestParts:
    """Token counts of each part of the next request (§7.2)."""

    system: int = 0
    tools: int = 0
    summary: int = 0
    raw_tail: int = 0
    current_input: int = 0

    @property
    def fixed(self) -> int:
        return self.system + self.tools

    @property
    def total(self) -> int:
        return self.system + self.tools + self.summary + self.raw_tail + self.current_input


@dataclass(frozen=True)
class ContextBudget:
    limits: BudgetLimits
    parts: RequestParts
    used_tokens: int
    usage_source: str  # "provider" (calibrated usage matched) or "estimate"

    @property
    def remaining_tokens(self) -> int:
        return max(0, self.limits.threshold - self.used_tokens)

    @property
    def over_window(self) -> bool:
        return self.used_tokens > self.limits.window

    def should_compact(self, enabled: bool) -> bool:
        return should_compact(enabled, self.used_tokens, self.limits.threshold)


class FixedContextExceedsBudget(PicochatError):
    """System prompt and tools alone reach the threshold: compaction cannot help (§8.4)."""

    kind = "fixed_context_exceeds_budget"

    def __init__(self, parts: RequestParts, threshold: int) -> None:
        super().__init__(
            f"the system prompt ({parts.system:,} tokens) and tool schemas ({parts.tools:,} "
            f"tokens) alone reach the compaction threshold of {threshold:,} tokens",
            "shorten the system prompt, disable tools, or use a model with a larger window")
        self.parts = parts
        self.threshold = threshold


def measure(limits: BudgetLimits, parts: RequestParts, key: CalibrationKey | None = None,
            last_usage: tuple[CalibrationKey, int] | None = None) -> ContextBudget:
    """The budget of the next request: provider-reported usage when the key matches field for
    field, else the conservative sum of stored per-message counts."""
    if parts.fixed >= limits.threshold:
        raise FixedContextExceedsBudget(parts, limits.threshold)
    if key is not None and last_usage is not None and last_usage[0] == key:
        return ContextBudget(limits, parts, last_usage[1], "provider")
    return ContextBudget(limits, parts, parts.total, "estimate")

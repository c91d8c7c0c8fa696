"""ContextMap: where the model's window goes, part by part (`/context`, a section of `/info`
and `picochat info`).

The parts are the budget's own (`RequestParts`, the same estimate auto compaction reads), with
the summary split into its prose and picochat's exact-fact ledger, then the answer's reserve and
the room left. When the server reported how long the last request really was, the difference
from the estimate is a part of its own, so the parts always add up to the figure the bar shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from picochat import tokens
from picochat.budget import ContextBudget, summary_tokens
from picochat.projection import ContextProjection



@dataclass(frozen=True)
class Part:
    key: str      # system, tools, pins, summary, facts, recent, queued, counted, reserve, free
    label: str
    tokens: int
    note: str = ""


@dataclass(frozen=True)
class ContextMap:
    window: int
    parts: tuple[Part, ...]

    @property
    def request(self) -> int:
        """The next request's tokens: every part but the answer's reserve and the free room."""
        return sum(p.tokens for p in self.parts if p.key not in ("reserve", "free"))

    def part(self, key: str) -> Part | None:
        return next((p for p in self.parts if p.key == key), None)

    def cells(self, width: int) -> list[tuple[str, int]]:
        """The stacked bar: (key, cells) for each part with tokens, in order, `width` cells in
        all; every part with tokens gets one cell at least, the rest by largest remainder."""
        shown = [p for p in self.parts if p.tokens > 0]
        total = sum(p.tokens for p in shown)
        if not shown or width <= 0 or total <= 0:
            return []
        width = max(width, len(shown))
        spare = width - len(shown)
        exact = [p.tokens / total * spare for p in shown]
        cells = [1 + int(x) for x in exact]
        left = width - sum(cells)
        for i in sorted(range(len(shown)), key=lambda i: exact[i] - int(exact[i]),
                        reverse=True)[:left]:
            cells[i] += 1
        return [(p.key, n) for p, n in zip(shown, cells)]

    def rows(self) -> list[tuple[str, str, str]]:
        """(label, "1,234 tokens · 15 %", note) for each part, the free room included."""
        out = []
        for p in self.parts:
            share = p.tokens / self.window * 100 if self.window else 0.0
            out.append((p.label, f"{p.tokens:,}  {share:4.1f} %", p.note))
        return out

    def line(self) -> str:
        """One line for the `/info` card: "system 289 · tools 323 · … · free 566"."""
        return " · ".join(f"{p.label} {p.tokens:,}" for p in self.parts if p.tokens
                          or p.key == "free")

    def as_dict(self) -> list[dict[str, Any]]:
        return [{"part": p.key, "tokens": p.tokens} for p in self.parts]


def context_map(budget: ContextBudget, projection: ContextProjection, searchable: bool,
                tools_note: str = "", queued: Sequence[str] = ()) -> ContextMap:
    """The map of the next request (`queued`: messages waiting to be sent after it, counted
    as the next request will carry them)."""
    lim, parts = budget.limits, budget.parts
    factor = lim.token_factor
    facts = 0
    if projection.summary:
        from picochat.ledger import without_ledger

        prose = tokens.scale(summary_tokens(without_ledger(projection.summary), searchable),
                             factor)
        facts = max(0, parts.summary - prose)
    waiting = sum(tokens.scale(tokens.count_message("user", text), factor) for text in queued)
    recent = len(projection.raw)
    estimated = parts.total + waiting
    counted = budget.used_tokens + waiting - estimated  # the server's count, where it gave one
    request = [
        Part("system", "system prompt", parts.system + parts.framing),
        Part("tools", "tool schemas", parts.tools, tools_note),
        Part("pins", "pins", parts.pins,
             f"{len(projection.pins)} pinned, never summarized" if projection.pins else ""),
        Part("summary", "summary", parts.summary - facts),
        Part("facts", "exact facts", facts, "picochat's ledger under the summary" if facts
             else ""),
        Part("recent", "recent messages", parts.raw_tail + parts.current_input,
             f"{recent} sent as they are" if recent else ""),
        Part("queued", "queued", waiting,
             f"{len(queued)} message{'s' if len(queued) != 1 else ''} waiting to be sent"
             if queued else ""),
    ]
    if counted:
        request.append(Part("counted", "server's count", counted,
                            "what the server counted past picochat's estimate"
                            if counted > 0 else "the server counted fewer"))
    used = sum(p.tokens for p in request)
    reserve = min(lim.reserve, max(0, lim.window - used))
    request += [Part("reserve", "answer reserve", reserve, "kept free for the answer"),
                Part("free", "free", max(0, lim.window - used - reserve),
                     "room before auto-compaction")]
    return ContextMap(lim.window, tuple(request))

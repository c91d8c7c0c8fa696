"""ContextUsage: the `/info` card, from the same ContextBudget that decides auto compaction, so
what /info says and when compaction runs can never disagree. Configured and effective values
side by side, so the adjustment of reserve and kept tail for a small window is never hidden.
Deterministic: nothing in it reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Sequence

from picochat import tokens
from picochat.budget import (
    AFTER_SHARE,
    RECENT_TURNS,
    CompactionRoom,
    ContextBudget,
    Forecast,
    UsageSource,
    compaction_forecast,
    compaction_room,
    pin_cap,
)
from picochat.compaction.report import DEGRADED_NOTE, POINTERS_NOTE, headline
from picochat.cutpoints import group_turns
from picochat.messages import Checkpoint, Message, Session
from picochat.models import ResolvedModel, WindowSource
from picochat.pins import pin_label
from picochat.projection import ContextProjection

if TYPE_CHECKING:
    from picochat.context_map import ContextMap

USAGE_SOURCES = {
    UsageSource.ESTIMATE: "estimate from stored counts",
    UsageSource.PROVIDER: "provider-reported",
    UsageSource.PROVIDER_AND_ESTIMATE: "provider-reported + tail estimate",
}


def forecast_text(forecast: Forecast) -> str:
    """The warning's words: "compacting in about 3 turns" (auto-compaction on), "the window
    fills in about 3 turns" (off); the next turn's, and before any turn, said so."""
    what = "compacting" if forecast.auto else "the window fills"
    n = forecast.in_turns
    if n is None:
        return f"{what} soon"
    if n <= 1:
        return f"{what} at the next turn"
    return f"{what} in about {n} turns"


def _source(budget: ContextBudget) -> str:
    """How the used figure was made; a family factor is named where the estimate used it."""
    said = USAGE_SOURCES.get(budget.usage_source, budget.usage_source)
    factor = budget.limits.token_factor
    if factor != 1.0 and budget.usage_source != UsageSource.PROVIDER:
        said += f", o200k × {factor:g}"
    return said


@dataclass(frozen=True)
class ContextUsage:
    session: Session
    model: ResolvedModel
    enabled: bool
    budget: ContextBudget
    projection: ContextProjection
    checkpoint: Checkpoint | None
    summary_model: ResolvedModel | None = None  # None: the chat model writes the summaries
    summary_number: int = 0  # the active checkpoint's number from the first ("Summary 3")
    files: str = ""  # where read_file may read, or why it is off ("": not offered)
    searchable: bool = False  # history_search is offered (the summary block says so)
    tools_note: str = ""      # what the tool schemas' row says (/context): `tools_line`

    @property
    def room(self) -> CompactionRoom:
        """What the next compaction may leave, part by part (its kept tail is the effective
        keep_recent)."""
        return compaction_room(self.budget.limits, self.budget.parts.fixed)

    @cached_property
    def forecast(self) -> Forecast | None:
        """Past the soft point: which turn reaches the compaction point (the bar's warning)."""
        lim = self.budget.limits
        sizes = [tokens.scale(turn.tokens, lim.token_factor)
                 for turn in group_turns(self.projection.raw)[-RECENT_TURNS:]]
        return compaction_forecast(self.budget.used_tokens, lim.threshold, self.enabled, sizes)

    @cached_property
    def map(self) -> "ContextMap":
        """Where the window goes, part by part (`/context`)."""
        return self.map_with(())

    def map_with(self, queued: Sequence[str]) -> "ContextMap":
        """The map with `queued` messages waiting behind the next request."""
        from picochat.context_map import context_map

        return context_map(self.budget, self.projection, self.searchable, self.tools_note,
                           queued)

    @property
    def warning(self) -> str:
        """The forecast in words ("compacting in about 3 turns"); "" below the soft point."""
        return forecast_text(self.forecast) if self.forecast else ""

    def as_dict(self) -> dict[str, Any]:
        from picochat.ledger import counts  # its regular expressions: not for the figures

        lim, cp, parts = self.budget.limits, self.checkpoint, self.budget.parts
        facts = counts(cp.ledger if cp else None)
        return {
            "session_id": self.session.id,
            "session_name": self.session.name,
            "model": self.model.name,
            "offline": self.model.offline,
            "summary_model": self.summary_model.name if self.summary_model else None,
            "window_source": (WindowSource.LEARNED if self.model.learned_window is not None
                              else self.model.window_source),
            "learned_window_tokens": self.model.learned_window,
            "tools_refused": self.model.tools_refused,
            "configured_window_tokens": lim.configured_window,
            "effective_window_tokens": lim.window,
            "configured_reserve_tokens": lim.configured_reserve,
            "reserve_tokens": lim.reserve,
            "configured_keep_recent_tokens": lim.configured_keep_recent,
            "effective_keep_recent_tokens": self.room.tail,
            "after_compaction_tokens": self.room.target,
            "summary_cap_tokens": self.room.prose,
            "ledger_share_tokens": self.room.ledger,
            "compression_threshold_tokens": lim.threshold,
            "auto_compaction_enabled": self.enabled,
            "used_tokens": self.budget.used_tokens,
            "remaining_tokens": self.budget.remaining_tokens,
            # past the soft point (85 % of the threshold): the turn that reaches it, 1 = next
            "compaction_in_turns": self.forecast.in_turns if self.forecast else None,
            "compaction_warning": self.warning or None,
            "usage_source": self.budget.usage_source,
            "token_factor": lim.token_factor,
            "parts": {"system": parts.system, "tools": parts.tools, "summary": parts.summary,
                      "raw_tail": parts.raw_tail, "framing": parts.framing,
                      "pins": parts.pins},
            "context_map": self.map.as_dict(),  # /context: the parts, reserve and free room
            "pins": [{"number": p.number, "tokens": p.tokens, "source_seq": p.source_seq}
                     for p in self.projection.pins],
            "pins_tokens": parts.pins,
            "pin_cap_tokens": pin_cap(lim),
            "active_checkpoint_id": cp.id if cp else None,
            "checkpoint_generation": cp.generation if cp else None,
            "checkpoint_tokens_before": cp.tokens_before if cp else None,
            "checkpoint_tokens_after": cp.tokens_after if cp else None,
            "checkpoint_degraded": bool(cp.degraded) if cp else None,
            "facts_kept": facts.kept if cp else None,
            "facts_dropped": facts.dropped if cp else None,
            "first_retained_seq": cp.first_retained_seq if cp else None,
            "context_generation": self.session.context_generation,
            "raw_messages_in_context": len(self.projection.raw),
            "raw_messages_total": self.session.message_count,
            "fixed_exceeds_threshold": self.budget.fixed_exceeds_threshold,
            "diagnostics": list(self.projection.diagnostics),
        }

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) lines of the text card; the TUI shows the same rows."""
        lim, b, cp = self.budget.limits, self.budget, self.checkpoint

        def side(effective: int, configured: int) -> str:
            return f"{effective:,}" + (f"  (configured {configured:,})"
                                       if configured != effective else "")

        model = self.model.label + ("  (built-in offline model)" if self.model.offline else "")
        rows = [
            ("Session", f"{self.session.name} ({self.session.id})"),
            ("Model", model),
            ("Summaries by", self.summary_model.label if self.summary_model
             else "the chat model"),
            ("Context window", side(lim.window, lim.configured_window)
             + f"  [{self.model.window_said}]"),
            ("Reserve", side(lim.reserve, lim.configured_reserve)),
            ("Keep recent", "at least " + side(self.room.tail, lim.configured_keep_recent)
             if self.room.tail else "the newest turn only (no room for more under 60 %; "
             f"configured {lim.configured_keep_recent:,})"),
            ("Auto-compact at", f"{lim.threshold:,}"
             + ("" if self.enabled else "  (auto compaction off)")),
            ("After compacting", (
                f"at most {self.room.target:,} ({AFTER_SHARE:.0%} of the threshold): summary "
                f"{self.room.prose:,}, exact facts {self.room.ledger:,}, recent turns "
                f"{self.room.tail:,}") if self.room.tail else (
                f"{self.room.target:,} ({AFTER_SHARE:.0%} of the threshold) plus the newest "
                f"turn: summary {self.room.prose:,}, exact facts {self.room.ledger:,}")),
            ("Pins", self._pins()),
            *((("Files", self.files),) if self.files else ()),
            ("Used", f"{b.used_tokens:,}  ({_source(b)})"),
            ("Where it goes", self.map.line() + "  (/context draws it)"),
            ("Left before auto", f"{b.remaining_tokens:,}"
             + (f"  ({self.warning})" if self.warning else "")),
        ]
        cleared_at = self.session.context_floor_seq
        if cp is not None:
            rows.append(("Summary in use", headline(cp, self.summary_number, cleared_at)))
            if cp.degraded:
                rows.append(("", DEGRADED_NOTE))
            elif cp.pointers:
                rows.append(("", POINTERS_NOTE))
            rows.append(("Compacted", f"{cp.tokens_before:,} → {cp.tokens_after:,} tokens, "
                                      "when it was written"))
            from picochat.ledger import counts

            facts = counts(cp.ledger)
            rows.append(("Exact facts", f"{facts.kept:,} kept"
                         + (f", {facts.dropped:,} dropped to fit (history_search finds them)"
                            if facts.dropped else ", none dropped")))
        else:
            rows.append(("Summary in use", "none"))
        rows.append(("Sent as they are", self._sent()))
        rows.append(("History", f"{self.session.message_count:,} messages, unchanged"))
        if self.model.tools_refused:
            rows.append(("Tools", "off: this model's server refuses requests that offer tools"))
        if b.fixed_exceeds_threshold:
            what = "the system prompt, tools and pins" if b.parts.pins else \
                "the system prompt and tools"
            rows.append(("Warning", f"{what} alone ({b.parts.fixed:,} tokens) reach the "
                                    "threshold: compaction cannot help"))
        elif b.parts.pins > pin_cap(lim):
            rows.append(("Warning", f"the pins take {b.parts.pins:,} tokens, over their cap of "
                                    f"{pin_cap(lim):,} at this window: /unpin one"))
        rows.extend(("Warning", d) for d in self.projection.diagnostics)
        return rows

    def pins_lines(self) -> list[str]:
        """The pins for the checkpoint panel: a headline with their cost, one line each."""
        pins, cap = self.projection.pins, pin_cap(self.budget.limits)
        if not pins:
            return [f"None. /pin TEXT, or alt+p on a selected message, keeps a statement word "
                    f"for word in every request (pins may take {cap:,} tokens)."]
        head = (f"{len(pins)} in every request, never summarized: "
                f"{self.budget.parts.pins:,} of {cap:,} tokens · /unpin N removes one")
        return [head] + [pin_label(p, 60) for p in pins]

    def _pins(self) -> str:
        """How many pins ride in every request and what they cost, against their cap."""
        pins, cap = self.projection.pins, pin_cap(self.budget.limits)
        if not pins:
            return f"none (/pin TEXT keeps a statement in every request; up to {cap:,} tokens)"
        listed = ", ".join(f"#{p.number}" for p in pins)
        return (f"{len(pins)} ({listed}): {self.budget.parts.pins:,} tokens of every request, "
                f"never summarized (cap {cap:,})")

    def _sent(self) -> str:
        """The messages the model reads word for word: after the summary, or after a /clear,
        or the whole conversation."""
        n, floor = len(self.projection.raw), self.session.context_floor_seq
        if n == 0:
            return f"none: /clear after message {floor} started afresh" if floor else "none yet"
        first = self.checkpoint.first_retained_seq if self.checkpoint is not None else floor + 1
        said = f"{n:,} message{'s' if n != 1 else ''}"
        return said + (f", from message {first} on" if first > 1 else "")

    def text(self) -> str:
        width = max(len(label) for label, _ in self.rows()) + 2
        return "\n".join(f"{label:<{width}}{value}" for label, value in self.rows())


@dataclass(frozen=True)
class ContextPanel:
    """What the checkpoint panel shows: every checkpoint, which is in force, the context's
    size at each user turn (the sparkline) and the pins, read together; and the last summary
    the gate refused since the last one it passed."""

    checkpoints: tuple[Checkpoint, ...]
    active_id: str | None
    series: tuple[int, ...]
    floor_seq: int
    pins: tuple[str, ...]
    refused: RefusedSummary | None = None
    branches: tuple[str, ...] = ()  # one line a branch, once there is more than one


@dataclass(frozen=True)
class RefusedSummary:
    """A summary the quality gate refused: why, what the model wrote, which model (kept by
    the session's worker in memory until a summary passes: never stored, never logged)."""

    reason: str
    text: str
    by: str


def context_series(messages: Sequence[Message], checkpoints: Sequence[Checkpoint],
                   fixed: int = 0, factor: float = 1.0) -> list[int]:
    """Context tokens at each user turn, from stored counts: the system prompt and tools
    (`fixed`) and every row so far, or a checkpoint's `tokens_after` once it is active (from
    its source_max_seq on; it counts the fixed part too) plus every row after it; rows in the
    model's tokens (`factor`), as the budget counts them. A compaction shows as a drop (the
    checkpoint panel's sparkline), measured on the same scale as the top bar's figures."""
    pending = sorted(checkpoints, key=lambda c: c.source_max_seq)
    out: list[int] = []
    running = fixed
    for m in messages:
        while pending and pending[0].source_max_seq < m.seq:
            running = pending.pop(0).tokens_after
        running += tokens.scale(m.tokens, factor)
        if m.role == "user":
            out.append(running)
    return out

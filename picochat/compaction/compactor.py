"""ContextCompactor: choose the cut, summarize once, return a candidate.

It reads a projection and calls the provider; it never writes. What it folds is exactly the
previous summary plus the raw messages from the old `first_retained_seq` up to the new one:
the raw rows an earlier checkpoint already covered are never sent again, and the rows that
checkpoint kept are never skipped.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from picochat import ledger as fact_ledger
from picochat import tokens
from picochat.budget import (
    MIN_PROSE,
    BudgetLimits,
    CompactionRoom,
    RequestDraft,
    compaction_room,
    estimate,
)
from picochat.compaction.candidate import (
    RETRY_HINT,
    CompactionCandidate,
    SummaryRejected,
    validate,
)
from picochat.compaction.gate import check_summary
from picochat.compaction.prompt import prompt_overhead, summary_request
from picochat.compaction.transcript import SummaryBudget, Transcript, serialize, summary_budget
from picochat.cutpoints import find_cut_point, group_turns
from picochat.errors import PicochatError
from picochat.ledger import Ledger
from picochat.messages import Message, StoredLedger
from picochat.projection import ContextProjection
from picochat.providers.base import Provider, Usage, collect
from picochat.providers.errors import ProviderError

MIN_SOURCE_TOKENS = 64   # a window leaving less than this for the transcript cannot summarize
LEDGER_MARGIN = 8        # tokens kept free under the limit when the ledger fills the room
LEDGER_HEADING_TOKENS = 8  # "\n\n## Exact Facts\n" and a line's join, beside the ledger's rows


SUMMARY_TIMEOUT_S = 600.0


class SummaryFailed(PicochatError):
    """The one summary call did not produce a summary (provider error, timeout, tiny window)."""

    kind = "summary_failed"


@dataclass(frozen=True)
class CompactionPlan:
    """Where to cut, and what the summary call will read."""

    parent_checkpoint_id: str | None
    base_generation: int
    previous_summary: str | None
    previous_ledger: StoredLedger  # the active checkpoint's ledger rows (empty without one)
    span: tuple[Message, ...]     # raw messages to fold: old first_retained_seq .. new - 1
    kept: tuple[Message, ...]     # the raw tail from the new first_retained_seq
    kept_turns: int
    first_retained_seq: int
    source_max_seq: int


def plan_compaction(projection: ContextProjection, keep_tokens: int) -> CompactionPlan | None:
    """The cut for this projection, or None when there is nothing new to fold.

    A turn still in progress (its user message sent, no answer yet: the auto check before a
    turn) does not count as the newest whole turn, so the last answered one stays raw too.
    """
    turns = group_turns(projection.raw)
    in_progress = bool(turns) and all(m.role == "user" for m in turns[-1].messages)
    index = find_cut_point(turns, keep_tokens, min_turns=2 if in_progress else 1)
    if index is None:
        return None
    first = turns[index].first_seq
    if projection.first_raw_seq is not None and first <= projection.first_raw_seq:
        return None
    kept = tuple(m for t in turns[index:] for m in t.messages)
    # Rows the tool-chain rule left out of the context (an incomplete group, an orphan result)
    # still belong to the history before the cut: the summary reads them.
    left_out = [r.message for r in projection.repairs
                if r.message is not None and r.seq < first]
    span = tuple(sorted([m for t in turns[:index] for m in t.messages] + left_out,
                        key=lambda m: m.seq))
    return CompactionPlan(projection.checkpoint_id, projection.context_generation,
                          projection.summary, projection.ledger, span, kept,
                          len(turns) - index, first, projection.max_raw_seq)


@dataclass(frozen=True)
class Summary:
    text: str
    transcript: Transcript
    budget: SummaryBudget
    usage: Usage | None
    finish_reason: str | None
    ledger: Ledger                # the exact facts of the previous ledger and the span
    shares: CompactionRoom        # what the compacted context may spend on each part


@dataclass(frozen=True)
class SummaryDraft:
    """A summary as written, before the quality gate: the model's reply, or the user's edit
    of it (`finish_reason` None), with what the gate and the candidate need beside it."""

    text: str
    transcript: Transcript
    budget: SummaryBudget
    usage: Usage | None
    finish_reason: str | None
    ledger: Ledger
    shares: CompactionRoom
    max_tokens: int               # the prose cap the request asked for


@dataclass(frozen=True)
class SummaryModel:
    """The model that writes summaries when it is not the chat model
    (`[context_compaction] summary_model`): its own provider, window and token family."""

    provider: Provider
    window: int
    token_factor: float = 1.0
    reasoning: bool = False   # it thinks before it writes (see `summary_budget`)


class ContextCompactor:
    """Plans, summarizes and validates; the session's provider does the one call."""

    def __init__(self, provider: Provider, limits: BudgetLimits, system_prompt: str,
                 tools: tuple[Mapping[str, Any], ...] = (), instructions: str = "",
                 timeout: float = SUMMARY_TIMEOUT_S,
                 summary_model: SummaryModel | None = None, reasoning: bool = False) -> None:
        self.provider = provider
        self.summary_model = summary_model
        self.reasoning = reasoning  # the chat model thinks (when it writes the summaries)
        self.limits = limits
        self.system_prompt = system_prompt
        self.tools = tools
        self.instructions = instructions
        self.timeout = timeout
        # one compaction carries and fits the same ledger several times (the cut, tier one,
        # the prose cap, the merge): each is computed once (over 200K tokens a carry is ~50 ms)
        self._carried: dict[tuple[int, tuple[int, ...]], tuple[StoredLedger, Ledger]] = {}
        self._fitted: dict[tuple[int, int], tuple[Ledger, Ledger]] = {}

    def carry(self, previous: StoredLedger, span: Sequence[Message]) -> Ledger:
        """`previous` carried over `span` (`ledger.carry`), once per span."""
        key = (id(previous), tuple(m.seq for m in span))
        hit = self._carried.get(key)
        if hit is None or hit[0] is not previous:
            hit = self._carried[key] = (previous, fact_ledger.carry(
                fact_ledger.from_stored(previous), span))
        return hit[1]

    def fit(self, ledger: Ledger, budget: int) -> Ledger:
        """`ledger.fit`, once per ledger and budget."""
        key = (id(ledger), budget)
        hit = self._fitted.get(key)
        if hit is None or hit[0] is not ledger:
            hit = self._fitted[key] = (ledger, fact_ledger.fit(ledger, budget))
        return hit[1]

    def room(self, projection: ContextProjection) -> CompactionRoom:
        """What a compaction of `projection` may leave: the shares of ledger, prose and tail."""
        fixed = estimate(self.limits, RequestDraft(self.system_prompt, projection,
                                                   self.tools)).fixed
        return compaction_room(self.limits, fixed)

    def plan(self, projection: ContextProjection) -> CompactionPlan | None:
        """The cut that keeps `keep_tokens` raw. A fitted ledger is not monotonic in its fold
        (a correction retires a line, a fold that stops short of it keeps the line): where
        the fold this cut makes needs more of the ledger's share than the estimate left it,
        the tail gives way and the cut is made again, so the two stay within the share."""
        room = self.room(projection)
        keep = self.keep_tokens(projection, room)
        for _ in range(4):
            plan = plan_compaction(projection, self.limits.counted(keep))
            if plan is None:
                return None
            less = room.with_spare(self._ledger_need(plan.previous_ledger, plan.span, room),
                                   self.limits.keep_recent)
            if less >= keep:
                return plan
            keep = less
        return plan_compaction(projection, self.limits.counted(keep))

    def keep_tokens(self, projection: ContextProjection,
                    room: CompactionRoom | None = None) -> int:
        """The raw tail a compaction of `projection` keeps: the room's tail, and what the
        ledger leaves of its share (keep_recent_tokens at most), for the ledger of the
        largest fold there could be, all but the newest turn (`plan` checks the real fold's)."""
        room = room or self.room(projection)
        turns = group_turns(projection.raw)
        most = [m for t in turns[:-1] for m in t.messages]
        return room.with_spare(self._ledger_need(projection.ledger, most, room),
                               self.limits.keep_recent)

    def _ledger_need(self, previous: StoredLedger, span: Sequence[Message],
                     room: CompactionRoom) -> int:
        """The tokens the ledger of `previous` carried over `span` takes, fitted to its share."""
        ledger = self.fit(self.carry(previous, span), self.limits.counted(room.ledger))
        return tokens.scale(tokens.count_text(fact_ledger.render_text(ledger)),
                            self.limits.token_factor)

    def plan_all(self, projection: ContextProjection) -> CompactionPlan | None:
        """`/compact all`: the cut that keeps raw only what is always kept, the newest whole
        turn, however many tokens `keep_recent` would keep."""
        return plan_compaction(projection, 0)

    async def summarize(self, plan: CompactionPlan, shares: CompactionRoom,
                        focus: str | None = None, room: int | None = None) -> Summary:
        """`write` a summary and `check` it: raises `SummaryFailed` or `SummaryRejected`."""
        return self.check(await self.write(plan, shares, focus, room))

    async def write(self, plan: CompactionPlan, shares: CompactionRoom,
                    focus: str | None = None, room: int | None = None) -> SummaryDraft:
        """One provider call: no tools, low temperature, output capped. The summary model's
        window bounds the transcript; the summary lands in the chat model's context, so the
        smaller window of the two bounds its cap, and `shares.prose` bounds it further.
        `room`: what the context leaves for the whole summary (see `prose_cap`).

        A reasoning model's thinking counts against `max_tokens`, so its request asks for the
        prose cap plus room to think; the summary's own size is still held to the prose cap.
        Its thinking never becomes the summary: the provider streams it apart."""
        model = self.summary_model or SummaryModel(self.provider, self.limits.window,
                                                   self.limits.token_factor, self.reasoning)
        overhead = tokens.scale(prompt_overhead(focus, self.instructions), model.token_factor)
        budget = summary_budget(model.window, overhead, shares.prose,
                                reasoning=model.reasoning)
        if budget.source_budget < MIN_SOURCE_TOKENS:
            raise SummaryFailed(
                f"the model's window ({model.window:,} tokens) is too small for a summary "
                "request", "use a model with a larger window")
        transcript = serialize(plan.previous_summary, plan.span,
                               int(budget.source_budget / model.token_factor))
        ledger = self.ledger_of(plan)
        max_tokens = self.prose_cap(budget.output_reserve, ledger, shares.ledger, room)
        request = summary_request(transcript.text, max_tokens + budget.reasoning, focus,
                                  self.instructions)
        try:
            reply = await collect(model.provider, request, self.timeout)
        except TimeoutError:
            raise SummaryFailed(f"the summary call took longer than {self.timeout:g} s",
                                "the previous context is unchanged; try again") from None
        except ProviderError as exc:
            raise SummaryFailed(f"the summary call failed: {exc.message}",
                                exc.hint or "the previous context is unchanged") from exc
        return SummaryDraft(reply.text, transcript, budget, reply.usage, reply.finish, ledger,
                            shares, max_tokens)

    def check(self, draft: SummaryDraft) -> Summary:
        """The quality gate over a written summary, the model's or the user's edit of it:
        the summary normalized, or `SummaryRejected` (which keeps the refused text, so the
        user may read what it was)."""
        try:
            text = check_summary(draft.text, draft.transcript.text, max_tokens=draft.max_tokens,
                                 finish=draft.finish_reason)
        except SummaryRejected as exc:
            exc.summary = draft.text
            raise
        return Summary(text, draft.transcript, draft.budget, draft.usage, draft.finish_reason,
                       draft.ledger, draft.shares)

    def prose_cap(self, reserve: int, ledger: Ledger, share: int, room: int | None) -> int:
        """The model's output cap: facts first. When the context has less `room` for the
        summary than prose and ledger could take, the prose gives way (to a third of its cap
        at least): a fact cannot be rebuilt from prose, prose can be rebuilt from facts and
        the raw history."""
        if room is None:
            return reserve
        facts = tokens.count_text(fact_ledger.render_text(
            self.fit(ledger, self.limits.counted(share))))
        left = room - tokens.scale(facts, self.limits.token_factor) - LEDGER_MARGIN
        return max(min(reserve, MIN_PROSE), min(reserve, left))  # under that, no nine headings

    def ledger_of(self, plan: CompactionPlan) -> Ledger:
        """The previous checkpoint's ledger carried over the span this plan folds."""
        return self.carry(plan.previous_ledger, plan.span)

    def with_ledger(self, text: str, ledger: Ledger, projection: ContextProjection,
                    limit: int, share: int) -> tuple[str, Ledger]:
        """`text` with `ledger` under the summary's last heading, `## Exact Facts`, and the
        ledger as fitted: to its `share` of the context and to the room `projection` (with
        the result as its summary) leaves under `limit`; the oldest facts go first, and the
        summary says how many. The model's own copies of a fact the ledger keeps are left
        out, so a fact is not paid for twice."""
        budget = self.limits.counted(share)
        for _ in range(6):
            fitted = self.fit(ledger, max(0, budget))
            merged = fact_ledger.merge_into(text, fitted)
            over = self.tokens_of(dataclasses.replace(projection, summary=merged)) - limit
            if over <= 0 or not fitted.facts:
                return merged, fitted  # fits, or nothing left to evict: validate decides
            budget = min(budget, tokens.count_text(fact_ledger.render_text(fitted))) \
                - self.limits.counted(over) - LEDGER_MARGIN
        return merged, fitted

    def kept_alone(self, plan: CompactionPlan, projection: ContextProjection) -> int:
        """The request size with the kept tail and no summary at all: the floor any summary
        of this plan can reach."""
        return self.tokens_of(dataclasses.replace(projection, summary=None, raw=plan.kept))

    def tokens_of(self, projection: ContextProjection) -> int:
        """The estimated size of the next request over `projection` (the budget's own sum)."""
        return estimate(self.limits, RequestDraft(self.system_prompt, projection, self.tools)).total

    def candidate(self, plan: CompactionPlan, projection: ContextProjection, summary: Summary,
                  reason: str, tokens_before: int,
                  limit: int | None = None) -> CompactionCandidate:
        """The validated candidate of `plan` with `summary` and its ledger; raises
        `SummaryRejected`.

        `limit` is the size the result must reach: the threshold, or for overflow recovery
        the hard window (a real summary that fits beats dropping turns without one)."""
        limit = self.limits.threshold if limit is None else limit
        hint = RETRY_HINT
        if not summary.text.strip():  # a ledger alone is no summary
            raise SummaryRejected("the model returned an empty summary", hint)
        size = tokens.count_text(summary.text)
        if size > summary.budget.output_reserve:  # the ledger's share is not the model's
            over = SummaryRejected(f"the summary is {size:,} tokens, over its cap of "
                                   f"{summary.budget.output_reserve:,}", hint)
            over.summary = summary.text
            raise over
        after = dataclasses.replace(projection, raw=plan.kept,
                                    first_raw_seq=plan.first_retained_seq)
        text, fitted = self.with_ledger(summary.text, summary.ledger, after,
                                        min(limit, tokens_before - 1),  # it must shrink
                                        summary.shares.ledger)
        after = dataclasses.replace(after, summary=text)
        candidate = CompactionCandidate(
            parent_checkpoint_id=plan.parent_checkpoint_id, base_generation=plan.base_generation,
            summary=text, first_retained_seq=plan.first_retained_seq,
            source_max_seq=plan.source_max_seq, reason=reason, tokens_before=tokens_before,
            tokens_after=self.tokens_of(after), degraded=False, kept_turns=plan.kept_turns,
            ledger=fact_ledger.to_stored(fitted))
        # the prose's cap, the ledger's share, and the ledger's own heading between them
        cap = summary.budget.output_reserve + summary.shares.ledger + LEDGER_HEADING_TOKENS
        validate(candidate, [m.seq for m in projection.raw], plan.kept, cap, limit)
        return candidate

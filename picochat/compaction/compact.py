"""compact_context: the one compaction entry point, shared by `/compact`, the automatic check
before each turn and overflow recovery, so the three can never drift apart.

1. One consistent snapshot of the context (a single read transaction: the short lock).
2. Plan and summarize outside any lock: other processes may append meanwhile.
3. Commit with a compare-and-set on the generation; a `/clear` or undo in between makes the
   candidate stale and nothing is written.
4. Re-project from the durable log, so messages appended during the summary call appear.
5. A timeline row (what `timeline_recall` searches), best effort after the commit: its failure
   never undoes the checkpoint. None for a degraded checkpoint, which has no summary.
6. One `CompactOutcome` for every caller.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Callable, Mapping

from picochat import ledger as fact_ledger
from picochat import tokens
from picochat.budget import (
    BudgetLimits,
    RequestDraft,
    check_fixed,
    estimate,
    retry_growth,
    worth_compacting,
)
from picochat import crashpoints
from picochat.compaction.candidate import CompactionCandidate, NoGain, SummaryRejected
from picochat.budget import CompactionRoom
from picochat.compaction.compactor import (
    CompactionPlan,
    ContextCompactor,
    SummaryDraft,
    SummaryFailed,
    SummaryModel,
)
from picochat.compaction.degraded import trim_candidate
from picochat.compaction.pointers import pointer_candidate
from picochat.compaction.transcript import Transcript
from picochat.compaction.trim_failure import trim_impossible
from picochat.errors import PicochatError
from picochat.messages import (
    POINTERS_KIND,
    POINTERS_MODEL,
    Checkpoint,
    CompactionWait,
    TriggerReason,
)
from picochat.projection import ContextProjection, project, restore
from picochat.providers.base import Provider
from picochat.statements import PASTE
from picochat.storage.sql import CHECKPOINT_KEY
from picochat.storage.store import Store

log = logging.getLogger("picochat.compaction")

class CompactStatus(StrEnum):
    """How a compaction ended (`picochat compact --json` prints it as `status`)."""

    COMPACTED = "compacted"
    NOTHING_TO_COMPACT = "nothing_to_compact"
    FAILED = "failed"


COMPACTED = CompactStatus.COMPACTED
NOTHING_TO_COMPACT = CompactStatus.NOTHING_TO_COMPACT
FAILED = CompactStatus.FAILED


class CompactMode(StrEnum):
    """What a compaction may do to make room."""

    SUMMARY = "summary"                  # a summary, or nothing: a failure keeps the context
    SUMMARY_OR_TRIM = "summary_or_trim"  # a summary, else drop whole old turns (degraded)
    TRIM = "trim"                        # drop whole old turns: the turn already tried a summary

    @property
    def tries_summary(self) -> bool:
        return self is not CompactMode.TRIM

    @property
    def may_trim(self) -> bool:
        return self is not CompactMode.SUMMARY


@dataclass(frozen=True)
class CompactRequest:
    session_id: str
    reason: TriggerReason
    limits: BudgetLimits
    system_prompt: str
    tools: tuple[Mapping[str, Any], ...] = ()
    focus: str | None = None          # `/compact <focus>`
    everything: bool = False          # `/compact all`: fold all but the newest turn
    instructions: str = ""            # [context_compaction].instructions
    mode: CompactMode = CompactMode.SUMMARY
    timeout: float = 600.0
    summary_model: SummaryModel | None = None  # None: the chat model summarizes
    reasoning: bool = False           # the chat model thinks first (room in its summary cap)


@dataclass(frozen=True)
class CompactOutcome:
    status: CompactStatus
    reason: TriggerReason
    projection: ContextProjection     # the context now in effect (re-projected after a commit)
    checkpoint: Checkpoint | None = None
    kept_turns: int = 0
    tokens_before: int = 0
    error: PicochatError | None = None
    summary_error: PicochatError | None = None  # why a degraded trim was needed, if it was
    transcript: Transcript | None = None
    summary_called: bool = False      # a summary request was sent (a turn sends at most one)
    facts_dropped: int = 0            # exact facts this compaction evicted from the ledger
    keep_tokens: int = 0              # the raw tail it meant to keep (the room's, see budget)
    deferred: str | None = None       # why an automatic compaction waits (no call was made)
    pastes_folded: int = 0            # pasted blocks this compaction kept as pointer lines
    tool_pointers: int = 0            # tier one: tool results it folded as pointer lines
    waits_for: int = 0                # a failed automatic summary: tokens of growth before
    # the next automatic try (`CompactionWait`)

    @property
    def compacted(self) -> bool:
        return self.status == COMPACTED

    @property
    def degraded(self) -> bool:
        return bool(self.checkpoint and self.checkpoint.degraded)

    def as_dict(self) -> dict[str, Any]:
        """The `--json` shape of `picochat compact` that scripts rely on, plus reason and
        error."""
        cp = self.checkpoint
        return {
            "status": self.status,
            "reason": self.reason,
            "checkpoint_id": cp.id if cp else None,
            "tokens_before": cp.tokens_before if cp else None,
            "tokens_after": cp.tokens_after if cp else None,
            "first_retained_seq": cp.first_retained_seq if cp else None,
            "kept_turns": self.kept_turns if cp else None,
            "degraded": bool(cp.degraded) if cp else False,
            "facts_dropped": self.facts_dropped,
            "pastes_folded": self.pastes_folded,
            "tool_pointers": self.tool_pointers,
            "deferred": self.deferred,
            "error": ({"kind": self.error.kind, "message": self.error.user_line()}
                      if self.error else None),
        }


@dataclass(frozen=True)
class Drafted:
    """A compaction built but not committed: what `compact_context` and the preview share.
    `candidate` None: the summary failed or was refused (`summary_error`); `draft` is the
    summary as the model wrote it, when it wrote one."""

    projection: ContextProjection
    compactor: ContextCompactor
    plan: CompactionPlan | None
    before: int
    limit: int
    candidate: CompactionCandidate | None
    pointed: CompactionCandidate | None    # tier one's fold, when there is one
    summary_error: PicochatError | None
    draft: SummaryDraft | None
    transcript: Transcript | None
    summary_called: bool


async def compact_context(store: Store, provider: Provider,
                          request: CompactRequest) -> CompactOutcome:
    step = await draft_compaction(store, provider, request)
    if isinstance(step, CompactOutcome):
        return step
    reason, limits = request.reason, request.limits
    projection, compactor, before = step.projection, step.compactor, step.before
    candidate, pointed, summary_error = step.candidate, step.pointed, step.summary_error
    if candidate is None and pointed is not None:  # the summary failed or would not
        candidate = pointed  # shrink: the lossless fold, roomier than a summary would be
        if summary_error is not None:
            _context_changed(summary_error)
    if candidate is None and request.mode.may_trim:
        candidate = trim_candidate(compactor, projection, before, TriggerReason.OVERFLOW)
        if candidate is None:
            parts = estimate(limits, RequestDraft(request.system_prompt, projection,
                                                  request.tools))
            summary_error = trim_impossible(projection, parts, limits,
                                            refused=reason == TriggerReason.OVERFLOW)
        elif summary_error is not None:
            _context_changed(summary_error)
    if candidate is None:
        return await not_compacted(store, request, step, summary_error)
    return await commit_candidate(store, provider, request, step, candidate, summary_error)


async def not_compacted(store: Store, request: CompactRequest, step: Drafted,
                        summary_error: PicochatError | None) -> CompactOutcome:
    """The outcome of a draft with no candidate: nothing to compact, or the failure (an
    automatic summary that failed waits until the context has grown)."""
    sid, reason, limits = request.session_id, request.reason, request.limits
    projection, before = step.projection, step.before
    transcript, summary_called = step.transcript, step.summary_called
    if summary_error is None:  # plan is None here: nothing older to fold
        return CompactOutcome(NOTHING_TO_COMPACT, reason, projection, tokens_before=before)
    # re-read: another process may have changed the context during the summary call
    now = restore(store, sid)
    # what is older is shorter than its summary: nothing to compact, unless the context
    # moved meanwhile (the verdict is then about a context that no longer is: refused)
    if (isinstance(summary_error, NoGain)
            and now.context_generation == projection.context_generation):
        log.info("compaction_no_gain session=%s reason=%s", sid, reason)
        return CompactOutcome(NOTHING_TO_COMPACT, reason, now, tokens_before=before,
                              summary_error=summary_error, transcript=transcript,
                              summary_called=summary_called)
    failed = failed_outcome(sid, reason, now, summary_error, transcript=transcript,
                     tokens_before=before, summary_called=summary_called)
    auto = reason == TriggerReason.AUTO and not request.mode.may_trim
    if auto and summary_called and isinstance(summary_error, (SummaryRejected,
                                                              SummaryFailed)):
        backoff = CompactionWait(projection.context_generation, before, summary_error.kind)
        if await set_wait(store, sid, backoff):
            failed = dataclasses.replace(failed, waits_for=retry_growth(limits))
    return failed


async def draft_compaction(store: Store, provider: Provider,
                           request: CompactRequest) -> Drafted | CompactOutcome:
    """Steps 1 and 2: the snapshot, the cut, and the summary (or tier one's fold), checked
    but not committed; an outcome instead when there is nothing to do or it cannot be done."""
    sid, reason, limits = request.session_id, request.reason, request.limits
    projection = project(store.context_snapshot(sid))
    compactor = ContextCompactor(provider, limits, request.system_prompt, request.tools,
                                 request.instructions, request.timeout, request.summary_model,
                                 request.reasoning)
    # Both figures of a checkpoint come from the same estimate: a provider-reported
    # usage would compare tokens of one tokenizer with tokens of another.
    parts = estimate(limits, RequestDraft(request.system_prompt, projection, request.tools))
    before = parts.total
    try:
        check_fixed(limits, parts)
    except PicochatError as exc:  # FixedContextExceedsBudget: compaction cannot help
        return failed_outcome(sid, reason, projection, exc, tokens_before=before)
    auto = reason == TriggerReason.AUTO and not request.mode.may_trim
    if auto and _still_waiting(store.compaction_wait(sid), projection, before, limits):
        # an automatic summary failed at about this size: not asked for again on every turn
        # (its failure said so once); /compact tries now, and overflow never waits
        log.info("compaction_waiting session=%s tokens_before=%d", sid, before)
        return CompactOutcome(NOTHING_TO_COMPACT, reason, projection, tokens_before=before)
    plan = compactor.plan_all(projection) if request.everything else compactor.plan(projection)
    if plan is None and not request.mode.may_trim:
        log.info("compaction_nothing session=%s reason=%s generation=%d", sid, reason,
                 projection.context_generation)
        return CompactOutcome(NOTHING_TO_COMPACT, reason, projection, tokens_before=before,
                              keep_tokens=compactor.keep_tokens(projection))

    # Overflow recovery needs the request under the hard window; everything else under the
    # threshold, so the next turn does not compact again at once.
    limit = limits.window if request.mode.may_trim else limits.threshold
    candidate: CompactionCandidate | None = None
    pointed: CompactionCandidate | None = None
    summary_error: PicochatError | None = None
    draft: SummaryDraft | None = None
    transcript: Transcript | None = None
    summary_called = False
    if plan is not None and request.mode.tries_summary:
        floor = compactor.kept_alone(plan, projection)
        shares = compactor.room(projection)
        # what a summary of `plan` could leave: the deferral and tier one both ask, once
        least = functools.cache(lambda: _least_after(compactor, plan, floor, shares))
        wait = _why_wait(compactor, before, floor, limit, least) if auto else None
        if wait is not None:
            log.info("compaction_deferred session=%s tokens_before=%d floor=%d", sid, before,
                     floor)
            return CompactOutcome(NOTHING_TO_COMPACT, reason, projection, tokens_before=before,
                                  deferred=wait)
        # tier one, no call: taken when it leaves the context where a compaction should (the
        # target, or the least a summary could when the newest turns alone are over that),
        # else kept for when the summary fails. A focus steers a summary: it always gets one.
        pointed = (pointer_candidate(compactor, plan, projection, before, shares,
                                     min(limit, limits.threshold), reason)  # room to answer
                   if request.focus is None else None)
        if pointed is not None and pointed.tokens_after <= max(
                shares.target, least()):
            candidate = pointed
        if candidate is not None:
            log.info("compaction_pointers session=%s tokens_before=%d", sid, before)
        elif floor > limit:  # no summary can help: do not pay for a call bound to be rejected
            summary_error = SummaryRejected(
                f"the newest turns alone are {floor:,} tokens, over the limit of {limit:,}",
                "shorten the message, /clear, or use a model with a larger window")
        else:
            summary_called = True
            try:
                crashpoints.reached("summary_in_flight")
                draft = await compactor.write(plan, shares, request.focus, limit - floor)
                transcript = draft.transcript
                candidate = compactor.candidate(plan, projection, compactor.check(draft),
                                                reason, before, limit)
            except PicochatError as exc:  # SummaryFailed, SummaryRejected
                summary_error = exc
                log.warning("summary_failed session=%s reason=%s kind=%s", sid, reason,
                            exc.kind)
    return Drafted(projection, compactor, plan, before, limit, candidate, pointed,
                   summary_error, draft, transcript, summary_called)


async def commit_candidate(store: Store, provider: Provider, request: CompactRequest,
                           step: Drafted, candidate: CompactionCandidate,
                           summary_error: PicochatError | None = None) -> CompactOutcome:
    """Steps 3 to 6: the compare-and-set commit of `candidate`, then the context re-read."""
    sid, reason = request.session_id, request.reason
    projection, plan, transcript = step.projection, step.plan, step.transcript
    before, summary_called = step.before, step.summary_called
    crashpoints.reached("before_commit")
    try:
        checkpoint = await store.io(
            store.commit_context_checkpoint, sid, candidate.base_generation,
            candidate.new_checkpoint(*_made_by(provider, request, candidate)))
    except PicochatError as exc:  # StaleGeneration, StorageError: the old context stays
        return failed_outcome(sid, reason, restore(store, sid), exc, summary_error, transcript,
                       before, summary_called)
    facts = fact_ledger.counts(checkpoint.ledger)
    log.info("compaction_committed session=%s checkpoint=%s generation=%d reason=%s "
             "tokens_before=%d tokens_after=%d first_retained_seq=%d degraded=%d kept_turns=%d "
             "source_messages=%s omitted=%s truncated=%s facts_kept=%d facts_dropped=%d",
             sid, checkpoint.id,
             checkpoint.generation, reason, checkpoint.tokens_before, checkpoint.tokens_after,
             checkpoint.first_retained_seq, int(checkpoint.degraded), candidate.kept_turns,
             transcript.source_messages if transcript else None,
             transcript.omitted if transcript else None,
             transcript.truncated if transcript else None, facts.kept, facts.dropped)
    await set_wait(store, sid, None)  # whatever compacted, the context has moved on
    now = restore(store, sid)
    if not checkpoint.degraded and not checkpoint.pointers:  # a fold's words are in the log
        try:
            await store.io(store.search.add_timeline, CHECKPOINT_KEY + checkpoint.id, sid,
                           checkpoint.summary)
        except PicochatError as exc:
            log.warning("timeline_failed session=%s checkpoint=%s kind=%s", sid, checkpoint.id,
                        exc.kind)
    folded = range(projection.first_raw_seq or 0, checkpoint.first_retained_seq)
    pastes = sum(1 for r in checkpoint.ledger.rows if r.kind == PASTE and r.seq in folded)
    return CompactOutcome(COMPACTED, reason, now, checkpoint, candidate.kept_turns, before, None,
                          summary_error, transcript, summary_called,
                          max(0, checkpoint.ledger.dropped - projection.ledger.dropped),
                          pastes_folded=pastes,
                          tool_pointers=sum(1 for m in plan.span if m.role == "tool")
                          if candidate.pointers and plan is not None else 0)


def _why_wait(compactor: ContextCompactor, before: int, floor: int, limit: int,
              least_after: Callable[[], int]) -> str | None:
    """Why an automatic compaction is not worth a summary call now, or None (`least_after`:
    the least a summary could leave). It
    would come round again within a turn or two, or the newest turns alone (`floor`) are over
    the threshold (a paste): it waits until the context has grown, or the big turn can be
    folded. /compact still compacts now, and a request over the window is the overflow
    recovery's, which does not wait."""
    if floor > limit:
        return (f"the newest turns alone ({floor:,} tokens) are over the {limit:,} "
                "auto-compact point; they are folded once newer turns follow")
    least = least_after()
    if worth_compacting(compactor.limits, before, least):
        return None
    return (f"folding the older turns now would free only about {max(0, before - least):,} "
            "tokens; it runs once the context has grown")


def _still_waiting(wait: CompactionWait | None, projection: ContextProjection, before: int,
                   limits: BudgetLimits) -> bool:
    return (wait is not None and wait.context_generation == projection.context_generation
            and before - wait.tokens_before < retry_growth(limits))


async def set_wait(store: Store, sid: str, wait: CompactionWait | None) -> bool:
    """Start or end the session's wait, best effort: a failed write costs at most one more
    summary call, never the compaction."""
    try:
        await store.io(store.set_compaction_wait, sid, wait)
        return True
    except PicochatError as exc:
        log.warning("compaction_wait_not_saved session=%s kind=%s", sid, exc.kind)
        return False


def _least_after(compactor: ContextCompactor, plan: CompactionPlan, floor: int,
                 shares: CompactionRoom) -> int:
    """What the context would be after a compaction of `plan` whose summary takes its whole
    prose share: the kept tail (`floor`) plus the prose cap plus the ledger as it would be
    fitted. The model may write less; a compaction worth doing at this size is worth it."""
    ledger = compactor.fit(compactor.ledger_of(plan), compactor.limits.counted(shares.ledger))
    facts = tokens.scale(tokens.count_text(fact_ledger.render_text(ledger)),
                         compactor.limits.token_factor)
    return floor + shares.prose + facts


UNCHANGED = "the previous context is unchanged"


def _context_changed(error: PicochatError) -> None:
    """A summary error's hint was written for a failure that keeps the old context; after a
    degraded trim the note quoting it would say so beside "context compacted"."""
    if error.hint and error.hint.startswith(UNCHANGED):
        error.hint = error.hint[len(UNCHANGED):].lstrip("; ") or None


def _made_by(provider: Provider, request: CompactRequest,
             candidate: CompactionCandidate) -> tuple[str, str]:
    """The checkpoint's provider_kind and model: whoever wrote the summary (the offline trim
    is credited to the chat model, which it stood in for; tier one to picochat: no model)."""
    if candidate.pointers:
        return POINTERS_KIND, POINTERS_MODEL
    if request.summary_model is not None and not candidate.degraded:
        provider = request.summary_model.provider
    return provider.info.provider_kind, provider.info.model


def failed_outcome(sid: str, reason: TriggerReason, projection: ContextProjection, error: PicochatError,
            summary_error: PicochatError | None = None, transcript: Transcript | None = None,
            tokens_before: int = 0, summary_called: bool = False) -> CompactOutcome:
    log.warning("compaction_failed session=%s reason=%s generation=%d kind=%s", sid, reason,
                projection.context_generation, error.kind)
    return CompactOutcome(FAILED, reason, projection, tokens_before=tokens_before, error=error,
                          summary_error=summary_error, transcript=transcript,
                          summary_called=summary_called)

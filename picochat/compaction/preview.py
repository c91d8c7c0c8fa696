"""CompactionPreview: a compaction drafted and checked, shown before anything is written.

`/compact --preview` (and `picochat compact --preview`) stops `compact_context` between its
draft and its commit. The user reads what it folds, tokens before and after, the summary, the
ledger's changes and the gate's verdict, then:
- commits exactly that: the same summary text and the same ledger rows (`commit_preview`);
- edits the summary (`CompactionPreview.edit`): the edit goes through the same gate and the
  same candidate checks as the model's text, and commits the same way;
- or drops it (`drop_preview`): nothing is written. An automatic compaction the user drops
  waits, like a failed one, until the context has grown, so the next turn does not ask again.

A preview is of one context. A turn, a pin, `/clear`, undo or another compaction in between
makes it stale: its commit writes nothing and says why.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from picochat import ledger as fact_ledger
from picochat.compaction.candidate import CompactionCandidate, NoGain
from picochat.compaction.compactor import SummaryDraft
from picochat.compaction.compact import (
    CompactMode,
    CompactOutcome,
    CompactRequest,
    Drafted,
    failed_outcome,
    set_wait,
    commit_candidate,
    draft_compaction,
    not_compacted,
)
from picochat.cutpoints import group_turns
from picochat.errors import PicochatError
from picochat.messages import CompactionWait, LedgerRow, StoredLedger, TriggerReason
from picochat.projection import ContextProjection, project
from picochat.providers.base import Provider
from picochat.storage.store import Store

log = logging.getLogger("picochat.compaction")

RUN_AGAIN = "nothing was written; run /compact --preview again"


class PreviewStale(PicochatError):
    """The context changed between the preview and its commit: nothing is written."""

    kind = "preview_stale"


class PreviewRefused(PicochatError):
    """A commit of a preview whose summary the gate refused: nothing is written."""

    kind = "preview_refused"


@dataclass(frozen=True)
class LedgerChange:
    """How a compaction changes the exact-fact ledger the model reads."""

    added: tuple[LedgerRow, ...]   # facts of the turns it folds
    carried: int                   # facts of the summary in use that stay
    gone: tuple[LedgerRow, ...]    # facts of the summary in use that go (a correction
    #                                retired them, or they were the oldest and had to make room)
    evicted: int                   # facts evicted to fit the ledger's share, this time


def ledger_change(before: StoredLedger, after: StoredLedger) -> LedgerChange:
    def key(row: LedgerRow) -> tuple[int, str, str]:
        return row.seq, row.said_by, row.text

    old = {key(r) for r in before.rows}
    new = {key(r) for r in after.rows}
    return LedgerChange(tuple(r for r in after.rows if key(r) not in old),
                        sum(1 for r in before.rows if key(r) in new),
                        tuple(r for r in before.rows if key(r) not in new),
                        max(0, after.dropped - before.dropped))


@dataclass(frozen=True)
class CompactionPreview:
    """One drafted compaction and the gate's verdict on it. `candidate` is what a commit
    writes, None when the gate (or a candidate check) refused `text`, the summary as written:
    `verdict` says why. `summary_error`: why a model summary is not what is shown (its call
    failed, and tier one's fold of the tool results stands in)."""

    request: CompactRequest
    step: Drafted
    candidate: CompactionCandidate | None
    verdict: PicochatError | None
    text: str
    edited: bool = False
    summary_error: PicochatError | None = None

    @property
    def committable(self) -> bool:
        return self.candidate is not None

    @property
    def editable(self) -> bool:
        """A model summary can be edited; tier one's fold (no summary) cannot."""
        return self.step.draft is not None

    @property
    def session_id(self) -> str:
        return self.request.session_id

    @property
    def folded(self) -> tuple[int, int, int]:
        """The first and last message numbers it folds, and the turns among them."""
        span = self.step.plan.span if self.step.plan else ()
        if not span:
            return 0, 0, 0
        return span[0].seq, span[-1].seq, len(group_turns(span))

    @property
    def first_kept(self) -> int:
        return self.step.plan.first_retained_seq if self.step.plan else 0

    @property
    def tokens_before(self) -> int:
        return self.step.before

    @property
    def tokens_after(self) -> int | None:
        return self.candidate.tokens_after if self.candidate else None

    @property
    def summary(self) -> str:
        """What the model would read as the summary: the text with its ledger, or the refused
        text as written."""
        return self.candidate.summary if self.candidate else self.text

    @property
    def ledger(self) -> StoredLedger:
        """The ledger a commit writes; for a refused summary, the facts it would carry."""
        if self.candidate is not None:
            return self.candidate.ledger
        draft = self.step.draft
        return fact_ledger.to_stored(draft.ledger) if draft else self.step.projection.ledger

    @property
    def changes(self) -> LedgerChange:
        return ledger_change(self.step.projection.ledger, self.ledger)

    @property
    def verdict_line(self) -> str:
        if self.verdict is not None:
            return f"refused: {self.verdict.message}"
        if self.candidate is not None and self.candidate.pointers:
            return "no summary to check: the older turns stay word for word"
        return "passed" + (" (your edit)" if self.edited else "")

    def _draft(self) -> SummaryDraft:
        """The model's summary as written; tier one's fold has none to edit."""
        if self.step.draft is None:
            raise PreviewRefused("this compaction has no summary to edit",
                                 "tier one keeps the older turns word for word")
        return self.step.draft

    def extract(self) -> str:
        """picochat's own summary of the same turns (the built-in extractive summarizer, no
        model, within the same cap): a start for an edit when the model's is refused."""
        from picochat.providers import offline_summary

        draft = self._draft()
        return offline_summary.summarize(draft.transcript.text, draft.max_tokens)

    def edit(self, text: str) -> "CompactionPreview":
        """The preview with `text` as the summary, through the same gate and candidate checks
        as the model's (`verdict` says what they refused)."""
        step, draft = self.step, self._draft()
        assert step.plan is not None  # a draft is of a plan
        edited = dataclasses.replace(draft, text=text, finish_reason=None, usage=None)
        try:
            candidate = step.compactor.candidate(
                step.plan, step.projection, step.compactor.check(edited),
                self.request.reason, step.before, step.limit)
        except PicochatError as exc:  # SummaryRejected, NoGain, CutRejected
            return dataclasses.replace(self, candidate=None, verdict=exc, text=text,
                                       edited=True, summary_error=None)
        return dataclasses.replace(self, candidate=candidate, verdict=None, text=text,
                                   edited=True, summary_error=None)

    def as_dict(self) -> dict[str, Any]:
        """`picochat compact --preview --json`."""
        first, last, turns = self.folded
        change = self.changes

        def rows(found: tuple[LedgerRow, ...]) -> list[dict[str, Any]]:
            return [{"seq": r.seq, "said_by": r.said_by, "text": r.text} for r in found]

        return {
            "status": "preview",
            "session_id": self.session_id,
            "folds": {"first_seq": first, "last_seq": last, "turns": turns},
            "first_retained_seq": self.first_kept,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "summary": self.summary,
            "tool_pointers": bool(self.candidate and self.candidate.pointers),
            "gate": {"passed": self.verdict is None,
                     "reason": self.verdict.message if self.verdict else None},
            "ledger": {"added": rows(change.added), "carried": change.carried,
                       "gone": rows(change.gone), "evicted": change.evicted},
            "summary_error": ({"kind": self.summary_error.kind,
                               "message": self.summary_error.user_line()}
                              if self.summary_error else None),
        }


async def preview_compaction(store: Store, provider: Provider,
                             request: CompactRequest) -> CompactionPreview | CompactOutcome:
    """The compaction `compact_context` would commit for `request`, not committed; or its
    outcome when there is nothing to preview (nothing to fold, the summary call failed, the
    folded turns are shorter than any summary). Never trims: a preview is of a summary."""
    request = dataclasses.replace(request, mode=CompactMode.SUMMARY)
    step = await draft_compaction(store, provider, request)
    if isinstance(step, CompactOutcome):
        return step
    if step.candidate is not None:
        text = step.draft.text if step.draft else step.candidate.summary
        return CompactionPreview(request, step, step.candidate, None, text)
    if step.draft is not None and not isinstance(step.summary_error, NoGain):
        return CompactionPreview(request, step, None, step.summary_error, step.draft.text)
    if step.pointed is not None:  # no summary came back: tier one's fold stands in
        return CompactionPreview(request, step, step.pointed, None, step.pointed.summary,
                                 summary_error=step.summary_error)
    # what compact_context makes of it: the same failure line, the same "nothing to compact"
    return await not_compacted(store, request, step, step.summary_error)


async def commit_preview(store: Store, provider: Provider,
                         preview: CompactionPreview) -> CompactOutcome:
    """Commit exactly what `preview` showed, or nothing: FAILED with `PreviewStale` when the
    context changed since, `PreviewRefused` when the gate refused its summary."""
    request, step, candidate = preview.request, preview.step, preview.candidate
    sid, reason = request.session_id, request.reason
    if candidate is None:
        error = PreviewRefused(f"the summary was refused: {preview.verdict.message}"
                               if preview.verdict else "there is no summary to commit",
                               "edit it, or drop the preview")
        return failed_outcome(sid, reason, step.projection, error, tokens_before=step.before)
    now = project(store.context_snapshot(sid))
    stale = stale_reason(step.projection, now)
    if stale is not None:
        log.info("preview_stale session=%s", sid)
        return failed_outcome(sid, reason, now, PreviewStale(f"the preview is stale: {stale}",
                                                      RUN_AGAIN), tokens_before=step.before)
    return await commit_candidate(store, provider, request, step, candidate,
                                  preview.summary_error)


async def drop_preview(store: Store, preview: CompactionPreview) -> None:
    """Nothing is written, except that an automatic compaction the user dropped waits until
    the context has grown (as a failed one does), so the next turn does not ask again."""
    step = preview.step
    log.info("preview_dropped session=%s reason=%s", preview.session_id, preview.request.reason)
    if preview.request.reason == TriggerReason.AUTO:
        await set_wait(store, preview.session_id, CompactionWait(
            step.projection.context_generation, step.before, "preview_dropped"))


def stale_reason(then: ContextProjection, now: ContextProjection) -> str | None:
    """Why `now` is not the context a preview of `then` was made of, or None."""
    if now.context_generation != then.context_generation:
        return "the context was compacted, cleared or undone since"
    if now.max_raw_seq != then.max_raw_seq:
        new = sum(1 for m in now.raw if m.seq > then.max_raw_seq)
        return (f"{new} new message{'s' if new != 1 else ''} since"
                if new else "the conversation changed since")
    if now.pins != then.pins:
        return "the pins changed since"
    return None

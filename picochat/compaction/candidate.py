"""CompactionCandidate: a checkpoint that is built but not yet committed.

A candidate is a value. It becomes durable only through `Store.commit_context_checkpoint`, and
only after `validate` found nothing wrong with it: a failed check commits nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from picochat import tokens
from picochat.errors import PicochatError
from picochat.messages import Message, NewCheckpoint, StoredLedger, TriggerReason
from picochat.projection import Repair, repair_tool_chains


@dataclass(frozen=True)
class CompactionCandidate:
    parent_checkpoint_id: str | None
    base_generation: int
    summary: str
    first_retained_seq: int
    source_max_seq: int
    reason: str            # "manual" | "auto" | "overflow"
    tokens_before: int
    tokens_after: int
    degraded: bool
    kept_turns: int
    ledger: StoredLedger = StoredLedger()  # the exact facts it carries, stored as rows
    pointers: bool = False  # tier one: no summary call (`compaction/pointers.py`)

    def new_checkpoint(self, provider_kind: str, model: str) -> NewCheckpoint:
        return NewCheckpoint(
            parent_checkpoint_id=self.parent_checkpoint_id, summary=self.summary,
            first_retained_seq=self.first_retained_seq, source_max_seq=self.source_max_seq,
            trigger_reason=TriggerReason(self.reason), provider_kind=provider_kind, model=model,
            tokens_before=self.tokens_before, tokens_after=self.tokens_after,
            degraded=self.degraded, ledger=self.ledger)


RETRY = "try /compact again or use another model"
RETRY_HINT = f"the previous context is unchanged; {RETRY}"  # every rejected summary's hint


class SummaryRejected(PicochatError):
    """A summary came back but failed a check (`validate` or the quality gate): no commit.
    `summary`: the model's text that was refused, when there was one (the panel shows it,
    so the user sees why; never logged)."""

    kind = "summary_rejected"
    summary: str | None = None


UNCHANGED_HINT = "the context is unchanged; compact again once the conversation is longer"
CUT_HINT = ("the previous context is unchanged; this is a picochat bug, not the model's: "
            "please report it")


class CutRejected(PicochatError):
    """The cut, not the summary, failed a check: the kept messages would not be a valid
    history. Not a `SummaryRejected`: another summary model would not help, and rejections
    the model is blamed for are counted apart."""

    kind = "cut_rejected"


class NoGain(PicochatError):
    """The summary would not make the context smaller: the turns it folds are shorter than
    any summary of them (its headings and exact facts alone). A summary within its cap can
    only fail to shrink a span shorter than that cap, so this is the span's size, not the
    model's fault: nothing is committed, and it is "nothing to compact", not a failure."""

    kind = "no_gain"


def validate(candidate: CompactionCandidate, snapshot_seqs: Sequence[int],
             kept: Sequence[Message], summary_cap: int, threshold: int) -> None:
    """Six checks; raises `SummaryRejected` naming the first that fails (a summary that is
    non-empty and within its cap; a context that ends at or under `threshold`), `CutRejected`
    when it is the cut's (inside the snapshot, tool chains of the kept tail whole), or
    `NoGain` when the context would not shrink.

    `summary_cap` is the model's share plus the exact-fact ledger's; `threshold` is the
    auto-compaction threshold, or the hard window in overflow recovery."""
    hint = RETRY_HINT
    if not candidate.summary.strip():
        raise SummaryRejected("the model returned an empty summary", hint)
    size = tokens.count_text(candidate.summary)
    if size > summary_cap:
        raise SummaryRejected(f"the summary is {size:,} tokens, over its cap of "
                              f"{summary_cap:,}", hint)
    cut = candidate.first_retained_seq
    if cut not in set(snapshot_seqs):
        raise CutRejected(f"message #{cut} is not in the context being compacted", CUT_HINT)
    _, repairs = repair_tool_chains(kept)
    if repairs:
        raise CutRejected(f"the cut at #{cut} would keep {_broken(repairs[0])}", CUT_HINT)
    if candidate.tokens_after >= candidate.tokens_before:
        raise NoGain(f"a summary of the older turns would not make the context smaller "
                     f"({candidate.tokens_before:,} → {candidate.tokens_after:,} tokens): "
                     "they are shorter than a summary of them", UNCHANGED_HINT)
    if candidate.tokens_after > threshold:
        raise SummaryRejected(f"the compacted context would still be "
                              f"{candidate.tokens_after:,} tokens, over the limit of "
                              f"{threshold:,}", hint)


def _broken(repair: Repair) -> str:
    """The first broken tool chain of a kept tail, in the user's words."""
    if repair.kind == "orphan_tool_result":
        return f"tool result #{repair.seq} without the tool call it answers"
    return f"tool call #{repair.seq} without all of its results"

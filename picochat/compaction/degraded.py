"""The overflow safety net: drop whole old turns, no summary (design §4.3, §11.3).

Used only when the provider said the request does not fit (or the draft is already over the
hard window) and no semantic summary could be had. The result is a checkpoint marked
`degraded`, whose summary says only what was left out; it invents nothing. The raw rows stay in
the log, and an earlier checkpoint's summary is carried along when it still fits.
"""

from __future__ import annotations

import dataclasses

from picochat import ledger as fact_ledger
from picochat.budget import BudgetLimits
from picochat.compaction.candidate import CompactionCandidate
from picochat.compaction.compactor import ContextCompactor
from picochat.cutpoints import group_turns
from picochat.projection import ContextProjection

BREADCRUMB = ("[Earlier conversation omitted during context-overflow recovery.\n"
              "Raw history remains available, but no semantic summary was produced.]")


def breadcrumb(turns: int, first_seq: int, last_seq: int, previous: str | None,
               dropped_previous: bool = False) -> str:
    lines = [BREADCRUMB,
             f"{turns} earlier turn{'s' if turns != 1 else ''} (messages #{first_seq}–"
             f"#{last_seq}) did not fit the model's window and were left out."]
    if dropped_previous:
        lines.append("The summary of the conversation before them did not fit either and was "
                     "left out too.")
    if previous:
        lines += ["", "The summary of the conversation before them, from an earlier checkpoint:",
                  "", fact_ledger.without_ledger(previous).strip()]
    return "\n".join(lines)


def trim_candidate(compactor: ContextCompactor, projection: ContextProjection,
                   tokens_before: int, reason: str = "overflow") -> CompactionCandidate | None:
    """Drop the fewest oldest whole turns that bring the request under the threshold (room for
    the answer), else under the hard window; an earlier summary is kept while anything fits
    with it, and the ledger of everything dropped fills what room is left. None when even the
    newest turn alone does not fit or nothing older can go."""
    limits: BudgetLimits = compactor.limits
    turns = group_turns(projection.raw)
    previous_options = (projection.summary, None) if projection.summary else (None,)
    for limit in (limits.threshold, limits.window):
        for previous in previous_options:
            for index in range(1, len(turns)):
                dropped = [m for t in turns[:index] for m in t.messages]
                kept = tuple(m for t in turns[index:] for m in t.messages)
                bare = breadcrumb(index, dropped[0].seq, dropped[-1].seq, previous,
                                  dropped_previous=bool(projection.summary) and not previous)
                after = dataclasses.replace(projection, raw=kept, first_raw_seq=kept[0].seq)
                ledger = fact_ledger.carry(fact_ledger.parse(projection.summary), dropped)
                summary = compactor.with_ledger(bare, ledger, after,
                                                min(limit, tokens_before - 1))
                after = dataclasses.replace(after, summary=summary)
                size = compactor.tokens_of(after)
                if size <= limit and size < tokens_before:  # a trim that grows is no trim
                    return CompactionCandidate(
                        parent_checkpoint_id=projection.checkpoint_id,
                        base_generation=projection.context_generation, summary=summary,
                        first_retained_seq=kept[0].seq, source_max_seq=projection.max_raw_seq,
                        reason=reason, tokens_before=tokens_before, tokens_after=size,
                        degraded=True, kept_turns=len(turns) - index)
    return None

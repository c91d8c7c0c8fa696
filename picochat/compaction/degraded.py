"""The overflow safety net: drop whole old turns, no summary; never ordinary compaction.

Used only when the provider said the request does not fit (or the draft is already over the
hard window) and no semantic summary could be had. The result is a checkpoint marked
`degraded`, whose summary says only what was left out; it invents nothing. The raw rows stay in
the log, and an earlier checkpoint's summary is carried along when it still fits.

With a model whose summaries always fail (such as SmolLM2-135M) trims follow each other. Two
things then keep the facts of the dropped turns in the context: an earlier trim's breadcrumb is
folded into the new one, not nested in it (four nested breadcrumbs cost some 200 tokens that
said nothing but four seq ranges), and a trim drops one more raw turn rather than evict facts
from the ledger (a turn's facts cost a few tokens, its raw text hundreds).
"""

from __future__ import annotations

import dataclasses
import functools
import re

from picochat import ledger as fact_ledger
from picochat.budget import BudgetLimits
from picochat.compaction.candidate import CompactionCandidate
from picochat.compaction.compactor import ContextCompactor
from picochat.cutpoints import group_turns
from picochat.ledger import Ledger
from picochat.projection import ContextProjection

BREADCRUMB = ("[Earlier conversation omitted during context-overflow recovery.\n"
              "Raw history remains available, but no semantic summary was produced.]")


DROPPED_PREVIOUS = ("The summary of the conversation before them did not fit either and was "
                    "left out too.")
CARRIED = "The summary of the conversation before them, from an earlier checkpoint:"
_LEFT_OUT = re.compile(r"^(\d+) earlier turns? \(messages #(\d+)–#(\d+)\) did not fit the "
                       r"model's window and were left out\.$")


def breadcrumb(turns: int, first_seq: int, last_seq: int, previous: str | None,
               dropped_previous: bool = False) -> str:
    if previous and (earlier := _earlier_trim(fact_ledger.without_ledger(previous).strip())):
        more, first_seq, previous, dropped_before = earlier  # one breadcrumb, its range grown
        turns += more
        dropped_previous = dropped_previous or dropped_before
    lines = [BREADCRUMB,
             f"{turns} earlier turn{'s' if turns != 1 else ''} (messages #{first_seq}–"
             f"#{last_seq}) did not fit the model's window and were left out."]
    if dropped_previous:
        lines.append(DROPPED_PREVIOUS)
    if previous:
        lines += ["", CARRIED, "", fact_ledger.without_ledger(previous).strip()]
    return "\n".join(lines)


def _earlier_trim(previous: str) -> tuple[int, int, str | None, bool] | None:
    """An earlier trim's breadcrumb read back: (its turns, its first seq, the summary it
    carried, whether it had left one out), or None when `previous` is a real summary."""
    lines = previous.splitlines()
    if len(lines) < 3 or "\n".join(lines[:2]) != BREADCRUMB or not (m := _LEFT_OUT.match(lines[2])):
        return None
    rest = lines[3:]
    dropped = bool(rest) and rest[0] == DROPPED_PREVIOUS
    text = "\n".join(rest[1:] if dropped else rest).strip()
    carried = text[len(CARRIED):].strip() if text.startswith(CARRIED) else None
    return int(m[1]), int(m[2]), carried or None, dropped


def trim_candidate(compactor: ContextCompactor, projection: ContextProjection,
                   tokens_before: int, reason: str = "overflow") -> CompactionCandidate | None:
    """Drop the fewest oldest whole turns that bring the request under the threshold (room for
    the answer), else under the hard window; an earlier summary is kept while anything fits
    with it, and the ledger of everything dropped fills what room is left. Where that room
    would evict facts the ledger's own share has room for, older turns go instead, as long as
    one does: a fact cannot be rebuilt from the raw tail of the model's window. None when even
    the newest turn alone does not fit or nothing older can go."""
    limits: BudgetLimits = compactor.limits
    room = compactor.room(projection).ledger
    share = limits.counted(room)
    turns = group_turns(projection.raw)
    previous_options = (projection.summary, None) if projection.summary else (None,)
    carried = fact_ledger.from_stored(projection.ledger)

    @functools.cache
    def ledger_of(index: int) -> tuple[Ledger, int]:
        """The ledger of dropping the first `index` turns, and how many facts its own share
        would drop: the same for every limit and option tried below, so made once."""
        ledger = fact_ledger.carry(carried, [m for t in turns[:index] for m in t.messages])
        return ledger, fact_ledger.fit(ledger, share).dropped

    for limit in (limits.threshold, limits.window):
        for previous in previous_options:
            first_fit: CompactionCandidate | None = None
            for index in range(1, len(turns)):
                dropped = [m for t in turns[:index] for m in t.messages]
                kept = tuple(m for t in turns[index:] for m in t.messages)
                bare = breadcrumb(index, dropped[0].seq, dropped[-1].seq, previous,
                                  dropped_previous=bool(projection.summary) and not previous)
                after = dataclasses.replace(projection, raw=kept, first_raw_seq=kept[0].seq)
                ledger, share_drops = ledger_of(index)
                summary, fitted = compactor.with_ledger(bare, ledger, after,
                                                        min(limit, tokens_before - 1), room)
                after = dataclasses.replace(after, summary=summary)
                size = compactor.tokens_of(after)
                if size > limit or size >= tokens_before:  # a trim that grows is no trim
                    continue
                candidate = CompactionCandidate(
                    parent_checkpoint_id=projection.checkpoint_id,
                    base_generation=projection.context_generation, summary=summary,
                    first_retained_seq=kept[0].seq, source_max_seq=projection.max_raw_seq,
                    reason=reason, tokens_before=tokens_before, tokens_after=size,
                    degraded=True, kept_turns=len(turns) - index,
                    ledger=fact_ledger.to_stored(fitted))
                first_fit = first_fit or candidate
                if fitted.dropped <= share_drops:
                    return candidate  # every fact its share holds
            if first_fit is not None:
                return first_fit
    return None

"""Tier one: fold older turns with no summary call, their tool results as pointer lines.

Where tool results fill the context (a few `read_file` calls), a summary call is the costly way
to make room: a minute on a CPU server, and the prose loses words. Before any summary is asked
for, a compaction tries this: the turns it folds go into the checkpoint word for word, each tool
result replaced by one pointer line (tool, arguments, size, and the `history_search` call that
reads it back from the raw log). The raw log keeps every byte, so nothing is lost. It is taken
only when it leaves the context within the compaction's target and keeps every exact fact a
summary would; otherwise the summary call follows as before.

The provider still receives what the contract says (DESIGN.md, contract "What the provider
receives"): the summary block, then the raw tail unchanged. The folded turns' text is the
model's and the tools' as much as the user's, so it is framed so that none of it can pass for
ours: each message's lines are indented under a header picochat writes, and a line that reads
as one of picochat's frame lines is left out.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Sequence

from picochat import ledger as fact_ledger
from picochat import summary_contract as sc
from picochat import tokens
from picochat.budget import CompactionRoom, worth_compacting
from picochat.compaction.candidate import CompactionCandidate, validate
from picochat.compaction.compactor import CompactionPlan, ContextCompactor
from picochat.compaction.transcript import describe_binary
from picochat.errors import PicochatError
from picochat.messages import INTERRUPTED, Message, pair_tool_calls
from picochat.pins import PINS_CLOSE, PINS_OPEN
from picochat.projection import ContextProjection
from picochat.textsafe import line_key

HEADER = ("[Earlier turns, word for word; each tool result is a pointer line: history_search "
          "with its seq reads it back]")
ARGS_CHARS = 160
NAME_CHARS = 64
MESSAGE_OVERHEAD = 8  # of a message's stored count, at most: its role and framing, not words
INDENT = "  "
FRAME_LEFT_OUT = "[a line that reads as one of picochat's frame lines, left out]"
_FRAMES = frozenset(line_key(line) for line in (
    sc.SUMMARY_OPEN, sc.SUMMARY_CLOSE, sc.TRANSCRIPT_BEGIN, sc.TRANSCRIPT_END,
    sc.PREVIOUS_SUMMARY_BEGIN, sc.PREVIOUS_SUMMARY_END, PINS_OPEN, PINS_CLOSE, HEADER))


def pointer_digest(previous_summary: str | None, span: Sequence[Message]) -> str:
    """The checkpoint text of folding `span` after `previous_summary`: the earlier text (its
    ledger left out: the rows carry it), then every message of the span under its own header,
    a tool result as one pointer line. An earlier digest is extended, not nested."""
    earlier = fact_ledger.without_ledger(previous_summary).strip() if previous_summary else ""
    calls, unanswered_of = pair_tool_calls(span)
    lines: list[str] = []
    if not earlier.startswith(HEADER):
        lines += [earlier, ""] if earlier else []
        lines.append(HEADER)
    else:
        lines.append(earlier)
    for m in span:
        if m.role == "tool":
            lines.append(pointer_line(m, calls.get(m.seq)))
            continue
        unanswered = unanswered_of.get(m.seq, [])
        body, _ = describe_binary(m.content)
        if not body.strip() and not unanswered:
            continue  # a call whose results follow: their pointer lines name it
        mark = " (interrupted: the answer stopped early)" if m.status == INTERRUPTED else ""
        lines.append(f"{m.role} (#{m.seq}){mark}:")
        lines += [_indented(line) for line in body.strip("\n").splitlines()]
        lines += [f"{INDENT}(called {_call(c)}, no result)" for c in unanswered]
    return "\n".join(lines)


def pointer_line(result: Message, call: dict | None) -> str:
    """`tool result (#14) read_file {"path": "notes.md"}: 12,345 characters, 310 lines, ok;
    history_search seq=14 reads it back`. It starts with a word, never `#14`: the ledger's lines
    do, and a line in a summary that reads as one loses its tag (`ledger.disarm`)."""
    fn = (call or {}).get("function") or {}
    name = _name(result.name or fn.get("name"))
    args = _args(fn.get("arguments")) if call else ""
    lines = result.content.count("\n") + 1 if result.content else 0
    status = f", {result.tool_status}" if result.tool_status else ""
    return (f"tool result (#{result.seq}) {name}{(' ' + args) if args else ''}: "
            f"{len(result.content):,} characters, {lines:,} line{'s' if lines != 1 else ''}"
            f"{status}; history_search seq={result.seq} reads it back")


def pointer_candidate(compactor: ContextCompactor, plan: CompactionPlan,
                      projection: ContextProjection, tokens_before: int, shares: CompactionRoom,
                      limit: int, reason: str) -> CompactionCandidate | None:
    """The tier-one candidate of `plan`, or None: the span ran no tool; or its digest leaves
    the context over `limit` (the threshold, or the window in overflow recovery); or it frees
    less than the gain an automatic summary must bring (`worth_compacting`: a long history
    with a little tool output wants a summary, not a dent); or it would keep fewer exact facts
    than the ledger's share holds. The cheap bounds come first, so a history that cannot
    qualify costs no digest. Whether it is enough, or only what is left when the summary
    fails, is the caller's choice (`compact_context`)."""
    if not any(m.role == "tool" for m in plan.span):
        return None
    limits = compactor.limits
    # what it could free at most: every tool result and call whole (a pointer line costs some)
    calls = sum(m.tokens for m in plan.span if m.role == "tool" or m.tool_calls)
    if not worth_compacting(limits, tokens_before, tokens_before - tokens.scale(
            calls, limits.token_factor)):
        return None  # a dent the summary's gain rule calls too small: summarize instead
    target = min(limit, tokens_before - 1)
    # the words it keeps whole cost at least their stored counts: where those alone are over,
    # no digest need be built (a long history of prose is summarized, at no extra cost here)
    words = sum(max(0, m.tokens - MESSAGE_OVERHEAD) for m in plan.span
                if m.role != "tool" and not m.tool_calls)
    if compactor.kept_alone(plan, projection) + tokens.scale(words, limits.token_factor) > target:
        return None
    text = pointer_digest(plan.previous_summary, plan.span)
    after = dataclasses.replace(projection, raw=plan.kept, first_raw_seq=plan.first_retained_seq)
    ledger = compactor.ledger_of(plan)
    merged, fitted = compactor.with_ledger(text, ledger, after, target, shares.ledger)
    if fitted.dropped > compactor.fit(ledger, limits.counted(shares.ledger)).dropped:
        return None  # it fits only by evicting facts a summary would keep
    size = compactor.tokens_of(dataclasses.replace(after, summary=merged))
    if not worth_compacting(limits, tokens_before, size):
        return None
    candidate = CompactionCandidate(
        parent_checkpoint_id=plan.parent_checkpoint_id, base_generation=plan.base_generation,
        summary=merged, first_retained_seq=plan.first_retained_seq,
        source_max_seq=plan.source_max_seq, reason=reason, tokens_before=tokens_before,
        tokens_after=size, degraded=False, kept_turns=plan.kept_turns,
        ledger=fact_ledger.to_stored(fitted), pointers=True)
    try:
        validate(candidate, [m.seq for m in projection.raw], plan.kept, target, target)
    except PicochatError:
        return None  # over the limit, or no smaller
    return candidate


def _indented(line: str) -> str:
    if not line.strip():
        return ""
    if line_key(line) in _FRAMES:
        return INDENT + FRAME_LEFT_OUT
    return INDENT + line.rstrip()


def _call(call: dict) -> str:
    fn = call.get("function") or {}
    args = _args(fn.get("arguments"))
    return f"{_name(fn.get('name'))}{(' ' + args) if args else ''}"


def _name(name: object) -> str:
    """A tool's name as the model gave it, on one line and short: a name is the model's text
    too, and one holding a newline would start a line of its own in the digest."""
    flat = " ".join(str(name or "unknown").split())
    return flat if len(flat) <= NAME_CHARS else flat[: NAME_CHARS - 1] + "…"


def _args(arguments: object) -> str:
    """A call's arguments on one line, cut: they are the model's text, shown, never obeyed."""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    flat = " ".join(describe_binary(arguments or "")[0].split())
    if flat in ("", "{}"):
        return ""
    return flat if len(flat) <= ARGS_CHARS else flat[: ARGS_CHARS - 1] + "…"

"""Pieces of the tool loop inside one turn: pure functions that `TurnRun` (picochat.turn),
which holds the loop itself, composes.

Everything here works on request-local copies. The durable history only ever grows by the
assistant tool-call messages and tool results the worker appends, in order, with the turn id;
no checkpoint is created mid-turn.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from picochat import tokens
from picochat.compaction.transcript import describe_binary
from picochat.projection import ContextProjection
from picochat.providers.base import ToolCallDelta

MAX_TOOL_STEPS = 8          # tool batches per turn; then one last request without tools
MAX_CALLS_PER_ROUND = 16    # calls run from one reply; the rest are not run (nor recorded)
MAX_CALLS_PER_TURN = 64     # calls run in one turn; then one last request without tools
MAX_ARGUMENT_CHARS = 32_768  # a call's arguments past this are not run, nor kept or resent
OLD_TOOL_RESULT_CHARS = 2_000
LEAST_TOOL_RESULT_CHARS = 250  # a result cut for one request keeps at least this much


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str

    def openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


def assemble_tool_calls(deltas: Iterable[ToolCallDelta], turn_id: str, step: int
                        ) -> tuple[ToolCall, ...]:
    """Join streamed fragments by index; a call without an id gets a stable one."""
    calls: dict[int, dict[str, Any]] = {}
    for d in deltas:
        c = calls.setdefault(d.index, {"id": None, "name": None, "arguments": []})
        c["id"] = c["id"] or d.id
        c["name"] = c["name"] or d.name
        c["arguments"].append(d.arguments or "")
    return tuple(
        ToolCall(c["id"] or f"call_{turn_id}_{step}_{i}", c["name"] or "unknown",
                 "".join(c["arguments"]) or "{}")
        for i, c in sorted(calls.items()))


@dataclass(frozen=True)
class CallPlan:
    """Which of a reply's calls run: a flood of calls (3,000 a reply) must not become 3,000
    runs, rows and request entries. Calls past the caps are left out of the record, and the
    model is told so in the last result (`not_run_note`)."""

    run: tuple[ToolCall, ...]
    not_run: int        # calls of the reply left out: over a cap
    cap: str            # which cap, in words, for the note and the user's notice
    oversized: frozenset[str] = frozenset()  # ids of kept calls whose arguments were cut


def plan_calls(calls: tuple[ToolCall, ...], ran_before: int, seen_ids: set[str]
               ) -> CallPlan:
    """At most MAX_CALLS_PER_ROUND of the reply, and no more than the turn has left. An id
    already used this turn (a server may repeat one) gets a suffix: a second result under
    the same id would drop out of the context and break strict APIs."""
    room = max(0, min(MAX_CALLS_PER_ROUND, MAX_CALLS_PER_TURN - ran_before))
    kept, oversized = [], set()
    for call in calls[:room]:
        call_id, n = call.id, 1
        while call_id in seen_ids:
            n += 1
            call_id = f"{call.id}_{n}"
        seen_ids.add(call_id)
        call = call if call_id == call.id else dataclasses.replace(call, id=call_id)
        if len(call.arguments) > MAX_ARGUMENT_CHARS:  # 5 MB of arguments, resent every
            oversized.add(call_id)  # round, would flood the window and the database
            call = dataclasses.replace(call, arguments=json.dumps(
                {"omitted": f"{len(call.arguments):,} characters of arguments"}))
        kept.append(call)
    cap = (f"at most {MAX_CALLS_PER_ROUND} a reply" if room == MAX_CALLS_PER_ROUND
           else f"at most {MAX_CALLS_PER_TURN} a turn")
    return CallPlan(tuple(kept), len(calls) - len(kept), cap, frozenset(oversized))


def oversized_result() -> str:
    return (f"not run: its arguments were over {MAX_ARGUMENT_CHARS:,} characters; ask for "
            "less at once")


def not_run_note(plan: CallPlan) -> str:
    """Appended to the round's last result, so the model knows the rest never ran."""
    return (f"\n\n[{plan.not_run:,} more tool call{'s' if plan.not_run != 1 else ''} in this "
            f"reply {'were' if plan.not_run != 1 else 'was'} not run: limit of tool calls, "
            f"{plan.cap}. Answer with what you have, or ask for less at once.]")


def fit_tool_results(projection: ContextProjection, this_turn_from: int,
                     fits: Callable[[ContextProjection], bool]) -> ContextProjection:
    """The request-local copy that fits: earlier turns' tool results shortened first, then
    every result, shorter each time, down to LEAST_TOOL_RESULT_CHARS. The durable rows keep
    every byte; a cut result says how to read it whole. The last try is returned even if it
    does not fit: the provider's overflow recovery takes it from there."""
    view = shorten_old_tool_results(projection, this_turn_from)
    max_chars = OLD_TOOL_RESULT_CHARS
    while not fits(view) and max_chars >= LEAST_TOOL_RESULT_CHARS:
        view = shorten_old_tool_results(projection, None, max_chars)
        max_chars //= 2
    return view


def shorten_old_tool_results(projection: ContextProjection, before_seq: int | None,
                             max_chars: int = OLD_TOOL_RESULT_CHARS) -> ContextProjection:
    """A copy whose tool results from before `before_seq` (None: all of them) keep only head
    and tail: the first, cheapest way to fit a request once tools have run. Their token
    counts are recounted, so the budget of the copy stays honest."""
    raw = []
    for m in projection.raw:
        if (m.role == "tool" and (before_seq is None or m.seq < before_seq)
                and len(m.content) > max_chars):
            text, _ = describe_binary(m.content)
            if len(text) > max_chars:
                half = max_chars // 2
                text = (f"{text[:half]}\n[… {len(text) - max_chars:,} characters of this tool "
                        f"result left out of this request; history_search seq={m.seq} reads "
                        f"it whole …]\n{text[-half:]}")
            m = dataclasses.replace(m, content=text, tokens=tokens.count_message(
                m.role, text, None, m.tool_call_id, m.name))
        raw.append(m)
    return dataclasses.replace(projection, raw=tuple(raw))


def this_turn_only(projection: ContextProjection, user_seq: int) -> ContextProjection:
    """A copy without the whole turns before this one (the summary block stays): the one
    request-local retry after an overflow once tools have run, since restarting the turn
    would run its tools again."""
    raw = tuple(m for m in projection.raw if m.seq >= user_seq)
    return dataclasses.replace(projection, raw=raw, first_raw_seq=raw[0].seq if raw else None)

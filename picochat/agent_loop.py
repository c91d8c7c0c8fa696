"""The tool loop inside one turn: pieces the session worker composes.

Everything here works on request-local copies. The durable history only ever grows by the
assistant tool-call messages and tool results the worker appends, in order, with the turn id;
no checkpoint is created mid-turn.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable

from picochat import tokens
from picochat.compaction.transcript import describe_binary
from picochat.projection import ContextProjection
from picochat.providers.base import ToolCallDelta

MAX_TOOL_STEPS = 8          # tool batches per turn; then one last request without tools
OLD_TOOL_RESULT_CHARS = 2_000


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


def shorten_old_tool_results(projection: ContextProjection, before_seq: int,
                             max_chars: int = OLD_TOOL_RESULT_CHARS) -> ContextProjection:
    """A copy whose tool results from before this turn keep only head and tail: the first,
    cheapest way to fit a request once tools have run. Their token counts are recounted, so
    the budget of the copy stays honest."""
    raw = []
    for m in projection.raw:
        if m.role == "tool" and m.seq < before_seq and len(m.content) > max_chars:
            text, _ = describe_binary(m.content)
            if len(text) > max_chars:
                half = max_chars // 2
                text = (f"{text[:half]}\n[… {len(text) - max_chars:,} characters of an earlier "
                        f"tool result left out of this request …]\n{text[-half:]}")
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

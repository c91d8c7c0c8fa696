"""Turn boundaries and the cut point (design §9).

The raw tail kept after compaction always starts at a whole turn, so an assistant message with
`tool_calls` never lands on the other side of the cut from its results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from picochat.messages import Message


@dataclass(frozen=True)
class Turn:
    messages: tuple[Message, ...]

    @property
    def first_seq(self) -> int:
        return self.messages[0].seq

    @property
    def tokens(self) -> int:
        return sum(m.tokens for m in self.messages)


def group_turns(messages: Sequence[Message]) -> list[Turn]:
    """Group by `turn_id`; rows without one fall back to a role state machine (§9.1).

    Without a turn id, a user message that follows a non-user message opens a new turn
    (consecutive user messages are steering of the same turn). A tool message never opens a
    turn: it belongs with the call before it.
    """
    groups: list[list[Message]] = []
    for m in messages:
        if not groups:
            groups.append([m])
            continue
        prev = groups[-1][-1]
        if m.turn_id is not None or prev.turn_id is not None:
            same = m.turn_id == prev.turn_id or m.role == "tool"
        else:
            same = m.role != "user" or prev.role == "user"
        if same:
            groups[-1].append(m)
        else:
            groups.append([m])
    return [Turn(tuple(g)) for g in groups]


def find_cut_point(turns: Sequence[Turn], keep_tokens: int, min_turns: int = 1) -> int | None:
    """The index of the first turn to keep raw, or None when nothing older is left to fold.

    The newest `min_turns` turns are always kept, however large (§9.2); older whole turns are
    added walking back while the kept tail stays within `keep_tokens`. A turn that would push it
    over is folded into the summary, so one huge turn cannot make every later compaction keep
    it (and fail to shrink the context) forever.
    """
    if len(turns) <= min_turns:
        return None
    index = len(turns) - min_turns
    kept = sum(t.tokens for t in turns[index:])
    while index > 0 and kept + turns[index - 1].tokens <= keep_tokens:
        index -= 1
        kept += turns[index].tokens
    return index if index > 0 else None

"""Turn boundaries and the cut point.

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
    """Whole turns, in seq order: the units a cut may fall between.

    Rows are grouped by their durable `turn_id`, wherever they lie. Two processes writing one
    session (`picochat ask` in two shells) interleave their turns' rows, and no seq boundary
    then separates those turns: they form one unit, so a cut never falls between a question
    and its answer. Rows without a turn id fall back to a role state machine: a user message
    that follows a non-user message opens a new turn (consecutive user messages are steering
    of the same turn); a tool message never opens one (it belongs with the call before it).
    """
    keys = _turn_keys(messages)
    last = {key: i for i, key in enumerate(keys)}  # where each turn's last row lies
    units: list[Turn] = []
    current: list[Message] = []
    end = -1
    for i, (m, key) in enumerate(zip(messages, keys)):
        if current and i > end:  # every turn begun so far has ended: a boundary
            units.append(Turn(tuple(current)))
            current = []
        current.append(m)
        end = max(end, last[key])
    if current:
        units.append(Turn(tuple(current)))
    return units


def find_cut_point(turns: Sequence[Turn], keep_tokens: int, min_turns: int = 1) -> int | None:
    """The index of the first turn to keep raw, or None when nothing older is left to fold.

    The newest `min_turns` turns are always kept, however large; older whole turns are
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


def _turn_keys(messages: Sequence[Message]) -> list[tuple[str, object]]:
    """Each row's turn: its turn id, or for a row without one, the turn the roles say. A tool
    row never opens a turn: one whose id was not seen yet joins the row before it, and so
    does the rest of that id."""
    keys: list[tuple[str, object]] = []
    alias: dict[str, tuple[str, object]] = {}
    opened = 0
    prev: Message | None = None
    for m in messages:
        if m.turn_id is not None:
            key: tuple[str, object] = alias.get(m.turn_id, ("id", m.turn_id))
            if m.role == "tool" and m.turn_id not in alias and prev is not None:
                key = keys[-1]
            alias.setdefault(m.turn_id, key)
        elif prev is not None and (m.role == "tool" or (
                prev.turn_id is None and (m.role != "user" or prev.role == "user"))):
            key = keys[-1]
        else:
            opened += 1
            key = ("roles", opened)
        keys.append(key)
        prev = m
    return keys

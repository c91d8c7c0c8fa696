"""Pins: statements the user keeps verbatim in every request (issue 30, item 6).

A pin answers the most common complaint about compaction in every client: an instruction
given early is forgotten once it is summarized. A pin is never summarized and never evicted:
it travels in its own block, after the system prompt and before any summary, until `/unpin`.
Its cost is fixed like the system prompt's, so pins together may take only a tenth of the
compaction threshold (`budget.pin_cap`); a pin past that is refused, never trimmed.
"""

from __future__ import annotations

import re
from typing import Sequence

from picochat.messages import Pin
from picochat.summary_contract import SUMMARY_CLOSE, SUMMARY_OPEN, reads_as_facts_heading
from picochat.textsafe import line_key

PINS_OPEN = "[Pinned by the user: keep to these in every answer]"
PINS_CLOSE = "[End pinned]"
# Lines a pin may not hold: with one inside, a pin could end its own block early or pass
# for a summary, and the model would read the rest as something else.
FRAME_LINES = (PINS_OPEN, PINS_CLOSE, SUMMARY_OPEN, SUMMARY_CLOSE)
MAX_PIN_CHARS = 4_000  # a statement, not a paste: a pasted file belongs in a message
# Characters that hide text from the one who pins it: Unicode tags (invisible ASCII) and bidi
# overrides and isolates. A pin is sent in every request as the user's own words.
_HIDDEN = re.compile("[\U000E0000-\U000E007F\u202A-\u202E\u2066-\u2069]")
_FRAMES = frozenset(line_key(line) for line in FRAME_LINES)


def pins_block(pins: Sequence[Pin]) -> str | None:
    """The text of the user-role message that carries the pins, each verbatim on its own
    bullet (a pin of several lines keeps its lines); None when there are none."""
    if not pins:
        return None
    body = "\n".join(f"- {pin.text}" for pin in pins)
    return f"{PINS_OPEN}\n{body}\n{PINS_CLOSE}"


def pin_problem(text: str) -> str | None:
    """Why `text` cannot be pinned as it is, in the user's words; None when it can."""
    if not text.strip():
        return "a pin needs some text"
    if len(text) > MAX_PIN_CHARS:
        return (f"a pin holds at most {MAX_PIN_CHARS:,} characters and this one has "
                f"{len(text):,}: pin the statement that matters, not a whole paste")
    if _HIDDEN.search(text):
        return ("it holds invisible characters (Unicode tags or bidi controls) that would "
                "send the model text you cannot see")
    for line in text.splitlines():
        if line_key(line) in _FRAMES:
            return (f"a pin may not hold a line like {line.strip()!r}, which picochat uses "
                    "to frame what the model reads")
        if reads_as_facts_heading(line):
            return (f"a pin may not hold a heading like {line.strip()!r}: the model would "
                    "read what follows as picochat's ledger of your facts; pin the "
                    "statement itself")
    return None


def pin_label(pin: Pin, width: int = 72) -> str:
    """One line for lists: number, cost and the start of the text."""
    flat = " ".join(pin.text.split())
    if len(flat) > width:
        flat = flat[: width - 1].rstrip() + "…"
    source = f", from message {pin.source_seq}" if pin.source_seq is not None else ""
    unit = "token" if pin.tokens == 1 else "tokens"
    return f"#{pin.number} ({pin.tokens:,} {unit}{source}): {flat}"


def pins_stay(count: int, unpin: str = "/unpin N") -> str:
    """What `/clear` says of the pins: they are not history, so they stay."""
    if not count:
        return ""
    said = "your pin stays" if count == 1 else f"your {count} pins stay"
    return f"; {said} in every request ({unpin} removes one)"

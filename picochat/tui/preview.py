"""How much of one message the transcript shows: all of it, unless it is huge.

A 10 MB paste took 12 s to open and a 10 MB answer 71 s (every line wrapped and laid out),
and nobody reads that in a chat view. A huge message shows its head and tail, cut at line
breaks, and says how much is left out; copying it (c) still takes the whole text.
"""

from __future__ import annotations

import re

HEAD_CHARS = 16_000
TAIL_CHARS = 4_000
SLACK = 2_000   # how far a cut may move to land on a line break


def preview(text: str, head: int = HEAD_CHARS, tail: int = TAIL_CHARS,
            markdown: bool = False) -> str:
    """`text` whole, or its head and tail around a note. With `markdown`, a code fence the
    cut falls in is closed before the note and opened again before the tail, so the note is
    never shown as code and the rest of the code never as prose."""
    if len(text) <= head + tail + SLACK:
        return text
    start = text.rfind("\n", head - SLACK, head)
    start = head if start < 0 else start + 1
    end = len(text) - tail
    if tail:
        line = text.find("\n", end, end + SLACK)
        end = end if line < 0 else line + 1
    left_out = end - start
    note = f"… {left_out:,} characters not shown ({len(text):,} in all): c copies all of it"
    before, after = text[:start], text[end:]
    if markdown:
        inside = _open_fence(text, start)
        if inside is not None:
            before += ("" if before.endswith("\n") else "\n") + inside[0] + "\n"
        inside = _open_fence(text, end)
        if inside is not None:
            after = inside[1] + "\n" + after
    return before + f"\n\n{note}\n\n" + after


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})([^\n]*)$", re.M)


def _open_fence(text: str, upto: int) -> tuple[str, str] | None:
    """The fence open at `upto` as (its marker, its opening line), or None."""
    opened: tuple[str, str] | None = None
    for m in _FENCE.finditer(text, 0, upto):
        marker, rest = m.group(1), m.group(2)
        if opened is None:
            if not (marker[0] == "`" and "`" in rest):  # a backtick run in text is no fence
                opened = (marker, m.group(0))
        elif marker[0] == opened[0][0] and len(marker) >= len(opened[0]) and not rest.strip():
            opened = None
    return opened

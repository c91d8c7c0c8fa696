"""How much of one message the transcript shows: all of it, unless it is huge.

A 10 MB paste took 12 s to open and a 10 MB answer 71 s (every line wrapped and laid out),
and nobody reads that in a chat view. A huge message shows its head and tail, cut at line
breaks, and says how much is left out; copying it (c) still takes the whole text.
"""

from __future__ import annotations

HEAD_CHARS = 16_000
TAIL_CHARS = 4_000
SLACK = 2_000   # how far a cut may move to land on a line break


def preview(text: str, head: int = HEAD_CHARS, tail: int = TAIL_CHARS) -> str:
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
    return text[:start] + f"\n\n{note}\n\n" + text[end:]

"""How much of one message the transcript shows: all of it, unless it is huge.

A 10 MB paste took 12 s to open and a 10 MB answer 71 s (every line wrapped and laid out),
and nobody reads that in a chat view. A huge message shows its head and tail, cut at line
breaks, and says how much is left out; copying it (c) still takes the whole text.

A long message of the user's (a pasted log or file) is folded further (`fold`): its first
lines, a note, its last lines. Even head and tail, a 240 KB paste filled some 300 rows, and
scrolling back past it to the conversation was the reader's job; they know what they pasted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


# A user message over 40 lines or 4,000 characters is folded: either is more than the
# transcript's height at 80x24 (about 17 rows) and about all of it at 120x40 (4,000
# characters wrap to some 35 rows at 120 columns); a long typed question stays whole.
FOLD_LINES = 40
FOLD_CHARS = 4_000
FOLD_HEAD = 6          # lines shown above the note: enough to know which paste it is
FOLD_TAIL = 2          # and below it: a question typed after the paste stays in view
FOLD_LINE_CHARS = 200  # a longer shown line is cut (a 1 MB line would fill every row)


@dataclass(frozen=True)
class Fold:
    """A long message folded: `head`, then the one-line `note`, then `tail` (may be "")."""

    head: str
    note: str
    tail: str

    @property
    def plain(self) -> str:
        return "\n".join(part for part in (self.head, self.note, self.tail) if part)


def fold(text: str, lines: int = FOLD_LINES, chars: int = FOLD_CHARS) -> Fold | None:
    """`text` folded if it is over `lines` lines or `chars` characters, else None. The note
    says how much is folded away and how to see it (Enter) or take all of it (c)."""
    body = text.rstrip("\n")
    total = body.count("\n") + 1
    if total <= lines and len(text) <= chars:
        return None
    if total > FOLD_HEAD + FOLD_TAIL:
        head = body.split("\n", FOLD_HEAD)[:FOLD_HEAD]
        tail = body.rsplit("\n", FOLD_TAIL)[-FOLD_TAIL:]
    else:  # a few long lines: the first of them, cut
        head, tail = body.split("\n", FOLD_HEAD)[:FOLD_HEAD], []
    hidden_lines = total - len(head) - len(tail)
    if hidden_lines:
        more = f"{hidden_lines:,} more line{'s' if hidden_lines != 1 else ''}"
    else:  # every line has its start shown: what is folded is the rest of the cut ones
        shown = sum(len(_cut(line).removesuffix("…")) if len(line) > FOLD_LINE_CHARS
                    else len(line) for line in head) + len(head) - 1
        more = f"{len(body) - shown:,} more characters"
    head, tail = [_cut(line) for line in head], [_cut(line) for line in tail]
    note = (f"… {more} · {size(text)} in all (folded: over {FOLD_LINES} lines or "
            f"{FOLD_CHARS:,} characters) · Enter expands · c copies all")
    return Fold("\n".join(head), note, "\n".join(tail))


def _cut(line: str) -> str:
    return line if len(line) <= FOLD_LINE_CHARS else line[:FOLD_LINE_CHARS - 1] + "…"


def size(text: str) -> str:
    """How big `text` is as a user reads a file's size: 812 bytes, 240 KB, 10.1 MB."""
    n = len(text.encode("utf-8", "replace"))
    if n < 1_000:
        return f"{n:,} bytes"
    if n < 1_000_000:
        return f"{n / 1_000:,.0f} KB"
    return f"{n / 1_000_000:,.1f} MB"

"""Markdown that stored text cannot break out of. The Markdown export writes picochat's own
structure (the session's title, one heading per message, ids and names) around text a user, a
model or a tool wrote, and its reader must be able to tell the two apart: no text may make a
heading, hide the next one, run as HTML or load an image, whatever it holds. Each helper shows
its text as written (pure, standard library only).

- `fence(text)`: a block of text, as a code block no line of it can close.
- `code_span(text)`: an id or a name, on one line, as inline code.
- `plain(text)`: one line of inline text (a heading's), every Markdown character escaped.
"""

from __future__ import annotations

import re

from picochat.textsafe import clean

_BACKTICKS = re.compile("`+")

# Line breaks (CommonMark's "\r" and "\n", and U+2028/U+2029) and the other control characters:
# in a line of picochat's own, one would end the line and let the text start one of its own.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")

# What `clean` drops on a terminal besides whole escape sequences: all controls but tab, newline.
_DROPPED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")

# What may start an inline construct (code, emphasis, a link or image, HTML, an entity, math,
# a table cell) or close an ATX heading: escaped with a backslash, it shows as itself.
_INLINE = re.compile(r"[\\`*_\[\]<>!&#~|$]")


def longest_backtick_run(text: str) -> int:
    """The longest run of backticks in `text`, as stored and as a terminal shows it: the
    terminal drops escape sequences and control characters (`clean`), which may join two runs
    into a longer one."""
    views = (text, clean(text)) if _DROPPED.search(text) else (text,)
    return max((len(run) for view in views for run in _BACKTICKS.findall(view)), default=0)


def fence(text: str, lang: str = "") -> str:
    """`text` as a fenced code block, shown exactly as written. The fence is longer than any
    backtick run inside, and only a backtick line at least as long closes it (never a tilde
    fence), so no line of `text` ends the block; inside it nothing is read as Markdown."""
    ticks = "`" * max(3, longest_backtick_run(text) + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def one_line(text: str) -> str:
    """`text` with line breaks and control characters written as escapes (`\\n`, `\\x1b`),
    the way Python shows them: still visible, but on the line picochat put it on."""
    return _CONTROLS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def code_span(text: str) -> str:
    """`text` on one line as inline code: delimited by more backticks than any run inside,
    padded with a space where it starts or ends with a backtick or a space (CommonMark takes
    one padding space off each side, so the text shows whole)."""
    text = one_line(text)
    if not text:  # "``" would be read as the opener of a later span on the line
        return "` `"
    ticks = "`" * (longest_backtick_run(text) + 1)
    edges = text[:1] + text[-1:]
    pad = " " if text.strip(" ") and ("`" in edges or " " in edges) else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def plain(text: str) -> str:
    """`text` on one line as inline Markdown that shows as written: every character that could
    start code, emphasis, a link, an image, HTML or an entity is backslash-escaped."""
    return _INLINE.sub(lambda m: "\\" + m.group(), one_line(text))

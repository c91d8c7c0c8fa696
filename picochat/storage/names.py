"""What a session may be called: one line of visible text.

A name is quoted in one-line status messages ("Context cleared for NAME: ..."), in the app's
title and in shell completion. A line break in it splits a status line in two, so a script reading
it sees a second line that picochat never said; a bidi or invisible character makes the name
read as something else. Such names are refused when a session is created or renamed; a name an
older picochat stored is still found by its exact text.
"""

from __future__ import annotations

import unicodedata

from picochat.errors import BadSessionName

MAX_NAME_CHARS = 200
JOINERS = "\u200c\u200d"  # join emoji sequences and shape several scripts; they hide nothing
# Letters that draw as blank space: Hangul fillers, the blank braille pattern, Khmer vowels
# with no glyph. A name of them alone looks empty; among others they hide a gap.
BLANKS = "\u115f\u1160\u17b4\u17b5\u2800\u3164\uffa0"


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a session, or None when it can."""
    if not name.strip():
        return "it is empty"
    if len(name) > MAX_NAME_CHARS:
        return f"it is {len(name):,} characters long; the most is {MAX_NAME_CHARS}"
    for at, char in enumerate(name):
        kind = unicodedata.category(char)
        if char in "\n\r\v\f\x85\u2028\u2029":
            return "it has a line break"
        if kind == "Cc":
            return f"it has a control character (U+{ord(char):04X})"
        if (kind in ("Cf", "Co", "Cn") and char not in JOINERS) or char in BLANKS \
                or (char in JOINERS and _between_ascii(name, at)):
            return f"it has an invisible or unassigned character (U+{ord(char):04X})"
    if not any(unicodedata.category(c)[0] in "LNPS" for c in name):
        return "it has no visible character"
    return None


def _between_ascii(name: str, at: int) -> bool:
    """A joiner with plain ASCII on a side joins nothing there ("a\u200db" reads "ab")."""
    before = name[at - 1] if at > 0 else " "
    after = name[at + 1] if at + 1 < len(name) else " "
    return before.isascii() or after.isascii()


def check_session_name(name: str) -> None:
    """Raise BadSessionName (exit 2) for a name that is not one line of visible text."""
    problem = name_problem(name)
    if problem is not None:
        raise BadSessionName(f"a session name must be one line of visible text, and {problem}",
                             "pick another name")

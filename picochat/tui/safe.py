"""Model output is untrusted: it may carry terminal escapes or control bytes meant to repaint
the screen. Widgets get text through `clean`, and never as Rich markup."""

from __future__ import annotations

import re

# CSI, OSC (up to BEL or ST), other two-byte escapes, then any C0/C1 control but tab and newline.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?"
                      r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]")

# Bidi controls reorder what the terminal shows (the "Trojan Source" trick): shown, not obeyed.
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(text: str) -> str:
    """`text` without escape sequences or control characters (tabs and newlines stay), and
    with bidi controls named as visible text (`<U+202E>`) instead of reordering the line."""
    text = _ESCAPES.sub("", text.replace("\r\n", "\n"))
    return _BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)

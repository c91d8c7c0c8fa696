"""Model output is untrusted: it may carry terminal escapes or control bytes meant to repaint
the screen. Widgets get text through `clean`, and never as Rich markup."""

from __future__ import annotations

import re

# CSI, OSC (up to BEL or ST), other two-byte escapes, then any C0/C1 control but tab and newline.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?"
                      r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """`text` without escape sequences or control characters (tabs and newlines stay)."""
    return _ESCAPES.sub("", text.replace("\r\n", "\n"))

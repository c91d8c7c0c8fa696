"""Model output is untrusted: it may carry terminal escapes or control bytes meant to repaint,
retitle or write the clipboard of the user's terminal, bidi controls that reorder a line, and
invisible characters that carry text no reader sees (zero-width spaces, Unicode tag characters
spelling out a command). Both front ends show it only through this module (pure, standard
library only), and the app copies only what it shows.

- `clean(text)`: the text as it may be shown on a terminal (and copied from one).
- `without_escapes(text)`: the same characters in a row, before invisible ones are named.
- `StreamCleaner`: `clean` for text that arrives in pieces, where an escape sequence may be split
  between two pieces: the joined output equals `clean` of the joined input.
- `json_for_terminal(text)`: JSON text with the characters a terminal would obey written as
  `\\uXXXX` escapes, so it parses to the same data.
"""

from __future__ import annotations

import re
import unicodedata

# CSI, OSC (up to BEL or ST), other two-byte escapes, then any C0/C1 control but tab and newline.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?"
                      r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]")

# Bidi controls reorder what the terminal shows (the "Trojan Source" trick): shown, not obeyed.
_BIDI_CHARS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# Characters a terminal draws as nothing and that join or shape nothing: a zero-width space,
# word joiner, invisible operators, BOM, tag characters (which spell ASCII unseen) and the
# variation selectors past U+E0100 (which can carry bytes behind one emoji). Shown, like bidi.
# ZWJ and ZWNJ stay: emoji sequences and several scripts need them, and they hide no text.
_INVISIBLE_CHARS = ("\u180e\u200b\u2060-\u2064\u206a-\u206f\ufeff\ufff9-\ufffb"
                    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e007f"
                    "\U000e0100-\U000e01ef")
_NAMED = re.compile(f"[{_BIDI_CHARS}{_INVISIBLE_CHARS}]")

# The end of a piece that `_ESCAPES` would read differently once more text arrives: a lone ESC,
# a CSI without its final byte, an OSC without its terminator (perhaps with the ESC of an ST).
# The leftmost start that reaches the end wins, so an open OSC is held from its ESC on.
_OPEN_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?)?\Z")

_CSI_KEEP = 128  # of an open CSI's head and of its tail: what is held while it stays open

# What json.dumps(ensure_ascii=False) leaves raw that a terminal may obey or hide: DEL, C1,
# bidi controls, invisible characters.
_JSON_UNSAFE = re.compile(f"[\x7f-\x9f{_BIDI_CHARS}{_INVISIBLE_CHARS}]")


def clean(text: str) -> str:
    """`text` without escape sequences or control characters (tabs and newlines stay), and
    with bidi controls and invisible characters named as visible text (`<U+202E>`,
    `<U+200B>`) instead of reordering the line or hiding text in it."""
    return _NAMED.sub(lambda m: f"<U+{ord(m.group()):04X}>", without_escapes(text))


def without_escapes(text: str) -> str:
    """`text` without escape sequences or control characters (tabs and newlines stay, CR LF
    becomes LF): the characters `clean` keeps in a row. Whatever reads text for what it says
    (key masking) reads this, or a key spelled with `ESC[0m` or NUL between its characters
    would pass, then show whole once cleaned."""
    return _ESCAPES.sub("", text.replace("\r\n", "\n"))


class StreamCleaner:
    """`clean` for a stream: `feed` each piece and write what it returns, then write `flush()`.

    A trailing escape sequence that is not complete yet is held back until the next piece or the
    end, so a sequence split between two pieces is removed whole rather than leaving half of it
    on the screen. An open OSC (a title, a clipboard write) is held as its first two characters
    only: its body is dropped whatever follows, so a long one costs no memory."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, piece: str) -> str:
        text = self._held + piece
        open_escape = _OPEN_ESCAPE.search(text)
        if open_escape is None:
            self._held = ""
            return clean(text)
        held = open_escape.group()
        if held.startswith("\x1b]"):  # an open OSC is dropped whatever its body: keep no body
            held = "\x1b]\x1b" if len(held) > 2 and held.endswith("\x1b") else "\x1b]"
        elif len(held) > 2 * _CSI_KEEP:  # a CSI that never ends: only its ends are kept, so
            held = held[:_CSI_KEEP] + held[-_CSI_KEEP:]  # each piece rescans a bounded text
        self._held = held
        return clean(text[:open_escape.start()])

    def flush(self) -> str:
        """The end of the stream: what is still held, cleaned as `clean` would at the end."""
        text, self._held = self._held, ""
        return clean(text)


def json_for_terminal(text: str) -> str:
    """JSON text (from json.dumps) with DEL, C1 controls, bidi controls and invisible
    characters as `\\uXXXX` escapes (a pair of them past U+FFFF, as JSON spells those);
    json.dumps already escapes C0. Outside strings JSON text is ASCII, so the result parses to
    the same data."""
    return _JSON_UNSAFE.sub(lambda m: _json_escape(m.group()), text)


def _json_escape(char: str) -> str:
    """`char` as JSON's `\\uXXXX` escapes: its UTF-16 code units (a surrogate pair past
    U+FFFF)."""
    units = char.encode("utf-16-be")
    return "".join(f"\\u{units[i] << 8 | units[i + 1]:04x}" for i in range(0, len(units), 2))


# Cyrillic and Greek letters that pass for Latin ones, as the Latin they pass for: a line that
# only looks like one of picochat's own (a ledger heading, a pins frame) is read as it looks.
LOOKALIKE_LETTERS = str.maketrans(
    "АВЕКМНОРСТХаеорсхуіІЅѕΑΒΕΖΗΙΚΜΝΟΡΤΥΧаеіο", "ABEKMHOPCTXaeopcxyiISsABEZHIKMNOPTYXaeio")


_EDGES = re.compile(r"^[\W_]+|[\W_]+$")


def as_read(line: str) -> str:
    """`line` as a reader sees it: compatibility forms (NFKC: fullwidth `＃` is `#`), no
    invisible format characters (zero-width spaces and joiners, bidi marks), control
    characters as spaces, lookalike letters as the Latin they pass for. ASCII without
    control characters is itself."""
    if line.isascii() and line.isprintable():
        return line
    norm = unicodedata.normalize("NFKC", line).translate(LOOKALIKE_LETTERS)
    return "".join(" " if unicodedata.category(c) == "Cc" else c for c in norm
                   if unicodedata.category(c) != "Cf")




def line_key(line: str) -> str:
    """A line as a reader would take it, for telling whether it passes for one of picochat's
    own frame lines: compatibility forms, no invisible format or control characters, lookalike
    letters as Latin, case and spacing folded, the brackets and bullets around it gone."""
    if line.isascii():  # nothing to normalize but control characters: the common line, fast
        norm = line if line.isprintable() else _ASCII_CONTROL.sub("", line)
    else:
        norm = unicodedata.normalize("NFKC", line).translate(LOOKALIKE_LETTERS)
        norm = "".join(c for c in norm if unicodedata.category(c) not in ("Cf", "Cc"))
    return _EDGES.sub("", " ".join(norm.casefold().split()))


_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def first_line(text: str, limit: int) -> str:
    """The first line of `text` with words in it, cleaned, cut to `limit` characters ("…"):
    how a list names a session or a branch by how it began."""
    line = next((part.strip() for part in clean(text).splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[:limit - 1] + "…"

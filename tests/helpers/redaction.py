"""The leak oracle: every way a key could come back encoded (line breaks, JSON and URL escapes,
HTML entities, base64 and base32 at every alignment, hex, any case, backwards, with gaps and
invisible characters taken out), decoded, and searched for any WINDOW characters of the key.
It does not trust the code under test."""

from __future__ import annotations

import base64
import html
import re
import unicodedata
from collections.abc import Callable
from urllib.parse import unquote, unquote_plus

KEY = "gw-Zq7x/Wv3+Tk_9Lm-Rb2Yc8Hn4Pd6Jf"  # a gateway key: `/`, `+`, `_`, `-`, both cases
WINDOW = 12  # this many characters of a key in a row, in any decoding, is a leak


def _unbreak(text: str) -> str:
    return re.sub(r"[ \t]*(?:\r\n|\r|\n|(?:\\+[rn])+)[ \t]*", "", text)


def _json_unescape(text: str) -> str:
    text = re.sub(r"\\+u([0-9a-fA-F]{4})", lambda m: chr(int(m[1], 16)), text)
    text = re.sub(r"\\+x([0-9a-fA-F]{2})", lambda m: chr(int(m[1], 16)), text)
    return re.sub(r"\\+([/\"\\])", r"\1", text)


def _base64_decodings(text: str) -> set[str]:
    """Every base64 or base64url run, decoded from each of its four possible starts."""
    out: set[str] = set()
    for run in re.findall(r"[A-Za-z0-9+/_\-]{8,}", text):
        std = run.translate(str.maketrans("-_", "+/"))
        for start in range(4):
            part = std[start:]
            part = part[: len(part) - len(part) % 4]
            out.add(base64.b64decode(part).decode("latin-1"))
    return out


def _unhide(text: str) -> str:
    """Without whitespace and the characters a terminal draws as nothing."""
    return "".join(c for c in text if not c.isspace() and unicodedata.category(c) != "Cf")


def _reversed(text: str) -> str:
    return text[::-1]


def _hex_decodings(text: str) -> set[str]:
    """Every run of hex byte pairs (separators and `\\x` or `0x` prefixes dropped), decoded."""
    bare = re.sub(r"[:,.\- ]|\\+x|0x", "", text)
    return {bytes.fromhex(part[: len(part) // 2 * 2]).decode("latin-1")
            for run in re.findall(r"[0-9a-fA-F]{8,}", bare) for part in (run, run[1:])}


def _base32_decodings(text: str) -> set[str]:
    """Every base32 run, in either case, decoded from each of its eight possible starts."""
    out: set[str] = set()
    for run in re.findall(r"[A-Za-z2-7]{8,}", text):
        for start in range(8):
            part = run.upper()[start:]
            out.add(base64.b32decode(part[: len(part) - len(part) % 8]).decode("latin-1"))
    return out


def _as_shown(text: str) -> str:
    """What a terminal shows in a row: escape sequences and control characters gone,
    compatibility forms (fullwidth) folded."""
    text = re.sub(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?"
                  r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]", "", text)
    return unicodedata.normalize("NFKC", text)


_DECODERS: tuple[Callable[[str], str | set[str]], ...] = (
    _unbreak, _json_unescape, unquote, unquote_plus, html.unescape, _base64_decodings,
    _unhide, _reversed, _hex_decodings, _base32_decodings, _as_shown)


def _views(text: str, depth: int = 3) -> set[str]:
    """`text` and everything it decodes to, up to `depth` decodings deep."""
    seen, todo = {text}, [text]
    for _ in range(depth):
        found: set[str] = set()
        for view in todo:
            for decode in _DECODERS:
                result = decode(view)
                found |= result if isinstance(result, set) else {result}
        todo = [v for v in found if v not in seen]
        seen |= found
    return seen


def leaks(text: str, key: str) -> list[str]:
    """The decodings of `text` that hold any WINDOW characters of `key`, in any case."""
    pieces = {key[i:i + WINDOW].casefold() for i in range(len(key) - WINDOW + 1)}
    return [v for v in _views(text) if any(p in v.casefold() for p in pieces)]

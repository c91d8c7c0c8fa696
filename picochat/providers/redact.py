"""Keys never reach the user or the log through a server's words.

Servers quote what they were sent ("Incorrect API key provided: abc123"). Every key picochat
configured, and every provider key in the environment litellm would read, is replaced by
`[key]` in provider error text before it becomes a user line, and in whatever litellm, httpx or
the OpenAI SDK log.

A server may quote a key as it came, or encoded: JSON-escaped (`\\/`, `\\u002d`, twice over
in a quoted body, or Python's `\\x2d`), URL-encoded (`%2F` or `%2f`, `+` for a space, twice
over), as an HTML entity, lower- or upper-cased, broken across lines, or inside base64 (an
echoed `Authorization: Bearer KEY` or `Basic user:KEY` header, base64url too). Each character
of a key may come in any of these forms, so one pattern per key catches every mix of them. In
base64 the key's bits sit at one of three alignments whatever stands before it ("Bearer ",
"user:", nothing): the characters made of key bits alone are searched for, and the whole
base64 run around them is masked.

Beyond what an honest server writes, a key is caught written backwards, in hex, in base32, with
spaces or invisible characters between its characters, and any 12 characters of it in a row
(its last 12, say) are masked with the run they stand in.

A key of any length is redacted. A key of 8 characters or more is replaced wherever it occurs,
in every form above; a shorter one only where it stands as a whole token (not inside a longer
run of letters, digits, `_` or `-`) and in its own case: a 3-character key is still caught in
"provided: abc." but a 1-character key does not blank out every occurrence of that letter, or
of its capital, in the message.

Keys picochat does not know are caught by their shape: `sk-…`-style keys and `Bearer` tokens.
"""

from __future__ import annotations

import base64
import functools
import logging
import os
import re
import threading
import unicodedata
from collections.abc import Iterable

from picochat.textsafe import without_escapes

MASK = "[key]"
ANYWHERE_MIN = 8  # shorter keys are matched as whole tokens only, in their own case
# Environment variables litellm reads provider keys from (OPENAI_API_KEY, AZURE_API_KEY, ...).
_KEY_ENV_NAME = re.compile(r"_(?:API_KEY|API_TOKEN|AUTH_TOKEN|SECRET_ACCESS_KEY)$|^HF_TOKEN$")
# An escape's backslash and a percent-encoding's `%`, each escaped again up to 3 times over;
# bounded, so a long run of backslashes or `%25` costs linear time, not quadratic.
_ESC = r"\\{1,16}"
_PCT = "%(?:25){0,3}"
_DASH = rf"(?:-|{_ESC}u002[dD]|{_PCT}2[dD])"  # a hyphen, JSON-escaped or URL-encoded too
_KEY_LIKE = re.compile(  # OpenAI/Anthropic style, even with its hyphens escaped
    rf"\b(?:sk|pk|rk|key){_DASH}(?:[A-Za-z0-9_]|{_DASH}){{12,}}")
_BEARER = re.compile(  # an Authorization header's token: 8+ characters, a digit among them
    r"(?i)(\bbearer\s+)(?=[A-Za-z._~+/=\-]*[0-9])[A-Za-z0-9._~+/=\-]{8,}")
_TOKEN_CHAR = r"[A-Za-z0-9_\-]"
# What a terminal draws as nothing or as a gap: spaces, a soft hyphen, zero-width characters,
# bidi marks, a BOM and the tag characters. A key spelled out with these between its characters
# reads as the key on screen.
_GAP = ("[ \t\u00a0\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069"
        "\ufeff\U000e0000-\U000e007f]{0,16}")
# Between two characters of a long key: gaps, and one line break (real, or `\n` in JSON).
_BREAK = rf"{_GAP}(?:(?:\r\n|\r|\n|(?:{_ESC}[rn]){{1,2}}){_GAP})?"
# Between two bytes of a key written in hex: nothing, a separator, or each byte's own prefix.
_HEX_SEP = r"[ :,.\-]{0,2}(?:\\{1,4}x|0[xX])?"
FRAGMENT = 12  # this many characters of a long key in a row are masked wherever they occur
_JSON_SHORT = {"/": "/", '"': '"', "\\": "\\", "\b": "b", "\f": "f", "\n": "n", "\r": "r",
               "\t": "t"}
# What a base64 run around a key's bits may be made of (escaped too); `=` only ends one.
_B64_RUN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-%\\")
_URLSAFE = str.maketrans("+/", "-_")

_lock = threading.Lock()
_configured: set[str] = set()


def register(key: str | None) -> None:
    """Remember a key this process was configured with (a model's key from its api_key_env)."""
    if key:
        with _lock:
            _configured.add(key)


def known_keys(extra: Iterable[str | None] = ()) -> set[str]:
    """Configured keys, provider keys in the environment, and `extra`."""
    with _lock:
        keys = set(_configured)
    keys.update(v for name, v in os.environ.items() if _KEY_ENV_NAME.search(name))
    keys.update(k for k in extra if k)
    return {k for k in keys if k.strip()}


def redact(text: str, extra: Iterable[str | None] = ()) -> str:
    """`text` with every known key, in any form a server may quote it, and anything shaped
    like a key (`sk-…`, a `Bearer` token) masked. The text is first read as a terminal shows
    it: escape sequences and control characters out, compatibility forms (fullwidth, math
    letters) folded, so none of them between or inside a key's characters hides it."""
    text = unicodedata.normalize("NFKC", without_escapes(text))
    for key in sorted(known_keys(extra), key=len, reverse=True):
        quoted, encoded, fragments = _patterns(key.strip())
        text = quoted.sub(MASK, text)
        if encoded is not None:
            text = _mask_runs(text, encoded)
        if fragments is not None:
            text = _mask_runs(text, fragments)
    text = _KEY_LIKE.sub(MASK, text)
    return _BEARER.sub(rf"\g<1>{MASK}", text)


Patterns = tuple[re.Pattern[str], re.Pattern[str] | None, re.Pattern[str] | None]


@functools.lru_cache(maxsize=64)
def _patterns(key: str) -> Patterns:
    """The key as a server may quote it; for a long key also the base64 or base32 that holds
    it, and any FRAGMENT of its characters in a row. Built once per key: they are long."""
    if len(key) < ANYWHERE_MIN:  # whole tokens, own case: a short key is an ordinary word too
        forms = [_spelled(key, fold=False, sep="")]
        forms += [_spelled(f, fold=False, sep="") for f in _base64_whole(key)]
        body = "|".join(forms)
        return re.compile(rf"(?<!{_TOKEN_CHAR})(?:{body})(?!{_TOKEN_CHAR})"), None, None
    quoted = [_spelled(key, fold=True, sep=_BREAK), _spelled(key[::-1], fold=True, sep=_BREAK),
              _HEX_SEP.join(_hex(f"{byte:02x}") for byte in key.encode("utf-8"))]
    cores = sorted(_base64_cores(key) | _base32_cores(key), key=len, reverse=True)
    encoded = "|".join(_BREAK.join(_encoded_char(c) for c in core) for core in cores)
    fragments = None
    if len(key) > FRAGMENT:  # the key whole is caught above, in all its forms
        grams = {g[i:i + FRAGMENT] for g in (key, key[::-1])
                 for i in range(len(key) - FRAGMENT + 1)}
        fragments = re.compile("|".join(map(re.escape, sorted(grams))), re.IGNORECASE)
    return re.compile("|".join(quoted)), re.compile(encoded), fragments


def _spelled(text: str, fold: bool, sep: str) -> str:
    """A pattern for `text` with each character in any of its quoted forms, `sep` between."""
    return sep.join(_char_forms(char, fold) for char in text)


def _char_forms(char: str, fold: bool) -> str:
    """One character as it may be written: itself (either case when `fold`), JSON-escaped,
    URL-encoded, an HTML entity or a Python `\\x2d`, each escape possibly escaped again."""
    variants = sorted({char} | ({v for v in (char.lower(), char.upper()) if len(v) == 1}
                                if fold else set()))
    forms = [_one_of([re.escape(v) for v in variants]), _json_escape(variants),
             _url_escape(variants), _html_escape(variants)]
    forms += [_ESC + "x" + _hex(f"{ord(v):02x}") for v in variants if ord(v) < 0x100]
    forms += [_ESC + re.escape(_JSON_SHORT[v]) for v in variants if v in _JSON_SHORT]
    if char == " ":
        forms.append(r"\+")
    return "(?:" + "|".join(forms) + ")"


def _encoded_char(char: str) -> str:
    """A base64 character as it may be written: letters and digits as they are (no encoder
    escapes them), `+`, `/`, `=`, `-` and `_` also escaped."""
    return re.escape(char) if char.isalnum() else _char_forms(char, fold=False)


def _one_of(options: list[str]) -> str:
    """A group matching any of `options` (a character class for single characters)."""
    if all(len(o) == 1 for o in options) and len(options) > 1:
        return "[" + "".join(options) + "]"
    return options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"


def _json_escape(variants: list[str]) -> str:
    """`\\u002d` for `-` (a surrogate pair beyond the BMP), any case, any number of `\\`."""
    def units(char: str) -> str:
        raw = char.encode("utf-16-be")
        return (_ESC + "u").join(_hex(raw[i:i + 2].hex()) for i in range(0, len(raw), 2))
    return _ESC + "u" + _one_of([units(v) for v in variants])


def _url_escape(variants: list[str]) -> str:
    """`%2D` or `%2d` per UTF-8 byte, also encoded twice (`%252D`)."""
    def octets(char: str) -> str:
        return "".join(_PCT + _hex(f"{byte:02x}") for byte in char.encode("utf-8"))
    return _one_of([octets(v) for v in variants])


def _html_escape(variants: list[str]) -> str:
    """`&#45;` or `&#x2d;`, the `;` optional as browsers take it."""
    decimal = _one_of([str(ord(v)) for v in variants])
    hexa = _one_of([_hex(f"{ord(v):x}") for v in variants])
    return rf"&#(?:0*{decimal}|[xX]0*{hexa});?"


def _hex(digits: str) -> str:
    """Hex digits that match in either case."""
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in digits)


def _base64_whole(key: str) -> set[str]:
    """Base64 and base64url of a short key alone and of `Bearer KEY`, as whole tokens."""
    raw = {base64.b64encode(s.encode()).decode() for s in (key, f"Bearer {key}")}
    return raw | {s.translate(_URLSAFE) for s in raw}


def _base64_cores(key: str) -> set[str]:
    """What any base64 (or base64url) text holding the key contains: for each of the three
    byte alignments, the characters made of the key's bits alone, so whatever precedes the key
    ("Bearer ", "user:", nothing) or follows it does not change them."""
    data = key.encode("utf-8")
    cores: set[str] = set()
    for shift in range(3):
        encoded = base64.b64encode(bytes(shift) + data).decode()
        core = encoded[-(-shift * 8 // 6):(shift + len(data)) * 8 // 6]
        cores |= {core, core.translate(_URLSAFE)}
    return cores


def _base32_cores(key: str) -> set[str]:
    """As `_base64_cores`, for base32 (five bytes to eight characters: five alignments), in
    either case."""
    data = key.encode("utf-8")
    cores: set[str] = set()
    for shift in range(5):
        encoded = base64.b32encode(bytes(shift) + data).decode()
        core = encoded[-(-shift * 8 // 5):(shift + len(data)) * 8 // 5]
        cores |= {core, core.lower()}
    return cores


def _mask_runs(text: str, pattern: re.Pattern[str]) -> str:
    """Each match of a base64 or base32 core, or of a key's fragment, masked with the whole
    run of such characters around it: the run's edge characters still carry a few of the key's
    bits, or the rest of the key."""
    pieces: list[str] = []
    last = 0
    for match in pattern.finditer(text):
        if match.start() < last:
            continue  # inside a run already masked
        start, end = _run_around(text, match.start(), match.end(), last)
        pieces += [text[last:start], MASK]
        last = end
    return "".join(pieces) + text[last:] if pieces else text


def _run_around(text: str, start: int, end: int, floor: int) -> tuple[int, int]:
    """The base64 run holding `text[start:end]`, not reaching back before `floor`."""
    while start > floor and text[start - 1] in _B64_RUN:
        start -= 1
    while end < len(text) and text[end] in _B64_RUN:
        end += 1
    while end < len(text) and text[end] == "=":
        end += 1
    return start, end


class RedactingFilter(logging.Filter):
    """Masks keys in a record's message and traceback before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            record.msg = redact(record.getMessage())
            record.args = None
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text:
                record.exc_text = redact(record.exc_text)
        except Exception:  # a log line is never worth a crash
            record.msg, record.args, record.exc_info, record.exc_text = (
                "log record dropped: could not redact it", None, None, None)
        return True

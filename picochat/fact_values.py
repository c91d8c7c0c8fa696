"""Exact values in text: the patterns that find ports, paths, URLs, ids, versions, commands,
settings and numbers with units, and the cues of a user's correction.

The ledger's statements (`picochat.statements`) are built on them; they sit below both, so the
patterns have one home. Pure and standard library only.
"""

from __future__ import annotations

import re
from typing import Iterator

SEP = " · "
VALUE_CHARS = 160      # longer values (a long command) are cut, marked with …
CORRECTION_CHARS = 200

# One pattern, tried left to right at each position: the first alternative that matches wins, so
# a URL is not also a path and an address with a port is not also a version.
_FACT = re.compile(
    r"(?P<url>\b(?:https?|ftp|wss?|ssh|git|postgres(?:ql)?|mysql|redis|mongodb)://[^\s<>\"'`|]+)"
    r"|(?P<email>\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\b)"
    r"|(?P<uuid>\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)"
    r"|(?P<ip>\b(?:\d{1,3}\.){3}\d{1,3}(?:/\d{1,2}|:\d{1,5})?\b)"
    r"|(?P<hostport>\b(?=[\w.-]*[A-Za-z])[A-Za-z0-9][\w.-]*:\d{2,5}\b(?!:))"
    r"|(?P<port>\bport\s*(?:[:=]|is|of|to|on)?\s*\d{2,5}\b)"
    r"|(?P<path>(?<![\w/.])(?:~|\.{1,2})?/(?:[\w.@%+-]+/?)+|\b[\w.-]+\.(?:py|md|toml|json|rs|js|ts|"
    r"tsx|jsx|yaml|yml|txt|sh|sql|db|cfg|ini|conf|env|html|css|go|c|h|cpp|hpp|java|kt|rb|php|"
    r"lock|log|csv|xml|gguf|pem|key|crt|service|zip|tar|gz)\b)"
    r"|(?P<setting>(?<![\w.=-])[A-Za-z_][\w.-]*=(?:\"[^\"\n]{0,80}\"|'[^'\n]{0,80}'|[^\s,;)\]]+))"
    r"|(?P<version>\bv\d+(?:\.\d+)+(?:[-+][\w.]+)?\b|\b\d+\.\d+\.\d+(?:[-+][\w.]+)?\b"
    r"|\b[A-Za-z][\w.-]*(?:==|@)\d[\w.]*"
    r"|\b(?i:version|python|node|go|rust|java|release)\s+v?\d+(?:\.\d+)+\b)"
    r"|(?P<uid>\b[A-Z][A-Z0-9]*-\d+\b|(?<![\w&])#\d{2,}\b"
    r"|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}\b"
    r"|\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)+\b)"
    r"|(?P<number>(?:[$€£]\s?\d[\d,]*(?:\.\d+)?|\b\d[\d,]*(?:\.\d+)?\s?(?:%|ms|µs|ns|s|sec|secs|"
    r"seconds?|min|mins|minutes?|h|hrs?|hours?|days?|weeks?|KB|MB|GB|TB|KiB|MiB|GiB|TiB|"
    r"tokens?|USD|EUR|GBP|req/s|rps|qps|px|°C|°F|cores?|CPUs?|GPUs?|workers?|replicas?|"
    r"threads?|retries|items|rows|users|x))(?![\w/]))",
)

# `_FACT.finditer` tries all eleven alternatives at every character: half a second over a
# 214k-token span. `_SCAN` finds exactly the same matches (same spans, same kinds) in one walk
# that only tries `_FACT` where a fact can start (tests/test_fact_scan.py checks it against
# `_FACT.finditer`):
# - Every alternative starts at a word start (a `\b` or `(?<!\w)` before a word character) or
#   at one of `~./#$€£+-`; so spaces and punctuation are skipped in runs, and a word that does
#   not start a fact is skipped whole (no position inside a word is a start).
# - Before `_FACT` itself, `_MAY_START` checks what every alternative needs near its start:
#   after its leading letters a digit, `+`, `-`, `:` before a digit or `/`, `=` before a value,
#   `@` before a name, `.` before more of a name; or `/` within three characters, a currency
#   sign, `#` and a digit, `port`, a version word. Prose words fail it at once.
# - The walk never fails (it ends at `\Z` at worst), so the engine never restarts it one
#   character later; a match of `_SCAN` is the skipped text followed by one fact, whose kind is
#   `lastgroup` and whose span is that group's.
# On ASCII text the same pattern compiled with re.ASCII finds the same matches a third faster;
# \x1c-\x1f are the only ASCII characters whose class differs (Unicode \s includes them).
_MAY_START = (r"(?=[^\W\d]*+(?:[\d+-]|:[\d/]|=[^\s,;)\]]|@[\w-]|\.[\w.+@:=-])|[~.]{0,2}/|[$€£]"
              r"|#\d|(?=[pPvVnNgGrRjJ])(?:port|(?i:version|python|node|go|rust|java|release)\s))")
_STARTS = "~./#$€£+-"    # the characters besides word starts where an alternative may begin
assert _FACT.groups == len(_FACT.groupindex), "every group of _FACT is a named kind"
_SCAN_PATTERN = (rf"(?:[^\w{re.escape(_STARTS)}]++"
                 rf"|(?!{_MAY_START}(?:{re.sub(r'[(][?]P<[a-z]+>', '(?:', _FACT.pattern)}))"
                 rf"(?:\w++|[\s\S]))*+(?:{_FACT.pattern}|\Z)")
_SCAN = re.compile(_SCAN_PATTERN)
_SCAN_ASCII = re.compile(_SCAN_PATTERN, re.ASCII)
_CODE_SPAN = re.compile(r"`([^`\n]{2,%d})`" % VALUE_CHARS)
_SHELL_FENCE = re.compile(r"```(?:bash|sh|shell|console|zsh|fish|powershell|cmd)\n(.*?)```", re.S)
_PROMPT_LINE = re.compile(r"^\s*\$ (\S.{0,%d})$" % VALUE_CHARS, re.M)
# (the lookahead names the cues' first two letters, so other positions fail at once)
_CORRECTION_CUE = re.compile(
    r"(?=[aicrntwdsf][acnhos ])\b(?:actually|instead|correction|rather than|not what|"
    r"(?:that's|that is|was|is) wrong|change (?:it|that|this)|scratch that|i meant|no longer|"
    r"don't use|do not use|forget (?:the|that|about)|not \S+ but)\b|^\s*no[,.!]", re.I)
_CORRECTION_CUE_ASCII = re.compile(_CORRECTION_CUE.pattern, re.I | re.ASCII)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_TRAILING = ".,;:!?)]}>'\""


def _values(text: str) -> Iterator[tuple[str, str]]:
    """(kind, value) in order of appearance; a command or code span is one value, not also
    the paths and settings inside it."""
    if not text:
        return
    taken: list[tuple[int, int]] = []
    # (each of these patterns has a literal in every match: a text without it is not scanned)
    for block in _SHELL_FENCE.finditer(text) if "```" in text else ():
        taken.append(block.span())
        for line in block.group(1).splitlines():
            line = line.strip().removeprefix("$ ").strip()
            if line and not line.startswith("#"):
                yield "command", _clip(line)
    for m in _PROMPT_LINE.finditer(text) if "$ " in text else ():
        if not _inside(m.start(), taken):
            taken.append(m.span())
            yield "command", _clip(m.group(1).strip())
    for m in _CODE_SPAN.finditer(text) if "`" in text else ():
        code = m.group(1).strip()
        if code and not _inside(m.start(), taken):
            if any(c in code for c in " /="):  # a command or a setting: one value
                taken.append(m.span())
            yield "code", _clip(code)
    # "port `8443`" is a port: backticks (same length, so spans still line up) are spaces here
    text = text.replace("`", " ")
    for m in (_SCAN_ASCII if _plain(text) else _SCAN).finditer(text):
        kind = m.lastgroup
        if kind is None:  # the walk reached the end of the text
            continue
        start, end = m.span(kind)
        if taken and _inside(start, taken) or text.startswith("…", end):
            continue  # inside a command, or cut short by a quote: not the real value
        value = m.group(kind)
        if kind != "number" and not value.endswith(("\"", "'")):
            value = value.rstrip(_TRAILING)
        if kind == "number" and not any(c.isdigit() for c in value):
            continue
        if value:
            yield kind, _clip(value)


def _plain(text: str) -> bool:
    """Whether the re.ASCII twin of a pattern finds what the pattern finds in `text`: ASCII,
    without the four separators Unicode `\\s` includes and ASCII `\\s` does not."""
    return text.isascii() and not ("\x1c" in text or "\x1d" in text or "\x1e" in text
                                   or "\x1f" in text)


def _inside(at: int, spans: list[tuple[int, int]]) -> bool:
    return any(a <= at < b for a, b in spans)


def corrections(text: str) -> list[str]:
    """The sentences of a user message that override something said before."""
    cue = _CORRECTION_CUE_ASCII if _plain(text) else _CORRECTION_CUE
    if not cue.search(text):
        return []
    return [_clip(" ".join(s.split()), CORRECTION_CHARS) for s in _SENTENCE.split(text)
            if s.strip() and cue.search(s)]


def _clip(value: str, limit: int = VALUE_CHARS) -> str:
    # (a value without spaces or the separator is clean: other whitespace is unprintable)
    if " " in value or SEP.strip() in value or not value.isprintable():
        value = " ".join(value.replace(SEP.strip(), "-").split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def kind_of(value: str) -> str:
    """The kind of one whole value (`port`, `path`, …), or "fact" when it is none."""
    m = _FACT.fullmatch(value)
    return (m.lastgroup or "fact") if m else "fact"


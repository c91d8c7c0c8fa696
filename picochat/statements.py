"""Statements: the exact facts of a message as the lines a ledger keeps, each value with the
words that say what it is.

A bare value loses its subject: `#15: port 6380` does not say that the Redis cache listens
there, and a model reading it answers "Redis runs on port 6379". So a fact is kept as the
user's own sentence around its values ("Our Redis cache runs on port 6380"), cut to about 160
characters at word boundaries, its values whole. `statements_of(m)` reads one message:

- the user's sentences (and the lines of a list) that hold an exact value: what ledger.py finds
  (ports, paths, URLs, ids, versions, settings, numbers with units, …) and dates, branch and
  ref names, dotted identifiers, whole image references, cloud URIs, flag and environment
  names, cron expressions, money, durations, rooms and tickets, addresses, and the names and
  accounts a user states ("the on-call lead is Priya Raman", "the unix user deployer");
- a user sentence with a correction cue ("actually", "instead of", …) as a `correction`;
- a pasted block (a ``` fence, a run of 8 or more lines that look like a log, CSV, config,
  stack trace, diff or code, or a message of more than 40 lines) as ONE `paste` line: what it
  was, its size, the range of its most frequent identifiers and where history_search finds it.
  A correction cue inside a paste is no correction;
- from the model's answers only the commands, paths, URLs and code spans it proposed (a few,
  never numbers or ids: those an answer makes up); from a tool result at most two statements,
  and a long result is a paste line.

Pure functions, standard library only. `to_json` / `from_json` keep a message's statements
compactly (taken once at append, read back at compaction).
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass
from itertools import chain
from typing import Iterable

from picochat.fact_values import _CODE_SPAN, _CORRECTION_CUE, _CORRECTION_CUE_ASCII, _SCAN, \
    _SCAN_ASCII, _TRAILING, _plain
from picochat.messages import Message
from picochat.summary_contract import reads_as_ledger_line

STATEMENT, CORRECTION, PASTE = "statement", "correction", "paste"
USER, ANSWER, TOOL = "user", "answer", "tool"
_SAID_BY = {"user": USER, "assistant": ANSWER, "tool": TOOL}

LINE_CHARS = 160        # a statement's text, cut at word boundaries (values kept whole)
CORRECTION_CHARS = 200  # a correction's text
MAX_CHARS = 200         # no text is longer than this
VALUE_CHARS = 150       # a longer value (a huge URL) is cut, marked with …
PASTE_LINES = 8         # a run of this many log/CSV/config/code lines is a paste
LONG_MESSAGE = 40       # a message (what is left of it) with more lines is a paste
LONG_LINE = 2_000       # a line with more characters is a paste (a minified file, a one-line JSON)
TOOL_STATEMENTS = 2
TOOL_SHORT_LINES = 8    # a tool result with more lines (or more characters) is a paste
TOOL_SHORT_CHARS = 800
ANSWER_VALUES = 4       # an answer's proposals kept, at most
RANGES = 3              # identifier ranges a paste line names
_SAMPLE = 20_000        # a paste's ranges are read from its first and last this many characters
ELLIPSIS = "…"


@dataclass(frozen=True)
class Statement:
    seq: int                 # the message's seq
    said_by: str             # "user" | "tool" | "answer"
    kind: str                # "statement" | "correction" | "paste"
    text: str                # the ledger line's words
    values: tuple[str, ...]  # the exact values the line holds, verbatim, in order


# --- values --------------------------------------------------------------------------------------

_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
          r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
_TZ = r"(?:\s?(?:UTC|GMT|CET|CEST|BST|PST|PDT|EST|EDT|CST|CDT|IST|JST|AEST)\b)?"
_ID_NOUNS = (r"user(?:name)?|account|namespace|bucket|topic|queue|schema|database|db|repo"
             r"|repository|channel|tenant|org|organi[sz]ation|codename|alias|handle|keyspace"
             r"|branch|hostname|host|group|role|cluster|project|workspace|index|realm"
             r"|dataset|vpc|subnet|collection|stream|volume|instance|table|team|service|server"
             r"|container|pod|deployment|secret|vault|region|zone|domain|environment|env|stage"
             r"|profile|tag|label|image|model|bot|key|pool|disk|node|vm|app")
# the nouns whose next word alone (no "is", no digit) is taken as a name: "the unix user deployer"
_BARE_NOUNS = frozenset(
    "user username account namespace bucket topic queue schema database db repo repository "
    "channel tenant org codename alias handle keyspace branch hostname host group role "
    "workspace realm dataset".split())

# Every alternative starts at a word start or at one of `$€£¥@+-*`; the first that matches at
# a position wins, and `_spans` keeps the longest of overlapping values (this scan's or
# ledger.py's).
_MORE = re.compile(
    r"(?P<cloud>\b(?:s3a?|gs|az|abfss?|wasbs?|hdfs|adl|oci|r2|file)://[^\s<>\"'`|)\]]+)"
    r"|(?P<image>\b[a-z0-9][\w.-]*(?::\d{2,5})?(?:/[a-z0-9][\w.-]*)+"
    r"(?::\w[\w.-]{0,127}(?:@sha256:[0-9a-f]{7,64})?|@sha256:[0-9a-f]{7,64})"
    r"|\b[a-z0-9][\w.-]*@sha256:[0-9a-f]{7,64}"
    r"|\b[a-z][\w-]*:(?:\d+(?:\.\d+)+[\w.-]*|latest|stable|alpine[\w.-]*|slim|lts|edge)\b)"
    r"|(?P<ref>\b(?:refs/(?:heads|tags|remotes)|origin|upstream|release|releases|feature"
    r"|features|hotfix|hotfixes|bugfix|fix|feat|chore|develop|support|rel|topic|wip)"
    r"/[\w.-]*\w(?:/[\w.-]*\w)*)"
    r"|(?P<date>\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
    r"(?:Z|[+-]\d{2}:?\d{2})?)?(?![\w-])"
    rf"|\b{_MONTH}\.?\s\d{{1,2}}(?:st|nd|rd|th)?\b(?:,?\s\d{{4}}\b)?"
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s(?:of\s)?{_MONTH}\b(?:,?\s\d{{4}}\b)?"
    rf"|\b{_MONTH}\s\d{{4}}\b"
    r"|\bQ[1-4](?:\s?(?:FY)?'?\d{2,4})?\b|\bFY\s?'?\d{2,4}\b|\bH[12]\s\d{4}\b)"
    rf"|(?P<time>\b\d{{1,2}}:\d{{2}}(?::\d{{2}})?(?:\s?[ap]\.?m\b\.?)?{_TZ}(?![\w:])"
    rf"|\b\d{{1,2}}\s?[ap]m\b{_TZ})"
    r"|(?P<cron>(?<![\w*/,-])(?:[*\d][\d*/,-]*\s){4}(?:[*\d][\d*/,-]*"
    r"|[A-Za-z]{3}(?:-[A-Za-z]{3})?(?:,[A-Za-z]{3})*)(?![\w*/,-])"
    r"|@(?:yearly|annually|monthly|weekly|daily|midnight|hourly|reboot)\b)"
    r"|(?P<money>[$€£¥]\s?\d[\d,]*(?:\.\d+)?(?:\s?(?:[kKmMbB]|bn|million|billion|thousand)\b)?"
    r"|\b\d[\d,]*(?:\.\d+)?\s?(?:[kKmM]\s?)?(?:USD|EUR|GBP|CHF|JPY|CAD|AUD|INR|dollars|euros"
    r"|pounds|bucks)\b)"
    r"|(?P<duration>\b\d+h(?:\d+m)?(?:\d+s)?\b|\b\d+m\d+s\b"
    r"|\b\d+(?:\.\d+)?\s?(?:days?|weeks?|months?|years?|yrs?|quarters?|sprints?|hours?|hrs?"
    r"|minutes?|mins?|seconds?|secs?|ms|d|w)\b)"
    r"|(?P<count>\b\d[\d,]*(?:\.\d+)?\s(?:connections?|nodes?|instances?|pods?|shards?"
    r"|partitions?|brokers?|servers?|machines?|VMs?|vms?|people|engineers?|seats?|licen[cs]es?"
    r"|customers?|accounts?|requests?|calls?|messages?|events?|jobs?|tasks?|files?|tables?"
    r"|columns?|records?|documents?|attempts?|times|concurrent|parallel|per)\b)"
    r"|(?P<address>\b\d+[A-Za-z]?\s(?:[A-Z][a-z]+\s){1,3}(?:Street|St|Road|Rd|Avenue|Ave"
    r"|Lane|Ln|Boulevard|Blvd|Way|Drive|Dr|Court|Ct|Place|Pl|Square|Sq|Stra(?:ss|ß)e|Park"
    r"|Row|Terrace|Hill)\b)"
    r"|(?P<numbered>\b(?i:room|floor|building|bldg|suite|desk|gate|dock|rack|bay|apartment"
    r"|apt|terminal|platform|ticket|issue|PR|case|order|invoice|account|acct|build|sprint"
    r"|shard|partition|vlan|ext|extension|incident|INC|milestone|epic|story|bug|cohort"
    r"|pipeline|run|job|seat|table|box|locker|lab|station|node|slot|rack|zone|wave"
    r"|batch|release|phase)\s?#?\s?\d[\w.-]*)"
    r"|(?P<phone>(?<!\w)\+\d{1,3}[\s-]?(?:\(\d+\)[\s-]?)?\d{2,4}(?:[\s-]?\d{2,4}){1,4}\b)"
    r"|(?P<flag>\b[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]\b|(?<![\w-])--[a-zA-Z][\w-]+(?:=[^\s,;]+)?)"
    r"|(?P<dotted>\b[a-zA-Z][\w-]+(?:\.[a-zA-Z_][\w-]+){2,}(?:\.\d+)*\b"
    r"|\b[a-zA-Z][\w-]*(?:\.[a-zA-Z][\w-]*)*\.(?:internal|local|lan|corp|svc|cluster|com|net"
    r"|org|io|dev|cloud|app|ai|co|uk|de|eu|us|example|test)\b)"
    r"|(?P<ident>\b(?=\w*[a-z])[a-z0-9]+(?:_[a-z0-9]+)+\b|\b[a-z]+(?:[A-Z][a-z0-9]+)+\b)"
    r"|(?P<relpath>\b[\w.-]+(?:/[\w.@-]+){2,}/?|\b[\w.-]+(?:/[\w.@-]+)*/[\w@-]+\.[A-Za-z]\w{0,9}\b)"
    r"|(?P<package>(?<![\w@])@[a-z0-9][\w.-]*/[\w.-]*\w)"
    r"|(?P<uid>\b[A-Z][A-Z0-9]*(?:-[A-Z0-9]+){2,}\b)"
    r"|(?P<name>\b[A-Z][a-zà-ÿ]+(?:[A-Z][a-zà-ÿ]+)*(?:[-'][A-Z]?[a-zà-ÿ]+)?"
    r"(?:\s(?:(?:of|de|van|von|da|del|la|le|&)\s)?[A-Z][a-zà-ÿ]*(?:[A-Z][a-zà-ÿ]+)*"
    r"(?:[-'][A-Z]?[a-zà-ÿ]+)?){1,3}\b)"
)
# Values named by the words before them ("the unix user deployer", "the lead is Priya",
# "by Friday"): a second scan, so a cue never hides a value that starts inside it.
_CUED = re.compile(
    r"(?P<quoted>\b(?:called|named|titled|name)\s[\"“'](?P<quoted_v>[^\"”'\n]{1,60})[\"”'])"
    r"|(?P<weekday>\b(?:on|by|until|till|before|after|every|next|this|from|starting)\s"
    r"(?P<weekday_v>(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)days?)\b)"
    rf"|(?P<noun>\b(?i:{_ID_NOUNS})\s(?:(?:is|=|:|named|called)\s)?[`'\"]?"
    r"(?P<noun_v>[a-z0-9#@][\w.@/#-]*\w|[a-z0-9]))"
    r"|(?P<cued>\b(?:is|was|by|named|called|ask|ping|contact|cc|owner|lead|manager|to|with|in"
    r"|at|near)"
    r"\s(?P<cued_v>[A-Z][a-zà-ÿ]+(?:[-'][A-Z]?[a-zà-ÿ]+)?)\b(?!\s[A-Z]))"
    r"|(?P<number>\b(?:is|are|was|be|to|at|on|under|below|above|over|of|max|min|limit|cap"
    r"|exactly|only)\s(?P<number_v>\d[\d,]*(?:\.\d+)?)(?![\w.:/-]*\w))"
)
def _walk(pattern: re.Pattern[str], may_start: str = "") -> re.Pattern[str]:
    """`pattern` as one walk over the text (ledger.py's `_SCAN` trick): every alternative
    starts at a word start or at one of `$€£¥@+*-`, so other characters are skipped in runs
    and a word where nothing matches is skipped whole; a match is the skipped text and one
    value (its kind is `lastgroup`), or the skipped rest of the text (no kind). `may_start`
    is what every alternative needs at its start: a plain word fails it at once."""
    plain = re.sub(r"[(][?]P<[a-z_]+>", "(?:", pattern.pattern)
    return re.compile(rf"(?:[^\w$€£¥@+*-]++|(?!{may_start}(?:{plain}))(?:\w++|[\s\S]))*+"
                      rf"(?:{pattern.pattern}|\Z)")


# a digit, a capital, a sign, or a word followed by `_./:@-` and more, a capital, or a number
_MORE_START = r"(?=[\d$€£¥@+*A-Z_-]|[a-z][a-z0-9]*+(?:[_./:@-][\w/]|[A-Z])|[a-z]++\s?#?\s?\d)"
_MORE_WALK, _CUED_WALK = _walk(_MORE, _MORE_START), _walk(_CUED)


# the words a capitalised run or a cue may start with that are no name
_NOT_NAMES = frozenset("""
the a an our we i it its this that these those please also and but so then if when hey hi
hello thanks thank note ok okay yes no my your their his her let let's can could would should
will do does did is are was were what why how who where which just maybe sure great good nice
cool awesome dear in on at for from by to with after before since today tomorrow yesterday
everyone team all any some every each there here they he she you me us them as not or
monday tuesday wednesday thursday friday saturday sunday january february march april may june
july august september october november december jan feb mar apr jun jul aug sep sept oct nov
dec one two three new old next last first second main fine done sorry again still now
""".split())
# lowercase words that follow an id noun ("the user deployer") and are no name
_NOT_IDS = frozenset("""
is are was were be been being the a an of for to in on at by with and or but not no that this
it its our your their my his her as from into than then so if when which who what where how
there here up down out off over under again also still just only very too really already now
empty full ready fine broken slow fast new old big small gone missing dead live alive busy open
closed public private healthy unhealthy stuck locked correct wrong available unavailable same
different good bad ok okay right left done finished interface experience side level health lead
chat machine point store size version output line knowledge name names list data input id ids
count number error errors issue issues settings config page access support management manager
agent story stories feedback base members member leads meeting meetings call calls work working
itself themselves should would could will can may might must has have had does did do needs
seems looks keeps gets got made make uses used using running runs doesn't isn't can't won't
growing shrinking changing failing passing pending idle
""".split())
# a correction that names no value is one only with one of these cues ("I meant" is talk)
_STRONG_CUES = ("scratch that", "correction", "don't use", "do not use", "no longer", "forget")
_MAY_MORE = re.compile(r"[\d$€£¥@+*_A-Z:/\"“'-]|\.[a-zA-Z]")  # a text without any: no _MORE value
_ANSWER_KINDS = frozenset(("url", "path", "cloud", "code", "command", "image"))
_DROP_FOR_TOOL = frozenset(("name", "cued", "noun", "quoted"))


def _spans(text: str, said_by: str) -> list[tuple[int, int, str, str]]:
    """(start, end, kind, value) of the values in one sentence, in order; of overlapping
    candidates the longest is kept."""
    found: list[tuple[int, int, str, str]] = []
    if "`" in text:
        for m in _CODE_SPAN.finditer(text):
            code = m.group(1).strip()
            if code:
                found.append((m.start(), m.end(), "code", code))
        scan_text = text.replace("`", " ")
    else:
        scan_text = text
    for m in (_SCAN_ASCII if _plain(scan_text) else _SCAN).finditer(scan_text):
        kind = m.lastgroup
        if kind is None:
            continue
        start, end = m.span(kind)
        value = m.group(kind)
        if kind != "number":
            stripped = value.rstrip(_TRAILING)
            end -= len(value) - len(stripped)
            value = stripped
        elif not any(c.isdigit() for c in value):
            continue
        if value:
            found.append((start, end, kind, value))
    if _MAY_MORE.search(scan_text) or "user" in scan_text or "account" in scan_text:
        for m in chain(_MORE_WALK.finditer(scan_text), _CUED_WALK.finditer(scan_text)):
            kind = m.lastgroup
            if kind is None:
                continue
            inner = kind + "_v"
            if inner in m.re.groupindex and m.group(inner) is not None:
                start, end = m.span(inner)
            else:
                start, end = m.span(kind)
            value = scan_text[start:end]
            if kind not in ("date", "time", "money"):
                stripped = value.rstrip(_TRAILING)
                end -= len(value) - len(stripped)
                value = stripped
            if not value or not _keep(kind, value, m, scan_text, start):
                continue
            if kind == "name":
                start, value = _name_of(value, start)
                if not value:
                    continue
            found.append((start, end, kind, value))
    if said_by == ANSWER:
        found = [f for f in found if f[2] in _ANSWER_KINDS
                 and (f[2] != "code" or any(c in f[3] for c in " /=."))]
    elif said_by == TOOL:
        found = [f for f in found if f[2] not in _DROP_FOR_TOOL]
    if len(found) > 1:
        found.sort(key=lambda f: (f[0] - f[1], f[0]))
        kept: list[tuple[int, int, str, str]] = []
        for f in found:
            if all(f[1] <= k[0] or f[0] >= k[1] for k in kept):
                kept.append(f)
        kept.sort()
        found = kept
    return found


def _keep(kind: str, value: str, m: re.Match[str], text: str, start: int) -> bool:
    if kind == "cron":
        return value.startswith("@") or "*" in value
    if kind == "noun":
        noun = m.group(kind).split(None, 1)[0].casefold()
        low = value.casefold()
        if low in _NOT_IDS or low in _NOT_NAMES:
            return False
        if any(not c.isalpha() for c in value):
            return True  # a digit, a dash, a dot: an identifier, not an English word
        said = m.group(kind)[len(noun):].lstrip()
        if said[:3] in ("is ", "was") or said[:1] in ("=", ":"):
            return (noun in _BARE_NOUNS and not low.endswith(("ing", "ed", "ly"))
                    and (start + len(value) >= len(text) or text[start + len(value)] in ".,;!)"))
        return noun in _BARE_NOUNS and not low.endswith(("ing", "ly"))
    if kind == "cued":
        return value.casefold() not in _NOT_NAMES
    if kind == "dotted":
        return value.casefold() not in ("e.g", "i.e")
    return True


def _name_of(value: str, start: int) -> tuple[int, str]:
    """A capitalised run without its leading sentence words ("Our", "Thanks"): a name when
    two or more words are left."""
    words = value.split(" ")
    while words and words[0].casefold() in _NOT_NAMES:
        start += len(words[0]) + 1
        words.pop(0)
    while words and words[-1].casefold() in _NOT_NAMES:
        words.pop()
    if len(words) < 2:
        return start, ""
    return start, " ".join(words)


# --- sentences ----------------------------------------------------------------------------------

_SPLIT = re.compile(r"[.!?]+[\"')\]]*\s+")
_ABBREV = frozenset("""e.g i.e etc vs approx dr mr mrs ms st no inc ltd jr sr a.m p.m cf fig
jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun est""".split())
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)]|\[[ xX]\])\s+")


def _sentences(line: str) -> Iterable[str]:
    """The sentences of one line: split after . ! ? and a space, not after an abbreviation
    (e.g., etc.) or an initial; dots inside values (orion.events.v2) have no space after."""
    start = 0
    for m in _SPLIT.finditer(line):
        before = line[start:m.start()].rsplit(None, 1)
        word = before[-1].casefold().rstrip(".") if before else ""
        if m.group().startswith(".") and (word in _ABBREV or len(word) == 1 and word.isalpha()):
            continue
        yield line[start:m.end()].strip()
        start = m.end()
    if line[start:].strip():
        yield line[start:].strip()


def _window(sentence: str, spans: list[tuple[int, int]], limit: int) -> str:
    """`sentence` cut to about `limit` characters at word boundaries around the values in
    `spans` (each kept whole), its first words (the subject) first; a cut is marked with …."""
    if len(sentence) <= limit:
        return sentence
    a, b = min(s for s, _ in spans), max(e for _, e in spans)
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", sentence)]
    # the subject: the sentence's first words, up to a third of the line, before the values
    head_end = 0
    for s, e in words:
        if e > a or e > limit // 3:
            break
        head_end = e
    lo = next(s for s, e in words if e > a)
    hi = next((e for s, e in reversed(words) if s < b), b)
    hi = max(hi, b)

    def size(h: int, lo_: int, hi_: int) -> int:
        gap = 0 if lo_ <= h + 1 else 3
        return h + gap + (hi_ - lo_) + 2

    if size(head_end, lo, hi) > limit:
        head_end = 0
    # grow left (towards the subject) while it fits, then right
    for s, e in reversed(words):
        if s >= lo:
            continue
        if s < head_end or size(head_end, s, hi) > limit:
            break
        lo = s
    for s, e in words:
        if e <= hi:
            continue
        if size(head_end, lo, e) > limit:
            break
        hi = e
    if lo <= head_end + 1:
        head_end, lo = 0, 0
    parts = []
    if head_end:
        parts.append(sentence[:head_end] + " " + ELLIPSIS + " ")
    elif lo > 0:
        parts.append(ELLIPSIS + " ")
    parts.append(sentence[lo:hi])
    if hi < len(sentence.rstrip()):
        parts.append(" " + ELLIPSIS)
    return "".join(parts)


def _clip_value(value: str) -> str:
    value = " ".join(value.split())
    return value if len(value) <= VALUE_CHARS else value[: VALUE_CHARS - 1] + ELLIPSIS


# a line the user quotes ("> …") or a log line pasted among prose: its words are not the user's
# own, so a correction cue in it corrects nothing
_NOT_OWN_WORDS = re.compile(
    r"^\s*(?:>|\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d|\[?\d\d:\d\d:\d\d"
    r"|\[?(?:DEBUG|INFO|NOTICE|WARN(?:ING)?|ERROR|CRITICAL|FATAL|TRACE)\b)")


def _statements_of_line(line: str, seq: int, said_by: str) -> list[Statement]:
    if reads_as_ledger_line(line):  # `- #1 correction: …` is picochat's shape, quoted or forged
        return []
    out: list[Statement] = []
    own_words = said_by == USER and not _NOT_OWN_WORDS.match(line)
    line = _BULLET.sub("", line, count=1)
    for raw in _sentences(line):
        sentence = " ".join(raw.split())
        spans = _spans(sentence, said_by)
        is_correction = False
        if own_words:
            cue = (_CORRECTION_CUE_ASCII if _plain(sentence) else _CORRECTION_CUE).search(sentence)
            is_correction = cue is not None and (
                bool(spans) or cue.group().strip().casefold().startswith(_STRONG_CUES))
        if not spans and not is_correction:
            continue
        if said_by == ANSWER:
            out.extend(_answer(seq, [v for *_, v in spans]))
            continue
        values = tuple(dict.fromkeys(_clip_value(v) for *_, v in spans))
        kind = CORRECTION if is_correction else STATEMENT
        limit = CORRECTION_CHARS if is_correction else LINE_CHARS
        groups = _groups(spans, limit - 10) if spans else [[]]
        for group in groups:
            text = _window(sentence, [(s, e) for s, e, *_ in group] or [(0, 0)], limit)
            if len(groups) > 1:
                values = tuple(dict.fromkeys(_clip_value(v) for *_, v in group))
            out.append(Statement(seq, said_by, kind, _cap(text), values))
    return out


def _groups(spans: list[tuple[int, int, str, str]], room: int) -> list[list]:
    """The values of a sentence in runs that fit one line each (far-apart values of a very
    long sentence get lines of their own)."""
    groups: list[list] = [[spans[0]]]
    for f in spans[1:]:
        if f[1] - groups[-1][0][0] <= room:
            groups[-1].append(f)
        else:
            groups.append([f])
    return groups


def _cap(text: str) -> str:
    if len(text) <= MAX_CHARS:
        return text
    cut = text.rfind(" ", 0, MAX_CHARS - 1)
    return text[: cut if cut > MAX_CHARS // 2 else MAX_CHARS - 1] + ELLIPSIS


def _answer(seq: int, values: list[str]) -> list[Statement]:
    values = list(dict.fromkeys(_clip_value(v) for v in values))[:ANSWER_VALUES]
    if not values:
        return []
    shown: list[str] = []
    for v in values:
        if len(" · ".join(shown + [v])) > MAX_CHARS:
            break
        shown.append(v)
    return [Statement(seq, ANSWER, STATEMENT, " · ".join(shown), tuple(shown))] if shown else []


# --- pastes -------------------------------------------------------------------------------------

_FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+#.-]*)")
_PASTY_START = re.compile(
    r"(?:\d{4}-\d{2}-\d{2}|\d{1,2}/\w{3}/\d{4}|\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[|\{|\}|\]"
    r"|\||<[/!?\w]|\"[\w-]+\"\s*:|(?:INFO|WARN|WARNING|ERROR|DEBUG|TRACE|FATAL|CRITICAL)\b"
    r"|[A-Z][a-z]{2}\s+\d{1,2}\s\d{2}:\d{2}|\d{2}:\d{2}:\d{2}|Traceback|File \"|at [\w$.]+\("
    r"|Caused by|Exception in thread|[\w.]+(?:Error|Exception)\b|diff --git|index [0-9a-f]"
    r"|@@|\+\+\+ |--- |[+](?!\s*$)|\$ |# |//|/\*|\*/|#!|[0-9a-f]{7,40}\s|[dl-][rwx-]{9}"
    r"|(?:def|class|import|from|return|if|for|while|func|fn|let|const|var|public|private"
    r"|function|package)\b[^.!?]*$|[\w.-]+\s*=|\w[\w .-]{0,40}\s=\s|[\w.-]+:\s*\S*$|[\w.-]+:$)")
_PROSE_WORD = re.compile(r"[\"'(]?[A-Za-z][a-z']*[,.;:!?)\"']*")
_CODE_END = ("{", "}", ";", ")", "(", "[", "]", ",")


def _is_prose(line: str) -> bool:
    """Whether a line reads as a person's words (not a log, CSV, config, code or trace line)."""
    if line[:1] in " \t" and len(line) - len(line.lstrip()) >= 2 and not _BULLET.match(line):
        return False
    s = _BULLET.sub("", line.strip(), count=1) if line.lstrip()[:1] in "-*+•0123456789[" \
        else line.strip()
    if _PASTY_START.match(line.strip()) and not (line.strip() != s and len(s.split()) >= 4):
        return False
    words = s.split()
    if len(words) < 3:
        return False
    if s.count(",") >= 2 and not s.endswith((".", "?", "!")) and \
            max(len(f.split()) for f in s.split(",")) <= 4:
        return False  # a CSV row
    if s.endswith(_CODE_END) and not s.endswith((",", ")")):
        return False
    alpha = sum(1 for w in words if _PROSE_WORD.fullmatch(w))
    return alpha * 2 >= len(words)


def _blocks(lines: list[str]) -> tuple[list[tuple[int, int, str]], list[bool]]:
    """The pasted blocks of a message's lines, as (first, last, fence tag) line indexes, and
    which lines are inside one."""
    n = len(lines)
    inside = [False] * n
    blocks: list[tuple[int, int, str]] = []
    i = 0
    while i < n:
        m = _FENCE.match(lines[i]) if "`" in lines[i] or "~" in lines[i] else None
        if m:
            j = i + 1
            while j < n and not lines[j].strip().startswith(m.group(1)):
                j += 1
            end = min(j, n - 1)
            blocks.append((i, end, m.group(2) or ""))
            for k in range(i, end + 1):
                inside[k] = True
            i = end + 1
            continue
        i += 1
    # runs of log/CSV/config/code lines outside fences: blank lines inside a run are part of
    # it, and a prose-looking line or two (a YAML description) when no blank line is beside
    run: list[int] = []   # the pasty lines of the current run
    gap_prose = 0
    gap_blank = False

    def close() -> None:
        if len(run) >= PASTE_LINES:
            blocks.append((run[0], run[-1], ""))
            for k in range(run[0], run[-1] + 1):
                inside[k] = True
        run.clear()

    for i, line in enumerate(lines):
        if inside[i]:
            close()  # a fence ends a run
            gap_prose, gap_blank = 0, False
            continue
        if not line.strip():
            gap_blank = True
            continue
        if _is_prose(line):
            gap_prose += 1
            if gap_prose > 2 or gap_blank:
                close()
            continue
        if run and (gap_prose and gap_blank or gap_prose > 2):
            close()
        run.append(i)
        gap_prose, gap_blank = 0, False
    close()
    blocks.sort()
    return blocks, inside


_RANGE = re.compile(
    r"(?P<timestamps>\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\b\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2}"
    r"|\b[A-Z][a-z]{2}\s{1,2}\d{1,2}\s\d{2}:\d{2}:\d{2})"
    r"|(?P<uuids>\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)"
    r"|(?P<hosts>\b(?:\d{1,3}\.){3}\d{1,3}\b)"
    r"|(?P<dates>\b\d{4}-\d{2}-\d{2}\b)"
    r"|(?P<emails>\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\b)"
    r"|(?P<ids>\b[A-Za-z][A-Za-z]{0,11}[-_]\d[\w-]*\b|\b[A-Za-z]{1,8}\d{3,}\b)"
    r"|(?P<hashes>\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b)"
)
_ERROR_LINE = re.compile(r"(?:(?:[\w$]+\.)+[\w$]*|\b[A-Z]\w*)(?:Error|Exception|Exit|Interrupt)\b"
                         r"(?::[^\n]*)?")
_TAGS = {"python": "code", "py": "code", "js": "code", "javascript": "code", "ts": "code",
         "typescript": "code", "java": "code", "go": "code", "rust": "code", "rs": "code",
         "c": "code", "cpp": "code", "ruby": "code", "rb": "code", "php": "code", "kotlin":
         "code", "swift": "code", "sql": "code", "yaml": "config", "yml": "config", "toml":
         "config", "ini": "config", "conf": "config", "nginx": "config", "hcl": "config",
         "terraform": "config", "json": "JSON", "csv": "CSV", "tsv": "CSV", "log": "log",
         "diff": "diff", "patch": "diff", "bash": "shell", "sh": "shell", "shell": "shell",
         "console": "shell output", "zsh": "shell", "text": "text", "txt": "text"}


def _shape(lines: list[str], tag: str) -> str:
    """What a pasted block is, from its shape (its fence's tag where the shape says nothing)."""
    body = [x for x in lines if x.strip()]
    if not body:
        return "text"
    n = len(body)
    joined = "\n".join(body)
    if "Traceback (most recent call last)" in joined or \
            sum(1 for x in body if re.match(r"\s+(?:at [\w$.<>]+\(|File \")", x)) >= 2:
        return "stack trace"
    if any(x.startswith(("diff --git", "@@ ", "+++ ")) for x in body):
        return "diff"
    first, last = body[0].lstrip(), body[-1].rstrip()
    if first[:1] in "{[" and last[-1:] in "}]":
        return "JSON"
    commas = [x.count(",") for x in body]
    tabs = [x.count("\t") for x in body]
    for counts in (commas, tabs):
        common = max(set(counts), key=lambda c: (counts.count(c), c))
        if common >= 2 and counts.count(common) * 10 >= n * 7:
            return "CSV"
    logish = sum(1 for x in body if re.match(
        r"\s*(?:\[?\d{4}-\d{2}-\d{2}|\d{1,3}(?:\.\d{1,3}){3}\s|\[?(?:INFO|WARN|WARNING|ERROR|DEBUG"
        r"|TRACE|FATAL)\b|[A-Z][a-z]{2}\s+\d{1,2}\s\d{2}:|\[?\d{2}:\d{2}:\d{2}|[0-9a-f]{7,40}\s)",
        x))
    if logish * 2 >= n:
        if sum(1 for x in body if re.search(r"\"(?:GET|POST|PUT|DELETE|PATCH|HEAD) ", x)) * 2 >= n:
            return "access log"
        return "log"
    configish = sum(1 for x in body if re.match(
        r"\s*(?:[\w.\"-]+\s*(?:[:=](?:\s|$)|=\S)|\w[\w .-]{0,40}\s=\s|\[[\w.\" -]+\]\s*$"
        r"|- [\w-]+:|#|;)", x))
    if configish * 2 >= n and not any(re.match(r"\s*(?:def |class |import |function )", x)
                                      for x in body):
        return "config"
    mapped = _TAGS.get(tag.casefold(), "")
    if mapped and mapped != "text":
        return mapped
    if body[0].lstrip().startswith("$ "):
        return "shell output"
    codeish = sum(1 for x in body if re.match(
        r"\s*(?:def |class |import |from \w|return\b|if |for |while |func |fn |let |const |var "
        r"|public |private |function |package |#include|//|@\w)", x) or x.rstrip().endswith(
        ("{", "}", ";", ":", ")")))
    if codeish * 10 >= n * 3:
        return "code"
    return mapped or "text"


def _natural(value: str) -> tuple:
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t)
                 for t in re.findall(r"\d+|\D+", value))


def _letters(value: str) -> str:
    """The letters an identifier starts with (`req` of `req-0001`), grouping ids by kind."""
    return value[: len(value) - len(value.lstrip(string.ascii_letters))]


def _ranges(text: str) -> list[tuple[str, str, str, int]]:
    """(label, first, last, how many distinct) of a paste's most frequent identifier kinds."""
    sample = text if len(text) <= 2 * _SAMPLE else text[:_SAMPLE] + "\n" + text[-_SAMPLE:]
    seen: dict[tuple[str, str], dict[str, None]] = {}
    counts: dict[tuple[str, str], int] = {}
    for m in _RANGE.finditer(sample):
        kind = m.lastgroup
        assert kind is not None
        value = m.group(kind)
        key = (kind, _letters(value) if kind == "ids" else "")
        seen.setdefault(key, {})[value] = None
        counts[key] = counts.get(key, 0) + 1
    order = list(seen)
    best = sorted(order, key=lambda k: (-counts[k], -len(seen[k]), _PRIORITY.index(k[0]),
                                        order.index(k)))
    best = [k for k in best if counts[k] >= 2 or len(best) == 1][:RANGES]
    out = []
    for key in best:
        values = list(seen[key]) if key[0] == "hashes" else sorted(seen[key], key=_natural)
        out.append((key[0], values[0], values[-1], len(values)))
    return out


# which identifiers a paste line names first, among equally frequent ones
_PRIORITY = ("ids", "uuids", "hosts", "emails", "hashes", "timestamps", "dates")


_DAY = re.compile(r"\d{4}-\d{2}-\d{2}[T ]|\d{2}/\w{3}/\d{4}:|[A-Z][a-z]{2}\s+\d{1,2}\s")


def _short_last(label: str, first: str, last: str) -> str:
    """The end of a range as it reads after its start: a timestamp drops the date they share."""
    if label != "timestamps":
        return last
    day = _DAY.match(first)
    return last[day.end():] if day and last.startswith(day.group()) else last


def _paste(seq: int, said_by: str, lines: list[str], tag: str) -> Statement:
    text = "\n".join(lines)
    body = [x for x in lines if x.strip()]
    kind = _shape(lines, tag)
    where = "(history_search finds it)"
    head = f"pasted {kind} ({len(body):,} line{'' if len(body) == 1 else 's'}, {len(text):,} chars)"
    pieces: list[tuple[str, tuple[str, ...]]] = []
    if kind == "stack trace":
        errors = _ERROR_LINE.findall(text)
        if errors:  # Python names it last, Java first
            err = " ".join(errors[-1 if "Traceback" in text else 0].split())
            err = err if len(err) <= 60 else err[:59] + ELLIPSIS
            pieces.append((f"raises {err}", (err.split(":", 1)[0],)))
    if kind == "CSV":
        header = " ".join(body[0].split())
        header = header if len(header) <= 50 else header[:49] + ELLIPSIS
        pieces.append((f"header {header}", ()))
    if said_by != ANSWER:  # an answer's ids are made up
        for label, first, last, n in _ranges(text):
            if n == 1:
                pieces.append((f"{label} {first}", (first,)))
            else:
                end = _short_last(label, first, last)
                pieces.append((f"{label} {first} {ELLIPSIS} {end} ({n:,})", (first, last)))
    shown: list[tuple[str, tuple[str, ...]]] = []
    for piece in pieces:
        line = _paste_line(head, shown + [piece], where)
        if len(line) <= MAX_CHARS:
            shown.append(piece)
    values = tuple(dict.fromkeys(v for _, vs in shown for v in vs))
    return Statement(seq, said_by, PASTE, _cap(_paste_line(head, shown, where)), values)


def _paste_line(head: str, pieces: list[tuple[str, tuple[str, ...]]], where: str) -> str:
    return head + (": " + "; ".join(p for p, _ in pieces) if pieces else "") + " " + where


# --- one message ----------------------------------------------------------------------------------


def statements_of(m: Message) -> list[Statement]:
    """The statements of one message, in the order of its text."""
    said_by = _SAID_BY.get(m.role, USER)
    text = m.content or ""
    out: list[Statement] = []
    if said_by == TOOL:
        return _tool(m.seq, text)
    if text.strip():
        lines = text.splitlines()
        blocks, inside = _blocks(lines) if len(lines) >= 3 or "`" in text or "~~~" in text \
            else ([], [False] * len(lines))
        prose_at = [i for i in range(len(lines)) if not inside[i] and lines[i].strip()]
        long = {i for i in prose_at if len(lines[i]) > LONG_LINE}
        if long:  # no sentence is that long: a pasted line, read as one, not word by word
            blocks = sorted(blocks + [(i, i, "") for i in long])
            prose_at = [i for i in prose_at if i not in long]
        if len(prose_at) > LONG_MESSAGE:  # a long message is a paste as a whole
            blocks = sorted(blocks + [(prose_at[0], prose_at[-1], "")])
            prose_at = []
        prose = set(prose_at)
        done_block = -1
        for i, line in enumerate(lines):
            if i in prose:
                out.extend(_statements_of_line(line, m.seq, said_by))
                continue
            for b, (first, last, tag) in enumerate(blocks):
                if first == i and b > done_block:
                    done_block = b
                    out.extend(_block(m.seq, said_by, lines, first, last, tag))
    if said_by == ANSWER:
        out = _answer_merged(m, out)
    return out


def _block(seq: int, said_by: str, lines: list[str], first: int, last: int,
           tag: str) -> list[Statement]:
    fenced = _FENCE.match(lines[first]) is not None and (first != last or "`" in lines[first])
    body = lines[first + 1:last] if fenced and last > first and \
        _FENCE.match(lines[last]) else lines[first + 1:last + 1] if fenced else \
        lines[first:last + 1]
    short = [x.strip() for x in body if x.strip()]
    if not short:  # an empty fence (a model's stray ``` at the end) states nothing
        return []
    if fenced and said_by != TOOL and 0 < len(short) <= 3 and all(len(x) <= VALUE_CHARS
                                                                  for x in short):
        commands = [x.removeprefix("$ ").strip() for x in short
                    if not x.startswith("#") and not reads_as_ledger_line(x)]
        if said_by == ANSWER:
            return _answer(seq, commands)
        shown = " ; ".join(commands)
        return [Statement(seq, said_by, STATEMENT, _cap(f"ran/pasted: {shown}"),
                          tuple(_clip_value(c) for c in commands))] if commands else []
    return [_paste(seq, said_by, body, tag if fenced else "")]


def _answer_merged(m: Message, found: list[Statement]) -> list[Statement]:
    """An answer's proposals as one line (a few values), its code blocks as paste lines; the
    commands and paths of its tool calls count as proposals."""
    values = [v for s in found if s.kind != PASTE for v in s.values]
    for call in m.tool_calls or ():
        args = (call.get("function") or {}).get("arguments")
        if isinstance(args, str) and args.strip():
            try:
                parsed = json.loads(args)
            except ValueError:
                continue
            if isinstance(parsed, dict):
                for key in ("command", "cmd", "path", "file", "url"):
                    v = parsed.get(key)
                    if isinstance(v, str) and v.strip() and "\n" not in v.strip():
                        values.append(v.strip())
    pastes = [s for s in found if s.kind == PASTE][:2]
    return _answer(m.seq, values) + pastes


def _tool(seq: int, text: str) -> list[Statement]:
    if not text.strip():
        return []
    lines = text.splitlines()
    if len(lines) > TOOL_SHORT_LINES or len(text) > TOOL_SHORT_CHARS:
        return [_paste(seq, TOOL, lines, "")]
    out: list[Statement] = []
    for line in lines:
        if line.strip():
            out.extend(_statements_of_line(line, seq, TOOL))
        if len(out) >= TOOL_STATEMENTS:
            break
    return out[:TOOL_STATEMENTS]


# --- stored form ----------------------------------------------------------------------------------

_CODES = {STATEMENT: "s", CORRECTION: "c", PASTE: "p"}
_KINDS = {v: k for k, v in _CODES.items()}


def to_json(statements: list[Statement]) -> str:
    """A message's statements as compact JSON: `[["s", text, value, …], …]` (the seq and who
    said it are the message's)."""
    return json.dumps([[_CODES[s.kind], s.text, *s.values] for s in statements],
                      ensure_ascii=False, separators=(",", ":"))


def from_json(text: str, seq: int, said_by: str) -> list[Statement]:
    """The statements `to_json` wrote, for message `seq` said by `said_by`."""
    if not text or text == "[]":
        return []
    return [Statement(seq, said_by, _KINDS[row[0]], row[1], tuple(row[2:]))
            for row in json.loads(text)]

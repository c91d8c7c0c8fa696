"""The summary quality gate: junk never becomes a checkpoint.

Of the summary's text the candidate checks ask only that it be non-empty and under its cap, and a
real small model (SmolLM2-135M) passed that with replies that were no summary at all: the
transcript echoed back down to its `TRANSCRIPT>>>` line, "I'm ready to continue the conversation",
pages of `[1] [2] [3]`. Once committed, such a reply replaces the history it claims to summarize,
and its facts are gone from what the model sees. `check_summary` names what is wrong, or returns
the summary with its nine headings in canonical form, so later code (the fact ledger) can find
`## Exact Facts`.

Checks, in the order they are reported (the first that fails is the one the user reads):

1. **echo**: the reply copies the transcript: one of its delimiters (`<<<TRANSCRIPT`, the
   previous-summary markers, the summary message's own brackets) outside inline code, a record
   header line such as `### #12 user` (or a bare `### #12`), or three consecutive content lines
   that are also consecutive lines of the records (blank lines skipped, lines under 20
   characters never counted). Never counted: lines of the previous summary (the model is told
   to keep them), lines in code fences (a verbatim command or config is what the prompt asks
   for), bullet lines (a user's own list kept as is; the offline summarizer's `- <sentence>`).
   Two copied lines pass: a request and its answer quoted under one heading are a summary.
2. **continuation**: the reply goes on with the chat instead of recording it: an unbulleted
   `Assistant:` or `AI:` line; a `User:` or `Human:` line as the reply's last line (the next
   turn, invented; elsewhere `User: postgres` may be a fact); a chat-template token
   (`<|im_start|>`, `[INST]`, `<end_of_turn>`, `</s>`, …) at the start or end of an unbulleted
   line outside code; more than one line, or one line over 120 characters, before the first
   heading; or no heading at all and the reply talks to the reader in the first or second
   person ("I'm ready to continue…"; quoted text excluded). A summary that says in prose that
   "the user said …" passes.
3. **cut_off**: the provider said `length`; or a code fence is left open; or the missing
   headings are exactly the last ones and the reply is near its cap: ≥ 75 % of `max_tokens` by
   picochat's tokenizer, because o200k counts a small model's output low (73–96 % of the cap
   in ten replies SmolLM2 ended with `length`, six of them under 90 %).
4. **headings**: one of the nine headings is missing or repeated (the fact ledger merges into
   the one `## Exact Facts`); an empty reply fails here, unless the provider said `length`
   (a reasoning model that spent its cap thinking was cut off).
5. **empty**: the nine headings are there and nothing is under them: only placeholders
   (`- (none)`, `N/A`, `-`, `—`, "Nothing.", "No constraints were stated."), punctuation or
   blank lines (issue 31, item 9: nine `(none)` sections passed, and the span's prose was
   lost). A placeholder line is a negation ("none", "no", "N/A", "nothing", …) among filler
   words ("yet", "stated", "the", …) and the headings' own words; a word of content is any
   other word that is not filler, and a CJK character is one word. The summary
   needs `min(EMPTY_FLOOR, the span's words of content // EMPTY_RATIO)` of them, the span
   being its records and the previous summary without picochat's framing lines: so one word
   ("ok") does not summarize a page, a span of "hi" and "hello" may summarize to nothing, and
   "run the services" is a summary.

Echo and continuation come first because they say this model cannot do the job (retrying it
rarely helps; another summary model does); a cut-off says the cap was too small, and explains
the headings it lacks; missing headings are the catch-all; an empty summary is judged last,
on the normalized text, as only a well-formed summary can be empty. Every rejection is a
`SummaryRejected`, so the caller handles it as any failed candidate check: `/compact` keeps the
old context, auto compaction the old projection, overflow recovery trims (degraded).

Normalization: the nine headings become `## Heading` lines, written in any case, with `#` to
`####`, bold (`**Objective**`, `**Objective:**`, `## **Objective**`), a number
(`## 1. Objective`), a trailing colon (a bare name needs the colon: a line saying only
`Progress` may be prose), or as a bold label with its text on the same line
(`**Objective:** Deploy…`, split in two). Headings in code blocks do not count, but a
```markdown fence around the whole reply is removed (a fence left open inside it is still
caught by check 3). One short line before the first heading
("Here is the summary:") is dropped, and the ends are trimmed. Nothing else changes, so the
result passes the gate again unchanged. Headings out of order are accepted as they are.
"""

from __future__ import annotations

import re

from picochat import summary_contract as sc
from picochat import tokens
from picochat.compaction.candidate import RETRY_HINT, SummaryRejected
from picochat.pins import PINS_CLOSE, PINS_OPEN

CHECKS = ("echo", "continuation", "cut_off", "headings", "empty")
HINT = RETRY_HINT
CUT_OFF_HINT = "the previous context is unchanged; a truncated summary would lose facts"

PREAMBLE_CHARS = 120      # one line this short before the first heading is a greeting, dropped
ECHO_RUN = 3              # consecutive copied record lines that make an echo
ECHO_MIN_CHARS = 20       # shorter lines ("Done.", "- (none)") are too common to call copied
NEAR_CAP = 0.75           # see the module docstring, check 3
EMPTY_FLOOR = 2           # words a summary of a span with content must say: check 5
EMPTY_RATIO = 10          # ...one per ten of the span's, so "hi" and "hello" may say nothing

_DELIMITERS = (sc.TRANSCRIPT_BEGIN, sc.TRANSCRIPT_END, sc.PREVIOUS_SUMMARY_BEGIN,
               sc.PREVIOUS_SUMMARY_END, sc.SUMMARY_OPEN, sc.SUMMARY_CLOSE,
               PINS_OPEN, PINS_CLOSE)  # a summary passing for the user's pins
_DELIMITER_SET = frozenset(_DELIMITERS)
_NAMES = "|".join(re.escape(h).replace(r"\ ", r"\s+") for h in sc.HEADINGS)
_CANONICAL = {h.lower(): h for h in sc.HEADINGS}
_HEADING = re.compile(
    rf"^\s*(?P<hashes>#{{1,4}})?\s*(?:\d{{1,2}}[.)]\s*)?(?P<b1>\*\*|__)?\s*(?P<name>{_NAMES})"
    r"\s*(?P<c1>:)?\s*(?P<b2>\*\*|__)?\s*(?P<c2>:)?\s*$", re.I)
_LABEL = re.compile(  # **Objective:** text on the same line
    rf"^\s*(?:#{{1,4}}\s*)?(?P<b1>\*\*|__)(?P<name>{_NAMES})\s*:?\s*(?P=b1)\s*:?\s+(?P<rest>\S.*)$",
    re.I)
_RECORD_HEADER = re.compile(r"^\s*(#{1,6}\s*#\d+)(?:\s+(user|assistant|tool|system)\b|\s|$)")
_FENCE = re.compile(r"^\s*```")
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_SPEAKER = re.compile(r"^\s*(?:\*\*|__)?(user|assistant|human|ai)\s*(?:\*\*|__)?\s*:", re.I)
_MODEL_SPEAKERS = ("assistant", "ai")
_WRAPPER = re.compile(r"^\s*```\s*(?:markdown|md)?\s*$", re.I)
_TEMPLATE = (r"<\|[a-z_]{2,20}\|>|\[/?INST\]|<(?:start|end)_of_turn>|</s>")
_TEMPLATE_AT_EDGE = re.compile(rf"^\s*(?:{_TEMPLATE})|(?:{_TEMPLATE})\s*$", re.I)
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s")
_QUOTED = re.compile(r"\"[^\"\n]*\"|“[^”\n]*”")
_ADDRESS = re.compile(r"\bI(?:'m|'ll|'ve|'d)?\b|(?i:\b(?:me|my|you|your|you're|let's)\b)")
# a word: one CJK character (a logogram says as much as a word) or a run of other letters/digits
_CJK = "\u2e80-\u9fff\uf900-\ufaff"
_WORD = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
_NEGATIONS = frozenset("none nothing empty null nil na tbd no not unknown".split())  # n/a: na
_FILLER = _NEGATIONS | frozenset(
    "a an yet so far applicable available given stated mentioned recorded noted reported specified "
    "provided identified known made there is are were was been have has had any the of or and "
    "in this that to for at now time point section summary conversation span report here "
    "currently specific relevant other additional further new".split())
_HEADING_WORDS = frozenset(w for h in sc.HEADINGS for w in h.lower().split())
_HEADING_WORDS |= {w[:-1] for w in _HEADING_WORDS if w.endswith("s")}  # "No constraint."
_META = re.compile(r"^\[(?:source: |[\d,]+ older messages omitted)")  # transcript framing


class SummaryJunk(SummaryRejected):
    """A summary came back but is not one: `check` names which rule it broke."""

    kind = "summary_rejected"

    def __init__(self, message: str, hint: str | None = HINT, *, check: str) -> None:
        if check not in CHECKS:
            raise ValueError(f"unknown summary check {check!r}")
        super().__init__(message, hint)
        self.check = check


def check_summary(text: str, transcript: str, *, max_tokens: int, finish: str | None) -> str:
    """Return the summary normalized, or raise SummaryJunk naming the first failed check."""
    lines = _unwrap(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    fenced = _fenced(lines)
    headings = {i: h for i, h in ((i, _heading(line)) for i, line in enumerate(lines))
                if h and not fenced[i]}
    labels = {i: m for i, line in enumerate(lines)
              if not fenced[i] and i not in headings and (m := _LABEL.match(line))}
    first = min([*headings, *labels], default=None)
    found = [*headings.values(), *(_CANONICAL[_flat(m["name"])] for m in labels.values())]

    _check_echo(lines, fenced, transcript)
    _check_continuation(text, lines, fenced, first)
    _check_cut_off(text, lines, found, max_tokens, finish)
    _check_headings(text, found)
    assert first is not None  # _check_headings refused a text without a heading

    out: list[str] = []
    for i, line in enumerate(lines[first:], start=first):
        if i in headings:
            out.append(f"## {headings[i]}")
        elif i in labels:
            out += [f"## {_CANONICAL[_flat(labels[i]['name'])]}", labels[i]["rest"].rstrip()]
        else:
            out.append(line)
    summary = "\n".join(out).strip()
    _check_empty(summary, transcript)
    return summary


# --- the five checks ------------------------------------------------------------------------


def _check_echo(lines: list[str], fenced: list[bool], transcript: str) -> None:
    outside = _INLINE_CODE.sub("", "\n".join(l for l, f in zip(lines, fenced) if not f))
    for marker in _DELIMITERS:
        if marker in outside:
            raise SummaryJunk(f"the summary copies the transcript instead of summarizing it: "
                              f"it contains the transcript's marker {marker!r}", check="echo")
    for line, f in zip(lines, fenced):
        if not f and (m := _RECORD_HEADER.match(line)):
            header = " ".join(g for g in m.groups() if g)  # ids and a role: never its text
            raise SummaryJunk(f"the summary copies the transcript instead of summarizing it: "
                              f"it contains the record header {header!r}", check="echo")
    run = _longest_copied_run([l for l, f in zip(lines, fenced) if not f], transcript)
    if run >= ECHO_RUN:
        raise SummaryJunk(f"the summary copies the transcript instead of summarizing it: "
                          f"{run} lines in a row are the conversation's own", check="echo")


def _check_continuation(text: str, lines: list[str], fenced: list[bool],
                        first: int | None) -> None:
    def junk(why: str) -> SummaryJunk:
        return SummaryJunk(f"the model went on with the chat instead of summarizing it: {why}",
                           check="continuation")

    speakers = [(i, m[1].lower()) for i, (line, f) in enumerate(zip(lines, fenced))
                if not f and (m := _SPEAKER.match(line))]
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, who in speakers:
        # `User: postgres` may be a fact; a user line ending the reply is the model inventing
        # what the user says next
        if who in _MODEL_SPEAKERS or i == last:
            name = "AI" if who == "ai" else who.capitalize()
            raise junk(f"a line starts with '{name}:'")
    for line, f in zip(lines, fenced):
        if f:
            continue
        if not _bullet(line) and _TEMPLATE_AT_EDGE.search(_INLINE_CODE.sub("", line)):
            raise junk("it contains a chat-template token")
    if first is not None:
        preamble = [line.strip() for line in lines[:first] if line.strip()]
        if len(preamble) > 1 or (preamble and len(preamble[0]) > PREAMBLE_CHARS):
            raise junk(f"{len(preamble)} line{'s' if len(preamble) > 1 else ''} of other text "
                       "come before the first heading")
    elif text.strip() and _ADDRESS.search(_QUOTED.sub("", text)):
        raise junk("it talks to the reader and has none of the summary headings")


def _check_cut_off(text: str, lines: list[str], found: list[str], max_tokens: int,
                   finish: str | None) -> None:
    if finish == "length":
        raise SummaryJunk(f"the summary was cut off at its cap of {max_tokens:,} tokens",
                          CUT_OFF_HINT, check="cut_off")
    if sum(1 for line in lines if _FENCE.match(line)) % 2:
        raise SummaryJunk("the summary was cut off inside a code block", CUT_OFF_HINT,
                          check="cut_off")
    present = set(found)
    k = sum(1 for h in sc.HEADINGS if h in present)
    tail_missing = 0 < k < len(sc.HEADINGS) and present == set(sc.HEADINGS[:k])
    if tail_missing and max_tokens > 0 and tokens.count_text(text) >= NEAR_CAP * max_tokens:
        raise SummaryJunk(f"the summary was cut off near its cap of {max_tokens:,} tokens, "
                          f"before {_names(sc.HEADINGS[k:])}", CUT_OFF_HINT, check="cut_off")


def _check_headings(text: str, found: list[str]) -> None:
    if not text.strip():
        raise SummaryJunk("the model returned an empty summary", check="headings")
    missing = [h for h in sc.HEADINGS if h not in found]
    if len(missing) == len(sc.HEADINGS):
        raise SummaryJunk("the summary has none of the nine required headings "
                          f"({', '.join(sc.HEADINGS)})", check="headings")
    if missing:
        raise SummaryJunk(f"the summary lacks {_names(missing)}", check="headings")
    repeated = [h for h in sc.HEADINGS if found.count(h) > 1]
    if repeated:
        raise SummaryJunk(f"the summary repeats {_names(repeated)}", check="headings")


def _check_empty(summary: str, transcript: str) -> None:
    """`summary` (normalized, the nine headings present) must say something when its span
    did: a model that answers nine `- (none)` would replace the span's prose with nothing."""
    said = _words_said(summary.splitlines())
    if said >= EMPTY_FLOOR:  # the common case: the transcript need not be read
        return
    span = _span_words(transcript)
    if said >= min(EMPTY_FLOOR, span // EMPTY_RATIO):
        return
    if not said:
        raise SummaryJunk("the summary is empty: its nine headings hold nothing but "
                          "placeholders like '(none)'", check="empty")
    raise SummaryJunk(f"the summary is nearly empty: {said} word{'s' if said != 1 else ''} of "
                      f"content under its nine headings, for {span:,} words in the "
                      "conversation", check="empty")


# --- reading the text -----------------------------------------------------------------------


def _heading(line: str) -> str | None:
    """The canonical heading `line` stands for, or None. A bare name needs a colon to count:
    a line that only says `Progress` may be prose."""
    m = _HEADING.match(line)
    if not m or bool(m["b1"]) != bool(m["b2"]):
        return None
    if not (m["hashes"] or m["b1"] or m["c1"] or m["c2"]):
        return None
    return _CANONICAL[_flat(m["name"])]


def _unwrap(lines: list[str]) -> list[str]:
    """The lines without a ```markdown fence around the whole summary (after at most one
    preamble line): a wrapped summary is still a summary."""
    body = [i for i, line in enumerate(lines) if line.strip()]
    opens = [i for i in body[:2] if _WRAPPER.match(lines[i])]
    if not opens or len(body) < 3 or lines[body[-1]].strip() != "```":
        return lines
    return lines[:opens[0]] + lines[opens[0] + 1:body[-1]] + lines[body[-1] + 1:]


def _fenced(lines: list[str]) -> list[bool]:
    """For each line, whether it sits inside (or opens or closes) a ``` code block."""
    out, inside = [], False
    for line in lines:
        fence = bool(_FENCE.match(line))
        out.append(inside or fence)
        if fence:
            inside = not inside
    return out


def _longest_copied_run(summary_lines: list[str], transcript: str) -> int:
    """The most consecutive summary lines that are also consecutive record lines of
    `transcript`. Blank lines are skipped on both sides; bullet lines, short lines and lines of
    the previous summary never count."""
    previous, records = _split_previous(transcript)
    keep = set(_content(previous))
    summary = _content("\n".join(summary_lines))
    countable = {line for line in summary
                 if not (len(line) < ECHO_MIN_CHARS or line in keep or _bullet(line)
                         or line.lstrip("#").strip().lower() in _CANONICAL)}
    if not countable:  # nothing the records could share: no need to read 200k tokens of them
        return 0
    at: dict[str, list[int]] = {}
    record_lines = (l for l in _content(records)
                    if not (l.startswith("#") and _RECORD_HEADER.match(l))
                    and l not in _DELIMITER_SET)
    for j, line in enumerate(record_lines):
        if line in countable:
            at.setdefault(line, []).append(j)

    best = 0
    runs: dict[int, int] = {}  # record index -> run length ending at the previous summary line
    for line in summary:
        runs = {j: runs.get(j - 1, 0) + 1 for j in at.get(line, ())}
        best = max(best, *runs.values(), 0)
    return best


def _split_previous(transcript: str) -> tuple[str, str]:
    """(the previous summary block, the rest of the transcript)."""
    if sc.PREVIOUS_SUMMARY_BEGIN in transcript:
        head, rest = transcript.split(sc.PREVIOUS_SUMMARY_BEGIN, 1)
        if sc.PREVIOUS_SUMMARY_END in rest:  # a message may quote the markers in any order
            previous, tail = rest.split(sc.PREVIOUS_SUMMARY_END, 1)
            return previous, head + tail
    return "", transcript


def _words_said(lines: list[str]) -> int:
    """How many words of `lines` say something. Headings, fence lines and placeholders say
    nothing, nor do filler words ("the", "so far") anywhere."""
    return sum(_line_words(line) for line in lines
               if not (_heading(line) or _FENCE.match(line)))


def _line_words(line: str) -> int:
    """The words of one line that say something. A placeholder says nothing: `- (none)`,
    `N/A`, "No constraints were stated." (a negation, and only filler or the headings' words
    besides); "fact fact" is no placeholder, only junk of another kind."""
    words = _WORD.findall(line.lower().replace("n/a", "na"))
    if any(w in _NEGATIONS for w in words) and all(
            w in _FILLER or w in _HEADING_WORDS for w in words):
        return 0
    return sum(1 for w in words if w not in _FILLER)


def _span_words(transcript: str) -> int:
    """The words the summary stands for: the records' lines and the previous summary's,
    without picochat's framing (delimiters, record headers, the source line)."""
    previous, records = _split_previous(transcript)
    lines = [line for line in records.splitlines()
             if line.strip() not in _DELIMITER_SET and not _RECORD_HEADER.match(line)
             and not _META.match(line.strip())]
    return _words_said(previous.splitlines()) + _words_said(lines)


def _bullet(line: str) -> bool:
    return bool(_BULLET.match(line))


def _content(text: str) -> list[str]:
    """The non-blank lines, each with its whitespace runs made one space. (A line whose only
    whitespace is single spaces, the usual case, is kept as it is: any other whitespace
    character is not printable.)"""
    out = []
    for line in text.splitlines():
        if stripped := line.strip():
            out.append(stripped if stripped.isprintable() and "  " not in stripped
                       else " ".join(stripped.split()))
    return out


def _flat(name: str) -> str:
    return " ".join(name.split()).lower()


def _names(headings: tuple[str, ...] | list[str]) -> str:
    word = "the heading" if len(headings) == 1 else "the headings"
    return f"{word} {', '.join(headings)}"

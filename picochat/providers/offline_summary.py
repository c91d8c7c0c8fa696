"""The offline model's summaries: extractive, deterministic, and within their cap, fact-complete.

The summary request carries only text, as it would to any provider: the previous summary, then one
record per message (`### #12 user` and its body). From the records this module rebuilds lightweight
`Message` values and asks the exact-fact ledger (`picochat.ledger`) for their facts, so the offline
summary finds what the compactor's ledger finds, with the same patterns and the same `- #12: a · b`
lines. The previous summary's Exact Facts are read back (`ledger.parse` for the ledger's lines, the
rest as plain items) and carried forward, a correction retiring what it overrides.

Under the cap the facts are the last thing to go, as no folded fact may be lost: prose first, the
oldest item of the longest section each time (Objective keeps the first request and the latest),
then facts, oldest first, with the ledger's own note saying how many went. All nine headings are
always there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from picochat import ledger as fact_ledger
from picochat import summary_contract as sc
from picochat import tokens
from picochat.fact_values import corrections, kind_of
from picochat.ledger import Ledger
from picochat.messages import COMPLETE, Message

_RECORD = re.compile(r"^### #(\d+) (user|assistant|tool)\b(.*)$")
# transcript._cut_chars: "<head>\n[… 1,234 characters cut …]\n<tail>"; the words (or lines)
# touching the marker may be cut in half, and half a port is a wrong fact
_CUT_LINE = re.compile(r"^\[… [\d,]+ characters cut …\]$")
_CUT_WORDS = re.compile(r"\S*\n\[… [\d,]+ characters cut …\]\n\S*")
# transcript._call_line: "[tool call NAME id=ID args: ARGS]"
_TOOL_CALL = re.compile(r"^\[tool call (\S+) id=\S* args: (.*)\]$")
_CONSTRAINT = re.compile(r"\b(must|never|always|don't|do not|only|without|required?|"
                         r"should not)\b", re.I)
_DECISION = re.compile(r"\b(decid\w*|we'll|we will|let's|chose|choose|going with|agreed)\b", re.I)
_FAILURE = re.compile(r"\b(error|failed|failure|exception|traceback|refused|denied|timeout)\b",
                      re.I)
_TODO = re.compile(r"\b(todo|next|remaining|still need|not yet|later|outstanding)\b", re.I)

FACTS = fact_ledger.FACTS_HEADING
_ITEM_CHARS = 200
_FEW_WORDS = 40  # the least of the latest request a summary keeps (characters)
_LATEST = "Latest request: "
_REPLIES = re.compile(r"^(\d+) assistant replies")
_JOINED = ("Files and Operations", FACTS)  # short items, several per line
_PER_LINE = 8
_SEP = fact_ledger.SEP
_NONE = "- (none)"
_UNKNOWN = "status unknown_not_persisted_separately"
_OUT_OF_SECTION = "\x00cut"  # lines after a cut marker, before the next heading


@dataclass(frozen=True)
class _Record:
    seq: int
    role: str
    detail: str
    text: str  # the body as sent, cut markers and all

    def message(self) -> Message:
        """The record as the ledger reads a stored message: tool calls apart from the text."""
        lines, calls = [], []
        for line in _uncut(self.text).splitlines():
            m = _TOOL_CALL.match(line.strip()) if self.role == "assistant" else None
            if m:
                calls.append({"type": "function",
                              "function": {"name": m.group(1), "arguments": m.group(2)}})
            else:
                lines.append(line)
        return Message("", self.seq, self.role, "\n".join(lines), tuple(calls) or None, None,
                       None, None, None, COMPLETE, 0, 0)


@dataclass(frozen=True)
class _Previous:
    sections: dict[str, list[str]]  # prose items per heading, Exact Facts' plain items too
    ledger: Ledger                  # its `- #12: …` lines and drop note


def is_summary_request(text: str) -> bool:
    return sc.TRANSCRIPT_BEGIN in text and sc.TRANSCRIPT_END in text


def summarize(request_text: str, max_tokens: int | None = None) -> str:
    """Build a summary with the required headings from the transcript inside a request."""
    start = request_text.index(sc.TRANSCRIPT_BEGIN) + len(sc.TRANSCRIPT_BEGIN)
    end = request_text.rindex(sc.TRANSCRIPT_END)
    transcript = request_text[start:end]
    previous = _previous(transcript)
    records = _records(transcript)
    messages = [r.message() for r in records]
    sections = {h: list(previous.sections.get(h, [])) for h in sc.HEADINGS}

    users = [m.content for m in messages if m.role == "user"]
    assistants = [m.content for m in messages if m.role == "assistant"]
    # Objective: the first request ever, then only the latest one (not every one in between).
    objective = [i for i in sections["Objective"] if not i.startswith(_LATEST)]
    if users:
        if not objective:
            objective = [_trim(users[0])]
        if len(users) > 1 or previous.sections or previous.ledger.facts:
            objective.append(_LATEST + _trim(users[-1]))
    sections["Objective"] = objective
    _add(sections["Constraints"], _sentences(users, _CONSTRAINT))
    progress = [i for i in sections["Progress"] if not _REPLIES.match(i)]
    done = sum(int(m.group(1)) for i in sections["Progress"] if (m := _REPLIES.match(i)))
    if assistants or done:
        last = f"; last: {_trim(assistants[-1], 160)}" if assistants else ""
        progress.append(f"{done + len(assistants)} assistant replies summarized so far{last}")
    sections["Progress"] = progress
    _add(sections["Decisions"], _sentences(users + assistants, _DECISION))
    ledger = fact_ledger.carry(previous.ledger, messages)
    first = records[0].seq if records else None
    new = [f for f in ledger.facts if first is not None and f.seq >= first]  # this span's
    _add(sections["Files and Operations"],
         [v for f in new if f.kind != fact_ledger.PASTE for v in f.held if kind_of(v) == "path"])
    for r in records:
        if r.role == "tool":
            text = _uncut(r.text)
            status = "failed" if _FAILURE.search(text) else _UNKNOWN
            _add(sections["Tool Results and Failures"],
                 [f"{r.detail.strip() or 'tool'} ({status}): " + _trim(text, 160)])
    if records and records[-1].role == "user":
        _add(sections["Outstanding Work"], ["Unanswered: " + _trim(messages[-1].content)])
    _add(sections["Outstanding Work"], _sentences(users, _TODO))
    _add(sections["Recent User Corrections"],
         [c for u in users for c in corrections(u)])

    known = {f.key for f in ledger.facts if f.kind != fact_ledger.CORRECTION}
    fixes = [f.value for f in new if f.kind == fact_ledger.CORRECTION]
    plain = [i for i in sections[FACTS] if _key(i) not in known
             and not any(fact_ledger.retires(c, i) for c in fixes)]
    del sections[FACTS]
    older_than = first - 1 if first is not None else ledger.dropped_up_to
    return _render(sections, plain, ledger, max_tokens, older_than)


# --- reading the transcript ---------------------------------------------------------------------


def _records(transcript: str) -> list[_Record]:
    body = _strip_previous(transcript)
    out: list[_Record] = []
    head: re.Match[str] | None = None
    lines: list[str] = []
    for line in body.splitlines():
        m = _RECORD.match(line)
        if m:
            if head:
                out.append(_record(head, lines))
            head, lines = m, []
        elif head:
            lines.append(line)
    if head:
        out.append(_record(head, lines))
    return out


def _record(head: re.Match[str], lines: list[str]) -> _Record:
    return _Record(int(head.group(1)), head.group(2), head.group(3), "\n".join(lines).strip())


def _uncut(text: str) -> str:
    """`text` without the cut marker and the half words either side of it."""
    return _CUT_WORDS.sub(" … ", text) if "characters cut" in text else text


def _strip_previous(transcript: str) -> str:
    if sc.PREVIOUS_SUMMARY_BEGIN in transcript and sc.PREVIOUS_SUMMARY_END in transcript:
        head, rest = transcript.split(sc.PREVIOUS_SUMMARY_BEGIN, 1)
        return head + rest.split(sc.PREVIOUS_SUMMARY_END, 1)[1]
    return transcript


def _previous(transcript: str) -> _Previous:
    """The previous summary's items per heading and its ledger. A summary cut to head and tail
    loses the lines either side of the cut (they may be halves), and the lines after the cut
    belong to no heading until the next one: only ledger lines are read there."""
    if sc.PREVIOUS_SUMMARY_BEGIN not in transcript:
        return _Previous({}, Ledger())
    text = transcript.split(sc.PREVIOUS_SUMMARY_BEGIN, 1)[1].split(sc.PREVIOUS_SUMMARY_END, 1)[0]
    lines = text.splitlines()
    halves = {i + d for i, line in enumerate(lines) if _CUT_LINE.match(line.strip())
              for d in (-1, 0, 1)}
    sections: dict[str, list[str]] = {}
    ledger_lines: list[str] = []
    current: str | None = None
    for i, line in enumerate(lines):
        if i in halves:
            if _CUT_LINE.match(line.strip()):
                current = _OUT_OF_SECTION
            continue
        if line.startswith("## "):
            name = line[3:].strip()
            current = name if name in sc.HEADINGS else None
            continue
        item = line.strip()
        if current is None or not item.startswith("- ") or item == _NONE:
            continue
        if current in (FACTS, _OUT_OF_SECTION) and _is_ledger_line(item):
            ledger_lines.append(item)
        elif current != _OUT_OF_SECTION:
            parts = item[2:].split(_SEP.strip()) if current in _JOINED else [item[2:]]
            sections.setdefault(current, []).extend(p.strip() for p in parts if p.strip())
    ledger = fact_ledger.parse("\n".join([f"## {FACTS}"] + ledger_lines))
    return _Previous(sections, ledger)


def _is_ledger_line(item: str) -> bool:
    """A `- #12: …` line or the drop note, as `ledger.parse` reads them."""
    parsed = fact_ledger.parse(f"## {FACTS}\n{item}")
    return bool(parsed.facts or parsed.dropped)


# --- the summary's items --------------------------------------------------------------------------


def _add(items: list[str], new: Iterable[str]) -> None:
    for item in new:
        item = item.strip()
        if item and item not in items:
            items.append(item)


def _key(item: str) -> str:
    return " ".join(item.split()).casefold()


def _trim(text: str, limit: int = _ITEM_CHARS) -> str:
    return clip(" ".join(text.split()), limit)


def clip(text: str, limit: int) -> str:
    """`text` within `limit` characters, cut at a word when there is one in its second half,
    so a clipped quote never ends in half a port or id."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip() + "…"


def _sentences(texts: Iterable[str], pattern: re.Pattern[str]) -> list[str]:
    out: list[str] = []
    for text in texts:
        for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
            if pattern.search(sentence):
                out.append(_trim(sentence))
    return out


# --- rendering under the cap ----------------------------------------------------------------------


def _render(prose: dict[str, list[str]], plain: list[str], ledger: Ledger,
            max_tokens: int | None, older_than: int = 0) -> str:
    """All nine headings; when the cap bites, prose goes first (the oldest item of the longest
    section each time; Objective keeps the first request and the latest), then the plain facts
    carried from an earlier summary (they predate message #`older_than`), then the ledger's
    facts, oldest first. Every fact that goes is counted in the ledger's note."""
    prose = {h: list(v) for h, v in prose.items()}
    text = _text(prose, plain, ledger)
    if max_tokens is None or tokens.count_text(text) <= max_tokens:
        return text
    if tokens.count_text(_trim_prose(prose, plain, ledger, max_tokens)) <= max_tokens:
        return _text(prose, plain, ledger)
    text = _fit_facts(prose, plain, ledger, max_tokens, older_than)
    if tokens.count_text(text) > max_tokens and len(prose["Objective"]) > 1:
        # not even the headings and both requests fit: only the latest request stays
        prose["Objective"] = prose["Objective"][-1:]
        text = _fit_facts(prose, plain, ledger, max_tokens, older_than)
    if tokens.count_text(text) > max_tokens and prose["Objective"]:
        # a tiny window's cap (2K with the tools: some 110 tokens): the latest request is
        # clipped to what fits beside the headings and the facts, or to a few words when not
        # even those fit (then the facts give way, as _fit_facts counts), never left to
        # overflow the cap
        request = prose["Objective"][0]

        def fits(n: int) -> bool:
            prose["Objective"] = [clip(request, n)]
            return tokens.count_text(_text(prose, plain, ledger)) <= max_tokens
        fits(max(_FEW_WORDS, tokens.most_that_fit(_FEW_WORDS, len(request), fits)))
        text = _fit_facts(prose, plain, ledger, max_tokens, older_than)
    return text


def _fit_facts(prose: dict[str, list[str]], plain: list[str], ledger: Ledger, max_tokens: int,
               older_than: int) -> str:
    """The text with the most facts that fit beside `prose`: the plain ones go first, then the
    ledger's, oldest first, all counted in the note. The whole text is what must fit, so it is
    measured rather than estimated (`ledger.fit` sees the ledger's own lines alone)."""
    def fits(p: Sequence[str], led: Ledger) -> bool:
        return tokens.count_text(_text(prose, p, led)) <= max_tokens

    def keep_plain(j: int) -> tuple[list[str], Ledger]:
        gone = len(plain) - j
        if not gone:
            return plain, ledger
        return plain[gone:], Ledger(ledger.facts, ledger.dropped + gone,
                                    max(ledger.dropped_up_to, older_than))

    plain, ledger = keep_plain(tokens.most_that_fit(0, len(plain),
                                                    lambda j: fits(*keep_plain(j))))
    if fits(plain, ledger) or not ledger.facts:
        return _text(prose, plain, ledger)
    keep = tokens.most_that_fit(0, len(ledger.facts),
                                lambda k: fits(plain, _newest(ledger, k)))
    return _text(prose, plain, _newest(ledger, keep))




def _newest(ledger: Ledger, keep: int) -> Ledger:
    """`ledger` with only its `keep` newest facts; the others counted as dropped, as
    `ledger.fit` counts them, so the note says how many went and up to which message."""
    gone = ledger.facts[: len(ledger.facts) - keep]
    return Ledger(ledger.facts[len(ledger.facts) - keep:], ledger.dropped + len(gone),
                  max([ledger.dropped_up_to] + [f.seq for f in gone]))


def _prose_victim(prose: dict[str, list[str]]) -> tuple[list[str], int] | None:
    """The list and index of the next prose item to go: the oldest of the longest section
    (in Objective, the oldest after the first request: the conversation's aim stays)."""
    def removable(h: str) -> int:
        return len(prose[h]) - (2 if h == "Objective" else 0)
    longest = max(prose, key=lambda h: (removable(h), -sc.HEADINGS.index(h)))
    if removable(longest) <= 0:
        return None
    return prose[longest], (1 if longest == "Objective" else 0)


def _trim_prose(prose: dict[str, list[str]], plain: Sequence[str], ledger: Ledger,
                max_tokens: int) -> str:
    """Remove prose items (`_prose_victim`) until the text fits or only the headings, the first
    request and the latest are left. Each removal subtracts the item's own size; the whole
    text is counted again only when that estimate says it fits, so a long summary is not
    tokenized once per item."""
    text = _text(prose, plain, ledger)
    over = tokens.count_text(text) - max_tokens
    while over > 0 and _prose_victim(prose) is not None:
        while over > 0 and (picked := _prose_victim(prose)) is not None:
            items, index = picked
            over -= tokens.count_text(items.pop(index)) + 2
        text = _text(prose, plain, ledger)
        over = tokens.count_text(text) - max_tokens
    return text


def _text(prose: dict[str, list[str]], plain: Sequence[str], ledger: Ledger) -> str:
    parts = []
    for h in sc.HEADINGS:
        if h == FACTS:
            lines = ([_bullets(h, plain)] if plain else []) + fact_ledger.render(ledger)
            parts.append(f"## {h}\n" + ("\n".join(lines) or _NONE))
        else:
            parts.append(f"## {h}\n" + (_bullets(h, prose[h]) if prose[h] else _NONE))
    return "\n\n".join(parts)


def _bullets(heading: str, items: Sequence[str]) -> str:
    if heading in _JOINED:
        rows = [_SEP.join(items[i:i + _PER_LINE]) for i in range(0, len(items), _PER_LINE)]
        return "\n".join(f"- {r}" for r in rows)
    return "\n".join(f"- {i}" for i in items)

"""Extractive summaries for the offline model, in the nine-heading structure of design §10.2.

No model, no guessing: every line of the summary is copied or trimmed from the transcript, and
a previous summary's lines are carried forward, so repeated offline compaction keeps facts.
"""

from __future__ import annotations

import re
from typing import Iterable

from picochat import summary_contract as sc
from picochat import tokens

_RECORD = re.compile(r"^### #(\d+) (user|assistant|tool)\b(.*)$")
_PATH = re.compile(r"(?<![\w/])(?:~|\.{1,2})?/[\w.\-/]+|\b[\w\-]+\.(?:py|md|toml|json|rs|js|ts|"
                   r"tsx|yaml|yml|txt|sh|sql|db|cfg|ini|html|css|go|c|h|cpp|java|rb|lock)\b")
_PORT = re.compile(r"\bport\s+\d{2,5}\b|(?<=[\w\]]):\d{2,5}\b", re.I)
_VERSION = re.compile(r"\bv?\d+\.\d+(?:\.\d+)*(?:[-+][\w.]+)?\b")
_ID = re.compile(r"\b(?=[A-Za-z0-9_\-]*\d)(?=[A-Za-z0-9_\-]*[A-Za-z])[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)+\b"
                 r"|\b[0-9a-f]{8,}\b")
_NUMBER = re.compile(r"\b\d[\d,]*(?:\.\d+)?\s?(?:%|ms\b|s\b|KB\b|MB\b|GB\b|tokens\b|USD\b|EUR\b)")
_CONSTRAINT = re.compile(r"\b(must|never|always|don't|do not|only|without|required?|should not)\b", re.I)
_DECISION = re.compile(r"\b(decid\w*|we'll|we will|let's|chose|choose|going with|agreed)\b", re.I)
_CORRECTION = re.compile(r"\b(actually|instead|correction|rather|not what|wrong|change (?:it|that)"
                         r"|no,|scratch that|i meant)\b", re.I)
_FAILURE = re.compile(r"\b(error|failed|failure|exception|traceback|refused|denied|timeout)\b", re.I)
_TODO = re.compile(r"\b(todo|next|remaining|still need|not yet|later|outstanding)\b", re.I)

_ITEM_CHARS = 200
_LATEST = "Latest request: "
_REPLIES = re.compile(r"^(\d+) assistant replies")
_JOINED = ("Files and Operations", "Exact Facts")  # short items, several per line
_PER_LINE = 8
_SEP = " · "


def is_summary_request(text: str) -> bool:
    return sc.TRANSCRIPT_BEGIN in text and sc.TRANSCRIPT_END in text


def summarize(request_text: str, max_tokens: int | None = None) -> str:
    """Build a §10.2 summary from the transcript inside a summary request."""
    start = request_text.index(sc.TRANSCRIPT_BEGIN) + len(sc.TRANSCRIPT_BEGIN)
    end = request_text.rindex(sc.TRANSCRIPT_END)
    transcript = request_text[start:end]
    previous = _previous_sections(transcript)
    records = _records(transcript)
    sections = {h: list(previous.get(h, [])) for h in sc.HEADINGS}

    users = [t for r, t in records if r == "user"]
    assistants = [t for r, t in records if r == "assistant"]
    tools = [(d, t) for r, t, d in _records_with_detail(transcript) if r == "tool"]
    # Objective: the first request ever, then only the latest one (not every one in between).
    objective = [i for i in sections["Objective"] if not i.startswith(_LATEST)]
    if users:
        if not objective:
            objective = [_trim(users[0])]
        if len(users) > 1 or previous:
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
    everything = [t for _, t in records]
    _add(sections["Files and Operations"], _matches(everything, _PATH))
    for detail, text in tools:
        status = "failed" if _FAILURE.search(text) else "status unknown_not_persisted_separately"
        _add(sections["Tool Results and Failures"], [f"{detail.strip() or 'tool'} ({status}): "
                                                     + _trim(text, 160)])
    if records and records[-1][0] == "user":
        _add(sections["Outstanding Work"], ["Unanswered: " + _trim(records[-1][1])])
    _add(sections["Outstanding Work"], _sentences(users, _TODO))
    facts = (_matches(everything, _PORT) + _matches(everything, _VERSION)
             + _matches(everything, _ID) + _matches(users, _NUMBER))
    _add(sections["Exact Facts"], facts)
    _add(sections["Recent User Corrections"], _sentences(users, _CORRECTION))
    return _render(sections, max_tokens)


def _records(transcript: str) -> list[tuple[str, str]]:
    return [(r, t) for r, t, _ in _records_with_detail(transcript)]


def _records_with_detail(transcript: str) -> list[tuple[str, str, str]]:
    body = _strip_previous(transcript)
    out: list[tuple[str, str, str]] = []
    role, detail, lines = None, "", []  # type: ignore[var-annotated]
    for line in body.splitlines():
        m = _RECORD.match(line)
        if m:
            if role:
                out.append((role, "\n".join(lines).strip(), detail))
            role, detail, lines = m.group(2), m.group(3), []
        elif role:
            lines.append(line)
    if role:
        out.append((role, "\n".join(lines).strip(), detail))
    return out


def _strip_previous(transcript: str) -> str:
    if sc.PREVIOUS_SUMMARY_BEGIN in transcript and sc.PREVIOUS_SUMMARY_END in transcript:
        head, rest = transcript.split(sc.PREVIOUS_SUMMARY_BEGIN, 1)
        return head + rest.split(sc.PREVIOUS_SUMMARY_END, 1)[1]
    return transcript


def _previous_sections(transcript: str) -> dict[str, list[str]]:
    if sc.PREVIOUS_SUMMARY_BEGIN not in transcript:
        return {}
    text = transcript.split(sc.PREVIOUS_SUMMARY_BEGIN, 1)[1].split(sc.PREVIOUS_SUMMARY_END, 1)[0]
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            name = line[3:].strip()
            current = name if name in sc.HEADINGS else None
        elif current and line.startswith("- ") and line[2:].strip() != "(none)":
            item = line[2:].strip()
            parts = item.split(_SEP) if current in _JOINED else [item]
            sections.setdefault(current, []).extend(p.strip() for p in parts if p.strip())
    return sections


def _add(items: list[str], new: Iterable[str]) -> None:
    for item in new:
        item = item.strip()
        if item and item not in items:
            items.append(item)


def _trim(text: str, limit: int = _ITEM_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _sentences(texts: Iterable[str], pattern: re.Pattern[str]) -> list[str]:
    out: list[str] = []
    for text in texts:
        for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
            if pattern.search(sentence):
                out.append(_trim(sentence))
    return out


def _matches(texts: Iterable[str], pattern: re.Pattern[str]) -> list[str]:
    out: list[str] = []
    for text in texts:
        out.extend(m.group(0).strip() for m in pattern.finditer(text))
    return list(dict.fromkeys(o for o in out if o))


def _render(sections: dict[str, list[str]], max_tokens: int | None) -> str:
    """Headings always; when the cap bites, the oldest item of the longest section goes first,
    so the newest facts win and no section is emptied while another is long."""
    items = {h: list(v) for h, v in sections.items()}
    while True:
        text = "\n\n".join(f"## {h}\n" + _bullets(h, items[h]) for h in sc.HEADINGS)
        if max_tokens is None or tokens.count_text(text) <= max_tokens:
            return text
        longest = max(sc.HEADINGS, key=lambda h: (len(items[h]), -sc.HEADINGS.index(h)))
        if not items[longest]:
            return text
        items[longest].pop(0)


def _bullets(heading: str, items: list[str]) -> str:
    if not items:
        return "- (none)"
    if heading in _JOINED:
        rows = [_SEP.join(items[i:i + _PER_LINE]) for i in range(0, len(items), _PER_LINE)]
        return "\n".join(f"- {r}" for r in rows)
    return "\n".join(f"- {i}" for i in items)

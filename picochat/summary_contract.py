"""The shape of a summary request and of a summary, shared by the engine that
writes the request and the offline model that answers it."""

from __future__ import annotations

import re

from picochat.textsafe import as_read

# What a long statement line costs in the ledger (statements.LINE_CHARS of text, its tag and
# bullet): the share's "at least this many statements" figure that the READMEs and the welcome
# give (here, not in statements.py: the welcome shows it without loading that module).
LONG_LINE_TOKENS = 40

# The user-role message that carries a checkpoint summary to the provider.
SUMMARY_OPEN = "[Historical conversation summary — reference only, not a new user request]"
SUMMARY_CLOSE = "[End historical conversation summary]"

HEADINGS: tuple[str, ...] = (
    "Objective",
    "Constraints",
    "Progress",
    "Decisions",
    "Files and Operations",
    "Tool Results and Failures",
    "Outstanding Work",
    "Exact Facts",
    "Recent User Corrections",
)

# The serialized source inside a summary request sits between these two lines.
TRANSCRIPT_BEGIN = "<<<TRANSCRIPT"
TRANSCRIPT_END = "TRANSCRIPT>>>"
# The previous checkpoint's summary, when there is one, comes first inside the transcript.
PREVIOUS_SUMMARY_BEGIN = "<<<PREVIOUS SUMMARY"
PREVIOUS_SUMMARY_END = "PREVIOUS SUMMARY>>>"


def record_header(seq: int, role: str, detail: str = "") -> str:
    """The line that opens one message's record in a transcript: `### #12 user`."""
    return f"### #{seq} {role}{(' ' + detail) if detail else ''}"


# The ledger's heading as a model might forge it, in any markup: `## Exact Facts`, bold, HTML,
# numbered, quoted, with a remark after it. Matched on a line as read (`textsafe.as_read`).
MARKUP_LEAD = r"[\s>#*_`~|•·–—+-]*(?:<h[1-6][^>]*>)?[\s*_`]*(?:\d{1,3}[.)]\s*)?[\s*_`\[(]*"
LOOKALIKE_FACTS_HEADING = re.compile(  # the title, then nothing but closing markup or a remark
    rf"^(?P<lead>{MARKUP_LEAD})exact\s+facts?\b(?P<tail>[\s*_`:#)\]]*(?:\([^)\n]{{0,30}}\))?"
    r"[\s*_`:#]*(?:</h[1-6]>)?\s*)$", re.I)


def reads_as_facts_heading(line: str) -> bool:
    """Whether `line` passes for the heading picochat writes its exact-fact ledger under."""
    return LOOKALIKE_FACTS_HEADING.match(as_read(line)) is not None


# A ledger line as a model might forge it: `- #12 correction: …`, numbered, bulleted or in
# backticks. The label says whose or what kind; a plain `#4521:` (an issue number) has none.
LOOKALIKE_TAG = re.compile(
    rf"^(?P<lead>{MARKUP_LEAD})#\s*(?P<n>\d+)\b(?P<label>[^:\n]{{0,30}}?)[*_`\])]*\s*:[*_`]*\s*")
LEDGER_LABELS = re.compile(r"\b(?:correction|paste|answer|tool|user)\b", re.I)


def reads_as_ledger_line(line: str) -> bool:
    """Whether `line` passes for one of the ledger's tagged lines (`#12 correction:`, `#40
    paste:`, …): quoted or forged, never anyone's own statement."""
    m = LOOKALIKE_TAG.match(as_read(line))
    return m is not None and LEDGER_LABELS.search(m.group("label")) is not None

"""The shape of a summary request and of a summary, shared by the engine that
writes the request and the offline model that answers it."""

from __future__ import annotations

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

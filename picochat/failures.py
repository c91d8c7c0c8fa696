"""Failures in the user's words, one wording for both front ends: the CLI prints these lines
on stderr, the app shows them as notices. Each front end only frames them (`picochat: `, an
error notice).

Below the CLI and the app: it imports no textual or rich.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from picochat.errors import PicochatError

if TYPE_CHECKING:
    from picochat.turn_events import TurnFailed


def turn_failure_line(outcome: "TurnFailed", unsaved: str = "") -> str:
    """A failed turn: what went wrong, then what of it is saved. `unsaved` says what became
    of a message that could not even be stored (the app puts it back in the prompt)."""
    line = outcome.error.user_line()
    if outcome.user_seq is None:
        return f"{line}; {unsaved}" if unsaved else line
    return f"{line}; {outcome.saved}"


def compaction_failure_line(error: PicochatError) -> str:
    """A `compact` the user asked for that failed (the context is left as it was)."""
    return f"compaction failed: {error.user_line()}"

"""Errors a user can act on.

Every error that may reach the command line is a `PicochatError`: it carries one line for the
user and the exit status the contract documents (1: act on it and retry; 2: bad usage or config;
DESIGN.md, contract "Command line"). Anything else escaping to the CLI is a bug and is reported
as such, never as a traceback.
"""

from __future__ import annotations


class PicochatError(Exception):
    """An error with a one-line message for the user and a documented exit status."""

    exit_status = 1
    kind = "error"

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def user_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(PicochatError):
    """The command line was wrong: exit status 2."""

    exit_status = 2
    kind = "usage"


class PinRefused(UsageError):
    """A pin that cannot be kept as it is (empty, framing lines, over the pins' cap): exit 2,
    nothing written."""

    kind = "pin_refused"


class MessageTooLong(UsageError):
    """A message larger than the model's whole window: it could never be answered, and once
    stored it would be in every later request. Refused before it is sent or saved (exit 2)."""

    kind = "message_too_long"


class BadSessionName(UsageError):
    """A session name that is not one line of visible text: exit 2, no session made."""

    kind = "session_name"


class BranchNotFound(UsageError):
    """A branch number the session does not have: exit 2, nothing changed."""

    kind = "branch_not_found"


class NotRewindable(UsageError):
    """A rewind to a message that is not one of the user's on the current path: exit 2."""

    kind = "not_rewindable"


class NameTaken(UsageError):
    """A new name (a session made, forked or renamed) that a live session has: exit 2."""

    kind = "name_taken"


class NotForkable(UsageError):
    """A fork point that is not a finished turn's end on the source's branch in use, or a
    source with nothing to fork: exit 2, nothing written."""

    kind = "not_forkable"


class ConfigError(PicochatError):
    """The config file (or an override) is invalid: exit status 2, nothing written."""

    exit_status = 2
    kind = "config"


class StorageError(PicochatError):
    """The database could not be opened or written."""

    kind = "storage"


class OutputError(PicochatError):
    """Standard output cannot be written (a full disk, a gone device): exit status 1."""

    kind = "output"


class SessionNotFound(PicochatError):
    """`--session` named no session: bad usage, exit 2."""

    exit_status = 2
    kind = "session_not_found"


class StaleGeneration(StorageError):
    """A checkpoint candidate was built on a context generation that has since moved on."""

    kind = "stale_generation"

"""picochat's log file: ids, counts and error kinds only, never message text, summaries or keys.

A log that cannot be written (a full disk, a read-only or missing folder, a folder where the
file should be) never stops a command and never prints Python's "--- Logging error ---"
traceback: the first failure turns logging off for the run and says so in one line, through
the reporter the front end chose (stderr for the CLI, a notice in the app, whose screen
Textual owns).
"""

from __future__ import annotations

import io
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Callable, cast

from picochat.errors import UsageError
from picochat.fsutil import make_owner_only, make_private_dir

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_configured: Path | None = None

Reporter = Callable[[str], None]
_off_line: str | None = None    # the one line said when the log stopped, for this log file
_said = False                   # whether a reporter has shown `_off_line`


def _to_stderr(line: str) -> None:
    """The default reporter: a `picochat:` line on stderr, cleaned (it names a path)."""
    from picochat.textsafe import clean

    try:
        sys.stderr.write(f"picochat: {clean(line)}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # stderr gone too: nothing more to do
        pass


_reporter: Reporter | None = _to_stderr


def log_level(verbose: bool = False) -> int:
    """`--verbose` is DEBUG, else `PICOCHAT_LOG_LEVEL` (any case), else INFO. A value that is
    no level is a usage error even with --verbose: a typo should not go unnoticed."""
    raw = os.environ.get("PICOCHAT_LOG_LEVEL", "").strip()
    if raw and raw.upper() not in LEVELS:
        raise UsageError(f"PICOCHAT_LOG_LEVEL={raw[:40]!r} is not a log level",
                         "valid: " + ", ".join(LEVELS))
    if verbose:
        return logging.DEBUG
    return int(getattr(logging, raw.upper())) if raw else logging.INFO


def where_details() -> str:
    """The end of an internal error's line: the log file that holds its frames."""
    written = current_log_file()
    if written is None:
        return "the log could not be written"
    from picochat.textsafe import clean

    return f"details are in {clean(str(written))}"


def current_log_file() -> Path | None:
    """The file the log is written to, once it holds a line; None before or if unwritable."""
    handlers = logging.getLogger("picochat").handlers
    if _configured is not None and _off_line is None and any(
            isinstance(h, logging.FileHandler) for h in handlers):
        return _configured if _configured.is_file() else None
    return None


def report_log_off_to(reporter: Reporter | None) -> Reporter | None:
    """Where the "logging is off" line goes from now on; None holds it until a reporter is
    set (the app before its screen is up, and after it is gone). A line held and not yet
    shown is shown by the reporter set next, so it is said once whoever says it. Returns
    the reporter it replaces, for a caller that puts it back."""
    global _reporter
    previous, _reporter = _reporter, reporter
    if _off_line is not None and not _said:
        _say(_off_line)
    return previous


def _say(line: str) -> None:
    global _said
    if _reporter is None:
        return
    _said = True
    try:
        _reporter(line)
    except Exception:  # noqa: BLE001 - a reporter that fails must not fail the write that logged
        pass


def _logging_off(log_file: str, exc: OSError) -> None:
    """The first failure to write the log: remember one line and say it, once. The line
    holds the error kind and the path, no record's text."""
    global _off_line
    if _off_line is not None:
        return
    reason = exc.strerror or type(exc).__name__
    _off_line = f"cannot write the log {log_file} ({reason}): logging is off for this run"
    _say(_off_line)


def setup_logging(log_file: Path, level: int = logging.INFO) -> None:
    """Send the `picochat` logger to `log_file` (created on first use); never to the terminal.
    Lines below `level` are dropped; litellm's own loggers stay at WARNING whatever the level
    (their debug lines quote requests)."""
    global _configured, _off_line, _said
    root = logging.getLogger("picochat")
    root.setLevel(level)
    if _configured == log_file:
        return
    root.propagate = False
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    _off_line, _said = None, False  # a new file: its own chance to be written
    # The folder and the file are made on the first line logged: a folder that cannot be
    # made is then the same one-line failure as a file that cannot be written.
    handler = _PrivateFileHandler(log_file, encoding="utf-8", errors="backslashreplace",
                                  delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root.addHandler(handler)
    _configured = log_file
    warnings.showwarning = _log_warning


class _PrivateFileHandler(logging.FileHandler):
    """A FileHandler whose file is 0600 (made so, or tightened if picochat owns it): the log
    names sessions and models, which are no other user's business. A failure to open or
    write it turns it off for the run, with one line (`_logging_off`), never a traceback and
    never an exception into the code that logged."""

    off = False

    def _open(self) -> io.TextIOWrapper:
        path = Path(self.baseFilename)
        make_private_dir(path.parent)
        make_owner_only(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        return cast(io.TextIOWrapper, open(fd, self.mode, encoding=self.encoding,
                                           errors=self.errors))

    def emit(self, record: logging.LogRecord) -> None:
        if self.off:
            return
        try:  # opening the file (on the first line) raises here, not into handleError
            super().emit(record)
        except OSError as exc:
            self._give_up(exc)

    def handleError(self, record: logging.LogRecord) -> None:
        """A write or flush that failed (ENOSPC, EIO): logging stops; another error (a bad
        format string, a bug) keeps Python's report."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            self._give_up(exc)
        else:
            super().handleError(record)

    def _give_up(self, exc: OSError) -> None:
        self.off = True
        stream, self.stream = self.stream, None
        if stream is not None:
            try:  # flushing what the buffer holds fails again; the file is closed all the same
                stream.close()
            except (OSError, ValueError):
                pass
        _logging_off(self.baseFilename, exc)


def _log_warning(message: warnings.WarningMessage | Warning | str, category: type[Warning],
                 filename: str, lineno: int, file: object = None,
                 line: str | None = None) -> None:
    """Python warnings go to the log, never the terminal, and only as kind and place: their
    text can quote data (pydantic's serializer warnings print field values). One is expected:
    a call cancelled while litellm prepares it leaves a coroutine never awaited."""
    logging.getLogger("picochat.warnings").warning(
        "python_warning kind=%s at=%s:%d", category.__name__, os.path.basename(filename), lineno)

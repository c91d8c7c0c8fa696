"""picochat's log file: ids, counts and error kinds only, never message text, summaries or keys."""

from __future__ import annotations

import io
import logging
import os
import warnings
from pathlib import Path

from picochat.errors import UsageError
from picochat.fsutil import make_private_dir

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_configured: Path | None = None


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
    if _configured is not None and any(isinstance(h, logging.FileHandler) for h in handlers):
        return _configured if _configured.exists() else None
    return None


def setup_logging(log_file: Path, level: int = logging.INFO) -> None:
    """Send the `picochat` logger to `log_file` (created on first use); never to the terminal.
    Lines below `level` are dropped; litellm's own loggers stay at WARNING whatever the level
    (their debug lines quote requests)."""
    global _configured
    root = logging.getLogger("picochat")
    root.setLevel(level)
    if _configured == log_file:
        return
    root.propagate = False
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    try:
        make_private_dir(log_file.parent)
        handler: logging.Handler = _PrivateFileHandler(log_file, encoding="utf-8", delay=True)
    except OSError:
        handler = logging.NullHandler()  # an unwritable log dir must not stop the user
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root.addHandler(handler)
    _configured = log_file
    warnings.showwarning = _log_warning


class _PrivateFileHandler(logging.FileHandler):
    """A FileHandler whose file, when it creates it, is 0600: the log names sessions and
    models, which are no other user's business."""

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        return open(fd, self.mode, encoding=self.encoding, errors=self.errors)


def _log_warning(message: warnings.WarningMessage | Warning | str, category: type[Warning],
                 filename: str, lineno: int, file: object = None,
                 line: str | None = None) -> None:
    """Python warnings go to the log, never the terminal, and only as kind and place: their
    text can quote data (pydantic's serializer warnings print field values). One is expected:
    a call cancelled while litellm prepares it leaves a coroutine never awaited."""
    logging.getLogger("picochat.warnings").warning(
        "python_warning kind=%s at=%s:%d", category.__name__, os.path.basename(filename), lineno)

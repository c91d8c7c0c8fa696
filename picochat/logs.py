"""picochat's log file: ids, counts and error kinds only, never message text, summaries or keys."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

_configured: Path | None = None


def setup_logging(log_file: Path, level: int = logging.INFO) -> None:
    """Send the `picochat` logger to `log_file` (created on first use); never to the terminal."""
    global _configured
    if _configured == log_file:
        return
    root = logging.getLogger("picochat")
    root.setLevel(level)
    root.propagate = False
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    try:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.FileHandler(log_file, encoding="utf-8", delay=True)
    except OSError:
        handler = logging.NullHandler()  # an unwritable log dir must not stop the user
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root.addHandler(handler)
    _configured = log_file
    warnings.showwarning = _log_warning


def _log_warning(message: warnings.WarningMessage | Warning | str, category: type[Warning],
                 filename: str, lineno: int, file: object = None,
                 line: str | None = None) -> None:
    """Python warnings go to the log, never the terminal, and only as kind and place: their
    text can quote data (pydantic's serializer warnings print field values). One is expected:
    a call cancelled while litellm prepares it leaves a coroutine never awaited."""
    logging.getLogger("picochat.warnings").warning(
        "python_warning kind=%s at=%s:%d", category.__name__, os.path.basename(filename), lineno)

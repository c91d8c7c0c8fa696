"""The one place CLI text leaves the process, so no line can carry a terminal escape.

Three kinds of output, three writers:
- `say` and `note`: what picochat itself says (a status line on stdout, a line on stderr).
  They may quote a session name, a pin or a path, so they are always cleaned, on a terminal or
  in a pipe (`| cat` hands a pipe's bytes to a terminal all the same).
- `err`: a `picochat:` error line on stderr, always cleaned.
- `out` (with `for_terminal`), `dump_json` and `write_stdout`: data a command prints on
  purpose (history, an export, the reply). Cleaned on a terminal; a pipe or a file gets the
  text as stored, so `picochat history > file` keeps every byte.
Nothing else in `picochat.cli` writes to stdout or stderr (a test holds it to that).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from picochat.errors import OutputError
from picochat.textsafe import clean, json_for_terminal


def write_stdout(text: str) -> None:
    """Write `text` to stdout now. A closed pipe stays BrokenPipeError (the reader left: exit
    0); any other failure (a full disk) is one `OutputError` line naming it."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
        raise
    except OSError as exc:
        silence_stdout()
        raise OutputError(f"cannot write to standard output: {exc.strerror or exc}") from None


def silence_stdout() -> None:
    """Point stdout at /dev/null once a write failed: what is left in Python's buffer would
    fail again at exit, as a second, traceback-like message."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, sys.stdout.fileno())
        finally:
            os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


def out(text: str = "") -> None:
    """Data on stdout, as given: the caller chose `for_terminal` or not."""
    write_stdout(text + ("\n" if not text.endswith("\n") else ""))


def say(text: str) -> None:
    """picochat's own line on stdout, cleaned wherever it goes."""
    out(clean(text))


def json_text(value: Any) -> str:
    return for_terminal_json(json.dumps(value, ensure_ascii=False, indent=2)) + "\n"


def dump_json(value: Any) -> None:
    write_stdout(json_text(value))


# Stored text (model output above all) is untrusted: on a terminal it is shown cleaned (no
# escapes, no control characters, bidi controls as `<U+202E>`); a pipe or a file gets it as stored.


def for_terminal(text: str) -> str:
    return clean(text) if sys.stdout.isatty() else text


def for_terminal_json(text: str) -> str:
    """JSON on a terminal: controls it would obey as \\u escapes, the same data once parsed."""
    return json_for_terminal(text) if sys.stdout.isatty() else text


def note(line: str) -> None:
    """picochat's own line on stderr (no prefix), cleaned: it may name a session or a file."""
    try:
        sys.stderr.write(f"{clean(line)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr gone: the command's outcome still stands
        pass


def err(line: str) -> None:
    """One `picochat:` line on stderr, cleaned: provider error text and names are quoted in it."""
    note(f"picochat: {line}")

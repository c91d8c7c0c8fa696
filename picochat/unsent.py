"""Messages the user sent that could not be saved when the app quit (another picochat held the
database's write lock past the shutdown's bound): kept in a private file beside the database,
and put back in the prompt when that session is next opened. Nothing typed is lost.

The answer being streamed at that quit is kept there too (`role` "assistant"): the next picochat
to start saves it as that turn's interrupted answer, as it would a killed process's draft. So is
whatever the prompt held at any quit (`role` "typed"): messages put back there by the last open
and not sent again would otherwise be lost by the next quit.

The file holds the user's words, so it is 0600 and written whole or not at all; it goes away
once every message in it is back in a prompt or the database.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable

from picochat.fsutil import atomic_write_text

log = logging.getLogger("picochat.unsent")
FILE_NAME = "unsent.json"
# Far above what a quit writes (messages the window takes, an answer under its 32 MiB bound);
# a file past it was not written by picochat, and loading it took 3 GB for 120 MB of JSON.
MAX_FILE_BYTES = 64 << 20


@dataclass(frozen=True)
class Unsent:
    session_id: str
    turn_id: str
    text: str
    # "user": a message sent and not saved; "typed": what the prompt held at the quit, never
    # sent; "assistant": the turn's answer so far, not a message to send again
    role: str = "user"


def unsent_file(data_dir: Path) -> Path:
    return data_dir / FILE_NAME


def keep(data_dir: Path, messages: Iterable[Unsent]) -> Path:
    """Add `messages` to the file (after any kept before). Raises OSError if it cannot be
    written: the caller says so, with the words still on its hands."""
    path = unsent_file(data_dir)
    kept = _read(path) + list(messages)
    _write(path, kept)
    log.info("unsent_kept count=%d", len(kept))
    return path


def take(data_dir: Path, session_id: str) -> list[Unsent]:
    """The session's kept messages, oldest first, removed from the file (the others stay).
    A file that cannot be read or rewritten is left alone and yields nothing: better kept
    twice than lost."""
    return _take(data_dir, lambda m: m.role != "assistant" and m.session_id == session_id)


def kept_answers(data_dir: Path) -> list[Unsent]:
    """Every kept answer, of any session, left in the file: `forget` them once written, so a
    kill in between loses none (writing one twice writes it once: `Drafts.recover_answer`)."""
    return [m for m in _read(unsent_file(data_dir)) if m.role == "assistant"]


def forget(data_dir: Path, done: Iterable[Unsent]) -> None:
    """Remove these from the file (others, kept meanwhile by another picochat, stay)."""
    gone = set(done)
    if gone:
        _take(data_dir, lambda m: m in gone)


def _take(data_dir: Path, wanted: Callable[[Unsent], bool]) -> list[Unsent]:
    path = unsent_file(data_dir)
    kept = _read(path)
    mine = [m for m in kept if wanted(m)]
    if not mine:
        return []
    rest = [m for m in kept if not wanted(m)]
    try:
        if rest:
            _write(path, rest)
        else:
            os.unlink(path)
    except OSError as exc:
        log.warning("unsent_not_taken kind=%s", type(exc).__name__)
        return []
    log.info("unsent_taken count=%d", len(mine))
    return mine


def _write(path: Path, messages: list[Unsent]) -> None:
    """The whole file, written whole or not at all (0600: it holds the user's words)."""
    atomic_write_text(path, json.dumps({"version": 1, "messages": [asdict(m) for m in messages]},
                                       ensure_ascii=False))


def _read(path: Path) -> list[Unsent]:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:  # not what a quit writes: left for the user, not loaded
            log.warning("unsent_too_large bytes=%d", size)
            return []
        data = json.loads(path.read_text(encoding="utf-8"))
        return [Unsent(str(m["session_id"]), str(m["turn_id"]), str(m["text"]),
                       m.get("role") if m.get("role") in ("assistant", "typed") else "user")
                for m in data["messages"]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:  # damaged: kept for the user
        log.warning("unsent_unreadable kind=%s", type(exc).__name__)
        return []


def keep_at_quit(data_dir: Path | None, unsaved: Iterable[Unsent]) -> str:
    """Messages sent but not saved at quit, the answer being streamed and the prompt's text
    go to the unsent file; the line for the terminal says where. If even that fails, the
    line holds the user's words themselves: the terminal keeps them."""
    unsaved = tuple(unsaved)
    sent = [m for m in unsaved if m.role == "user"]
    typed = [m for m in unsaved if m.role == "typed"]
    answer = any(m.role == "assistant" for m in unsaved)
    n = len(sent)
    parts = [f"{n} message{'s' if n != 1 else ''} you sent"] if n else []
    parts += ["the answer being written"] if answer else []
    what = " and ".join(parts) + " could not be saved" if parts else ""
    if data_dir is not None:
        try:
            path = keep(data_dir, unsaved)
            if not parts:
                return (f"what you were typing is kept in {path}; it comes back in the "
                        "prompt when this session is opened again")
            back = [f"{'they come' if n != 1 else 'it comes'} back in the prompt when "
                    "this session is opened again"] if n else []
            back += ["what you were typing comes back in the prompt too"] if typed else []
            back += ["the answer is saved as interrupted when picochat next starts"] \
                if answer else []
            return (f"{what} (the database stayed locked by another picochat); kept in "
                    f"{path}; " + "; ".join(back))
        except OSError as exc:
            log.warning("unsent_not_kept kind=%s", type(exc).__name__)
    words = sent + typed
    if not words:
        return f"{what}, nor kept in a file"
    return (f"{what or 'what you were typing could not be kept'}, nor kept in a file; here "
            f"{'they are' if len(words) != 1 else 'it is'}: " +
            " | ".join(m.text for m in words))


def restored_note(back: Iterable[Unsent]) -> str:
    """What a start says of the messages it put back in the prompt."""
    n = sum(m.role == "user" for m in back)
    return (f"{n} message{'s' if n != 1 else ''} that could not be saved when picochat last "
            f"quit {'are' if n != 1 else 'is'} back in the prompt") if n else \
        "what you were typing when picochat last quit is back in the prompt"

"""Drafts: the text of an answer while it streams, saved about once a second outside the
append-only log, and what becomes of it when the process streaming it is gone (killed
mid-answer): the interrupted answer of its turn.

Its own class because a draft lives by its writer's liveness, not by the log's rules: a
draft is left alone while its process runs, however old, and recovered once it does not.
Liveness is told by the lock the owner holds (`owner.py`), else by its pid and start time in
/proc (`process_alive`). Appending the answer goes through the log (`MessageLog.append_messages`,
`if_draft`), which drops a turn's draft in the transaction that writes the turn.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Callable, Iterable, Protocol

from picochat.messages import INTERRUPTED, Message, NewMessage, PreparedMessage, valid_text
from picochat.storage.core import Core
from picochat.storage.owner import my_token, owner_alive


# How a recovered answer gets its derived data (`prepare.prepare`): the writer's to compute,
# never storage's, so the caller hands it in.
Prepare = Callable[[NewMessage], PreparedMessage]


class _Log(Protocol):
    """The one thing drafts need of the log: an append that waits for the turn's draft."""

    def append_messages(self, session_id: str, messages: Iterable[PreparedMessage], *,
                        if_draft: str | None = None) -> list[Message]: ...


class Drafts:
    """`store.drafts`: the `drafts` table, one row a turn whose answer is streaming."""

    def __init__(self, core: Core, log: _Log) -> None:
        self.core = core
        self.log = log

    def save(self, session_id: str, turn_id: str, content: str) -> None:
        """The text of a turn's answer so far, replacing the previous draft of that turn.
        Outside the append-only log: the answer itself is appended once, when it ends."""
        with self.core.write() as c:
            self._put(c, session_id, turn_id, content)

    def _put(self, c: sqlite3.Connection, session_id: str, turn_id: str, content: str) -> None:
        c.execute("INSERT INTO drafts (turn_id, session_id, content, owner_pid, owner_start, "
                  "owner_lock, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(turn_id) "
                  "DO UPDATE SET content = excluded.content, updated_at = excluded.updated_at",
                  (turn_id, session_id, valid_text(content), os.getpid(),
                   process_start(os.getpid()), my_token(self.core.path), self.core.clock()))

    def drop(self, turn_id: str) -> None:
        """The turn ended with nothing to keep (a whitespace-only answer so far)."""
        with self.core.write() as c:
            forget_drafts(c, [turn_id])

    def recover(self, prepare: Prepare, alive: Callable[[int, int | None], bool] | None = None
                ) -> list[Message]:
        """Turn each draft whose process is gone (killed mid-answer) into an interrupted
        answer of its turn; a whitespace-only draft is just dropped. Returns the answers.
        A draft whose process still runs is left alone however old: it may be thinking. The
        owner is told alive by the lock it holds (`storage/owner.py`), else by its pid;
        `alive(pid, start)`, given, decides alone (tests). `prepare` gives each answer its
        derived data (`prepare.prepare`)."""
        with self.core.read() as c:
            rows = c.execute("SELECT turn_id, session_id, content, owner_pid, owner_start, "
                             "owner_lock FROM drafts").fetchall()
        recovered: list[Message] = []
        for turn_id, session_id, content, pid, start, lock in rows:
            told = None if alive is not None or not lock else owner_alive(self.core.path, lock)
            if (alive or process_alive)(pid, start) if told is None else told:
                continue
            if not content.strip():
                with self.core.write() as c:
                    forget_drafts(c, [turn_id])
                continue
            recovered += self.log.append_messages(session_id, [prepare(NewMessage(
                "assistant", content, turn_id=turn_id, status=INTERRUPTED))], if_draft=turn_id)
        return recovered

    def recover_answer(self, session_id: str, turn_id: str, text: str, prepare: Prepare
                       ) -> list[Message]:
        """An answer a quitting picochat streamed but could not write (the database was locked;
        it was kept in the unsent file): saved as its turn's interrupted answer, in its place as
        `recover` places a draft. Its draft, if one was saved, has older text and gives
        way. Nothing is written when the turn already has an answer (another process recovered
        the draft first), or no question of that turn is in that session (a session gone, a file
        not of picochat's making). Returns the answer written, if any."""
        with self.core.write() as c:
            asked = c.execute("SELECT 1 FROM messages WHERE session_id = ? AND turn_id = ? "
                              "AND role = 'user'", (session_id, turn_id)).fetchone()
            if not asked or c.execute("SELECT 1 FROM messages WHERE session_id = ? AND "
                                      "turn_id = ? AND role = 'assistant' AND tool_calls IS "
                                      "NULL", (session_id, turn_id)).fetchone():
                forget_drafts(c, [turn_id])
                return []
            # in the same transaction as the check: a second process recovering the same
            # answer either sees it written or finds the draft gone when it appends
            self._put(c, session_id, turn_id, text)  # killed after this: still a draft
        return self.log.append_messages(session_id, [prepare(NewMessage(
            "assistant", text, turn_id=turn_id, status=INTERRUPTED))], if_draft=turn_id)


def has_draft(c: sqlite3.Connection, turn_id: str) -> bool:
    """Whether the turn's draft is still there (no process has appended its answer)."""
    return c.execute("SELECT 1 FROM drafts WHERE turn_id = ?", (turn_id,)).fetchone() is not None


def forget_drafts(c: sqlite3.Connection, turn_ids: Iterable[str]) -> None:
    """Drop the drafts of these turns, inside the caller's transaction."""
    c.executemany("DELETE FROM drafts WHERE turn_id = ?", [(t,) for t in turn_ids])


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def process_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks after boot, Linux), to tell it from a later
    process given the same pid; None where /proc does not say."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def process_alive(pid: int, start: int | None) -> bool:
    """Whether the process that wrote a draft still runs: the pid exists, is not a zombie,
    and (where /proc tells) started when the draft's writer did, so a reused pid (every run
    is pid 1 in a container) is not mistaken for it."""
    if Path("/proc/self/stat").exists():
        fields = _proc_stat(pid)
        if fields is None or fields[0] in ("Z", "X"):
            return False
        return start is None or process_start(pid) == start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it runs, as another user
        return True
    return True

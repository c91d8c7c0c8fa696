"""`Store`: the one object the rest of picochat writes and reads the database through, a thin
composition of one class a job, all on the transactional core (`core.py`, `store.core`):
sessions (`sessions.py`), the append-only message log (`log.py`), and the context's pointers
into it (`context.py`: checkpoints, `/clear`, undo, `/uncompact`, the compaction wait, pins)
and its branches (`branches.py`: rewind, switch) and forks (`forks.py`), whose methods `Store` has as its own; drafts (`store.drafts`, `drafts.py`), search
(`store.search`, `search.py`) and model traits (`store.traits`, `traits.py`) are its parts.

Kept as one object so that every caller keeps one handle and one method name for each thing
it does (`store.create_session`, `store.history`, `store.commit_context_checkpoint`), while
each job is read and changed in its own module. The names other modules import from here
(`ContextSnapshot`, `UndoResult`, `UncompactResult`, `last_turn_seqs`, `wall_clock_ms`) stay
importable from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from picochat.storage.branches import BranchPointers
from picochat.storage.context import (TRIGGER_REASONS, ContextPointers, ContextSnapshot,
                                      UncompactResult, UndoResult, last_turn_seqs)
from picochat.storage.core import Clock, Core, T, open_core, wall_clock_ms
from picochat.storage.drafts import Drafts
from picochat.storage.forks import Forked, Forks
from picochat.storage.log import MessageLog
from picochat.storage.search import Search
from picochat.storage.sessions import SessionRows
from picochat.storage.traits import Traits

__all__ = ["Store", "open_store", "Forked", "ContextSnapshot", "UndoResult", "UncompactResult",
           "TRIGGER_REASONS", "last_turn_seqs", "wall_clock_ms"]


def open_store(path: Path, clock: Clock = wall_clock_ms) -> "Store":
    return Store(open_core(path, clock))


class Store(SessionRows, MessageLog, ContextPointers, BranchPointers, Forks):
    """Sessions, the message log and the context's pointers (its bases, one job each), on the
    transactional core (`store.core`); drafts, search and model traits are its parts
    (`store.drafts`, …).

    No cached state: every call is one short transaction, so two processes on one file see
    each other's writes at their next call."""

    def __init__(self, core: Core) -> None:
        super().__init__(core)
        self.path = core.path
        self.drafts = Drafts(core, self)
        self.search = Search(core)
        self.traits = Traits(core)

    def close(self) -> None:
        self.core.close()

    async def io(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` on the store's one thread (`Core.io`)."""
        return await self.core.io(fn, *args, **kwargs)

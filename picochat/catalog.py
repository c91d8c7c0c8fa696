"""The sessions of one database, as a front end reads and changes them: off its event loop.

A front end with a screen must never wait on SQLite while the user types: another picochat
may hold the write lock for seconds, and a long session's rows take time to read. Every call
here runs on the store's own thread (`Store.io`) and hands back frozen values, so the TUI
needs neither `Store` nor SQL. What one open session reads and writes goes through its
`SessionWorker`; this is everything around it (list, find, create, rename, delete, the model
a session opens with, the prompts recalled with up), and `open_chat`: what the app opens once
its first frame is drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from picochat.config import Config
from picochat.first_screen import FirstScreen, read_first_screen
from picochat.messages import Session
from picochat.models import ResolvedModel
from picochat.opening import open_model
from picochat.providers.base import Provider
from picochat.session import SessionWorker
from picochat.storage.store import Store


@dataclass(frozen=True)
class ChatStart:
    """What the chat app runs on: the store, the session it shows and its model, opened, and
    what its first screen shows (None: the app reads it)."""

    store: Store
    session: Session
    model: ResolvedModel
    provider: Provider
    first: FirstScreen | None = None

    def catalog(self) -> SessionCatalog:
        return SessionCatalog(self.store)


def open_chat(store: Store, config: Config, ref: str | None, flag: str | None,
              page: int) -> ChatStart:
    """The session `ref` names (created if no session has that name), else the most recently
    active one, else a new one; its model (`flag` first) and the first screen's `page` newest
    messages. A missing key, a bad setting or a database damaged inside fails here, before
    anything is written."""
    session = store.find_session(ref) if ref else store.latest_session()
    model, provider = open_model(config, session, flag)
    if session is None:
        session = store.find_or_create_session(ref)
    if flag and session.model != flag:
        store.set_session_model(session.id, flag)
    return ChatStart(store, session, model, provider,
                     read_first_screen(store, session.id, page))


class SessionCatalog:
    """Every session of the database at `path`, read and written on the store's thread."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def path(self) -> Path:
        """The database file (named when it is deleted or replaced under a running app)."""
        return self._store.path

    def worker(self, session: Session, model: ResolvedModel, provider: Provider,
               config: Config) -> SessionWorker:
        """The worker that runs `session`'s turns and commands (not started)."""
        return SessionWorker.from_config(self._store, session.id, model, provider, config,
                                         session=session)

    async def sessions(self) -> list[Session]:
        return await self._store.io(self._store.list_sessions)

    async def listing(self) -> list[tuple[Session, str]]:
        """Every session, most recently active first, with how it began (its first user
        message's start; "" for none): the session picker's rows."""
        def run() -> list[tuple[Session, str]]:
            sessions = self._store.list_sessions()
            firsts = self._store.first_lines([s.id for s in sessions])
            return [(s, firsts.get(s.id, "")) for s in sessions]
        return await self._store.io(run)

    async def get(self, session_id: str) -> Session:
        return await self._store.io(self._store.session, session_id)

    async def find(self, ref: str) -> Session | None:
        return await self._store.io(self._store.find_session, ref)

    async def create(self, name: str | None = None) -> Session:
        return await self._store.io(self._store.create_session, name=name)

    async def rename(self, session_id: str, name: str) -> Session:
        return await self._store.io(self._store.rename_session, session_id, name)

    async def delete(self, session_id: str) -> None:
        await self._store.io(self._store.delete_session, session_id)

    async def set_model(self, session_id: str, model: str) -> Session:
        """`session_id` opens with `model` from now on; the session as it is now."""
        def run() -> Session:
            self._store.set_session_model(session_id, model)
            return self._store.session(session_id)
        return await self._store.io(run)

    async def user_prompts(self) -> list[str]:
        """What the user sent before, newest last, for the prompt's up-arrow recall."""
        return await self._store.io(self._store.search.user_prompts)

    async def outside_changes(self) -> tuple[bool, bool]:
        """(the database file was replaced or deleted, another process wrote since last
        asked)."""
        return await self._store.io(self._store.core.outside_changes)

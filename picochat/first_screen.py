"""What the app's first screen shows of a session, read with the store alone.

A long session's transcript is what a user opening it waits for. Reading it needs the store
and nothing of the model, the provider or the worker, whose modules take longer to load than
the read takes: the app draws the transcript from a `first_look` first, then opens the rest
(`catalog.open_chat`, which reads the same screen again to find what changed meanwhile).
"""

from __future__ import annotations

from dataclasses import dataclass

from picochat.messages import Checkpoint, Message, Session
from picochat.storage.store import Store


@dataclass(frozen=True)
class FirstScreen:
    """What the app's first screen shows of a session: its newest messages, the checkpoint in
    force and the prompts the up arrow recalls."""

    newest: list[Message]
    checkpoint: Checkpoint | None
    prompts: list[str]


@dataclass(frozen=True)
class FirstLook:
    """A session as the app will open it, and what its transcript shows, read before its
    model (the prompts the up arrow recalls come with the opening's `FirstScreen`)."""

    session: Session
    newest: list[Message]
    checkpoint: Checkpoint | None


def read_first_screen(store: Store, session_id: str, page: int) -> FirstScreen:
    """Read as the app opens, off its event loop: a database damaged inside is found here
    and said in one line."""
    return FirstScreen(store.history_page(session_id, None, page),
                       store.active_checkpoint(session_id), store.search.user_prompts())


def first_look(store: Store, ref: str | None, page: int) -> FirstLook | None:
    """The session `open_chat` opens (`ref`'s, else the most recently active) and its
    newest messages; None when there is nothing to draw yet: no such session, or no message
    in it (a new session's welcome names its model, which only the opening knows)."""
    session = store.find_session(ref) if ref else store.latest_session()
    if session is None:
        return None
    newest = store.history_page(session.id, None, page)
    return FirstLook(session, newest, store.active_checkpoint(session.id)) if newest else None

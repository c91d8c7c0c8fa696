"""One current session for both front ends (issue 35, item 4; it replaces issue 22.2's "the app
reopens what it showed, whatever was written since"): the most recently active session, where
showing a session in the app is activity as much as writing to it. `picochat` reopens it, and
every command without --session acts on it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from picochat.cli import commands
from picochat.cli.main import main
from picochat.storage import open_store
from picochat.tui import app as tui_app
from tests.helpers.storage import append_message


@pytest.fixture
def start_app(home: Path, monkeypatch: pytest.MonkeyPatch):
    """`start_app(*argv, then=None)`: `picochat ARGV` as the CLI starts the app (its choice of
    session included), in this process and headless; `then(app, pilot)` runs on the first
    frame, then the app quits. Returns the name of the session it opened."""
    monkeypatch.setattr(commands, "has_terminal", lambda: True)

    def start(*argv: str, then=None) -> str:
        opened: list[str] = []

        async def drive(app) -> None:
            async with app.run_test(size=(100, 30)) as pilot:
                await pilot.pause()
                opened.append(app.session.name)
                if then is not None:
                    await then(app, pilot)

        monkeypatch.setattr(tui_app.PicochatApp, "run", lambda self: asyncio.run(drive(self)))
        assert main(list(argv)) == 0
        return opened[0]

    return start


def ask(*argv: str) -> None:
    assert main(["ask", *argv]) == 0


def test_the_session_the_app_showed_last_is_the_one_every_command_acts_on(start_app, capsys):
    ask("--session", "older", "first words")
    ask("--session", "newer", "later words")
    assert start_app("--session", "older") == "older"  # the user reads the older one, quits
    capsys.readouterr()
    assert main(["info", "--json"]) == 0  # no -s: the session the app showed
    assert '"session_name": "older"' in capsys.readouterr().out
    assert start_app() == "older"
    ask("one more turn")  # and `ask` without -s writes there
    capsys.readouterr()
    assert main(["history", "--session", "older", "--json"]) == 0
    assert "one more turn" in capsys.readouterr().out


def test_a_session_written_since_the_app_showed_one_is_the_current_one(start_app, capsys):
    ask("--session", "older", "first words")
    assert start_app("--session", "older") == "older"
    ask("--session", "newer", "written from the shell meanwhile")
    assert start_app() == "newer"  # the last thing done, in either front end
    capsys.readouterr()
    assert main(["info", "--json"]) == 0
    assert '"session_name": "newer"' in capsys.readouterr().out


def test_a_session_switched_to_in_the_app_is_the_one_reopened(start_app):
    ask("--session", "older", "first words")
    ask("--session", "newer", "later words")

    async def switch(app, pilot) -> None:  # what /sessions does with the row picked
        await app.open_session(await app.sessions.find("older"))
        await pilot.pause()

    assert start_app(then=switch) == "newer"
    assert start_app() == "older"


def test_a_first_start_with_no_session_opened_before_takes_the_most_recently_active(
        start_app):
    ask("--session", "older", "first words")
    ask("--session", "newer", "later words")
    assert start_app() == "newer"  # databases written before schema 10 start here too


def test_the_last_opened_session_deleted_falls_back_to_the_most_recently_active(store):
    a, b, c = (store.create_session(n) for n in "abc")
    append_message(store, a.id, "user", "x", turn_id="t")
    assert store.last_opened_session() is None
    store.mark_opened(b.id)
    store.mark_opened(c.id)
    assert store.last_opened_session().id == c.id
    store.delete_session(c.id)
    assert store.last_opened_session().id == b.id
    store.delete_session(b.id)
    assert store.last_opened_session() is None and store.latest_session().id == a.id


def test_the_last_session_opened_wins_even_within_one_clock_tick(tmp_path: Path):
    """Two opens in the same millisecond (or a clock set back) still order by when."""
    store = open_store(tmp_path / "p.db", clock=lambda: 1000)
    try:
        one, two = store.create_session("one"), store.create_session("two")
        for sid in (one.id, two.id, one.id):
            store.mark_opened(sid)
            assert store.last_opened_session().id == sid
    finally:
        store.close()


async def test_a_worker_told_it_is_shown_records_its_session_at_once(store):
    """For the app's switch (`open_session`): remembered before any quit, so a picochat
    killed later still reopens it."""
    from picochat.config import Config
    from picochat.models import resolve_model
    from picochat.providers.offline import OfflineProvider
    from picochat.session import SessionWorker

    one, two = store.create_session("one"), store.create_session("two")
    store.mark_opened(one.id)
    async with SessionWorker(store, two.id, resolve_model(Config(), "offline"),
                             OfflineProvider(0), "sys") as worker:
        await worker.opened()
    assert store.last_opened_session().id == two.id


async def test_a_database_that_cannot_record_it_still_shows_the_session(store, monkeypatch,
                                                                        caplog):
    from picochat.errors import StorageError
    from picochat.session import note_opened

    def refuse(_sid):
        raise StorageError("the database file is read-only")

    session = store.create_session("one")
    monkeypatch.setattr(store, "mark_opened", refuse)
    monkeypatch.setattr(logging.getLogger("picochat"), "propagate", True)  # a CLI test's setup
    with caplog.at_level(logging.WARNING, logger="picochat.session"):
        note_opened(store, session.id)  # no exception: only the next start's choice is affected
    assert "opened_not_recorded" in caplog.text and "read-only" not in caplog.text


# --- a clock stepped back (issue 31, item 13) --------------------------------------------------

YEAR_MS = 365 * 24 * 3600 * 1000


def stamp_in_the_future(home: Path, name: str) -> None:
    """As if `name` was last written while the clock ran a year ahead (it has been set back
    since): its stamp is a year from now."""
    import sqlite3
    import time

    conn = sqlite3.connect(home / "data" / "picochat.db", isolation_level=None)
    try:
        conn.execute("UPDATE sessions SET updated_at = ? WHERE name = ?",
                     (int(time.time() * 1000) + YEAR_MS, name))
    finally:
        conn.close()


def test_ask_without_session_goes_to_the_one_written_last_not_the_one_stamped_last(
        home, start_app, capsys):
    ask("--session", "ahead", "written while the clock ran a year ahead")
    stamp_in_the_future(home, "ahead")
    ask("--session", "today", "written after the clock was set back")
    ask("and this follows on")  # no --session: the session used last
    assert start_app() == "today"  # never opened in the app: the most recently active
    capsys.readouterr()
    assert main(["history", "--session", "today", "--json"]) == 0
    assert "and this follows on" in capsys.readouterr().out
    assert main(["sessions", "--json"]) == 0
    listed = capsys.readouterr().out
    assert listed.index('"today"') < listed.index('"ahead"')  # the list agrees with `ask`


def test_writes_to_a_session_stamped_in_the_future_bring_it_back_to_now(tmp_path: Path):
    clock = [10 * YEAR_MS]
    store = open_store(tmp_path / "p.db", clock=lambda: clock[0])
    try:
        ahead = store.create_session("ahead")
        append_message(store, ahead.id, "user", "x", turn_id="t1")
        clock[0] -= YEAR_MS  # the clock is set back a year
        today = store.create_session("today")
        assert store.latest_session().id == today.id
        for write in (lambda: append_message(store, ahead.id, "user", "y", turn_id="t2"),
                      lambda: store.clear_context(ahead.id)):
            append_message(store, today.id, "user", "z", turn_id="t3")
            assert store.latest_session().id == today.id
            write()
            assert store.latest_session().id == ahead.id  # it is the one written last now
            assert store.session(ahead.id).updated_at == clock[0]  # and no longer ahead
            clock[0] += 1
        assert [s.name for s in store.list_sessions()] == ["ahead", "today"]
    finally:
        store.close()


def test_a_database_from_before_keeps_its_most_recently_active_session(tmp_path: Path):
    """Schema 15 numbers the sessions there are by their stamps, so upgrading changes no
    choice; from then on writes decide."""
    import sqlite3

    from picochat.storage.schema import SCHEMA_VERSION
    from tests.helpers.storage import database_at

    path = tmp_path / "v14.db"
    conn = database_at(path, 14)
    conn.executemany("INSERT INTO sessions (id, name, created_at, updated_at) VALUES (?, ?, 1, ?)",
                     [("s_a", "a", 5), ("s_b", "b", 9), ("s_c", "c", 7), ("s_d", "d", 9)])
    conn.close()
    store = open_store(path)
    try:
        conn = sqlite3.connect(path, isolation_level=None)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        conn.close()
        assert [s.name for s in store.list_sessions()] == ["d", "b", "c", "a"]
        assert store.latest_session().name == "d"
        append_message(store, "s_a", "user", "back to a", turn_id="t1")
        assert store.latest_session().name == "a"
    finally:
        store.close()

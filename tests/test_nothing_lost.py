"""Nothing the user saw or typed is lost (issue 18, items 4 and 5):

  * the answer being streamed is saved as a draft about once a second, outside the append-only
    log, and the next start turns a killed process's draft into an interrupted answer;
  * SIGTERM and SIGHUP stop `ask` and the app as Ctrl-C and ctrl+q do: the partial answer
    saved (interrupted), queued messages saved (unsent), the exit status of the signal;
  * a database locked by another process never freezes the app, and a message that could not
    be saved says so and goes back to the prompt.

The signal series over many runs is in tests/reliability/test_signals.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from picochat.config import Config
from picochat.messages import INTERRUPTED, NewMessage
from picochat.models import resolve_model
from picochat.prepare import prepare
from picochat.projection import restore
from picochat.session import SessionWorker
from picochat.storage import open_store
from picochat.tui.chat import ChatView, Notice, UserMessage
from picochat.tui.prompt import Prompt
from tests.helpers.tui import SIZE, Slow, make_app, say
from tests.helpers.waiting import WAIT_S, read_until, settle, wait_until, wait_until_async
from tests.helpers.storage import append_message, dead_draft, dead_pid


# the offline model reflects the question: a long one streams for several seconds
LONG_QUESTION = "tell me about ports: " + " ".join(f"port{9000 + i}" for i in range(300))


def draft_rows(db: Path) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT turn_id, content, owner_pid FROM drafts").fetchall()
    finally:
        conn.close()


# --- drafts ---------------------------------------------------------------------------------


async def test_the_answer_being_streamed_is_saved_as_a_draft_and_gone_once_it_ends(store):
    session = store.create_session("d")
    pieces = [f"word{i} " for i in range(30)]
    more = asyncio.Event()  # the stream stays open after its 30th piece until this is set
    # the gap paces the pieces so that drafts are taken along the way (one a second at most)
    worker = SessionWorker(store, session.id, resolve_model(Config(), "offline"),
                           Slow(pieces, gap=0.05, hold=more), "sys")
    async with worker:
        handle = worker.submit_turn("tell me")
        seen: list[str] = []
        async for event in handle:
            if hasattr(event, "text"):
                seen.append(event.text)
            if len(seen) == 30 and not more.is_set():
                # the answer is still being streamed (held open); its draft is saved off the
                # loop, so it is waited for rather than expected by a given moment
                rows = await wait_until_async(lambda: draft_rows(store.path),
                                              what="no draft was saved while streaming")
                assert len(rows) == 1 and rows[0][0] == handle.turn_id
                assert rows[0][2] == os.getpid()
                # at most about a second behind what was shown, and never ahead of it
                assert "".join(seen).startswith(rows[0][1]) and rows[0][1]
                more.set()
        outcome = await handle.result()
    assert outcome.reply == "".join(pieces)
    assert draft_rows(store.path) == []
    assert [m.status for m in store.history(session.id)] == ["complete", "complete"]


async def test_a_dead_process_draft_becomes_an_interrupted_answer_at_the_next_start(store):
    session = store.create_session("d")
    user = append_message(store, session.id, "user", "what is the port?", turn_id="t_dead")
    dead_draft(store, session.id, "t_dead", "The port is 8443 and the host is")
    other = store.create_session("live")
    append_message(store, other.id, "user", "q", turn_id="t_live")
    # the first draft's writer died; the second's still runs (this very process)
    store.drafts.save(other.id, "t_live", "still streaming elsewhere")

    worker = SessionWorker(store, other.id, resolve_model(Config(), "offline"), Slow([]), "sys")
    async with worker:  # any session's worker recovers every orphan
        pass
    rows = store.history(session.id)
    assert [(m.role, m.content, m.status, m.turn_id) for m in rows[1:]] == [
        ("assistant", "The port is 8443 and the host is", INTERRUPTED, "t_dead")]
    assert rows[0].seq == user.seq
    assert [r[0] for r in draft_rows(store.path)] == ["t_live"]
    assert len(store.history(other.id)) == 1  # a live process's draft is not touched


def test_a_draft_recovered_by_two_processes_is_appended_once(tmp_path):
    db = tmp_path / "picochat.db"
    a, b = open_store(db), open_store(db)
    try:
        session = a.create_session("d")
        append_message(a, session.id, "user", "q", turn_id="t_x")
        a.drafts.save(session.id, "t_x", "half an answer")
        assert len(a.drafts.recover(prepare, alive=lambda pid, start: False)) == 1
        assert b.drafts.recover(prepare, alive=lambda pid, start: False) == []
        assert [m.content for m in b.history(session.id)] == ["q", "half an answer"]
    finally:
        a.close()
        b.close()


# --- a locked database in the app -------------------------------------------------------------


@pytest.fixture
def lock_store(tmp_path, monkeypatch):
    """A store whose writes wait 4 s for a lock (10 s in real use) before giving up: the
    tests act while a write waits, which the keys' witnesses prove, not a clock."""
    monkeypatch.setenv("PICOCHAT_BUSY_TIMEOUT_MS", "4000")
    store = open_store(tmp_path / "picochat.db")
    yield store
    store.close()


def locked_notices(app) -> list[str]:
    """The chat's notices that say the database was locked."""
    return [str(n.render()) for n in app.query_one(ChatView).query(Notice)
            if "locked" in str(n.render())]


@contextlib.contextmanager
def write_lock_held(db: Path):
    """Another picochat holding the database's write lock."""
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


@pytest.mark.slow
async def test_a_locked_database_never_freezes_the_app_and_an_unsaved_message_comes_back(
        lock_store):
    store, app = lock_store, make_app(lock_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        with write_lock_held(store.path):
            await say(pilot, "keep the port 8443 in mind")
            await settle(pilot, app, lambda: app.worker.busy)
            await pilot.press("a", "b", "c")
            # the keys got through while the write still waits for the lock: typed and shown
            # before the write gave up (a write on the loop would have held them until then)
            assert app.worker.busy and app.query_one(Prompt).text == "abc"
            assert not locked_notices(app)
            await settle(pilot, app, lambda: not app.worker.busy and locked_notices(app),
                         what="the message's write never gave up on the lock")
        notices = [str(n.render()) for n in app.query_one(ChatView).query(Notice)]
        assert any("locked" in n and "not saved: it is back in the prompt" in n
                   for n in notices), notices
        assert not any("your message is saved" in n for n in notices)
        assert app.query_one(Prompt).text == "keep the port 8443 in mind\nabc"
        assert not app.query_one(ChatView).query(UserMessage)  # the transcript = the db
        assert store.history(app.session.id) == []
        # once the lock is gone, sending it again saves it
        await pilot.press("enter")
        await settle(pilot, app, lambda: len(store.history(app.session.id)) == 2)
        assert store.history(app.session.id)[0].content == "keep the port 8443 in mind\nabc"


async def test_commands_that_write_wait_off_the_loop_and_say_the_database_was_locked(
        lock_store, monkeypatch):
    app = make_app(lock_store)
    rename, renaming = lock_store.rename_session, threading.Event()

    def watched_rename(*args, **kwargs):
        renaming.set()  # the command's write has begun: it now waits for the lock
        return rename(*args, **kwargs)
    monkeypatch.setattr(lock_store, "rename_session", watched_rename)

    def stayed_locked() -> bool:
        return any("stayed locked" in str(n.render())
                   for n in app.query_one(ChatView).query(Notice))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        with write_lock_held(lock_store.path):
            await say(pilot, "/rename ports")
            await settle(pilot, app, renaming.is_set, what="/rename never began its write")
            await pilot.press("x")
            # keys get through meanwhile: shown while the write still waits for the lock
            assert app.query_one(Prompt).text == "x" and not stayed_locked()
            await settle(pilot, app, stayed_locked,
                         what="/rename never said the database stayed locked")
        assert app.is_running and app.session.name == "t"
        await say(pilot, "/rename ports")
        await settle(pilot, app, lambda: app.session.name == "ports")


# --- signals: one run each (the series is in tests/reliability/test_signals.py) ------------------


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_ask_stopped_by_a_signal_saves_what_was_shown(home, signum):
    # a second before each of the answer's 74 pieces: once two are shown the rest needs over
    # 70 s, so the answer cannot end before the signal arrives, however busy the machine
    env = dict(os.environ, PICOCHAT_OFFLINE_DELAY_MS="1000")
    proc = subprocess.Popen([sys.executable, "-m", "picochat", "ask", LONG_QUESTION],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        shown = read_until(proc.stdout, "I'm picochat's")  # the answer has begun
        proc.send_signal(signum)
        rest, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    shown += rest.decode()
    assert shown.endswith("\n")  # the stderr line does not stick to the answer on a terminal
    assert proc.returncode == 128 + signum
    assert f"stopped by signal {int(signum)}" in err.decode()
    assert "Traceback" not in err.decode()
    store = open_store(home / "data" / "picochat.db")
    try:
        rows = store.history(store.latest_session().id)
    finally:
        store.close()
    assert [(m.role, m.status) for m in rows] == [("user", "complete"),
                                                 ("assistant", INTERRUPTED)]
    assert rows[1].content.startswith(shown.rstrip("\n")) and shown.strip()


@pytest.mark.slow
def test_ask_killed_mid_answer_loses_at_most_the_last_moments(home, run_cli):
    # 250 ms before each of the answer's 74 pieces: the whole answer takes over 18 s, and the
    # kill comes about 4 s in, once drafts have been saved along the way (one a second)
    env = dict(os.environ, PICOCHAT_OFFLINE_DELAY_MS="250")
    proc = subprocess.Popen([sys.executable, "-m", "picochat", "ask", LONG_QUESTION],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    db = home / "data" / "picochat.db"

    def long_draft() -> bool:
        assert proc.poll() is None, "the answer ended before the kill"
        return any(len(content) >= 120 for _, content, _ in draft_rows(db))
    try:
        shown = read_until(proc.stdout, "I'm ")  # the answer has begun (and its database is)
        wait_until(long_draft, what="no draft of 120 characters was saved mid-answer")
        proc.kill()
        rest, _ = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    shown += rest.decode()
    nxt = run_cli("ask", "next question")  # the next start recovers the draft, and says so
    assert nxt.status == 0
    assert "an answer cut off when picochat stopped is saved as interrupted (message #2)" \
        in nxt.stderr
    store = open_store(home / "data" / "picochat.db")
    try:
        rows = store.history(store.latest_session().id)
    finally:
        store.close()
    assert [(m.role, m.status) for m in rows[:2]] == [("user", "complete"),
                                                     ("assistant", INTERRUPTED)]
    recovered = rows[1].content
    assert shown.startswith(recovered) and recovered
    # a draft is saved about once a second: what was shown after it is a second or two of text
    assert len(shown) - len(recovered) < len(shown) / 2
    assert rows[1].turn_id == rows[0].turn_id


# --- stops that land at awkward moments (found in review) ---------------------------------------


@pytest.mark.parametrize("which", ["user", "assistant"])
async def test_a_stop_just_after_a_write_committed_keeps_that_row_once(store, which):
    """The stop key is handled in the loop iteration right after the commit, before the turn
    resumes: the row stands, is not written again, and the turn still ends in an outcome."""
    session = store.create_session("x")
    worker = SessionWorker(store, session.id, resolve_model(Config(), "offline"),
                           Slow(["hello ", "world"], gap=0.01), "sys")
    io = store.io

    async def stop_after(fn, *args, **kwargs):
        result = await io(fn, *args, **kwargs)
        news = [a for a in args if isinstance(a, NewMessage)]  # `append_new`'s messages
        if [(m.role, m.status) for m in news] == [(which, "complete")]:
            asyncio.get_running_loop().call_soon(handle.cancel)
        return result
    store.io = stop_after  # type: ignore[method-assign]
    await worker.start()
    handle = worker.submit_turn("hi")
    try:
        outcome = await asyncio.wait_for(handle.result(), WAIT_S)
    finally:
        await asyncio.wait_for(worker.close(), WAIT_S)
    rows = [(m.role, m.status, m.content) for m in store.history(session.id)]
    if which == "user":
        assert rows == [("user", "complete", "hi")] and outcome.user_seq == 1
    else:
        assert rows == [("user", "complete", "hi"), ("assistant", "complete", "hello world")]


async def test_two_stops_while_a_draft_waits_for_a_lock_still_end_the_turn(store, monkeypatch):
    """Esc then ctrl+q (or SIGTERM then SIGHUP) while the draft's save waits on another
    process's lock: the turn ends, its partial saved once, and the worker closes."""
    session = store.create_session("x")
    save = store.drafts.save
    saving, unlocked = threading.Event(), threading.Event()

    def slow_save(*args):
        saving.set()
        unlocked.wait(WAIT_S)  # as if another picochat held the write lock until both stops
        save(*args)
    monkeypatch.setattr(store.drafts, "save", slow_save)

    class Stoppable(Slow):
        stopped = False

        async def stream(self, request):
            try:
                async for event in super().stream(request):
                    yield event
            except asyncio.CancelledError:
                self.stopped = True  # the first stop reached the running turn
                raise
    provider = Stoppable([f"w{i} " for i in range(50)], gap=0.02)  # the gap only paces
    worker = SessionWorker(store, session.id, resolve_model(Config(), "offline"), provider,
                           "sys")
    await worker.start()
    handle = worker.submit_turn("go")

    async def stop_twice() -> None:
        seen = 0
        async for event in handle:
            seen += hasattr(event, "text")
            if seen == 5:
                await wait_until_async(saving.is_set, what="no draft save began")
                handle.cancel()
                await wait_until_async(lambda: provider.stopped,
                                       what="the first stop never reached the stream")
                handle.cancel()  # the second stop, while the draft's save still waits
                await asyncio.sleep(0)  # the second stop is delivered before the save ends
                unlocked.set()
                return
    try:
        await asyncio.wait_for(stop_twice(), WAIT_S)
        outcome = await asyncio.wait_for(handle.result(), WAIT_S)
    finally:
        unlocked.set()
        await asyncio.wait_for(worker.close(), WAIT_S)
    assert outcome.cancelled
    rows = store.history(session.id)
    assert [(m.role, m.status) for m in rows] == [("user", "complete"),
                                                 ("assistant", INTERRUPTED)]
    assert rows[1].content.startswith("w0 w1 w2 w3 w4")
    assert draft_rows(store.path) == []


def test_a_reused_pid_or_a_zombie_does_not_keep_a_draft_from_recovery(tmp_path):
    from picochat.storage.drafts import process_alive, process_start

    me = os.getpid()
    assert process_alive(me, process_start(me))
    assert not process_alive(me, (process_start(me) or 0) + 1)  # same pid, a later process
    assert not process_alive(dead_pid(), None)
    zombie = subprocess.Popen(["true"])
    try:
        wait_until(lambda: Path(f"/proc/{zombie.pid}/stat").read_text().split(") ")[1][0]
                   == "Z", what="`true` never ended")
        assert not process_alive(zombie.pid, None)  # ended, not yet reaped
    finally:
        zombie.wait()


async def test_the_app_opens_with_a_killed_answer_recovered_and_says_so(store):
    session = store.create_session("t")
    append_message(store, session.id, "user", "what is the port?", turn_id="t_dead")
    dead_draft(store, session.id, "t_dead", "The port is 8443")
    app = make_app(store)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot, app, lambda: app.ready)

        def told() -> bool:
            return any("cut off when picochat stopped" in str(n.message)
                       for n in app._notifications)
        await settle(pilot, app, told, what="the recovered answer was never told")
        notes = [str(n.message) for n in app._notifications]
        assert any("cut off when picochat stopped is saved as interrupted (message #2)" in n
                   for n in notes), notes
        assert "The port is 8443" in "".join(
            w.source for w in app.query_one(ChatView).query("AssistantMessage"))


async def test_quitting_while_another_picochat_holds_the_lock_keeps_every_message(
        tmp_path, monkeypatch):
    """SIGTERM or ctrl+q while another process holds the write lock: the app waited 10 s per
    pending write and lost the queued messages without a word. The whole wait is now bounded,
    what could not be saved goes to a private file and the way out says so, and the next
    start puts it back in the prompt."""
    import stat
    import time

    from picochat.paths import resolve_paths
    from picochat.tui.app import SHUTDOWN_WAIT_S, PicochatApp
    from picochat.unsent import unsent_file
    from tests.helpers.tui import SMALL_KEEP

    monkeypatch.setenv("PICOCHAT_BUSY_TIMEOUT_MS", "120000")  # the lock outlasts any wait
    paths = resolve_paths(str(tmp_path / "data"), str(tmp_path / "cfg" / "config.toml"))
    store = open_store(paths.database)
    session = store.create_session("t")
    model = resolve_model(SMALL_KEEP, "offline")
    hold = asyncio.Event()
    app = PicochatApp(store, session, model, Slow(["part"], gap=0, hold=hold), SMALL_KEEP,
                      paths)
    blocker = sqlite3.connect(store.path, isolation_level=None)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app, lambda: app.ready)
            await say(pilot, "first question")
            await settle(pilot, app, lambda: app.worker.busy and store.history(session.id))
            # the answer has begun (its first draft is saved as its first piece arrives)
            await settle(pilot, app, lambda: [r[1] for r in draft_rows(store.path)] == ["part"])
            await say(pilot, "second: keep port 8443")
            await say(pilot, "third: and the host kv-7")
            await settle(pilot, app, lambda: app.worker.queued == 2)
            blocker.execute("BEGIN IMMEDIATE")  # another picochat holds the lock for good
            began = time.monotonic()
            app.exit()
        took = time.monotonic() - began
    finally:
        if blocker.in_transaction:
            blocker.execute("ROLLBACK")
        blocker.close()
    # bounded by the shutdown's wait, not by the 120 s busy timeout (a wide margin: no race)
    assert took < 60, took
    assert SHUTDOWN_WAIT_S < 60
    note = app.exit_note or ""
    assert ("2 messages you sent and the answer being written could not be saved" in note
            and str(unsent_file(paths.data_dir)) in note), note
    kept = unsent_file(paths.data_dir)
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert [m.content for m in store.history(session.id)] == ["first question"]

    # the next start: both are back in the prompt, oldest first, the answer streamed at the
    # quit is saved as its turn's interrupted answer, and the file is gone
    app = PicochatApp(store, store.find_session("t"), model, Slow(["ok"], gap=0), SMALL_KEEP,
                      paths)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready and app.query_one(Prompt).text)
        assert app.query_one(Prompt).text == ("second: keep port 8443\n\n"
                                              "third: and the host kv-7")
        assert any("back in the prompt" in str(n.message) for n in app._notifications)
    assert [(m.content, m.status) for m in store.history(session.id)] == [
        ("first question", "complete"), ("part", "interrupted")]
    assert not kept.exists()
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM])
def test_an_app_hung_in_its_shutdown_still_ends_soon_after_a_quit_signal(home, tmp_path,
                                                                         signum):
    """Once, closing the terminal left the app hung for good (Textual's writer thread blocked
    on a full queue). Here the shutdown hangs on purpose (a test-only pause point): the
    process still ends, with the signal's status, moments after the signal."""
    from tests.helpers.terminal import Terminal

    marker = tmp_path / "hung"
    term = Terminal(dict(os.environ, TERM="xterm-256color", PICOCHAT_CRASH_POINT="quitting",
                         PICOCHAT_CRASH_FILE=str(marker)))
    try:
        term.wait_for("offline")
    except BaseException:
        term.proc.kill()
        raise
    term.proc.send_signal(signum)
    code = term.finish()  # a process that never ends fails here, after WAIT_S
    assert marker.exists(), "the shutdown never reached the pause point"
    assert code == 128 + signum


# --- drafts belong to their turn (issue 31, item 11) ----------------------------------------


async def recover(store, sid):
    worker = SessionWorker(store, sid, resolve_model(Config(), "offline"), Slow([]), "sys")
    async with worker:
        return worker.recovered_notes()


async def test_a_draft_recovered_after_a_newer_turn_is_kept_but_never_sent_as_its_answer(store):
    """A killed answer recovered after another process began a newer turn used to land after
    that turn's question, and the model read it as the answer to the newer question."""
    s = store.create_session("late")
    append_message(store, s.id, "user", "what is the staging port?", turn_id="t_old")
    dead_draft(store, s.id, "t_old", "The staging port is 8443")
    append_message(store, s.id, "user", "and who owns the release?", turn_id="t_new")
    notes = await recover(store, s.id)
    rows = store.history(s.id)
    late = rows[-1]
    assert (late.role, late.content, late.status, late.turn_id) == (
        "assistant", "The staging port is 8443", INTERRUPTED, "t_old")  # kept in the log
    context = [m.content for m in restore(store, s.id).raw]
    assert context == ["what is the staging port?", "and who owns the release?"]
    assert len(notes) == 1 and "kept out of the context" in notes[0]


async def test_a_draft_from_before_a_clear_stays_out_of_the_cleared_context(store):
    s = store.create_session("cleared")
    append_message(store, s.id, "user", "what is the staging port?", turn_id="t_old")
    dead_draft(store, s.id, "t_old", "The staging port is 8443")
    store.clear_context(s.id)
    await recover(store, s.id)
    assert store.history(s.id)[-1].content == "The staging port is 8443"
    assert restore(store, s.id).raw == ()  # the clear holds


async def test_a_draft_of_the_latest_turn_is_recovered_into_the_context(store):
    s = store.create_session("in place")
    append_message(store, s.id, "user", "what is the staging port?", turn_id="t_old")
    dead_draft(store, s.id, "t_old", "The staging port is 8443")
    notes = await recover(store, s.id)
    assert [m.content for m in restore(store, s.id).raw] == [
        "what is the staging port?", "The staging port is 8443"]
    assert "kept out of the context" not in notes[0]


def test_a_live_writer_in_another_pid_namespace_keeps_its_draft(tmp_path):
    """A process in a container shares the data folder, not the pid: its pid here may be
    anyone's, or no one's. The lock it holds tells it alive; its draft is left alone, and
    recovered once it has ended."""
    db = tmp_path / "picochat.db"
    store = open_store(db)
    sid = store.create_session("c").id
    append_message(store, sid, "user", "q", turn_id="t_c")
    store.close()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys\nfrom pathlib import Path\nfrom picochat.storage import open_store\n"
        f"s = open_store(Path({str(db)!r}))\n"
        f"s.drafts.save({sid!r}, 't_c', 'half an answer')\n"
        "print('saved', flush=True)\nsys.stdin.read()\n")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "saved"
        conn = sqlite3.connect(db)
        with conn:  # as seen from another pid namespace: the pid names a process long gone
            conn.execute("UPDATE drafts SET owner_pid = ?", (dead_pid(),))
        conn.close()
        store = open_store(db)
        assert store.drafts.recover(prepare) == []  # alive: left alone
        assert len(draft_rows(db)) == 1
        holder.stdin.close()
        holder.wait(timeout=WAIT_S)
        assert [m.content for m in store.drafts.recover(prepare)] == ["half an answer"]
        store.close()
    finally:
        if holder.poll() is None:
            holder.kill()


# --- the open app and other writers (issue 31, item 13) -------------------------------------


async def test_a_turn_another_picochat_writes_shows_in_the_open_app(store):
    """A concurrent `ask` on the open session: the transcript and the bar follow (the bar
    once said 1,412 while /info said 4,334)."""
    from picochat.tui.chat import AssistantMessage

    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        before = app._bar.used
        other = open_store(store.path)  # another process's connection
        try:
            append_message(other, app.session.id, "user", "the canary host is kv-7 " * 40,
                           turn_id="t_other")
            append_message(other, app.session.id, "assistant", "noted: kv-7", turn_id="t_other")
        finally:
            other.close()
        await settle(pilot, app, lambda: "noted: kv-7" in [
            m.text for m in app.query_one(ChatView).query(AssistantMessage)],
                     what="the other process's turn never showed")
        assert app._bar.used > (before or 0)


async def test_a_database_deleted_under_the_app_is_said_and_nothing_more_is_sent(store):
    app = make_app(store)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot, app, lambda: app.ready)
        os.replace(store.path, store.path.with_name("moved.db"))
        await settle(pilot, app, lambda: app.database_gone)
        assert any("deleted or replaced" in str(n.message) for n in app._notifications)
        await say(pilot, "keep port 8443")
        await settle(pilot, app, lambda: app.query_one(Prompt).text == "keep port 8443")
        assert any("Not sent" in str(n.render()) for n in app.query_one(ChatView).query(Notice))
        assert not app.worker.busy


async def test_a_refresh_after_another_writer_keeps_the_notice_just_said(store):
    """Found by the suite itself: the refresh after another picochat wrote rebuilt the
    transcript and wiped the line the reader had just been given ("Took back …")."""
    from tests.helpers.tui import texts

    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "hello")
        await settle(pilot, app, lambda: store.history(app.session.id)
                     and not app.worker.busy and not app.state)
        await app.query_one(ChatView).add_notice("Took back your last turn", "info")
        other = open_store(store.path)
        try:
            append_message(other, app.session.id, "user", "from elsewhere", turn_id="t_x")
        finally:
            other.close()
        await app.reload(from_elsewhere=True)
        assert texts(app, Notice)[-1] == "Took back your last turn"
        assert "from elsewhere" in texts(app, UserMessage)


class TwoParts(Slow):
    """Streams "before the lock, ", waits for `go`, streams "after it", then holds: the
    answer's end arrives while another process holds the lock, so no draft has it."""

    def __init__(self, go: asyncio.Event, hold: asyncio.Event):
        super().__init__([], gap=0, hold=hold)
        self.go = go

    async def stream(self, request):
        from picochat.providers.base import TextDelta

        yield TextDelta("before the lock, ")
        await self.go.wait()
        yield TextDelta("after it")
        await self.hold.wait()


async def test_the_answer_streamed_under_the_lock_at_quit_is_saved_whole_at_the_next_start(
        tmp_path, monkeypatch):
    """The answer streaming when the app quits under another process's lock could not be
    written; its draft held only what came before the lock. It is kept beside the database
    with the unsent messages, and the next start saves it, all of it, as its turn's
    interrupted answer."""
    from picochat.paths import resolve_paths
    from picochat.tui.app import PicochatApp
    from picochat.tui.chat import AssistantMessage
    from picochat.unsent import unsent_file
    from tests.helpers.tui import SMALL_KEEP

    monkeypatch.setenv("PICOCHAT_BUSY_TIMEOUT_MS", "120000")
    paths = resolve_paths(str(tmp_path / "data"), str(tmp_path / "cfg" / "config.toml"))
    store = open_store(paths.database)
    session = store.create_session("t")
    model = resolve_model(SMALL_KEEP, "offline")
    go, hold = asyncio.Event(), asyncio.Event()
    app = PicochatApp(store, session, model, TwoParts(go, hold), SMALL_KEEP, paths)
    blocker = sqlite3.connect(store.path, isolation_level=None)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app, lambda: app.ready)
            await say(pilot, "what is the port?")
            await settle(pilot, app, lambda: [r[1] for r in draft_rows(store.path)]
                         == ["before the lock, "], what="the first draft was never saved")
            blocker.execute("BEGIN IMMEDIATE")
            go.set()
            await settle(pilot, app, lambda: "after it" in "".join(
                a.text for a in app.query_one(ChatView).query(AssistantMessage)))
            app.exit()
    finally:
        if blocker.in_transaction:
            blocker.execute("ROLLBACK")
        blocker.close()
    assert "the answer being written could not be saved" in (app.exit_note or "")
    assert "you sent" not in (app.exit_note or "")  # the question was saved before the lock
    assert unsent_file(paths.data_dir).exists()

    worker = await SessionWorker(store, session.id, resolve_model(Config(), "offline"),
                                 Slow([]), "sys").start()
    try:
        assert [(m.content, m.status) for m in store.history(session.id)] == [
            ("what is the port?", "complete"), ("before the lock, after it", INTERRUPTED)]
        assert worker.recovered_notes() == [
            "an answer cut off when picochat stopped is saved as interrupted (message #2)"]
        assert draft_rows(store.path) == []
        assert not unsent_file(paths.data_dir).exists()
    finally:
        await worker.close()
        store.close()


def test_a_kept_answer_gives_way_to_one_already_saved_and_keeps_to_its_turns_place(tmp_path):
    """`recover_answer` writes a turn's answer once: not when another process already saved
    one for that turn, nor for a session gone; after a newer turn it stays out of the context
    (the rule drafts follow); a turn's tool-call rows do not count as its answer."""
    store = open_store(tmp_path / "p.db")
    try:
        s = store.create_session("s")
        append_message(store, s.id, "user", "q1", turn_id="t1")
        append_message(store, s.id, "assistant", "a1 saved", turn_id="t1", status=INTERRUPTED)
        assert store.drafts.recover_answer(s.id, "t1", "a1 saved and more", prepare) == []
        append_message(store, s.id, "user", "q2", turn_id="t2")
        append_message(store, s.id, "assistant", "", turn_id="t2", tool_calls=[{
            "id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}}])
        append_message(store, s.id, "tool", "12:00", turn_id="t2", tool_call_id="c1",
                       name="now", tool_status="ok")
        [answer] = store.drafts.recover_answer(s.id, "t2", "it is noon", prepare)
        assert (answer.content, answer.status, answer.retracted) == (
            "it is noon", INTERRUPTED, False)
        append_message(store, s.id, "user", "q3", turn_id="t3")
        append_message(store, s.id, "user", "q4", turn_id="t4")
        [late] = store.drafts.recover_answer(s.id, "t3", "answer to q3", prepare)
        assert late.retracted  # in the log, never read as the answer to q4
        assert store.drafts.recover_answer("s_gone", "t9", "x", prepare) == []
        assert store.drafts.recover_answer(s.id, "t_made_up", "an answer to nothing",
                                           prepare) == []
        assert draft_rows(store.path) == []
    finally:
        store.close()


def test_an_unsent_file_far_larger_than_a_quit_writes_is_left_alone(tmp_path, monkeypatch):
    """A 120 MB unsent.json (not of picochat's making) took 3 GB and 42 s to load: past its
    bound the file is neither loaded nor removed."""
    import json

    from picochat import unsent

    monkeypatch.setattr(unsent, "MAX_FILE_BYTES", 4096)
    path = unsent.unsent_file(tmp_path)
    big = [{"session_id": "s", "turn_id": f"t{i}", "text": "x" * 100} for i in range(60)]
    path.write_text(json.dumps({"version": 1, "messages": big}), encoding="utf-8")
    assert unsent.take(tmp_path, "s") == [] and unsent.kept_answers(tmp_path) == []
    assert path.exists()
    small = {"version": 1, "messages": big[:2]}
    path.write_text(json.dumps(small), encoding="utf-8")
    assert [m.turn_id for m in unsent.take(tmp_path, "s")] == ["t0", "t1"]
    assert not path.exists()


async def test_what_the_prompt_holds_at_a_quit_comes_back_at_the_next_open(tmp_path):
    """Messages put back in the prompt by an open (unsent at the last quit) were lost if the
    user quit again without sending them: the file was gone, the words only on screen. What
    the prompt holds at any quit is now kept, and comes back."""
    from picochat.paths import resolve_paths
    from picochat.tui.app import PicochatApp
    from picochat.unsent import Unsent, keep, unsent_file
    from tests.helpers.tui import SMALL_KEEP

    paths = resolve_paths(str(tmp_path / "data"), str(tmp_path / "cfg" / "config.toml"))
    store = open_store(paths.database)
    session = store.create_session("t")
    model = resolve_model(SMALL_KEEP, "offline")
    keep(paths.data_dir, [Unsent(session.id, "t_1", "port 8443 for the canary")])
    try:
        for _ in range(2):  # opened, nothing sent, quit: twice over
            app = PicochatApp(store, store.find_session("t"), model, Slow(["ok"], gap=0),
                              SMALL_KEEP, paths)
            async with app.run_test(size=SIZE) as pilot:
                await settle(pilot, app, lambda: app.ready and app.query_one(Prompt).text)
                assert app.query_one(Prompt).text == "port 8443 for the canary"
                app.exit()
            assert app.exit_note == (f"what you were typing is kept in "
                                     f"{unsent_file(paths.data_dir)}; it comes back in the "
                                     "prompt when this session is opened again")
        app = PicochatApp(store, store.find_session("t"), model, Slow(["ok"], gap=0),
                          SMALL_KEEP, paths)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app, lambda: app.ready and app.query_one(Prompt).text)
            assert any("what you were typing when picochat last quit is back in the prompt"
                       in str(n.message) for n in app._notifications)
            app.query_one(Prompt).clear()  # the user lets it go: nothing is kept
            app.exit()
        assert app.exit_note is None and not unsent_file(paths.data_dir).exists()
        assert store.history(session.id) == []  # nothing was sent meanwhile
    finally:
        store.close()


async def test_a_kept_answer_stays_in_the_file_until_it_is_written(tmp_path, monkeypatch):
    """A start that cannot write the kept answer (the database locked by another picochat)
    leaves it in the file; the next start writes it, once, and removes it."""
    from picochat.unsent import Unsent, keep, kept_answers

    monkeypatch.setenv("PICOCHAT_BUSY_TIMEOUT_MS", "200")
    store = open_store(tmp_path / "picochat.db")
    session = store.create_session("s")
    append_message(store, session.id, "user", "the port?", turn_id="t1")
    answer = Unsent(session.id, "t1", "it is 8443", role="assistant")
    keep(tmp_path, [answer])
    blocker = sqlite3.connect(store.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        worker = await SessionWorker(store, session.id, resolve_model(Config(), "offline"),
                                     Slow([]), "sys").start()
        await worker.close()
        assert kept_answers(tmp_path) == [answer]
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    for _ in range(2):  # the second start finds nothing more to do
        worker = await SessionWorker(store, session.id, resolve_model(Config(), "offline"),
                                     Slow([]), "sys").start()
        await worker.close()
    assert [(m.content, m.status) for m in store.history(session.id)] == [
        ("the port?", "complete"), ("it is 8443", INTERRUPTED)]
    assert kept_answers(tmp_path) == []
    store.close()

"""Two real `picochat` processes on one session at once (issue 7): `ask` against `ask`, `ask`
against a slow `compact` (its summary held open by the fake server), `clear` and
`compact --undo` during a slow summary, and a write lock held by another connection. After each
race the database is read directly: seq 1, 2, 3… with no gap, every message stored once, a
checkpoint that covers only what its snapshot held, and every failure one `picochat:` line with
a documented exit status. `pytest -m reliability tests/reliability/test_races.py -s` prints the
figures.

Only the process whose summary or answer must be held talks to the fake server; the others use
the built-in offline model under a [models] key with the same window (`PICOCHAT_MODEL=off`), so
the run does not pay litellm's import in every process."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from picochat.messages import NewCheckpoint
from picochat.projection import restore
from picochat.storage import open_store
from tests.helpers.cli import NOISE, CliResult, assert_clean_failure
from tests.helpers.config import ENV, write_config
from tests.helpers.fakes.openai import FakeOpenAI, record_seqs, summary_text
from tests.helpers.waiting import WAIT_S, wait_until
from tests.helpers.storage import append_message

pytestmark = pytest.mark.reliability

ASK_PAIRS = 12          # rounds of two `ask` started together on one session
COMPACT_ROUNDS = 2      # rounds of an `ask` landing while a `compact` waits for its summary
OFF = {**ENV, "PICOCHAT_MODEL": "off"}  # the offline model, window 8192 like the fake's
# how long a process that talks to the fake may take to send its request: it imports litellm
# first, which alone took ~50 s on a busy 2-core machine (a failure bound, not a guess)
LITELLM_START_S = 3 * WAIT_S
LOCKED = "the database stayed locked by another picochat"
BAD = ("Traceback", "database is locked", "internal error")
CONFIG = """
[models.off]
model = "offline"
token_limit = 8192
[context_compaction]
keep_recent_tokens = 200
[tools]
enabled = []
"""


# --- helpers -------------------------------------------------------------------------------------


def spawn(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    full = {**os.environ, **ENV, **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "picochat", *args], env=full, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen, timeout: float = 90) -> CliResult:
    out, err = proc.communicate(timeout=timeout)
    return CliResult(proc.returncode, out, err)


def clean(result: CliResult) -> None:
    """No traceback, no raw sqlite error, no litellm noise; a failure is one `picochat:` line."""
    for word in (*BAD, *NOISE):
        assert word not in result.stdout and word not in result.stderr, (word, result)
    if result.status:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert result.stderr.startswith("picochat: "), result.stderr


def _query(db: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def messages(db: Path) -> list[tuple]:
    """(seq, role, content, status, turn_id) of every message, after an integrity check."""
    assert _query(db, "PRAGMA integrity_check") == [("ok",)]
    return _query(db, "SELECT seq, role, content, status, turn_id FROM messages ORDER BY seq")


def session_state(db: Path) -> tuple:
    """(active checkpoint id, generation, context floor seq) of session "s"."""
    return _query(db, "SELECT active_context_checkpoint_id, context_generation, "
                      "context_floor_seq FROM sessions WHERE name = 's'")[0]


def checkpoints(db: Path) -> list[tuple]:
    """(id, parent, first_retained_seq, source_max_seq) of every checkpoint, oldest first."""
    return _query(db, "SELECT id, parent_checkpoint_id, first_retained_seq, source_max_seq "
                      "FROM context_checkpoints ORDER BY generation")


def assert_seqs_dense(rows: list[tuple]) -> None:
    seqs = [r[0] for r in rows]
    assert seqs == list(range(1, len(seqs) + 1)), f"seq must run 1, 2, 3… with no gap: {seqs}"


def seed(db: Path, turns: int, words: int = 12, start: int = 0) -> str:
    """Answered turns in session "s" (created if need be), through the storage API."""
    store = open_store(db)
    try:
        found = store.find_session("s")
        sid = found.id if found else store.create_session("s").id
        for i in range(start, start + turns):
            filler = " ".join(f"w{i}x{j}" for j in range(words))
            append_message(store, sid, "user", f"seed question {i}: {filler}", turn_id=f"t_s{i}")
            append_message(store, sid, "assistant", f"seed answer {i}: {filler}",
                           turn_id=f"t_s{i}")
        return sid
    finally:
        store.close()


def projection(db: Path):
    store = open_store(db)
    try:
        return restore(store, store.require_session("s").id)
    finally:
        store.close()


def log_text(home: Path) -> str:
    log = home / "data" / "picochat.log"
    return log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""


def hold_write_lock(db: Path, release: threading.Event) -> threading.Thread:
    """Another connection in BEGIN IMMEDIATE until `release` is set, as another picochat in
    the middle of a write would be (a thread of this test process)."""
    ready = threading.Event()

    def run() -> None:
        conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("BEGIN IMMEDIATE")
            ready.set()
            release.wait(WAIT_S)
            conn.execute("ROLLBACK")
        finally:
            conn.close()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(WAIT_S)
    return thread


def _sleeping_in_sqlite(pid: int) -> bool | None:
    """Whether a thread of process `pid` sleeps in SQLite's busy handler (a nanosleep: nothing
    else in picochat sleeps so), from Linux's /proc; None when this kernel does not name the
    wait (wchan "0")."""
    named = False
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            wchan = Path(f"/proc/{pid}/task/{task}/wchan").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        if wchan not in ("", "0"):
            named = True
        if "nanosleep" in wchan:
            return True
    return False if named else None


def wait_for_lock_waiters(procs: list[subprocess.Popen], db: Path) -> None:
    """Block until every process in `procs` has the database open (its writer and its reader)
    and waits in SQLite's busy handler for the held write lock: a write of its queued behind
    it. Where the kernel does not name a sleeping thread's wait, a fixed pause stands in."""
    def waiting(proc: subprocess.Popen) -> bool:
        assert proc.poll() is None, "a process ended before it waited for the lock"
        try:
            fds = os.listdir(f"/proc/{proc.pid}/fd")
            opened = [os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in fds]
            sleeping = _sleeping_in_sqlite(proc.pid)
        except OSError:  # a file descriptor closed between the listing and the look
            return False
        if sleeping is None:
            raise _NoWchan
        return opened.count(str(db)) >= 2 and sleeping
    try:
        wait_until(lambda: all(waiting(p) for p in procs), what="no write waited for the lock")
    except _NoWchan:
        time.sleep(4)  # no event to wait on here: enough for Python to start, and queue


class _NoWchan(Exception):
    """This kernel does not say where a thread sleeps."""


@pytest.fixture
def db(home: Path) -> Path:
    return home / "data" / "picochat.db"


@pytest.fixture
def fake(fake_openai: FakeOpenAI, config_file: Path) -> FakeOpenAI:
    write_config(config_file, fake_openai.base_url, CONFIG)
    return fake_openai


# --- 1. ask against ask --------------------------------------------------------------------------


def test_two_asks_at_once_store_both_turns_in_order_and_each_answers_its_own(
        home, db, fake, run_cli):
    """Both exit 0: an append takes its seq inside its write transaction (DESIGN.md D12.2), so two
    turns on one session are both stored, and each reply answers its own question (the
    offline model quotes the last message of the request it got)."""
    slow = {**OFF, "PICOCHAT_OFFLINE_DELAY_MS": "3"}  # answers stream a while: the pairs overlap
    assert run_cli("ask", "--session", "s", "first question", env=slow).status == 0
    rng = random.Random(7)
    figures = {"pairs": 0, "asks": 0, "interleaved": 0}
    for n in range(ASK_PAIRS):
        texts = [f"pair {n} from terminal A: host a-{n}", f"pair {n} from terminal B: host b-{n}"]
        first = spawn("ask", "--session", "s", texts[0], env=slow)
        time.sleep(rng.uniform(0, 0.2))  # a random head start, on purpose: not a wait
        second = spawn("ask", "--session", "s", texts[1], env=slow)
        for text, result in zip(texts, [finish(first), finish(second)]):
            clean(result)
            assert result.status == 0, result.stderr
            assert f"> {text}" in result.stdout, "a reply must answer its own question"
        figures["pairs"] += 1
        figures["asks"] += 2
        rows = messages(db)
        assert_seqs_dense(rows)
        users = [r for r in rows if r[1] == "user" and r[2] in texts]
        assert sorted(r[2] for r in users) == sorted(texts), "each question stored exactly once"
        for user in users:
            answers = [r for r in rows if r[4] == user[4] and r[1] == "assistant"]
            assert len(answers) == 1 and answers[0][3] == "complete", answers
            assert answers[0][0] > user[0]
        turns = [r[4] for r in rows if r[4] in {u[4] for u in users}]
        figures["interleaved"] += turns[0] != turns[1]  # both questions stored before an answer
    assert len(messages(db)) == 2 + 4 * ASK_PAIRS
    log = log_text(home)
    assert not any(f"host {w}-{n}" in log for n in range(ASK_PAIRS) for w in "ab")
    print(f"\nask-vs-ask figures: {figures}")


def test_two_first_asks_on_a_new_session_name_both_succeed(db, fake):
    """Made deterministic: a held lock lets both asks look the name up (a read) and queue at
    the create (a write) before either can create it."""
    open_store(db).close()
    release = threading.Event()
    holder = hold_write_lock(db, release)
    patient = {**OFF, "PICOCHAT_BUSY_TIMEOUT_MS": str(int(WAIT_S * 1000))}  # however slow
    procs = [spawn("ask", "--session", "new", f"hello from {who}", env=patient) for who in "ab"]
    wait_for_lock_waiters(procs, db)  # both looked the name up and queue at the create
    release.set()
    holder.join()
    results = [finish(p) for p in procs]
    for result in results:
        clean(result)
    print(f"\nfresh-session race: exit statuses {[r.status for r in results]}")
    assert [r.status for r in results] == [0, 0], [r.stderr for r in results]


def test_an_ask_whose_auto_compaction_is_slow_still_answers_its_own_question(db, fake, run_cli):
    """A's auto compaction waits for its summary; B asks meanwhile, compacts (offline summary)
    and is answered. A's late candidate is refused (the generation moved) and A says so in one
    line, and A's request still ends with A's question, not with B's turn."""
    seed(db, 10, words=56)  # over the 4,096-token threshold: each ask compacts first
    hold = threading.Event()
    fake.script_summary(("delay", hold))
    a_text, b_text = "question A: which port?", "question B: which host?"
    a = spawn("ask", "--session", "s", a_text)
    assert fake.wait_for(1, "summary", timeout=LITELLM_START_S)
    b = run_cli("ask", "--session", "s", b_text, env=OFF)
    clean(b)
    assert b.status == 0, b.stderr
    assert f"> {b_text}" in b.stdout
    assert "context compacted (auto)" in b.stderr
    assert a.poll() is None, "A was to be still compacting"
    hold.set()
    result = finish(a)
    clean(result)
    assert result.status == 0, result.stderr
    assert "auto compaction refused" in result.stderr and "changed while compacting" in \
        result.stderr, result.stderr  # told in one line, and the turn went on
    assert len(result.stderr.strip().splitlines()) == 1
    (sent,) = fake.turn_requests
    assert sent["messages"][-1] == {"role": "user", "content": a_text}, sent["messages"][-3:]
    assert b_text not in str(sent["messages"])
    rows = messages(db)
    assert_seqs_dense(rows)
    assert [(r[1], r[2]) for r in rows[20:22]] == [("user", a_text), ("user", b_text)]
    assert rows[22][4] == rows[21][4] and rows[23][4] == rows[20][4]  # B's answer, then A's
    assert rows[23][2] == "Hello from fake"
    (cp,) = checkpoints(db)  # one of the two compactions won, the other wrote nothing
    assert cp[3] == 22 and cp[2] <= 21, "B's snapshot ended at B's question; both stay raw"
    assert [m.seq for m in projection(db).raw][-4:] == [21, 22, 23, 24]


# --- 2. ask against a slow compact ---------------------------------------------------------------


def test_an_ask_during_a_slow_compact_is_kept_raw_after_the_commit(home, db, fake, run_cli):
    """The summary is held open; an ask runs to the end meanwhile. The checkpoint then covers
    only its snapshot (DESIGN.md D5.4, D12.2), and the ask's turn is in the projection."""
    seed(db, 6)
    figures = {"rounds": 0, "committed": 0}
    for n in range(COMPACT_ROUNDS):
        before = messages(db)
        snapshot_max = before[-1][0]
        hold = threading.Event()
        fake.script_summary(("delay", hold))
        compact = spawn("compact", "--session", "s")
        assert fake.wait_for(n + 1, "summary", timeout=LITELLM_START_S)
        text = f"asked during compaction {n}: canary-{n} " + " ".join(f"v{j}" for j in range(40))
        asked = run_cli("ask", "--session", "s", text, env=OFF)
        clean(asked)
        assert asked.status == 0, asked.stderr
        assert compact.poll() is None, "the compaction was to be still in flight"
        hold.set()
        result = finish(compact)
        clean(result)
        assert result.status == 0, result.stderr
        assert "Context compacted" in result.stdout
        figures["rounds"] += 1
        figures["committed"] += "Context compacted" in result.stdout
        rows = messages(db)
        assert_seqs_dense(rows)
        assert rows[: len(before)] == before, "nothing written before changed"
        assert [r[1] for r in rows[len(before):]] == ["user", "assistant"]
        assert rows[len(before)][2] == text
        cp_id, parent, first_retained, source_max = checkpoints(db)[-1]
        assert source_max == snapshot_max, "source_max_seq is the snapshot's, not the ask's"
        folded = record_seqs(fake.summary_requests[-1])
        assert folded and max(folded) < first_retained <= snapshot_max, (folded, first_retained)
        assert session_state(db)[0] == cp_id
        now = projection(db)
        assert now.checkpoint_id == cp_id
        assert [m.seq for m in now.raw] == list(range(first_retained, len(rows) + 1))
        assert now.raw[-2].content == text
    assert "canary-" not in log_text(home)
    print(f"\nask-vs-slow-compact figures: {figures}")


def test_a_compact_while_an_ask_streams_keeps_the_unanswered_question_raw(db, fake, run_cli):
    """The other order: the answer is held mid-stream and a compaction runs to the end."""
    seed(db, 6)
    hold = threading.Event()
    fake.script_turn(("hold", "the answer begins ", hold, "and ends here"))
    asking = spawn("ask", "--session", "s", "a question still being answered")
    assert fake.wait_for(1, "turn", timeout=LITELLM_START_S)
    compacted = run_cli("compact", "--session", "s", env=OFF)
    clean(compacted)
    assert compacted.status == 0 and "Context compacted" in compacted.stdout, compacted
    assert asking.poll() is None
    hold.set()
    result = finish(asking)
    clean(result)
    assert result.status == 0, result.stderr
    assert "the answer begins and ends here" in result.stdout
    rows = messages(db)
    assert_seqs_dense(rows)
    assert [(r[1], r[2]) for r in rows[12:]] == [
        ("user", "a question still being answered"),
        ("assistant", "the answer begins and ends here")]
    ((cp_id, _, first_retained, source_max),) = checkpoints(db)
    assert source_max == 13 and first_retained <= 13, "the question in flight stays raw"
    assert session_state(db)[0] == cp_id
    assert [m.seq for m in projection(db).raw][-2:] == [13, 14]


# --- 3. clear (or undo) during a slow summary ----------------------------------------------------


@pytest.mark.parametrize("meanwhile", ["clear", "undo"])
def test_a_clear_or_undo_during_a_slow_summary_refuses_the_compaction(db, fake, run_cli,
                                                                      meanwhile):
    """`clear` / `compact --undo` bump the generation, so the held candidate fails its CAS:
    exit 1 with one line saying so, no checkpoint row, and the clear or undo stays."""
    sid = seed(db, 6)
    if meanwhile == "undo":  # something to undo: a checkpoint, then more turns to compact
        store = open_store(db)
        try:
            gen = store.session(sid).context_generation
            store.commit_context_checkpoint(sid, gen, NewCheckpoint(
                None, summary_text(0), 9, 12, "manual", "openai", "fake-model", 700, 300))
        finally:
            store.close()
        seed(db, 3, words=40, start=6)
    before_cps = checkpoints(db)
    hold = threading.Event()
    fake.script_summary(("delay", hold))
    compact = spawn("compact", "--session", "s")
    assert fake.wait_for(1, "summary", timeout=LITELLM_START_S)
    args = ["clear"] if meanwhile == "clear" else ["compact", "--undo"]
    done = run_cli(*args, "--session", "s", env=OFF)
    assert done.status == 0, done.stderr
    state = session_state(db)
    assert compact.poll() is None
    hold.set()
    result = finish(compact)
    assert_clean_failure(result)  # exit 1, one `picochat:` line
    assert "compaction failed" in result.stderr
    assert "changed while compacting" in result.stderr and "nothing was committed" in \
        result.stderr, result.stderr
    assert checkpoints(db) == before_cps, "a refused candidate writes no row"
    assert session_state(db) == state, "the clear / undo stays in effect"
    assert state[0] is None  # no active checkpoint: cleared, or undone back to raw history
    if meanwhile == "clear":
        assert state[2] == messages(db)[-1][0]
        assert projection(db).raw == ()
    else:
        assert [m.seq for m in projection(db).raw] == list(range(1, 19))
    print(f"\n{meanwhile} during a slow summary: compaction refused, exit {result.status}")


def test_a_clear_during_an_asks_slow_auto_compaction_keeps_its_question(db, fake, run_cli):
    """`clear` from another terminal while an ask's auto compaction waits for its summary: the
    candidate is refused, the clear stays, and the ask still sends (and answers) its question."""
    seed(db, 10, words=56)
    hold = threading.Event()
    fake.script_summary(("delay", hold))
    text = "the question asked just before the clear"
    asking = spawn("ask", "--session", "s", text)
    assert fake.wait_for(1, "summary", timeout=LITELLM_START_S)
    assert run_cli("clear", "--session", "s", env=OFF).status == 0
    cleared = session_state(db)
    assert asking.poll() is None
    hold.set()
    result = finish(asking)
    clean(result)
    assert result.status == 0, result.stderr
    assert "auto compaction refused" in result.stderr and "changed while compacting" in \
        result.stderr, result.stderr
    sent = fake.turn_requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"] and sent[-1]["content"] == text, sent
    assert checkpoints(db) == [] and session_state(db) == cleared == (None, cleared[1], 21)
    rows = messages(db)
    assert_seqs_dense(rows)
    assert [(r[1], r[2]) for r in rows[20:]] == [("user", text), ("assistant", "Hello from fake")]


# --- 4. a write lock held by another connection --------------------------------------------------


def test_a_lock_held_past_the_busy_timeout_fails_in_one_line_and_writes_nothing(
        home, db, fake, run_cli):
    seed(db, 2)
    before, state = messages(db), session_state(db)
    short = {**OFF, "PICOCHAT_BUSY_TIMEOUT_MS": "400"}
    release = threading.Event()
    holder = hold_write_lock(db, release)
    figures = {}
    try:
        for args in (["ask", "--session", "s", "locked out: canary-lock"],
                     ["clear", "--session", "s"],
                     ["ask", "--session", "brand-new", "a new session"]):
            started = time.monotonic()
            result = run_cli(*args, env=short)
            figures[" ".join(args[:3])] = round(time.monotonic() - started, 2)
            assert_clean_failure(result)  # exit 1, one `picochat:` line
            clean(result)
            assert LOCKED in result.stderr and "try again in a moment" in result.stderr, \
                result.stderr
            assert result.stdout == ""
    finally:
        release.set()
        holder.join()
    assert messages(db) == before, "nothing half-written"
    assert session_state(db) == state
    assert len(_query(db, "SELECT id FROM sessions")) == 1
    assert "canary-lock" not in log_text(home)
    after = run_cli("ask", "--session", "s", "after the lock", env=OFF)
    assert after.status == 0, after.stderr
    print(f"\nheld lock (400 ms busy timeout): seconds until the one-line failure {figures}")


def test_a_lock_taken_during_a_slow_summary_refuses_the_commit_cleanly(db, fake):
    seed(db, 6)
    hold = threading.Event()
    fake.script_summary(("delay", hold))
    compact = spawn("compact", "--session", "s", env={"PICOCHAT_BUSY_TIMEOUT_MS": "400"})
    assert fake.wait_for(1, "summary", timeout=LITELLM_START_S)
    release = threading.Event()
    holder = hold_write_lock(db, release)
    hold.set()
    try:
        result = finish(compact)
    finally:
        release.set()
        holder.join()
    assert_clean_failure(result)
    assert "compaction failed" in result.stderr and LOCKED in result.stderr, result.stderr
    assert checkpoints(db) == [] and session_state(db)[0] is None


def test_a_lock_held_shorter_than_the_busy_timeout_is_waited_out(db, fake):
    """The real 10 s busy timeout: a 4 s lock only delays the ask and the clear."""
    seed(db, 2)
    waited = {}
    for args in (["ask", "--session", "s", "waits for the lock"], ["clear", "--session", "s"]):
        release = threading.Event()
        holder = hold_write_lock(db, release)
        started = time.monotonic()
        proc = spawn(*args, env=OFF)
        wait_for_lock_waiters([proc], db)
        time.sleep(4)  # the scenario, not a wait: the lock stays held 4 s into the write's wait
        assert proc.poll() is None, "it was to be still waiting for the lock"
        release.set()
        holder.join()
        result = finish(proc)
        waited[args[0]] = round(time.monotonic() - started, 2)
        clean(result)
        assert result.status == 0, result.stderr
    rows = messages(db)
    assert_seqs_dense(rows)
    assert [(r[1], r[2][:18]) for r in rows[4:]] == [("user", "waits for the lock"),
                                                     ("assistant", "I'm picochat's bui")]
    assert session_state(db)[2] == 6  # the clear took effect
    print(f"\nlock shorter than the busy timeout: seconds taken {waited}")

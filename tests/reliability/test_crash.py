"""Crash consistency: real `picochat ask` and `picochat compact` processes are SIGKILLed at
chosen points (a test-only hook pauses them there) and at random moments; after each kill a
fresh process opens the database and checks that nothing acknowledged was lost and no mixed
state is visible. Marked `reliability`: `pytest -m reliability` runs it (CI does)."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from picochat.projection import restore
from picochat.storage import open_store
from tests.helpers.waiting import POLL_S, WAIT_S

pytestmark = pytest.mark.reliability

KILLS_AT_POINTS = 30   # per point: user_written, summary_in_flight, before_commit, in_commit
RANDOM_KILLS = 120     # at random moments of an ask or a compact
MIN_KILLS = 200        # that landed: a process still running when its signal came


@dataclass(frozen=True)
class State:
    rows: dict[int, tuple]           # seq -> (role, content, status)
    active: str | None
    checkpoints: dict[str, tuple]    # id -> the whole row
    context: list[dict]


def read_state(db: Path) -> State:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = {r[0]: r[1:] for r in conn.execute(
            "SELECT seq, role, content, status FROM messages ORDER BY seq")}
        active = conn.execute("SELECT active_context_checkpoint_id FROM sessions").fetchone()[0]
        checkpoints = {r[0]: r for r in conn.execute("SELECT * FROM context_checkpoints")}
    finally:
        conn.close()
    store = open_store(db)
    try:
        context = restore(store, store.list_sessions()[0].id).provider_messages("sys")
    finally:
        store.close()
    return State(rows, active, checkpoints, context)


def check(before: State, after: State, acknowledged: str | None) -> None:
    seqs = list(after.rows)
    assert seqs == list(range(1, len(seqs) + 1)), "seq must run 1, 2, 3… with no gap"
    for seq, row in before.rows.items():  # nothing written before was lost or changed
        assert after.rows.get(seq) == row, f"message #{seq} changed or vanished"
    if acknowledged is not None:          # the process said the user message was stored
        assert any(r[0] == "user" and r[1] == acknowledged for r in after.rows.values())
    for cp_id, row in before.checkpoints.items():
        assert after.checkpoints.get(cp_id) == row, f"checkpoint {cp_id} changed"
    new = set(after.checkpoints) - set(before.checkpoints)
    assert len(new) <= 1
    if after.active == before.active:
        assert not new, "a checkpoint row was written but never made active"
        # the context is the one before, plus whatever messages were appended
        assert after.context[: len(before.context)] == before.context
    else:
        assert after.active in new, "the active checkpoint must be the old one or the new one"
        assert after.checkpoints[after.active][3] == before.active  # its parent


def start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "picochat", *cmd], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kill_when(proc: subprocess.Popen, marker: Path, timeout: float = WAIT_S) -> bool:
    """SIGKILL `proc` once `marker` exists; False if it ended or never got there. (The
    process waits at its point until killed: how soon it is killed does not matter.)"""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return False
        time.sleep(POLL_S)  # between two looks at the marker file: no event to wait on
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return True


@pytest.fixture
def crash_env(home: Path, config_file: Path) -> dict[str, str]:
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text("[context_compaction]\nkeep_recent_tokens = 200\n")
    env = dict(os.environ)
    env["PICOCHAT_OFFLINE_DELAY_MS"] = "2"
    return env


def test_no_kill_at_any_point_or_moment_loses_or_mixes_anything(crash_env, home, run_cli):
    db = home / "data" / "picochat.db"
    rng = random.Random(20261203)
    for i in range(6):  # some history, so compactions have something to fold
        assert run_cli("ask", "--session", "s", f"seed {i}: port {9000 + i}").status == 0
    figures = {"kills": 0, "reached": {}, "random": 0, "compacted": 0}
    plan = [(p, None) for p in ("user_written", "summary_in_flight", "before_commit",
                                "in_commit") for _ in range(KILLS_AT_POINTS)]
    plan += [(None, rng.uniform(0.02, 0.9)) for _ in range(RANDOM_KILLS)]
    rng.shuffle(plan)
    # a random moment can find the process already done: more random trials, until enough
    # kills have landed (bounded), so the floor below does not hang on this machine's speed
    extra = [(None, rng.uniform(0.02, 0.9)) for _ in range(RANDOM_KILLS)]
    for n, (point, delay) in enumerate(plan + extra):
        if n >= len(plan) and figures["kills"] >= MIN_KILLS:
            break
        before = read_state(db)
        text = f"message {n}: the canary host is cn-west-{n}"
        compacting = point in ("summary_in_flight", "before_commit", "in_commit") or (
            point is None and rng.random() < 0.4)
        cmd = ["compact", "--session", "s"] if compacting else ["ask", "--session", "s", text]
        marker = home / f"reached-{n}"
        env = dict(crash_env)
        if point is not None:
            env.update(PICOCHAT_CRASH_POINT=point, PICOCHAT_CRASH_FILE=str(marker))
        proc = start(cmd, env)
        acknowledged = None
        if point is not None:
            reached = kill_when(proc, marker)
            figures["reached"][point] = figures["reached"].get(point, 0) + reached
            figures["kills"] += reached
            if reached and point == "user_written":
                acknowledged = text
        else:
            time.sleep(delay)  # a random moment, on purpose: not a wait
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                figures["kills"] += 1
                figures["random"] += 1
            proc.wait()
        after = read_state(db)
        check(before, after, acknowledged)
        figures["compacted"] += after.active != before.active
        if n % 10 == 9:  # let the log grow between kills, and now and then compact for real
            assert run_cli("ask", "--session", "s", f"grow {n}").status == 0
        if n % 40 == 39:
            assert run_cli("compact", "--session", "s").status in (0, 1)
    print(f"\ncrash figures: {figures}")
    assert figures["kills"] >= MIN_KILLS
    # a compact with nothing to fold never reaches its points: most trials still must
    assert all(figures["reached"].get(p, 0) >= KILLS_AT_POINTS * 0.6 for p in
               ("user_written", "summary_in_flight", "before_commit", "in_commit"))


REWIND = """
import sys
from pathlib import Path
from picochat.storage import open_store
store = open_store(Path(sys.argv[1]))
store.rewind(store.list_sessions()[0].id, int(sys.argv[2]))
"""


def test_a_rewind_killed_in_its_transaction_leaves_the_session_as_it_was(crash_env, home,
                                                                         run_cli):
    """Issue 36: a rewind SIGKILLed with every write done but not committed leaves the old
    branch current, its context and rows as they were, and no branch half made; run to the
    end, it leaves the new one whole."""
    db = home / "data" / "picochat.db"
    for i in range(4):
        assert run_cli("ask", "--session", "s", f"seed {i}: port {9000 + i}").status == 0
    assert run_cli("compact", "--session", "s").status in (0, 1)
    conn = sqlite3.connect(db)
    user = conn.execute("SELECT MAX(seq) FROM messages WHERE role = 'user'").fetchone()[0]
    conn.close()
    for n in range(5):
        before = read_state(db)
        marker = home / f"rewound-{n}"
        env = dict(crash_env, PICOCHAT_CRASH_POINT="in_rewind", PICOCHAT_CRASH_FILE=str(marker))
        proc = subprocess.Popen([sys.executable, "-c", REWIND, str(db), str(user)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert kill_when(proc, marker), "the rewind never reached its point"
        after = read_state(db)
        assert after == before
        conn = sqlite3.connect(db)
        assert conn.execute("SELECT branch FROM sessions").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM branches").fetchone()[0] == 0
        conn.close()
    done = subprocess.run([sys.executable, "-c", REWIND, str(db), str(user)], env=crash_env)
    assert done.returncode == 0
    after = read_state(db)
    assert after.rows == before.rows  # the log is the same: the rows after stay, elsewhere
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT branch FROM sessions").fetchone()[0] == 1
    assert conn.execute("SELECT COUNT(*) FROM branches").fetchone()[0] == 2
    conn.close()
    assert all(m["content"] != "seed 3: port 9003" for m in after.context)  # not on it


FORK_TABLES = ("sessions", "messages", "context_checkpoints", "checkpoint_ledgers",
               "checkpoint_facts", "branch_checkpoints", "timeline", "retractions",
               "context_clears", "pins")


def read_all(db: Path) -> dict[str, list[tuple]]:
    """Every row of the tables a fork writes to, sorted, after an integrity check."""
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return {t: sorted(conn.execute(f"SELECT * FROM {t}"), key=repr) for t in FORK_TABLES}
    finally:
        conn.close()


def test_a_fork_killed_in_its_transaction_leaves_no_fork_and_run_to_the_end_a_whole_one(
        crash_env, home, run_cli):
    """Issue 36: a fork SIGKILLed with every write done but not committed leaves the
    database as it was (no new session, no copied summary or pin); run to the end, it makes
    one new session whose context is the source's, without copying a message."""
    db = home / "data" / "picochat.db"
    for i in range(4):
        assert run_cli("ask", "--session", "s", f"seed {i}: port {9000 + i}").status == 0
    assert run_cli("compact", "--session", "s").status in (0, 1)
    assert run_cli("pin", "--session", "s", "Our Redis runs on 6380").status == 0
    before = read_all(db)
    assert before["context_checkpoints"] and before["pins"]  # something for a fork to copy
    for n in range(5):
        marker = home / f"forked-{n}"
        env = dict(crash_env, PICOCHAT_CRASH_POINT="in_fork", PICOCHAT_CRASH_FILE=str(marker))
        proc = start(["fork", "-s", "s", "try-it"], env)
        assert kill_when(proc, marker), "the fork never reached its point"
        assert read_all(db) == before
    done = run_cli("fork", "-s", "s", "try-it", env=crash_env)
    assert done.status == 0, done.stderr
    after = read_all(db)
    assert after["messages"] == before["messages"]  # no message copied
    assert len(after["sessions"]) == len(before["sessions"]) + 1
    store = open_store(db)
    try:
        names = {s.name: s.id for s in store.list_sessions()}
        assert set(names) == {"s", "try-it"}
        assert (restore(store, names["try-it"]).provider_messages("sys")
                == restore(store, names["s"]).provider_messages("sys"))
    finally:
        store.close()

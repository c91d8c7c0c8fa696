"""A broken database (issue 7): a file that is not SQLite, a truncated or damaged one, another
program's SQLite file, a schema newer than this code, a read-only data dir, a full disk.

Every case runs the real `python -m picochat` in a subprocess against a temporary data dir, for
`ask`, `history`, `sessions`, `info`, `compact` and the app (`picochat` with no command), and
checks what a user sees: exactly one line on stderr, `picochat: <path>: <what> (<what to do>)`,
exit status 1 (a failure you can act on: `StorageError.exit_status`), no traceback; and what
must not happen: the database's bytes change, another file replaces it, or -wal/-shm files
are left beside it that were not there before.

Read-only: as a normal user, file modes (dir 0555, file 0444); as root, whom modes do not stop,
the same files made immutable with `chattr +i` (EPERM for root too, as on a read-only mount);
the test is skipped where neither holds. A full disk is SQLite's own SQLITE_FULL: a small
wrapper around the real CLI sets `PRAGMA max_page_count` to the file's current size on the
store's connection just before the chosen write.

The cheap cases (one or two subprocesses) run in the default suite; the whole matrix is
`pytest -m reliability tests/reliability/test_broken_db.py`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pty
import random
import re
import select
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import termios
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from picochat.errors import StorageError
from picochat.storage.schema import SCHEMA_VERSION

DB = "picochat.db"
TIMEOUT = 60.0  # seconds: only catches a hang (each run takes well under 2 s)

# (argv, label): the commands every broken-file case is tried with; () is the app.
COMMANDS = [(("ask", "hello again"), "ask"), (("history",), "history"),
            (("sessions",), "sessions"), (("info",), "info"), (("compact",), "compact"),
            ((), "app")]

# The real CLI, with SQLite's "database or disk is full" arriving at a chosen write: just before
# Store.append_messages stores a message of role $PICOCHAT_TEST_FULL_AT, the connection may grow
# no further (`max_page_count` = its current size). Everything else is the CLI as shipped.
FULL_DISK_CLI = """
import os, sys
from picochat.storage.store import Store
_append = Store.append_messages
def append_messages(self, session_id, messages, **kwargs):
    messages = list(messages)
    if any(m.role == os.environ["PICOCHAT_TEST_FULL_AT"] for m in messages):
        with self.core._lock:
            pages = self.core._conn.execute("PRAGMA page_count").fetchone()[0]
            self.core._conn.execute(f"PRAGMA max_page_count = {pages}")
    return _append(self, session_id, messages, **kwargs)
Store.append_messages = append_messages
from picochat.cli.main import main
raise SystemExit(main(sys.argv[1:]))
"""


@dataclass(frozen=True)
class Run:
    status: int
    stdout: str
    stderr: str


def picochat(data: Path, *args: str, full_at: str | None = None, stdin: str = "",
             cwd: Path | None = None) -> Run:
    """`python -m picochat ARGS` with PICOCHAT_DATA_DIR=data and no config file. Commands get
    pipes; the app (no ARGS) gets a terminal for stdin and stdout, as it needs one, and its
    stderr (where it draws, and where its one line goes) stays a pipe for the test to read."""
    env = dict(os.environ)
    env["PICOCHAT_DATA_DIR"] = str(data)
    env["PICOCHAT_CONFIG_DIR"] = str(data.parent / "config")  # never there: the defaults
    env["PICOCHAT_OFFLINE_DELAY_MS"] = "0"
    env["COLUMNS"] = "1000"  # the app wraps an error at the terminal's width: not in this test
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "PICOCHAT_MODEL"):
        env.pop(key, None)
    argv = [sys.executable, "-c", FULL_DISK_CLI, *args] if full_at else \
        [sys.executable, "-m", "picochat", *args]
    if full_at:
        env["PICOCHAT_TEST_FULL_AT"] = full_at
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    if not args:
        return on_terminal(argv, env, cwd)
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=TIMEOUT,
                          env=env, cwd=cwd)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def on_terminal(argv: list[str], env: dict[str, str], cwd: Path | None) -> Run:
    """Run `argv` with stdin and stdout on a pseudo-terminal 1000 columns wide (what the
    terminal shows is drained and dropped) and stderr in a file; its text is what stays on the
    terminal once the app has left its screen."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 1000, 0, 0))
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=err, env=env, cwd=cwd)
        os.close(slave)
        deadline = time.monotonic() + TIMEOUT
        try:
            while proc.poll() is None:
                assert time.monotonic() < deadline, "the app did not end"
                if select.select([master], [], [], 0.1)[0]:
                    try:
                        os.read(master, 65536)
                    except OSError:  # EIO: the child closed its end
                        pass
        finally:
            os.close(master)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        err.seek(0)
        return Run(proc.returncode, "", what_stays_on_screen(err.read().decode("utf-8",
                                                                              "replace")))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


# What Textual's driver writes to the terminal (here stderr) around a run that failed after
# its first frame: enter and leave the alternate screen, mouse modes, the cursor, a title. What
# it drew on the alternate screen (the bar, the prompt, the keys) is gone from the terminal once
# the app leaves it, so only what comes after is what the user reads.
_ALTERNATE = re.compile(r"\x1b\[\?1049h.*?\x1b\[\?1049l", re.DOTALL)
_DRIVER = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[=>]")


def what_stays_on_screen(stderr: str) -> str:
    return _DRIVER.sub("", _ALTERNATE.sub("", stderr))


def assert_one_line(run: Run, path: Path, *phrases: str) -> str:
    """Exit 1, no traceback, exactly one line on stderr naming the file, each phrase in it, and a
    hint in parentheses (what to do)."""
    assert StorageError.exit_status == 1
    assert run.status == 1, (run.status, run.stderr[-2000:])
    assert "Traceback" not in run.stderr and "Error:" not in run.stderr, run.stderr[-2000:]
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr[-2000:]
    [line] = lines
    assert line.startswith("picochat: "), line
    assert str(path) in line, line
    for phrase in phrases:
        assert phrase in line, (phrase, line)
    assert re.search(r"\S \([^()]*\w[^()]*\)(; your message is saved|; nothing was sent or "
                     r"saved)?$", line), line  # (to do)
    return line


# --- a real picochat database to break -----------------------------------------------------------


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A picochat database with two sessions and three turns, closed cleanly (no -wal/-shm)."""
    root = tmp_path_factory.mktemp("seed")
    data = root / "data"
    for args in (("ask", "--session", "work", "remember the word pelican"),
                 ("ask", "--session", "work", "and the number 42"),
                 ("ask", "--session", "other", "a second session")):
        r = picochat(data, *args)
        assert r.status == 0, r.stderr
    assert listing(data) == {DB, "picochat.log", "cache"}  # cache: the tokenizer's rank table
    return data / DB


@pytest.fixture
def place(home: Path):
    """Make the data dir hold a database file with these bytes; returns its path."""
    data = home / "data"

    def put(content: bytes) -> Path:
        data.mkdir(parents=True, exist_ok=True)
        path = data / DB
        path.write_bytes(content)
        return path

    return put


def history_json(data: Path, session: str = "work") -> list[dict]:
    r = picochat(data, "history", "--session", session, "--json")
    assert r.status == 0, r.stderr
    return json.loads(r.stdout)["messages"]


def integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def check_untouched(path: Path, *phrases: str, commands=COMMANDS) -> None:
    """Every command fails with one line and leaves the file, byte for byte, where it was."""
    before, files = sha(path), listing(path.parent)
    for args, label in commands:
        run = picochat(path.parent, *args)
        try:
            assert_one_line(run, path, *phrases)
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from None
        assert sha(path) == before, f"{label} changed the file"
        # the log, and the tokenizer's rank table: a cache `ask` writes counting the message
        assert listing(path.parent) <= files | {"picochat.log", "cache"}, (
            label, listing(path.parent))
        assert not any(n.endswith(("-wal", "-shm", "-journal")) for n in listing(path.parent))


# --- not SQLite, truncated, damaged, someone else's ----------------------------------------------

NOT_OURS = ("not a picochat database", "left untouched", "move it aside")


def test_text_file_is_refused_by_ask_and_sessions(place) -> None:
    """Cheap, in the default run: a text file where the database should be."""
    path = place(b"my shopping list\neggs\nmilk\n" * 50)
    check_untouched(path, *NOT_OURS, commands=[COMMANDS[0], COMMANDS[2]])


@pytest.mark.reliability
@pytest.mark.parametrize("kind", ["text", "random bytes", "half", "100 bytes"])
def test_not_sqlite_or_truncated_every_command(kind: str, place, seed: Path) -> None:
    real = seed.read_bytes()
    content = {
        "text": b"this is not a database, it is a note\n" * 200,
        "random bytes": random.Random(7).randbytes(64 * 1024),
        "half": real[: len(real) // 2],
        "100 bytes": real[:100],
    }[kind]
    path = place(content)
    check_untouched(path, *NOT_OURS)
    assert path.read_bytes() == content


def test_another_programs_sqlite_file_is_not_migrated(place, tmp_path: Path) -> None:
    """A valid SQLite file with someone else's tables (user_version 0): picochat must not add
    its schema to it or switch it to WAL mode."""
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE recipes (name TEXT, steps TEXT)")
    conn.execute("INSERT INTO recipes VALUES ('bread', 'knead')")
    conn.commit()
    conn.close()
    path = place(other.read_bytes())
    check_untouched(path, *NOT_OURS, commands=[COMMANDS[0], COMMANDS[2]])
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT name FROM sqlite_schema").fetchall() == [("recipes",)]
    conn.close()


def corrupt_messages_root(path: Path) -> None:
    """Overwrite the root page of the `messages` table with noise: the file still opens and
    the `sessions` table still reads, but every read of the log fails as "malformed"."""
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    root = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'messages'").fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with path.open("r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(random.Random(3).randbytes(page_size))


@pytest.mark.reliability
def test_damaged_inside_every_command(place, seed: Path) -> None:
    """The header and schema are fine, the message log is not: the error comes from a read in
    the middle of the command, not from opening the file (in the app: while it builds its
    screen, where Textual would print its own traceback). Nothing may be written around it."""
    path = place(seed.read_bytes())
    corrupt_messages_root(path)
    phrases = ("the database is damaged", "malformed", "keep a copy")
    check_untouched(path, *phrases, commands=[c for c in COMMANDS if c[1] != "sessions"])
    # `sessions` reads only the intact table: it still lists them, and changes nothing
    before = sha(path)
    run = picochat(path.parent, "sessions")
    assert run.status == 0 and "work" in run.stdout and "other" in run.stdout, run.stderr
    assert sha(path) == before


# --- a schema newer than this code ---------------------------------------------------------------


def newer(seed: Path, place) -> Path:
    path = place(seed.read_bytes())
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    assert listing(path.parent) == {DB}
    return path


def test_newer_schema_is_refused_by_history(place, seed: Path) -> None:
    """Cheap, in the default run."""
    path = newer(seed, place)
    check_untouched(path, "newer", "upgrade picochat", commands=[COMMANDS[1]])


@pytest.mark.reliability
def test_newer_schema_every_command(place, seed: Path) -> None:
    path = newer(seed, place)
    check_untouched(path, f"version {SCHEMA_VERSION + 1}", "newer", "left untouched",
                    "upgrade picochat")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 6
    conn.close()


# --- read-only ---------------------------------------------------------------------------------


@pytest.fixture
def read_only():
    """`read_only(path, ...)` takes the write permission away from files and folders: modes for
    a normal user, `chattr +i` for root (whom modes do not stop). Undone at teardown."""
    made: list[Path] = []
    root = os.geteuid() == 0

    def apply(*paths: Path) -> None:
        for p in paths:
            if root:
                if shutil.which("chattr") is None:
                    pytest.skip("running as root without chattr: cannot make a file read-only")
                proc = subprocess.run(["chattr", "+i", str(p)], capture_output=True, text=True)
                if proc.returncode != 0:
                    pytest.skip(f"chattr +i refused here: {proc.stderr.strip()}")
            else:
                p.chmod(0o555 if p.is_dir() else 0o444)
            made.append(p)
        for p in paths:  # the point of the test: writing there must really fail
            probe = p / "probe" if p.is_dir() else p
            try:
                with probe.open("ab"):
                    pass
            except OSError:
                continue
            pytest.skip(f"{p} is still writable after taking the permission away")

    yield apply
    for p in reversed(made):
        if root:
            subprocess.run(["chattr", "-i", str(p)], check=True)
        else:
            p.chmod(0o755 if p.is_dir() else 0o644)


@pytest.mark.reliability
def test_read_only_dir_and_file_every_command(place, seed: Path, read_only) -> None:
    """The database (closed cleanly, in WAL mode) and its folder read-only: SQLite cannot even
    create its -shm file, so every command fails, saying what is read-only; nothing changes."""
    path = place(seed.read_bytes())
    read_only(path, path.parent)
    before, files = sha(path), listing(path.parent)
    for args, label in COMMANDS:
        run = picochat(path.parent, *args)
        try:
            line = assert_one_line(run, path, "the database and its folder are read-only",
                                   "make it writable")
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from None
        assert "your message is saved" not in line
        assert sha(path) == before and listing(path.parent) == files, label


@pytest.mark.reliability
def test_read_only_file_reads_work_writes_fail(place, seed: Path, read_only) -> None:
    """A read-only database in a writable folder: reading works; every write fails with one
    line, and the file's bytes never change. (SQLite leaves its -wal and -shm beside it: a
    read-only connection cannot remove them.)"""
    path = place(seed.read_bytes())
    read_only(path)
    before = sha(path)
    for args in (("sessions",), ("info", "--session", "work"), ("history", "--session", "work")):
        run = picochat(path.parent, *args)
        assert run.status == 0 and not run.stderr, (args, run.stderr)
    assert "pelican" in run.stdout
    for args in (("ask", "hello again"), ("clear",), ("ask", "--session", "new", "hi")):
        run = picochat(path.parent, *args)
        line = assert_one_line(run, path, "the database file is read-only", "make it writable")
        assert "your message is saved" not in line
    assert sha(path) == before


@pytest.mark.reliability
def test_read_only_dir_without_database(home: Path, read_only) -> None:
    """A first start in a folder that cannot take a new file: one line, nothing created. The
    commands that only read have nothing to read and never try to create the database."""
    data = home / "data"
    data.mkdir()
    read_only(data)
    path = data / DB
    for args, label in COMMANDS:
        run = picochat(data, *args)
        try:
            if label in ("ask", "app"):
                assert_one_line(run, path, "cannot create the database: its folder is read-only",
                                "make it writable")
            else:
                assert "no sessions yet" in run.stderr.lower() + run.stdout.lower(), run
                assert "read-only" not in run.stderr and "Traceback" not in run.stderr
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from None
        assert listing(data) == set(), label


# --- a full disk ---------------------------------------------------------------------------------


def test_full_disk_on_the_users_message(place, seed: Path) -> None:
    """SQLITE_FULL while saving the user's message: one line that says the disk is full, not
    "your message is saved"; the history and the file are exactly as before."""
    path = place(seed.read_bytes())
    earlier = history_json(path.parent)
    before = sha(path)
    big = "a pasted log line that will not fit\n" * 5000  # needs new pages, which cannot come
    run = picochat(path.parent, "ask", "--session", "work", "-", stdin=big, full_at="user")
    line = assert_one_line(run, path, "the disk is full", "free some space")
    assert "your message is saved" not in line
    assert sha(path) == before
    assert history_json(path.parent) == earlier
    assert integrity(path) == "ok"
    assert not any(n.endswith(("-wal", "-shm")) for n in listing(path.parent))


@pytest.mark.reliability
def test_full_disk_in_the_middle_of_a_turn(place, seed: Path, tmp_path: Path) -> None:
    """SQLITE_FULL after the user's message is saved, while a tool's big result is stored: the
    turn fails with one line that says the disk is full and that the message is saved; every
    earlier message is intact, nothing of the failed row is there, and the next turn works."""
    path = place(seed.read_bytes())
    earlier = history_json(path.parent)
    work = tmp_path / "cwd"
    work.mkdir()
    (work / "big.txt").write_text("lorem ipsum dolor sit amet\n" * 4000)
    run = picochat(path.parent, "ask", "--session", "work", "read file big.txt", cwd=work,
                   full_at="tool")
    line = assert_one_line(run, path, "the disk is full", "free some space")
    assert line.endswith("; your message is saved"), line
    assert "nothing was written" not in line, line  # it was: the user's message
    after = history_json(path.parent)
    assert after[: len(earlier)] == earlier
    new = after[len(earlier):]
    assert new[0]["role"] == "user" and new[0]["content"] == "read file big.txt"
    assert not [m for m in new if m["role"] == "tool"]  # the result that did not fit: absent
    assert integrity(path) == "ok"
    # the disk has room again: the session goes on, the earlier turns still in its context
    run = picochat(path.parent, "ask", "--session", "work", "what was the word?")
    assert run.status == 0, run.stderr
    assert history_json(path.parent)[: len(earlier)] == earlier

"""Model output is untrusted: the headless CLI never hands its escapes to the user's terminal.

The real CLI runs under a pseudo-terminal (stdout is a tty: the text is cleaned) and into a pipe
(the bytes stay as stored); the database always keeps the raw text."""

from __future__ import annotations

import json
import os
import pty
import select
import sqlite3
import subprocess
import sys
import time
import tty
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picochat.messages import NewCheckpoint
from picochat.storage import open_store
from picochat.textsafe import StreamCleaner, clean, json_for_terminal
from tests.helpers.fakes.openai import _words
from tests.helpers.waiting import WAIT_S
from tests.helpers.storage import append_message

ENV = {"FAKE_API_KEY": "test-key"}

# A title change, a screen clear, a clipboard write (OSC 52), a cursor-shape CSI with a space in
# it, and bidi controls. The fake streams word by word, so the title OSC spans three deltas and
# the cursor CSI two.
HOSTILE = ("Title \x1b]0;pwned by model\x07 clear \x1b[2J clip \x1b]52;c;cHduZWQ=\x07 "
           "cursor \x1b[2 q bell\x07 bidi abc\u202edcba\u2066 done")
SHOWN = "Title  clear  clip  cursor  bell bidi abc<U+202E>dcba<U+2066> done"
SUMMARY = "## Objective\n- summary \x1b]0;cp title\x07 with \u202eevil\u202c text\x1b[0m"
ARGUMENTS = '{"query": "port \x1b]52;c;Y2xpcA==\x07 \u202e"}'


def test_the_fake_splits_the_escapes_between_deltas():
    pieces = _words(HOSTILE)
    assert [" \x1b]0;pwned", " by", " model\x07"] == pieces[1:4]
    assert [" \x1b[2", " q"] == pieces[9:11]
    assert clean(HOSTILE) == SHOWN


# --- the stream holder -----------------------------------------------------------------------


def stream(*pieces: str) -> list[str]:
    screen = StreamCleaner()
    return [screen.feed(p) for p in pieces] + [screen.flush()]


def test_a_split_csi_is_held_and_removed_whole():
    assert stream("cursor \x1b[2", " q shown") == ["cursor ", " shown", ""]
    assert stream("a\x1b", "[31", "mb") == ["a", "", "b", ""]


def test_a_split_osc_is_removed_whole_with_either_terminator():
    assert stream("t \x1b]0;pwned", " by", " model\x07 after") == ["t ", "", " after", ""]
    assert stream("t \x1b]0;x\x1b", "\\after") == ["t ", "after", ""]
    assert stream("x\x1b", "]52;c;cHduZWQ=\x07y") == ["x", "y", ""]


def test_the_end_of_the_stream_cleans_what_is_held():
    assert stream("ok \x1b]0;never ends") == ["ok ", ""]
    assert stream("ok \x1b") == ["ok ", ""]
    assert stream("ok \x1b[12") == ["ok ", "12"]  # as clean() reads an unfinished CSI


def test_an_open_osc_holds_no_body():
    screen = StreamCleaner()
    assert screen.feed("before \x1b]52;c;") == "before "
    for _ in range(2000):
        assert screen.feed("QUFB" * 50) == ""
    assert len(screen._held) <= 3
    assert screen.feed("\x07 after") == " after"


def test_every_split_of_the_hostile_reply_shows_what_clean_shows():
    text = HOSTILE + "\x1b]0;x\x1b\\ \r\n end\x1b"
    expected = clean(text)
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            assert "".join(stream(text[:i], text[i:j], text[j:])) == expected, (i, j)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(st.sampled_from(list("\x1b[]\\\x07\r\n ;0a2Jq\x9b\u202e(P")),
                        max_size=8), max_size=8))
def test_streamed_pieces_join_to_clean_of_the_whole(pieces):
    assert "".join(stream(*pieces)) == clean("".join(pieces))


def test_json_for_terminal_keeps_the_data_and_drops_what_a_terminal_obeys():
    value = {"reply": HOSTILE + "\x9b2J\x7f", "n": 1}
    raw = json.dumps(value, ensure_ascii=False)
    safe = json_for_terminal(raw)
    assert json.loads(safe) == value
    assert not any(ch in safe for ch in "\x1b\x07\x9b\x7f\u202e\u2066")


def test_the_app_cleans_with_the_same_function():
    from picochat.tui import safe

    assert safe.clean is clean


# --- the real CLI under a pseudo-terminal ---------------------------------------------------------


def run_on_tty(*args: str, env: dict[str, str] | None = None,
               timeout: float = 90) -> tuple[int, bytes]:
    """Run `python -m picochat ARGS` with stdout on a pseudo-terminal (raw mode: the bytes as
    written) and return the exit status and every byte the terminal received."""
    master, slave = pty.openpty()
    tty.setraw(slave)
    full_env = {**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "picochat", *args], stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=subprocess.DEVNULL, env=full_env)
    os.close(slave)
    received = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end of the terminal
                break
            if not data:
                break
            received += data
        else:
            proc.kill()
            pytest.fail(f"picochat {' '.join(args)} did not finish in {timeout}s")
        return proc.wait(timeout=WAIT_S), bytes(received)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def assert_terminal_safe(shown: bytes) -> None:
    assert b"\x1b" not in shown and b"\x07" not in shown
    text = shown.decode("utf-8")
    assert not any(ch in text for ch in "\u202e\u2066\u202c\x9b\x7f"), text


def stored_replies(home: Path) -> list[str]:
    store = open_store(home / "data" / "picochat.db")
    try:
        session = store.latest_session()
        assert session is not None
        return [m.content for m in store.history(session.id) if m.role == "assistant"]
    finally:
        store.close()


def test_ask_on_a_terminal_streams_the_reply_cleaned(fake, home):
    fake.script(("text", HOSTILE))
    status, shown = run_on_tty("ask", "hello", env=ENV)
    assert status == 0, shown
    assert_terminal_safe(shown)
    # exactly clean() of the whole reply: no half of a split sequence ("2 q", "by model") shows
    assert shown.decode("utf-8") == SHOWN + "\n"
    assert stored_replies(home) == [HOSTILE]


def test_ask_into_a_pipe_writes_the_reply_as_streamed(fake, home, run_cli):
    fake.script(("text", HOSTILE))
    result = run_cli("ask", "hello", env=ENV)
    assert result.status == 0, result.stderr
    assert result.stdout == HOSTILE + "\n"
    assert stored_replies(home) == [HOSTILE]


def test_ask_json_on_a_terminal_is_the_same_data(fake, home):
    fake.script(("text", HOSTILE))
    status, shown = run_on_tty("ask", "--json", "hello", env=ENV)
    assert status == 0, shown
    assert_terminal_safe(shown)
    assert json.loads(shown.decode("utf-8"))["reply"] == HOSTILE
    assert stored_replies(home) == [HOSTILE]


# --- stored text: history, checkpoints, export, sessions ---------------------------------------


@pytest.fixture
def hostile_session(home: Path) -> str:
    """A session whose stored text carries escapes: an answer, a tool call's arguments, a tool
    result and a checkpoint summary (as a model could have written them)."""
    store = open_store(home / "data" / "picochat.db")
    try:
        s = store.create_session(name="w")
        append_message(store, s.id, "user", "hello")
        append_message(store, s.id, "assistant", "", tool_calls=[{
            "id": "call_1", "type": "function",
            "function": {"name": "history_search", "arguments": ARGUMENTS}}])
        append_message(store, s.id, "tool", "found \x1b[2J\u202e", tool_call_id="call_1",
                       name="history_search", tool_status="ok")
        append_message(store, s.id, "assistant", HOSTILE)
        append_message(store, s.id, "user", "more")
        append_message(store, s.id, "assistant", "fine")
        store.commit_context_checkpoint(s.id, 0, NewCheckpoint(
            None, SUMMARY, 5, 4, "manual", "openai", "openai/fake-model", 100, 40))
        return s.id
    finally:
        store.close()


def test_history_on_a_terminal_is_cleaned_and_raw_elsewhere(run_cli, hostile_session):
    status, shown = run_on_tty("history", "--session", "w")
    assert status == 0, shown
    assert_terminal_safe(shown)
    text = shown.decode("utf-8")
    assert SHOWN in text and "found <U+202E>" in text
    assert 'history_search({"query": "port  <U+202E>"})' in text
    piped = run_cli("history", "--session", "w")
    assert piped.status == 0, piped.stderr
    assert HOSTILE in piped.stdout and ARGUMENTS in piped.stdout

    status, shown = run_on_tty("history", "--session", "w", "--json")
    assert status == 0, shown
    assert_terminal_safe(shown)
    messages = json.loads(shown.decode("utf-8"))["messages"]
    assert messages[3]["content"] == HOSTILE            # the same data, escaped as JSON
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == ARGUMENTS


def test_export_to_a_terminal_is_cleaned_but_a_pipe_and_a_file_keep_the_raw_text(
        run_cli, home, hostile_session):
    status, shown = run_on_tty("export", "--session", "w", "--format", "md")
    assert status == 0, shown
    assert_terminal_safe(shown)
    text = shown.decode("utf-8")
    assert SHOWN in text and "with <U+202E>evil<U+202C> text" in text
    assert "summary  with" in text                      # the title OSC is gone, its text too

    piped = run_cli("export", "--session", "w", "--format", "md")
    assert piped.status == 0, piped.stderr
    assert HOSTILE in piped.stdout and SUMMARY in piped.stdout

    target = home / "w.md"
    written = run_cli("export", "--session", "w", "--format", "md", "-o", str(target))
    assert written.status == 0, written.stderr
    assert target.read_text(encoding="utf-8") == piped.stdout

    status, shown = run_on_tty("export", "--session", "w", "--format", "json")
    assert status == 0, shown
    assert_terminal_safe(shown)
    body = json.loads(shown.decode("utf-8"))
    assert body["messages"][3]["content"] == HOSTILE
    assert body["checkpoints"][0]["summary"] == SUMMARY


def name_as_stored(home: Path, session_id: str, name: str) -> None:
    """A name picochat now refuses, written as an older picochat (or another program) could
    have stored it."""
    with sqlite3.connect(home / "data" / "picochat.db") as db:
        db.execute("UPDATE sessions SET name = ? WHERE id = ?", (name, session_id))
    db.close()


def test_checkpoints_and_sessions_on_a_terminal(run_cli, home, hostile_session):
    name_as_stored(home, hostile_session, "w\x1b]0;renamed\x07\u202e")
    status, shown = run_on_tty("sessions")
    assert status == 0, shown
    assert_terminal_safe(shown)
    assert "w<U+202E>" in shown.decode("utf-8")
    status, shown = run_on_tty("checkpoints", "--session", hostile_session)
    assert status == 0, shown
    assert_terminal_safe(shown)
    assert "* active" in shown.decode("utf-8")
    piped = run_cli("sessions")
    assert "w\x1b]0;renamed\x07\u202e" in piped.stdout
    assert stored_replies(home)[-2] == HOSTILE


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_a_provider_error_that_quotes_escapes_is_one_clean_line(fake, home, run_cli):
    body = {"error": {"message": "bad request \x1b]0;pwned\x07 near \x1b[2Jhere \u202eevil",
                      "type": "invalid_request_error", "code": None}}
    fake.script(("status", 400, body))
    result = run_cli("ask", "hello", env=ENV)
    assert result.status == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("picochat: ")
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "\u202e" not in result.stderr


def test_a_csi_that_never_ends_holds_a_bounded_text():
    cleaner = StreamCleaner()
    shown = [cleaner.feed("a\x1b[")] + [cleaner.feed("1;2;3;") for _ in range(5_000)]
    assert len(cleaner._held) <= 300  # each new piece rescans only this much
    assert "".join(shown + [cleaner.feed("mZ"), cleaner.flush()]) == "aZ"


NAME = "w\x1b]0;renamed\x07\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u202e"


def test_picochats_own_lines_are_clean_even_in_a_pipe(run_cli, home, hostile_session):
    """A session named with escapes (a title change, a clipboard write, a screen clear):
    what picochat itself says about it is cleaned even into a pipe, since `| cat` hands those
    bytes to a terminal all the same; data (`history`) stays as stored there."""
    name_as_stored(home, hostile_session, NAME)
    runs = [run_cli("clear", "-s", NAME),
            run_cli("export", "-s", NAME, "--format", "md", "-o", str(home / "out.md")),
            run_cli("pin", "-s", NAME, "the canary host is kv-7"),
            run_cli("unpin", "-s", NAME, "1"),
            run_cli("pins", "-s", NAME),
            run_cli("info", "-s", NAME),
            run_cli("compact", "-s", NAME, "--model", "offline"),
            run_cli("compact", "--undo", "-s", NAME),
            run_cli("--bogus\x1b]0;title\x07"),
            run_cli("ask", "-s", NAME, "--nope\x1b[2J")]
    for result in runs:
        for stream in (result.stdout, result.stderr):
            assert_terminal_safe(stream.encode("utf-8"))
    assert runs[0].status == 0 and "Context cleared for w" in runs[0].stdout
    assert runs[1].status == 0 and "Exported" in runs[1].stderr
    assert runs[8].status == 2 and runs[9].status == 2
    assert HOSTILE in run_cli("history", "-s", hostile_session).stdout  # data: as stored


def test_no_cli_module_writes_around_the_one_writer():
    """Every line the CLI prints goes through picochat.cli.output, where it is cleaned."""
    import re

    import picochat.cli as cli

    writes = re.compile(r"sys\.std(out|err)\.write|\bprint\(")
    offenders = [f"{path.name}:{n}" for path in Path(cli.__file__).parent.glob("*.py")
                 if path.name != "output.py"
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if writes.search(line)]
    assert offenders == []

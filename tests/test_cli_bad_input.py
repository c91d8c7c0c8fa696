"""Bad input that used to end badly (issue 18, items 7 and 8), through the real CLI: stdout on
a full disk, a message or a config that never ends, a FIFO where a file should be, a config
nested thousands of levels deep, an empty `--session`, read-only commands on a fresh machine,
and the app started without a terminal. Each ends with one line, the documented exit status,
and nothing lost or created. Every subprocess is bounded: a regression fails, never hangs."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers.cli import CliResult
from tests.helpers.waiting import read_until

TIMEOUT = 60.0  # seconds: each run takes about a second; this only catches a hang
FULL = Path("/dev/full")


def run_with(*args: str, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
             timeout: float = TIMEOUT) -> CliResult:
    """`python -m picochat ARGS` with the given stdin and stdout (files or pipes)."""
    proc = subprocess.run([sys.executable, "-m", "picochat", *args], stdin=stdin, stdout=stdout,
                          stderr=subprocess.PIPE, timeout=timeout, env=dict(os.environ))
    out = proc.stdout.decode("utf-8", "replace") if proc.stdout is not None else ""
    return CliResult(proc.returncode, out, proc.stderr.decode("utf-8", "replace"))


def one_line(result: CliResult, status: int, *phrases: str) -> str:
    assert result.status == status, (result.status, result.stderr)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("picochat: "), result.stderr
    for phrase in phrases:
        assert phrase in lines[0], (phrase, lines[0])
    return lines[0]


def messages(run_cli, session: str = "s") -> list[tuple[str, str, str]]:
    body = json.loads(run_cli("history", "--session", session, "--json").stdout)
    return [(m["role"], m["status"], m["content"]) for m in body["messages"]]


# --- 7a: stdout on a full disk -------------------------------------------------------------------

needs_dev_full = pytest.mark.skipif(not FULL.exists(), reason="no /dev/full here")


@needs_dev_full
@pytest.mark.parametrize("args", [
    ("history", "--session", "s"), ("history", "--session", "s", "--json"),
    ("export", "--session", "s", "--format", "md"),
    ("export", "--session", "s", "--format", "json"),
    ("sessions",), ("checkpoints", "--session", "s"), ("info", "--session", "s"),
])
@pytest.mark.slow
def test_a_full_disk_on_stdout_is_one_line_saying_so(run_cli, args):
    assert run_cli("ask", "--session", "s", "hello").status == 0
    with FULL.open("wb") as full:
        result = run_with(*args, stdout=full)
    one_line(result, 1, "cannot write to standard output: No space left on device")


@needs_dev_full
@pytest.mark.parametrize("as_json", [False, True])
def test_ask_on_a_full_disk_saves_the_whole_turn_and_says_so(run_cli, as_json):
    """The turn runs to its end although nothing could be shown: the message and the whole
    answer are saved, as they would be with a working stdout, and the line says where."""
    with FULL.open("wb") as full:
        result = run_with("ask", "--session", "s", *(["--json"] if as_json else []),
                          "my port is 8443", stdout=full)
    one_line(result, 1, "cannot write to standard output: No space left on device",
             "your message and the answer are saved", "picochat history")
    stored = messages(run_cli)
    assert [(role, status) for role, status, _ in stored] == [
        ("user", "complete"), ("assistant", "complete")]
    assert stored[0][2] == "my port is 8443" and "my port is 8443" in stored[1][2]


@pytest.mark.slow
def test_ask_into_a_closed_pipe_still_saves_the_whole_answer(run_cli):
    # 150 ms before each of the answer's 42 pieces: once the first is read, the rest takes
    # over 6 s, so the reader surely leaves mid-answer
    env = dict(os.environ, PICOCHAT_OFFLINE_DELAY_MS="150")
    proc = subprocess.Popen([sys.executable, "-m", "picochat", "ask", "--session", "s", "a story"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    read_until(proc.stdout, "I'm ")  # the answer has begun
    proc.stdout.close()  # the reader leaves, as `| head -c 5` does
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0 and err == b"", err
    assert [(role, status) for role, status, _ in messages(run_cli)] == [
        ("user", "complete"), ("assistant", "complete")]


# --- 7b: a message without end -------------------------------------------------------------------


def test_a_message_from_an_endless_stdin_is_refused_at_the_cap(home):
    with open("/dev/zero", "rb") as zero:
        result = run_with("ask", "-", stdin=zero)
    one_line(result, 2, "32 MiB", "nothing was sent or saved")
    assert not (home / "data").exists()


def test_a_message_in_argv_over_the_cap_is_refused(home, capsys):
    """Linux caps one argument at 128 KiB, so the 32 MiB cap is checked in-process."""
    from picochat.cli import commands
    from picochat.cli.main import main

    assert main(["ask", "x" * (commands.MAX_MESSAGE_BYTES + 1)]) == 2
    assert "32 MiB" in capsys.readouterr().err
    assert not (home / "data").exists()


# --- 7c, 7d: configs that are not small regular files, or nest too deep --------------------------


def deep_list(path: Path) -> Path:
    path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    return path


def deep_table(path: Path) -> Path:
    path.write_text("a = " + "{b = " * 5000 + "1" + "}" * 5000 + "\n")
    return path


def big_file(path: Path) -> Path:
    path.write_text("# padding\n" * 120_000)  # 1.2 MB of comments: valid TOML, too large
    return path


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("make, phrase", [
    (lambda p: Path("/dev/zero"), "not a regular file (a character device)"),
    (fifo, "not a regular file (a FIFO)"),
    (big_file, "larger than 1 MiB"),
    (deep_list, "nested too deeply"),
    (deep_table, "nested too deeply"),
])
@pytest.mark.parametrize("args", [("info",), ("ask", "hi")])
def test_a_config_that_is_no_small_regular_file_or_nests_too_deep_is_exit_2(
        run_cli, home, make, phrase, args):
    path = make(home / "bad.toml")
    result = run_cli("--config", str(path), *args, timeout=TIMEOUT)
    one_line(result, 2, str(path), phrase)
    assert not (home / "data").exists()


def test_a_fifo_as_the_default_config_does_not_hang_the_app(run_cli, config_file):
    config_file.parent.mkdir(parents=True)
    fifo(config_file)
    one_line(run_cli("sessions", timeout=TIMEOUT), 2, str(config_file), "a FIFO")


def test_a_symlink_to_a_regular_config_is_read(run_cli, home):
    real = home / "real.toml"
    real.write_text('[agents.default]\nsystem_prompt = "via a link"\n')
    link = home / "link.toml"
    link.symlink_to(real)
    result = run_cli("--config", str(link), "config", "show", timeout=TIMEOUT)
    assert result.status == 0 and "via a link" in result.stdout, result.stderr


def test_a_fifo_or_a_deep_file_among_the_themes_is_a_problem_not_a_hang(tmp_path):
    from picochat.tui.themes import load_themes

    folder = tmp_path / "themes"
    folder.mkdir()
    fifo(folder / "pipe.toml")
    deep_list(folder / "deep.toml")
    (folder / "ok.toml").write_text('name = "mine"\nprimary = "#7aa2f7"\n')
    found: list = []
    worker = threading.Thread(target=lambda: found.append(load_themes(folder)), daemon=True)
    worker.start()
    worker.join(TIMEOUT)
    if worker.is_alive():  # let the stuck open() go: a writer on the FIFO releases it
        os.close(os.open(folder / "pipe.toml", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("load_themes hung on a FIFO")
    [(themes, problems)] = found
    assert [t.name for t in themes] == ["mine"]
    assert {(p.path.name, p.message) for p in problems} == {
        ("deep.toml", "not valid TOML (nested too deeply)"),
        ("pipe.toml", "not a regular file (a FIFO); not read")}


# --- 8a: an empty --session ----------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ("ask", "--session", "", "hi"), ("--session", "", "ask", "hi"), ("history", "--session", ""),
    ("info", "--session", ""), ("clear", "--session", ""), ("compact", "--session", ""),
    ("compact", "--session", "", "--undo"), ("checkpoints", "--session", ""),
    ("export", "--session", "", "--format", "md"), ("--session", "",), ("--session", "  "),
])
@pytest.mark.slow
def test_an_empty_session_is_refused_not_taken_for_the_latest(run_cli, args):
    assert run_cli("ask", "--session", "s", "hello").status == 0
    before = messages(run_cli)
    one_line(run_cli(*args, timeout=TIMEOUT), 2, "--session is empty")
    assert messages(run_cli) == before
    assert [s["name"] for s in json.loads(run_cli("sessions", "--json").stdout)] == ["s"]


# --- 8b: read-only commands on a fresh machine ---------------------------------------------------


@pytest.mark.parametrize("args, status", [
    (("sessions",), 0), (("sessions", "--json"), 0), (("info",), 2), (("history",), 2),
    (("history", "--session", "work"), 2), (("checkpoints",), 2),
    (("export", "--format", "md"), 2), (("compact", "--undo"), 2), (("compact",), 2),
    (("clear",), 2),
])
def test_read_only_commands_on_a_fresh_machine_create_nothing(run_cli, home, args, status):
    result = run_cli(*args, timeout=TIMEOUT)
    assert result.status == status, result.stderr
    said = (result.stdout + result.stderr).lower()
    assert "no sessions yet" in said or result.stdout.strip() == "[]" or "no session named" in said
    assert "Traceback" not in result.stderr
    assert not (home / "data").exists(), sorted(p.name for p in (home / "data").iterdir())


# --- 8c: the app without a terminal --------------------------------------------------------------


def test_the_app_without_a_terminal_exits_at_once_pointing_to_ask(home):
    result = run_with()  # stdin /dev/null, stdout a pipe: cron, CI
    one_line(result, 2, "needs a terminal", "picochat ask")
    assert result.stdout == ""
    assert not (home / "data").exists()


def test_the_app_with_only_stdin_on_a_terminal_exits_too(home):
    master, slave = pty.openpty()
    try:
        result = run_with(stdin=slave)  # `picochat > file`
    finally:
        os.close(slave)
        os.close(master)
    one_line(result, 2, "needs a terminal", "picochat ask")
    assert not (home / "data").exists()

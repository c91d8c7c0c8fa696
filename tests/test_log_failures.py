"""A log that cannot be written (issue 31, item 15): a full disk, a read-only or missing folder,
a folder where the file should be. The command goes on; the user reads one line, once, never
Python's "--- Logging error ---" traceback, and in the app that line is a notice (Textual owns
the screen: nothing is written to the terminal behind its back)."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from pathlib import Path

import pytest

from picochat import logs
from picochat.cli import commands
from picochat.cli.main import main
from picochat.tui import app as tui_app

LINE_END = "logging is off for this run"


@pytest.fixture(autouse=True)
def fresh_logging():
    """Each test starts with no log configured and the default reporter, and leaves so."""
    root = logging.getLogger("picochat")

    def reset() -> None:
        for handler in list(root.handlers):
            root.removeHandler(handler)
            handler.close()
        logs._configured = None
        logs._off_line, logs._said = None, False
        logs.report_log_off_to(logs._to_stderr)

    reset()
    yield
    reset()


def assert_one_line(stderr: str, reason: str) -> None:
    assert "Traceback" not in stderr and "Logging error" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("picochat: cannot write the log ") and lines[0].endswith(
        f"({reason}): {LINE_END}"), stderr


def test_a_log_path_that_is_a_folder_is_one_line_and_the_turn_is_saved(run_cli, home):
    """At start-up: the file cannot be opened. (Before, the failure escaped into the turn's
    own error path and `ask` never returned.)"""
    (home / "data" / "picochat.log").mkdir(parents=True)
    done = run_cli("ask", "--session", "w", "the canary host is cn-west-12")
    assert done.status == 0, done.stderr
    assert "offline" in done.stdout
    assert_one_line(done.stderr, "Is a directory")
    history = run_cli("history", "--session", "w", "--json")
    assert history.status == 0 and "cn-west-12" in history.stdout


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_log_on_a_full_disk_is_one_line_and_the_turn_is_saved(run_cli, home):
    """Mid-run: the file opens, then every write fails with ENOSPC (/dev/full)."""
    (home / "data").mkdir()
    (home / "data" / "picochat.log").symlink_to("/dev/full")
    done = run_cli("ask", "--session", "w", "hello", env={"PICOCHAT_LOG_LEVEL": "DEBUG"})
    assert done.status == 0, done.stderr
    assert_one_line(done.stderr, "No space left on device")
    history = run_cli("history", "--session", "w", "--json")
    assert history.status == 0 and "hello" in history.stdout


class FullDisk:
    """A stream whose writes fail as a full disk's do."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def close(self) -> None:
        pass


def test_a_write_that_fails_after_the_log_was_opened_turns_logging_off_once(tmp_path, capfd):
    log_file = tmp_path / "logs" / "picochat.log"
    said: list[str] = []
    logs.report_log_off_to(said.append)
    logs.setup_logging(log_file)
    log = logging.getLogger("picochat.test")
    log.info("before count=1")
    assert "before count=1" in log_file.read_text()
    assert logs.current_log_file() == log_file
    handler = logging.getLogger("picochat").handlers[0]
    handler.stream = FullDisk()  # the disk fills up
    for n in range(3):
        log.info("after count=%d", n)  # never raises into the code that logged
    assert said == [f"cannot write the log {log_file} (No space left on device): {LINE_END}"]
    assert logs.current_log_file() is None
    assert logs.where_details() == "the log could not be written"
    err = capfd.readouterr().err
    assert "Logging error" not in err and "Traceback" not in err


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EISDIR])
def test_a_log_file_that_cannot_be_opened_is_one_line_on_stderr(tmp_path, capfd, monkeypatch,
                                                                code):
    def refuse(self):
        raise OSError(code, os.strerror(code), self.baseFilename)

    monkeypatch.setattr(logs._PrivateFileHandler, "_open", refuse)
    logs.setup_logging(tmp_path / "picochat.log")
    log = logging.getLogger("picochat.test")
    log.warning("first count=1")
    log.error("second count=2")
    assert_one_line(capfd.readouterr().err, os.strerror(code))


def test_a_log_folder_that_cannot_be_made_is_the_same_one_line(tmp_path, capfd):
    (tmp_path / "a-file").write_text("")
    log_file = tmp_path / "a-file" / "log" / "picochat.log"
    logs.setup_logging(log_file)
    logging.getLogger("picochat.test").warning("count=1")
    logging.getLogger("picochat.test").warning("count=2")
    assert_one_line(capfd.readouterr().err, "Not a directory")


def test_the_app_shows_the_line_as_a_notice_and_writes_nothing_behind_textual(
        home, monkeypatch, capfd):
    """The line arrives while the app runs, from its own loop and from a thread (database
    writes log from the store's thread): one notice, and nothing on the terminal, during the
    app or after it."""
    (home / "data" / "picochat.log").mkdir(parents=True)
    monkeypatch.setattr(commands, "has_terminal", lambda: True)
    notices: list[str] = []

    async def drive(app) -> None:
        async with app.run_test(size=(100, 30), notifications=True) as pilot:
            await pilot.pause()
            log = logging.getLogger("picochat.test")
            log.warning("on the loop count=1")
            await asyncio.to_thread(log.warning, "from a thread count=2")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while not any(LINE_END in str(n.message) for n in app._notifications):
                assert loop.time() < deadline, "no notice"
                await pilot.pause(0.02)
            notices.extend(str(n.message) for n in app._notifications
                           if LINE_END in str(n.message))

    monkeypatch.setattr(tui_app.PicochatApp, "run", lambda self: asyncio.run(drive(self)))
    assert main([]) == 0
    assert len(notices) == 1 and "(Is a directory)" in notices[0]
    err = capfd.readouterr().err
    assert "Logging error" not in err and "Traceback" not in err and LINE_END not in err


def test_a_line_held_for_the_app_is_shown_once_it_is_up(home, monkeypatch, capfd):
    """A failure before the app's screen is up waits for it, then is a notice."""
    (home / "data" / "picochat.log").mkdir(parents=True)
    monkeypatch.setattr(commands, "has_terminal", lambda: True)
    logs.report_log_off_to(None)  # what the CLI does before it starts the app
    logs.setup_logging(Path(home / "data" / "picochat.log"))
    logging.getLogger("picochat.test").warning("before the app count=1")
    assert capfd.readouterr().err == ""
    shown: list[str] = []

    async def drive(app) -> None:
        async with app.run_test(size=(100, 30), notifications=True) as pilot:
            await pilot.pause()
            shown.extend(str(n.message) for n in app._notifications)

    monkeypatch.setattr(tui_app.PicochatApp, "run", lambda self: asyncio.run(drive(self)))
    assert main([]) == 0
    assert sum(LINE_END in s for s in shown) == 1
    assert LINE_END not in capfd.readouterr().err

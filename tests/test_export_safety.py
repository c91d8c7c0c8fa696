"""`picochat export -o` and the app's `/export` write only a regular file or a new file in an
existing folder, never picochat's own files (issue 18, item 3): a refusal is one line, exit 2,
and the target and the database are left exactly as they were."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from picochat.storage import open_store
from tests.helpers.tui import SIZE, make_app, say, texts
from tests.helpers.waiting import WAIT_S, settle
from tests.helpers.storage import append_message
from picochat.tui.chat import Notice


@pytest.fixture
def chatted(run_cli, home: Path) -> Path:
    """One saved turn; returns the database path."""
    done = run_cli("ask", "--session", "w", "the canary host is cn-west-12")
    assert done.status == 0, done.stderr
    return home / "data" / "picochat.db"


def export(run_cli, target: Path | str):
    # the deadline only fails a hang (a FIFO opened for writing): a Python start on a busy
    # machine takes seconds, so it is the suite's failure bound, not a guess at the run time
    return run_cli("export", "--session", "w", "--format", "md", "-o", str(target),
                   timeout=WAIT_S)


def assert_database_intact(database: Path) -> None:
    store = open_store(database)
    try:
        session = store.find_session("w")
        assert session is not None
        assert [m.content for m in store.history(session.id)][0] == "the canary host is cn-west-12"
    finally:
        store.close()


def assert_refused(result, *words: str) -> None:
    assert result.status == 2, result
    assert result.stderr.startswith("picochat: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr


def snapshot(path: Path) -> tuple[int, int, bytes | None]:
    """An entry's kind, inode and (for a regular file, read without following a link) bytes."""
    info = os.lstat(path)
    body = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
    return info.st_mode, info.st_ino, body


# --- picochat's own files ----------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["{db}", "{data}/../data/picochat.db", "{data}/./picochat.db"])
def test_the_live_database_is_refused_however_it_is_spelled(run_cli, chatted, spelling):
    target = spelling.format(db=chatted, data=chatted.parent)
    before = chatted.read_bytes()
    assert_refused(export(run_cli, target), "picochat's own file")
    assert chatted.read_bytes() == before
    assert_database_intact(chatted)


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_the_wal_and_shm_files_are_refused_even_before_they_exist(run_cli, chatted, suffix):
    target = chatted.with_name(chatted.name + suffix)
    assert not target.exists()  # SQLite removed them when the last connection closed
    assert_refused(export(run_cli, target), "picochat's own file")
    assert not target.exists()  # a stray -wal would be read as the database's journal
    assert_database_intact(chatted)


def test_an_existing_wal_file_is_refused_while_picochat_holds_it_open(run_cli, chatted):
    store = open_store(chatted)  # another picochat running: the -wal exists
    try:
        store.create_session("other")
        wal = chatted.with_name(chatted.name + "-wal")
        before = snapshot(wal)
        assert_refused(export(run_cli, wal), "picochat's own file")
        assert snapshot(wal) == before
    finally:
        store.close()
    assert_database_intact(chatted)


def test_a_hard_link_to_the_database_is_refused(run_cli, chatted, tmp_path):
    link = tmp_path / "innocent.md"
    os.link(chatted, link)
    before = chatted.read_bytes()
    assert_refused(export(run_cli, link), "picochat's own file")
    assert chatted.read_bytes() == before and os.path.samefile(link, chatted)
    assert_database_intact(chatted)


def test_the_log_and_the_config_file_are_refused(run_cli, chatted, config_file):
    config_file.parent.mkdir(parents=True)
    config_file.write_text('# my settings\n')
    log = chatted.with_name("picochat.log")
    for target in (log, config_file):
        before = target.read_bytes()
        assert_refused(export(run_cli, target), "picochat's own file")
        assert target.read_bytes() == before


# --- things that are not a regular file --------------------------------------------------------


def test_a_symlink_is_refused_and_the_file_it_points_at_is_unchanged(run_cli, chatted, tmp_path):
    real = tmp_path / "notes.txt"
    real.write_text("my notes\n")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    assert_refused(export(run_cli, link), "symbolic link")
    assert link.is_symlink() and real.read_text() == "my notes\n"
    assert_database_intact(chatted)


def test_a_symlink_to_the_database_is_refused(run_cli, chatted, tmp_path):
    link = tmp_path / "db-link"
    link.symlink_to(chatted)
    assert_refused(export(run_cli, link))
    assert link.is_symlink()
    assert_database_intact(chatted)


def test_a_fifo_is_refused_without_hanging(run_cli, chatted, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert_refused(export(run_cli, fifo), "FIFO")  # run_cli's timeout fails a hang
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mknod needs root")
def test_a_device_node_is_refused_and_stays_a_device(run_cli, chatted, tmp_path):
    node = tmp_path / "null"  # a private /dev/null twin: never touch the real /dev
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    before = snapshot(node)
    assert_refused(export(run_cli, node), "device")
    assert snapshot(node) == before and stat.S_ISCHR(before[0])


def test_a_folder_is_refused(run_cli, chatted, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    assert_refused(export(run_cli, folder), "folder")
    assert list(folder.iterdir()) == []


def test_a_missing_folder_is_refused_and_nothing_is_created(run_cli, chatted, tmp_path):
    target = tmp_path / "no" / "such" / "x.md"
    assert_refused(export(run_cli, target), "no such folder")
    assert not (tmp_path / "no").exists()


# --- what still works --------------------------------------------------------------------------


def test_a_new_file_in_an_existing_folder_is_written_0600(run_cli, chatted, tmp_path):
    target = tmp_path / "fresh.md"
    done = export(run_cli, target)
    assert done.status == 0, done.stderr
    assert "cn-west-12" in target.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_an_existing_regular_file_is_replaced(run_cli, chatted, tmp_path):
    target = tmp_path / "old.md"
    target.write_text("last week's export\n")
    done = export(run_cli, target)
    assert done.status == 0, done.stderr
    assert "cn-west-12" in target.read_text() and "last week" not in target.read_text()


# --- the app's /export: the same check, no folder created --------------------------------------


async def test_app_export_refuses_what_the_cli_refuses_and_creates_no_folder(store, tmp_path):
    app = make_app(store)
    append_message(store, app.session.id, "user", "the canary host is cn-west-12", turn_id="x1")
    real = tmp_path / "notes.txt"
    real.write_text("my notes\n")
    (tmp_path / "link.md").symlink_to(real)
    db_before = store.path.read_bytes()
    async with app.run_test(size=SIZE) as pilot:
        def failed() -> list[str]:
            return [t for t in texts(app, Notice) if "export failed" in t]

        for i, target in enumerate((tmp_path / "missing" / "dir" / "x.md", store.path,
                                    store.path.with_name("picochat.db-wal"),
                                    tmp_path / "link.md")):
            await say(pilot, f"/export md {target}")
            # each refusal answers with its own line before the next command is typed
            await settle(pilot, app, lambda: len(failed()) > i,
                         what=f"no answer to /export {target}")
        notices = failed()
        await say(pilot, f"/export md {tmp_path / 'ok.md'}")
        await settle(pilot, app, lambda: any("Exported" in t for t in texts(app, Notice)),
                     what="the last export never said it was done")
    assert len(notices) == 4, notices
    assert "no such folder" in notices[0] and "picochat's own file" in notices[1]
    assert "picochat's own file" in notices[2] and "symbolic link" in notices[3]
    assert not (tmp_path / "missing").exists()
    assert real.read_text() == "my notes\n"
    assert store.path.read_bytes()[:16] == db_before[:16] == b"SQLite format 3\x00"
    assert [m.content for m in store.history(app.session.id)][0] == "the canary host is cn-west-12"
    assert "cn-west-12" in (tmp_path / "ok.md").read_text()


async def test_app_export_asks_before_it_replaces_a_file(store, tmp_path):
    from picochat.tui.screens import ConfirmScreen

    app = make_app(store)
    append_message(store, app.session.id, "user", "the canary host is cn-west-12", turn_id="x1")
    mine = tmp_path / "notes.md"
    mine.write_text("my own notes\n")
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, f"/export md {mine}")
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen),
                     what="no question before replacing the file")
        await pilot.press("n")
        await settle(pilot, app, lambda: any("Not exported" in t for t in texts(app, Notice)))
        assert mine.read_text() == "my own notes\n"
        await say(pilot, f"/export md {mine}")
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await settle(pilot, app, lambda: any("Exported" in t for t in texts(app, Notice)))
    assert "cn-west-12" in mine.read_text()

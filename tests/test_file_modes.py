"""Conversations are no other local user's business (issue 18, item 6): the folders picochat
creates are 0700 and the database, its -wal and -shm and the log are 0600, even under the
usual umask of 022 that would otherwise make them world-readable."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from picochat.storage import open_store


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def umask_022():
    """The common default, set explicitly: under 077 every file would be private anyway."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_ask_creates_a_private_data_folder_database_and_log(run_cli, home, monkeypatch, umask_022):
    data = home / "nested" / "deeper" / "data"  # picochat creates every missing folder
    monkeypatch.setenv("PICOCHAT_DATA_DIR", str(data))
    done = run_cli("ask", "--session", "w", "the canary host is cn-west-12")
    assert done.status == 0, done.stderr
    for folder in (home / "nested", home / "nested" / "deeper", data):
        assert mode(folder) == 0o700, folder
    assert mode(data / "picochat.db") == 0o600
    assert mode(data / "picochat.log") == 0o600


def test_default_platform_folders_are_private_too(run_cli, home, monkeypatch, umask_022):
    """Without PICOCHAT_DATA_DIR the log lives in its own folder (XDG state dir on Linux)."""
    if os.name != "posix" or os.uname().sysname != "Linux":
        pytest.skip("XDG folders are Linux's")
    monkeypatch.delenv("PICOCHAT_DATA_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "xdg-data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "xdg-state"))
    done = run_cli("ask", "--session", "w", "hello")
    assert done.status == 0, done.stderr
    data, log_dir = home / "xdg-data" / "picochat", home / "xdg-state" / "picochat" / "log"
    assert mode(data) == 0o700 and mode(log_dir) == 0o700 and mode(log_dir.parent) == 0o700
    assert mode(data / "picochat.db") == 0o600
    assert mode(log_dir / "picochat.log") == 0o600


def test_wal_and_shm_are_private_while_picochat_has_the_database_open(tmp_path, umask_022):
    database = tmp_path / "data" / "picochat.db"
    store = open_store(database)
    try:
        store.create_session("w")  # a write: the -wal and -shm exist until the last close
        for name in ("picochat.db", "picochat.db-wal", "picochat.db-shm"):
            assert mode(database.with_name(name)) == 0o600, name
    finally:
        store.close()


def test_a_folder_the_user_made_keeps_its_mode(run_cli, home, umask_022):
    """picochat does not chmod a folder it did not create; its own files are still 0600."""
    data = home / "data"
    data.mkdir(mode=0o750)
    done = run_cli("ask", "--session", "w", "hello")
    assert done.status == 0, done.stderr
    assert mode(data) == 0o750
    assert mode(data / "picochat.db") == 0o600 and mode(data / "picochat.log") == 0o600


def older_database(database: Path) -> None:
    """A database as an older picochat (or any umask 022 process) left it: 0644."""
    open_store(database).close()
    os.chmod(database, 0o644)


def test_a_database_an_older_picochat_left_world_readable_is_made_private(run_cli, home,
                                                                          umask_022):
    database = home / "data" / "picochat.db"
    older_database(database)
    assert mode(database) == 0o644
    done = run_cli("ask", "--session", "w", "hello")
    assert done.status == 0, done.stderr
    assert mode(database) == 0o600


def test_its_wal_and_shm_left_by_an_older_picochat_are_made_private_too(tmp_path, umask_022):
    import sqlite3

    database = tmp_path / "data" / "picochat.db"
    older_database(database)
    older = sqlite3.connect(database, isolation_level=None)  # an older picochat still running
    try:
        older.execute("INSERT INTO sessions (id, name, created_at, updated_at) "
                      "VALUES ('s_old', 'old', 1, 1)")
        family = [database.with_name(database.name + s) for s in ("-wal", "-shm")]
        for path in family:
            os.chmod(path, 0o644)
        store = open_store(database)
        try:
            for path in (database, *family):
                assert mode(path) == 0o600, path.name
            assert store.find_session("old") is not None
        finally:
            store.close()
    finally:
        older.close()


def test_a_database_reached_through_a_symlink_is_not_chmodded(tmp_path, umask_022):
    """picochat tightens only the file it names itself: never the target of a link."""
    elsewhere = tmp_path / "elsewhere" / "shared.db"
    older_database(elsewhere)
    database = tmp_path / "data" / "picochat.db"
    database.parent.mkdir()
    database.symlink_to(elsewhere)
    open_store(database).close()
    assert mode(elsewhere) == 0o644


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a file to another user needs root")
def test_a_database_another_user_owns_keeps_its_mode(tmp_path, umask_022):
    database = tmp_path / "data" / "picochat.db"
    older_database(database)
    os.chown(database, 65534, 65534)  # nobody's
    open_store(database).close()
    assert mode(database) == 0o644


def test_a_log_an_older_picochat_left_world_readable_is_made_private(run_cli, home, umask_022):
    log_file = home / "data" / "picochat.log"
    log_file.parent.mkdir(mode=0o700)
    log_file.write_text("2025-01-01 00:00:00 INFO picochat.cli command=ask\n")
    os.chmod(log_file, 0o644)
    done = run_cli("ask", "--session", "w", "hello")
    assert done.status == 0, done.stderr
    assert mode(log_file) == 0o600 and "command=ask" in log_file.read_text()

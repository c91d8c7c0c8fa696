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

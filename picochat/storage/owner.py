"""Whether the process that wrote a draft still runs, told by a lock it holds.

Each process that saves a draft holds an exclusive `flock` on its own file in a folder beside
the database (`picochat.db.owners/<token>`) for as long as it runs; the kernel drops the lock
when the process ends, however it ends. Another process tells the owner alive if it cannot
take that lock. Unlike a pid, this holds across pid namespaces (a container sharing the data
folder) and over pid reuse.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import secrets
import threading
from pathlib import Path

from picochat.fsutil import make_private_dir

_held: dict[Path, tuple[str, int]] = {}  # folder -> (token, fd): one lock per process
_guard = threading.Lock()


def owners_dir(database: Path) -> Path:
    return database.with_name(database.name + ".owners")


def my_token(database: Path) -> str | None:
    """This process's token, its lock taken on first use; None where no lock can be held (a
    read-only folder): liveness then falls back to the pid."""
    folder = owners_dir(database)
    with _guard:
        if folder in _held and _held[folder][1] >= 0:
            return _held[folder][0]
        token = secrets.token_hex(8)
        try:
            make_private_dir(folder)
            fd = os.open(folder / token, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None
        if not _held:
            atexit.register(_release_all)
        _held[folder] = (token, fd)
        _sweep(folder, token)
        return token


def _sweep(folder: Path, mine: str) -> None:
    """Remove the files of owners that ended without removing theirs (killed): a file no
    one holds is no one's. The folder stays as small as the number of running picochats."""
    try:
        names = [n for n in os.listdir(folder) if n != mine and not n.startswith(".")]
    except OSError:
        return
    for name in names:
        owner_alive(folder.parent / folder.name.removesuffix(".owners"), name)


def _release_all() -> None:
    """At a clean exit: this process's file goes, and the folder with it when it is empty."""
    for folder, (token, fd) in list(_held.items()):
        try:
            os.unlink(folder / token)
            os.close(fd)
            os.rmdir(folder)
        except OSError:
            pass
    _held.clear()


def owner_alive(database: Path, token: str) -> bool | None:
    """True: its owner holds the lock; False: it ended (the file is removed); None: cannot
    tell (no such file), so the caller falls back to the pid."""
    if not token or "/" in token or token.startswith("."):
        return None
    path = owners_dir(database) / token
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        try:  # a second open file, even in the owner's process, cannot take a held lock
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return None
        try:
            os.unlink(path)
        except OSError:
            pass
        return False
    finally:
        os.close(fd)

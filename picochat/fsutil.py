"""File writes that are all-or-nothing (a crash leaves the old file or the new one, never half),
folders only their owner can read, and the one check that keeps an export off picochat's own
files and off anything that is not a plain file."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterable

from picochat.errors import UsageError

PRIVATE_DIR = 0o700


def atomic_write_text(path: Path, text: str, *, make_parents: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), make_parents=make_parents)


def atomic_write_bytes(path: Path, data: bytes, *, make_parents: bool = True) -> None:
    """Write `data` to a 0600 temp file beside `path`, then rename it over `path`: the rename
    replaces whatever entry `path` names (a symlink is replaced, never followed).
    `make_parents=False` for a path the user typed: a missing folder is an error, not created."""
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def make_private_dir(path: Path) -> None:
    """Create `path` and any missing parents 0700 (as the XDG spec asks); folders that already
    exist keep the mode their owner gave them."""
    missing: list[Path] = []
    for folder in (path, *path.parents):
        if folder.is_dir():
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, PRIVATE_DIR)
        except FileExistsError:
            if not folder.is_dir():  # a file where a folder should be: say so, not "exists"
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR),
                                         str(folder)) from None


def make_owner_only(path: Path) -> bool:
    """Take group and other access off `path` if it is a regular file this user owns: a
    database or log written by an older picochat, or under umask 022, was world-readable.
    The owner's own bits stay (a file made read-only stays so). A symlink is never followed,
    nor anything but a regular file opened; anything missing or unreadable is left alone.
    Returns whether the mode changed."""
    if os.name != "posix":
        return False
    try:
        before = os.lstat(path)
        if not _ours_and_open_to_others(before):
            return False
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        info = os.fstat(fd)  # the file opened is the one checked, not a swapped-in other
        if (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino) or \
                not _ours_and_open_to_others(info):
            return False
        os.fchmod(fd, stat.S_IMODE(info.st_mode) & ~0o077)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _ours_and_open_to_others(info: os.stat_result) -> bool:
    return (stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
            and stat.S_IMODE(info.st_mode) & 0o077 != 0)


def database_family(database: Path) -> tuple[Path, ...]:
    """The database and the files SQLite keeps beside it."""
    return (database, *(database.with_name(database.name + s)
                        for s in ("-wal", "-shm", "-journal")))


def check_export_target(target: Path, database: Path, also: Iterable[Path] = ()) -> None:
    """Raise UsageError unless `target` is an existing regular file or a new name in an existing
    folder, and is neither the database (with its -wal, -shm, -journal) nor any of `also`
    (picochat's other own files), by name or by identity (another spelling, a hard link).
    A symlink is refused, not followed: `-o` names the file that gets replaced. Nothing here
    opens `target`, so a FIFO cannot block."""
    hint = "choose another file name"
    try:
        info: os.stat_result | None = os.lstat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise UsageError(f"{target}: cannot export there: {exc.strerror}", hint) from None
    if info is None:
        parent = target.parent
        if not parent.exists():
            raise UsageError(f"{parent}: no such folder", "create it first, or fix the path")
        if not parent.is_dir():
            raise UsageError(f"{parent}: not a folder", "fix the path")
    elif not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{target}: {_kind(info.st_mode)}; an export only writes a regular "
                         "file", hint)
    for own in (*database_family(database), *also):
        if _same(target, info, own):
            raise UsageError(f"{target}: is {own}, picochat's own file; nothing written", hint)


def _same(target: Path, info: os.stat_result | None, own: Path) -> bool:
    """`target` names `own`: the same resolved path, or the same file (device and inode)."""
    try:
        if target.parent.resolve() / target.name == own.parent.resolve() / own.name:
            return True
        if info is None:
            return False
        other = os.stat(own)
    except (OSError, RuntimeError):  # `own` missing, or a symlink loop
        return False
    return (info.st_dev, info.st_ino) == (other.st_dev, other.st_ino)


def _kind(mode: int) -> str:
    """What a non-regular directory entry is, for the refusal line."""
    if stat.S_ISDIR(mode):
        return "is a folder"
    if stat.S_ISLNK(mode):
        return "is a symbolic link"
    if stat.S_ISFIFO(mode):
        return "is a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device"
    if stat.S_ISSOCK(mode):
        return "is a socket"
    return "is not a regular file"


def write_export(target: Path, text: str, database: Path, also: Iterable[Path] = ()) -> None:
    """Check `target` (see `check_export_target`), then write `text` to it atomically, 0600,
    creating no folder."""
    check_export_target(target, database, also)
    atomic_write_text(target, text, make_parents=False)

"""`read_file`: read-only, confined to the directory picochat was started in.

Refused: `..` components, anything that resolves outside the root (symlinks included), and
anything that is not a regular file (devices, FIFOs, sockets, directories), checked before the
file is opened so a FIFO can never block the turn. Text only; output bounded.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePath
from typing import Any, Mapping

from picochat.tools.access import FileAccess, secret_reason
from picochat.tools.base import Tool, ToolContext, ToolError, int_arg, str_arg

DEFAULT_BYTES = 64 * 1024
MAX_BYTES = 256 * 1024


def resolve_inside(root: Path, requested: str) -> Path:
    """The real path of `requested` under `root`, or a `ToolError` saying why not."""
    if "\x00" in requested:
        raise ToolError("the path contains a NUL byte")
    if ".." in PurePath(requested).parts:
        raise ToolError(f"{requested}: `..` is not allowed; give a path inside {root}")
    base = root.resolve()
    candidate = Path(requested).expanduser()
    full = candidate if candidate.is_absolute() else base / candidate
    try:
        real = full.resolve(strict=True)
    except FileNotFoundError:
        raise ToolError(f"{requested}: no such file") from None
    except (OSError, RuntimeError) as exc:  # symlink loops, permissions
        raise ToolError(f"{requested}: cannot be resolved ({exc.__class__.__name__})") from None
    if real != base and base not in real.parents:
        raise ToolError(f"{requested}: outside the folders read_file may read ({base})")
    return real


def resolve_in(access: FileAccess, requested: str) -> Path:
    """The real path of `requested` in one of the roots (a relative path: the first), never a
    secret or picochat's own files; a `ToolError` saying why not."""
    if not access.on:
        raise ToolError(access.off_reason or "read_file is off")
    if why := secret_reason(PurePath(requested)):
        raise ToolError(f"{requested}: refused, {why}")
    candidate = Path(requested).expanduser()
    roots = access.roots
    if candidate.is_absolute():
        real = _real_or_none(candidate)
        roots = tuple(r for r in roots if real is not None and (real == r or r in real.parents)) \
            or roots[:1]
    path = resolve_inside(roots[0], requested)
    if why := secret_reason(path):
        raise ToolError(f"{requested}: refused, {why}")
    if any(path == p or p in path.parents for p in access.private):
        raise ToolError(f"{requested}: refused, picochat's own data or config")
    return path


def _real_or_none(path: Path) -> Path | None:
    try:
        return path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None


def _read_file(args: Mapping[str, Any], ctx: ToolContext) -> str:
    requested = str_arg(args, "path")
    limit = int_arg(args, "max_bytes", DEFAULT_BYTES, 1, MAX_BYTES)
    path = resolve_in(ctx.files, requested)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ToolError(f"{requested}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{requested}: is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{requested}: not a regular file (device, FIFO or socket)")
    try:
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags)
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise ToolError(f"{requested}: {exc.strerror}") from None
    if b"\x00" in data[:8192]:
        raise ToolError(f"{requested}: a binary file ({info.st_size:,} bytes); only text is read")
    cut = len(data) > limit
    text = data[:limit].decode("utf-8", errors="replace")
    if "\ufffd" in text[:4096] and text[:4096].count("\ufffd") > 16:
        raise ToolError(f"{requested}: not UTF-8 text ({info.st_size:,} bytes)")
    note = (f"\n[… cut at {limit:,} of {info.st_size:,} bytes; ask with a larger max_bytes "
            f"(up to {MAX_BYTES:,})]" if cut else "")
    return text + note


READ_FILE = Tool(
    "read_file",
    "Read a text file inside the directory picochat was started in (read-only).",
    {"type": "object", "properties": {
        "path": {"type": "string", "description": "a path relative to that directory"},
        "max_bytes": {"type": "integer", "description": f"read at most this many bytes "
                      f"(default {DEFAULT_BYTES}, up to {MAX_BYTES})"}},
     "required": ["path"]},
    _read_file,
)

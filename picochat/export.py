"""A session exported as Markdown or JSON: one way for `picochat export` and the app's
`/export`, so both write the same text, refuse the same targets and word a failed write alike.

Below both front ends: it imports no textual or rich.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from picochat import render
from picochat.errors import PicochatError
from picochat.fsutil import write_export
from picochat.messages import Session
from picochat.session import Branch, SessionRecord, read_branches, read_record
from picochat.storage.store import Store

FORMATS = ("md", "json")


@dataclass(frozen=True)
class SessionExport:
    session: Session   # as stored when the export was made (its name, its active checkpoint)
    messages: int      # how many raw messages it holds
    text: str


def export_session(store: Store, session_id: str, fmt: str) -> SessionExport:
    """The whole raw history with its checkpoints, as `fmt` ("md" or "json")."""
    return export_record(read_record(store, session_id), fmt)


def export_branches(store: Store, session_id: str, fmt: str) -> SessionExport:
    """Every branch of the session (`--all-branches`), oldest first, each as its own export
    (its whole path, its summaries), under a line saying where it leaves the one before."""
    return export_all(read_branches(store, session_id), fmt)


def export_all(records: list[tuple[Branch, SessionRecord]], fmt: str) -> SessionExport:
    """`export_branches` of the records already read (the app reads them off its loop)."""
    import json

    parts = [(b, export_record(r, fmt)) for b, r in records]
    seqs = {m.seq for _, r in records for m in r.messages}
    session = next((r.session for b, r in records if b.current), records[0][1].session)
    if fmt == "md":
        text = "\n---\n\n".join(f"# {branch_heading(b)}\n\n{done.text}" for b, done in parts)
    else:
        text = json.dumps({"branches": [
            {"branch": b.id, "parent": b.parent, "fork_seq": b.fork_seq, "current": b.current,
             **json.loads(done.text)} for b, done in parts]}, ensure_ascii=False, indent=2) + "\n"
    return SessionExport(session, len(seqs), text)


def branch_heading(branch: Branch) -> str:
    return f"Branch {branch.id} ({branch.where}{', in use' if branch.current else ''})"


def export_record(record: SessionRecord, fmt: str) -> SessionExport:
    r = record
    text = (render.export_markdown(r.session, r.messages, r.checkpoints, r.pins) if fmt == "md"
            else render.export_json(r.session, r.messages, r.checkpoints, r.pins))
    return SessionExport(r.session, len(r.messages), text)


def export_to_file(store: Store, session_id: str, fmt: str, target: Path,
                   also: Iterable[Path] = ()) -> SessionExport:
    """Write the export to `target`, atomically, creating no folder. Refused (UsageError):
    picochat's own files (the database, `also`) and anything but a regular or new file; a
    write that fails is one PicochatError line naming the file and the reason."""
    return write_record(read_record(store, session_id), fmt, target, store.path, also)


def write_record(record: SessionRecord, fmt: str, target: Path, database: Path,
                 also: Iterable[Path] = ()) -> SessionExport:
    """`export_to_file` of a record already read (the app reads it off its loop)."""
    return write_export_text(export_record(record, fmt), target, database, also)


def write_export_text(done: SessionExport, target: Path, database: Path,
                      also: Iterable[Path] = ()) -> SessionExport:
    """An export written to `target` as `export_to_file` writes one."""
    try:
        write_export(target, done.text, database, also=also)
    except OSError as exc:
        raise PicochatError(f"{target}: cannot write the export: {exc.strerror}") from None
    return done

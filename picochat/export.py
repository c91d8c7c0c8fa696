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
from picochat.storage.store import Store

FORMATS = ("md", "json")


@dataclass(frozen=True)
class SessionExport:
    session: Session   # as stored when the export was made (its name, its active checkpoint)
    messages: int      # how many raw messages it holds
    text: str


def export_session(store: Store, session_id: str, fmt: str) -> SessionExport:
    """The whole raw history with its checkpoints, as `fmt` ("md" or "json")."""
    session = store.session(session_id)
    messages = store.history(session_id)
    checkpoints = store.checkpoints(session_id)
    pins = store.pins(session_id)
    text = (render.export_markdown(session, messages, checkpoints, pins) if fmt == "md"
            else render.export_json(session, messages, checkpoints, pins))
    return SessionExport(session, len(messages), text)


def export_to_file(store: Store, session_id: str, fmt: str, target: Path,
                   also: Iterable[Path] = ()) -> SessionExport:
    """Write the export to `target`, atomically, creating no folder. Refused (UsageError):
    picochat's own files (the database, `also`) and anything but a regular or new file; a
    write that fails is one PicochatError line naming the file and the reason."""
    done = export_session(store, session_id, fmt)
    try:
        write_export(target, done.text, store.path, also=also)
    except OSError as exc:
        raise PicochatError(f"{target}: cannot write the export: {exc.strerror}") from None
    return done

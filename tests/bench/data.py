"""Synthetic sessions, built through the real storage API: turns of varied prose, every fifth
turn with a tool call and its result, and a checkpoint where a case needs one."""

from __future__ import annotations

import random
from pathlib import Path

from picochat import tokens
from picochat.messages import NewCheckpoint, NewMessage
from picochat.storage.store import Store, open_store
from picochat.summary_contract import HEADINGS
from tests.helpers.storage import append_messages

WORDS = ("port service deploy canary host config build cache token window budget summary "
         "checkpoint retry queue worker session stream answer question error timeout cluster "
         "region replica index schema migration rollback latency throughput release").split()
BATCH = 5_000


def text(rng: random.Random, n_words: int, serial: int) -> str:
    body = " ".join(rng.choice(WORDS) for _ in range(n_words))
    return f"{body.capitalize()} (note {serial}: host cn-{serial % 97} port {8000 + serial % 997})."


def turn(rng: random.Random, serial: int, words: int) -> list[NewMessage]:
    turn_id = f"t{serial}"
    out = [NewMessage("user", text(rng, words, serial), turn_id=turn_id)]
    if serial % 5 == 4:
        call = {"id": f"c{serial}", "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'}}
        out.append(NewMessage("assistant", "", tool_calls=(call,), turn_id=turn_id))
        out.append(NewMessage("tool", text(rng, words * 2, serial), tool_call_id=f"c{serial}",
                              name="read_file", turn_id=turn_id, tool_status="ok"))
    out.append(NewMessage("assistant", text(rng, words, serial + 1), turn_id=turn_id))
    return out


def fill(store: Store, session_id: str, messages: int, words: int = 30,
         seed: int = 7) -> list[int]:
    """Append whole turns until the session holds at least `messages` messages; the seqs of
    the user messages that start the turns."""
    rng = random.Random(seed)
    have, batch, starts = store.max_seq(session_id), [], []
    # turn ids go on from the last call's: a turn id used twice makes the rows between one
    # unit (cutpoints: interleaved turns), and a 200k-token session one unfoldable turn
    serial = have

    def flush() -> None:
        starts.extend(m.seq for m in append_messages(store, session_id, batch)
                      if m.role == "user")
        batch.clear()

    while have < messages:
        for m in turn(rng, serial, words):
            batch.append(m)
            have += 1
        serial += 1
        if len(batch) >= BATCH:
            flush()
    if batch:
        flush()
    return starts


def summary(n_words: int = 600) -> str:
    rng = random.Random(1)
    per = max(1, n_words // len(HEADINGS))
    return "\n\n".join(f"## {h}\n{text(rng, per, i)}" for i, h in enumerate(HEADINGS))


def checkpoint(store: Store, session_id: str, first_retained_seq: int) -> None:
    """Make a checkpoint active whose raw tail starts at `first_retained_seq` (a user turn)."""
    text_ = summary()
    snapshot = store.session(session_id)
    store.commit_context_checkpoint(session_id, snapshot.context_generation, NewCheckpoint(
        parent_checkpoint_id=snapshot.active_context_checkpoint_id, summary=text_,
        first_retained_seq=first_retained_seq, source_max_seq=first_retained_seq - 1,
        trigger_reason="manual", provider_kind="offline", model="offline", tokens_before=0,
        tokens_after=tokens.count_text(text_)))


def session_with(folder: Path, name: str, messages: int, tail: int | None = None,
                 words: int = 30) -> tuple[Store, str]:
    """A store in `folder` holding one session of `messages` messages (and a checkpoint)."""
    store = open_store(folder / f"{name}.db")
    sid = store.create_session(name).id
    starts = fill(store, sid, messages, words)
    if tail is not None:
        total = store.max_seq(sid)
        checkpoint(store, sid, max(s for s in starts if s <= total - tail + 1))
    return store, sid

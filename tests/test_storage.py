"""Storage tests (DESIGN.md D6, D12, D20.3; contract "Database"): what a user would notice."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from picochat.errors import NameTaken, SessionNotFound, StaleGeneration, StorageError
from picochat.messages import NewCheckpoint
from picochat.storage import open_store
from picochat.storage.schema import MIGRATIONS, SCHEMA_VERSION
from tests.helpers.storage import append_message

# DESIGN.md D6.2, column for column, in order
CHECKPOINT_COLUMNS = [
    "id", "session_id", "generation", "parent_checkpoint_id", "summary", "first_retained_seq",
    "source_max_seq", "trigger_reason", "provider_kind", "model", "tokens_before",
    "tokens_after", "degraded", "created_at",
]


def new_cp(first_retained_seq: int, summary: str = "the summary", source_max_seq: int = 0,
           parent: str | None = None) -> NewCheckpoint:
    return NewCheckpoint(parent_checkpoint_id=parent, summary=summary,
                         first_retained_seq=first_retained_seq, source_max_seq=source_max_seq,
                         trigger_reason="manual", provider_kind="offline", model="offline",
                         tokens_before=100, tokens_after=10)


def raw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None)
    return conn


def count(path: Path, sql: str, args: tuple = ()) -> int:
    conn = raw(path)
    try:
        return conn.execute(sql, args).fetchone()[0]
    finally:
        conn.close()


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def turn(store, sid: str, n: int, turn_id: str | None = None) -> list[int]:
    tid = turn_id if turn_id is not None else f"t{n}"
    a = append_message(store, sid, "user", f"question {n}", turn_id=tid)
    b = append_message(store, sid, "assistant", f"answer {n}", turn_id=tid)
    return [a.seq, b.seq]


# --- schema -----------------------------------------------------------------------------------


def test_new_file_gets_full_schema(tmp_path: Path) -> None:
    path = tmp_path / "new" / "picochat.db"
    store = open_store(path)
    try:
        conn = raw(path)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
        assert columns(conn, "context_checkpoints") == CHECKPOINT_COLUMNS
        session_cols = columns(conn, "sessions")
        assert "active_context_checkpoint_id" in session_cols
        assert "context_generation" in session_cols
        conn.close()
        # the store's own connection enforces foreign keys
        assert store.core._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        with pytest.raises(sqlite3.IntegrityError):
            store.core._conn.execute(
                "INSERT INTO context_checkpoints (id, session_id, generation, summary, "
                "first_retained_seq, source_max_seq, trigger_reason, provider_kind, model, "
                "tokens_before, tokens_after, created_at) "
                "VALUES ('cp', 's_nope', 1, 's', 1, 1, 'manual', 'p', 'm', 1, 1, 1)")
    finally:
        store.close()


def test_context_generation_defaults_to_zero(store) -> None:
    s = store.create_session()
    assert s.context_generation == 0
    assert s.active_context_checkpoint_id is None


def test_migration_from_version_1_keeps_messages(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = raw(path)
    for statement in [s for s in MIGRATIONS[0].split(";") if s.strip()]:
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO sessions (id, name, created_at, updated_at, model) "
                 "VALUES ('s_old', 'legacy', 1, 2, 'gpt')")
    rows = [
        ("s_old", 1, "user", "héllo — 世界\n  trailing  ", None, None, None, "t1", None,
         "complete", 5, 10),
        ("s_old", 2, "assistant", "", '[{"id": "c1", "type": "function", "function": '
         '{"name": "ls", "arguments": "{}"}}]', None, None, "t1", None, "complete", 7, 11),
        ("s_old", 3, "tool", "file.txt\x00bin", None, "c1", "ls", "t1", "ok", "complete", 3, 12),
        ("s_old", 5, "assistant", "done", None, None, None, "t1", None, "interrupted", 2, 13),
    ]
    cols = ("session_id, seq, role, content, tool_calls, tool_call_id, name, turn_id, "
            "tool_status, status, tokens, created_at")
    conn.executemany(f"INSERT INTO messages ({cols}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    before = conn.execute(f"SELECT id, {cols} FROM messages ORDER BY seq").fetchall()
    conn.close()

    store = open_store(path)
    try:
        conn = raw(path)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert columns(conn, "context_checkpoints") == CHECKPOINT_COLUMNS
        assert {"active_context_checkpoint_id", "context_generation"} <= set(
            columns(conn, "sessions"))
        after = conn.execute(f"SELECT id, {cols} FROM messages ORDER BY seq").fetchall()
        assert after == before
        conn.close()

        s = store.session("s_old")
        assert s.name == "legacy" and s.context_generation == 0
        assert s.active_context_checkpoint_id is None
        assert [m.seq for m in store.history("s_old")] == [1, 2, 3, 5]
        m = append_message(store, "s_old", "user", "new")
        assert m.seq == 6
    finally:
        store.close()


# --- seq --------------------------------------------------------------------------------------


def test_seq_never_reused_across_reopen_clear_and_undo(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    store = open_store(path)
    sid = store.create_session().id
    seen = turn(store, sid, 1)
    store.close()

    store = open_store(path)
    seen += turn(store, sid, 2)
    store.clear_context(sid)
    seen += turn(store, sid, 3)
    undo = store.undo_last_turn(sid)
    assert undo.removed == (5, 6)
    seen.append(append_message(store, sid, "user", "after undo").seq)
    store.close()

    store = open_store(path)
    seen.append(append_message(store, sid, "user", "after reopen").seq)
    store.close()
    assert seen == list(range(1, 9))
    assert len(set(seen)) == len(seen)


def test_concurrent_appends_from_two_connections(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    a, b = open_store(path), open_store(path)
    try:
        sid = a.create_session().id
        errors: list[BaseException] = []
        seqs: list[int] = []
        lock = threading.Lock()

        def work(store, tag: str) -> None:
            try:
                for i in range(200):
                    m = append_message(store, sid, "user", f"{tag}{i}")
                    with lock:
                        seqs.append(m.seq)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(a, "a")),
                   threading.Thread(target=work, args=(b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors
        assert sorted(seqs) == list(range(1, 401))
        hist = a.history(sid)
        assert [m.seq for m in hist] == list(range(1, 401))
        assert sorted(m.content for m in hist) == sorted(
            [f"a{i}" for i in range(200)] + [f"b{i}" for i in range(200)])
    finally:
        a.close()
        b.close()


# --- failed transactions leave nothing behind ---------------------------------------------------


def test_append_to_missing_session_writes_nothing(store) -> None:
    with pytest.raises(SessionNotFound):
        append_message(store, "s_missing", "user", "hello")
    assert count(store.path, "SELECT COUNT(*) FROM messages") == 0


def test_append_with_bad_role_writes_nothing(store) -> None:
    sid = store.create_session().id
    with pytest.raises(ValueError):
        append_message(store, sid, "system", "nope")
    assert store.history(sid) == []


def test_stale_generation_commit_rolls_back(store) -> None:
    sid = store.create_session().id
    turn(store, sid, 1)
    turn(store, sid, 2)
    gen = store.session(sid).context_generation
    store.clear_context(sid)  # the candidate built on `gen` is now stale
    turn(store, sid, 3)
    before = store.session(sid)
    with pytest.raises(StaleGeneration):
        store.commit_context_checkpoint(sid, gen, new_cp(5))
    assert count(store.path, "SELECT COUNT(*) FROM context_checkpoints") == 0
    assert store.session(sid) == before
    assert store.checkpoints(sid) == []


def test_commit_with_boundary_not_a_message_rolls_back(store) -> None:
    sid = store.create_session().id
    turn(store, sid, 1)
    before = store.session(sid)
    with pytest.raises(StorageError):
        store.commit_context_checkpoint(sid, before.context_generation, new_cp(99))
    assert count(store.path, "SELECT COUNT(*) FROM context_checkpoints") == 0
    after = store.session(sid)
    assert after == before
    assert after.context_generation == before.context_generation
    assert after.active_context_checkpoint_id is None


def test_commit_checkpoint_is_atomic_with_pointer(store) -> None:
    sid = store.create_session().id
    turn(store, sid, 1)
    turn(store, sid, 2)
    cp = store.commit_context_checkpoint(sid, 0, new_cp(3, source_max_seq=4))
    s = store.session(sid)
    assert s.active_context_checkpoint_id == cp.id
    assert s.context_generation == 1 == cp.generation
    assert s.last_compressed_message_at is not None
    assert store.checkpoints(sid) == [cp]
    # a second commit on the old generation is stale
    with pytest.raises(StaleGeneration):
        store.commit_context_checkpoint(sid, 0, new_cp(3))
    assert store.checkpoints(sid) == [cp]
    # appends after a checkpoint continue the seq and do not bump the generation
    m = append_message(store, sid, "user", "later")
    assert m.seq == 5
    assert store.session(sid).context_generation == 1


# --- /clear and undo ---------------------------------------------------------------------------


def test_clear_bumps_generation_and_drops_checkpoint(store) -> None:
    sid = store.create_session().id
    turn(store, sid, 1)
    turn(store, sid, 2)
    cp = store.commit_context_checkpoint(sid, 0, new_cp(3))
    s = store.clear_context(sid)
    assert s.context_generation == 2
    assert s.active_context_checkpoint_id is None
    assert s.context_floor_seq == 4
    assert store.context_snapshot(sid).messages == ()
    assert [m.seq for m in store.history(sid)] == [1, 2, 3, 4]
    assert not any(m.retracted for m in store.history(sid))
    assert store.checkpoint(cp.id) == cp  # checkpoint rows are never deleted
    turn(store, sid, 3)
    assert [m.seq for m in store.context_snapshot(sid).messages] == [5, 6]


def test_undo_removes_newest_turn_but_keeps_rows(store) -> None:
    sid = store.create_session().id
    turn(store, sid, 1)
    turn(store, sid, 2)
    hist_before = store.history(sid)
    result = store.undo_last_turn(sid)
    assert result.removed == (3, 4)
    assert result.checkpoint_kept is False
    assert [m.seq for m in store.context_snapshot(sid).messages] == [1, 2]
    hist = store.history(sid)
    assert [m.seq for m in hist] == [1, 2, 3, 4]
    assert [m.retracted for m in hist] == [False, False, True, True]
    # apart from the mark, the rows are what they were
    assert [m.content for m in hist] == [m.content for m in hist_before]
    assert store.session(sid).context_generation == 1
    # a second undo takes the turn before
    assert store.undo_last_turn(sid).removed == (1, 2)
    assert store.context_snapshot(sid).messages == ()
    assert store.session(sid).context_generation == 2
    # nothing left to undo: no change
    assert store.undo_last_turn(sid).removed == ()
    assert store.session(sid).context_generation == 2


def test_undo_takes_every_row_of_the_newest_turn_and_only_those(store) -> None:
    """Two writers: turn a asks (#1), turn b asks and is answered (#2, #3), a's answer lands
    last (#4). Undo takes a's question and answer; b stays in the context whole."""
    sid = store.create_session().id
    append_message(store, sid, "user", "a?", turn_id="a")
    append_message(store, sid, "user", "b?", turn_id="b")
    append_message(store, sid, "assistant", "b!", turn_id="b")
    append_message(store, sid, "assistant", "a!", turn_id="a")
    assert store.undo_last_turn(sid).removed == (1, 4)
    assert [m.content for m in store.context_snapshot(sid).messages] == ["b?", "b!"]
    assert store.undo_last_turn(sid).removed == (2, 3)


def test_undo_without_turn_ids_goes_back_to_user_message(store) -> None:
    sid = store.create_session().id
    append_message(store, sid, "user", "q1")
    append_message(store, sid, "assistant", "a1")
    append_message(store, sid, "user", "q2")
    append_message(store, sid, "assistant", "", tool_calls=[
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}])
    append_message(store, sid, "tool", "r", tool_call_id="c1", name="f")
    append_message(store, sid, "assistant", "a2")
    assert store.undo_last_turn(sid).removed == (3, 4, 5, 6)
    assert [m.seq for m in store.context_snapshot(sid).messages] == [1, 2]


def test_undo_keeps_checkpoint_when_removed_rows_in_tail(store) -> None:
    sid = store.create_session().id
    turn(store, sid, 1)
    turn(store, sid, 2)
    turn(store, sid, 3)
    cp = store.commit_context_checkpoint(sid, 0, new_cp(3))
    result = store.undo_last_turn(sid)  # removes 5, 6 >= 3
    assert result.removed == (5, 6)
    assert result.checkpoint_kept is True
    s = store.session(sid)
    assert s.active_context_checkpoint_id == cp.id
    assert s.context_generation == 2
    snap = store.context_snapshot(sid)
    assert snap.checkpoint == cp
    assert [m.seq for m in snap.messages] == [3, 4]


def test_undo_clears_checkpoint_when_removed_rows_reach_summary(store) -> None:
    sid = store.create_session().id
    turn(store, sid, 1)
    turn(store, sid, 2)
    store.commit_context_checkpoint(sid, 0, new_cp(4))  # boundary inside turn 2 (3, 4)
    result = store.undo_last_turn(sid)  # removes 3 < 4
    assert result.removed == (3, 4)
    assert result.checkpoint_kept is False
    s = store.session(sid)
    assert s.active_context_checkpoint_id is None
    assert s.context_generation == 2
    snap = store.context_snapshot(sid)
    assert snap.checkpoint is None
    assert [m.seq for m in snap.messages] == [1, 2]
    assert len(store.checkpoints(sid)) == 1  # the row stays


def test_undo_makes_inflight_candidate_stale(store) -> None:
    sid = store.create_session().id
    turn(store, sid, 1)
    turn(store, sid, 2)
    gen = store.session(sid).context_generation
    store.undo_last_turn(sid)
    with pytest.raises(StaleGeneration):
        store.commit_context_checkpoint(sid, gen, new_cp(1))
    assert store.checkpoints(sid) == []


# --- files that are not ours -------------------------------------------------------------------


def test_garbage_file_is_reported_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "picochat.db"
    data = b"this is definitely not an SQLite database\n" * 100 + bytes(range(256)) * 8
    path.write_bytes(data)
    with pytest.raises(StorageError) as info:
        open_store(path)
    line = info.value.user_line()
    assert "\n" not in line and line.strip()
    assert str(path) in line
    assert path.read_bytes() == data


def test_newer_schema_is_reported_and_untouched(tmp_path: Path) -> None:
    """A database written by a newer picochat (itself in WAL mode)."""
    path = tmp_path / "picochat.db"
    s = open_store(path)
    sid = s.create_session("mine").id
    append_message(s, sid, "user", "keep me")
    s.close()
    conn = raw(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = path.read_bytes()
    with pytest.raises(StorageError) as info:
        open_store(path)
    assert "\n" not in info.value.user_line()
    assert "newer" in info.value.message
    assert path.read_bytes() == data
    conn = raw(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    assert conn.execute("SELECT content FROM messages").fetchall() == [("keep me",)]
    conn.close()


def test_newer_schema_rollback_journal_file_is_untouched(tmp_path: Path) -> None:
    path = tmp_path / "picochat.db"
    conn = raw(path)
    conn.execute("CREATE TABLE whatever (x)")
    conn.execute("INSERT INTO whatever VALUES (1)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    conn.close()
    data = path.read_bytes()
    with pytest.raises(StorageError):
        open_store(path)
    assert path.read_bytes() == data


# --- sessions ---------------------------------------------------------------------------------


def test_soft_delete_hides_but_keeps_rows(store) -> None:
    s = store.create_session("work")
    keep = store.create_session("other")
    turn(store, s.id, 1)
    store.delete_session(s.id)
    assert [x.id for x in store.list_sessions()] == [keep.id]
    assert store.find_session("work") is None
    assert store.find_session(s.id) is None
    with pytest.raises(SessionNotFound):
        store.require_session("work")
    assert count(store.path, "SELECT COUNT(*) FROM messages WHERE session_id = ?", (s.id,)) == 2
    assert count(store.path, "SELECT COUNT(*) FROM sessions WHERE id = ?", (s.id,)) == 1
    # the name is free again for a live session
    again = store.create_session("work")
    assert store.find_session("work") == again


def test_purge_cascades_messages_and_checkpoints(store) -> None:
    s = store.create_session("gone")
    other = store.create_session("stays")
    turn(store, s.id, 1)
    turn(store, s.id, 2)
    turn(store, other.id, 1)
    store.commit_context_checkpoint(s.id, 0, new_cp(3))
    store.commit_context_checkpoint(other.id, 0, new_cp(1))
    store.undo_last_turn(s.id)
    store.purge_session(s.id)
    p = store.path
    assert count(p, "SELECT COUNT(*) FROM sessions WHERE id = ?", (s.id,)) == 0
    assert count(p, "SELECT COUNT(*) FROM messages WHERE session_id = ?", (s.id,)) == 0
    assert count(p, "SELECT COUNT(*) FROM context_checkpoints WHERE session_id = ?", (s.id,)) == 0
    assert count(p, "SELECT COUNT(*) FROM retractions WHERE session_id = ?", (s.id,)) == 0
    assert count(p, "SELECT COUNT(*) FROM messages WHERE session_id = ?", (other.id,)) == 2
    assert len(store.checkpoints(other.id)) == 1


def test_find_session_by_id_or_name(store) -> None:
    a = store.create_session("alpha")
    b = store.create_session("beta")
    assert store.find_session("alpha") == a
    assert store.find_session(b.id) == b
    assert store.find_session("nobody") is None
    assert store.require_session(a.id).name == "alpha"


def test_find_session_prefers_id_over_name(store) -> None:
    a = store.create_session("alpha")
    b = store.create_session("tmp")
    store.rename_session(b.id, a.id)  # a session *named* like another's id
    assert store.find_session(a.id).id == a.id


def test_duplicate_live_name_rejected(store) -> None:
    store.create_session("dup")
    with pytest.raises(NameTaken):
        store.create_session("dup")
    other = store.create_session("x")
    with pytest.raises(NameTaken):
        store.rename_session(other.id, "dup")
    assert sorted(s.name for s in store.list_sessions()) == ["dup", "x"]


def test_auto_names(store) -> None:
    assert store.create_session().name == "chat-1"
    assert store.create_session().name == "chat-2"
    store.create_session("chat-3")
    assert store.create_session().name == "chat-4"


def test_commit_refuses_a_wrong_parent_a_cleared_boundary_and_a_bad_reason(store) -> None:
    from dataclasses import replace as _replace

    from picochat.errors import StaleGeneration as _Stale
    from picochat.errors import StorageError as _StorageError
    from picochat.messages import NewCheckpoint as _New

    sid = store.create_session().id
    for i in range(6):
        append_message(store, sid, "user" if i % 2 == 0 else "assistant", f"m{i}", turn_id=f"t{i//2}")
    base = _New(None, "s", 3, 6, "manual", "offline", "offline", 10, 5)
    first = store.commit_context_checkpoint(sid, 0, base)
    with pytest.raises(_Stale):  # built on no checkpoint, but one is active now
        store.commit_context_checkpoint(sid, 1, base)
    with pytest.raises(ValueError):
        store.commit_context_checkpoint(sid, 1, _replace(base, parent_checkpoint_id=first.id,
                                                         trigger_reason="whim"))
    store.clear_context(sid)  # generation 2, floor 6, no active checkpoint
    append_message(store, sid, "user", "after clear", turn_id="t9")
    with pytest.raises(_StorageError, match="not a message in the context"):
        store.commit_context_checkpoint(sid, 2, _replace(base, first_retained_seq=5))
    assert [c.id for c in store.checkpoints(sid)] == [first.id]
    assert store.session(sid).context_generation == 2


def test_a_batch_of_messages_is_appended_whole_or_not_at_all(store):
    from dataclasses import replace

    from picochat.messages import NewMessage
    from picochat.prepare import prepare
    from tests.helpers.storage import append_messages

    s = store.create_session("batch")
    append_message(store, s.id, "user", "first")
    rows = append_messages(store, s.id, [NewMessage("assistant", "second"),
                                         NewMessage("user", "third", turn_id="t2")])
    assert [r.seq for r in rows] == [2, 3]
    assert [m.content for m in store.history(s.id)] == ["first", "second", "third"]
    assert rows[1].tokens == store.history(s.id)[2].tokens > 0
    with pytest.raises(ValueError):  # refused before anything is written: by `prepare`…
        append_messages(store, s.id, [NewMessage("user", "fourth"), NewMessage("robot", "no")])
    robot = replace(prepare(NewMessage("user", "no")), role="robot")
    with pytest.raises(ValueError):  # … and by the store, given a row prepared wrong
        store.append_messages(s.id, [prepare(NewMessage("user", "fourth")), robot])
    assert store.max_seq(s.id) == 3 and store.search.messages(s.id, "fourth") == []


def test_a_history_page_is_the_newest_rows_below_a_seq_oldest_first(store):
    s = store.create_session("pages")
    for i in range(1, 11):
        append_message(store, s.id, "user" if i % 2 else "assistant", f"m{i}")
    store.undo_last_turn(s.id)
    assert [m.seq for m in store.history_page(s.id, None, 3)] == [8, 9, 10]
    assert [m.seq for m in store.history_page(s.id, 8, 3)] == [5, 6, 7]
    assert [m.seq for m in store.history_page(s.id, 3, 5)] == [1, 2]
    assert store.history_page(s.id, 1, 5) == []
    page = store.history_page(s.id, None, 10)
    assert page == store.history(s.id)  # the same rows, undone ones marked alike


def test_lone_surrogates_are_saved_as_replacement_characters(store) -> None:
    """Undecodable argv bytes arrive as lone surrogates (surrogateescape), and a provider's
    JSON may carry a \\udXXX escape: the message is saved, one U+FFFD per bad byte."""
    s = store.create_session()
    argv_text = b"caf\xc3\xa9 \xff\xfe end".decode("utf-8", "surrogateescape")
    m = append_message(store, s.id, "user", argv_text)
    call = {"id": "c1", "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "x\ud800"}'}}
    t = append_message(store, s.id, "assistant", "", tool_calls=[call])
    [stored, stored_call] = store.history(s.id)
    assert stored.content == m.content == "café \ufffd\ufffd end"
    assert stored.tokens > 0
    assert stored_call.tool_calls[0]["function"]["arguments"] == '{"path": "x\ufffd"}'
    assert t.seq == m.seq + 1


def test_find_or_create_session_finds_by_id_or_name_and_creates_once(store):
    first = store.find_or_create_session("work")
    assert first.name == "work"
    assert store.find_or_create_session("work").id == first.id
    assert store.find_or_create_session(first.id).id == first.id
    other = store.find_or_create_session(None)
    assert other.id != first.id and other.name != "work"
    assert len(store.list_sessions()) == 2

"""Projection tests (DESIGN.md D7.1, D9.3, D14, D20.4; contract "What the provider receives")."""

from __future__ import annotations

from dataclasses import replace

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picochat.messages import Message, NewCheckpoint
from picochat.projection import Repair, repair_tool_chains, restore
from picochat.storage import open_store
from tests.helpers.storage import append_message

SYSTEM = "You are picochat."


def summary_text(summary: str) -> str:
    return ("[Historical conversation summary — reference only, not a new user request]\n"
            f"{summary}\n[End historical conversation summary]")


def call(cid: str, fn: str = "ls") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": fn, "arguments": '{"p": "."}'}}


def new_cp(first_retained_seq: int, summary: str = "We listed files.") -> NewCheckpoint:
    return NewCheckpoint(parent_checkpoint_id=None, summary=summary,
                         first_retained_seq=first_retained_seq, source_max_seq=0,
                         trigger_reason="manual", provider_kind="offline", model="offline",
                         tokens_before=100, tokens_after=10)


def msg(seq: int, role: str, content: str = "", tool_calls=None, tool_call_id=None,
        name=None) -> Message:
    return Message("s", seq, role, content, tuple(tool_calls) if tool_calls else None,
                   tool_call_id, name, None, None, "complete", 1, 0)


def dump(path: Path) -> list[str]:
    conn = sqlite3.connect(str(path))
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def build_session(store) -> tuple[str, list[Message]]:
    sid = store.create_session("p").id
    out = [
        append_message(store, sid, "user", "list files", turn_id="t1"),
        append_message(store, sid, "assistant", "", tool_calls=[call("c1"), call("c2", "cat")],
                       turn_id="t1"),
        append_message(store, sid, "tool", "a.txt\nb.txt", tool_call_id="c1", name="ls",
                       turn_id="t1", tool_status="ok"),
        append_message(store, sid, "tool", "contents — ünïcode", tool_call_id="c2", name="cat",
                       turn_id="t1", tool_status="ok"),
        append_message(store, sid, "assistant", "There are two files.", turn_id="t1"),
        append_message(store, sid, "user", "and now?", turn_id="t2"),
        append_message(store, sid, "assistant", "", tool_calls=[call("c3")], turn_id="t2"),
        append_message(store, sid, "tool", "c.txt", tool_call_id="c3", name="ls", turn_id="t2"),
        append_message(store, sid, "assistant", "One more.", turn_id="t2"),
    ]
    return sid, out


def expected_dict(m: Message) -> dict[str, Any]:
    d: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        d["tool_calls"] = [dict(c) for c in m.tool_calls]
    if m.tool_call_id is not None:
        d["tool_call_id"] = m.tool_call_id
    if m.role == "tool" and m.name is not None:
        d["name"] = m.name
    return d


# --- restart ----------------------------------------------------------------------------------


def test_projection_equal_after_restart(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    store = open_store(path)
    sid, msgs = build_session(store)
    store.commit_context_checkpoint(sid, 0, new_cp(6))
    append_message(store, sid, "user", "appended after the checkpoint")
    p1 = restore(store, sid)
    m1 = p1.provider_messages(SYSTEM)
    store.close()

    store = open_store(path)
    try:
        p2 = restore(store, sid)
        assert p1 == p2
        assert p2.provider_messages(SYSTEM) == m1
        assert p2.checkpoint_id is not None and p2.repairs == () and p2.diagnostics == ()
        assert [m.seq for m in p2.raw] == [6, 7, 8, 9, 10]
        # the next append continues from the durable maximum
        assert append_message(store, sid, "user", "x").seq == 11
    finally:
        store.close()


def test_projection_without_checkpoint_equal_after_restart(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    store = open_store(path)
    sid, _ = build_session(store)
    p1 = restore(store, sid)
    store.close()
    store = open_store(path)
    try:
        assert restore(store, sid) == p1
    finally:
        store.close()


# --- what the provider receives ------------------------------------------------------------------


def test_provider_messages_with_checkpoint(store) -> None:
    sid, msgs = build_session(store)
    cp = store.commit_context_checkpoint(sid, 0, new_cp(6, "We listed a.txt and b.txt."))
    late = append_message(store, sid, "user", "during summary")
    proj = restore(store, sid)
    got = proj.provider_messages(SYSTEM)
    assert got[0] == {"role": "system", "content": SYSTEM}
    assert got[1] == {"role": "user", "content": summary_text("We listed a.txt and b.txt.")}
    tail = [m for m in msgs + [late] if m.seq >= cp.first_retained_seq]
    assert got[2:] == [expected_dict(m) for m in tail]
    assert proj.summary == "We listed a.txt and b.txt."
    assert proj.first_raw_seq == 6
    assert proj.raw == tuple(m for m in store.history(sid) if m.seq >= 6)
    # the summary and the raw tail do not overlap
    assert all(m.seq >= 6 for m in proj.raw)
    assert len(got) == 2 + len(tail)


def test_provider_messages_without_checkpoint(store) -> None:
    sid, msgs = build_session(store)
    proj = restore(store, sid)
    got = proj.provider_messages(SYSTEM)
    assert got == [{"role": "system", "content": SYSTEM}] + [expected_dict(m) for m in msgs]
    assert proj.summary is None and proj.checkpoint_id is None
    assert [m for m in got if m["role"] == "system"] == [got[0]]


def test_clear_floor_respected(store) -> None:
    sid, msgs = build_session(store)
    store.commit_context_checkpoint(sid, 0, new_cp(6))
    store.clear_context(sid)
    assert restore(store, sid).provider_messages(SYSTEM) == [{"role": "system",
                                                               "content": SYSTEM}]
    a = append_message(store, sid, "user", "fresh start")
    b = append_message(store, sid, "assistant", "ok")
    proj = restore(store, sid)
    assert proj.summary is None
    assert proj.provider_messages(SYSTEM) == [
        {"role": "system", "content": SYSTEM}, expected_dict(a), expected_dict(b)]
    assert len(store.history(sid)) == len(msgs) + 2


def test_undo_hides_turn_from_projection(store) -> None:
    sid, msgs = build_session(store)
    store.undo_last_turn(sid)
    proj = restore(store, sid)
    assert [m.seq for m in proj.raw] == [1, 2, 3, 4, 5]
    assert proj.context_generation == 1


# --- tool-chain repair -------------------------------------------------------------------------


def test_repair_orphan_result_dropped() -> None:
    ms = [msg(1, "user", "hi"), msg(2, "tool", "stray", tool_call_id="zz"),
          msg(3, "assistant", "hello")]
    kept, repairs = repair_tool_chains(ms)
    assert kept == (ms[0], ms[2])
    assert repairs == (Repair(2, "orphan_tool_result"),)


def test_repair_incomplete_group_dropped_entirely() -> None:
    ms = [msg(1, "user", "go"), msg(2, "assistant", "", tool_calls=[call("a"), call("b")]),
          msg(3, "tool", "ra", tool_call_id="a"), msg(4, "user", "next")]
    kept, repairs = repair_tool_chains(ms)
    assert kept == (ms[0], ms[3])
    assert set(repairs) == {Repair(2, "incomplete_tool_group"),
                            Repair(3, "incomplete_tool_group")}


def test_repair_group_with_no_results_dropped() -> None:
    ms = [msg(1, "user", "go"), msg(2, "assistant", "", tool_calls=[call("a")])]
    kept, repairs = repair_tool_chains(ms)
    assert kept == (ms[0],)
    assert repairs == (Repair(2, "incomplete_tool_group"),)


def test_repair_parallel_calls_kept_whole() -> None:
    ms = [msg(1, "user", "go"),
          msg(2, "assistant", "", tool_calls=[call("a"), call("b"), call("c")]),
          msg(3, "tool", "rb", tool_call_id="b"), msg(4, "tool", "ra", tool_call_id="a"),
          msg(5, "tool", "rc", tool_call_id="c"), msg(6, "assistant", "done")]
    kept, repairs = repair_tool_chains(ms)
    assert kept == tuple(ms)
    assert repairs == ()


def test_repair_result_not_contiguous_is_orphan_and_group_incomplete() -> None:
    # a result separated from its call by another message is outside the group
    ms = [msg(1, "user", "go"), msg(2, "assistant", "", tool_calls=[call("a")]),
          msg(3, "user", "wait"), msg(4, "tool", "ra", tool_call_id="a")]
    kept, repairs = repair_tool_chains(ms)
    assert kept == (ms[0], ms[2])
    assert set(repairs) == {Repair(2, "incomplete_tool_group"),
                            Repair(4, "orphan_tool_result")}


def test_repair_extra_and_duplicate_results_in_complete_group() -> None:
    ms = [msg(1, "assistant", "", tool_calls=[call("a")]),
          msg(2, "tool", "ra", tool_call_id="a"), msg(3, "tool", "ra again", tool_call_id="a"),
          msg(4, "tool", "who", tool_call_id="x")]
    kept, repairs = repair_tool_chains(ms)
    assert kept == (ms[0], ms[1])
    assert set(repairs) == {Repair(3, "orphan_tool_result"), Repair(4, "orphan_tool_result")}


def test_repair_never_modifies_messages() -> None:
    ms = [msg(1, "user", "go"), msg(2, "assistant", "x", tool_calls=[call("a")]),
          msg(3, "tool", "ra", tool_call_id="a", name="ls"), msg(4, "tool", "o", tool_call_id="q"),
          msg(5, "assistant", "", tool_calls=[call("b")]), msg(6, "assistant", "end")]
    copies = [dataclasses.replace(m) for m in ms]
    kept, repairs = repair_tool_chains(ms)
    assert ms == copies
    assert all(any(k is m for m in ms) for k in kept)  # the very same objects, unaltered
    kept_seqs = [k.seq for k in kept]
    assert kept_seqs == sorted(kept_seqs)
    assert sorted(kept_seqs + [r.seq for r in repairs]) == [1, 2, 3, 4, 5, 6]


def test_repair_through_store(store) -> None:
    sid = store.create_session().id
    u = append_message(store, sid, "user", "go")
    append_message(store, sid, "tool", "orphan", tool_call_id="nope")
    append_message(store, sid, "assistant", "", tool_calls=[call("a"), call("b")])
    append_message(store, sid, "tool", "ra", tool_call_id="a")
    v = append_message(store, sid, "user", "next")
    g1 = append_message(store, sid, "assistant", "", tool_calls=[call("c")])
    g2 = append_message(store, sid, "tool", "rc", tool_call_id="c")
    proj = restore(store, sid)
    assert proj.raw == (u, v, g1, g2)
    assert proj.repairs == (Repair(2, "orphan_tool_result"), Repair(3, "incomplete_tool_group"),
                            Repair(4, "incomplete_tool_group"))
    # the raw log still has every row, unchanged
    assert len(store.history(sid)) == 7


def test_checkpoint_boundary_on_tool_result_drops_orphan(store) -> None:
    sid, msgs = build_session(store)
    store.commit_context_checkpoint(sid, 0, new_cp(4))  # seq 4 is the 2nd result of a group
    proj = restore(store, sid)
    assert proj.repairs == (Repair(4, "orphan_tool_result"),)
    assert [m.seq for m in proj.raw] == [5, 6, 7, 8, 9]


# --- broken checkpoints ------------------------------------------------------------------------


def _fallback_case(store, sid: str, msgs: list[Message], needle: str) -> None:
    conn = sqlite3.connect(str(store.path))
    version = conn.execute("PRAGMA data_version").fetchone()[0]
    before = dump(store.path)
    proj = restore(store, sid)
    assert dump(store.path) == before
    assert conn.execute("PRAGMA data_version").fetchone()[0] == version  # nobody committed
    conn.close()
    assert proj.checkpoint_id is None and proj.summary is None
    assert proj.diagnostics and needle in proj.diagnostics[0]
    assert proj.raw == tuple(msgs)
    assert proj.provider_messages(SYSTEM) == [{"role": "system", "content": SYSTEM}] + [
        expected_dict(m) for m in msgs]


def test_missing_active_checkpoint_falls_back_without_writing(store) -> None:
    sid, msgs = build_session(store)
    store.commit_context_checkpoint(sid, 0, new_cp(6))
    conn = sqlite3.connect(str(store.path))
    conn.execute("UPDATE sessions SET active_context_checkpoint_id = 'cp_missing' WHERE id = ?",
                 (sid,))
    conn.commit()
    conn.close()
    _fallback_case(store, sid, msgs, "cp_missing")


def test_empty_summary_checkpoint_falls_back(store) -> None:
    sid, msgs = build_session(store)
    cp = store.commit_context_checkpoint(sid, 0, new_cp(6, summary="   "))
    _fallback_case(store, sid, msgs, cp.id)


def test_checkpoint_with_invalid_boundary_falls_back(store) -> None:
    sid, msgs = build_session(store)
    cp = store.commit_context_checkpoint(sid, 0, new_cp(6))
    conn = sqlite3.connect(str(store.path))
    conn.execute("UPDATE context_checkpoints SET first_retained_seq = 999 WHERE id = ?",
                 (cp.id,))
    conn.commit()
    conn.close()
    _fallback_case(store, sid, msgs, "boundary")


def test_restore_writes_nothing_in_normal_case(store) -> None:
    sid, _ = build_session(store)
    store.commit_context_checkpoint(sid, 0, new_cp(6))
    before = dump(store.path)
    restore(store, sid)
    restore(store, sid)
    assert dump(store.path) == before


# --- property ----------------------------------------------------------------------------------


def assert_tool_chains_whole(messages: list[dict[str, Any]]) -> None:
    i = 0
    while i < len(messages):
        m = messages[i]
        assert m["role"] != "tool", f"orphan tool message at {i}: {messages}"
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = sorted(c["id"] for c in m["tool_calls"])
            j = i + 1
            got = []
            while j < len(messages) and messages[j]["role"] == "tool":
                got.append(messages[j]["tool_call_id"])
                j += 1
            assert sorted(got) == ids, f"group at {i} not whole: {messages}"
            i = j
            continue
        i += 1


OPS = st.lists(st.one_of(
    st.tuples(st.just("user"), st.text(max_size=4)),
    st.tuples(st.just("assistant"), st.text(max_size=4)),
    # a tool group: n calls, which results to write, whether a user message interrupts it
    st.tuples(st.just("tools"), st.integers(1, 3), st.lists(st.integers(0, 3), max_size=4),
              st.booleans()),
    st.tuples(st.just("orphan"), st.sampled_from(["t0", "t1", "zz"])),
    st.tuples(st.just("clear")),
    st.tuples(st.just("undo")),
    st.tuples(st.just("compact"), st.integers(0, 50)),
), max_size=18)


@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=OPS)
def test_property_projection_whole_and_log_unchanged(store, ops) -> None:
    sid = store.create_session().id
    appended: dict[int, Message] = {}
    counter = [0]

    def add(*args, **kwargs) -> None:
        m = append_message(store, sid, *args, **kwargs)
        assert m.seq not in appended
        appended[m.seq] = m

    for op in ops:
        kind = op[0]
        if kind in ("user", "assistant"):
            add(kind, op[1])
        elif kind == "tools":
            _, n, results, interrupt = op
            counter[0] += 1
            ids = [f"t{counter[0]}_{k}" for k in range(n)]
            add("assistant", "", tool_calls=[call(i) for i in ids])
            if interrupt:
                add("user", "interrupt")
            for r in results:
                cid = ids[r] if r < n else "unknown"
                add("tool", f"result {cid}", tool_call_id=cid, name="ls")
        elif kind == "orphan":
            add("tool", "stray", tool_call_id=op[1])
        elif kind == "clear":
            store.clear_context(sid)
        elif kind == "undo":
            store.undo_last_turn(sid)
        elif kind == "compact":
            snap = store.context_snapshot(sid)
            if snap.messages:
                boundary = snap.messages[op[1] % len(snap.messages)].seq
                parent = snap.session.active_context_checkpoint_id
                store.commit_context_checkpoint(
                    sid, snap.session.context_generation,
                    replace(new_cp(boundary, f"summary up to {boundary}"),
                            parent_checkpoint_id=parent))

        proj = restore(store, sid)
        assert_tool_chains_whole(proj.provider_messages(SYSTEM)[1:])
        # every message that reaches the provider is a raw row, unchanged
        for m in proj.raw:
            assert m == appended[m.seq]
        hist = store.history(sid)
        assert [m.seq for m in hist] == sorted(appended)
        for m in hist:
            assert dataclasses.replace(m, retracted=False) == appended[m.seq]
        assert not any(m.retracted for m in proj.raw)
        # an omission is always reported
        snap = store.context_snapshot(sid)
        assert sorted([m.seq for m in proj.raw] + [r.seq for r in proj.repairs]) == [
            m.seq for m in snap.messages]

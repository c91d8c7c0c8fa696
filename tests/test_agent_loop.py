"""The tool loop inside a turn (design §11.4): calls run once and are stored in order with
the turn id; an overflow after tools retries that step once on a request-local copy."""

from __future__ import annotations

import asyncio
import json

from picochat.agent_loop import MAX_TOOL_STEPS
from picochat.config import CompactionConfig, Config, ModelConfig
from picochat.models import resolve_model
from picochat.providers.errors import ContextOverflow
from picochat.session import SessionWorker, ToolRan, TurnFailed, TurnFinished
from picochat.tools.registry import schemas
from tests.scripted import Recorder, well_formed
from tests.test_compaction_engine import talk

TOOLS = schemas(["history_search", "timeline_recall", "read_file"])


def worker(store, sid, provider, tmp_path, window=32_000, tools=TOOLS):
    m = resolve_model(Config(models={"m": ModelConfig("m", "offline", token_limit=window)}), "m")
    return SessionWorker(store, sid, m, provider, "sys", tools=tools, tool_root=tmp_path,
                         compaction=CompactionConfig(reserve_tokens=1_024,
                                                     keep_recent_tokens=800))


def search(query, cid="c1"):
    return {"calls": [(cid, "history_search", json.dumps({"query": query}))],
            "text": "Let me look that up. "}


async def one_turn(w, text="what was the host?"):
    handle = w.submit_turn(text)
    events = [e async for e in handle]
    return await handle.result(), events


def chains_whole(messages):
    """Every tool message answers a call of the assistant message before its block."""
    open_ids: set = set()
    for m in messages:
        if m["role"] == "tool":
            if m["tool_call_id"] not in open_ids:
                return False
            open_ids.discard(m["tool_call_id"])
        else:
            if open_ids:
                return False
            open_ids = {c["id"] for c in m.get("tool_calls") or ()}
    return not open_ids


def test_a_tool_call_runs_once_and_everything_is_stored_in_order(store, tmp_path):
    s = store.create_session("t")
    store.append_message(s.id, "user", "the staging host is kv-stage-4", turn_id="t0")
    store.append_message(s.id, "assistant", "noted", turn_id="t0")

    async def run():
        provider = Recorder(turns=[search("staging host"), "It is kv-stage-4."])
        async with worker(store, s.id, provider, tmp_path) as w:
            return await one_turn(w), provider

    (outcome, events), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFinished) and outcome.reply == "It is kv-stage-4."
    rows = store.history(s.id)[2:]
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert len({r.turn_id for r in rows}) == 1
    call, result = rows[1], rows[2]
    assert call.content == "Let me look that up. " and call.tool_calls[0]["id"] == "c1"
    assert json.loads(call.tool_calls[0]["function"]["arguments"]) == {"query": "staging host"}
    assert result.tool_call_id == "c1" and result.tool_status == "ok"
    assert "kv-stage-4" in result.content and "#1 user" in result.content
    assert "#3 " not in result.content  # the searching turn itself is left out
    assert [type(e) for e in events].count(ToolRan) == 1
    first, second = provider.turn_requests
    assert first.tools == TOOLS and chains_whole(second.messages[1:])
    assert second.messages[-1]["role"] == "tool"


def test_history_search_reaches_a_fact_compaction_summarized_away(store, tmp_path):
    s = store.create_session("after")
    # prose, no exact value the fact ledger would keep: only the raw log holds it
    store.append_message(s.id, "user", "the vault rotates every full moon on the kestrel host",
                         turn_id="t0")
    store.append_message(s.id, "assistant", "noted", turn_id="t0")
    talk(store, s.id, 10, start=1)

    async def run():
        provider = Recorder(turns=[search("vault rotates"), "Every 37 days."],
                            summaries=[well_formed("- the user asked many questions")])
        async with worker(store, s.id, provider, tmp_path) as w:
            compacted = await w.compact()
            result = await one_turn(w)
            return compacted, result, provider

    compacted, (outcome, _), provider = asyncio.run(run())
    assert compacted.compacted and compacted.checkpoint.first_retained_seq > 2
    first = provider.turn_requests[0]
    assert "kestrel" not in json.dumps(first.messages)          # not in the context...
    tool_result = provider.turn_requests[1].messages[-1]
    assert "kestrel" in tool_result["content"]                   # ...but found in the raw log


def test_overflow_after_a_tool_batch_retries_that_step_once_without_rerunning_tools(
        store, tmp_path):
    s = store.create_session("o")
    talk(store, s.id, 6)

    async def run():
        provider = Recorder(turns=[search("anything"), ContextOverflow("too long", 8_000),
                                   "done"])
        async with worker(store, s.id, provider, tmp_path) as w:
            return await one_turn(w), provider

    (outcome, _), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFinished) and outcome.reply == "done"
    assert len(provider.turn_requests) == 3 and provider.summary_requests == []
    retry = provider.turn_requests[2].messages
    assert [m["role"] for m in retry] == ["system", "user", "assistant", "tool"]  # this turn
    assert chains_whole(retry[1:])
    assert [r.role for r in store.history(s.id)].count("tool") == 1  # the tool ran once
    assert store.checkpoints(s.id) == []  # no checkpoint mid-turn


def test_a_second_overflow_after_tools_fails_the_turn_and_keeps_its_rows(store, tmp_path):
    s = store.create_session("o2")
    talk(store, s.id, 3)

    async def run():
        provider = Recorder(turns=[search("x"), ContextOverflow("too long"),
                                   ContextOverflow("too long"), "never"])
        async with worker(store, s.id, provider, tmp_path) as w:
            return await one_turn(w), provider

    (outcome, _), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFailed) and "leaving out the earlier turns" in \
        outcome.error.message
    assert len(provider.turn_requests) == 3
    assert [r.role for r in store.history(s.id)][-3:] == ["user", "assistant", "tool"]


def test_a_model_that_keeps_calling_tools_gets_a_last_request_without_tools(store, tmp_path):
    s = store.create_session("loop")

    async def run():
        provider = Recorder(turns=[search(f"q{i}", f"c{i}") for i in range(20)] + ["final"])
        provider.turns = provider.turns[:8] + ["final"]
        async with worker(store, s.id, provider, tmp_path) as w:
            return await one_turn(w), provider

    (outcome, _), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFinished) and outcome.reply == "final"
    assert len(provider.turn_requests) == 9 and provider.turn_requests[-1].tools == ()


def only_calls(i):
    return {"calls": [(f"c{i}", "history_search", json.dumps({"query": f"q{i}"}))]}


def test_a_model_that_never_stops_calling_tools_is_stopped_firmly(store, tmp_path):
    """After MAX_TOOL_STEPS rounds the last request offers no tools; calls that still come
    back are not run, and with no text the turn fails with a line that says why."""
    s = store.create_session("loop")

    async def run():
        provider = Recorder(turns=[only_calls(i) for i in range(30)])
        async with worker(store, s.id, provider, tmp_path) as w:
            return await one_turn(w), provider

    (outcome, events), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFailed)
    assert "still asked for tools after 8 rounds" in outcome.error.user_line()
    assert len(provider.turn_requests) == MAX_TOOL_STEPS + 1
    rows = store.history(s.id)
    assert [r.role for r in rows].count("tool") == MAX_TOOL_STEPS
    assert [type(e) for e in events].count(ToolRan) == MAX_TOOL_STEPS
    assert rows[0].role == "user"  # the question is kept


def test_calls_from_a_request_that_offered_no_tools_are_never_run(store, tmp_path):
    s = store.create_session("none")

    async def run():
        provider = Recorder(turns=[search("host"), only_calls(2)])
        async with worker(store, s.id, provider, tmp_path, tools=()) as w:
            with_text = await one_turn(w)
            without = await one_turn(w, "and now?")
            return with_text, without, provider

    (first, _), (second, _), provider = asyncio.run(run())
    assert isinstance(first, TurnFinished) and first.reply == "Let me look that up. "
    assert isinstance(second, TurnFailed)
    assert "asked for a tool although none was offered" in second.error.user_line()
    assert len(provider.turn_requests) == 2
    assert not any(r.role == "tool" or r.tool_calls for r in store.history(s.id))


def test_another_writer_never_lands_between_a_call_and_its_results(store, tmp_path,
                                                                     monkeypatch):
    """`picochat ask` in a second shell appends while this turn's tool runs: the call and its
    result are written together, so the other row lands before or after them, never between."""
    import picochat.turn as session_module
    s = store.create_session("two")
    real = session_module.run_tool

    def tool_while_another_writes(*args, **kwargs):
        store.append_message(s.id, "user", "from the other shell", turn_id="other")
        return real(*args, **kwargs)

    monkeypatch.setattr(session_module, "run_tool", tool_while_another_writes)

    async def run():
        provider = Recorder(turns=[search("host"), "done"])
        async with worker(store, s.id, provider, tmp_path) as w:
            return await one_turn(w)

    outcome, _ = asyncio.run(run())
    assert isinstance(outcome, TurnFinished)
    rows = store.history(s.id)
    call = next(i for i, r in enumerate(rows) if r.tool_calls)
    assert rows[call + 1].role == "tool" and rows[call + 1].tool_call_id == "c1"
    assert any(r.content == "from the other shell" for r in rows)


def test_bad_arguments_and_unknown_tools_are_error_results_and_the_turn_goes_on(
        store, tmp_path):
    s = store.create_session("bad")

    async def run():
        provider = Recorder(turns=[{"calls": [("a", "read_file", "{not json"),
                                              ("b", "rm_rf", "{}")]}, "sorry"])
        async with worker(store, s.id, provider, tmp_path) as w:
            return await one_turn(w), provider

    (outcome, _), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFinished)
    tools = [r for r in store.history(s.id) if r.role == "tool"]
    assert [(t.tool_call_id, t.tool_status) for t in tools] == [("a", "error"), ("b", "error")]
    assert "not valid JSON" in tools[0].content and "no tool named" in tools[1].content
    assert chains_whole(provider.turn_requests[1].messages[1:])


def test_the_offline_model_searches_history_when_asked_and_answers_from_the_result(
        store, tmp_path):
    from picochat.providers.offline import OfflineProvider

    s = store.create_session("offline")
    store.append_message(s.id, "user", "the release tag is v4.2.1-rc3", turn_id="t0")
    store.append_message(s.id, "assistant", "noted", turn_id="t0")
    (tmp_path / "notes.txt").write_text("deploy on friday\n")

    async def run():
        async with worker(store, s.id, OfflineProvider(0), tmp_path) as w:
            searched, _ = await one_turn(w, "search history for release tag")
            read, _ = await one_turn(w, "read file notes.txt")
            plain, _ = await one_turn(w, "thanks, and no tools this time")
            return searched, read, plain

    searched, read, plain = asyncio.run(run())
    assert isinstance(searched, TurnFinished) and "v4.2.1-rc3" in searched.reply
    assert "deploy on friday" in read.reply
    tools = [r for r in store.history(s.id) if r.role == "tool"]
    assert [(t.name, t.tool_status) for t in tools] == [("history_search", "ok"),
                                                        ("read_file", "ok")]
    assert "offline" in plain.reply and [r.role for r in store.history(s.id)][-1] == "assistant"


def test_the_summary_block_says_history_search_exists_only_when_offered(store, tmp_path):
    from picochat.budget import RequestDraft
    from picochat.projection import SEARCH_HINT, restore

    s = store.create_session("hint")
    talk(store, s.id, 10)

    async def run():
        async with worker(store, s.id, Recorder(), tmp_path) as w:
            return await w.compact()

    assert asyncio.run(run()).compacted
    projection = restore(store, s.id)
    offered = RequestDraft("sys", projection, TOOLS)
    plain = RequestDraft("sys", projection, schemas(["read_file"]))
    assert SEARCH_HINT in offered.messages()[1]["content"]
    assert SEARCH_HINT not in plain.messages()[1]["content"]
    assert offered.messages()[1]["content"].endswith("[End historical conversation summary]")
    assert offered.parts().summary > plain.parts().summary  # and the budget counts it

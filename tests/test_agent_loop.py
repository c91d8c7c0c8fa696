"""The tool loop inside a turn (DESIGN.md D11.4): calls run once and are stored in order with
the turn id; an overflow after tools retries that step once on a request-local copy."""

from __future__ import annotations

import asyncio
import json

from picochat import tokens
from picochat.agent_loop import MAX_CALLS_PER_ROUND, MAX_CALLS_PER_TURN, MAX_TOOL_STEPS
from picochat.config import CompactionConfig, Config, ModelConfig
from picochat.models import resolve_model
from picochat.providers.errors import ContextOverflow
from picochat.session import Notice, SessionWorker, ToolRan, TurnFailed, TurnFinished
from picochat.tools.registry import schemas
from tests.helpers.conversations import talk
from tests.helpers.scripted import Recorder, well_formed
from tests.helpers.storage import append_message

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
    append_message(store, s.id, "user", "the staging host is kv-stage-4", turn_id="t0")
    append_message(store, s.id, "assistant", "noted", turn_id="t0")

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
    append_message(store, s.id, "user", "the vault rotates every full moon on the kestrel host",
                   turn_id="t0")
    append_message(store, s.id, "assistant", "noted", turn_id="t0")
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
        append_message(store, s.id, "user", "from the other shell", turn_id="other")
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
    append_message(store, s.id, "user", "the release tag is v4.2.1-rc3", turn_id="t0")
    append_message(store, s.id, "assistant", "noted", turn_id="t0")
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


# --- a flood of calls, and results bigger than the window (issue 31 item 2) -------------------


def flood(round_no, n=3000, name="history_search", args=None):
    return {"calls": [(f"r{round_no}c{i}", name, json.dumps(args or {"query": f"q{i}"}))
                      for i in range(n)]}


def request_tokens(request):
    return tokens.count_provider_messages(request.messages) + tokens.count_tools(request.tools)


def test_a_flood_of_tool_calls_runs_a_bounded_number_and_the_model_is_told(store, tmp_path):
    """A server returning 3,000 calls a reply for 8 replies got 24,000 runs and requests far
    past the window. Now a reply runs at most MAX_CALLS_PER_ROUND calls and a turn at most
    MAX_CALLS_PER_TURN; the rest are not run, not recorded, and the model and the user are
    told; the request after the turn's cap offers no tools."""
    s = store.create_session("flood")

    async def run():
        rounds = MAX_CALLS_PER_TURN // MAX_CALLS_PER_ROUND
        provider = Recorder(turns=[flood(r) for r in range(rounds)] + ["Here is what I found."])
        async with worker(store, s.id, provider, tmp_path, window=16_000) as w:
            return await one_turn(w), provider

    (outcome, events), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFinished) and outcome.reply == "Here is what I found."
    rounds = MAX_CALLS_PER_TURN // MAX_CALLS_PER_ROUND
    assert len(provider.turn_requests) == rounds + 1
    assert all(r.tools for r in provider.turn_requests[:rounds])
    assert provider.turn_requests[-1].tools == ()  # the turn's cap: now the answer
    rows = store.history(s.id)
    results = [r for r in rows if r.role == "tool"]
    assert len(results) == MAX_CALLS_PER_TURN
    assert [type(e) for e in events].count(ToolRan) == MAX_CALLS_PER_TURN
    calls = [r for r in rows if r.role == "assistant" and r.tool_calls]
    assert [len(c.tool_calls) for c in calls] == [MAX_CALLS_PER_ROUND] * rounds
    # the model is told, in the round's last result, that the rest never ran
    last_of_round = results[MAX_CALLS_PER_ROUND - 1]
    assert "2,984 more tool calls in this reply were not run: limit" in last_of_round.content
    notices = [e for e in events if isinstance(e, Notice) and e.kind == "tools_capped"]
    assert len(notices) == rounds
    assert "asked for 3,000 tool calls at once; 16 ran, 2,984 did not" in notices[0].text
    assert all(request_tokens(r) <= 16_000 for r in provider.turn_requests)
    assert all(chains_whole(r.messages[1:]) for r in provider.turn_requests)


def test_two_calls_with_one_id_both_keep_their_results(store, tmp_path):
    """A server that repeats an id: the second result used to drop out of the context, and
    every later request broke strict APIs. Ids are made unique within the turn."""
    s = store.create_session("dup")
    twice = {"calls": [("same", "history_search", json.dumps({"query": "a"})),
                       ("same", "history_search", json.dumps({"query": "b"}))]}

    async def run():
        provider = Recorder(turns=[twice, twice, "done"])
        async with worker(store, s.id, provider, tmp_path) as w:
            return await one_turn(w), provider

    (outcome, _), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFinished)
    last = provider.turn_requests[-1].messages
    ids = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    assert len(ids) == 4 and len(set(ids)) == 4 and ids[0] == "same"
    assert chains_whole(last[1:])


def test_results_bigger_than_the_window_are_cut_for_the_request_alone(store, tmp_path):
    """Three reads of a 200 KB file are about 150k tokens, for an 8,192 window: the next request
    carries each cut to fit, saying how to read it whole; the stored results keep every byte."""
    s = store.create_session("big")
    body = "".join(f"line {i}: the canary host answered in {i % 97} ms\n" for i in range(4000))
    (tmp_path / "big.log").write_text(body)
    reads = {"calls": [(f"c{i}", "read_file", json.dumps({"path": "big.log", "max_bytes": 262_144}))
                       for i in range(3)]}

    async def run():
        provider = Recorder(turns=[reads, "It answered."])
        async with worker(store, s.id, provider, tmp_path, window=8_192) as w:
            return await one_turn(w), provider

    (outcome, _), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFinished), outcome
    sent = provider.turn_requests[-1]
    assert request_tokens(sent) <= 8_192
    results = [m for m in sent.messages if m["role"] == "tool"]
    assert len(results) == 3
    stored = [r for r in store.history(s.id) if r.role == "tool"]
    assert all(r.content == body for r in stored)  # the durable rows keep every byte
    for m, row in zip(results, stored):
        assert f"history_search seq={row.seq} reads it whole" in m["content"]
        assert m["content"].startswith("line 0:")


def test_esc_while_tools_run_keeps_what_ran_and_runs_no_more(store, tmp_path, monkeypatch):
    """Tools run off the event loop, so a stop is heard while one runs: that call ends and
    its result is kept, the calls after it are not run, and all of it is saved in order."""
    import threading

    from picochat.tools import registry
    from picochat.tools.base import Tool

    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def slow(args, ctx):
        ran.append(args["query"])
        started.set()
        release.wait(60)  # a bound for a broken test, not a wait for an event: the test
        return "found it"  # releases it at once

    original = registry.BUILTIN["history_search"]
    monkeypatch.setitem(registry.BUILTIN, "history_search",
                        Tool(original.name, original.description, original.parameters, slow))
    s = store.create_session("stop")

    async def run():
        provider = Recorder(turns=[flood(0, n=5)])
        async with worker(store, s.id, provider, tmp_path) as w:
            handle = w.submit_turn("look it up")
            await asyncio.to_thread(started.wait, 60)
            handle.cancel()  # the loop is free while the tool runs: the stop is heard
            release.set()
            events = [e async for e in handle]
            return await handle.result(), events

    outcome, events = asyncio.run(run())
    assert isinstance(outcome, TurnFailed) and outcome.cancelled
    assert ran == ["q0"]  # the rest never ran
    results = [r for r in store.history(s.id) if r.role == "tool"]
    assert [r.content for r in results] == (
        ["found it"] + ["not run: the user stopped the turn"] * 4)


def test_a_call_with_megabytes_of_arguments_is_not_run_kept_or_resent(store, tmp_path):
    """Found by an outside attack: three calls of 5 MB arguments each were kept whole and
    sent back every round, 15.7 MB to 62.9 MB requests for an 8,192 window. Arguments over
    the limit are left out of the record and the call says why; the others run."""
    from picochat.agent_loop import MAX_ARGUMENT_CHARS

    s = store.create_session("huge")
    huge = {"calls": [("c0", "history_search", json.dumps({"query": "A" * 5_000_000})),
                      ("c1", "history_search", json.dumps({"query": "port"}))]}

    async def run():
        provider = Recorder(turns=[huge, "done"])
        async with worker(store, s.id, provider, tmp_path, window=8_192) as w:
            return await one_turn(w), provider

    (outcome, _), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFinished)
    assert all(request_tokens(r) <= 8_192 for r in provider.turn_requests)
    rows = store.history(s.id)
    call = next(r for r in rows if r.tool_calls)
    assert all(len(c["function"]["arguments"]) < 200 for c in call.tool_calls)
    results = [r for r in rows if r.role == "tool"]
    assert results[0].content.startswith(f"not run: its arguments were over "
                                         f"{MAX_ARGUMENT_CHARS:,} characters")
    assert results[1].tool_status == "ok"
    assert sum(len(r.content) for r in rows) < 10_000

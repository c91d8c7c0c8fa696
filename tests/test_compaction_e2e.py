"""Compaction end to end through litellm against the fake OpenAI server: the summary request as
the contract describes it (DESIGN.md, contract "What the provider receives"), slow summaries
racing other writers, the overflow request budget, summary failures, and usage calibration.

CLI tests run real `picochat` subprocesses (each ~2.5 s of litellm import, so there are few);
the rest drive `SessionWorker` in-process with the real `LiteLLMProvider`, on the same database
file the CLI uses, so both sides see one history.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request

from picochat import ledger as fact_ledger
from picochat import tokens
from picochat.projection import restore
from picochat.session import CompactionStarted, SessionWorker, TurnFinished
from picochat.storage.store import open_store
from tests.helpers.cli import clean
from tests.helpers.config import compaction_config_text, make_worker
from tests.helpers.conversations import FILLER, seed
from tests.helpers.fakes.openai import (
    CONTEXT_OVERFLOW_BODY,
    HOLD_LIMIT_S,
    SUMMARY_HEADINGS,
    FakeOpenAI,
    is_summary_request,
    kinds,
    previous_summary_of,
    record_seqs,
    summary_text,
    transcript_of,
)
from tests.helpers.waiting import WAIT_S
from tests.helpers.storage import append_message

BREADCRUMB_START = "[Earlier conversation omitted during context-overflow recovery."
OVERFLOW = ("status", 400, CONTEXT_OVERFLOW_BODY)
TOOL = {"type": "function", "function": {
    "name": "history_search", "description": "Search the raw history of this session.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"]}}}


def with_ledger(model_text: str, stored: str) -> str:
    """What a checkpoint stores for `model_text`: it, plus the ledger of the facts it folded
    (here the filler's port and the seeded ids), under Exact Facts."""
    ledger = fact_ledger.parse(stored)
    assert any("port 8080" in f.value for f in ledger.facts), stored
    return fact_ledger.merge_into(model_text, ledger)


def cli_json(run_cli, *args: str):
    result = run_cli(*args, "--json")
    assert result.status == 0, result.stderr
    return json.loads(result.stdout)


def user_prompt(body: dict) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


# --- the fake's own additions -----------------------------------------------------------------


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url + "/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=WAIT_S) as response:
        return json.load(response)


def test_fake_tells_summaries_from_turns_and_delays_without_blocking_shutdown():
    summary = {"messages": [{"role": "system", "content": "x"}, {"role": "user", "content":
               "Summarize.\n\n<<<TRANSCRIPT\n[source]\n<<<PREVIOUS SUMMARY\nold one\n"
               "PREVIOUS SUMMARY>>>\n### #4 user\nhi\n### #5 assistant\nyo\nTRANSCRIPT>>>"}]}
    turn = {"messages": [{"role": "user", "content": "hello"}]}
    assert is_summary_request(summary) and not is_summary_request(turn)
    assert previous_summary_of(summary) == "old one" and record_seqs(summary) == [4, 5]
    with FakeOpenAI() as fake:
        fake.script(("delay", 0.3, "late"))
        t = time.monotonic()
        assert _post(fake.base_url, turn)["choices"][0]["message"]["content"] == "late"
        assert time.monotonic() - t >= 0.3
        assert _post(fake.base_url, summary)["choices"][0]["message"]["content"] == \
            summary_text(1)
        assert kinds(fake) == ["turn", "summary"]
        held = threading.Event()
        fake.script(("delay", held, "never"))
        outcome: list[object] = []

        def call() -> None:
            try:
                outcome.append(_post(fake.base_url, turn))
            except Exception as exc:  # the connection closes unanswered
                outcome.append(exc)

        worker = threading.Thread(target=call)
        worker.start()
        assert fake.wait_for(3, timeout=WAIT_S)
        # no event marks a request that was never sent: a moment's chance for a stray retry
        assert not fake.wait_for(4, timeout=0.2)
        t = time.monotonic()
    # stop() ended the held request at once, not after the hold's limit (a bound generous
    # under load that still tells the two apart)
    assert time.monotonic() - t < HOLD_LIMIT_S / 4
    worker.join(WAIT_S)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], Exception)  # never answered "never"


# --- 1. a slow summary loses nothing ----------------------------------------------------------


def test_messages_appended_during_a_slow_summary_stay_in_the_context(
        run_cli, compacting_fake, cli_store, db, config_file):
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)
    release = threading.Event()
    compacting_fake.script_summary(("delay", release))  # the default summary, held until released

    async def run():
        async with make_worker(cli_store, s.id, config_file) as w:
            compaction = w.compact()
            assert await asyncio.to_thread(compacting_fake.wait_for, 1, "summary", WAIT_S)
            other = open_store(db)  # another connection to the same database
            try:
                added = [append_message(other, s.id, "user", "appended while summarizing: "
                                        "the new port is 9443", turn_id="x1"),
                         append_message(other, s.id, "assistant", "Noted: port 9443 from now on.",
                                        turn_id="x1")]
            finally:
                other.close()
            assert not compaction.done()  # the appends happened while the summary was out
            release.set()
            outcome = await compaction
            fresh = open_store(db)  # a fresh restore, from the database alone
            try:
                restored = restore(fresh, s.id)
            finally:
                fresh.close()
            after = await w.submit_turn("which port?").result()
            return outcome, added, restored, after

    try:
        outcome, added, restored, after = asyncio.run(run())
    finally:
        release.set()
    assert outcome.status == "compacted", outcome.error
    cp = outcome.checkpoint
    assert cp.source_max_seq == 20 < added[0].seq  # the summary never saw the appended rows
    assert "9443" not in transcript_of(compacting_fake.summary_requests[0])
    appended = [(m.seq, m.role, m.content) for m in added]
    for projection in (outcome.projection, restored):
        assert projection.checkpoint_id == cp.id
        raw = [(m.seq, m.role, m.content) for m in projection.raw]
        assert raw[-2:] == appended
        assert [m.seq for m in projection.raw] == list(range(cp.first_retained_seq, 23))
    # ...and the provider gets them, after the summary, on the next turn
    assert isinstance(after, TurnFinished)
    sent = compacting_fake.turn_requests[-1]["messages"]
    assert "fake summary 1" in sent[1]["content"]
    assert [(m["role"], m["content"]) for m in sent[-3:]] == [
        ("user", added[0].content), ("assistant", added[1].content), ("user", "which port?")]
    history = cli_json(run_cli, "history", "--session", "s")["messages"]
    assert [m["seq"] for m in history] == list(range(1, 25))
    expected = [(f"question {i}: " if r == "user" else f"answer {i}: ") + FILLER * 6
                for i in range(10) for r in ("user", "assistant")]
    expected += [added[0].content, added[1].content, "which port?", "Hello from fake"]
    assert [m["content"] for m in history] == expected
    assert all(m["marks"] == [] for m in history if m["seq"] >= cp.first_retained_seq)
    assert all(m["marks"] == [f"summarized in {cp.id}"] for m in history
               if m["seq"] < cp.first_retained_seq)


def test_a_concurrent_ask_process_during_a_held_summary_is_kept(run_cli, compacting_fake, cli_store,
                                                                config_file):
    """Another `picochat ask` process writes a whole turn while the summary is out. It uses
    the built-in offline model (PICOCHAT_MODEL, not remembered), so it costs no litellm import."""
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)
    release = threading.Event()
    compacting_fake.script_summary(("delay", release))

    async def run():
        async with make_worker(cli_store, s.id, config_file) as w:
            compaction = w.compact()
            assert await asyncio.to_thread(compacting_fake.wait_for, 1, "summary", WAIT_S)
            ask = await asyncio.to_thread(run_cli, "ask", "--session", "s", "--json",
                                          "concurrent: where is the config?",
                                          env={"PICOCHAT_MODEL": "offline"})
            assert not compaction.done()
            release.set()
            return ask, await compaction

    try:
        ask, outcome = asyncio.run(run())
    finally:
        release.set()
    assert ask.status == 0, ask.stderr
    reply = json.loads(ask.stdout)["reply"]
    assert outcome.status == "compacted", outcome.error
    assert outcome.checkpoint.source_max_seq == 20
    want = [(21, "user", "concurrent: where is the config?"), (22, "assistant", reply)]
    for projection in (outcome.projection, restore(cli_store, s.id)):
        assert [(m.seq, m.role, m.content) for m in projection.raw][-2:] == want
    assert [(m.seq, m.role, m.content) for m in cli_store.history(s.id)][-2:] == want
    assert cli_store.session(s.id).model is None  # the fake model stays the session's


def test_of_two_overlapping_compactions_the_later_commit_is_refused(compacting_fake, cli_store, db,
                                                                   config_file):
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)
    release = threading.Event()
    compacting_fake.script_summary(("delay", release))  # the first summary request is held
    other = open_store(db)

    async def run():
        async with make_worker(cli_store, s.id, config_file) as a, \
                make_worker(other, s.id, config_file) as b:
            held = a.compact()
            assert await asyncio.to_thread(compacting_fake.wait_for, 1, "summary", WAIT_S)
            first = await b.compact()  # built on the same generation, commits first
            release.set()
            return first, await held

    try:
        first, late = asyncio.run(run())
    finally:
        other.close()
    assert first.status == "compacted", first.error
    assert late.status == "failed" and late.error.kind == "stale_generation"
    assert "nothing was committed" in late.error.message
    assert late.projection.checkpoint_id == first.checkpoint.id  # what is in effect now
    assert [c.id for c in cli_store.checkpoints(s.id)] == [first.checkpoint.id]
    assert cli_store.session(s.id).active_context_checkpoint_id == first.checkpoint.id
    assert [m.seq for m in cli_store.history(s.id)] == list(range(1, 21))


# --- 2. the second summary folds the first, never the raw rows it covered -------------------


def test_second_summary_request_carries_the_first_summary_and_only_new_records(
        compacting_fake, cli_store, config_file):
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)

    async def run():
        async with make_worker(cli_store, s.id, config_file) as w:
            one = await w.compact()
            for i in range(6):
                outcome = await w.submit_turn(f"follow-up {i}: " + FILLER * 8).result()
                assert isinstance(outcome, TurnFinished) and not outcome.compactions
            two = await w.compact()
            return one, two

    one, two = asyncio.run(run())
    assert one.status == two.status == "compacted", (one.error, two.error)
    first, second = one.checkpoint, two.checkpoint
    assert second.parent_checkpoint_id == first.id
    assert second.first_retained_seq > first.first_retained_seq
    req1, req2 = compacting_fake.summary_requests
    assert previous_summary_of(req1) is None
    assert record_seqs(req1) == list(range(1, first.first_retained_seq))
    assert first.summary == with_ledger(summary_text(1), first.summary)
    assert previous_summary_of(req2) == first.summary
    assert record_seqs(req2) == list(range(first.first_retained_seq, second.first_retained_seq))
    assert not [q for q in record_seqs(req2) if q < first.first_retained_seq]
    covered = {m.content.strip() for m in cli_store.history(s.id)
               if m.seq < first.first_retained_seq}
    text = json.dumps(req2)
    assert not [c for c in covered if json.dumps(c)[1:-1] in text]
    # the turns in between were sent the first summary, not the rows it covers
    for body in compacting_fake.turn_requests:
        assert "fake summary 1" in body["messages"][1]["content"]
        assert not [c for c in covered if any(m["content"].strip() == c
                                              for m in body["messages"])]


# --- 3. overflow: one summary, one retry, never a third request --------------------------------


async def turn(w: SessionWorker, text: str):
    handle = w.submit_turn(text)
    events = [e async for e in handle]
    return await handle.result(), events


def test_overflow_is_recovered_with_one_summary_and_one_retry(compacting_fake, cli_store,
                                                              config_file):
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)
    compacting_fake.script_turn(OVERFLOW, ("text", "Recovered answer."))

    async def run():
        async with make_worker(cli_store, s.id, config_file) as w:
            return await turn(w, "after overflow")

    outcome, events = asyncio.run(run())
    assert isinstance(outcome, TurnFinished), outcome
    assert outcome.reply == "Recovered answer."
    assert CompactionStarted("overflow") in events
    assert kinds(compacting_fake) == ["turn", "summary", "turn"]
    first, retry = compacting_fake.turn_requests
    assert retry["messages"][1]["content"].startswith(
        "[Historical conversation summary — reference only, not a new user request]\n")
    assert "fake summary 1" in retry["messages"][1]["content"]
    assert retry["messages"][-1] == first["messages"][-1] == {"role": "user",
                                                              "content": "after overflow"}
    assert len(retry["messages"]) < len(first["messages"])
    [cp] = cli_store.checkpoints(s.id)
    assert (cp.trigger_reason, cp.degraded) == ("overflow", False)
    assert [o.checkpoint for o in outcome.compactions] == [cp]
    assert cli_store.session(s.id).active_context_checkpoint_id == cp.id


def test_a_second_overflow_fails_the_turn_after_exactly_two_turn_requests(run_cli, compacting_fake,
                                                                          cli_store):
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)
    compacting_fake.script_turn(OVERFLOW, OVERFLOW, ("text", "a third request must never be sent"))
    result = run_cli("ask", "--session", "s", "still too big")
    assert result.status == 1, (result.stdout, result.stderr)
    clean(result)
    lines = result.stderr.splitlines()
    # a note about the compaction it ran, then the error: one line, saying what to do
    assert len(lines) == 2, lines
    assert lines[0].startswith("picochat: context compacted (overflow): ")
    assert lines[1].startswith("picochat: ") and "too long" in lines[1]
    assert lines[1].endswith("; your message is saved")
    assert kinds(compacting_fake) == ["turn", "summary", "turn"]
    assert len(compacting_fake.turn_requests) == 2
    history = cli_json(run_cli, "history", "--session", "s")["messages"]
    assert [m["seq"] for m in history] == list(range(1, 22))
    assert (history[-1]["role"], history[-1]["content"]) == ("user", "still too big")


def test_a_failed_summary_during_overflow_falls_back_to_a_degraded_trim(
        run_cli, compacting_fake, cli_store, config_file):
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)
    compacting_fake.script_turn(OVERFLOW, ("text", "Answer after the trim."))
    compacting_fake.script_summary(("status", 500))

    async def run():
        async with make_worker(cli_store, s.id, config_file) as w:
            return await turn(w, "overflow and no summary")

    outcome, _ = asyncio.run(run())
    assert isinstance(outcome, TurnFinished), outcome
    assert outcome.reply == "Answer after the trim."
    [recovery] = outcome.compactions
    assert recovery.degraded and recovery.summary_error is not None
    # the failed summary is not retried
    assert kinds(compacting_fake) == ["turn", "summary", "turn"]
    [cp] = cli_json(run_cli, "checkpoints", "--session", "s")
    assert cp["active"] and cp["degraded"] and cp["trigger_reason"] == "overflow"
    assert cp["summary"].startswith(BREADCRUMB_START)
    retry = compacting_fake.turn_requests[1]["messages"]
    assert BREADCRUMB_START in retry[1]["content"]
    assert retry[2]["content"] == cli_store.history(s.id)[cp["first_retained_seq"] - 1].content
    assert retry[-1] == {"role": "user", "content": "overflow and no summary"}


# --- 4. the summary request's shape -------------------------------------------------------------


def test_compact_sends_the_summary_request_the_contract_describes(run_cli, compacting_fake,
                                                                  cli_store, config_file):
    focus = "the deployment ports and config paths"
    instructions = "Always list every port number under Exact Facts."
    config_file.write_text(compaction_config_text(compacting_fake.base_url, window=6000,
                                                  instructions=instructions), encoding="utf-8")
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)
    info = json.loads(run_cli("info", "--session", "s", "--json").stdout)
    result = run_cli("compact", "--session", "s", "--focus", focus)
    assert result.status == 0, result.stderr
    clean(result)
    assert result.stdout.startswith("Context compacted: ")
    assert result.stdout.splitlines()[-1] == "Raw history unchanged"
    [body] = compacting_fake.requests
    assert is_summary_request(body)
    assert not body.get("tools") and "tool_choice" not in body
    assert body["temperature"] <= 0.3
    # the prose's share of what a compaction leaves, as /info says, within the design's cap
    # (DESIGN.md D10.3)
    assert body["max_tokens"] == info["summary_cap_tokens"] <= min(2048, 6000 // 4)
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    prompt = user_prompt(body)
    for heading in SUMMARY_HEADINGS:
        assert f"## {heading}" in prompt, heading
    assert focus in prompt and instructions in prompt
    assert record_seqs(body)  # the transcript is there, with its records
    [cp] = cli_store.checkpoints(s.id)
    assert cp.summary == with_ledger(summary_text(1), cp.summary)
    assert cp.trigger_reason == "manual"


def test_summary_requests_carry_no_tools_even_when_turns_do(compacting_fake, cli_store, tmp_path):
    big = tmp_path / "big.toml"  # a 16K window
    big.write_text(compaction_config_text(compacting_fake.base_url, window=16_000),
                   encoding="utf-8")
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)

    async def run():
        async with make_worker(cli_store, s.id, big, tools=[TOOL]) as w:
            turn = await w.submit_turn("hello").result()
            return turn, w.info().as_dict(), await w.compact()

    turn, info, outcome = asyncio.run(run())
    assert isinstance(turn, TurnFinished) and outcome.status == "compacted", outcome.error
    assert kinds(compacting_fake) == ["turn", "summary"]
    turn_body, summary_body = compacting_fake.requests
    assert turn_body["tools"] == [TOOL]
    assert not summary_body.get("tools") and "tool_choice" not in summary_body
    assert summary_body["temperature"] <= 0.3
    assert summary_body["max_tokens"] == info["summary_cap_tokens"] <= 2048


# --- 5. a failed summary on /compact changes nothing ---------------------------------------------


def test_a_failed_manual_summary_keeps_the_old_checkpoint(run_cli, compacting_fake, cli_store,
                                                          config_file):
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)

    async def first():
        async with make_worker(cli_store, s.id, config_file) as w:
            return await w.compact()

    old = asyncio.run(first()).checkpoint
    assert old is not None
    seed(cli_store, s.id, 8, start=10)
    generation = cli_store.session(s.id).context_generation
    history = [(m.seq, m.content) for m in cli_store.history(s.id)]
    compacting_fake.script_summary(("status", 500))
    result = run_cli("compact", "--session", "s")
    assert result.status == 1, (result.stdout, result.stderr)
    clean(result)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("picochat: compaction failed: "), lines
    assert kinds(compacting_fake) == ["summary", "summary"]  # one call each, no retry
    listed = cli_json(run_cli, "checkpoints", "--session", "s")
    assert [(c["id"], c["active"]) for c in listed] == [(old.id, True)]
    after = cli_store.session(s.id)
    assert after.active_context_checkpoint_id == old.id
    assert after.context_generation == generation
    assert [(m.seq, m.content) for m in cli_store.history(s.id)] == history
    assert cli_store.search.timeline_entries(s.id) == [(f"context_checkpoint:{old.id}", old.summary)]


# --- 6. a provider-reported usage figure drives the budget, only while it still applies --------


def test_reported_usage_calibrates_the_budget_and_triggers_auto_compaction(compacting_fake,
                                                                           cli_store, config_file):
    s = cli_store.create_session("s")
    # ~4,200 tokens by the stored counts: far below 7,168, and enough older turns that a
    # compaction frees a quarter of the threshold (less would not be worth a summary call)
    seed(cli_store, s.id, 16)
    compacting_fake.usage = {"prompt_tokens": 7_165, "completion_tokens": 5}

    async def run():
        async with make_worker(cli_store, s.id, config_file) as w:
            cards = {"start": w.info().as_dict()}
            first = await w.submit_turn("first question").result()
            cards["after_first"] = w.info().as_dict()
            other = open_store(cli_store.path)
            try:  # another writer appends: the reported prefix still matches
                append_message(other, s.id, "user", "one more note", turn_id="n1")
            finally:
                other.close()
            cards["after_append"] = w.info().as_dict()
            compacting_fake.usage = None  # from now on the fake reports about chars / 4
            handle = w.submit_turn("second question")
            events = [e async for e in handle]
            second = await handle.result()
            cards["after_second"] = w.info().as_dict()
            await w.clear()
            cards["after_clear"] = w.info().as_dict()
            return first, second, events, cards

    first, second, events, cards = asyncio.run(run())
    threshold = cards["start"]["compression_threshold_tokens"]
    assert threshold == 7_168
    assert cards["start"]["usage_source"] == "estimate"
    assert cards["start"]["used_tokens"] < 5_000  # the trigger is the provider's count
    assert isinstance(first, TurnFinished) and not first.compactions
    assert first.usage.prompt_tokens == 7_165
    history = cli_store.history(s.id)
    reply = next(m for m in history if m.seq == first.assistant_seq)
    card = cards["after_first"]
    assert card["usage_source"] == "provider+estimate"
    factor = card["token_factor"]  # the fake's model is no OpenAI model: a conservative factor
    assert factor > 1
    assert card["used_tokens"] == 7_165 + tokens.scale(reply.tokens, factor) > threshold
    [note] = [m for m in history if m.content == "one more note"]
    assert history[-3] == note  # then the second turn's two rows
    card = cards["after_append"]
    assert card["usage_source"] == "provider+estimate"
    assert card["used_tokens"] == 7_165 + tokens.scale(reply.tokens + note.tokens, factor)
    # the reported figure, not the estimate, decided: the second turn compacted first
    assert isinstance(second, TurnFinished)
    assert CompactionStarted("auto") in events
    [auto] = second.compactions
    assert auto.status == "compacted" and auto.checkpoint.trigger_reason == "auto"
    assert auto.checkpoint.tokens_after < auto.checkpoint.tokens_before
    assert kinds(compacting_fake) == ["turn", "summary", "turn"]
    card = cards["after_second"]
    assert card["usage_source"] == "provider+estimate"
    assert card["active_checkpoint_id"] == auto.checkpoint.id
    assert card["used_tokens"] == second.usage.prompt_tokens + tokens.scale(history[-1].tokens,
                                                                            factor)
    card = cards["after_clear"]
    assert card["usage_source"] == "estimate"
    assert card["raw_messages_in_context"] == 0
    assert card["used_tokens"] == card["parts"]["system"] + card["parts"]["framing"]

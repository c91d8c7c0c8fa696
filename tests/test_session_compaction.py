"""The entry points in the session worker (DESIGN.md D11, D20.5): auto before each turn, overflow
recovery with exactly one retry, manual /compact queued behind a turn, /uncompact, and /info
from the same budget."""

from __future__ import annotations

import asyncio

import pytest

from picochat import tokens
from picochat.compaction.report import DEGRADED_NOTE
from picochat.config import CompactionConfig, Config, ModelConfig
from picochat.projection import restore
from picochat.providers.errors import ContextOverflow, ProviderUnavailable
from picochat.session import Compacted, CompactionStarted, SessionWorker, TurnFailed, TurnFinished
from tests.helpers.conversations import talk
from tests.helpers.scripted import Recorder, model, waiter
from tests.helpers.waiting import wait_until_async


SMALL = CompactionConfig(reserve_tokens=1_024, keep_recent_tokens=800)


def worker(store, sid, provider, window=4_096, compaction=SMALL):
    return SessionWorker(store, sid, model(window), provider, "sys", compaction=compaction)


async def turn(w, text="next question"):
    handle = w.submit_turn(text)
    events = [e async for e in handle]
    return await handle.result(), events


def request_tokens(req):
    return tokens.count_provider_messages(req.messages)


def test_auto_compaction_triggers_only_above_the_threshold_and_once(store):
    s = store.create_session("a")
    talk(store, s.id, 3, words=60)  # well below 3,072

    async def run():
        provider = Recorder()
        async with worker(store, s.id, provider) as w:
            below, _ = await turn(w)
            assert provider.summary_requests == [] and not below.compactions
            talk(store, s.id, 12, words=60, start=10)  # now above the threshold
            assert w.budget().should_compact(True)
            above, events = await turn(w)
            return provider, above, events, w.budget()

    provider, above, events, after = asyncio.run(run())
    assert isinstance(above, TurnFinished)
    assert len(provider.summary_requests) == 1  # at most once per turn
    assert [type(e) for e in events[:3]][1:] == [CompactionStarted, Compacted]
    cp = above.compactions[0].checkpoint
    assert cp.trigger_reason == "auto" and not cp.degraded
    assert request_tokens(provider.turn_requests[-1]) <= 3_072
    assert not after.should_compact(True)  # keep_recent gives hysteresis: no re-trigger


def test_disabled_auto_compaction_does_not_run_but_manual_does(store):
    s = store.create_session("d")
    talk(store, s.id, 15, words=60)

    async def run():
        provider = Recorder()
        off = CompactionConfig(enabled=False, reserve_tokens=1_024, keep_recent_tokens=800)
        async with worker(store, s.id, provider, compaction=off) as w:
            outcome, _ = await turn(w)
            assert provider.summary_requests == [] and not outcome.compactions
            return await w.compact()

    assert asyncio.run(run()).compacted


def test_with_auto_compaction_off_a_draft_over_the_hard_window_is_still_made_to_fit(store):
    """`enabled = false` turns off auto compaction only: a request the estimate knows is over
    the window is not sent as it is; the overflow recovery runs first."""
    s = store.create_session("off")
    talk(store, s.id, 30, words=60)  # far over the 4,096 window

    async def run():
        provider = Recorder()
        off = CompactionConfig(enabled=False, reserve_tokens=1_024, keep_recent_tokens=800)
        async with worker(store, s.id, provider, compaction=off) as w:
            return await turn(w), provider

    (outcome, events), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFinished)
    [started] = [e for e in events if isinstance(e, CompactionStarted)]
    assert started.reason == "overflow"
    assert outcome.compactions[0].checkpoint.trigger_reason == "overflow"
    assert len(provider.turn_requests) == 1
    assert request_tokens(provider.turn_requests[0]) <= 4_096


def test_a_failed_auto_summary_keeps_the_context_and_the_turn_goes_on(store):
    s = store.create_session("f")
    talk(store, s.id, 15, words=120)  # ~5,250 tokens: over the 4,976 threshold, under 6,000
    before = restore(store, s.id)

    async def run():
        provider = Recorder(summaries=[ProviderUnavailable("summary service down")])
        async with worker(store, s.id, provider, window=6_000) as w:
            return await turn(w), provider

    (outcome, _), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFinished)
    assert outcome.compactions[0].status == "failed"
    assert store.session(s.id).active_context_checkpoint_id is None
    assert store.checkpoints(s.id) == []
    sent = provider.turn_requests[0].messages
    assert len(sent) == 1 + len(before.raw) + 1  # system, the whole history, the new message


def test_a_smaller_model_over_the_hard_window_degrades_before_sending(store):
    s = store.create_session("swap")
    talk(store, s.id, 15, words=120)  # ~5,250 tokens: fine for 8K, over a 4K window

    async def run():
        provider = Recorder(summaries=[ProviderUnavailable("down")])
        async with worker(store, s.id, provider, window=4_096) as w:
            return await turn(w), provider, w.info()

    (outcome, _), provider, info = asyncio.run(run())
    assert isinstance(outcome, TurnFinished)
    cp = outcome.compactions[0].checkpoint
    assert cp.degraded and cp.trigger_reason == "overflow"
    assert len(provider.turn_requests) == 1  # the doomed request was never sent
    assert request_tokens(provider.turn_requests[0]) <= 4_096
    rows = info.rows()  # /info says the trim was no summary, right under the one in use
    at = rows.index(next(r for r in rows if r[0] == "Summary in use"))
    assert rows[at][1].startswith("Summary 1 · overflow · saved ")
    assert rows[at + 1] == ("", DEGRADED_NOTE)


def test_overflow_recomputes_with_the_stated_window_and_retries_once(store):
    s = store.create_session("o")
    talk(store, s.id, 15, words=60)

    async def run():
        provider = Recorder(turns=[ContextOverflow("too long", window=3_000)])
        async with worker(store, s.id, provider, window=16_000) as w:
            result = await turn(w)
            return result, provider, w

    (outcome, events), provider, w = asyncio.run(run())
    assert isinstance(outcome, TurnFinished)
    assert len(provider.turn_requests) == 2 and len(provider.summary_requests) == 1
    cp = outcome.compactions[-1].checkpoint
    assert cp.trigger_reason == "overflow" and not cp.degraded
    assert w.limits.window == 3_000  # the real window is used from now on
    assert request_tokens(provider.turn_requests[1]) <= 3_000
    assert CompactionStarted("overflow") in events


def test_a_second_overflow_fails_the_turn_without_a_third_request(store):
    s = store.create_session("o2")
    talk(store, s.id, 15, words=60)

    async def run():
        provider = Recorder(turns=[ContextOverflow("too long", window=8_000),
                                   ContextOverflow("too long", window=8_000),
                                   "never sent"])
        async with worker(store, s.id, provider, window=8_000) as w:
            return await turn(w), provider

    (outcome, _), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFailed) and outcome.error.kind == "context_overflow"
    assert "still too long" in outcome.error.message
    assert len(provider.turn_requests) == 2
    history = store.history(s.id)
    assert history[-1].role == "user" and history[-1].content == "next question"


def test_overflow_after_a_summary_this_turn_trims_instead_of_summarizing_again(store):
    s = store.create_session("o3")
    talk(store, s.id, 16, words=60)  # ~3,200 tokens: just over the 3,072 threshold

    async def run():
        provider = Recorder(turns=[ContextOverflow("too long", window=2_500)])
        async with worker(store, s.id, provider, window=4_096) as w:
            return await turn(w), provider

    (outcome, _), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFinished)
    reasons = [(o.reason, o.degraded) for o in outcome.compactions]
    assert reasons == [("auto", False), ("overflow", True)]
    assert len(provider.summary_requests) == 1 and len(provider.turn_requests) == 2


def test_compact_during_a_turn_waits_for_it(store):
    s = store.create_session("q")
    talk(store, s.id, 10)

    async def run():
        release = asyncio.Event()
        provider = Recorder(turns=[waiter(release)])
        async with worker(store, s.id, provider, window=32_000) as w:
            handle = w.submit_turn("a slow question")
            compaction = w.compact()
            await wait_until_async(lambda: provider.turn_requests,
                                   what="the turn never reached the provider")
            # the turn is held in the provider: the compaction is queued, not racing it (no
            # event marks a job that did not start; a racing one would be sending its summary)
            assert handle.started and not compaction.done() and not provider.summary_requests
            release.set()
            first = await handle.result()
            outcome = await compaction
            return first, outcome

    first, outcome = asyncio.run(run())
    assert isinstance(first, TurnFinished)
    assert outcome.compacted and outcome.checkpoint.source_max_seq == first.assistant_seq


def test_uncompact_restores_the_parent_and_bumps_the_generation(store):
    s = store.create_session("u")
    talk(store, s.id, 10)

    async def run():
        async with worker(store, s.id, Recorder(), window=32_000) as w:
            one = (await w.compact()).checkpoint
            talk(store, s.id, 8, start=10)
            two = (await w.compact()).checkpoint
            back = await w.uncompact()
            mid = restore(store, s.id)
            again = await w.uncompact()
            none = await w.uncompact()
            return one, two, back, mid, again, none

    one, two, back, mid, again, none = asyncio.run(run())
    assert (back.undone, back.active) == (two.id, one.id)
    assert mid.checkpoint_id == one.id and mid.raw[0].seq == one.first_retained_seq
    assert (again.undone, again.active) == (one.id, None)
    assert none.undone is None
    assert restore(store, s.id).summary is None and restore(store, s.id).raw[0].seq == 1
    assert len(store.checkpoints(s.id)) == 2  # nothing deleted
    assert store.session(s.id).context_generation == again.context_generation == 4


def sized(n):
    """A user message that costs exactly `n` tokens in a request (n >= 6)."""
    text = "x" + " go" * (n - 6)
    assert tokens.count_message("user", text) == n
    return text


@pytest.mark.parametrize("over", [0, 1])
def test_info_and_auto_compaction_read_the_same_budget(store, over):
    """/info's figures predict the next turn to the token, for a session with its own system
    prompt and the tools on: a question that brings info's `used_tokens` exactly to its
    threshold is sent as a request of exactly that size, with no compaction; one token more
    and the turn compacts first, from a context of threshold + 1 tokens."""
    s = store.create_session("i")
    store.set_session_system_prompt(s.id, "Answer as a terse site reliability engineer. " * 40)
    talk(store, s.id, 9, words=60)  # the question that fills the gap is short
    config = Config(models={"m": ModelConfig("m", "offline", token_limit=4_096)},
                    context_compaction=SMALL)

    async def run():
        provider = Recorder()
        async with SessionWorker.from_config(store, s.id, model(4_096), provider, config) as w:
            card = w.info().as_dict()
            gap = card["compression_threshold_tokens"] - card["used_tokens"]
            outcome, _ = await turn(w, sized(gap + over))
            return card, outcome, provider

    card, outcome, provider = asyncio.run(run())
    assert card["compression_threshold_tokens"] == 3_072
    assert card["parts"]["system"] > 300 and card["parts"]["tools"] > 0  # its own, and tools
    assert isinstance(outcome, TurnFinished)
    if not over:
        assert [c.reason for c in outcome.compactions] == [] and not provider.summary_requests
        [sent] = provider.turn_requests
        assert (tokens.count_provider_messages(sent.messages) + tokens.count_tools(sent.tools)
                == 3_072)
    else:
        [auto] = outcome.compactions
        assert auto.reason == "auto" and auto.compacted
        assert auto.checkpoint.tokens_before == 3_072 + 1


def test_a_system_prompt_over_the_threshold_fails_the_turn_without_dropping_history(store):
    s = store.create_session("fx")
    talk(store, s.id, 3)
    before = store.history(s.id)

    async def run():
        provider = Recorder()
        w = SessionWorker(store, s.id, model(4_096), provider, "rule " * 4_000,
                          compaction=SMALL)
        async with w:
            return await turn(w), provider

    (outcome, _), provider = asyncio.run(run())
    assert isinstance(outcome, TurnFailed)
    assert outcome.error.kind == "fixed_context_exceeds_budget"
    assert "system prompt" in outcome.error.message and "3,072" in outcome.error.message
    assert provider.requests == [] and store.checkpoints(s.id) == []
    assert store.history(s.id)[: len(before)] == before


def test_checkpoint_figures_are_one_estimate_whatever_the_provider_reports(store):
    s = store.create_session("units")
    talk(store, s.id, 10)

    async def run():
        provider = Recorder(usage_scale=0.33)  # a tokenizer that counts a third of ours
        async with worker(store, s.id, provider, window=32_000) as w:
            await turn(w)
            calibrated = w.budget()
            estimate = w.budget().parts.total
            return calibrated, estimate, await w.compact()

    calibrated, estimate, outcome = asyncio.run(run())
    assert calibrated.usage_source == "provider+estimate"
    assert calibrated.used_tokens < estimate // 2
    assert outcome.compacted  # not "would not shrink" from comparing two tokenizers
    assert outcome.checkpoint.tokens_before == estimate


def test_auto_compaction_keeps_the_last_answer_beside_a_long_new_message(store):
    s = store.create_session("last")
    talk(store, s.id, 12, words=60)
    last_answer = store.history(s.id)[-1]

    async def run():
        async with worker(store, s.id, Recorder()) as w:
            return await turn(w, "please fix what you just wrote: " + "detail " * 900)

    outcome, _ = asyncio.run(run())
    assert isinstance(outcome, TurnFinished)
    cp = outcome.compactions[0].checkpoint
    assert cp is not None and cp.first_retained_seq <= last_answer.seq - 1


def test_a_big_system_prompt_under_the_window_still_gets_its_turn_and_info(store):
    s = store.create_session("fixed")
    talk(store, s.id, 1, words=10)

    async def run():
        provider = Recorder()
        w = SessionWorker(store, s.id, model(4_096), provider, "rule " * 3_100,
                          compaction=SMALL)
        async with w:
            result = await turn(w)
            return result, w.info(), provider

    (outcome, _), info, provider = asyncio.run(run())
    assert isinstance(outcome, TurnFinished) and provider.summary_requests == []
    assert info.as_dict()["fixed_exceeds_threshold"] is True
    assert any(label == "Warning" and "compaction cannot help" in value
               for label, value in info.rows())

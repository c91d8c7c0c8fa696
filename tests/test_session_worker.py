"""The session worker: one job at a time, in order; failed and cancelled turns keep the user's data."""

from __future__ import annotations

import asyncio

import pytest

from picochat.config import Config
from picochat.messages import INTERRUPTED
from picochat.models import resolve_model
from picochat.providers.base import Finish, Provider, ProviderRequest, TextDelta, Usage, ModelInfo
from picochat.providers.errors import RateLimited
from picochat.providers.offline import OfflineProvider
from picochat.session import SessionWorker, TurnFailed, TurnFinished, TurnStarted
from tests.helpers.waiting import WAIT_S, wait_until_async
from tests.helpers.storage import append_message

OFFLINE = resolve_model(Config(), "offline")


class Scripted(Provider):
    """Streams the given pieces, waiting `gap` s between them, then, given `hold`, keeps the
    stream open until the test sets it (`holding` is set once it waits there: every piece
    has been taken), then optionally raises.

    The gap only paces the output: a test that needs the turn still running when it acts
    holds it instead."""

    def __init__(self, pieces, gap=0.0, error=None, hold: asyncio.Event | None = None):
        self.info = ModelInfo("test", "scripted")
        self.pieces, self.gap, self.error, self.hold = pieces, gap, error, hold
        self.holding = asyncio.Event()
        self.requests: list[ProviderRequest] = []

    async def stream(self, request):
        self.requests.append(request)
        for piece in self.pieces:
            await asyncio.sleep(self.gap)  # pacing, not a wait: see the docstring
            yield TextDelta(piece)
        if self.hold is not None:
            self.holding.set()
            await self.hold.wait()
        if self.error:
            raise self.error
        yield Usage(10, 2)
        yield Finish()


async def test_turn_streams_events_and_persists_both_messages(store):
    s = store.create_session("w")
    async with SessionWorker(store, s.id, OFFLINE, OfflineProvider(0), "sys") as worker:
        handle = worker.submit_turn("hello")
        events = [e async for e in handle]
    assert isinstance(events[0], TurnStarted) and isinstance(events[-1], TurnFinished)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == events[-1].reply
    roles = [(m.role, m.content) for m in store.history(s.id)]
    assert roles == [("user", "hello"), ("assistant", text)]


async def test_jobs_run_one_at_a_time_in_submission_order(store):
    s = store.create_session("w")
    provider = Scripted(["a", "b", "c"], gap=0.02)  # paced: the jobs queue up behind it
    order: list[str] = []
    async with SessionWorker(store, s.id, OFFLINE, provider, "sys") as worker:
        first = worker.submit_turn("one")
        cleared = worker.call(lambda: order.append(f"clear after {len(store.history(s.id))}")
                              or store.clear_context(s.id))
        second = worker.submit_turn("two")
        await asyncio.gather(first.result(), cleared, second.result())
    # The clear waited until turn 1 had stored both messages; turn 2 came after the clear.
    assert order == ["clear after 2"]
    assert len(provider.requests) == 2
    assert [m["content"] for m in provider.requests[1].messages] == ["sys", "two"]
    assert [m["content"] for m in provider.requests[0].messages] == ["sys", "one"]


async def test_a_failed_turn_keeps_the_user_message_and_the_partial_answer(store):
    s = store.create_session("w")
    provider = Scripted(["half an ", "answer"], error=RateLimited("slow down", 3))
    async with SessionWorker(store, s.id, OFFLINE, provider, "sys") as worker:
        outcome = await worker.submit_turn("question").result()
    assert isinstance(outcome, TurnFailed) and outcome.error.kind == "rate_limit"
    history = store.history(s.id)
    assert [(m.role, m.content, m.status) for m in history] == [
        ("user", "question", "complete"), ("assistant", "half an answer", INTERRUPTED)]
    assert outcome.user_seq == 1 and outcome.partial_seq == 2


async def test_cancel_stops_the_stream_at_once_and_keeps_what_arrived(store):
    s = store.create_session("w")
    # the stream stays open after two pieces: what arrives later can only come from a turn
    # that the cancel did not stop
    provider = Scripted(["first ", "second "], gap=0.05, hold=asyncio.Event())
    async with SessionWorker(store, s.id, OFFLINE, provider, "sys") as worker:
        handle = worker.submit_turn("go")
        seen = []
        async for event in handle:
            if isinstance(event, TextDelta):
                seen.append(event.text)
                if len(seen) == 2:
                    handle.cancel()
        outcome = await handle.result()
    assert isinstance(outcome, TurnFailed) and outcome.cancelled
    partial = store.history(s.id)[-1]
    assert partial.status == INTERRUPTED and partial.content == "first second "


async def test_a_turn_cancelled_while_queued_never_reaches_the_provider(store):
    s = store.create_session("w")
    provider = Scripted(["slow"], gap=0.1)  # pacing only: the cancel comes before it runs
    async with SessionWorker(store, s.id, OFFLINE, provider, "sys") as worker:
        running = worker.submit_turn("one")
        queued = worker.submit_turn("two")
        queued.cancel()
        await running.result()
        outcome = await queued.result()
    assert isinstance(outcome, TurnFailed) and outcome.cancelled and outcome.user_seq is None
    assert len(provider.requests) == 1
    assert [m.content for m in store.history(s.id)] == ["one", "slow"]


async def test_a_queued_turn_taken_back_ends_at_once_and_leaves_the_queue(store):
    """A queued message the user takes back to edit: its turn ends now, not when the answer
    before it ends; the queued count drops at once; what waits behind it still runs, in
    order."""
    s = store.create_session("w")
    release = asyncio.Event()

    class HeldFirst(Scripted):
        async def stream(self, request):
            if not self.requests:
                await release.wait()
            async for event in super().stream(request):
                yield event

    provider = HeldFirst(["ok"])
    async with SessionWorker(store, s.id, OFFLINE, provider, "sys") as worker:
        told: list[int] = []  # what a front end is told, with no polling
        worker.on_queue_change(lambda: told.append(worker.queued))
        running = worker.submit_turn("one")
        middle = worker.submit_turn("two")
        last = worker.submit_turn("three")
        await wait_until_async(lambda: worker.busy, what="turn one never began")
        assert worker.queued == 2
        middle.cancel()
        # it ends while "one" is still held: "one" ends only once released, below
        outcome = await asyncio.wait_for(middle.result(), WAIT_S)
        assert isinstance(outcome, TurnFailed) and outcome.cancelled
        assert outcome.user_seq is None and not middle.started
        assert worker.queued == 1 and not running._result.done()
        release.set()
        await running.result()
        assert isinstance(await last.result(), TurnFinished)
    assert [m.content for m in store.history(s.id) if m.role == "user"] == ["one", "three"]
    # one, two, three queued; "one" begins; "two" taken back; "three" begins
    assert told == [1, 2, 3, 2, 1, 0]
    assert len(provider.requests) == 2


async def test_total_timeout_fails_the_turn_clearly(store):
    s = store.create_session("w")
    provider = Scripted([], hold=asyncio.Event())  # a provider that never answers
    async with SessionWorker(store, s.id, OFFLINE, provider, "sys", total_timeout=0.1) as worker:
        outcome = await worker.submit_turn("hi").result()
    assert isinstance(outcome, TurnFailed) and outcome.error.kind == "timeout"
    assert [m.role for m in store.history(s.id)] == ["user"]


async def test_an_empty_reply_is_an_error_not_a_blank_message(store):
    s = store.create_session("w")
    async with SessionWorker(store, s.id, OFFLINE, Scripted([]), "sys") as worker:
        outcome = await worker.submit_turn("hi").result()
    assert isinstance(outcome, TurnFailed) and "empty reply" in outcome.error.message
    assert [m.role for m in store.history(s.id)] == ["user"]


@pytest.mark.parametrize("system", ["You are terse.", ""])
async def test_system_prompt_first_and_alone(store, system):
    s = store.create_session("w")
    provider = Scripted(["ok"])
    async with SessionWorker(store, s.id, OFFLINE, provider, system) as worker:
        await worker.submit_turn("a").result()
        await worker.submit_turn("b").result()
    sent = provider.requests[1].messages
    expected = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "b"}]
    assert list(sent) == expected


async def test_closing_runs_nothing_that_was_still_queued_but_keeps_its_messages(store):
    s = store.create_session("w")
    provider = Scripted(["slow "], hold=asyncio.Event())  # "slow " shown, then still running
    worker = await SessionWorker(store, s.id, OFFLINE, provider, "sys").start()
    running = worker.submit_turn("one")
    queued = worker.submit_turn("two")
    command = worker.call(lambda: store.clear_context(s.id))
    await asyncio.wait_for(provider.holding.wait(), WAIT_S)
    await worker.close()
    assert (await running.result()).cancelled
    unsent = await queued.result()
    assert unsent.cancelled and unsent.user_seq == 3
    assert command.cancelled()
    assert len(provider.requests) == 1  # the queued message is saved (typed and sent by the
    rows = [(m.content, m.status) for m in store.history(s.id)]  # user), never sent
    assert rows == [("one", "complete"), ("slow ", INTERRUPTED), ("two", "complete")]
    assert store.session(s.id).context_generation == 0  # the queued clear never ran



async def test_another_processes_row_inside_a_tool_chain_keeps_the_chain_and_stays_out(
        store, monkeypatch):
    """Another terminal's question lands between this turn's tool call and its result: the
    next request still carries the call and its result (not the other question), so the model
    does not ask for the same tool again."""
    from tests.helpers.scripted import Recorder

    s = store.create_session("w")
    provider = Recorder(turns=[{"calls": [("call_1", "history_search", '{"query": "port"}')]},
                               "The port is in the log."])
    from picochat.messages import NewMessage
    from picochat.prepare import prepare

    real_append = store.append_messages

    def append(session_id, messages, **kw):  # the call, the other question, the result
        messages = list(messages)
        if not (messages and messages[0].role == "assistant" and messages[0].tool_calls):
            return real_append(session_id, messages, **kw)
        call = real_append(session_id, messages[:1], **kw)
        real_append(session_id, [prepare(NewMessage("user", "another terminal's question",
                                                    turn_id="t_other"))])
        return call + real_append(session_id, messages[1:], **kw)

    monkeypatch.setattr(store, "append_messages", append)
    async with SessionWorker.from_config(store, s.id, OFFLINE, provider, Config()) as worker:
        outcome = await worker.submit_turn("find the port").result()
    assert isinstance(outcome, TurnFinished), outcome
    second = provider.turn_requests[1].messages
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert second[2]["tool_calls"][0]["id"] == "call_1" == second[3]["tool_call_id"]
    assert all("another terminal" not in str(m.get("content")) for m in second)
    assert len(provider.turn_requests) == 2


async def test_a_bug_inside_a_turn_ends_it_with_a_line_naming_the_log_file(store, tmp_path):
    """A bug is not the user's to debug from a traceback: the turn ends with one line that
    says where its frames were written, and the log holds the kind, never the message."""
    import logging

    from picochat import logs

    log_file = tmp_path / "logs" / "picochat.log"
    logs.setup_logging(log_file)
    try:
        s = store.create_session("w")
        provider = Scripted(["partial "], error=RuntimeError("secret user text"))
        async with SessionWorker(store, s.id, OFFLINE, provider, "sys") as worker:
            outcome = await worker.submit_turn("hello").result()
        assert isinstance(outcome, TurnFailed)
        assert outcome.error.user_line().startswith(
            f"internal error (RuntimeError); details are in {log_file}")
        written = log_file.read_text()
        assert "turn_crashed" in written and "secret user text" not in written
    finally:
        for handler in list(logging.getLogger("picochat").handlers):
            logging.getLogger("picochat").removeHandler(handler)
        logs._configured = None


# --- the turn an undo takes back (/undo, /retry) ------------------------------------------------

def _turn(store, sid: str, n: int, turn_id: str | None = None) -> None:
    append_message(store, sid, "user", f"question {n}", turn_id=turn_id or f"t{n}")
    append_message(store, sid, "assistant", f"answer {n}", turn_id=turn_id or f"t{n}")


def _summary_from(first_retained_seq: int):
    from picochat.messages import NewCheckpoint

    return NewCheckpoint(parent_checkpoint_id=None, summary="the summary",
                         first_retained_seq=first_retained_seq, source_max_seq=0,
                         trigger_reason="manual", provider_kind="offline", model="offline",
                         tokens_before=100, tokens_after=10)


async def test_the_turn_named_before_an_undo_is_the_turn_the_undo_takes_back(store):
    """`last_turn` is what a front end names (and asks about) before the undo: it must be
    what the store then takes back, turn after turn, also across a summary's boundary and
    with another writer's rows between a turn's own."""
    s = store.create_session("w")
    _turn(store, s.id, 1)
    _turn(store, s.id, 2)
    store.commit_context_checkpoint(s.id, 0, _summary_from(4))  # its boundary cuts turn 2
    append_message(store, s.id, "user", "question 3", turn_id="t3")
    append_message(store, s.id, "user", "elsewhere", turn_id="other")  # another writer
    append_message(store, s.id, "assistant", "answer 3", turn_id="t3")
    async with SessionWorker(store, s.id, OFFLINE, OfflineProvider(0), "sys") as worker:
        taken = []
        while (named := await worker.last_turn()) is not None:
            result = await worker.undo(named.seqs)
            assert result is not None and result.removed == named.seqs
            taken.append((named.seqs, named.question))
        assert (await worker.undo((1, 2))) is None  # nothing left: nothing taken back
    assert taken == [((5, 7), "question 3"), ((6,), "elsewhere"), ((3, 4), "question 2"),
                     ((1, 2), "question 1")]


async def test_an_undo_whose_turn_is_no_longer_the_newest_takes_nothing_back(store):
    s = store.create_session("w")
    _turn(store, s.id, 1)
    async with SessionWorker(store, s.id, OFFLINE, OfflineProvider(0), "sys") as worker:
        named = await worker.last_turn()
        _turn(store, s.id, 2)  # another picochat, after the user was told which turn goes
        assert (await worker.undo(named.seqs)) is None
        store.clear_context(s.id)
        assert (await worker.last_turn()) is None  # after /clear: no turn to take back
    assert not any(m.retracted for m in store.history(s.id))

"""When the overflow trim finds nothing that fits, the line names the real cause (issue 21,
item 5): the newest message, the system prompt and tools, or a summary that cannot be dropped,
each with its figures and what to do; or, for a request that fits by picochat's count, the
window (a server that refused it) or the server's own count (an auto check that went by it).

Each over-the-window cause was told "even the newest turn alone does not fit the model's
window", and the auto check spoke of a server error that never happened."""

from __future__ import annotations

import asyncio

import pytest

from picochat import tokens
from picochat.budget import budget_limits
from picochat.compaction.compact import CompactMode, CompactRequest, compact_context
from picochat.messages import NewCheckpoint
from picochat.projection import restore, summary_block
from picochat.providers.errors import ProviderUnavailable
from picochat.tools.registry import schemas
from tests.helpers.conversations import FILLER, talk
from tests.helpers.scripted import Recorder, well_formed
from tests.helpers.storage import append_message


def fixed(system, tools=()):
    """What a request costs before any history: system prompt, tool schemas, reply priming."""
    return (tokens.count_message("system", system) + tokens.count_tools(tools)
            + tokens.REPLY_PRIMING_TOKENS)


def trim_fails(store, sid, window=4_096, system="sys", tools=(), reason="overflow"):
    """Overflow recovery (or the check before a turn of a draft over the window) where the
    summary fails, so only a degraded whole-turn trim could help, and none fits: it changes
    nothing, and this is the line the user reads."""
    before = store.checkpoints(sid), restore(store, sid)
    outcome = asyncio.run(compact_context(
        store, Recorder(summaries=[ProviderUnavailable("down")]), CompactRequest(
            session_id=sid, reason=reason, limits=budget_limits(window, None, 1_024, 800),
            system_prompt=system, tools=tuple(tools), mode=CompactMode.SUMMARY_OR_TRIM)))
    assert outcome.status == "failed"
    assert (store.checkpoints(sid), restore(store, sid)) == before
    return outcome.error.user_line()


@pytest.mark.parametrize("older", [0, 3])
def test_a_message_longer_than_the_window_is_named_with_its_size(store, older):
    s = store.create_session("long")
    talk(store, s.id, older, words=20)
    big = append_message(store, s.id, "user", "paste: " + FILLER * 400, turn_id="big")
    line = trim_fails(store, s.id)
    where = (", and there is no older turn to drop" if not older else
             " even with every older turn left out")
    assert line == (
        f"your message #{big.seq} is {big.tokens:,} tokens and the system prompt and tools "
        f"{fixed('sys'):,}: together over the model's window of 4,096 tokens{where} (/clear, "
        "then send it shorter or in parts, or use a model with a larger window)")


def test_a_system_prompt_that_leaves_no_room_for_the_message_is_named(store):
    system = "Follow the runbook to the letter. " * 340  # under the threshold, not by much
    tools = schemas(("read_file", "history_search"))
    assert 2_500 < fixed(system, tools) < 3_072
    s = store.create_session("fixed")
    talk(store, s.id, 3, words=20)
    question = append_message(store, s.id, "user", "check this: " + FILLER * 100, turn_id="q")
    assert question.tokens < 4_096 // 2  # the message alone is not the problem
    line = trim_fails(store, s.id, system=system, tools=tools)
    assert line == (
        f"the system prompt is {tokens.count_message('system', system):,} tokens, the tool "
        f"schemas {tokens.count_tools(tools):,} and your message #{question.seq} "
        f"{question.tokens:,}: together over the model's window of 4,096 tokens even with every "
        "older turn left out (shorten the system prompt, disable tools, or use a model with a "
        "larger window)")


def test_a_summary_that_no_longer_fits_a_smaller_window_is_named(store):
    """A checkpoint written for a large window, then the server states a small one: the
    summary and the new question are the whole context, and a trim cannot drop the summary."""
    s = store.create_session("summary")
    talk(store, s.id, 6, words=60)
    question = append_message(store, s.id, "user", "and the port?", turn_id="q")
    summary = well_formed("- keep the api up", Progress="\n".join(
        f"- service {n} listens on port {8000 + n}" for n in range(200)))
    store.commit_context_checkpoint(s.id, 0, NewCheckpoint(
        None, summary, question.seq, question.seq - 1, "manual", "test", "m", 3_000, 2_500))
    assert restore(store, s.id).raw == (question,)
    size = tokens.count_message("user", summary_block(summary))
    assert size > 2_048
    line = trim_fails(store, s.id, window=2_048)
    assert line == (
        f"the summary of the earlier conversation is {size:,} tokens, your message "
        f"#{question.seq} {question.tokens:,} and the system prompt and tools {fixed('sys'):,}: "
        "together over the model's window of 2,048 tokens, and there is no older turn to drop "
        "(/clear starts the context afresh and keeps the raw history; or use a model with a "
        "larger window)")


def test_three_tiny_messages_refused_by_a_server_blame_its_window(store):
    """The request fits the window by picochat's count: the server's real context is smaller
    than it said. No trim of these turns shrinks the request, and none is needed."""
    s = store.create_session("tiny")
    append_message(store, s.id, "user", "hi", turn_id="t1")
    append_message(store, s.id, "assistant", "hello", turn_id="t1")
    append_message(store, s.id, "user", "how are you?", turn_id="t2")
    line = trim_fails(store, s.id, window=128_000)
    assert "newest turn" not in line and "your message" not in line
    assert line.startswith("picochat counts about ")
    assert ("tokens in the request, within the window of 128,000: the server's real context "
            "must be smaller than its error or the config says") in line


def test_an_auto_check_over_the_window_by_the_servers_count_says_so(store):
    """Before a turn, the draft is over the window only by the server's count of the last
    request (picochat counts it well within): no server refused anything, so the line must not
    speak of its error, and says what keeps it from happening again."""
    s = store.create_session("counted")
    append_message(store, s.id, "user", "how are you?", turn_id="t1")
    line = trim_fails(store, s.id, window=128_000, reason="auto")
    assert "error" not in line
    assert line.startswith("picochat counts about ")
    assert line.endswith(
        "tokens in the request, within the window of 128,000, but the server counted more "
        "for the last request than picochat does (/clear, or set a lower token_limit for this "
        "model in the config so picochat compacts sooner)")

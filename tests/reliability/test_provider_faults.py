"""Provider faults (issue 7): a fake server that misbehaves on cue. Each `picochat ask` ends in
a clear outcome: success, or exit 1 with one `picochat:` line; the user's message is kept; a
partial answer is kept and marked interrupted; the next request is well-formed; and picochat
sends exactly one request per attempt (no retry storm). The status-code matrix (401, 429, 404,
500, timeout, refused) is in tests/test_cli_litellm.py; these are the faults inside a 200."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import NOISE, assert_clean_failure, history
from tests.helpers.config import ENV, write_config
from tests.helpers.fakes.openai import FakeOpenAI

pytestmark = pytest.mark.reliability


@pytest.fixture
def fake(fake_openai: FakeOpenAI, config_file):
    write_config(config_file, fake_openai.base_url, "timeout = 3\n")
    return fake_openai


def ask(run_cli, text: str):
    return run_cli("ask", "--session", "s", text, env=ENV)


def assert_clean(result) -> None:
    for word in NOISE:
        assert word not in result.stdout and word not in result.stderr, (word, result)
    if result.status:
        assert_clean_failure(result)


def assert_next_turn_well_formed(run_cli, fake: FakeOpenAI, before: int) -> list[dict]:
    """A normal turn after the fault: one more request, its messages alternate sensibly
    (no empty assistant message, no unanswered tool call), and it succeeds."""
    fake.script_turn(("text", "recovered fine"))
    after = ask(run_cli, "and now?")
    assert after.status == 0, after.stderr
    assert "recovered fine" in after.stdout
    assert len(fake.turn_requests) == before + 1
    sent = fake.turn_requests[-1]["messages"]
    assert sent[-1] == {"role": "user", "content": "and now?"} or \
        sent[-1]["content"] == "and now?"
    for m in sent:
        if m["role"] == "assistant":
            assert m.get("content") or m.get("tool_calls"), m
    called = {c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls") or ()}
    answered = {m["tool_call_id"] for m in sent if m["role"] == "tool"}
    assert called == answered, (called, answered)
    return sent


def test_a_stream_cut_mid_answer_keeps_the_partial_marked_interrupted(run_cli, fake):
    fake.script_turn(("cut", "the first half of a long answer that never"))
    result = ask(run_cli, "tell me everything")
    assert_clean_failure(result)
    assert "partial answer" in result.stderr  # "...your message and the partial answer are saved"
    assert len(fake.turn_requests) == 1
    user, partial = history(run_cli, "--session", "s")
    assert user["content"] == "tell me everything"
    assert partial["role"] == "assistant" and partial["status"] == "interrupted"
    assert partial["content"].startswith("the first half")
    sent = assert_next_turn_well_formed(run_cli, fake, 1)
    assert any("the first half" in (m.get("content") or "") for m in sent)  # still context


def test_a_stream_cut_before_any_text_keeps_the_message_only(run_cli, fake):
    fake.script_turn(("cut", "never sent", 0))
    result = ask(run_cli, "hello?")
    assert_clean_failure(result)
    assert [m["role"] for m in history(run_cli, "--session", "s")] == ["user"]
    assert_next_turn_well_formed(run_cli, fake, 1)


def test_malformed_sse_ends_the_turn_clearly(run_cli, fake):
    fake.script_turn(("garbage", "text before the bad line", "text after it"))
    result = ask(run_cli, "stream something odd")
    assert_clean(result)
    assert len(fake.turn_requests) == 1
    messages = history(run_cli, "--session", "s")
    assert messages[0]["content"] == "stream something odd"
    if result.status == 0:
        assert messages[1]["status"] == "complete" and messages[1]["content"]
    assert_next_turn_well_formed(run_cli, fake, 1)


def test_a_reply_without_usage_is_saved_and_counted_locally(run_cli, fake):
    fake.script_turn(("no_usage", "an answer with no usage chunk"))
    result = run_cli("ask", "--session", "s", "--json", "count me", env=ENV)
    assert result.status == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["reply"] == "an answer with no usage chunk"  # usage: litellm estimates one
    info = json.loads(run_cli("info", "--session", "s", "--json", env=ENV).stdout)
    assert info["used_tokens"] > 0
    assert_next_turn_well_formed(run_cli, fake, 1)


def test_an_empty_reply_is_an_error_and_saves_no_empty_message(run_cli, fake):
    fake.script_turn(("empty",))
    result = ask(run_cli, "say nothing")
    assert_clean_failure(result)
    assert "empty" in result.stderr
    assert [m["role"] for m in history(run_cli, "--session", "s")] == ["user"]
    assert len(fake.turn_requests) == 1
    assert_next_turn_well_formed(run_cli, fake, 1)


@pytest.mark.parametrize("how", ["headers", "silence"])
def test_a_hanging_server_times_out_once_with_one_request(run_cli, fake, how):
    fake.script_turn(("hang", how))
    result = ask(run_cli, "are you there?")
    assert_clean_failure(result)
    assert "within 3 s" in result.stderr, result.stderr  # the configured timeout, named
    assert len(fake.turn_requests) == 1
    assert [m["role"] for m in history(run_cli, "--session", "s")] == ["user"]
    assert_next_turn_well_formed(run_cli, fake, 1)


def test_invalid_json_in_tool_call_arguments_is_answered_not_crashed(run_cli, fake):
    fake.script_turn(("tool_calls", [("call_1", "read_file", '{"path": "README.md", oops')]),
                     ("text", "I could not read it"))
    result = ask(run_cli, "read the readme")
    assert_clean(result)
    assert len(fake.turn_requests) <= 2
    messages = history(run_cli, "--session", "s")
    assert messages[0]["content"] == "read the readme"
    if result.status == 0:
        tool = [m for m in messages if m["role"] == "tool"]
        assert tool and tool[0]["tool_status"] != "ok", tool
    assert_next_turn_well_formed(run_cli, fake, len(fake.turn_requests))


def test_a_500_then_success_is_one_request_each(run_cli, fake):
    fake.script_turn(("status", 500), ("status", 429, {"error": {"message": "slow down",
                                                                "type": "rate_limit"}},
                                       {"Retry-After": "1"}))
    first, second = ask(run_cli, "one"), ask(run_cli, "two")
    assert_clean_failure(first)
    # a 429 gets one said wait and one more request (issue 20); a 500 none
    assert second.status == 0 and "sending once more in 1 s" in second.stderr
    assert len(fake.turn_requests) == 3
    assert [m["content"] for m in history(run_cli, "--session", "s")] == [
        "one", "two", fake.default_text]
    assert_next_turn_well_formed(run_cli, fake, 3)

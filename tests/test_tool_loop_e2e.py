"""The tool loop through litellm and a fake OpenAI-compatible server: streamed tool calls,
results sent back whole, and the request-local overflow retry, counted request by request."""

from __future__ import annotations

import pytest

import json

from tests.helpers.cli import NOISE, history
from tests.helpers.config import ENV
from tests.helpers.fakes.openai import CONTEXT_OVERFLOW_BODY, chains_whole


@pytest.mark.slow
def test_streamed_parallel_tool_calls_run_and_go_back_whole(run_cli, fake):
    run_cli("ask", "--session", "s", "remember: the canary host is cn-west-12", env=ENV)
    fake.script(
        ("tool_calls", [("call_a", "history_search", json.dumps({"query": "canary host"})),
                        ("call_b", "read_file", json.dumps({"path": "../../etc/passwd"}))]),
        ("text", "The canary host is cn-west-12."))
    result = run_cli("ask", "--session", "s", "which host is the canary?", env=ENV)
    assert result.status == 0, result.stderr
    assert result.stdout.strip() == "The canary host is cn-west-12."
    # each line says what was searched or read
    assert "ran history_search “canary host” (ok)" in result.stderr
    assert "ran read_file ../../etc/passwd (error)" in result.stderr
    for word in NOISE:
        assert word not in result.stderr
    turns = fake.requests[1:]
    assert len(turns) == 2
    assert {t["function"]["name"] for t in turns[0]["tools"]} == {
        "history_search", "timeline_recall", "read_file"}
    sent = turns[1]["messages"]
    chains_whole(sent)
    call, a, b = sent[-3:]
    assert [c["id"] for c in call["tool_calls"]] == ["call_a", "call_b"]
    assert (a["tool_call_id"], b["tool_call_id"]) == ("call_a", "call_b")
    assert "cn-west-12" in a["content"] and "`..` is not allowed" in b["content"]
    rows = history(run_cli, "--session", "s")
    assert [r["role"] for r in rows][-5:] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [r["tool_status"] for r in rows if r["role"] == "tool"] == ["ok", "error"]


@pytest.mark.slow
def test_an_overflow_after_a_tool_batch_is_retried_once_on_this_turn_alone(run_cli, fake):
    for i in range(3):
        fake.script(("text", f"answer {i}"))
        run_cli("ask", "--session", "o", f"earlier question {i}", env=ENV)
    fake.script(
        ("tool_calls", [("call_x", "history_search", json.dumps({"query": "question"}))]),
        ("status", 400, CONTEXT_OVERFLOW_BODY),
        ("text", "found them"))
    before = len(fake.requests)
    result = run_cli("ask", "--session", "o", "list my earlier questions", env=ENV)
    assert result.status == 0, result.stderr
    requests = fake.requests[before:]
    assert len(requests) == 3 and not any("<<<TRANSCRIPT" in json.dumps(r) for r in requests)
    retry = requests[2]["messages"]
    assert [m["role"] for m in retry] == ["system", "user", "assistant", "tool"]
    assert retry[1]["content"] == "list my earlier questions"
    chains_whole(retry)
    rows = history(run_cli, "--session", "o")
    assert [r["role"] for r in rows].count("tool") == 1  # the tool ran once
    assert run_cli("checkpoints", "--session", "o", "--json").stdout.strip() == "[]"

"""The headless CLI end to end through litellm, against a fake OpenAI server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest

from tests.helpers.cli import SITECUSTOMIZE, assert_clean_failure, history
from tests.helpers.config import ENV, write_config
from tests.helpers.fakes.openai import AUTH_BODY, CONTEXT_OVERFLOW_BODY, RATE_LIMIT_BODY

DEFAULT_PROMPT = "You are a helpful assistant."


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- happy path -----------------------------------------------------------------------------


def test_ask_streams_the_reply_and_sends_one_well_formed_request(run_cli, fake):
    fake.script(("text", "Hello from fake, streamed in pieces."))
    result = run_cli("ask", "hello", env=ENV)
    assert result.status == 0, result.stderr
    assert result.stdout == "Hello from fake, streamed in pieces.\n"
    assert "Traceback" not in result.stderr
    [body] = fake.requests
    assert body["stream"] is True
    assert body["stream_options"]["include_usage"] is True
    assert body["model"] == "fake-model"
    assert body["messages"] == [{"role": "system", "content": DEFAULT_PROMPT},
                                {"role": "user", "content": "hello"}]
    assert fake.headers[0]["authorization"] == "Bearer test-key"


def test_agent_system_prompt_is_sent_first(run_cli, fake, config_file):
    write_config(config_file, fake.base_url,
                 '\n[agents.default]\nsystem_prompt = "You are a terse pirate."\n')
    assert run_cli("ask", "hello", env=ENV).status == 0
    [body] = fake.requests
    assert body["messages"] == [{"role": "system", "content": "You are a terse pirate."},
                                {"role": "user", "content": "hello"}]


@pytest.mark.slow
def test_second_ask_sends_the_first_turn_back_in_order(run_cli, fake):
    fake.script(("text", "First answer: port 8443."), ("text", "Second answer."))
    assert run_cli("ask", "my port is 8443", env=ENV).status == 0
    second = run_cli("ask", "what port?", env=ENV)
    assert second.status == 0, second.stderr
    assert second.stdout == "Second answer.\n"
    assert len(fake.requests) == 2
    assert fake.requests[1]["messages"] == [
        {"role": "system", "content": DEFAULT_PROMPT},
        {"role": "user", "content": "my port is 8443"},
        {"role": "assistant", "content": "First answer: port 8443."},
        {"role": "user", "content": "what port?"},
    ]


def test_ask_json_reports_the_servers_usage(run_cli, fake):
    fake.usage = {"prompt_tokens": 123, "completion_tokens": 45, "total_tokens": 168}
    fake.script(("text", "JSON reply"))
    result = run_cli("ask", "--json", "hi", env=ENV)
    assert result.status == 0, result.stderr
    body = json.loads(result.stdout)  # the whole of stdout is one object
    assert set(body) == {"session_id", "reply", "usage", "compaction"}
    assert body["reply"] == "JSON reply"
    assert body["compaction"] is None
    assert body["usage"]["prompt_tokens"] == 123
    assert body["usage"]["completion_tokens"] == 45
    assert body["usage"].get("total_tokens", 168) == 168
    assert isinstance(body["session_id"], str) and body["session_id"]


def test_named_session_with_model_flag_keeps_both_messages(run_cli, fake):
    fake.script(("text", "Work reply"))
    result = run_cli("ask", "--session", "work", "--model", "fake", "start work", env=ENV)
    assert result.status == 0, result.stderr
    listed = json.loads(run_cli("sessions", "--json", env=ENV).stdout)
    assert [s["name"] for s in listed] == ["work"]
    messages = history(run_cli, "--session", "work")
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "start work"), ("assistant", "Work reply")]


# --- failures -------------------------------------------------------------------------------


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_401_says_the_key_was_refused(run_cli, fake):
    fake.script(("status", 401, AUTH_BODY))
    result = run_cli("ask", "hello", env=ENV)
    assert_clean_failure(result)
    assert "key" in result.stderr.lower() and "FAKE_API_KEY" in result.stderr
    assert len(fake.requests) == 1
    assert [(m["role"], m["content"]) for m in history(run_cli)] == [("user", "hello")]


def test_400_context_length_exceeded_names_the_window(run_cli, fake):
    fake.script(("status", 400, CONTEXT_OVERFLOW_BODY))
    long = "a long message " * 1500  # over half the window: the server's word is credible
    result = run_cli("ask", long, env=ENV)
    assert_clean_failure(result)
    assert "larger than the model's window" in result.stderr
    assert "8,192" in result.stderr
    assert [(m["role"], m["content"]) for m in history(run_cli)] == [("user", long)]


def test_500_is_a_server_error_and_is_not_retried(run_cli, fake):
    fake.script(("status", 500))
    result = run_cli("ask", "hello", env=ENV)
    assert_clean_failure(result)
    assert "server error" in result.stderr
    assert len(fake.requests) == 1
    assert [(m["role"], m["content"]) for m in history(run_cli)] == [("user", "hello")]


def test_429_says_rate_limited(run_cli, fake):
    # a Retry-After beyond the 30 s picochat waits by itself (tests/test_real_servers.py)
    fake.script(("status", 429, RATE_LIMIT_BODY, {"Retry-After": "45"}))
    result = run_cli("ask", "hello", env=ENV)
    assert_clean_failure(result)
    assert "rate limit" in result.stderr.lower() and "retry in 45 s" in result.stderr
    assert len(fake.requests) == 1
    assert [(m["role"], m["content"]) for m in history(run_cli)] == [("user", "hello")]


def test_anthropic_style_overflow_names_the_window_too(run_cli, fake):
    fake.script(("status", 400, {"error": {
        "message": "prompt is too long: 5100 tokens > 5000 maximum",
        "type": "invalid_request_error", "param": None, "code": None}}))
    result = run_cli("ask", "a long message " * 1000, env=ENV)
    assert_clean_failure(result)
    assert "larger than the model's window of 5,000 tokens" in result.stderr
    assert len(fake.requests) == 1


def test_404_says_the_model_is_unknown(run_cli, fake):
    fake.script(("status", 404, {"error": {
        "message": "The model `fake-model` does not exist or you do not have access to it.",
        "type": "invalid_request_error", "param": None, "code": "model_not_found"}}))
    result = run_cli("ask", "hello", env=ENV)
    assert_clean_failure(result)
    assert "does not know the model 'openai/fake-model'" in result.stderr
    assert "check the model name" in result.stderr
    assert len(fake.requests) == 1


@pytest.mark.slow
def test_a_slow_server_times_out_after_the_models_timeout_without_a_retry(run_cli, fake,
                                                                          config_file):
    write_config(config_file, fake.base_url, "timeout = 1\n")
    never = threading.Event()  # the server answers only after the test is over
    fake.script(("delay", never, "too late"))
    try:
        result = run_cli("ask", "hello", env=ENV)
    finally:
        never.set()
    assert_clean_failure(result)
    assert "in time" in result.stderr or "within 1 s" in result.stderr
    assert len(fake.requests) == 1
    assert [(m["role"], m["content"]) for m in history(run_cli)] == [("user", "hello")]


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_connection_refused_says_cannot_connect(run_cli, config_file):
    port = closed_port()
    write_config(config_file, f"http://127.0.0.1:{port}/v1")
    result = run_cli("ask", "hello", env=ENV)
    assert_clean_failure(result)
    assert f"cannot connect to http://127.0.0.1:{port}/v1" in result.stderr
    assert "litellm" not in result.stderr.lower()
    assert [(m["role"], m["content"]) for m in history(run_cli)] == [("user", "hello")]


# --- isolation ------------------------------------------------------------------------------


def test_no_connection_leaves_localhost(run_cli, fake, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    log = tmp_path / "net.log"
    env = {**ENV, "PICOCHAT_TEST_NET_LOG": str(log),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(site),
                                                       os.environ.get("PYTHONPATH")]))}
    fake.script(("text", "local only"))
    result = run_cli("ask", "hello", env=env)
    assert result.status == 0, result.stderr
    assert len(fake.requests) == 1
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(e[0] == "socket.connect" for e in events), events  # the hook did see traffic
    for event, addr in events:
        host = addr[0] if isinstance(addr, list) else addr
        if isinstance(host, str) and host.startswith("/"):
            continue  # a unix socket path, not the network
        assert host in ("127.0.0.1", "localhost", "::1"), (event, addr)

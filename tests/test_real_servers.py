"""Real servers' ways, through the real CLI against the fake OpenAI server taught them (issue 20):
llama-cpp-python's empty 200 over its context, every server's context-error wording, a window
learned once and remembered, servers that refuse tools, 429/503/529 with Retry-After, and
max_tokens on every request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picochat.providers.errors import parse_context_window, refuses_tools
from tests.helpers.cli import NOISE, assert_clean_failure, history
from tests.helpers.config import ENV, write_config
from tests.helpers.fakes.openai import FakeOpenAI, is_summary_request


@pytest.fixture
def fake(fake_openai: FakeOpenAI, config_file: Path) -> FakeOpenAI:
    write_config(config_file, fake_openai.base_url, "timeout = 20\n")
    return fake_openai


def ask(run_cli, text: str):
    return run_cli("ask", text, env=ENV)


def info(run_cli) -> dict:
    result = run_cli("info", "--json", env=ENV)
    assert result.status == 0, result.stderr
    return json.loads(result.stdout)


def turn_requests(fake: FakeOpenAI) -> list[dict]:
    return [b for b in fake.requests if not is_summary_request(b)]


# --- what each server says when a request is too long --------------------------------------


@pytest.mark.parametrize("message, window", [
    ("This model's maximum context length is 2048 tokens. However, you requested 2541 tokens "
     "(2521 in the messages, 20 in the completion).", 2048),                # llama-cpp-python
    ("This model's maximum context length is 32768 tokens. However, you requested 40000 "
     "tokens in the messages, Please reduce the length of the messages.", 32768),  # vLLM
    ("Requested tokens (5000) exceed context window of 4096", 4096),      # llama-cpp library
    ("request (5000 tokens) exceeds the available context size (4096 tokens), try increasing "
     "it", 4096),                                                          # llama.cpp server
    ('{"code":400,"message":"the request exceeds the available context size, try increasing '
     'it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}', 8192),
    ("prompt is too long: 210000 tokens > 200000 maximum", 200000),        # Anthropic
    ("input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease "
     "input length or `max_tokens` and try again", 200000),                # Anthropic
])
def test_every_servers_overflow_wording_gives_its_window(message: str, window: int) -> None:
    assert parse_context_window(message) == window


@pytest.mark.parametrize("message", [
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
    "tools param requires --jinja flag",
    "registry.ollama.ai/library/gemma:2b does not support tools",
    "Tool use is not supported for this model",
])
def test_every_servers_refusal_of_tools_is_recognised(message: str) -> None:
    assert refuses_tools(message)


def test_an_unrelated_bad_request_is_not_a_refusal_of_tools() -> None:
    assert not refuses_tools("Invalid value for 'temperature': must be at most 2")
    assert not refuses_tools("tool_call_id must follow a tool call")


# --- llama-cpp-python: 200 with an empty body over its context -------------------------------


@pytest.mark.slow
def test_a_server_smaller_than_the_config_answers_every_turn(run_cli, fake):
    """The issue's case: config window 8,192, server context 2,048, and a streamed request over
    it answered with 200 and nothing. Every turn is answered; "empty reply" never appears; the
    window is learned on the first refusal and no later turn is refused."""
    fake.window, fake.counts_answer, fake.stream_overflow = 2048, True, "void"
    refused_at = []
    for n in range(12):
        before = fake.overflows
        result = ask(run_cli, f"turn {n}: " + "some words about the plan " * 30)
        assert result.status == 0, (n, result.stderr)
        assert "empty reply" not in result.stderr and "Traceback" not in result.stderr
        assert result.stdout.strip() == "Hello from fake"
        if fake.overflows > before:
            refused_at.append(n)
    assert refused_at == [0], refused_at  # learned once, remembered by every later process
    card = info(run_cli)
    assert card["window_source"] == "learned" and card["effective_window_tokens"] == 2048
    assert card["configured_window_tokens"] == 8192 and card["learned_window_tokens"] == 2048
    sizes = [b["max_tokens"] for b in turn_requests(fake)[2:]]
    assert sizes and all(s <= 1024 for s in sizes), sizes  # the reserve of the 2,048 window


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_an_empty_stream_is_asked_again_unstreamed_and_its_answer_shown(run_cli, fake):
    fake.script(("void",))  # 200, then nothing: no chunk, no usage, no finish
    result = ask(run_cli, "hello")
    assert result.status == 0, result.stderr
    assert result.stdout == "Hello from fake\n" and result.stderr == ""
    first, probe = fake.requests
    assert first["stream"] is True and not probe.get("stream")
    assert probe["messages"] == first["messages"]
    assert [(m["role"], m["content"]) for m in history(run_cli)] == [
        ("user", "hello"), ("assistant", "Hello from fake")]


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_an_empty_stream_and_an_empty_probe_say_so_once(run_cli, fake):
    fake.script(("void",), ("text", ""))
    result = ask(run_cli, "hello")
    assert_clean_failure(result)
    assert "the model returned an empty reply" in result.stderr
    assert len(fake.requests) == 2


@pytest.mark.slow
def test_a_learned_window_gives_way_to_an_edited_token_limit(run_cli, fake, config_file):
    fake.window, fake.counts_answer = 2048, True
    assert ask(run_cli, "hello " * 50).status == 0
    assert info(run_cli)["effective_window_tokens"] == 2048
    text = run_cli("info", env=ENV).stdout
    assert "learned from the server's error" in text and "(configured 8,192)" in text
    config_file.write_text(config_file.read_text().replace("token_limit = 8192",
                                                           "token_limit = 4096"))
    card = info(run_cli)
    assert card["effective_window_tokens"] == 4096 and card["window_source"] == "config"


@pytest.mark.slow
def test_a_server_grown_since_is_believed_and_the_learned_window_forgotten(run_cli, fake):
    fake.window, fake.counts_answer = 2048, True
    assert ask(run_cli, "hello " * 50).status == 0
    assert info(run_cli)["window_source"] == "learned"
    fake.window, fake.usage = None, {"prompt_tokens": 3000, "completion_tokens": 5}
    assert ask(run_cli, "the server took a prompt larger than 2,048").status == 0
    card = info(run_cli)
    assert card["window_source"] == "config" and card["effective_window_tokens"] == 8192


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_a_tiny_stated_window_is_not_believed(run_cli, fake):
    """A hostile or broken server must not shrink the session to nothing, for good."""
    fake.script(("status", 400, {"error": {
        "message": "This model's maximum context length is 10 tokens.",
        "code": "context_length_exceeded"}}))
    ask(run_cli, "hello")
    card = info(run_cli)
    assert card["window_source"] == "config" and card["effective_window_tokens"] == 8192


# --- servers that refuse tools ---------------------------------------------------------------


@pytest.mark.parametrize("refusal", [
    (400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be '
          'set'),                                                               # vLLM
    (500, "tools param requires --jinja flag"),                                 # llama.cpp
])
@pytest.mark.slow
def test_a_server_that_refuses_tools_gets_the_turn_without_them_and_is_remembered(
        run_cli, fake, refusal):
    fake.refuse_tools = refusal
    first = ask(run_cli, "hello")
    assert first.status == 0, first.stderr
    assert first.stdout == "Hello from fake\n"
    notice = first.stderr.splitlines()
    assert len(notice) == 1 and "refuses requests that offer tools" in notice[0], first.stderr
    assert "[tools] enabled = []" in notice[0]
    assert [bool(b.get("tools")) for b in fake.requests] == [True, False]

    second = ask(run_cli, "and again")
    assert second.status == 0 and second.stderr == "", second.stderr  # said once
    assert [bool(b.get("tools")) for b in fake.requests] == [True, False, False]
    card = info(run_cli)
    assert card["tools_refused"] is True and card["parts"]["tools"] == 0
    assert "Tools" in run_cli("info", env=ENV).stdout


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_a_refusal_without_tools_offered_is_an_error_not_a_loop(run_cli, fake, config_file):
    config_file.write_text(config_file.read_text() + "[tools]\nenabled = []\n")
    fake.script(("status", 400, {"error": {"message": "tools param requires --jinja flag"}}))
    result = ask(run_cli, "hello")
    assert_clean_failure(result)
    assert len(fake.requests) == 1


# --- busy servers: one bounded wait -----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("status", [429, 503, 529])
def test_a_busy_server_gets_one_wait_of_its_retry_after_then_one_more_try(run_cli, fake,
                                                                         status):
    fake.script(("status", status, {"error": {"message": "Overloaded", "type": "overloaded"}},
                 {"Retry-After": "1"}))
    result = ask(run_cli, "hello")
    assert result.status == 0, result.stderr
    assert result.stdout == "Hello from fake\n"
    assert "sending once more in 1 s" in result.stderr
    assert len(fake.requests) == 2
    for word in NOISE:
        assert word not in result.stderr


@pytest.mark.slow
def test_a_busy_server_twice_in_a_row_fails_the_turn(run_cli, fake):
    busy = ("status", 429, {"error": {"message": "slow down"}}, {"Retry-After": "1"})
    fake.script(busy, busy)
    result = ask(run_cli, "hello")
    assert result.status == 1
    waiting, failure = result.stderr.splitlines()
    assert waiting.endswith("is rate limiting requests: sending once more in 1 s")
    assert failure.endswith("is rate limiting requests (retry in 1 s); your message is saved")
    assert len(fake.requests) == 2


def test_a_retry_after_beyond_the_limit_fails_at_once_with_when(run_cli, fake):
    fake.script(("status", 429, {"error": {"message": "slow down"}}, {"Retry-After": "120"}))
    result = ask(run_cli, "hello")
    assert_clean_failure(result)
    assert "retry in 120 s" in result.stderr and len(fake.requests) == 1


def test_a_server_error_is_not_retried(run_cli, fake):
    fake.script(("status", 500, {"error": {"message": "boom"}}, {"Retry-After": "1"}))
    result = ask(run_cli, "hello")
    assert_clean_failure(result)
    assert len(fake.requests) == 1


# --- max_tokens ------------------------------------------------------------------------------


def test_every_turn_request_asks_for_the_reserve_as_its_answer_cap(run_cli, fake):
    assert ask(run_cli, "hello").status == 0
    (body,) = fake.requests
    assert body["max_tokens"] == 4096  # reserve_tokens 16,384 shrunk to half of the 8,192 window

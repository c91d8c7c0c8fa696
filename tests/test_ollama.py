"""Ollama as a user runs it: found through OLLAMA_HOST, spoken to through its native chat API
(`/api/chat`, native tool calls, never JSON mode), its window read from `/api/show` and sent as
`num_ctx` with every request. Against a fake Ollama on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import textwrap
from pathlib import Path

import pytest

from picochat.providers import ollama

NOISE = ("Traceback", "Give Feedback", "Provider List", "LiteLLM")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(config_file: Path, text: str) -> None:
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(textwrap.dedent(text), encoding="utf-8")


def local_with_token_limit(config_file: Path, fake_ollama, limit: int) -> None:
    """The default model "local": llama3.2 on the fake server, with `token_limit` set."""
    write_config(config_file, f'''\
        default_model = "local"
        [models.local]
        model = "ollama/llama3.2"
        api_base = "{fake_ollama.base_url}"
        token_limit = {limit}
    ''')


def info(run_cli, env: dict[str, str], *args: str) -> dict:
    """`picochat info --json`, after a first (offline) turn so that there is a session."""
    if run_cli("sessions", "--json").stdout.strip() == "[]":
        assert run_cli("ask", "hi", env={"PICOCHAT_MODEL": "offline"}).status == 0
    result = run_cli("info", *args, "--json", env=env)
    assert result.status == 0, result.stderr
    return json.loads(result.stdout)


# --- found through OLLAMA_HOST ----------------------------------------------------------------


def test_auto_detect_and_every_request_go_to_ollama_host(run_cli, fake_ollama):
    env = {"OLLAMA_HOST": fake_ollama.host}  # host:port, as users write it
    result = run_cli("ask", "hello", env=env)
    assert result.status == 0, result.stderr
    assert result.stdout == "Hello from fake Ollama\n"
    paths = fake_ollama.paths
    assert "GET /api/tags" in paths and "POST /api/show" in paths
    assert paths.count("POST /api/chat") == 1
    assert not [p for p in paths if "generate" in p]  # never litellm's /api/generate
    assert fake_ollama.show_requests[0] == {"model": "llama3.2:latest"}
    assert run_cli("sessions", "--json", env=env).status == 0


def test_ollama_api_base_is_honoured_too(run_cli, fake_ollama):
    env = {"OLLAMA_API_BASE": fake_ollama.base_url}
    result = run_cli("ask", "hello", env=env)
    assert (result.status, result.stdout) == (0, "Hello from fake Ollama\n"), result.stderr
    assert len(fake_ollama.chat_requests) == 1


def test_a_configured_api_base_is_where_the_model_is_asked(run_cli, fake_ollama, config_file):
    write_config(config_file, f'''\
        default_model = "local"
        [models.local]
        model = "ollama/llama3.2"
        api_base = "{fake_ollama.base_url}"
    ''')
    env = {"OLLAMA_HOST": f"127.0.0.1:{closed_port()}"}  # another server, not running
    result = run_cli("ask", "hello", env=env)
    assert (result.status, result.stdout) == (0, "Hello from fake Ollama\n"), result.stderr
    assert info(run_cli, env)["window_source"] == "ollama"


# --- the window: /api/show, capped, or the config -------------------------------------------


def test_info_shows_the_window_the_server_gives_the_model(run_cli, fake_ollama):
    fake_ollama.add_model("qwen2.5:7b", context_length=32768, num_ctx=8192, arch="qwen2")
    env = {"OLLAMA_HOST": fake_ollama.host}
    explicit = info(run_cli, env, "--model", "ollama/qwen2.5:7b")
    assert (explicit["window_source"], explicit["effective_window_tokens"]) == ("ollama", 8192)
    trained = info(run_cli, env, "--model", "ollama/llama3.2")  # trained on 131,072
    assert (trained["window_source"], trained["effective_window_tokens"]) == \
        ("ollama", ollama.WINDOW_CAP)
    text = run_cli("info", "--model", "ollama/qwen2.5:7b", env=env)
    assert "8,192  [ollama]" in text.stdout
    assert "ollama/qwen2.5:7b (as ollama_chat/qwen2.5:7b: Ollama's chat API)" in text.stdout


@pytest.mark.slow
def test_num_ctx_is_the_window_in_every_request_and_there_is_no_json_mode(run_cli,
                                                                        fake_ollama):
    fake_ollama.add_model("qwen2.5:7b", context_length=32768, num_ctx=8192, arch="qwen2")
    env = {"OLLAMA_HOST": fake_ollama.host}
    for text in ("first question", "second question"):
        result = run_cli("ask", "--model", "ollama/qwen2.5:7b", text, env=env)
        assert result.status == 0, result.stderr
    first, second = fake_ollama.chat_requests
    for body in (first, second):
        assert body["model"] == "qwen2.5:7b"
        assert body["options"]["num_ctx"] == 8192
        assert "format" not in body  # JSON mode would make every reply JSON
        assert body["stream"] is True
        assert {t["function"]["name"] for t in body["tools"]} == {
            "history_search", "timeline_recall", "read_file"}
    assert [m["content"] for m in second["messages"][1:]] == [
        "first question", "Hello from fake Ollama", "second question"]


@pytest.mark.slow
def test_token_limit_wins_over_the_server_and_is_sent_as_num_ctx(run_cli, fake_ollama,
                                                                 config_file):
    local_with_token_limit(config_file, fake_ollama, 65536)
    got = info(run_cli, {})
    assert (got["window_source"], got["effective_window_tokens"]) == ("config", 65536)
    assert run_cli("ask", "hello").status == 0
    assert fake_ollama.chat_requests[0]["options"]["num_ctx"] == 65536


def test_an_agent_limit_tightens_num_ctx_too(run_cli, fake_ollama, config_file):
    write_config(config_file, '''\
        [agents.default]
        model = "ollama/llama3.2"
        token_limit = 12000
    ''')
    env = {"OLLAMA_HOST": fake_ollama.host}
    assert run_cli("ask", "hello", env=env).status == 0
    assert fake_ollama.chat_requests[0]["options"]["num_ctx"] == 12000


@pytest.mark.slow
def test_an_unreachable_server_falls_back_and_fails_the_turn_in_one_line(run_cli):
    port = closed_port()
    env = {"OLLAMA_HOST": f"127.0.0.1:{port}"}
    got = info(run_cli, env, "--model", "ollama/llama3.1")
    assert (got["window_source"], got["effective_window_tokens"]) == ("litellm", 8192)
    got = info(run_cli, env, "--model", "ollama/no-such-model-in-the-map")
    assert (got["window_source"], got["effective_window_tokens"]) == \
        ("default", ollama.WINDOW_CAP)
    result = run_cli("ask", "--model", "ollama/llama3.1", "hello", env=env)
    assert result.status == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith(f"picochat: cannot connect to http://127.0.0.1:{port} ")
    for word in NOISE:
        assert word not in result.stderr


def test_a_model_the_server_does_not_have_is_one_line(run_cli, fake_ollama):
    env = {"OLLAMA_HOST": fake_ollama.host}
    result = run_cli("ask", "--model", "ollama/mistral", "hello", env=env)
    assert result.status == 1, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    # named as the user named it, with the remedy Ollama users know
    assert "'mistral'" in result.stderr and "ollama_chat" not in result.stderr
    assert "ollama pull mistral" in result.stderr
    for word in NOISE:
        assert word not in result.stderr


# --- native tool calls ----------------------------------------------------------------------


@pytest.mark.slow
def test_a_tool_call_round_trip_through_the_chat_api(run_cli, fake_ollama):
    env = {"OLLAMA_HOST": fake_ollama.host}
    assert run_cli("ask", "--session", "s", "remember: the canary host is cn-west-12",
                   env=env).status == 0
    fake_ollama.script(("tool_calls", [("history_search", {"query": "canary host"})]),
                       ("text", "The canary host is cn-west-12."))
    result = run_cli("ask", "--session", "s", "which host is the canary?", env=env)
    assert result.status == 0, result.stderr
    assert result.stdout.strip() == "The canary host is cn-west-12."
    assert "ran history_search “canary host” (ok)" in result.stderr
    _, call_turn, answer_turn = fake_ollama.chat_requests
    assert "format" not in call_turn and "format" not in answer_turn
    call, tool = answer_turn["messages"][-2:]
    [sent_call] = call["tool_calls"]
    assert call["role"] == "assistant"
    assert sent_call["function"] == {"name": "history_search",
                                     "arguments": {"query": "canary host"}}
    assert tool["role"] == "tool" and tool["tool_call_id"] == sent_call["id"]
    assert "cn-west-12" in tool["content"]
    assert answer_turn["options"]["num_ctx"] == call_turn["options"]["num_ctx"]


# --- OLLAMA_HOST read by Ollama's rules --------------------------------------------------------


@pytest.mark.parametrize("value, url", [
    ("gpu-box", "http://gpu-box:11434"),
    ("gpu-box:8080", "http://gpu-box:8080"),
    ("10.0.0.5", "http://10.0.0.5:11434"),
    ("http://gpu-box", "http://gpu-box:80"),
    ("https://ollama.example.com", "https://ollama.example.com:443"),
    ("https://ollama.example.com:8443/ollama/", "https://ollama.example.com:8443/ollama"),
    ("0.0.0.0", "http://127.0.0.1:11434"),          # a server's bind-all address: this machine
    ("0.0.0.0:7000", "http://127.0.0.1:7000"),
    ("[::]:7000", "http://[::1]:7000"),
    ("[::1]", "http://[::1]:11434"),
    ("  '127.0.0.1:9000'  ", "http://127.0.0.1:9000"),
    (":7000", "http://127.0.0.1:7000"),
    ("gpu-box:notaport", "http://gpu-box:11434"),
])
def test_ollama_host_is_read_as_ollama_reads_it(value, url):
    assert ollama.parse_host(value) == url


def test_base_url_precedence(monkeypatch):
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.delenv("OLLAMA_API_BASE", raising=False)
    assert ollama.base_url() == "http://127.0.0.1:11434"
    monkeypatch.setenv("OLLAMA_HOST", "host-a")
    assert ollama.base_url() == "http://host-a:11434"
    monkeypatch.setenv("OLLAMA_API_BASE", "http://host-b:11434/")
    assert ollama.base_url() == "http://host-b:11434"
    assert ollama.base_url("http://host-c:1234") == "http://host-c:1234"


def test_show_answers_are_read_with_care():
    assert ollama.num_ctx_parameter('num_ctx                        8192\nstop "x"') == 8192
    assert ollama.num_ctx_parameter('stop "num_ctx 5"\ntemperature 0.7') is None
    assert ollama.num_ctx_parameter(None) is None
    info = {"general.architecture": "gemma3", "gemma3.context_length": 131072,
            "gemma3.embedding_length": 2560}
    assert ollama.trained_length(info) == 131072
    assert ollama.trained_length({"general.architecture": "x"}) is None
    assert ollama.trained_length({"llama.context_length": True}) is None


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_num_ctx_follows_the_window_the_server_taught(run_cli, fake_ollama, config_file, home):
    """A window learned from this server (an earlier run's overflow, remembered) is the one
    the budget works with: num_ctx says the same, not the configured 65,536 the provider was
    opened with (issue 32: the window lived in two places, and the two disagreed)."""
    from picochat.config import load_config
    from picochat.models import resolve_model
    from picochat.storage import open_store

    local_with_token_limit(config_file, fake_ollama, 65536)
    assert run_cli("ask", "hello").status == 0
    assert fake_ollama.chat_requests[-1]["options"]["num_ctx"] == 65536
    key = resolve_model(load_config(config_file), "local").key
    store = open_store(home / "data" / "picochat.db")
    try:
        store.traits.learn_window(key, 16384, 65536)
    finally:
        store.close()
    assert info(run_cli, {})["effective_window_tokens"] == 16384
    assert run_cli("ask", "hello again").status == 0
    assert fake_ollama.chat_requests[-1]["options"]["num_ctx"] == 16384

"""The direct client for an OpenAI-compatible server (issue 33, item 1): what the server
receives, how its stream is read, and that the first request never waits for litellm.

Every other test that configures an `openai/` model at the fake server's `api_base` goes through
this client too, so the user-visible lines for each fault are checked once, by the same tests
that checked them under litellm; `test_both_carriers_say_the_same` runs the faults through both.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from picochat.providers import errors as pe
from picochat.providers.base import ProviderRequest, Reply, TextDelta, collect
from picochat.providers.keys import PLACEHOLDER
from picochat.providers.litellm_provider import LiteLLMProvider
from picochat.providers.translate import ServerAnswered
from picochat.providers.openai_compat import (
    REPEAT_LIMIT,
    OpenAICompatProvider,
    _Events,
    speaks_directly,
)
from tests.helpers.config import ENV, write_config
from tests.helpers.fakes.openai import AUTH_BODY, CONTEXT_OVERFLOW_BODY, FakeOpenAI
from tests.helpers.waiting import WAIT_S

HI = ProviderRequest(({"role": "user", "content": "hi"},), max_tokens=256)


def direct(fake: FakeOpenAI, **kwargs) -> OpenAICompatProvider:
    return OpenAICompatProvider("openai/fake-model", "openai", fake.base_url, **kwargs)


def run(provider, request: ProviderRequest = HI, on_text=None) -> Reply:
    """One call through `collect`, as a turn makes it; the provider closed after."""
    async def go() -> Reply:
        try:
            return await collect(provider, request, WAIT_S, on_text=on_text)
        finally:
            await provider.aclose()
    return asyncio.run(go())


@pytest.mark.parametrize(("model", "kind", "base", "expected"), [
    ("openai/qwen2.5-7b", "openai", "http://127.0.0.1:8080/v1", True),
    ("openai/org/model-name", "openai", "http://10.0.0.2/v1", True),
    ("openai/gpt-4o-mini", "openai", "https://gateway.example/v1", True),
    ("openai/gpt-4o-mini", "openai", None, False),          # hosted OpenAI: litellm
    ("openai/o3-mini", "openai", "https://gateway.example/v1", False),  # max_completion_tokens
    ("openai/gpt-5", "openai", "https://gateway.example/v1", False),
    ("anthropic/claude-sonnet-4-5", "anthropic", "http://127.0.0.1:9", False),
    ("ollama_chat/llama3.2", "ollama", "http://127.0.0.1:11434", False),  # num_ctx
    ("hosted_vllm/m", "hosted_vllm", "http://127.0.0.1:8000/v1", False),
])
def test_which_models_the_direct_client_speaks_to(model, kind, base, expected):
    assert speaks_directly(model, kind, base) is expected


def test_the_server_receives_what_litellm_would_have_sent(fake_openai, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    tools = ({"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}},)
    request = ProviderRequest(({"role": "system", "content": "be brief"},
                               {"role": "user", "content": "héllo ✓"}),
                              tools=tools, temperature=0.2, max_tokens=300)
    reply = run(direct(fake_openai), request)
    assert reply.text == "Hello from fake" and reply.finish == "stop"
    assert reply.usage is not None and reply.usage.prompt_tokens > 0
    body, headers = fake_openai.requests[0], fake_openai.headers[0]
    assert body["model"] == "fake-model"  # the `openai/` prefix is litellm's, not the server's
    assert body["messages"] == [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "héllo ✓"}]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["max_tokens"], body["temperature"]) == (300, 0.2)
    assert body["tools"] == [dict(t) for t in tools]
    assert headers["authorization"] == f"Bearer {PLACEHOLDER}"  # no key anywhere


@pytest.mark.parametrize(("configured", "environment", "sent"), [
    ("from-config", "from-env", "from-config"),
    (None, "from-env", "from-env"),
])
def test_the_key_is_the_configured_one_else_openai_api_key(fake_openai, monkeypatch,
                                                           configured, environment, sent):
    monkeypatch.setenv("OPENAI_API_KEY", environment)
    run(direct(fake_openai, api_key=configured))
    assert fake_openai.headers[0]["authorization"] == f"Bearer {sent}"


def test_a_lone_surrogate_in_a_message_is_still_sent(fake_openai):
    reply = run(direct(fake_openai), ProviderRequest(({"role": "user", "content": "a\ud800b"},)))
    assert reply.text == "Hello from fake"
    assert fake_openai.requests[0]["messages"][0]["content"] == "a\ud800b"


def test_thinking_and_tool_calls_stream_as_typed_events(fake_openai):
    fake_openai.script(("reasoning", "let me think", [("call_1", "read_file", '{"path": "a"}')]))
    reply = run(direct(fake_openai))
    assert reply.thinking == "let me think" and reply.text == ""
    assert "".join(c.arguments for c in reply.tool_calls) == '{"path": "a"}'
    assert [c.name for c in reply.tool_calls if c.name] == ["read_file"]
    assert reply.finish == "tool_calls"


class _Lines:
    """A response whose body is this text, arriving in pieces of `size` bytes (so an event, a
    line end or a UTF-8 character may straddle two pieces)."""

    def __init__(self, text: str, size: int = 7) -> None:
        self.body = text.encode("utf-8")
        self.size = size
        self.closed = False

    async def aiter_bytes(self):
        for at in range(0, len(self.body), self.size):
            yield self.body[at:at + self.size]

    async def aclose(self) -> None:
        self.closed = True


def chunks(text: str) -> list:
    async def go() -> list:
        return [c async for c in _Events(_Lines(text))]
    return asyncio.run(go())


def delta(content: str) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": content}}]})


def test_sse_comments_fields_and_multi_line_data_are_read_as_the_standard_says():
    text = (": keep-alive\n\nevent: message\nid: 7\ndata: " + delta("a") + "\n\n"
            'data: {"choices": [{"index": 0,\ndata:  "delta": {"content": "b"}}]}\n\n'
            "retry: 10\n\ndata: " + delta("c"))  # the last event has no blank line after it
    got = [c["choices"][0]["delta"]["content"] for c in chunks(text)]
    assert got == ["a", "b", "c"]


@pytest.mark.parametrize("size", [1, 2, 5, 64])
def test_line_ends_are_cr_lf_and_crlf_only_and_a_bom_is_dropped(size):
    """U+2028, U+2029 and U+0085 are raw inside JSON strings (llama.cpp, vLLM send them so):
    they are text, never a line end; CRLF split across two pieces is one line end."""
    said = "line\u2028sep\u2029para\x85next ✓"
    text = ("\ufeffdata: " + delta("first") + "\r\n\r\n" + "data: " + delta(said) + "\r\r"
            + "data: " + delta("last") + "\n\n")
    events = _Events(_Lines(text, size))

    async def go() -> list:
        return [c async for c in events]
    got = [c["choices"][0]["delta"]["content"] for c in asyncio.run(go())]
    assert got == ["first", said, "last"]
    assert events.response.closed  # read to its end and closed: the connection is reused


def test_done_ends_the_stream_even_if_more_follows():
    assert len(chunks(f"data: {delta('a')}\n\ndata: [DONE]\n\ndata: {delta('b')}\n\n")) == 1


def test_an_error_event_inside_the_stream_is_the_servers_words(fake_openai):
    provider = direct(fake_openai)
    events = _Events(_Lines('data: {"error": {"message": "slot unavailable"}}\n\n'))

    async def go() -> None:
        async for _ in events:
            pass
    with pytest.raises(Exception) as caught:
        asyncio.run(go())
    line = provider.translate(caught.value, HI, 0).user_line()
    assert "slot unavailable" in line and "inside" not in line


def test_a_model_repeating_itself_is_stopped_and_what_came_before_kept(fake_openai):
    fake_openai.script(("chunks", ["Sure. "] + ["again "] * (REPEAT_LIMIT + 20)))
    provider = direct(fake_openai)
    seen: list[str] = []

    with pytest.raises(pe.ModelRepeating) as caught:
        run(provider, on_text=lambda d: seen.append(d.text))
    assert "kept repeating the same text" in caught.value.user_line()
    assert seen[0] == "Sure. " and len(seen) < REPEAT_LIMIT + 1


FAULTS = [
    (("status", 401, AUTH_BODY), pe.ProviderAuthError, "refused the API key"),
    (("status", 403, {"error": {"message": "model gpt-x is not allowed for this project"}}),
     pe.ProviderError, "refused the request (HTTP 403): model gpt-x is not allowed"),
    (("status", 400, CONTEXT_OVERFLOW_BODY), pe.ContextOverflow, "8,192 tokens"),
    (("status", 429, {"error": {"message": "slow down"}}, {"Retry-After": "7"}),
     pe.RateLimited, "retry in 7 s"),
    (("status", 503, {"error": {"message": "busy"}}), pe.Overloaded, "overloaded (503)"),
    (("status", 404, {"error": {"message": "no such model"}}), pe.ModelNotFound,
     "does not know the model 'openai/fake-model'"),
    (("status", 500, {"error": {"message": "kaboom"}}), pe.ProviderUnavailable, "kaboom"),
    (("status", 418, {"error": {"message": "a teapot"}}), pe.ProviderError,
     "refused the request (HTTP 418): a teapot"),
    (("drop",), pe.ProviderUnavailable, "closed it without answering"),
    (("cut", "before"), pe.StreamBroken, "broke mid-answer"),
    (("garbage", "before", "after"), pe.MalformedStream, "malformed stream"),
]


@pytest.mark.parametrize(("item", "kind", "words"), FAULTS, ids=[f[0][0] + str(f[0][1:2])
                                                                for f in FAULTS])
def test_both_carriers_say_the_same(fake_openai, item, kind, words):
    """One translation: the direct client and litellm give the same line for each fault."""
    lines = []
    for provider in (direct(fake_openai, api_key="k"),
                     LiteLLMProvider("openai/fake-model", "openai", fake_openai.base_url,
                                     api_key="k")):
        fake_openai.script(item)
        with pytest.raises(pe.ProviderError) as caught:
            run(provider)
        assert isinstance(caught.value, kind), caught.value.user_line()
        assert words in caught.value.user_line()
        lines.append(caught.value.user_line())
    assert lines[0] == lines[1]


def test_a_422_is_the_same_refusal_from_both_carriers(fake_openai):
    """litellm asks once more without the fields a 422 names, then returns nothing; the
    direct client asks once. Both tell the server's words with the status."""
    item = ("status", 422, {"error": {"message": "max_tokens is too large: 99999"}})
    lines = []
    for provider, times in ((direct(fake_openai, api_key="k"), 1),
                            (LiteLLMProvider("openai/fake-model", "openai", fake_openai.base_url,
                                             api_key="k"), 2)):
        fake_openai.script(*[item] * times)
        with pytest.raises(pe.BadProviderRequest) as caught:
            run(provider)
        lines.append(caught.value.user_line())
    assert lines[0] == lines[1] == (
        f"{fake_openai.base_url} refused the request (HTTP 422): max_tokens is too large: 99999 "
        "(check this model's settings in the config, or the server's log)")
    assert len(fake_openai.requests) == 3


def test_an_html_error_page_is_told_by_its_title(fake_openai):
    """Where litellm says only "Error code: 502", the direct client reads the page's title."""
    fake_openai.script(("raw", 502, "text/html",
                        b"<html><head><title>502 Bad Gateway</title></head></html>"))
    with pytest.raises(pe.ProviderUnavailable) as caught:
        run(direct(fake_openai))
    assert caught.value.user_line() == (f"{fake_openai.base_url} failed with a server error: "
                                        "502 Bad Gateway (retry later)")


def test_cannot_connect_names_the_address():
    provider = OpenAICompatProvider("openai/m", "openai", "http://127.0.0.1:9/v1")
    with pytest.raises(pe.ProviderUnavailable) as caught:
        run(provider)
    assert caught.value.user_line().startswith("cannot connect to http://127.0.0.1:9/v1")


def test_the_answer_streams_in_pieces_as_they_arrive(fake_openai):
    fake_openai.script(("chunks", ["one ", "two ", "three"]))
    provider = direct(fake_openai)
    seen: list[TextDelta] = []
    assert run(provider, on_text=seen.append).text == "one two three"
    assert [d.text for d in seen] == ["one ", "two ", "three"]


FIRST_ASK = """import json, sys
from picochat.cli import main
try:
    code = main.main(["ask", "hello there"])
except SystemExit as exit:
    code = exit.code
print(json.dumps({"litellm": "litellm" in sys.modules, "code": code,
                  "heavy": sorted({"rich", "click", "tiktoken"} & set(sys.modules))}))
"""


def test_ask_against_an_openai_compatible_server_never_imports_litellm(fake, home: Path):
    """The first request's wait was litellm's import (2-3 s): the direct client needs none.
    Nor httpx's command line (rich, click: 80 ms). From the second ask on, nor tiktoken (0.35
    s): a short message and answer are counted from the rank table the first one kept."""
    seen = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", FIRST_ASK], capture_output=True,
                              text=True, env={**os.environ, **ENV}, cwd=home, timeout=120)
        assert "Hello from fake" in done.stdout, done.stderr
        seen.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert seen == [{"litellm": False, "code": 0, "heavy": ["tiktoken"]},
                    {"litellm": False, "code": 0, "heavy": []}]
    assert fake.requests[0]["messages"][-1]["content"] == "hello there"


@pytest.fixture
def fake(fake_openai: FakeOpenAI, config_file: Path) -> FakeOpenAI:
    write_config(config_file, fake_openai.base_url)
    return fake_openai


def test_hostile_chunks_are_no_answer_and_no_call():
    """Fields of the wrong type are ignored, never turned into text or nameless tool calls."""
    from picochat.providers.chat_completions import _calls, part

    assert _calls("read_file") == [] and _calls(7) == [] and _calls(None) == []
    assert _calls([{"index": 0, "function": {"name": "t"}}, "junk", 3]) == [
        {"index": 0, "function": {"name": "t"}}]
    assert part(["a list"], "choices") is None and part("text", "choices") is None


def test_a_stream_of_wrong_shapes_is_no_answer_and_the_probe_decides(fake_openai):
    """Chunks that are lists or strings, or carry a string for `tool_calls` and a number for
    `content`, are no answer: nothing reaches the screen, no tool runs, and the unstreamed
    probe's answer (here: the server's overflow error) is what the user is told."""
    lines = "\n\n".join([
        "data: [1, 2]", 'data: "text"',
        'data: {"choices": [{"delta": {"content": 5, "tool_calls": "rm -rf /"}}]}',
        'data: {"choices": [{"delta": {"tool_calls": ["junk", 3]}, "finish_reason": "stop"}]}',
        "data: [DONE]"]) + "\n\n"

    class Hostile(OpenAICompatProvider):
        async def _open(self, body, request):
            return _Events(_Lines(lines))

    fake_openai.script(("status", 400, CONTEXT_OVERFLOW_BODY))  # what the probe hears
    seen: list[str] = []
    provider = Hostile("openai/fake-model", "openai", fake_openai.base_url)

    with pytest.raises(pe.ContextOverflow) as caught:
        run(provider, on_text=lambda d: seen.append(d.text))
    assert seen == [] and "8,192 tokens" in caught.value.user_line()
    assert fake_openai.requests[0]["stream"] is False  # the probe asked unstreamed


def test_a_redirect_names_where_it_points(fake_openai):
    fake_openai.script(("status", 301, {}, {"Location": "https://llm.example/v1/chat/completions"}))
    with pytest.raises(pe.ProviderError) as caught:
        run(direct(fake_openai))
    assert caught.value.user_line() == (
        f"{fake_openai.base_url} answered HTTP 301: redirected to "
        "https://llm.example/v1/chat/completions (set api_base to the address it names, if "
        "that is the model's server)")


def test_an_html_page_with_200_is_not_a_chat_stream(fake_openai):
    fake_openai.script(("raw", 200, "text/html", b"<html><title>Router login</title></html>"))
    with pytest.raises(pe.ProviderUnavailable) as caught:
        run(direct(fake_openai))
    assert caught.value.user_line() == (
        f"{fake_openai.base_url} answered HTTP 200 with text/html, not a chat stream: Router "
        "login (is api_base the address of the model's API (often ending in /v1)?)")


def test_a_server_that_ignores_stream_still_answers(fake_openai):
    whole = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "whole"},
                          "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 9, "completion_tokens": 1}}
    fake_openai.script(("raw", 200, "application/json", json.dumps(whole).encode()))
    reply = run(direct(fake_openai))
    assert (reply.text, reply.finish, reply.usage.prompt_tokens) == ("whole", "stop", 9)


def test_an_error_in_a_200_json_body_is_the_servers_words(fake_openai):
    body = {"error": {"message": "model is still loading"}}
    fake_openai.script(("raw", 200, "application/json", json.dumps(body).encode()))
    with pytest.raises(pe.ProviderError) as caught:
        run(direct(fake_openai))
    assert "model is still loading" in caught.value.user_line()
    assert "inside" not in caught.value.user_line()


def test_server_words_about_connections_are_not_cannot_connect(fake_openai):
    provider = direct(fake_openai)
    line = provider.translate(ServerAnswered(None, "Connection refused by upstream"), HI,
                              None).user_line()
    assert not line.startswith("cannot connect") and "Connection refused by upstream" in line


@pytest.mark.parametrize("payload", ['{"choices": {"0": 1}}', '{"choices": 5}',
                                     '{"usage": {"prompt_tokens": Infinity}, "choices": []}',
                                     '{"n": ' + "9" * 5000 + "}", "[" * 100_000])
def test_hostile_json_is_a_malformed_stream_not_an_internal_error(fake_openai, payload):
    events = _Events(_Lines(f"data: {payload}\n\ndata: {delta('x')}\n\n"))

    class Hostile(OpenAICompatProvider):
        async def _open(self, body, request):
            return events

    provider = Hostile("openai/fake-model", "openai", fake_openai.base_url)
    try:
        reply = run(provider)
    except pe.ProviderError as caught:
        assert isinstance(caught, pe.MalformedStream), caught.user_line()
    else:
        assert reply.text == "x"  # a chunk of the wrong shape is no answer, then the answer


def test_a_client_that_cannot_be_built_is_one_line(fake_openai, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", "/nonexistent/ca.pem")
    provider = direct(fake_openai)
    monkeypatch.setattr(provider, "_new_client", lambda: (_ for _ in ()).throw(
        FileNotFoundError(2, "No such file or directory")))
    asyncio.run(provider.warm_up())  # never raises
    with pytest.raises(pe.ProviderUnavailable) as caught:
        run(provider)
    assert caught.value.user_line().startswith(
        f"cannot set up a connection to {fake_openai.base_url}: FileNotFoundError")


def test_proxies_from_the_environment_are_used_and_metered(fake_openai, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    client = direct(fake_openai)._new_client()
    proxied = [t for t in client._mounts.values() if t is not None]
    assert proxied and all(getattr(t, "_picochat_bounded", False) for t in proxied)
    assert getattr(client._transport, "_picochat_bounded", False)


def test_a_plain_http_server_gets_a_client_that_trusts_no_certificate(monkeypatch):
    """No TLS is spoken to http:// without a proxy: no CA bundle is loaded (60 ms), and the
    context it gets instead would fail any TLS connection rather than pass it."""
    import ssl

    from picochat.providers.openai_compat import _verify

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    context = _verify("http://127.0.0.1:8080/v1/chat/completions")
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.get_ca_certs() == [] and context.cert_store_stats()["x509_ca"] == 0
    assert _verify("https://api.example.com/v1/chat/completions") is True
    monkeypatch.setenv("HTTP_PROXY", "https://proxy.example:3128")  # TLS to the proxy: checked
    assert _verify("http://127.0.0.1:8080/v1/chat/completions") is True

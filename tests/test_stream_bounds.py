"""Provider streams have bounds, and the ways one is stopped are said in one line (issue 31,
item 6). The real CLI (and, where a bound must be lowered, the provider in process) against the
fake servers on 127.0.0.1:

- one stream event past 16 MiB (a line that never ends) stops reading there: memory stays flat
  and the line says so, not "closed the connection before any answer text";
- one answer past 32 MiB of text, or past its count of stream pieces, is cut and kept;
- a 422 (litellm swallows it and returns None) is the server's refusal in its own words, never
  Python's "'async for' requires...";
- litellm's stop of a model that repeats one chunk is named as the model repeating itself, and
  the partial answer is kept.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import AsyncIterator

import pytest

from picochat.providers import base, http_bounds
from picochat.providers import errors as pe
from picochat.providers.base import (
    MAX_ANSWER_BYTES,
    ModelInfo,
    Provider,
    ProviderRequest,
    StreamEvent,
    ThinkingDelta,
    ToolCallDelta,
    collect,
)
from tests.helpers.cli import (
    CliResult,
    ask,
    assert_clean_failure,
    assert_no_internals,
    history,
    roles,
)
from tests.helpers.config import ENV, write_config
from tests.helpers.fakes.ollama import FakeOllama
from tests.helpers.fakes.openai import FakeOpenAI
from tests.helpers.waiting import WAIT_S

MiB = 1 << 20
HI = ProviderRequest(({"role": "user", "content": "hi"},))


@pytest.fixture
def fake(fake_openai: FakeOpenAI, config_file: Path) -> FakeOpenAI:
    write_config(config_file, fake_openai.base_url, f"timeout = {WAIT_S:g}\n")
    return fake_openai


def partial_answer(run_cli) -> str:
    """The saved turn is the user's message and an interrupted answer: its text."""
    assert roles(run_cli) == [("user", "complete"), ("assistant", "interrupted")]
    return history(run_cli)[1]["content"]


def ask_measured(text: str) -> tuple[CliResult, int]:
    """`picochat ask` as a user runs it, with the peak resident memory of that one process
    (os.wait4 reports the child's own, not the largest of every child so far)."""
    env = {**os.environ, **ENV}
    proc = subprocess.Popen([sys.executable, "-m", "picochat", "ask", text], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda k=k, f=f: out.__setitem__(k, f.read()))
               for k, f in (("out", proc.stdout), ("err", proc.stderr))]
    for reader in readers:
        reader.start()
    watchdog = threading.Timer(3 * WAIT_S, proc.kill)  # a failure bound, not a wait
    watchdog.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        watchdog.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    for reader in readers:
        reader.join()
    result = CliResult(proc.returncode, out["out"].decode(), out["err"].decode())
    return result, usage.ru_maxrss * 1024  # kilobytes on Linux


# --- one event past its bound ---------------------------------------------------------------


@pytest.mark.slow
def test_a_line_that_never_ends_is_cut_at_the_bound_and_memory_stays_flat(fake):
    _, plain_rss = ask_measured("hello")  # the same command, an ordinary answer
    fake.script(("flood", 64 * MiB))  # one `data:` line of 64 MiB, no newline, then close
    result, flood_rss = ask_measured("tell me everything")
    assert_clean_failure(result)
    assert result.stderr == (
        f"picochat: the server at {fake.base_url} sent one event of more than 16 MiB; stopped "
        "reading it (retry, or check the server); your message is saved\n")
    assert_no_internals(result)
    assert fake.flooded.done.wait(WAIT_S)
    assert fake.flooded.sent[0] < 40 * MiB, fake.flooded.sent  # reading stopped at the bound
    # measured: +25 MiB over the plain answer with the bound, +74 MiB without it (the SDK's
    # line buffer holding all 64 MiB); a 3 GB line took 2.4 GB
    assert flood_rss - plain_rss < 48 * MiB, (plain_rss, flood_rss)


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_a_cut_event_after_some_text_keeps_that_text(run_cli, fake):
    fake.script(("flood", 24 * MiB, "the start of an answer"))
    result = ask(run_cli, "go on")
    assert_clean_failure(result)
    assert result.stderr == (
        f"picochat: the server at {fake.base_url} sent one event of more than 16 MiB; stopped "
        "reading it (the answer so far is kept where it is; retry, or check the server); your "
        "message and the partial answer are saved\n")
    assert partial_answer(run_cli) == "the start of an answer"


def test_an_ndjson_line_from_ollama_is_bounded_too(monkeypatch):
    """litellm's own handlers read lines with httpx, not the OpenAI SDK: the bound is under
    both, at the transport."""
    from picochat.providers.litellm_provider import LiteLLMProvider

    monkeypatch.setattr(http_bounds, "MAX_EVENT_BYTES", 1 * MiB)
    with FakeOllama() as fake:
        fake.add_model("llama3.2")
        fake.script(("flood", 16 * MiB))
        provider = LiteLLMProvider("ollama_chat/llama3.2", "ollama", api_base=fake.base_url)

        async def run() -> None:
            try:
                await collect(provider, HI, WAIT_S)
            finally:
                await provider.aclose()

        with pytest.raises(pe.StreamTooLarge) as caught:
            asyncio.run(run())
        assert caught.value.user_line() == (
            f"the server at {fake.base_url} sent one event of more than 1 MiB; stopped reading "
            "it (retry, or check the server)")
        assert fake.flooded.done.wait(WAIT_S)
        assert fake.flooded.sent[0] < 16 * MiB


def read_bounded(status: int, headers: dict[str, str], body: bytes) -> None:
    """Read a response, as it arrives in 4 KiB pieces, through a bounded transport (bytes
    content would be read at once, before any bound could see it)."""
    import httpx

    async def arriving():
        for at in range(0, len(body), 4096):
            yield body[at:at + 4096]

    async def read() -> None:
        transport = http_bounds.bound_transport(httpx.MockTransport(
            lambda request: httpx.Response(status, content=arriving(), headers=headers)))
        async with httpx.AsyncClient(transport=transport) as client:
            async with client.stream("POST", "http://127.0.0.1/v1/chat/completions") as r:
                await r.aread()

    asyncio.run(read())


def test_a_compressed_event_is_metered_as_it_decodes(monkeypatch):
    """A gzip of one huge line is small on the wire: the bound counts what it decodes to."""
    monkeypatch.setattr(http_bounds, "MAX_EVENT_BYTES", 1 * MiB)
    body = gzip.compress(b"data: {\"x\": \"" + b"a" * (4 * MiB))
    assert len(body) < 64 * 1024
    with pytest.raises(http_bounds.EventTooLarge):
        read_bounded(200, {"content-type": "text/event-stream", "content-encoding": "gzip"},
                     body)


def test_an_error_body_is_bounded_whole_whatever_its_lines(monkeypatch):
    monkeypatch.setattr(http_bounds, "MAX_EVENT_BYTES", 1 * MiB)
    read_bounded(400, {"content-type": "text/plain"}, b"short line\n" * 1000)
    with pytest.raises(http_bounds.EventTooLarge):
        read_bounded(400, {"content-type": "text/plain"}, b"short line\n" * (200 * 1024))


def test_a_compressed_error_body_past_the_bound_is_told_as_an_error_body(monkeypatch):
    """A gzip bomb on a 422 was told as "sent one event of more than 16 MiB", as if the
    answer's stream had flooded: it is the server's error response that was too large."""
    from picochat.providers.litellm_provider import LiteLLMProvider

    monkeypatch.setattr(http_bounds, "MAX_EVENT_BYTES", 1 * MiB)
    body = gzip.compress(b'{"error": {"message": "' + b"a" * (4 * MiB))
    with pytest.raises(http_bounds.EventTooLarge) as caught:
        read_bounded(422, {"content-type": "application/json", "content-encoding": "gzip"},
                     body)
    assert caught.value.status == 422
    provider = LiteLLMProvider("openai/fake-model", "openai", api_base="http://127.0.0.1:9/v1",
                               api_key="test-key")
    assert provider._errors().stopped(RuntimeError("unrelated"), None) is None
    wrapped = RuntimeError("litellm's wrapper")
    wrapped.__cause__ = caught.value
    assert provider.translate(wrapped).user_line() == (
        "the server at http://127.0.0.1:9/v1 answered HTTP 422 with an error body of more "
        "than 1 MiB; stopped reading it (retry, or check the server)")


@pytest.mark.parametrize("sse", [True, False])
def test_the_meter_counts_from_the_last_boundary_across_chunks(sse):
    meter = http_bounds.EventMeter(16, http_bounds.SSE_ENDS if sse else http_bounds.LINE_ENDS)
    end = b"\r\n\r\n" if sse else b"\n"
    meter.feed(b"abcdefgh" + end[:1])
    meter.feed(end[1:] + b"123456789")  # the boundary completes across the two chunks
    assert meter.pending == 9
    meter.feed(b"0123456")              # 16: at the bound, not past it
    with pytest.raises(http_bounds.EventTooLarge):
        meter.feed(b"!")


def test_sse_lines_inside_one_event_count_toward_it():
    meter = http_bounds.EventMeter(20, http_bounds.SSE_ENDS)
    meter.feed(b"data: 1234\n")
    with pytest.raises(http_bounds.EventTooLarge):  # no blank line: the event goes on
        meter.feed(b"data: 5678\n")


def test_an_error_body_is_one_event_however_many_lines_it_has():
    meter = http_bounds.EventMeter(15, ())
    meter.feed(b"line one\n\n")
    with pytest.raises(http_bounds.EventTooLarge):
        meter.feed(b"line two\n\n")


# --- one answer past its bound --------------------------------------------------------------


@pytest.mark.slow
def test_an_answer_past_32_mib_is_cut_and_kept(run_cli, fake):
    fake.script(("chunks", ["x" * MiB] * 40))  # 1 MiB events, each well within its bound
    result = ask(run_cli, "write forever")
    assert_clean_failure(result)
    assert result.stderr == (
        "picochat: the answer grew past 32 MiB (text, thinking and tool calls together); "
        "stopped reading it (the answer so far is kept where it is; ask for less at once, or "
        "check the server); your message and the partial answer are saved\n")
    assert len(partial_answer(run_cli)) == MAX_ANSWER_BYTES


class Endless(Provider):
    """Thinking, then tool-call arguments, without end; notes when its stream is closed."""

    info = ModelInfo(provider_kind="test", model="endless")

    def __init__(self) -> None:
        self.closed = False

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamEvent]:
        try:
            for _ in range(5):
                yield ThinkingDelta("t" * 100)
            while True:
                yield ToolCallDelta(0, arguments="a" * 100)
        finally:
            self.closed = True


def test_thinking_and_tool_arguments_count_toward_the_answer_bound(monkeypatch):
    monkeypatch.setattr(base, "MAX_ANSWER_BYTES", 1000)
    provider = Endless()
    with pytest.raises(pe.StreamTooLarge) as caught:
        asyncio.run(collect(provider, HI, WAIT_S))
    assert caught.value.user_line() == (
        "the answer grew past 1,000 bytes (text, thinking and tool calls together); stopped "
        "reading it (ask for less at once, or check the server)")
    assert provider.closed  # the stream was let go of at once, not when collected


def test_an_answer_of_too_many_pieces_is_cut_and_says_the_count(fake, monkeypatch):
    from picochat.providers import chat_completions
    from picochat.providers.litellm_provider import LiteLLMProvider

    monkeypatch.setattr(chat_completions, "MAX_ANSWER_PIECES", 50)
    fake.script(("chunks", [f"w{i} " for i in range(80)]))
    provider = LiteLLMProvider("openai/fake-model", "openai", api_base=fake.base_url,
                               api_key="test-key")
    seen: list[str] = []

    async def run() -> None:
        try:
            await collect(provider, HI, WAIT_S, on_text=lambda d: seen.append(d.text))
        finally:
            await provider.aclose()

    with pytest.raises(pe.StreamTooLarge) as caught:
        asyncio.run(run())
    assert caught.value.user_line() == (
        "the server sent more than 50 pieces for one answer; stopped reading it (the answer so "
        "far is kept where it is; ask for less at once, or check the server)")
    assert "".join(seen) == "".join(f"w{i} " for i in range(len(seen)))
    assert 40 <= len(seen) <= 50


# --- a 422 ----------------------------------------------------------------------------------

_FASTAPI = {"detail": [{"loc": ["body", "max_tokens"], "msg": "Input should be less than "
                        "4096", "type": "less_than"}]}


@pytest.mark.parametrize("item, said", [
    (("status", 422, {"error": {"message": "max_tokens is too large: 99999",
                                "type": "invalid_request_error"}}),
     ": max_tokens is too large: 99999"),
    (("status", 422, _FASTAPI), ": max_tokens: Input should be less than 4096"),
    (("raw", 422, "text/html", b"<html><head><title>422 Unprocessable Entity</title></head>"
                               b"<body><h1>Unprocessable</h1></body></html>"),
     ": 422 Unprocessable Entity"),
    (("raw", 422, "application/json", b""), ", with no reason given"),
    (("raw", 422, "text/html", b"<html><body><h1>422</h1></body></html>"),
     ", with no reason given"),  # was "(HTTP 422): 422"
    (("status", 422, {"error": {"message": 12345}}), ": 12345"),  # was "cannot connect"
], ids=["json", "fastapi", "html", "empty", "html-only-the-status", "number"])
@pytest.mark.slow
def test_a_422_is_the_servers_refusal_in_its_words(run_cli, fake, item, said):
    fake.script(item, item)  # litellm sends a refused request once more, without what it names
    result = ask(run_cli, "hello")
    assert_clean_failure(result)
    assert result.stderr == (
        f"picochat: {fake.base_url} refused the request (HTTP 422){said} (check this model's "
        "settings in the config, or the server's log); your message is saved\n")
    assert_no_internals(result)
    for python in ("TypeError", "async for", "NoneType"):
        assert python not in result.stderr
    assert roles(run_cli) == [("user", "complete")]


def test_an_error_inside_litellm_is_not_told_in_pythons_words():
    from picochat.providers.litellm_provider import LiteLLMProvider

    provider = LiteLLMProvider("openai/fake-model", "openai", api_base="http://127.0.0.1:9/v1",
                               api_key="test-key")
    error = provider.translate(TypeError("'async for' requires an object with __aiter__ "
                                         "method, got NoneType"), HI, 0)
    assert error.user_line() == (
        "the answer from http://127.0.0.1:9/v1 could not be read (an error inside litellm) "
        "(retry; picochat's log names the error)")


def test_the_words_of_an_error_body():
    assert pe.refusal_words(b'{"error": "bad"}') == "bad"
    assert pe.refusal_words(b'{"message": " spaced "}') == "spaced"
    assert pe.refusal_words(json.dumps(_FASTAPI).encode()) == (
        "max_tokens: Input should be less than 4096")
    assert pe.refusal_words(b"<p>no <b>title</b> &amp; more</p><script>x()</script>",
                            "text/html") == "no title & more"
    assert pe.refusal_words(b"plain words\n") == "plain words"
    assert pe.refusal_words(b"  ") == ""
    assert pe.refusal_words(b'{"other": 1}') == '{"other": 1}'


# --- a model that repeats itself ------------------------------------------------------------


def test_a_model_repeating_one_chunk_is_named_and_its_answer_kept(run_cli, fake):
    # litellm stops a stream after 100 identical chunks (REPEATED_STREAMING_CHUNK_LIMIT)
    fake.script(("chunks", ["Sure. "] + ["again and "] * 150))
    result = ask(run_cli, "count")
    assert_clean_failure(result)
    assert result.stderr == (
        "picochat: the model kept repeating the same text, so the answer was stopped (the "
        "answer so far is kept where it is; ask again, lower the temperature, or try another "
        "model); your message and the partial answer are saved\n")
    assert_no_internals(result)
    assert "repeating the same chunk" not in result.stderr
    kept = partial_answer(run_cli)
    assert kept.startswith("Sure. again and again and ")
    assert len(kept) < len("Sure. ") + 150 * len("again and ")


# --- many tiny pieces ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_stream_of_tiny_pieces_keeps_memory_flat_and_the_whole_answer(run_cli, fake):
    _, plain_rss = ask_measured("hello")
    pieces = [chr(ord("a") + i % 26) for i in range(30_000)]
    fake.script(("chunks", pieces))
    result, tiny_rss = ask_measured("spell it out")
    assert result.status == 0, result.stderr
    assert history(run_cli)[-1]["content"] == "".join(pieces)
    # measured: litellm keeps about 3.9 KB per chunk until the stream ends, +117 MB here (a
    # server that never stops: 722 MB after 40 s); with its old chunks let go, a few MB
    print(f"\n30,000 pieces: +{(tiny_rss - plain_rss) / MiB:.0f} MiB over a plain answer")
    assert tiny_rss - plain_rss < 48 * MiB, (plain_rss, tiny_rss)


def test_of_litellms_kept_chunks_the_first_the_usage_and_the_newest_stay():
    from types import SimpleNamespace

    from picochat.providers.litellm_provider import KEPT_CHUNKS, forget_old_chunks

    chunks = [SimpleNamespace(n=i, usage={"prompt_tokens": 3} if i in (7, 9) else None)
              for i in range(2 * KEPT_CHUNKS + 1)]
    response = SimpleNamespace(chunks=chunks)
    forget_old_chunks(response)
    kept = [c.n for c in response.chunks]
    assert kept == [0, 9, *range(KEPT_CHUNKS + 1, 2 * KEPT_CHUNKS + 1)]  # the newest usage
    assert response.chunks is chunks  # the wrapper's own list, trimmed in place
    forget_old_chunks(response)  # under the bound again: nothing more goes
    assert [c.n for c in response.chunks] == kept


def test_chunks_that_all_carry_usage_are_trimmed_too():
    """A server that puts usage in every chunk (vLLM's continuous usage stats): keeping every
    usage-bearing chunk kept them all, and each piece rescanned the whole list (8,000 pieces
    took 25 s, memory grew ~5 KB a piece)."""
    from types import SimpleNamespace

    from picochat.providers.litellm_provider import KEPT_CHUNKS, forget_old_chunks

    response = SimpleNamespace(chunks=[])
    longest = 0
    for i in range(10 * KEPT_CHUNKS):
        response.chunks.append(SimpleNamespace(n=i, usage={"completion_tokens": i}))
        forget_old_chunks(response)
        longest = max(longest, len(response.chunks))
    assert longest <= 2 * KEPT_CHUNKS + 1
    assert response.chunks[-1].n == 10 * KEPT_CHUNKS - 1  # the newest usage is kept

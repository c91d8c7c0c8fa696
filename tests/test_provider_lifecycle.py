"""A litellm call's life: warm-up without the network, cancellation mid-stream (in the worker
and by Ctrl-C on `ask`), and a shutdown that leaves no unclosed connection behind."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from picochat.messages import INTERRUPTED
from picochat.providers.base import TextDelta
from picochat.session import TurnFailed
from tests.helpers.cli import NOISE, SITECUSTOMIZE, history
from tests.helpers.config import ENV, make_worker
from tests.helpers.fakes import openai as fake_openai_module
from tests.helpers.waiting import WAIT_S, read_until

BEFORE = "The first half of an answer"


def held(fake) -> threading.Event:
    release = threading.Event()
    fake.script_turn(("hold", BEFORE, release, " and the rest of it."))
    return release


def test_cancel_mid_stream_drops_the_connection_and_keeps_what_arrived(compacting_fake, cli_store,
                                                                       config_file):
    release = held(compacting_fake)
    s = cli_store.create_session("s")

    async def run():
        async with make_worker(cli_store, s.id, config_file) as w:
            handle = w.submit_turn("tell me everything")
            seen = []
            async for event in handle:
                if isinstance(event, TextDelta):
                    seen.append(event.text)
                    if "".join(seen) == BEFORE:
                        handle.cancel()
            outcome = await handle.result()
            # the server sees the client go away while the worker (and its connection pool)
            # is still open: the cancel itself closed the stream
            closed = await asyncio.to_thread(compacting_fake.disconnected.wait, WAIT_S)
            return outcome, closed

    try:
        outcome, closed = asyncio.run(run())
        assert closed, "the stream was not closed on cancel"
    finally:
        release.set()
    assert isinstance(outcome, TurnFailed) and outcome.cancelled
    assert len(compacting_fake.requests) == 1
    rows = [(m.role, m.content, m.status) for m in cli_store.history(s.id)]
    assert rows == [("user", "tell me everything", "complete"),
                    ("assistant", BEFORE, INTERRUPTED)]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT semantics")
@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_ctrl_c_during_ask_saves_the_partial_answer_and_exits_130(run_cli, compacting_fake, home,
                                                                   monkeypatch):
    # the fake gives up a held stream after HOLD_LIMIT_S (then the client's leaving is never
    # seen); the CLI's answer to Ctrl-C must not race that limit on a busy machine
    monkeypatch.setattr(fake_openai_module, "HOLD_LIMIT_S", 3 * WAIT_S)
    release = held(compacting_fake)
    env = {**os.environ, **ENV}
    proc = subprocess.Popen([sys.executable, "-m", "picochat", "ask", "tell me everything"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        # the CLI imports litellm before it asks: on a busy machine that alone took ~50 s
        shown = read_until(proc.stdout, BEFORE, timeout=3 * WAIT_S)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=WAIT_S)
        assert compacting_fake.disconnected.wait(WAIT_S), "the held stream was never closed"
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
    err = err.decode()
    assert proc.returncode == 130, err
    assert BEFORE in shown + out.decode()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("picochat: ") and "partial answer are saved" in lines[0]
    for word in NOISE:
        assert word not in err
    rows = history(run_cli)
    assert [(r["role"], r["content"], r["status"]) for r in rows] == [
        ("user", "tell me everything", "complete"), ("assistant", BEFORE, INTERRUPTED)]
    assert len(compacting_fake.requests) == 1


WARM_UP = textwrap.dedent("""
    import asyncio, sys
    from picochat.providers.litellm_provider import LiteLLMProvider

    async def main():
        provider = LiteLLMProvider("openai/gpt-4o-mini", "openai")
        await provider.warm_up()
        await provider.warm_up()          # once is enough: the second call is free
        await provider.aclose()
        sys.modules["litellm"]            # it did import litellm
        print("warm")

    asyncio.run(main())
""")


def test_warm_up_imports_litellm_and_touches_no_network(tmp_path, home):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    log = tmp_path / "net.log"
    env = {**os.environ, "PICOCHAT_TEST_NET_LOG": str(log), "PYTHONWARNINGS": "always",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(site),
                                                       os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", WARM_UP], capture_output=True, text=True,
                          timeout=3 * WAIT_S, env=env)  # a litellm import: ~50 s under load
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "warm"
    assert proc.stderr == ""
    events = log.read_text().splitlines() if log.exists() else []
    assert not [e for e in events if '"socket.connect"' in e or "getaddrinfo" in e], events


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_ask_through_litellm_shuts_down_without_unclosed_connections(run_cli, compacting_fake,
                                                                     home):
    env = {**ENV, "PYTHONWARNINGS": "always", "PYTHONTRACEMALLOC": "0"}
    # through litellm: its import alone took ~50 s on a busy machine
    result = run_cli("ask", "hello", env=env, timeout=3 * WAIT_S)
    assert result.status == 0, result.stderr
    assert result.stderr == ""
    logs = list((home / "data").rglob("*.log"))
    assert logs, "the run wrote no log"
    text = "".join(p.read_text(encoding="utf-8") for p in logs)
    assert "turn_ok" in text and "python_warning" not in text, text


def test_a_provider_reused_after_a_cancelled_warm_up_still_answers(compacting_fake):
    """Each asyncio.run is a new loop: a warm-up task of an old one must not poison the next."""
    from picochat.providers.base import ProviderRequest, collect
    from picochat.providers.litellm_provider import LiteLLMProvider

    provider = LiteLLMProvider("openai/fake-model", "openai", api_base=compacting_fake.base_url,
                               api_key="test-key")

    async def abandoned() -> None:
        task = asyncio.ensure_future(provider.warm_up())
        await asyncio.sleep(0)
        task.cancel()

    async def ask() -> str:
        try:
            request = ProviderRequest(({"role": "user", "content": "hi"},))
            return (await collect(provider, request, 30)).text
        finally:
            await provider.aclose()

    asyncio.run(abandoned())
    assert asyncio.run(ask()) == "Hello from fake"
    assert asyncio.run(ask()) == "Hello from fake"   # and again, on a third loop

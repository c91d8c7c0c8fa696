"""A slow local server (issue 35, item 2): a CPU server evaluating a long prompt sends nothing for
minutes. A server on this machine or a private network gets the model's `timeout` (ten minutes
unless set) to answer, not the 60 s a hosted API gets; while it is silent the app says it waits
for the server's prompt evaluation; and a server that stays silent past the limit fails with a
line naming the limit and the setting that raises it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from picochat.config import Config, ModelConfig
from picochat.models import LOCAL_FIRST_BYTE_S, is_local, read_timeout, resolve_model
from picochat.providers import errors as pe
from picochat.providers.base import ProviderRequest, collect
from picochat.providers.chat_completions import READ_TIMEOUT_S
from picochat.providers.litellm_provider import LiteLLMProvider
from picochat.providers.openai_compat import OpenAICompatProvider
from picochat.tui.app import PicochatApp
from tests.helpers.fakes.openai import FakeOpenAI
from tests.helpers.tui import say
from tests.helpers.waiting import WAIT_S, settle

HI = ProviderRequest(({"role": "user", "content": "hi"},), max_tokens=64)


def resolved(base: str | None, model: str = "openai/m", timeout: float | None = None):
    entry = ModelConfig(name="m", model=model, api_base=base, timeout=timeout)
    return resolve_model(Config(models={"m": entry}), "m")


@pytest.mark.parametrize(("base", "local"), [
    ("http://127.0.0.1:8080/v1", True),
    ("http://localhost:11434", True),
    ("http://[::1]:8000/v1", True),
    ("http://192.168.1.20:8000/v1", True),
    ("http://10.0.0.2/v1", True),
    ("http://172.16.4.4:1234/v1", True),
    ("https://api.openai.com/v1", False),
    ("https://gateway.example/v1", False),
    ("http://8.8.8.8/v1", False),
])
def test_a_server_on_this_machine_or_a_private_network_is_local(base, local):
    assert is_local(resolved(base)) is local
    assert read_timeout(resolved(base)) == (LOCAL_FIRST_BYTE_S if local else READ_TIMEOUT_S)


def test_the_model_s_own_timeout_wins_and_a_hosted_model_is_not_local():
    assert read_timeout(resolved("http://127.0.0.1:8080/v1", timeout=30)) == 30
    assert read_timeout(resolved("https://gateway.example/v1", timeout=900)) == 900
    assert not is_local(resolved(None, "openai/gpt-4o-mini"))
    assert is_local(resolved(None, "ollama_chat/llama3.2"))  # Ollama: this machine by default


@pytest.mark.parametrize("carrier", ["direct", "litellm"])
def test_a_server_silent_past_the_limit_fails_with_the_limit_and_the_setting(carrier):
    gate = threading.Event()
    with FakeOpenAI() as fake:
        fake.script(("delay", gate, "late"))  # silent until the test lets it go
        kind = OpenAICompatProvider if carrier == "direct" else LiteLLMProvider
        base = fake.base_url
        provider = kind("openai/m", "openai", base, read_timeout=0.5)

        async def go():
            try:
                return await collect(provider, HI, WAIT_S)
            finally:
                await provider.aclose()

        with pytest.raises(pe.ProviderTimeout) as caught:
            asyncio.run(go())
        gate.set()
    line = caught.value.user_line()
    assert f"{base} did not answer in 0.5 s" in line
    assert "timeout" in line and "[models.NAME]" in line


async def test_the_app_says_it_waits_for_the_local_server_s_prompt_evaluation(store):
    gate = threading.Event()
    with FakeOpenAI() as fake:
        fake.script(("delay", gate, "The answer."))
        config = Config(models={"local": ModelConfig(name="local", model="openai/m",
                                                     api_base=fake.base_url)})
        model = resolve_model(config, "local")
        from picochat.models import create_provider

        app = PicochatApp(store, store.create_session("slow"), model, create_provider(model),
                          config)
        async with app.run_test(size=(110, 30)) as pilot:
            await settle(pilot, app, lambda: app.ready)
            await say(pilot, "a long prompt")
            await settle(pilot, app, lambda: "waiting for the server (prompt evaluation)"
                         in _pending(app), what="the pending line did not say it")
            gate.set()
            await settle(pilot, app, lambda: not app.worker.busy)


def _pending(app) -> str:
    from picochat.tui.pending import Pending

    return " ".join(str(p.render()) for p in app.query(Pending))

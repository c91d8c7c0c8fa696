"""A request's `max_tokens` never exceeds what the model can write (litellm's model map), and an
Anthropic request always carries one (issue 20, item 5, the provider's half)."""

from __future__ import annotations

import asyncio

from picochat.providers import model_map
from picochat.providers.base import ProviderRequest, collect
from picochat.providers.litellm_provider import ANTHROPIC_DEFAULT_MAX_TOKENS, LiteLLMProvider

HELLO = ({"role": "user", "content": "hi"},)


def _ask(provider: LiteLLMProvider, max_tokens: int | None) -> str:
    async def run() -> str:
        try:
            return (await collect(provider, ProviderRequest(HELLO, max_tokens=max_tokens),
                                  30)).text
        finally:
            await provider.aclose()
    return asyncio.run(run())


def test_a_reserve_above_the_models_output_limit_is_capped_at_it(fake_openai, home):
    assert model_map.max_output_tokens("openai/gpt-4") == 4096  # the map's figure
    capped = LiteLLMProvider("openai/gpt-4", "openai", api_base=fake_openai.base_url,
                             api_key="test-key")
    unknown = LiteLLMProvider("openai/fake-model", "openai", api_base=fake_openai.base_url,
                              api_key="test-key")
    for provider, asked in ((capped, 16384), (capped, 1000), (unknown, 16384)):
        assert _ask(provider, asked) == "Hello from fake"
    sent = [r.get("max_tokens") or r.get("max_completion_tokens") for r in fake_openai.requests]
    assert sent == [4096, 1000, 16384]  # a model the map does not know gets what was asked


def test_anthropic_requests_always_name_max_tokens():
    provider = LiteLLMProvider("anthropic/claude-sonnet-4-5", "anthropic", api_key="k")
    assert provider._body(ProviderRequest(HELLO))["max_tokens"] == \
        ANTHROPIC_DEFAULT_MAX_TOKENS  # not litellm's fill-in of the whole 64,000
    assert provider._body(ProviderRequest(HELLO, max_tokens=100_000))["max_tokens"] == 64_000
    other = LiteLLMProvider("openai/fake-model", "openai", api_key="k")
    assert "max_tokens" not in other._body(ProviderRequest(HELLO))

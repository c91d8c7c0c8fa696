"""Token estimates per model family: never below the model's own count, corrected by usage.

History is counted once in o200k; other families get a conservative factor (tokens.py). The
tokenizers litellm ships (an older Claude one, DeepSeek's) are the yardsticks here: whatever we
estimate for such a model must not come out below what its tokenizer says.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picochat import bpe, tokens
from picochat.budget import Calibration, RequestDraft, budget_limits, measure
from picochat.config import Config, ModelConfig
from picochat.messages import Message
from picochat.models import resolve_model
from picochat.projection import ContextProjection

tokenizers = pytest.importorskip("tokenizers")  # a litellm dependency


def bundled(name: str):
    path = bpe.bundled_tiktoken_dir() / name
    return tokenizers.Tokenizer.from_file(str(path))


CLAUDE = bundled("anthropic_tokenizer.json")
DEEPSEEK = bundled("deepseek_tokenizer.json")

# The factors are set for Latin-script text. Other scripts differ by up to 4x between
# tokenizers (Hindi, Korean); for them the provider's reported usage is what keeps the budget
# right (see the calibration test below), and overflow recovery is the net (DESIGN.md D11.3).
SAMPLES = [
    "The quick brown fox jumps over the lazy dog. " * 40,
    "def compact_context(store, provider, request):\n    return await plan(store)\n" * 30,
    '{"id": 17, "name": "item17", "tags": ["a", "b"], "value": 53.38}\n' * 40,
    "Ünïcödé — naïve café, 12:30 UTC; ~/.config/picochat/config.toml & $HOME " * 25,
    "aGVsbG8gd29ybGQ=" * 100 + " deadbeef0123" * 50,
]
# Words, numbers, spaces and ordinary punctuation: runs of one symbol (";" * 20 is 2 o200k
# tokens but 10 Claude ones) are outside what the factor promises.
LATIN = st.characters(max_codepoint=0x24F, categories=("L", "N", "Zs"),
                      include_characters=".,;:!?'\"()-/")


def resolved(model: str, **entry):
    config = Config(models={"m": ModelConfig(name="m", model=model, **entry)})
    return resolve_model(config, "m")


@pytest.mark.parametrize("model, tokenizer", [("anthropic/claude-sonnet-4-5", CLAUDE),
                                              ("deepseek/deepseek-chat", DEEPSEEK),
                                              ("ollama/llama3.1", DEEPSEEK)])
@pytest.mark.parametrize("text", SAMPLES)
def test_estimate_is_not_below_the_families_own_tokenizer(model, tokenizer, text):
    factor = resolved(model).token_factor
    assert tokens.scale(tokens.count_text(text), factor) >= len(tokenizer.encode(text).ids)


@settings(max_examples=100, deadline=None)
@given(st.text(LATIN, min_size=20, max_size=400))
def test_claude_estimate_holds_for_arbitrary_text(text):
    factor = resolved("anthropic/claude-sonnet-4-5").token_factor
    assert tokens.scale(tokens.count_text(text), factor) >= len(CLAUDE.encode(text).ids)


def test_openai_current_models_count_with_o200k_unscaled():
    for model in ("openai/gpt-4o-mini", "gpt-4.1", "openai/o3-mini", "gpt-5"):
        assert resolved(model).token_factor == 1.0
    legacy = resolved("openai/gpt-4").token_factor
    for text in SAMPLES:
        assert tokens.scale(tokens.count_text(text), legacy) >= tokens.count_text(text,
                                                                                  "cl100k_base")


def history(n: int, words: int = 60) -> ContextProjection:
    rows = []
    for seq in range(1, n + 1):
        role = "user" if seq % 2 else "assistant"
        text = f"message {seq}: " + "lorem ipsum dolor sit amet " * words
        rows.append(Message("s", seq, role, text, None, None, None, f"t{(seq + 1) // 2}", None,
                            "ok", tokens.count_message(role, text), 0))
    return ContextProjection("s", None, 1, None, tuple(rows), 1, n)


def test_the_same_history_compacts_sooner_for_claude_than_for_gpt4o():
    draft = RequestDraft("You are helpful.", history(20))
    base = draft.parts().total
    window = int(base * 1.25) + 1_000   # fits as o200k, not as Claude tokens
    gpt = measure(budget_limits(window, None, 1_000, 500, resolved("gpt-4o").token_factor), draft)
    claude = measure(budget_limits(window, None, 1_000, 500,
                                   resolved("anthropic/claude-sonnet-4-5").token_factor), draft)
    assert not gpt.should_compact(True)
    assert claude.should_compact(True)
    assert claude.parts.total == claude.used_tokens >= int(base * 1.5)


def test_reported_usage_replaces_the_scaled_estimate_for_the_matching_prefix():
    draft = RequestDraft("You are helpful.", history(10))
    limits = budget_limits(200_000, None, 16_384, 20_000, 1.5)
    key = draft.key("anthropic", "claude", None)
    real = int(draft.parts().total * 1.1)    # the provider's truth: less than our 1.5
    budget = measure(limits, draft, "anthropic", "claude", Calibration(key, real))
    assert (budget.used_tokens, budget.usage_source) == (real, "provider")

    longer = RequestDraft("You are helpful.", history(12))
    after = measure(limits, longer, "anthropic", "claude", Calibration(key, real))
    new_rows = sum(m.tokens for m in longer.projection.raw[10:])
    assert after.usage_source == "provider+estimate"
    assert after.used_tokens == real + tokens.scale(new_rows, 1.5)


def test_compaction_keeps_less_raw_tail_for_a_finer_tokenizer():
    """keep_recent_tokens means the model's tokens: a Claude tail holds fewer o200k tokens."""
    from picochat.compaction.compactor import ContextCompactor
    from picochat.providers.offline import OfflineProvider

    projection = history(40)
    gpt = budget_limits(100_000, None, 10_000, 4_000, 1.0)
    claude = budget_limits(100_000, None, 10_000, 4_000, 1.5)
    kept_gpt = ContextCompactor(OfflineProvider(), gpt, "").plan(projection).kept
    kept_claude = ContextCompactor(OfflineProvider(), claude, "").plan(projection).kept
    assert len(kept_claude) < len(kept_gpt)
    assert tokens.scale(sum(m.tokens for m in kept_claude), 1.5) <= claude.keep_recent

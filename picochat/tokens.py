"""Token counting, offline.

tiktoken's encodings are loaded from the copies litellm's wheel ships (found without importing
litellm), so counting never touches the network. Every message's count is taken once, when it
is appended, and stored: budgets add stored counts and never re-tokenize history.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

ENCODING = "o200k_base"
# OpenAI's chat format: each message costs its content plus a small fixed frame, and every reply
# is primed with a few tokens. Counting the frame keeps estimates at or above the real figure.
PER_MESSAGE_TOKENS = 4
REPLY_PRIMING_TOKENS = 3

_lock = threading.Lock()


def bundled_tiktoken_dir() -> Path | None:
    """litellm's bundled tiktoken cache, located without importing litellm (2 s saved)."""
    spec = importlib.util.find_spec("litellm")
    if not spec or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "litellm_core_utils" / "tokenizers"
    return path if path.is_dir() else None


def configure_tiktoken_cache() -> None:
    """Point tiktoken (and litellm, which would overwrite the variable) at the bundled files."""
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        os.environ.setdefault("CUSTOM_TIKTOKEN_CACHE_DIR", os.environ["TIKTOKEN_CACHE_DIR"])
        return
    path = bundled_tiktoken_dir()
    if path is not None:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(path)
        os.environ["CUSTOM_TIKTOKEN_CACHE_DIR"] = str(path)


@lru_cache(maxsize=4)
def _encoding(name: str) -> Any:
    with _lock:
        configure_tiktoken_cache()
        import tiktoken

        return tiktoken.get_encoding(name)


def count_text(text: str, encoding: str = ENCODING) -> int:
    """Tokens in `text`; special-token strings typed by a user count as plain text."""
    if not text:
        return 0
    return len(_encoding(encoding).encode(text, disallowed_special=()))


def count_message(
    role: str,
    content: str | None,
    tool_calls: Iterable[Mapping[str, Any]] | None = None,
    tool_call_id: str | None = None,
    name: str | None = None,
    reasoning: str | None = None,
) -> int:
    """What one chat message costs in a request: frame, role, content, tool-call JSON and
    the thinking sent back with it (`reasoning_content`, for DeepSeek)."""
    total = PER_MESSAGE_TOKENS + count_text(role) + count_text(content or "")
    if reasoning:
        total += count_text(reasoning)
    if tool_calls:
        total += count_text(json.dumps(list(tool_calls), ensure_ascii=False, sort_keys=True))
    if tool_call_id:
        total += count_text(tool_call_id)
    if name:
        total += count_text(name) + 1
    return total


def count_provider_messages(messages: Iterable[Mapping[str, Any]]) -> int:
    """A whole request's prompt, as the provider would count it (plus the reply priming)."""
    total = REPLY_PRIMING_TOKENS
    for m in messages:
        total += count_message(
            m.get("role", ""), m.get("content"), m.get("tool_calls"),
            m.get("tool_call_id"), m.get("name"), m.get("reasoning_content"),
        )
    return total


def tools_json(tools: Iterable[Mapping[str, Any]]) -> str:
    """Tool schemas in one canonical JSON form (sorted keys, no spaces)."""
    return json.dumps(list(tools), ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def count_tools(tools: Iterable[Mapping[str, Any]]) -> int:
    """Tool schemas as a request carries them: their JSON plus a small frame per tool.
    Counted once per distinct tool list: every request carries the same one."""
    tools = list(tools)
    return _count_tools_json(tools_json(tools), len(tools)) if tools else 0


@lru_cache(maxsize=64)
def _count_tools_json(text: str, n: int) -> int:
    return count_text(text) + PER_MESSAGE_TOKENS * n


# --- other model families ------------------------------------------------------------------------
# History is counted once, in o200k (the encoding of OpenAI's current models). Other tokenizers
# cut text finer, so for them the count is multiplied by a conservative factor: an estimate
# should come out at or above the provider's figure, which replaces it whenever the provider
# counted this exact request prefix (budget.CalibrationKey). The factors hold for Latin-script
# text (figures in the README, "Token counting"); other scripts differ by up to 4x between
# tokenizers, and there the provider's reported usage and overflow recovery (learn the window
# the provider states, compact, retry once) keep the budget right.
# - cl100k (gpt-4, gpt-3.5) / o200k: 0.99–1.01 on English and code (1.3–1.7 on Cyrillic, CJK).
# - Claude: pi's chars/4 came out at 0.70–0.76 of real counts, so real ≈ chars/2.8–3.0; o200k
#   gives chars/3.7–4.0 on English prose and chars/4.4–4.7 on Python, so real ≈ 1.3–1.66 ×
#   o200k, the top on code (the benchmarks' estimate cases print these ratios). litellm's
#   bundled (older) Claude tokenizer: 1.05–1.16 × o200k.
# - Others (Llama, Mistral, Qwen, Gemini, DeepSeek …): DeepSeek's bundled tokenizer measured
#   0.94–1.07 × o200k; 32k-vocabulary SentencePiece models cut English ~1.2–1.3 × finer.
O200K_FACTOR = 1.0
CL100K_FACTOR = 1.25
ANTHROPIC_FACTOR = 1.7
OTHER_FACTOR = 1.3

_O200K_PREFIXES = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4",
                   "gpt-oss", "codex")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35")


def family_factor(provider_kind: str, model: str) -> float:
    """How much a model family's tokens exceed our o200k count, conservatively."""
    name = model.rsplit("/", 1)[-1].lower()
    if provider_kind == "offline":
        return O200K_FACTOR            # the offline model counts with o200k itself
    if provider_kind == "anthropic" or "claude" in name:  # also bedrock/anthropic.claude-…
        return ANTHROPIC_FACTOR
    if provider_kind in ("openai", "azure", "text-completion-openai") or name.startswith("gpt"):
        if name.startswith(_O200K_PREFIXES):
            return O200K_FACTOR
        if name.startswith(_CL100K_PREFIXES):
            return CL100K_FACTOR
    return OTHER_FACTOR


def scale(count: int, factor: float) -> int:
    """A count in o200k tokens as the model's own, rounded up (an estimate errs high)."""
    return count if factor == 1.0 else math.ceil(count * factor)


def most_that_fit(low: int, high: int, fits: Callable[[int], bool]) -> int:
    """The largest n in low..high with fits(n), for a `fits` that holds up to some n and not
    after (more items never make a text shorter), and holds at `low`: by halves, so only a
    few candidate texts are counted."""
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low

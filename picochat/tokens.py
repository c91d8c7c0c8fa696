"""Token counting, offline.

tiktoken's encodings are loaded from the copies litellm's wheel ships (found without importing
litellm), so counting never touches the network. Every message's count is taken once, when it
is appended, and stored: budgets add stored counts and never re-tokenize history.

The o200k encoding costs 0.25-0.35 s to load and ~48 MiB to hold (75 MiB with the rank table
tiktoken keeps only for pickling, dropped here), so it is loaded on first use, not at start;
a short text counted before that is counted from the rank table alone (`bpe`, 10 ms).
The texts every request carries besides history (the system prompt, the tool schemas, a
checkpoint's summary block, the pins block, the role words) are counted with `remember=True`:
their counts are kept by the text's digest (`remembered`, which the app saves beside the
database and reads back at start), so the context's figures of an idle app need no encoding.
Code that must not wait for the load (the app's event loop) counts inside `without_loading()`,
where a count that needs the encoding raises `NotLoaded` instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
from collections import OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, Callable, Iterable, Iterator, Mapping

from picochat import bpe

ENCODING = "o200k_base"
# OpenAI's chat format: each message costs its content plus a small fixed frame, and every reply
# is primed with a few tokens. Counting the frame keeps estimates at or above the real figure.
PER_MESSAGE_TOKENS = 4
REPLY_PRIMING_TOKENS = 3

_lock = threading.Lock()


log = logging.getLogger("picochat.tokens")
_encodings: dict[str, Any] = {}
_no_loading: ContextVar[bool] = ContextVar("picochat_tokens_no_loading", default=False)


class NotLoaded(Exception):
    """A count needs an encoding that is not loaded, inside `without_loading()`."""


@contextmanager
def without_loading() -> Iterator[None]:
    """Counts made inside raise NotLoaded rather than load an encoding (0.25 s, holding the
    GIL for half of it): for the app's event loop, which shows "counting…" meanwhile."""
    token = _no_loading.set(True)
    try:
        yield
    finally:
        _no_loading.reset(token)


def loaded(name: str = ENCODING) -> bool:
    return name in _encodings


def load(name: str = ENCODING) -> None:
    """Load the encoding now (a thread's way to have it ready before it is needed)."""
    _encoding(name)


def load_table(name: str = ENCODING) -> None:
    """Load what counting a short text needs (`bpe`'s table: 10 ms and 5 MiB from the cache
    folder, where the whole encoding takes 0.35 s and ~50 MiB)."""
    bpe.table(name)


def table_loaded(name: str = ENCODING) -> bool:
    return bpe.loaded(name) is not None


def _encoding(name: str) -> Any:
    enc = _encodings.get(name)
    if enc is not None:
        return enc
    if _no_loading.get():
        raise NotLoaded(name)
    with _lock:
        if name not in _encodings:
            import tiktoken

            if bpe.usable(name):  # the parsed rank file, from the cache folder when saved
                table = bpe.table(name)
                enc = tiktoken.Encoding(name, pat_str=table.pat_str,
                                        mergeable_ranks=table.rank_dict(),
                                        special_tokens=table.special_tokens)
            else:  # its file lied: tiktoken's own parse
                bpe.configure_tiktoken_cache()
                enc = tiktoken.get_encoding(name)
            # The rank table (bytes -> rank) is a copy of what the Rust core now holds, kept by
            # tiktoken only to pickle the encoding, which picochat never does: freed right
            # after the load (27 MiB of 75; later it would leave holes, not free pages).
            # encode and decode read the core alone.
            if isinstance(getattr(enc, "_mergeable_ranks", None), dict):
                enc._mergeable_ranks = {}
            _encodings[name] = enc
        return _encodings[name]


def _count(text: str, name: str) -> int:
    """Tokens in `text`: by the core once it is loaded; before that, a short text from the
    rank table alone (`bpe`, exact; 10 ms and 5 MiB to load where the core takes 0.35 s and
    50 MiB)."""
    enc = _encodings.get(name)
    if enc is None and len(text) <= bpe.SHORT_TEXT_CHARS and bpe.usable(name):
        table = bpe.loaded(name)
        if table is None and not _no_loading.get():
            table = bpe.table(name)
        try:
            n = bpe.count(text, table) if table is not None else None
        except (IndexError, ValueError) as exc:  # a table file that lied past its checks
            log.warning("rank_table_broken kind=%s", type(exc).__name__)
            bpe.give_up(name)
            n = None
        if n is not None:
            return n
    return len((enc or _encoding(name)).encode(text, disallowed_special=()))


def count_text(text: str, encoding: str = ENCODING, remember: bool = False) -> int:
    """Tokens in `text`; special-token strings typed by a user count as plain text.
    `remember`: a text that comes back in every request (a system prompt, tool schemas, a
    summary block, the pins block) is counted once and its count kept by its digest."""
    global _memo_changed
    if not text:
        return 0
    if remember and encoding == ENCODING:
        key = _digest(text)
        with _memo_lock:
            known = _memo.get(key)
            if known is not None:
                _memo.move_to_end(key)
                return known
        n = _count(text, encoding)
        with _memo_lock:
            _memo[key], _memo_changed = n, True
            while len(_memo) > MEMO_SIZE:
                _memo.popitem(last=False)
        return n
    return _count(text, encoding)


# --- counts remembered across runs ---------------------------------------------------------------
# Digest -> o200k count of the texts counted with remember=True, the least recently used first.
# A few hundred entries of ~40 bytes each: the system prompts, tool lists, pins blocks and
# summaries of the sessions opened lately.
MEMO_SIZE = 512
_memo: OrderedDict[str, int] = OrderedDict()
_memo_lock = threading.Lock()
_memo_changed = False


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def remembered() -> dict[str, int] | None:
    """The remembered counts (oldest first) when some were added since the last call, else
    None: what to save."""
    global _memo_changed
    with _memo_lock:
        if not _memo_changed:
            return None
        _memo_changed = False
        return dict(_memo)


def remember(counts: Mapping[str, int]) -> None:
    """Counts saved by an earlier run (from `remembered`), ahead of this run's own."""
    with _memo_lock:
        for key, n in reversed(list(counts.items())):  # each to the front: the oldest ends first
            if key not in _memo:
                _memo[key] = n
                _memo.move_to_end(key, last=False)
        while len(_memo) > MEMO_SIZE:
            _memo.popitem(last=False)


def count_message(
    role: str,
    content: str | None,
    tool_calls: Iterable[Mapping[str, Any]] | None = None,
    tool_call_id: str | None = None,
    name: str | None = None,
    reasoning: str | None = None,
    remember: bool = False,
) -> int:
    """What one chat message costs in a request: frame, role, content, tool-call JSON and
    the thinking sent back with it (`reasoning_content`, for DeepSeek). `remember`: as
    count_text's, for a message every request carries."""
    total = (PER_MESSAGE_TOKENS + count_text(role, remember=remember)
             + count_text(content or "", remember=remember))
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
    return count_text(text, remember=True) + PER_MESSAGE_TOKENS * n


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

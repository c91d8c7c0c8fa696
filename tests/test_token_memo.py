"""Counting without holding what counting does not need (issue 33).

The encoding is held without tiktoken's rank table, and counts exactly as a whole encoding
does; the texts every request carries are counted once and their counts kept across runs; a
caller that must not wait for the encoding to load is told so instead of waiting.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picochat import bpe, budget, token_counts, tokens
from picochat.budget import RequestDraft
from picochat.messages import Pin
from picochat.projection import ContextProjection

SAMPLES = [
    "The staging port is 8443 and the deploy key lives in ~/.ssh/id_ed25519.",
    "def f(x):\n    return {'a': [1, 2, 3], 'b': x ** 2}  # ünïcödé, 日本語, emoji 🚀",
    "a user typing <|endoftext|> and <|im_start|> counts them as plain text",
]


@pytest.fixture
def memo(monkeypatch: pytest.MonkeyPatch):
    """An empty memo of remembered counts for this test."""
    monkeypatch.setattr(tokens, "_memo", type(tokens._memo)())
    monkeypatch.setattr(tokens, "_memo_changed", False)
    return tokens._memo


def test_the_held_encoding_counts_and_decodes_as_a_whole_one():
    import tiktoken
    from tiktoken_ext.openai_public import o200k_base

    held = tokens._encoding(tokens.ENCODING)
    assert held._mergeable_ranks == {}  # the rank table (27 MiB) is not kept
    whole = tiktoken.Encoding(**o200k_base())  # a fresh one, with its table
    for text in SAMPLES:
        ids = held.encode(text, disallowed_special=())
        assert ids == whole.encode(text, disallowed_special=())
        assert held.decode(ids) == text
        assert tokens.count_text(text) == len(ids)


def test_remembered_counts_are_the_counts(memo):
    for text in SAMPLES:
        assert tokens.count_text(text, remember=True) == tokens.count_text(text)
    kept = tokens.remembered()
    assert kept is not None and sorted(kept.values()) == sorted(
        tokens.count_text(t) for t in SAMPLES)
    assert tokens.remembered() is None  # nothing new since


def test_without_the_encoding_only_remembered_counts_are_given(memo, monkeypatch):
    system, history = "You are terse.", "not a text any request carries"
    expected = tokens.count_message("system", system, remember=True)
    # as in a process that has loaded neither the encoding nor the rank table (bpe)
    monkeypatch.setattr(tokens, "_encodings", {})
    monkeypatch.setattr(bpe, "_tables", {})
    with tokens.without_loading():
        assert tokens.count_message("system", system, remember=True) == expected
        with pytest.raises(tokens.NotLoaded):
            tokens.count_text(history)
        with pytest.raises(tokens.NotLoaded):
            tokens.count_text("a system prompt never counted", remember=True)
    assert not tokens.loaded()  # asking did not load it


def test_the_request_parts_an_idle_app_shows_need_no_encoding(memo, monkeypatch):
    """System prompt, tools, a summary and pins: counted once, then known without it."""
    tools = ({"type": "function", "function": {"name": "history_search", "parameters": {}}},)
    projection = ContextProjection("s", "cp1", 1, "## Objective\nship it", (), None, 0,
                                   pins=(Pin(1, "keep port 8443", 5, None, 0),))
    draft = RequestDraft("Be brief.", projection, tools)
    counted = draft.parts()
    for cached in (budget._system_tokens, budget.pins_tokens, budget.summary_tokens):
        cached.cache_clear()
    tokens._count_tools_json.cache_clear()
    monkeypatch.setattr(tokens, "_encodings", {})
    monkeypatch.setattr(bpe, "_tables", {})
    with tokens.without_loading():
        assert draft.parts() == counted


def test_counts_kept_in_the_data_folder_come_back(memo, tmp_path: Path):
    tokens.count_text(SAMPLES[0], remember=True)
    token_counts.write(tmp_path)
    kept = tokens.remembered()
    assert kept is None  # written: nothing new
    saved = json.loads((tmp_path / token_counts.FILE_NAME).read_text())
    memo.clear()
    token_counts.read(tmp_path)
    assert dict(memo) == saved["counts"] and len(memo) == 1


@pytest.mark.parametrize("content", [
    "not json", json.dumps({"version": 1, "encoding": "cl100k_base", "counts": {"0" * 32: 5}}),
    json.dumps({"version": 1, "encoding": "o200k_base", "counts": {"../x": 5, "1" * 32: -1,
                                                                    "2" * 32: "7"}}),
    json.dumps([1, 2]),
])
def test_a_damaged_file_is_a_cache_miss(memo, tmp_path: Path, content: str):
    (tmp_path / token_counts.FILE_NAME).write_text(content)
    token_counts.read(tmp_path)
    assert len(memo) == 0


def test_the_memo_keeps_the_newest_counts(memo, monkeypatch):
    monkeypatch.setattr(tokens, "MEMO_SIZE", 3)
    older = {f"{i:032x}": i for i in range(3)}
    tokens.remember(older)
    tokens.count_text("new", remember=True)
    assert list(memo) == [f"{i:032x}" for i in (1, 2)] + [tokens._digest("new")]

"""Short texts counted without tiktoken's core, exactly as it counts them (issue 33).

`picochat ask` spent half its time building the core to count two short texts. bpe counts them
from the rank table alone, kept in a cache file. A count that differed from the core's by one
token would shift every budget, so the counts are held to the core's over random text and real
text; the cache file is held to "a damaged or stale file is never read as a table".
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picochat import bpe, token_counts, tokens

ROOT = Path(__file__).resolve().parents[1]
NAME = tokens.ENCODING


@pytest.fixture(scope="module")
def core():
    return tokens._encoding(NAME)


@pytest.fixture(scope="module")
def table():
    return bpe.table(NAME)


def core_count(core, text: str) -> int:
    return len(core.encode(text, disallowed_special=()))


REAL_TEXTS = [
    "hi",
    "our Redis runs on 6380, and the staging deploy key is in ~/.ssh/id_ed25519",
    "2026-12-06T18:14:52Z ERROR worker[31337]: connection reset by peer (errno=104)\n" * 5,
    "def f(x):\n\treturn {'a': [1, 2, 3], 'b': x ** 2}  # ünïcödé\r\n",
    "日本語のテキストと中文文本, русский текст, العربية, हिन्दी, 🚀🎉👩‍👩‍👧‍👦",
    "a user typing <|endoftext|> and <|endofprompt|> counts them as plain text",
    "   leading and trailing spaces   \n\n\n\t\t  \u00a0\u2028\u0085 odd whitespace",
    "I'm sure they'll say it's fine; WE'RE NOT. Don't ALL-CAPS'LL it",
    "0123456789" * 20 + " 3.14159 -42 1e-9 0x1F",
    "lone surrogate \ud800 and \udfff in the middle",
    "\U0003d000/A",  # assigned after Unicode 14: `regex` and the core split it differently
]


@pytest.mark.parametrize("text", REAL_TEXTS)
def test_real_text_counts_as_the_core_counts_it(core, table, text):
    n = bpe.count(text, table)
    assert n == core_count(core, text) or (n is None and bpe._has_unassigned(text))
    assert tokens.count_text(text) == core_count(core, text)  # the core counts what bpe won't


def test_files_of_this_project_count_as_the_core_counts_them(core, table):
    for path in [ROOT / "README.md", ROOT / "picochat" / "bpe.py", ROOT / "pyproject.toml"]:
        text = path.read_text(encoding="utf-8")[:bpe.SHORT_TEXT_CHARS]
        assert bpe.count(text, table) == core_count(core, text), path.name


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_any_text_counts_as_the_core_counts_it(core, table, text):
    n = bpe.count(text, table)
    assert n is None or n == core_count(core, text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["Redis", " 6380", "'s", "'LL", " ", "\n", "\r\n", "é", "日本",
                                 "🚀", "...", "://", "0", "12345", "\t", "<|", "endoftext",
                                 "|>", "A", "ab", "=", "\u0301"]), max_size=60).map("".join))
def test_texts_made_of_tricky_pieces_count_as_the_core_counts_them(core, table, text):
    assert bpe.count(text, table) == core_count(core, text)


def test_a_piece_too_long_to_merge_here_goes_to_the_core(table):
    assert bpe.count("=" * (bpe.MAX_PIECE_BYTES + 1) + "x", table) is None
    assert bpe.count("", table) == 0


def test_tokens_count_short_texts_before_the_core_is_loaded(monkeypatch, core):
    """The core stays unloaded for a short text; a long one loads it, and then counts agree."""
    monkeypatch.setattr(tokens, "_encodings", {})
    short = "our Redis runs on 6380"
    assert tokens.count_text(short) == core_count(core, short)
    assert not tokens.loaded()
    long = "word " * (bpe.SHORT_TEXT_CHARS // 5 + 10)
    assert tokens.count_text(long) == core_count(core, long)
    assert tokens.loaded()


def test_without_loading_a_short_text_counts_only_once_the_table_is_held(monkeypatch, table):
    monkeypatch.setattr(tokens, "_encodings", {})
    monkeypatch.setattr(bpe, "_tables", {})
    with tokens.without_loading(), pytest.raises(tokens.NotLoaded):
        tokens.count_text("hello")
    monkeypatch.setattr(bpe, "_tables", {NAME: table})
    with tokens.without_loading():
        assert tokens.count_text("hello") == 1


# --- the cache file ------------------------------------------------------------------------------

@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder of this test's own and no table in memory."""
    monkeypatch.setattr(bpe, "_tables", {})
    monkeypatch.setattr(bpe, "_files", token_counts.RankTableFiles(tmp_path / "cache"))
    return tmp_path / "cache"


def parses(monkeypatch) -> list[str]:
    """The names parsed from tiktoken's rank file from now on."""
    seen: list[str] = []
    real = bpe._parse

    def parse(name: str):
        seen.append(name)
        return real(name)
    monkeypatch.setattr(bpe, "_parse", parse)
    return seen


def test_the_table_is_parsed_once_then_read_from_the_cache(cache, monkeypatch, table):
    seen = parses(monkeypatch)
    first = bpe.table(NAME)
    assert seen == [NAME] and (cache / f"{NAME}.ranks").is_file()
    assert (cache / f"{NAME}.ranks").stat().st_mode & 0o077 == 0
    monkeypatch.setattr(bpe, "_tables", {})
    again = bpe.table(NAME)
    assert seen == [NAME]  # read, not parsed
    assert again.rank_dict() == first.rank_dict() == table.rank_dict()
    assert again.pat_str == table.pat_str and again.special_tokens == table.special_tokens


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "empty", "other key", "garbage"])
def test_a_damaged_or_stale_file_is_parsed_again_and_replaced(cache, monkeypatch, table, damage):
    bpe.table(NAME)
    path = cache / f"{NAME}.ranks"
    data = bytearray(path.read_bytes())
    if damage == "flip a byte":
        data[len(data) // 2] ^= 0x40
    elif damage == "truncate":
        data = data[:len(data) // 3]
    elif damage == "empty":
        data = bytearray()
    elif damage == "other key":
        data[len(bpe.MAGIC)] ^= 1
    else:
        data = bytearray(b"\x00\xff" * 1000)
    path.write_bytes(bytes(data))
    monkeypatch.setattr(bpe, "_tables", {})
    seen = parses(monkeypatch)
    again = bpe.table(NAME)
    assert seen == [NAME]
    assert again.rank_dict() == table.rank_dict()
    assert bpe.count("our Redis runs on 6380", again) == bpe.count("our Redis runs on 6380",
                                                                   table)
    monkeypatch.setattr(bpe, "_tables", {})
    bpe.table(NAME)
    assert seen == [NAME]  # the file was written again, whole


@pytest.mark.parametrize("lie", ["no free slot", "sizes", "meta"])
def test_a_file_with_a_good_digest_but_a_wrong_layout_is_not_a_table(cache, monkeypatch, table,
                                                                    lie):
    """A file whose digest holds but whose layout lies (a free hash slot missing would make a
    lookup spin forever) is parsed again, never used."""
    import marshal
    from array import array

    key = bpe._definition_key(NAME)
    ranks = {bytes([i]): i for i in range(256)}
    good = bpe._pack(("x", {}, ranks), key)
    body = bytearray(good[len(bpe.MAGIC) + 64:])
    n, size, meta = array("I", body[:12])
    if lie == "no free slot":
        body[12 + meta:12 + meta + 4 * size] = array("I", range(size)).tobytes()
    elif lie == "sizes":
        body[0:4] = array("I", [n + 5]).tobytes()
    else:
        body[12:12 + meta] = marshal.dumps(["not", "a", "pattern"]).ljust(meta, b"\0")[:meta]
    forged = bpe.MAGIC + key + bpe._digest(bytes(body)) + bytes(body)
    assert bpe._unpack(NAME, good, key) is not None  # the check itself lets a good file in
    assert bpe._unpack(NAME, forged, key) is None
    cache.mkdir(parents=True)
    (cache / f"{NAME}.ranks").write_bytes(forged)
    seen = parses(monkeypatch)
    text = "our Redis runs on 6380"
    assert bpe.count(text, bpe.table(NAME)) == bpe.count(text, table)
    assert seen == [NAME]


def test_a_cache_folder_that_cannot_be_written_still_counts(tmp_path, monkeypatch, table):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder would be")
    monkeypatch.setattr(bpe, "_tables", {})
    monkeypatch.setattr(bpe, "_files", token_counts.RankTableFiles(blocker / "cache"))
    assert bpe.count("hello world", bpe.table(NAME)) == 2


def test_a_table_that_breaks_in_use_hands_counting_to_the_core(cache, monkeypatch, core):
    """A file whose digest and sizes hold but whose hash slots point past the tokens (made by
    hand: picochat never writes one) fails at the first lookup; the count is the core's, and
    this process stops using the table."""
    from array import array

    monkeypatch.setattr(bpe, "_broken", set())
    monkeypatch.setattr(tokens, "_encodings", {})
    key = bpe._definition_key(NAME)
    good = bpe._pack(bpe._parse(NAME), key)
    head = len(bpe.MAGIC) + 64
    body = bytearray(good[head:])
    n, size, meta = array("I", body[:12])
    slots = array("I", body[12 + meta:12 + meta + 4 * size])
    slots = array("I", (s if s == 0xFFFFFFFF else n + 7 for s in slots))
    body[12 + meta:12 + meta + 4 * size] = slots.tobytes()
    cache.mkdir(parents=True)
    (cache / f"{NAME}.ranks").write_bytes(bpe.MAGIC + key + bpe._digest(bytes(body))
                                          + bytes(body))
    text = "our Redis runs on 6380"
    assert tokens.count_text(text) == core_count(core, text)
    assert not bpe.usable(NAME) and tokens.loaded()
    assert tokens.count_text("hello world") == 2

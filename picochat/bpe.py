"""Exact token counts of short texts without tiktoken's Rust core, and the rank table on disk.

Building tiktoken's o200k encoder costs ~0.35 s: 0.2 s to parse its 3.6 MB rank file, then
0.18 s for the Rust core, which holds the GIL. A `picochat ask` counts only two short texts (the
message and the answer), so that load was half its time. Two things here make it cheap:

- The parsed table (ranks, pattern, special tokens) is kept in one marshal file in the cache
  folder (written and read by token_counts.RankTableFiles): 0.05 s to read, checked by a digest and keyed by tiktoken's own definition of the
  encoding, so an upgrade or a damaged file means a parse, never a wrong count.
- `count` counts a short text from that table the way tiktoken's core encodes it: split by the
  encoding's pattern; a piece that is one rank is one token; otherwise merge the adjacent pair
  of lowest rank, the leftmost of equals, until no pair has a rank. The counts equal tiktoken's
  (tests/test_bpe.py holds them to that over random and real text). It is quadratic in a
  piece's length, so a text with a long piece (a run of 200 `=`) goes to the core instead.

The core, when a long text needs it, is built from the same table (`tokens._encoding`), which
saves the parse there too.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import marshal
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("picochat.tokens")

SHORT_TEXT_CHARS = 8192  # counted here, in ~10 ms at most; a longer text goes to the core
MAX_PIECE_BYTES = 128    # a longer piece (a run of symbols) goes to the core: merges are O(n²)
MAGIC = b"picochat-ranks 1\n"
_DIGEST_SIZE = 32
Parts = tuple[str, dict[str, int], dict[bytes, int]]  # pattern, special tokens, ranks


@dataclass(frozen=True, eq=False)
class RankTable:
    """One encoding as tiktoken defines it, and its split pattern compiled (`regex`)."""

    name: str
    pat_str: str
    special_tokens: dict[str, int]
    ranks: dict[bytes, int]
    pattern: Any


class TableFiles(Protocol):
    """Where tables are kept between runs (token_counts.RankTableFiles: the cache folder)."""

    def read(self, name: str) -> bytes | None: ...

    def write(self, name: str, data: bytes) -> None: ...


_files: TableFiles | None = None
_tables: dict[str, RankTable] = {}
_lock = threading.Lock()


def keep_tables_in(files: TableFiles | None) -> None:
    """Set by the front ends; with none, every process parses tiktoken's file."""
    global _files
    _files = files


def loaded(name: str) -> RankTable | None:
    return _tables.get(name)


def release(name: str) -> None:
    """Drop the table (~30 MiB) once the core holds its own copy."""
    _tables.pop(name, None)


def table(name: str) -> RankTable:
    """The encoding's table: from the cache file when it is good, else parsed and saved."""
    with _lock:
        held = _tables.get(name)
        if held is None:
            held = _tables[name] = _load(name)
        return held


def count(text: str, table: RankTable) -> int | None:
    """Tokens in `text` as tiktoken's core counts them with special tokens taken as plain text;
    None when a piece is too long to merge here (the caller asks the core)."""
    if not text:
        return 0
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: replaced, as tiktoken's encode does
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    ranks = table.ranks
    total = 0
    for word in table.pattern.findall(text):
        piece = word.encode("utf-8")
        if piece in ranks:
            total += 1
        elif len(piece) > MAX_PIECE_BYTES:
            return None
        else:
            total += _merged_length(piece, ranks)
    return total


def _merged_length(piece: bytes, ranks: dict[bytes, int]) -> int:
    """How many parts byte-pair merging leaves of `piece` (every single byte has a rank)."""
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (best is None or rank < best):
                best, at = rank, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return len(parts)


# --- the table file ------------------------------------------------------------------------------

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



def _load(name: str) -> RankTable:
    key = _definition_key(name)
    data = _files.read(name) if _files is not None else None
    parts = _unpack(data, key) if data is not None else None
    if parts is None:
        parts = _parse(name)
        if _files is not None:
            _files.write(name, _pack(parts, key))
    import regex  # tiktoken's own dependency; its pattern needs \p{…} classes

    pat_str, special, ranks = parts
    return RankTable(name, pat_str, special, ranks, regex.compile(pat_str))


def _definition_key(name: str) -> bytes:
    """What the table was built from: tiktoken's module defining the encodings (its text, so a
    tiktoken that changes them changes the key) and the rank file it reads."""
    h = hashlib.blake2b(name.encode(), digest_size=_DIGEST_SIZE)
    spec = importlib.util.find_spec("tiktoken_ext.openai_public")
    origin = spec.origin if spec else None
    if origin:
        h.update(Path(origin).read_bytes())
    h.update(os.environ.get("TIKTOKEN_CACHE_DIR", "").encode("utf-8", "surrogateescape"))
    return h.digest()


def _unpack(data: bytes, key: bytes) -> Parts | None:
    """The table a file holds under `key`, or None (another key, damaged: parsed again)."""
    head = len(MAGIC)
    body = data[head + 2 * _DIGEST_SIZE:]
    if (data[:head] != MAGIC or data[head:head + _DIGEST_SIZE] != key
            or data[head + _DIGEST_SIZE:head + 2 * _DIGEST_SIZE] != _digest(body)):
        log.info("rank_table_stale")
        return None
    try:
        parts = marshal.loads(body)
    except (ValueError, EOFError, TypeError) as exc:
        log.info("rank_table_unreadable kind=%s", type(exc).__name__)
        return None
    if not (isinstance(parts, tuple) and len(parts) == 3 and isinstance(parts[0], str)
            and isinstance(parts[1], dict) and isinstance(parts[2], dict)):
        log.info("rank_table_unreadable kind=shape")
        return None
    return parts


def _pack(parts: Parts, key: bytes) -> bytes:
    body = marshal.dumps(parts)
    return MAGIC + key + _digest(body) + body


def _digest(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=_DIGEST_SIZE).digest()


def _parse(name: str) -> Parts:
    """tiktoken's definition of the encoding, its rank file parsed and hash-checked (0.2 s)."""
    configure_tiktoken_cache()
    import tiktoken_ext.openai_public as public

    spec = public.ENCODING_CONSTRUCTORS[name]()
    return spec["pat_str"], dict(spec["special_tokens"]), spec["mergeable_ranks"]

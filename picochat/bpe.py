"""Exact token counts of short texts without tiktoken's Rust core, from a small table on disk.

Building tiktoken's o200k encoder costs ~0.35 s and ~50 MiB: 0.2 s to parse its 3.6 MB rank
file, then 0.18 s for the Rust core, which holds the GIL. A `picochat ask` counts only two short
texts (the message and the answer), and an app about to send a short message one; the load was
half of the one's time and most of the other's memory. So:

- The rank table is kept in the cache folder (token_counts.RankTableFiles) as one file laid out
  for lookups in place: the tokens in rank order in one blob, their offsets, and an
  open-addressing hash table (crc32) of token indexes. Reading it is one 5 MB read and a digest
  (~10 ms); it costs no Python object per token. The file is keyed by tiktoken's own definition
  of the encoding and checked by a digest, so an upgrade or a damaged file means a parse (once,
  0.35 s), never a wrong count.
- `count` counts a text from that table the way tiktoken's core encodes it: split by the
  encoding's pattern; a piece that is one rank is one token; otherwise merge the adjacent pair
  of lowest rank, the leftmost of equals, until no pair has a rank. The counts equal tiktoken's
  (tests/test_bpe.py holds them to that over random and real text): ~9 ms for 16,000
  characters. It is quadratic in a piece's length, so a text with a long piece (a run of 200
  `=`) goes to the core instead, as does any text over SHORT_TEXT_CHARS.

The core, when a long text needs it, is built from the same table (`rank_dict`, 0.06 s), which
saves the parse there too.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import marshal
import os
import sys
import threading
import unicodedata
import zlib
from array import array
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("picochat.tokens")

SHORT_TEXT_CHARS = 16384  # counted here, in ~10 ms; a longer text goes to the core
MAX_PIECE_BYTES = 128     # a longer piece (a run of symbols) goes to the core: merges are O(n²)
MAGIC = b"picochat-rank2\n"  # 16 bytes: what follows stays 4-byte aligned
_DIGEST_SIZE = 32
_EMPTY = 0xFFFFFFFF        # a free slot of the hash table
Parts = tuple[str, dict[str, int], dict[bytes, int]]  # pattern, special tokens, ranks


class RankTable:
    """One encoding as tiktoken defines it, looked up in place in its file's bytes."""

    def __init__(self, name: str, pat_str: str, special_tokens: dict[str, int],
                 slots: memoryview, offsets: memoryview, ranks: memoryview,
                 blob: bytes) -> None:
        import regex  # tiktoken's own dependency; its pattern needs \\p{…} classes

        self.name, self.pat_str, self.special_tokens = name, pat_str, special_tokens
        self.pattern = regex.compile(pat_str)
        self._slots, self._offsets, self._ranks, self._blob = slots, offsets, ranks, blob
        self._mask = len(slots) - 1

    def rank(self, piece: bytes) -> int | None:
        slots, offsets, blob, mask = self._slots, self._offsets, self._blob, self._mask
        size = len(piece)
        at = zlib.crc32(piece) & mask
        while True:
            index = slots[at]
            if index == _EMPTY:
                return None
            start = offsets[index]
            if offsets[index + 1] - start == size and blob[start:start + size] == piece:
                return int(self._ranks[index])
            at = (at + 1) & mask

    def rank_dict(self) -> dict[bytes, int]:
        """bytes -> rank, as tiktoken's Encoding takes it (to build the core)."""
        offsets, blob = self._offsets, self._blob
        return {blob[offsets[i]:offsets[i + 1]]: rank for i, rank in enumerate(self._ranks)}


class TableFiles(Protocol):
    """Where tables are kept between runs (token_counts.RankTableFiles: the cache folder)."""

    def read(self, name: str) -> bytes | None: ...

    def write(self, name: str, data: bytes) -> None: ...


_files: TableFiles | None = None
_tables: dict[str, RankTable] = {}
_broken: set[str] = set()  # tables that failed in use: the core counts these
_lock = threading.Lock()


def keep_tables_in(files: TableFiles | None) -> None:
    """Set by the front ends; with none, every process parses tiktoken's file."""
    global _files
    _files = files


def loaded(name: str) -> RankTable | None:
    return _tables.get(name)


def usable(name: str) -> bool:
    """False once the table broke in use (`give_up`)."""
    return name not in _broken


def give_up(name: str) -> None:
    """This process counts `name` with tiktoken's core from now on (its table broke)."""
    with _lock:
        _tables.pop(name, None)
        _broken.add(name)


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
    if not text.isascii() and _has_unassigned(text):
        return None  # the split pattern's letter classes may differ from the core's there
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: replaced, as tiktoken's encode does
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    rank = table.rank
    total = 0
    for word in table.pattern.findall(text):
        piece = word.encode("utf-8")
        if rank(piece) is not None:
            total += 1
        elif len(piece) > MAX_PIECE_BYTES:
            return None
        else:
            total += _merged_length(piece, rank)
    return total


def _has_unassigned(text: str) -> bool:
    """Whether `text` holds a code point this Python's Unicode data does not assign. The
    `regex` module and tiktoken's Rust core each carry their own Unicode version, and a code
    point assigned between them (U+3D000, a letter to one, nothing to the other) is split
    differently: such a text goes to the core. Python's data (14.0 on 3.11) is the oldest."""
    return any(unicodedata.category(c) == "Cn" for c in text if ord(c) > 0x7F)


def _merged_length(piece: bytes, rank: Any) -> int:
    """How many parts byte-pair merging leaves of `piece` (every single byte has a rank)."""
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            found = rank(parts[i] + parts[i + 1])
            if found is not None and (best is None or found < best):
                best, at = found, i
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
    found = _unpack(name, data, key) if data is not None else None
    if found is not None:
        return found
    data = _pack(_parse(name), key)
    if _files is not None:
        _files.write(name, data)
    made = _unpack(name, data, key)
    assert made is not None  # packed just now
    return made


def _definition_key(name: str) -> bytes:
    """What the table was built from: tiktoken's module defining the encodings (its text, so a
    tiktoken that changes them changes the key) and the rank file it reads."""
    h = hashlib.blake2b(name.encode(), digest_size=_DIGEST_SIZE)
    spec = importlib.util.find_spec("tiktoken_ext.openai_public")
    origin = spec.origin if spec else None
    if origin:
        h.update(Path(origin).read_bytes())
    h.update(os.environ.get("TIKTOKEN_CACHE_DIR", "").encode("utf-8", "surrogateescape"))
    h.update(f"{sys.byteorder} {array('I').itemsize}".encode())  # the arrays' layout
    return h.digest()


def _unpack(name: str, data: bytes, key: bytes) -> RankTable | None:
    """The table a file holds under `key`, or None (another key, damaged: parsed again)."""
    head = len(MAGIC) + 2 * _DIGEST_SIZE
    view = memoryview(data)[head:]
    if (data[:len(MAGIC)] != MAGIC or data[len(MAGIC):len(MAGIC) + _DIGEST_SIZE] != key
            or data[len(MAGIC) + _DIGEST_SIZE:head] != _digest(view)):
        log.info("rank_table_stale")
        return None
    try:
        n, size, meta_size = view[:12].cast("I")
        at = 12 + meta_size
        pat_str, special = marshal.loads(view[12:at])
        slots = view[at:at + 4 * size].cast("I")
        at += 4 * size
        offsets = view[at:at + 4 * (n + 1)].cast("I")
        at += 4 * (n + 1)
        ranks = view[at:at + 4 * n].cast("I")
        blob = bytes(view[at + 4 * n:])
        sound = (size & (size - 1) == 0 and size > n and len(slots) == size
                 and len(offsets) == n + 1 and len(ranks) == n and offsets[n] == len(blob)
                 and isinstance(pat_str, str) and isinstance(special, dict))
        if not sound or not _has_free_slot(data, head + 12 + meta_size, 4 * size):
            raise ValueError("inconsistent sizes")
        return RankTable(name, pat_str, special, slots, offsets, ranks, blob)
    except Exception as exc:  # noqa: BLE001 - any damage means "parse again", never a crash
        log.info("rank_table_unreadable kind=%s", type(exc).__name__)
        return None


def _has_free_slot(data: bytes, start: int, size: int) -> bool:
    """Whether the hash slots hold a free one (else a probe for a missing piece never ends)."""
    empty = _EMPTY.to_bytes(4, sys.byteorder)
    at = data.find(empty, start, start + size)
    while at >= 0 and (at - start) % 4:
        at = data.find(empty, at + 1, start + size)
    return at >= 0


def _pack(parts: Parts, key: bytes) -> bytes:
    """The file: n, slots, meta size; the pattern and special tokens (marshal, padded); the
    hash slots; the tokens' offsets into the blob and their ranks, in rank order; the blob."""
    pat_str, special, ranks = parts
    items = sorted(ranks.items(), key=lambda item: item[1])
    n = len(items)
    size = 1 << (2 * n).bit_length()  # at most a quarter full: short probe runs
    mask = size - 1
    slots = array("I", [_EMPTY]) * size
    offsets, order, blob = array("I", [0]), array("I"), bytearray()
    for index, (token, rank) in enumerate(items):
        blob += token
        offsets.append(len(blob))
        order.append(rank)
        at = zlib.crc32(token) & mask
        while slots[at] != _EMPTY:
            at = (at + 1) & mask
        slots[at] = index
    meta = marshal.dumps((pat_str, special))
    meta += b"\0" * (-len(meta) % 4)
    body = b"".join([array("I", [n, size, len(meta)]).tobytes(), meta, slots.tobytes(),
                     offsets.tobytes(), order.tobytes(), bytes(blob)])
    return MAGIC + key + _digest(body) + body


def _digest(body: bytes | memoryview) -> bytes:
    return hashlib.blake2b(body, digest_size=_DIGEST_SIZE).digest()


def _parse(name: str) -> Parts:
    """tiktoken's definition of the encoding, its rank file parsed and hash-checked (0.2 s)."""
    configure_tiktoken_cache()
    import tiktoken_ext.openai_public as public

    spec = public.ENCODING_CONSTRUCTORS[name]()
    return spec["pat_str"], dict(spec["special_tokens"]), spec["mergeable_ranks"]

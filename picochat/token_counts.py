"""The token counts the app remembers between runs, in a small file beside the database, and
the tokenizer's rank table, kept in the cache folder (`RankTableFiles`, read by `bpe`).

The context's figures add stored message counts to the counts of a few texts every request
carries (the system prompt, the tool schemas, a summary block, the pins block), which only the
encoding can count. Those counts are kept by each text's digest (`tokens.remembered`): read
here when the app starts, written when it quits if it counted something new. So an app opened
on what an earlier run showed has its figures at once and never loads the encoding (0.25 s,
~48 MiB) while it sits idle. The file is a cache: unreadable, damaged or gone, the texts are
counted again.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from picochat import bpe, tokens
from picochat.fsutil import atomic_write_bytes, atomic_write_text, make_private_dir

log = logging.getLogger("picochat.tokens")

FILE_NAME = "token-counts.json"
VERSION = 1
MAX_FILE_BYTES = 1 << 20  # MEMO_SIZE entries take ~25 KB
_KEY = re.compile(r"[0-9a-f]{32}")


def file_in(data_dir: Path) -> Path:
    return data_dir / FILE_NAME


def read(data_dir: Path) -> None:
    """The counts an earlier run saved, remembered for this one (best effort)."""
    path = file_in(data_dir)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != VERSION or data.get("encoding") != tokens.ENCODING:
            return
        counts = {k: n for k, n in data["counts"].items()
                  if isinstance(k, str) and _KEY.fullmatch(k)
                  and type(n) is int and n >= 0}
    except FileNotFoundError:
        return
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("token_counts_unreadable kind=%s", type(exc).__name__)
        return
    tokens.remember(counts)


def write(data_dir: Path) -> None:
    """Save the remembered counts if this run added some (best effort: a cache)."""
    counts = tokens.remembered()
    if counts is None:
        return
    try:
        atomic_write_text(file_in(data_dir), json.dumps(
            {"version": VERSION, "encoding": tokens.ENCODING, "counts": counts}))
    except OSError as exc:
        log.warning("token_counts_not_saved kind=%s", type(exc).__name__)


# --- the tokenizer's rank tables -----------------------------------------------------------------

class RankTableFiles:
    """bpe's rank tables as `<encoding>.ranks` files in the cache folder (folder 0700)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def read(self, name: str) -> bytes | None:
        try:
            return (self.folder / f"{name}.ranks").read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.info("rank_table_unreadable kind=%s", type(exc).__name__)
            return None

    def write(self, name: str, data: bytes) -> None:
        try:
            make_private_dir(self.folder)
            atomic_write_bytes(self.folder / f"{name}.ranks", data)
        except OSError as exc:  # a cache: the next process parses again
            log.info("rank_table_not_saved kind=%s", type(exc).__name__)


def keep_rank_tables(cache_dir: Path | None) -> None:
    """Rank tables read from and saved to `cache_dir` (the front ends' paths.cache_dir)."""
    bpe.keep_tables_in(RankTableFiles(cache_dir) if cache_dir is not None else None)

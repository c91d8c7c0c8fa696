"""Carrying the ledgers of checkpoints written before schema 11 into rows.

Before, picochat wrote a checkpoint's exact-fact ledger into its summary text: the lines under
the first `## Exact Facts` heading of the summary (`- #12: a · b`, `- #15 answer: …`,
`- #31 correction: …` and one drop note), after whatever the model had written there, with the
model's own lookalike lines mostly left out. That first section is the only place picochat
ever wrote them, so it is the only place read here; a lookalike section elsewhere (in a fence,
further down) was the model's and stays prose. The old writer could still be fooled into a
ledger-shaped line there (`- #1:#7: …` lost only its first tag), so a line whose message is not
one the checkpoint folded (seq from 1 to before its first kept message) is no fact, and no
number is taken that SQLite cannot hold. The summary text itself is not changed: checkpoint
rows never are.
"""

from __future__ import annotations

import re
import sqlite3

_HEADING = re.compile(r"^## (.+?)\s*$")
_LINE = re.compile(r"^- #(\d{1,18})(?: (correction|answer|tool))?: (.+)$")
_NOTE = re.compile(r"^- \((\d[\d,]{0,24}) older exact facts?, from messages up to #(\d{1,18}), "
                   r"(?:was|were) dropped to fit; history_search finds them in the raw history\)$")
_SEP = " · "
LEGACY_KIND = "fact"  # a value whose kind was not stored: the ledger tells it again on reading


def legacy_rows(summary: str, first_retained_seq: int
                ) -> tuple[list[tuple[int, str, str, str]], int, int]:
    """(seq, kind, said_by, text) rows, dropped, dropped_up_to of an old summary's ledger."""
    rows: list[tuple[int, str, str, str]] = []
    dropped = up_to = 0
    inside = False
    for line in summary.splitlines():
        if h := _HEADING.match(line):
            if inside:
                break  # the end of the first Exact Facts section
            inside = h.group(1) == "Exact Facts"
            continue
        if not inside:
            continue
        line = line.strip()
        if m := _NOTE.match(line):
            count, last = int(m.group(1).replace(",", "")), int(m.group(2))
            if count < 2 ** 63 and last < first_retained_seq:
                dropped, up_to = count, last
        elif m := _LINE.match(line):
            seq, label, text = int(m.group(1)), m.group(2), m.group(3)
            if not 0 < seq < first_retained_seq:
                continue  # no message this checkpoint folded: not a line picochat wrote
            if label == "correction":
                rows.append((seq, "correction", "user", text))
            else:
                rows.extend((seq, LEGACY_KIND, label or "user", v.strip())
                            for v in text.split(_SEP) if v.strip())
    return rows, dropped, up_to


def carry_ledgers(conn: sqlite3.Connection) -> None:
    """Schema 11's data step: every existing checkpoint gets its ledger rows."""
    for cp_id, summary, first in conn.execute(
            "SELECT id, summary, first_retained_seq FROM context_checkpoints").fetchall():
        rows, dropped, up_to = legacy_rows(summary, first)
        conn.execute("INSERT INTO checkpoint_ledgers (checkpoint_id, dropped, dropped_up_to) "
                     "VALUES (?, ?, ?)", (cp_id, dropped, up_to))
        conn.executemany(
            "INSERT INTO checkpoint_facts (checkpoint_id, ord, seq, kind, said_by, text) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(cp_id, i, *row) for i, row in enumerate(rows)])

"""SQL fragments more than one storage class reads the message log with.

Written once, so what "undone" means (a retraction range of the branch read covering the
row) and what "no upper bound" is cannot drift between the log's reads (`log.py`), the context's
(`context.py`) and search's (`search.py`).
"""

# "No upper bound" for a seq or rowid in a `seq < ?` or `BETWEEN ? AND ?` filter: above any
# seq or rowid a session will reach, yet inside SQLite's signed 64-bit INTEGER (binding 2**63
# or more raises OverflowError), so one query serves a bounded and an unbounded read.
NO_UPPER_BOUND = 2**62

# A timeline row's key (`timeline`: accepted summaries): this, then its checkpoint's id.
CHECKPOINT_KEY = "context_checkpoint:"


def text_literal(value: str) -> str:
    """`value` as an SQL string literal (quotes doubled: SQLite has no other escape), for a
    fragment built once and joined into queries whose parameters it cannot add to."""
    return "'" + value.replace("'", "''") + "'"


def not_retracted(reader: str, branch: int) -> str:
    """A row `m` of `messages` that no undo on `branch` of session `reader` took out of the
    context (it stays in the raw log). Keyed by the reader, not by the row's own session: a
    fork reads its source's rows, and its undo is its own."""
    return ("NOT EXISTS (SELECT 1 FROM retractions r WHERE r.session_id = "
            f"{text_literal(reader)} AND r.branch = {int(branch)} "
            "AND m.seq BETWEEN r.from_seq AND r.to_seq)")

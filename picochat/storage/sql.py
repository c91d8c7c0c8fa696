"""SQL fragments more than one storage class reads the message log with.

Written once, so what "undone" means (a retraction range covering the row) and what "no
upper bound" is cannot drift between the log's reads (`log.py`), the context's
(`context.py`) and search's (`search.py`).
"""

# "No upper bound" for a seq or rowid in a `seq < ?` or `BETWEEN ? AND ?` filter: above any
# seq or rowid a session will reach, yet inside SQLite's signed 64-bit INTEGER (binding 2**63
# or more raises OverflowError), so one query serves a bounded and an unbounded read.
NO_UPPER_BOUND = 2**62

# A row `m` of `messages` that no undo took out of the context (it stays in the raw log).
NOT_RETRACTED = (
    "NOT EXISTS (SELECT 1 FROM retractions r WHERE r.session_id = m.session_id "
    "AND m.seq BETWEEN r.from_seq AND r.to_seq)"
)

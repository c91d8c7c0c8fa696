"""SQL fragments more than one storage class reads the message log with.

Written once, so what "undone" means (a retraction range of the branch read covering the
row) and what "no upper bound" is cannot drift between the log's reads (`log.py`), the context's
(`context.py`) and search's (`search.py`).
"""

# "No upper bound" for a seq or rowid in a `seq < ?` or `BETWEEN ? AND ?` filter: above any
# seq or rowid a session will reach, yet inside SQLite's signed 64-bit INTEGER (binding 2**63
# or more raises OverflowError), so one query serves a bounded and an unbounded read.
NO_UPPER_BOUND = 2**62

# The branch a session reads now (storage/branches.py): its undone turns are its own.
CURRENT_BRANCH = "(SELECT s.branch FROM sessions s WHERE s.id = m.session_id)"


def not_retracted(branch: str | int = CURRENT_BRANCH) -> str:
    """A row `m` of `messages` that no undo on `branch` took out of the context (it stays
    in the raw log); `branch` an int or the SQL of one."""
    return ("NOT EXISTS (SELECT 1 FROM retractions r WHERE r.session_id = m.session_id "
            f"AND r.branch = {branch if isinstance(branch, str) else int(branch)} "
            "AND m.seq BETWEEN r.from_seq AND r.to_seq)")


NOT_RETRACTED = not_retracted()

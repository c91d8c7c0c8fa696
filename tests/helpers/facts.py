"""Issue 19's planted facts: a port, a config path and a ticket id a turn, and which turns' facts
the model no longer received once their turns were folded into a summary."""

from __future__ import annotations

from picochat.ledger import counts
from picochat.projection import restore
from picochat.storage.store import open_store


def planted(n: int) -> str:
    return (f"Service {n} listens on port {8000 + n}; its config is /etc/svc/svc{n}.toml and "
            f"the ticket is OPS-{1000 + n}. Please remember all three.")


def facts_of(n: int) -> tuple[str, str, str]:
    return f"port {8000 + n}", f"/etc/svc/svc{n}.toml", f"OPS-{1000 + n}"


def folded_turns(home):
    """The turns whose messages the context no longer holds raw, the active summary, and its
    ledger's counts."""
    store = open_store(home / "data" / "picochat.db")
    try:
        sid = store.find_session("s").id
        context = restore(store, sid)
        users = [m for m in store.history(sid) if m.role == "user"]
        return ([n for n, m in enumerate(users, 1) if m.seq < (context.first_raw_seq or 0)],
                context.summary or "", counts(context.ledger))
    finally:
        store.close()


KEPT_TURNS = 7  # planted sentences (one ledger line each) the ledger's share holds at 3,000


def missing_turns(folded, received, facts=None):
    """The folded turns with a fact (`facts(n)`, the planted ones by default) that is not in
    what the model received."""
    facts = facts or facts_of
    return [n for n in folded if any(f not in received for f in facts(n))]

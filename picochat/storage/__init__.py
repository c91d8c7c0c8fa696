"""Durable state: one SQLite file, written only through `Store` (sessions, the log and the
context's pointers, one class a job) and its parts (`store.drafts`, `store.search`,
`store.traits`), all built on one transactional core (`store.core`)."""

from picochat.storage.store import Store, open_store

__all__ = ["Store", "open_store"]

"""Durable state: one SQLite file, one API for every write (`Store`)."""

from picochat.storage.store import Store, open_store

__all__ = ["Store", "open_store"]

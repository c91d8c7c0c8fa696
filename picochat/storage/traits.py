"""What a model's server taught picochat by failing (`model_traits`): a window it stated, and
that it refuses tools, remembered across processes.

Its own class because it belongs to no session: it is keyed by model (`model_key`), and the
session layer reads it when it resolves a model, and writes it when a server says no.
"""

from __future__ import annotations

from picochat.messages import ModelTraits
from picochat.storage.core import Core


class Traits:
    """`store.traits`: the `model_traits` table, one row a model on a server."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def get(self, model: str) -> ModelTraits:
        """What is known of `model`; a model never heard of knows nothing (the defaults)."""
        with self.core.read() as c:
            row = c.execute("SELECT learned_window, configured_window, tools_refused FROM "
                            "model_traits WHERE model = ?", (model,)).fetchone()
        if row is None:
            return ModelTraits(model)
        learned, configured, refused = row
        return ModelTraits(model, learned, configured, bool(refused))

    def learn_window(self, model: str, window: int | None, configured: int | None) -> None:
        """Remember the window a server stated (None forgets it)."""
        with self.core.write() as c:
            c.execute("INSERT INTO model_traits (model, learned_window, configured_window, "
                      "updated_at) VALUES (?, ?, ?, ?) ON CONFLICT(model) DO UPDATE SET "
                      "learned_window = excluded.learned_window, configured_window = "
                      "excluded.configured_window, updated_at = excluded.updated_at",
                      (model, window, configured, self.core.clock()))

    def refuse_tools(self, model: str, refused: bool = True) -> None:
        """Remember that the model's server refuses requests that offer tools (or no more)."""
        with self.core.write() as c:
            c.execute("INSERT INTO model_traits (model, tools_refused, updated_at) VALUES "
                      "(?, ?, ?) ON CONFLICT(model) DO UPDATE SET tools_refused = "
                      "excluded.tools_refused, updated_at = excluded.updated_at",
                      (model, int(refused), self.core.clock()))

"""Which model a session talks to, resolved and opened: one way for `ask`, `compact`, `info`,
the app and its `/model`, so the shell and the app never disagree about the model, its window
or whether a setting is wrong.

Below both front ends and below the session worker: it imports no textual, rich or session.
"""

from __future__ import annotations

import logging
from typing import AsyncIterator

from picochat.config import Config
from picochat.messages import Session
from picochat.models import ResolvedModel, choose_model, create_provider, resolve_model, \
    resolve_summary_model
from picochat.providers.base import ModelInfo, Provider, ProviderRequest, StreamEvent

log = logging.getLogger("picochat.models")


def chosen_model(config: Config, session: Session | None, flag: str | None = None,
                 said_as: str = "--model") -> ResolvedModel:
    """The chat model by precedence (`flag`, PICOCHAT_MODEL, the session's own, the config's),
    resolved. `said_as` is where `flag` came from, for the error line ("--model", "/model").
    A bad `[context_compaction] summary_model` fails here too, before anything is written or
    the app switches (the worker resolves it again)."""
    name, origin = choose_model(config, flag, session.model if session else None)
    resolved = resolve_model(config, name, said_as if flag else origin)
    resolve_summary_model(config)
    log.debug("model_chosen model=%s from=%s kind=%s window=%d window_from=%s", resolved.model,
              said_as if flag else origin.rsplit(": ", 1)[-1],  # a key, never the file's path
              resolved.provider_kind, resolved.model_window, resolved.window_source)
    return resolved


def open_model(config: Config, session: Session | None, flag: str | None = None,
               said_as: str = "--model") -> tuple[ResolvedModel, Provider]:
    """`chosen_model` and its provider; a missing key fails here, before anything is written."""
    resolved = chosen_model(config, session, flag, said_as)
    return resolved, create_provider(resolved)


class Unopened(Provider):
    """A model named but not connected: what `picochat info` hands the session worker, whose
    budget reads only the provider's name and kind. No key is needed to see the figures, as
    before; sending through it is a bug."""

    def __init__(self, model: ResolvedModel) -> None:
        self.info = ModelInfo(provider_kind=model.provider_kind, model=model.model,
                              offline=model.offline)

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamEvent]:
        raise RuntimeError("a model that was only measured, never opened, was sent a request")
        yield  # pragma: no cover - makes this an async generator, as Provider.stream is

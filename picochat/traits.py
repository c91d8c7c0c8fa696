"""What a session has learned about its chat model, by failing, in one object.

A server teaches picochat three things the config may not say: a smaller window than the one
configured (stated in an overflow error, remembered per model and server, so the next process
starts with it, and forgotten once the server takes a larger prompt), that it refuses requests
that offer tools (remembered too), and how it counts a prompt (the calibration of the estimate,
kept for this process only). `TraitsLearner` holds the model with what was learned applied,
learns and forgets, keeps the provider's per-request options in step with the window (Ollama's
`num_ctx`), and writes what is remembered through the store's model traits (`store.traits`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

from picochat.budget import Calibration, RequestDraft
from picochat.errors import PicochatError
from picochat.messages import ModelTraits
from picochat.models import ResolvedModel
from picochat.providers.base import Provider, Usage
from picochat.storage.store import Store
from picochat.turn_events import Notice, TurnEvent

log = logging.getLogger("picochat.session")

# A stated window below this is not believed (nor remembered): it would hold no system prompt
# and tools, and a hostile server must not shrink every later session to nothing.
MIN_LEARNED_WINDOW = 512


def remembered(store: Store, model: ResolvedModel) -> ResolvedModel:
    """`model` with what its server taught earlier runs (a smaller window, no tools)."""
    try:
        traits = store.traits.get(model.key)
    except PicochatError as exc:  # an unreadable table only means learning it again
        log.warning("model_traits_unread kind=%s", exc.kind)
        traits = ModelTraits(model.key)
    return model.with_traits(traits)


class TraitsLearner:
    """The chat model of one session as its server taught it (module docstring)."""

    def __init__(self, store: Store, model: ResolvedModel, provider: Provider,
                 session_id: str) -> None:
        self.store = store
        self.provider = provider  # the one whose options follow the model (`model`)
        self.session_id = session_id
        self._remembered = store.traits  # the store's model traits, per model key
        self.calibration: Calibration | None = None  # the last request's reported prompt size
        self.last_usage: Usage | None = None          # what the last answer reported
        self.model = remembered(store, model)

    @property
    def model(self) -> ResolvedModel:
        """The chat model with what its server taught (a learned window, tools refused)."""
        return self._model

    @model.setter
    def model(self, model: ResolvedModel) -> None:
        """The provider's per-request options follow it: an Ollama server's `num_ctx` is
        the window the budget works with, learned or configured, never an older one."""
        self._model = model
        self.provider.set_options(model.provider_options)

    def forget_calibration(self) -> None:
        """The next request differs from the one the provider counted (a window learned,
        tools refused, a pin added or removed): until an answer reports again, the budget is
        the estimate alone."""
        self.calibration = None

    async def learn_window(self, window: int | None) -> bool:
        """A window the provider stated is the truth from now on (only smaller),
        and remembered for this model on this server, so the next process starts with it."""
        self.forget_calibration()
        if not window or window >= self.model.usable_window:
            return False
        if window < MIN_LEARNED_WINDOW:  # no real model; a hostile or broken server
            log.warning("window_not_learned session=%s window=%d", self.session_id, window)
            return False
        model = self.model
        self.model = dataclasses.replace(model, learned_window=window)
        log.info("window_learned session=%s window=%d configured=%d", self.session_id,
                 window, model.model_window)
        await self._remember("window_not_saved", self._remembered.learn_window, model.key,
                             window, model.model_window)
        return True

    async def refuse_tools(self, say: Callable[[TurnEvent], None]) -> None:
        """The server refuses requests that offer tools: off for this model from now on
        (remembered), and `say`s so once."""
        self.model = dataclasses.replace(self.model, tools_refused=True)
        self.forget_calibration()
        log.info("tools_refused session=%s", self.session_id)
        say(Notice("tools_off", (
            f"{self.model.name}'s server refuses requests that offer tools: picochat sends "
            "it none from now on (history_search and the other tools are off for it; to "
            "turn them off for every model, set [tools] enabled = [])")))
        await self._remember("tools_refusal_not_saved", self._remembered.refuse_tools,
                             self.model.key)

    async def learn_from_reply(self, usage: Usage | None, draft: RequestDraft | None) -> None:
        """After an answer: the usage it reported, the learned window checked against it, and
        the calibration of the estimate (`draft`: the request, when it held no tool rounds)."""
        self.last_usage = usage
        await self._forget_outgrown_window(usage)
        if usage is not None and usage.prompt_tokens > 0 and draft is not None:
            info = self.provider.info
            self.calibration = Calibration(draft.key(info.provider_kind, info.model),
                                           usage.prompt_tokens)

    async def _forget_outgrown_window(self, usage: Usage | None) -> None:
        """A server that took a prompt larger than the window it once stated has grown (its
        context was raised): the learned window is forgotten."""
        learned = self.model.learned_window
        if learned is None or usage is None or usage.prompt_tokens <= learned:
            return
        self.model = dataclasses.replace(self.model, learned_window=None)
        log.info("window_forgotten session=%s prompt_tokens=%d learned=%d", self.session_id,
                 usage.prompt_tokens, learned)
        await self._remember("window_not_saved", self._remembered.learn_window,
                             self.model.key, None, None)

    async def _remember(self, failed: str, write: Callable[..., None], *args: Any) -> None:
        """`write` on the store's thread; a failure is logged as `failed`: what was learned
        holds for this process at least."""
        try:
            await self.store.io(write, *args)
        except PicochatError as e:
            log.warning("%s session=%s kind=%s", failed, self.session_id, e.kind)

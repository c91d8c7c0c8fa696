"""What a turn tells its front end while it runs, and the handle a front end holds.

A submitted turn streams typed events in order: `TurnStarted` once its message is saved, then
any of `ThinkingDelta`, `TextDelta`, `CompactionStarted`/`Compacted`, `Notice`,
`RetryWaiting` and `ToolRan`, and last exactly one outcome, `TurnFinished` or `TurnFailed`.
The CLI prints them and the TUI renders them; neither needs to know how the turn ran.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, AsyncIterator, Callable, Union

from picochat.errors import PicochatError
from picochat.messages import TriggerReason
from picochat.providers.base import TextDelta, ThinkingDelta, Usage
from picochat.providers.errors import ProviderError

if TYPE_CHECKING:  # compaction (and the fact ledger under it) loads with the first compaction
    from picochat.compaction.compact import CompactOutcome


class TurnCancelled(PicochatError):
    kind = "cancelled"


@dataclass(frozen=True)
class TurnStarted:
    turn_id: str
    user_seq: int


CUT_AT_LIMIT = ("cut at the output limit: the answer is incomplete; send \"continue\" for "
                "the rest, or ask for a shorter answer")


@dataclass(frozen=True)
class TurnFinished:
    turn_id: str
    reply: str
    usage: Usage | None
    assistant_seq: int
    compactions: tuple[CompactOutcome, ...] = ()
    finish: str | None = None   # the provider's finish reason of the last request

    @property
    def cut(self) -> bool:
        """The model stopped at its output limit: the answer is saved, but incomplete."""
        return self.finish == "length"


@dataclass(frozen=True)
class TurnFailed:
    turn_id: str
    error: PicochatError
    user_seq: int | None        # None only when even the user's message could not be stored
    partial_seq: int | None     # the interrupted partial answer, when some text had arrived
    compactions: tuple[CompactOutcome, ...] = ()

    @property
    def cancelled(self) -> bool:
        return isinstance(self.error, TurnCancelled)

    @property
    def saved(self) -> str:
        """What of the turn is in the database, as both front ends say it."""
        if self.user_seq is None:
            return "nothing was saved"
        return ("your message and the partial answer are saved" if self.partial_seq
                else "your message is saved")


@dataclass(frozen=True)
class CompactionStarted:
    """A turn is compacting first: "auto" (over the threshold) or "overflow" (the request
    does not fit the window: the provider refused it, or the estimate knew before sending)."""

    reason: TriggerReason


@dataclass(frozen=True)
class CompactionReview:
    """The automatic compaction is drafted and shown to the user (`[context_compaction]
    preview`): the turn waits for their answer, then goes on either way."""


@dataclass(frozen=True)
class Compacted:
    """How that compaction ended; the turn goes on either way unless it cannot."""

    outcome: CompactOutcome


@dataclass(frozen=True)
class Notice:
    """Something the user should know that is not a failure: the turn goes on (tools turned
    off for a server that refuses them)."""

    kind: str   # "tools_off"
    text: str


@dataclass(frozen=True)
class RetryWaiting:
    """The provider is rate limiting or overloaded: the turn waits `seconds`, then sends the
    request once more (a stop meanwhile ends the turn as usual)."""

    seconds: float
    error: ProviderError

    @property
    def text(self) -> str:
        return f"{self.error.message}: sending once more in {self.seconds:g} s"


@dataclass(frozen=True)
class ToolRan:
    """A tool call of the turn ran; its result is stored at `seq`."""

    call_id: str
    name: str
    status: str
    seq: int
    detail: str = ""  # what it read or searched (`registry.call_detail`)


TurnEvent = Union[TurnStarted, ThinkingDelta, TextDelta, CompactionStarted, CompactionReview,
                  Compacted, Notice, RetryWaiting, ToolRan, TurnFinished, TurnFailed]
TurnOutcome = Union[TurnFinished, TurnFailed]


class TurnHandle:
    """A submitted turn: iterate it for events, await `result()`, or `cancel()` it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.turn_id = "t_" + uuid.uuid4().hex[:12]
        self._events: asyncio.Queue[TurnEvent] = asyncio.Queue()
        self._result: asyncio.Future[TurnOutcome] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None
        self._cancel_requested = False
        self._withdraw: Callable[[], None] | None = None  # set by the worker that queued it

    def cancel(self) -> None:
        """Stop the turn: at once if streaming; if still queued, it ends now (TurnFailed,
        cancelled, nothing saved) and leaves the queue, so what waits behind it moves up."""
        self._cancel_requested = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
        elif self._task is None and self._withdraw is not None:
            self._withdraw()

    @property
    def started(self) -> bool:
        return self._task is not None

    def _emit(self, event: TurnEvent) -> None:
        self._events.put_nowait(event)
        if isinstance(event, (TurnFinished, TurnFailed)) and not self._result.done():
            self._result.set_result(event)

    async def __aiter__(self) -> AsyncIterator[TurnEvent]:
        while True:
            event = await self._events.get()
            yield event
            if isinstance(event, (TurnFinished, TurnFailed)):
                return

    async def result(self) -> TurnOutcome:
        return await asyncio.shield(self._result)

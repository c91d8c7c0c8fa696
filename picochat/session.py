"""The session worker (design §3.1, §7.4): one asyncio task per open session.

It owns the session's turns and commands and runs them one at a time, in the order they were
submitted, so a `/compact` typed during a turn waits for it instead of racing it. Callers submit
work and await results; a turn also streams typed events (`TurnStarted`, `TextDelta`,
`TurnFinished` | `TurnFailed`) that the CLI prints and the TUI renders.

A turn writes the user's message before the provider is called; a failed or cancelled turn
keeps it, keeps any partial answer (marked interrupted) and says what happened.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar, Union

from picochat.errors import PicochatError
from picochat.messages import INTERRUPTED
from picochat.models import ResolvedModel
from picochat.projection import ContextProjection, restore
from picochat.providers.base import Finish, Provider, ProviderRequest, TextDelta, Usage
from picochat.providers.errors import ProviderError, ProviderTimeout
from picochat.storage.store import Store

log = logging.getLogger("picochat.session")
T = TypeVar("T")

TOTAL_TIMEOUT_S = 600.0


class TurnCancelled(PicochatError):
    kind = "cancelled"


@dataclass(frozen=True)
class TurnStarted:
    turn_id: str
    user_seq: int


@dataclass(frozen=True)
class TurnFinished:
    turn_id: str
    reply: str
    usage: Usage | None
    assistant_seq: int


@dataclass(frozen=True)
class TurnFailed:
    turn_id: str
    error: PicochatError
    user_seq: int | None        # None only when even the user's message could not be stored
    partial_seq: int | None     # the interrupted partial answer, when some text had arrived

    @property
    def cancelled(self) -> bool:
        return isinstance(self.error, TurnCancelled)


TurnEvent = Union[TurnStarted, TextDelta, TurnFinished, TurnFailed]
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

    def cancel(self) -> None:
        """Stop the turn: at once if streaming, before it starts if still queued."""
        self._cancel_requested = True
        if self._task is not None and not self._task.done():
            self._task.cancel()

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


@dataclass
class _Job:
    run: Callable[[], Awaitable[Any]]
    future: asyncio.Future[Any]
    answers_itself: bool = False  # a turn reports its own cancellation to its handle


class SessionWorker:
    def __init__(self, store: Store, session_id: str, model: ResolvedModel, provider: Provider,
                 system_prompt: str, total_timeout: float = TOTAL_TIMEOUT_S) -> None:
        self.store = store
        self.session_id = session_id
        self.model = model
        self.provider = provider
        self.system_prompt = system_prompt
        self.total_timeout = total_timeout
        self.last_usage: Usage | None = None
        self._queue: asyncio.Queue[_Job | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._current: TurnHandle | None = None
        self._closing = False

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> "SessionWorker":
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=f"session-{self.session_id}")
        return self

    async def close(self) -> None:
        """Start nothing new: cancel the running turn (keeping what it has) and every queued
        job, then stop."""
        self._closing = True
        if self._current is not None:
            self._current.cancel()
        if self._task is not None:
            self._queue.put_nowait(None)
            await asyncio.wait([self._task])
            self._task = None
        await self.provider.aclose()

    async def __aenter__(self) -> "SessionWorker":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _loop(self) -> None:
        while True:
            job = await self._queue.get()
            if job is None:
                return
            if job.future.done():  # cancelled while queued
                continue
            if self._closing and not job.answers_itself:
                job.future.cancel()
                continue
            try:
                value = await job.run()
            except BaseException as exc:  # delivered to the caller, never kills the worker
                if not job.future.done():
                    job.future.set_exception(exc)
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
            else:
                if not job.future.done():
                    job.future.set_result(value)

    # --- submitting work -----------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._current is not None

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def submit(self, run: Callable[[], Awaitable[T]],
               _answers_itself: bool = False) -> "asyncio.Future[T]":
        """Queue an async command behind everything already submitted."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Job(run, future, _answers_itself))
        return future

    def call(self, fn: Callable[[], T]) -> "asyncio.Future[T]":
        """Queue a quick synchronous command (clear, undo, …) now, in order with the turns."""
        async def run() -> T:
            return fn()
        return self.submit(run)

    def submit_turn(self, text: str) -> TurnHandle:
        handle = TurnHandle(text)

        async def run() -> TurnOutcome:
            if handle._cancel_requested or self._closing:
                failed = TurnFailed(handle.turn_id, TurnCancelled("cancelled before it started"),
                                    None, None)
                handle._emit(failed)
                return failed
            task = asyncio.create_task(self._turn(handle))
            handle._task = task
            self._current = handle
            try:
                await asyncio.wait([task])
            finally:
                self._current = None
            return await handle.result()

        self.submit(run, _answers_itself=True)
        return handle

    def projection(self) -> ContextProjection:
        return restore(self.store, self.session_id)

    # --- one turn ------------------------------------------------------------------------------

    async def _turn(self, handle: TurnHandle) -> None:
        sid, turn_id = self.session_id, handle.turn_id
        try:
            user = self.store.append_message(sid, "user", handle.text, turn_id=turn_id)
        except PicochatError as exc:
            log.warning("turn_failed session=%s turn=%s kind=%s stage=user_message", sid, turn_id,
                        exc.kind)
            handle._emit(TurnFailed(turn_id, exc, None, None))
            return
        handle._emit(TurnStarted(turn_id, user.seq))
        parts: list[str] = []
        usage: Usage | None = None
        try:
            projection = self.projection()
            if projection.repairs or projection.diagnostics:
                log.warning("projection_repaired session=%s repairs=%d diagnostics=%d", sid,
                            len(projection.repairs), len(projection.diagnostics))
            request = ProviderRequest(
                messages=tuple(projection.provider_messages(self.system_prompt)))
            try:
                async with asyncio.timeout(self.total_timeout):
                    async for event in self.provider.stream(request):
                        if isinstance(event, TextDelta):
                            parts.append(event.text)
                            handle._emit(event)
                        elif isinstance(event, Usage):
                            usage = event
                        elif isinstance(event, Finish):
                            break
            except TimeoutError:
                raise ProviderTimeout(f"no complete answer within {self.total_timeout:g} s",
                                      "retry, or check the provider") from None
            reply = "".join(parts)
            if not reply.strip():
                raise ProviderError("the model returned an empty reply", "try again")
            assistant = self.store.append_message(sid, "assistant", reply, turn_id=turn_id)
        except asyncio.CancelledError:
            self._fail(handle, user.seq, parts, TurnCancelled("stopped"))
            return
        except PicochatError as exc:
            self._fail(handle, user.seq, parts, exc)
            return
        except Exception as exc:  # a bug, not a provider problem: still keep the user's data
            log.error("turn_crashed session=%s turn=%s kind=%s\n%s", sid, turn_id,
                      type(exc).__name__, "".join(traceback.format_tb(exc.__traceback__)))
            self._fail(handle, user.seq, parts,
                       PicochatError(f"internal error ({type(exc).__name__}); see the log"))
            return
        self.last_usage = usage
        log.info("turn_ok session=%s turn=%s user_seq=%d assistant_seq=%d prompt_tokens=%s "
                 "completion_tokens=%s", sid, turn_id, user.seq, assistant.seq,
                 usage.prompt_tokens if usage else None, usage.completion_tokens if usage else None)
        handle._emit(TurnFinished(turn_id, reply, usage, assistant.seq))

    def _fail(self, handle: TurnHandle, user_seq: int, parts: list[str],
              error: PicochatError) -> None:
        partial_seq = None
        text = "".join(parts)
        if text.strip():
            try:
                partial_seq = self.store.append_message(self.session_id, "assistant", text,
                                                        turn_id=handle.turn_id,
                                                        status=INTERRUPTED).seq
            except PicochatError as exc:
                log.warning("partial_not_saved session=%s turn=%s kind=%s", self.session_id,
                            handle.turn_id, exc.kind)
        log.warning("turn_failed session=%s turn=%s kind=%s user_seq=%d partial_seq=%s",
                    self.session_id, handle.turn_id, error.kind, user_seq, partial_seq)
        handle._emit(TurnFailed(handle.turn_id, error, user_seq, partial_seq))

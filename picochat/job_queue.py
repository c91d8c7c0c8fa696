"""A serial job queue: one session's turns and commands run one at a time, in the order they
were submitted, so a `/compact` typed during a turn waits for it instead of racing it."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, TypeVar

T = TypeVar("T")
log = logging.getLogger("picochat.session")


@dataclass(eq=False)  # compared by identity: the queue keeps a set of those not begun
class _Job:
    run: Callable[[], Awaitable[Any]]
    future: asyncio.Future[Any]
    answers_itself: bool  # it reports its own end (a turn, to its handle), even when closing
    on_start: Callable[[], None] | None = None  # told when it begins (after those before it)


class JobQueue:
    """Each job's result or exception goes to its future; a failing job never stops the
    queue. Once closing, jobs still queued are cancelled unless they answer for themselves."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closing = False
        self._queue: asyncio.Queue[_Job | None] = asyncio.Queue()
        self._waiting: set[_Job] = set()  # submitted, not begun, not withdrawn
        self._task: asyncio.Task[None] | None = None
        # told whenever `waiting` changes, so a front end shows the count without polling
        self.on_change: Callable[[], None] | None = None

    def _changed(self) -> None:
        """Tell the listener; its failure (a front end tearing down) is logged, never allowed
        to stop the loop, or every job after it would wait for good."""
        if self.on_change is None:
            return
        try:
            self.on_change()
        except Exception as exc:
            log.warning("job_queue_listener_failed queue=%s kind=%s", self.name,
                        type(exc).__name__)

    @property
    def started(self) -> bool:
        return self._task is not None

    @property
    def waiting(self) -> int:
        """Jobs submitted and not yet begun (a withdrawn one no longer counts)."""
        return len(self._waiting)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=self.name)

    def submit(self, run: Callable[[], Awaitable[T]], answers_itself: bool = False,
               on_start: Callable[[], None] | None = None) -> "asyncio.Future[T]":
        """Queue `run` behind everything already submitted; `on_start` is called when it
        begins, so a caller can say "compacting" then rather than poll."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        job = _Job(run, future, answers_itself, on_start)
        self._waiting.add(job)
        self._queue.put_nowait(job)
        self._changed()
        return future

    def withdraw(self, future: "asyncio.Future[Any]") -> bool:
        """The job of `future` will not run, if it has not begun: its future is cancelled and
        it stops counting as waiting at once (a queued message the user took back). True if
        it was still waiting."""
        job = next((j for j in self._waiting if j.future is future), None)
        if job is None:
            return False
        self._waiting.discard(job)
        future.cancel()
        self._changed()
        return True

    async def close(self) -> None:
        """Begin nothing new that does not answer for itself, and wait for the queue to end."""
        self.closing = True
        if self._task is not None:
            self._queue.put_nowait(None)
            await asyncio.wait([self._task])
            self._task = None

    async def _loop(self) -> None:
        while True:
            job = await self._queue.get()
            if job is None:
                return
            if job in self._waiting:
                self._waiting.discard(job)
                self._changed()
            if job.future.done():  # cancelled while queued
                continue
            if self.closing and not job.answers_itself:
                job.future.cancel()
                continue
            try:
                if job.on_start is not None:
                    job.on_start()
                value = await job.run()
            except BaseException as exc:  # delivered to the caller, never kills the queue
                if not job.future.done():
                    job.future.set_exception(exc)
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # the queue itself is cancelled
                    raise
            else:
                if not job.future.done():
                    job.future.set_result(value)

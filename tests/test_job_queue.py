"""The session's serial job queue: one job at a time, in order, and nothing a job or a listener
does can stop the jobs after it (the queue behind every turn and command)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from picochat.job_queue import JobQueue


async def _ran(queue: JobQueue, log: list[str], name: str, fail: BaseException | None = None):
    async def run() -> str:
        log.append(name)
        if fail is not None:
            raise fail
        return name
    return queue.submit(run)


async def test_jobs_run_one_at_a_time_in_order_and_a_failure_goes_to_its_caller():
    queue, log = JobQueue("t"), []
    queue.start()
    first = await _ran(queue, log, "a")
    broken = await _ran(queue, log, "b", ValueError("boom"))
    last = await _ran(queue, log, "c")
    assert await first == "a" and await last == "c"
    with pytest.raises(ValueError):
        await broken
    assert log == ["a", "b", "c"]
    await queue.close()


class Kept(logging.Handler):
    """The records of one logger, whatever other tests did to its propagation."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def test_a_listener_that_fails_never_stops_the_jobs_after_it():
    logger, kept = logging.getLogger("picochat.session"), Kept()
    logger.addHandler(kept)
    try:
        await _listener_fails()
    finally:
        logger.removeHandler(kept)
    text = "\n".join(kept.lines)
    assert "job_queue_listener_failed" in text and "LookupError" in text
    assert "the bar is gone" not in text  # kinds, never words


async def _listener_fails() -> None:
    queue, log, told = JobQueue("t"), [], []

    def listener() -> None:
        told.append(queue.waiting)
        raise LookupError("the bar is gone")  # a front end tearing down

    queue.on_change = listener
    queue.start()
    jobs = [await _ran(queue, log, name) for name in "xyz"]
    assert await asyncio.wait_for(asyncio.gather(*jobs), 30) == ["x", "y", "z"]
    assert told  # it was told, every time, and the loop went on
    await queue.close()


async def test_a_job_taken_back_before_it_begins_never_runs():
    queue, log = JobQueue("t"), []
    hold = asyncio.Event()

    async def blocker() -> None:
        await hold.wait()
    queue.start()
    began = asyncio.Event()
    running = queue.submit(blocker, on_start=began.set)
    await began.wait()
    waiting = await _ran(queue, log, "never")
    after = await _ran(queue, log, "after")
    assert queue.waiting == 2 and queue.withdraw(waiting) and queue.waiting == 1
    hold.set()
    await running
    assert await after == "after" and waiting.cancelled() and log == ["after"]
    await queue.close()

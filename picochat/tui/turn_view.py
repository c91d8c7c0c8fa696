"""How one turn looks on screen: its events, as a `SessionWorker` streams them, rendered
through ChatView's write path in the order they come (the answer streaming in, thinking,
tools, compactions, waits, the closing line). `Conversation` runs one per turn sent, in the
order sent; this module loads with the first message, not before the first frame.
"""

from __future__ import annotations

from typing import Any, Protocol

from picochat.failures import turn_failure_line
from picochat.providers.base import TextDelta, ThinkingDelta
from picochat.session import (
    CUT_AT_LIMIT,
    Compacted,
    CompactionReview,
    CompactionStarted,
    Notice as TurnNotice,
    RetryWaiting,
    ToolRan,
    TurnFailed,
    TurnFinished,
    TurnHandle,
    TurnStarted,
)
from picochat.tui import status
from picochat.tui.chat import AnswerStream, ChatView, ToolBlock, UserMessage
from picochat.tui.pending import Pending

WAITING = "waiting for the answer"
# a server on this machine or the LAN sends nothing while it reads the prompt (minutes on a CPU)
WAITING_LOCAL = "waiting for the server (prompt evaluation)"
REVIEWING = "review the compaction"  # the bar, while an automatic one waits for the user


class Shows(Protocol):
    """Where a turn is shown (`tui.conversation.Conversation`): its transcript, what runs
    now, the screen around it, and the session's worker."""

    running: TurnHandle | None
    state: str
    around: Any
    worker: Any

    @property
    def chat(self) -> ChatView: ...

    def set_activity(self, activity: str, stoppable: bool = False,
                     retry_in: float | None = None) -> None: ...

    def tell_queue(self) -> None: ...

    async def compacted(self, outcome: Any, announce: bool) -> None: ...


class TurnOnScreen:
    """One turn's events, shown as they come; the pending line is kept last in the
    transcript while nothing of the answer is on screen."""

    def __init__(self, conversation: Shows, user: UserMessage,
                 handle: TurnHandle) -> None:
        self.conversation, self.user, self.handle = conversation, user, handle
        self.chat = conversation.chat
        self.answer: AnswerStream | None = None
        self.line: Pending | None = None

    @property
    def waiting(self) -> str:
        """The pending line while nothing of the answer has come."""
        from picochat.models import is_local

        return WAITING_LOCAL if is_local(self.conversation.worker.model) else WAITING

    async def wait_for(self, doing: str) -> None:
        if self.line is None:
            self.line = Pending(doing)
            await self.chat.add(self.line)
        else:
            self.line.now(doing)

    async def end_wait(self) -> None:
        if self.line is not None:
            await done(self.chat.take(self.line))
            self.line = None

    async def show(self) -> None:
        c, handle = self.conversation, self.handle
        async for event in handle:
            if isinstance(event, (TextDelta, ThinkingDelta, TurnNotice, RetryWaiting, ToolRan,
                                  TurnFinished, TurnFailed)):
                await self.end_wait()  # what comes now goes where the line was
            if isinstance(event, TurnFailed) and _taken_back(event, handle):
                return  # in the prompt now (take_back): no line, and what runs keeps its status
            await self.on_event(event)
        if c.running is handle:
            c.running = None
        c.set_activity("")  # the footer's Esc goes with it
        await c.around.context_changed()

    async def on_event(self, event: Any) -> None:
        c, chat = self.conversation, self.chat
        if isinstance(event, TurnStarted):
            c.running = self.handle  # the footer shows Esc once the activity says so
            c.tell_queue()
            if self.user.has_class("queued"):
                # it waited at the bottom while the turns before it added their answers
                # and notices below it: it goes below them, where its answer will follow
                chat.move_to_end(self.user)
            self.user.started(event.user_seq)
            c.set_activity(status.ANSWERING, stoppable=True)
            await self.wait_for(self.waiting)
        elif isinstance(event, ThinkingDelta):
            if self.answer is None:
                self.answer = await chat.add_assistant()
            await self.answer.add_thinking(event.text)
        elif isinstance(event, TextDelta):
            if self.answer is None:
                self.answer = await chat.add_assistant()
                if c.state == status.WAITING:  # the retry after a busy server
                    c.set_activity(status.ANSWERING, stoppable=True)
            await self.answer.add_text(event.text)
        elif isinstance(event, CompactionStarted):
            c.set_activity(status.COMPACTING, stoppable=True)
            await self.wait_for(f"compacting the context ({event.reason})")
        elif isinstance(event, CompactionReview):
            c.set_activity(REVIEWING)
            await self.wait_for("the compaction waits for you: enter commits it, esc drops it")
        elif isinstance(event, Compacted):
            await c.compacted(event.outcome, announce=True)
            c.set_activity(status.ANSWERING, stoppable=True)
            await self.wait_for(self.waiting)
        elif isinstance(event, TurnNotice):
            await chat.add_notice(event.text, "info")
            await self.wait_for(self.waiting)
        elif isinstance(event, RetryWaiting):
            await chat.add_notice(event.text, "info")
            c.set_activity(status.WAITING, stoppable=True, retry_in=event.seconds)
            await self.wait_for("waiting for the server")
        elif isinstance(event, ToolRan):
            if self.answer is not None:
                await self.answer.finish()
                self.answer = None
            row = await c.worker.message(event.seq)
            await chat.add(ToolBlock(event.name, event.status, row.content if row else "",
                                     event.seq, event.detail))
            await self.wait_for(self.waiting)  # the model reads the results now
        elif isinstance(event, TurnFinished):
            if self.answer is not None:
                await self.answer.finish(event.assistant_seq)
            if event.cut:  # saved, but incomplete: say so under it
                await chat.add_notice(CUT_AT_LIMIT, "warning")
        elif isinstance(event, TurnFailed):
            if self.answer is not None:
                await self.answer.finish(event.partial_seq, interrupted=True)
            if event.user_seq is None and not event.cancelled:
                # not written (a locked or full database): it leaves the transcript, which
                # shows what is stored, and goes back to the prompt, so nothing typed is lost
                await done(chat.take(self.user))
                c.around.back_to_prompt(self.handle.text)
            await chat.add_notice(failure_line(event), "info" if event.cancelled
                                  else "error")


def _taken_back(event: TurnFailed, handle: TurnHandle) -> bool:
    """Cancelled before it began, and nothing of it saved: a queued message taken back (a
    message still queued when the app quits is saved, and says so)."""
    return event.cancelled and event.user_seq is None and not handle.started


def failure_line(event: TurnFailed) -> str:
    if event.cancelled:
        return ("Stopped; the partial answer is saved" if event.partial_seq
                else "Stopped before any answer arrived")
    return turn_failure_line(event, "your message was not saved: it is back in the prompt")


async def done(removal: Any) -> None:
    """Await a widget's removal, if there was one to remove."""
    if removal is not None:
        await removal

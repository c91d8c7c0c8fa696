"""The conversation on screen: the transcript and the turns sent to it, with one owner.

`Conversation` holds the running turn, the messages queued behind it and what runs now (the
activity the bar shows), and renders every event a turn streams (picochat.turn_events)
through ChatView's write path, in the order the turns were sent: the user's message, then
the answer streaming in, thinking, tools, compactions, waits and the closing line. What a
turn looks like is decided here, in one place.

It tells the screen around it what changed through `Around`, four calls made in order as
things happen (the bar's activity, the panel's figures, a message going back to the prompt,
the queue), so the bar never shows a turn as running after it ended; the app calls down into
it (send, stop, take back, reload).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical

from picochat.budget import message_over_window, too_long_error
from picochat.catalog import FirstScreen
from picochat.compaction import report
from picochat.failures import turn_failure_line
from picochat.providers.base import TextDelta, ThinkingDelta
from picochat.session import (
    CUT_AT_LIMIT,
    Compacted,
    CompactionReview,
    CompactionStarted,
    Notice as TurnNotice,
    RetryWaiting,
    SessionWorker,
    ToolRan,
    TurnFailed,
    TurnFinished,
    TurnHandle,
    TurnStarted,
)
from picochat.summary_contract import LONG_LINE_TOKENS
from picochat.tui import status
from picochat.tui.chat import PAGE, AnswerStream, ChatView, ToolBlock, UserMessage
from picochat.tui.pending import Pending
from picochat.tui.safe import literal
from picochat.tui.welcome import Welcome

WAITING = "waiting for the answer"
# a server on this machine or the LAN sends nothing while it reads the prompt (minutes on a CPU)
WAITING_LOCAL = "waiting for the server (prompt evaluation)"
REVIEWING = "review the compaction"  # the bar, while an automatic one waits for the user
NOT_SENT_DATABASE_GONE = ("Not sent: the database file was deleted or replaced; quit and "
                          "start picochat again. It is back in the prompt")


class Around(Protocol):
    """What the conversation tells the screen around it (the app)."""

    def show_activity(self, activity: str, stoppable: bool, retry_in: float | None) -> None:
        """What runs now (status.ANSWERING, COMPACTING, WAITING; "" for nothing), whether
        Esc stops it, and for a wait, in how many seconds the request goes again."""

    async def context_changed(self) -> None:
        """A message was sent, a turn ended or the checkpoint moved: the panel and the
        figures follow."""

    def back_to_prompt(self, text: str) -> None:
        """A message not sent goes back to the prompt, ahead of anything typed since."""

    def queue_changed(self, takeable: int) -> None:
        """How many queued messages have not begun (up in the empty prompt takes the newest
        back)."""


@dataclass(frozen=True)
class Queued:
    """A message sent while another turn runs: on screen, submitted, not begun."""

    user: UserMessage
    handle: TurnHandle


class Conversation(Vertical):
    """The transcript (ChatView) and the turns running in it, for one session's worker."""

    DEFAULT_CSS = "Conversation { width: 1fr; height: 1fr; }"

    def __init__(self, worker: SessionWorker, ready: asyncio.Event, around: Around,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.around = around
        self.worker = worker       # the open session's (the app attaches the next one)
        self._ready = ready        # the transcript is on screen: sends wait for it
        self.state = ""            # what runs now (status.*), "" when nothing does
        self.running: TurnHandle | None = None  # the turn streaming now
        self.queued: list[Queued] = []  # sent during a turn, oldest first
        self.sends_refused = False  # the database went away: nothing more is sent
        self._shown = asyncio.Event()  # the newest turn sent is on screen in full
        self._shown.set()

    def compose(self) -> ComposeResult:
        yield ChatView(id="chat")

    @property
    def chat(self) -> ChatView:
        return self.query_one(ChatView)

    # --- what runs now ---------------------------------------------------------------------------

    def set_activity(self, activity: str, stoppable: bool = False,
                     retry_in: float | None = None) -> None:
        self.state = activity
        self.around.show_activity(activity, stoppable, retry_in)

    def stop(self) -> bool:
        """Esc: stop the running answer (what it has is kept). False when none runs."""
        if self.running is None:
            return False
        self.running.cancel()
        return True

    def turns_shown(self) -> asyncio.Event:
        """Set once every turn sent so far is on screen in full: its widgets carry their
        rows' seqs, so the transcript can tell which turns it shows."""
        return self._shown

    async def reload(self, from_elsewhere: bool = False,
                     first: FirstScreen | None = None) -> None:
        """The transcript from the database, the source of truth: its newest page, older
        pages as the reader scrolls up (`from_elsewhere`: after another picochat wrote; the
        notices just said stay; `first`: what the CLI read before the app started)."""
        chat, worker = self.chat, self.worker
        kept = chat.trailing_notices() if from_elsewhere else []
        if first is not None:
            newest, checkpoint = first.newest, first.checkpoint
        else:
            newest = await worker.history_page(None, PAGE)
            checkpoint = await worker.active_checkpoint()
        await chat.show_history(newest, checkpoint, worker.history_page, from_elsewhere)
        for text, kind in kept:
            await chat.add_notice(text, kind)
        if not newest:  # an empty session: who answers, how to reach a real model, the keys
            room = (await worker.counted_info()).room  # no wait once an earlier run counted
            await chat.add(Welcome(worker.model, worker.limits.window,
                                   room.ledger // LONG_LINE_TOKENS))

    # --- sending ---------------------------------------------------------------------------------

    @work(group="turns", exit_on_error=False)
    async def run_turn(self, text: str) -> None:
        await self.send(text)

    async def send(self, text: str) -> None:
        """Show `text` as sent, submit it, then show its events once the turns before it are
        shown in full, in the order sent."""
        await self._ready.wait()
        chat = self.chat
        if self.sends_refused:  # it would be saved in a file no one will read again
            await chat.add_notice(NOT_SENT_DATABASE_GONE, "error")
            self.around.back_to_prompt(text)
            return
        if await self._too_long(text):
            return
        worker = self.worker
        queued = worker.busy or worker.queued > 0
        handle = worker.submit_turn(text)
        # turns are shown one after another, in the order sent: this one's events wait until
        # the one before it is on screen in full (its last text, its "Stopped" line)
        previous, shown = self._shown, asyncio.Event()
        self._shown = shown
        waiting: Queued | None = None
        try:
            chat.follow()  # sending brings the reader back to the bottom
            user = await chat.add_user(text, queued=queued)
            if queued:
                waiting = Queued(user, handle)
                self.queued.append(waiting)
                self._queue_changed()
            await self.around.context_changed()
            await previous.wait()
            await _TurnOnScreen(self, user, handle).show()
        finally:
            if waiting in self.queued:
                self.queued.remove(waiting)
                self._queue_changed()
            shown.set()  # a message taken back shows nothing: the next turn goes on at once

    async def _too_long(self, text: str) -> bool:
        """A message larger than the model's whole window is refused before it shows as sent
        (the worker refuses it too, for a window that shrank while it was queued): it goes
        back to the prompt."""
        limits = self.worker.limits
        size = await asyncio.to_thread(message_over_window, text, limits)
        if size is None:
            return False
        await self.chat.add_notice(f"Not sent: {too_long_error(size, limits).user_line()}. "
                                   "It is back in the prompt", "error")
        self.around.back_to_prompt(text)
        return True

    def _queue_changed(self) -> None:
        self.around.queue_changed(sum(not q.handle.started for q in self.queued))

    async def take_back(self) -> str | None:
        """The newest queued message that has not begun, to be edited: its turn is cancelled
        (nothing of it is saved or sent), it leaves the transcript, and the turns queued
        before it keep their place. None if every one has begun meanwhile."""
        waiting = [q for q in self.queued if not q.handle.started]
        if not waiting:
            self._queue_changed()
            return None
        newest = waiting[-1]
        self.queued.remove(newest)
        newest.handle.cancel()
        await _done(self.chat.take(newest.user))
        self._queue_changed()
        return newest.handle.text

    # --- compactions -----------------------------------------------------------------------------

    async def context_moved(self) -> None:
        """The checkpoint in force changed (a compaction, /uncompact, /clear, an undo): the
        transcript's divider moves, and the panel and figures follow."""
        await self.chat.set_checkpoint(await self.worker.active_checkpoint())
        await self.around.context_changed()

    async def compacted(self, outcome: Any, announce: bool) -> None:
        """A compaction just learned of: the divider, the panel and the figures follow;
        `announce`: also a notice (a turn's own compaction)."""
        if outcome.compacted:
            await self.context_moved()
            if announce and outcome.degraded:  # no summary: say why, and what to do
                self._say(report.compaction_note(outcome, "/search") or "", severity="warning",
                          title="Context compacted without a summary")
            elif announce:
                cp = outcome.checkpoint
                dropped = report.dropped_note(outcome, "/search")
                line = (f"{outcome.reason} compaction: {cp.tokens_before:,} → "
                        f"{cp.tokens_after:,} tokens")
                self._say(line + (f"; {dropped}" if dropped else ""), title="Context compacted")
        elif announce and outcome.error is not None:
            self._say(report.compaction_note(outcome) or outcome.error.user_line(),
                      severity="warning")
            await self.around.context_changed()  # a refused summary shows in the panel
        elif announce and outcome.deferred:
            self._say(report.compaction_note(outcome) or "", title="Compaction waits")

    def _say(self, text: str, **how: Any) -> None:
        """A notice of plain text: `literal`, which the app shows as it is, never as markup."""
        self.notify(literal(text), **how)  # type: ignore[arg-type]

class _TurnOnScreen:
    """One turn's events, shown as they come; the pending line is kept last in the
    transcript while nothing of the answer is on screen."""

    def __init__(self, conversation: Conversation, user: UserMessage,
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
            await _done(self.chat.take(self.line))
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
            c._queue_changed()
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
                await _done(chat.take(self.user))
                c.around.back_to_prompt(self.handle.text)
            await chat.add_notice(failure_line(event), "info" if event.cancelled
                                  else "error")


async def _done(removal: Any) -> None:
    if removal is not None:
        await removal


def _taken_back(event: TurnFailed, handle: TurnHandle) -> bool:
    """Cancelled before it began, and nothing of it saved: a queued message taken back (a
    message still queued when the app quits is saved, and says so)."""
    return event.cancelled and event.user_seq is None and not handle.started


def as_typed(text: str) -> str:
    """A message as the prompt must hold it to send it again: one starting with "/" was
    typed "//…" (a single slash would run a command)."""
    return "/" + text if text.startswith("/") else text


def failure_line(event: TurnFailed) -> str:
    if event.cancelled:
        return ("Stopped; the partial answer is saved" if event.partial_seq
                else "Stopped before any answer arrived")
    return turn_failure_line(event, "your message was not saved: it is back in the prompt")

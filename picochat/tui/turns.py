"""A turn on screen: the user's message, then the answer streaming in, thinking, tools,
compactions, waits and the closing line, in the order the turns were sent.

The app's `run_turn` calls `send`; every event a turn streams (picochat.turn_events) is shown
here, so what a turn looks like is decided in one place.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from picochat.budget import message_over_window, too_long_error
from picochat.compaction import report
from picochat.failures import turn_failure_line
from picochat.providers.base import TextDelta, ThinkingDelta
from picochat.session import (
    CUT_AT_LIMIT,
    Compacted,
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
from picochat.tui.prompt import Prompt
from picochat.tui.safe import literal

if TYPE_CHECKING:
    from picochat.tui.app import PicochatApp


async def send(app: "PicochatApp", text: str) -> None:
    """Show `text` as sent, submit it, then show its events once the turns before it are
    shown in full, in the order sent."""
    await app.transcript_ready.wait()
    chat = app.query_one(ChatView)
    if app.database_gone:  # it would be saved in a file no one will read again
        await chat.add_notice("Not sent: the database file was deleted or replaced; quit and "
                              "start picochat again. It is back in the prompt", "error")
        back_to_prompt(app, text)
        return
    if await _too_long(app, chat, text):
        return
    queued = app.worker.busy or app.worker.queued > 0
    handle = app.worker.submit_turn(text)
    # turns are shown one after another, in the order sent: this one's events wait until
    # the one before it is on screen in full (its last text, its "Stopped" line)
    previous, shown = app._turn_shown, asyncio.Event()
    app._turn_shown = shown
    waiting: Queued | None = None
    try:
        chat.follow()  # sending brings the reader back to the bottom
        user = await chat.add_user(text, queued=queued)
        if queued:
            waiting = Queued(user, handle)
            app.queued_turns.append(waiting)
            queue_changed(app)
        app.refresh_status()
        await previous.wait()
        await _show(app, chat, user, handle)
    finally:
        if waiting in app.queued_turns:
            app.queued_turns.remove(waiting)
            queue_changed(app)
        shown.set()  # a message taken back shows nothing: the next turn goes on at once


@dataclass(frozen=True)
class Queued:
    """A message sent while another turn runs: on screen, submitted, not begun."""

    user: UserMessage
    handle: TurnHandle


def queue_changed(app: "PicochatApp") -> None:
    """The prompt knows whether up takes a message back (the bar's count is the worker's
    to tell: `on_queue_change`)."""
    app.query_one(Prompt).takeable = sum(not q.handle.started for q in app.queued_turns)


async def take_back(app: "PicochatApp") -> bool:
    """The newest queued message that has not begun goes back to the prompt to be edited:
    its turn is cancelled (nothing of it is saved or sent), it leaves the transcript, and
    the turns queued before it keep their place. False if every one has begun meanwhile."""
    waiting = [q for q in app.queued_turns if not q.handle.started]
    if not waiting:
        queue_changed(app)
        return False
    newest = waiting[-1]
    app.queued_turns.remove(newest)
    newest.handle.cancel()
    if newest.user.parent is not None:
        await newest.user.remove()
    app.query_one(Prompt).take_back(as_typed(newest.handle.text))
    queue_changed(app)
    return True


def as_typed(text: str) -> str:
    """A message as the prompt must hold it to send it again: one starting with "/" was
    typed "//…" (a single slash would run a command)."""
    return "/" + text if text.startswith("/") else text


async def _too_long(app: "PicochatApp", chat: ChatView, text: str) -> bool:
    """A message larger than the model's whole window is refused before it shows as sent (the
    worker refuses it too, for a window that shrank while it was queued): it goes back to the
    prompt."""
    limits = app.worker.limits
    size = await asyncio.to_thread(message_over_window, text, limits)
    if size is None:
        return False
    await chat.add_notice(f"Not sent: {too_long_error(size, limits).user_line()}. It is back "
                          "in the prompt", "error")
    back_to_prompt(app, text)
    return True


class _Waiting:
    """The turn's pending line (tui.pending), kept last in the transcript while nothing of
    the answer is on screen."""

    def __init__(self, chat: ChatView) -> None:
        self.chat = chat
        self.line: Pending | None = None

    async def show(self, doing: str) -> None:
        if self.line is None:
            self.line = Pending(doing)
            await self.chat.add(self.line)
        else:
            self.line.now(doing)

    async def end(self) -> None:
        if self.line is not None:
            await self.line.remove()
            self.line = None


WAITING = "waiting for the answer"


async def _show(app: "PicochatApp", chat: ChatView, user: UserMessage,
                handle: TurnHandle) -> None:
    answer: AnswerStream | None = None
    waiting = _Waiting(chat)
    async for event in handle:
        if isinstance(event, (TextDelta, ThinkingDelta, TurnNotice, RetryWaiting, ToolRan,
                              TurnFinished, TurnFailed)):
            await waiting.end()  # what comes now goes where the line was
        if isinstance(event, TurnStarted):
            app._turn = handle
            app.refresh_bindings()
            queue_changed(app)
            if user.has_class("queued") and user.parent is chat:
                # it waited at the bottom while the turns before it added their answers
                # and notices below it: it goes below them, where its answer will follow
                chat.move_child(user, after=chat.children[-1])
            user.started(event.user_seq)
            app.set_activity(status.ANSWERING, stoppable=True)
            await waiting.show(WAITING)
        elif isinstance(event, ThinkingDelta):
            if answer is None:
                answer = await chat.add_assistant()
            await answer.add_thinking(event.text)
        elif isinstance(event, TextDelta):
            if answer is None:
                answer = await chat.add_assistant()
                if app.state == status.WAITING:  # the retry after a busy server
                    app.set_activity(status.ANSWERING, stoppable=True)
            await answer.add_text(event.text)
        elif isinstance(event, CompactionStarted):
            app.set_activity(status.COMPACTING, stoppable=True)
            await waiting.show(f"compacting the context ({event.reason})")
        elif isinstance(event, Compacted):
            await compacted(app, event.outcome, announce=True)
            app.set_activity(status.ANSWERING, stoppable=True)
            await waiting.show(WAITING)
        elif isinstance(event, TurnNotice):
            await chat.add_notice(event.text, "info")
            await waiting.show(WAITING)
        elif isinstance(event, RetryWaiting):
            await chat.add_notice(event.text, "info")
            app.set_activity(status.WAITING, stoppable=True, retry_in=event.seconds)
            await waiting.show("waiting for the server")
        elif isinstance(event, ToolRan):
            if answer is not None:
                await answer.finish()
                answer = None
            row = app.store.message(app.session.id, event.seq)
            await chat.add(ToolBlock(event.name, event.status,
                                     row.content if row else "", event.seq, event.detail))
            await waiting.show(WAITING)  # the model reads the results now
        elif isinstance(event, TurnFinished):
            if answer is not None:
                await answer.finish(event.assistant_seq)
            if event.cut:  # saved, but incomplete: say so under it
                await chat.add_notice(CUT_AT_LIMIT, "warning")
        elif isinstance(event, TurnFailed) and _taken_back(event, handle):
            return  # in the prompt now (take_back): no line, and what runs keeps its status
        elif isinstance(event, TurnFailed):
            if answer is not None:
                await answer.finish(event.partial_seq, interrupted=True)
            if event.user_seq is None and not event.cancelled:
                await _unsaved(app, chat, user, handle.text)
            await chat.add_notice(failure_line(event), "info" if event.cancelled
                                  else "error")
    if app._turn is handle:
        app._turn = None
        app.refresh_bindings()
    app.set_activity("")
    await app.refresh_panel()


def _taken_back(event: TurnFailed, handle: TurnHandle) -> bool:
    """Cancelled before it began, and nothing of it saved: a queued message taken back (a
    message still queued when the app quits is saved, and says so)."""
    return event.cancelled and event.user_seq is None and not handle.started


async def _unsaved(app: "PicochatApp", chat: ChatView, user: UserMessage, text: str) -> None:
    """The message could not be written (a locked or full database): it leaves the
    transcript, which shows what is stored, and goes back to the prompt, ahead of
    anything typed since, so nothing typed is lost."""
    if user.parent is chat:
        await user.remove()
    back_to_prompt(app, text)


def back_to_prompt(app: "PicochatApp", text: str) -> None:
    """A message not sent goes back to the prompt as it was typed, ahead of anything typed
    since, so nothing is lost and Enter sends it again (never as a command)."""
    app.query_one(Prompt).put_ahead(as_typed(text))


async def compacted(app: "PicochatApp", outcome: Any, announce: bool) -> None:
    """A compaction the app just learned of: the transcript's divider, the panel and the
    figures follow; `announce`: also a notice (a turn's own compaction)."""
    if outcome.compacted:
        await app.checkpoint_moved()
        if announce and outcome.degraded:  # no summary: say why, and what to do
            app.notify(literal(report.compaction_note(outcome, "/search") or ""),
                       severity="warning", title="Context compacted without a summary")
        elif announce:
            cp = outcome.checkpoint
            dropped = report.dropped_note(outcome, "/search")
            line = f"{outcome.reason} compaction: {cp.tokens_before:,} → {cp.tokens_after:,} tokens"
            app.notify(literal(line + (f"; {dropped}" if dropped else "")),
                       title="Context compacted")
    elif announce and outcome.error is not None:
        app.notify(literal(report.compaction_note(outcome) or outcome.error.user_line()),
                    severity="warning")
    elif announce and outcome.deferred:
        app.notify(literal(report.compaction_note(outcome) or ""), title="Compaction waits")


def failure_line(event: TurnFailed) -> str:
    if event.cancelled:
        return ("Stopped; the partial answer is saved" if event.partial_seq
                else "Stopped before any answer arrived")
    return turn_failure_line(event, "your message was not saved: it is back in the prompt")

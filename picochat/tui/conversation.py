"""The conversation on screen: the transcript and the turns sent to it, with one owner.

`Conversation` holds the running turn, the messages queued behind it and what runs now (the
activity the bar shows), and shows the turns in the order they were sent: the user's message,
then its events (picochat.turn_events) through `tui.turn_view.TurnOnScreen`, where what a turn
looks like is decided, in one place (loaded with the first message, not for the first frame).

It tells the screen around it what changed through `Around`, four calls made in order as
things happen (the bar's activity, the panel's figures, a message going back to the prompt,
the queue), so the bar never shows a turn as running after it ended; the app calls down into
it (send, stop, take back, reload).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical

from picochat.tui.chat import PAGE, ChatView, UserMessage
from picochat.tui.safe import literal
from picochat.tui.welcome import Welcome

if TYPE_CHECKING:  # the engine: the app opens it after the first frame
    from picochat.first_screen import FirstLook, FirstScreen
    from picochat.messages import Message
    from picochat.session import SessionWorker, TurnHandle

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

    worker: SessionWorker  # the open session's: the app attaches it, and the next one

    def __init__(self, ready: asyncio.Event, around: Around, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.around = around
        self._ready = ready        # the transcript is on screen: sends wait for it
        self.state = ""            # what runs now (status.*), "" when nothing does
        self.running: TurnHandle | None = None  # the turn streaming now
        self.queued: list[Queued] = []  # sent during a turn, oldest first
        self.sends_refused = False  # the database went away: nothing more is sent
        self.waiting_to_send: list[str] = []  # sent before the session was open and shown
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
            from picochat.summary_contract import LONG_LINE_TOKENS

            room = (await worker.counted_info()).room  # no wait once an earlier run counted
            await chat.add(Welcome(worker.model, worker.limits.window,
                                   room.ledger // LONG_LINE_TOKENS))

    async def show_first(self, first: FirstLook) -> None:
        """What was read of the session before its worker exists (`first_screen`): older
        pages, read as the reader scrolls up, wait for the worker."""
        await self.chat.show_history(first.newest, first.checkpoint, self._older_once_open)

    async def _older_once_open(self, before_seq: int, n: int) -> list[Message]:
        await self._ready.wait()
        return await self.worker.history_page(before_seq, n)

    # --- sending ---------------------------------------------------------------------------------

    @work(group="turns", exit_on_error=False)
    async def run_turn(self, text: str) -> None:
        await self.send(text)

    async def send(self, text: str) -> None:
        """Show `text` as sent, submit it, then show its events once the turns before it are
        shown in full, in the order sent."""
        if not self._ready.is_set():  # sent while the session opens: listed until it has,
            self.waiting_to_send.append(text)  # so a quit or a failed open keeps the words
            await self._ready.wait()
            self.waiting_to_send.remove(text)
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
                self.tell_queue()
            await self.around.context_changed()
            await previous.wait()
            from picochat.tui.turn_view import TurnOnScreen  # loaded as a message is coming

            await TurnOnScreen(self, user, handle).show()
        finally:
            if waiting in self.queued:
                self.queued.remove(waiting)
                self.tell_queue()
            shown.set()  # a message taken back shows nothing: the next turn goes on at once

    async def _too_long(self, text: str) -> bool:
        """A message larger than the model's whole window is refused before it shows as sent
        (the worker refuses it too, for a window that shrank while it was queued): it goes
        back to the prompt."""
        limits = self.worker.limits
        from picochat.budget import message_over_window, too_long_error

        size = await asyncio.to_thread(message_over_window, text, limits)
        if size is None:
            return False
        await self.chat.add_notice(f"Not sent: {too_long_error(size, limits).user_line()}. "
                                   "It is back in the prompt", "error")
        self.around.back_to_prompt(text)
        return True

    def tell_queue(self) -> None:
        self.around.queue_changed(sum(not q.handle.started for q in self.queued))

    async def take_back(self) -> str | None:
        """The newest queued message that has not begun, to be edited: its turn is cancelled
        (nothing of it is saved or sent), it leaves the transcript, and the turns queued
        before it keep their place. None if every one has begun meanwhile."""
        waiting = [q for q in self.queued if not q.handle.started]
        if not waiting:
            self.tell_queue()
            return None
        newest = waiting[-1]
        self.queued.remove(newest)
        newest.handle.cancel()
        from picochat.tui.turn_view import done

        await done(self.chat.take(newest.user))
        self.tell_queue()
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
        from picochat.compaction import report

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

def as_typed(text: str) -> str:
    """A message as the prompt must hold it to send it again: one starting with "/" was
    typed "//…" (a single slash would run a command)."""
    return "/" + text if text.startswith("/") else text

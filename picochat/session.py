"""The session worker: one per open session, running its turns and commands one at a time.

It owns the session's turns and commands and runs them in the order they were submitted
(`JobQueue`), so a `/compact` typed during a turn waits for it instead of racing it. Callers
submit work and await results; a turn (`TurnRun`, in picochat.turn) streams typed events
(picochat.turn_events) that the CLI prints and the TUI renders. `/compact`, `/uncompact`,
`/clear` and undo are queued like turns, so none of them races a running turn.

What the session's model taught it by failing (a smaller window its server stated, that the
server refuses tools, how the provider counts the prompt) is kept by its `TraitsLearner`
(picochat.traits), which a running turn teaches.

Every write goes through `Store.io`, on the store's own thread: a write waiting for another
process's lock never freezes the event loop (the app's keys and screen) meanwhile.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence, TypeVar

from picochat import bpe, tokens
from picochat.budget import (
    BudgetLimits,
    Calibration,
    ContextBudget,
    RequestDraft,
    measure,
    pin_cap,
    pins_cost,
)
from picochat.compaction.report import numbers
from picochat.config import CompactionConfig, Config
from picochat.errors import PicochatError, PinRefused
from picochat.job_queue import JobQueue
from picochat.messages import (Checkpoint, Message, NewMessage, Pin, PreparedMessage,
                               Session, TriggerReason)
from picochat.models import (
    SUMMARY_MODEL_KEY,
    ResolvedModel,
    create_provider,
    limits_for,
    resolve_summary_model,
)
from picochat.pins import pin_problem
from picochat.projection import ContextProjection, project, restore
from picochat.providers.base import Provider, TextDelta, ThinkingDelta
from picochat.storage.branches import Branch, Rewound, no_branch
from picochat.storage.search import SearchHit
from picochat.storage.store import Forked, Store, UncompactResult, UndoResult, last_turn_seqs
from picochat.tools.access import FileAccess, file_access
from picochat.tools.registry import schemas
from picochat.traits import MIN_LEARNED_WINDOW, TraitsLearner, remembered
from picochat.unsent import Unsent, forget, kept_answers
from picochat.turn_events import (
    CUT_AT_LIMIT,
    Compacted,
    CompactionReview,
    CompactionStarted,
    Notice,
    RetryWaiting,
    ToolRan,
    TurnCancelled,
    TurnEvent,
    TurnFailed,
    TurnFinished,
    TurnHandle,
    TurnOutcome,
    TurnStarted,
)

if TYPE_CHECKING:
    # Imported where used: a turn, a compaction and the /info card load their modules (the
    # fact ledger's regular expressions among them) when first needed, not before the app's
    # first frame.
    from picochat.compaction.compact import CompactMode, CompactOutcome, CompactRequest
    from picochat.compaction.compactor import SummaryModel
    from picochat.compaction.preview import CompactionPreview
    from picochat.turn import Reviewer
    from picochat.context_usage import ContextPanel, ContextUsage, RefusedSummary

# What a front end drives a session with: the worker, and the events its turns stream. (The
# front ends also read the store, the budget and compaction's report directly: issue 32's thin
# App is to narrow that.)
__all__ = [
    "SessionWorker", "TurnHandle", "TurnEvent", "TurnOutcome", "TurnStarted", "ThinkingDelta",
    "TextDelta", "CompactionStarted", "CompactionReview", "Compacted", "Notice", "RetryWaiting",
    "ToolRan", "TurnFinished", "TurnFailed", "TurnCancelled", "CUT_AT_LIMIT", "remembered",
    "summary_model_advice", "note_opened", "TOTAL_TIMEOUT_S", "MIN_LEARNED_WINDOW", "LastTurn",
    "ready_for_turns", "Branch", "Rewound", "read_branches", "Forked", "fork_said",
]
log = logging.getLogger("picochat.session")
T = TypeVar("T")

TOTAL_TIMEOUT_S = 600.0


def note_opened(store: Store, session_id: str) -> None:
    """Record that the app shows `session_id`, so the next start reopens it. Best effort: a
    read-only or locked database keeps the session on screen, and only the next start's
    choice falls back to an earlier one."""
    try:
        store.mark_opened(session_id)
    except PicochatError as exc:
        log.warning("opened_not_recorded session=%s kind=%s", session_id, exc.kind)


@dataclasses.dataclass(frozen=True)
class SessionRecord:
    """All that is stored of one session, read together: what `export` writes out."""

    session: Session
    messages: list[Message]
    checkpoints: list[Checkpoint]
    pins: tuple[Pin, ...]


def read_record(store: Store, session_id: str, branch: int | None = None) -> SessionRecord:
    """The branch in use, or `branch` (the session then as that branch would show it: its
    summary in use and its floor)."""
    session = store.session(session_id)
    if branch is None or branch == session.branch:
        return _branch_record(store, session, None)
    mine = next((b for b in store.branches(session_id) if b.id == branch), None)
    if mine is None:
        raise no_branch(session.name, branch)
    return _branch_record(store, session, mine)


def fork_said(done: Forked) -> str:
    """What a fork made, in the words `/fork` and `picochat fork` both say it with."""
    source, name = done.source.name, done.session.name
    carried = [f"its summary with {done.facts:,} ledger fact{'s' if done.facts != 1 else ''}"
               if done.checkpoint else "no summary",
               f"{done.pins:,} pin{'s' if done.pins != 1 else ''}" if done.pins else "no pins"]
    return (f"Forked {source} after message {done.at} into {name}: it starts with the "
            f"context {source} had there ({', '.join(carried)}), and {source} stays as it was")


def read_branches(store: Store, session_id: str) -> list[tuple[Branch, SessionRecord]]:
    """Every branch of the session with its record, oldest branch first (`--all-branches`)."""
    session = store.session(session_id)
    return [(b, _branch_record(store, session, b)) for b in store.branches(session_id)]


def _branch_record(store: Store, session: Session, branch: Branch | None) -> SessionRecord:
    """`session` as `branch` shows it (None: the branch in use, as stored)."""
    if branch is not None and branch.id != session.branch:
        session = dataclasses.replace(session, branch=branch.id, context_floor_seq=branch.floor,
                                      active_context_checkpoint_id=branch.checkpoint)
    return SessionRecord(session, store.history(session.id, session.branch),
                         store.checkpoints(session.id, session.branch), store.pins(session.id))


@dataclasses.dataclass(frozen=True)
class LastTurn:
    """The turn an undo would take back now: its rows, and its question (its first message of
    the user's; None for a turn without one), so a front end can name it, ask before taking
    back one it never showed, and send the question again (/retry)."""

    seqs: tuple[int, ...]
    question: str | None


def turn_to_undo(context: Sequence[Message]) -> LastTurn | None:
    """The newest turn of `context` (rows since the last /clear that are not undone, oldest
    first), chosen as `Store.undo_last_turn` chooses it."""
    seqs = set(last_turn_seqs((m.seq, m.role, m.turn_id) for m in reversed(context)))
    if not seqs:
        return None
    question = next((m.content for m in context if m.seq in seqs and m.role == "user"), None)
    return LastTurn(tuple(sorted(seqs)), question)


def prepare(new: NewMessage) -> PreparedMessage:
    """prepare.prepare, imported with the first message to prepare: its statements' regular
    expressions are not for a start that recovers no draft."""
    from picochat import prepare as preparing

    return preparing.prepare(new)


def ready_for_turns(message_chars: int = 0) -> None:
    """Load ahead what a turn runs on (for a thread, once a message is coming): the modules of
    a turn and of a compaction, whose imports compile the statements' and the fact ledger's
    regular expressions (~50 ms), and what the message is counted with: for a short one the
    rank table (10 ms, 5 MiB), for a long one the whole encoding (0.35 s, ~50 MiB)."""
    import picochat.compaction.compact  # noqa: F401
    import picochat.prepare  # noqa: F401
    import picochat.turn  # noqa: F401

    tokens.load_table()
    if message_chars > bpe.SHORT_TEXT_CHARS:
        tokens.load()


def not_started(handle: TurnHandle) -> TurnFailed:
    """A turn cancelled before it began ends so: nothing saved, nothing sent."""
    failed = TurnFailed(handle.turn_id, TurnCancelled("cancelled before it started"), None, None)
    handle._emit(failed)
    return failed


def summary_model_advice(times: int, chat_offline: bool) -> str:
    """What to do when the chat model's summaries fail the checks: summarize with another."""
    failed = ("the chat model's summary failed the quality check" if times == 1 else
              f"the chat model's summaries failed the quality check {times} times in a row")
    example = "a [models] key" if chat_offline else '"offline" or a stronger model'
    return f"{failed}: set {SUMMARY_MODEL_KEY} (e.g. {example}) to summarize with another model"


class SessionWorker:
    def __init__(self, store: Store, session_id: str, model: ResolvedModel, provider: Provider,
                 system_prompt: str, total_timeout: float = TOTAL_TIMEOUT_S,
                 compaction: CompactionConfig = CompactionConfig(),
                 tools: tuple[dict[str, Any], ...] = (), tool_root: Path | None = None,
                 file_access: FileAccess | None = None,
                 summary_model: ResolvedModel | None = None,
                 summary_provider: Provider | None = None) -> None:
        self.store = store
        self.session_id = session_id
        # the model with what its server taught, this run and earlier ones
        self.traits = TraitsLearner(store, model, provider, session_id)
        # None: the chat model writes the summaries
        self.summary_model = summary_model and remembered(store, summary_model)
        self._summary_provider = summary_provider  # opened on the first summary, closed with us
        self.rejected_in_a_row = 0  # summaries rejected since the last real checkpoint
        self.refused: RefusedSummary | None = None  # the last of them, for the panel
        # the app's, when `[context_compaction] preview` is on: shows an automatic
        # compaction's preview and returns the one to commit, or None to drop it
        self.reviewer: "Reviewer | None" = None
        self.system_prompt = system_prompt
        self.total_timeout = total_timeout
        self.compaction = compaction
        self.tool_root = tool_root or Path.cwd()
        # where read_file may read; off (and not offered) when started in ~ or / unconfigured
        self._file_access = file_access
        self.reads_files = any(t["function"]["name"] == "read_file" for t in tools)
        self.tools_off = False  # `/tools off`: none offered, this session, this run
        self.tools = tools if self.file_access.on else tuple(  # OpenAI-format schemas
            t for t in tools if t["function"]["name"] != "read_file")
        self._jobs = JobQueue(f"session-{session_id}")
        self._current: TurnHandle | None = None
        self.unsaved: list[Unsent] = []  # sent while closing, and not saved
        self.recovered: tuple[Message, ...] = ()  # drafts of killed processes `start()` saved

    @property
    def model(self) -> ResolvedModel:
        """The chat model with what its server taught (a learned window, tools refused)."""
        return self.traits.model

    @property
    def provider(self) -> Provider:
        """The chat model's provider (its options follow the model: `TraitsLearner`)."""
        return self.traits.provider

    @provider.setter
    def provider(self, provider: Provider) -> None:
        self.traits.provider = provider

    @property
    def calibration(self) -> Calibration | None:
        """The last request's reported prompt size, while it still describes the next."""
        return self.traits.calibration

    @calibration.setter
    def calibration(self, calibration: Calibration | None) -> None:
        self.traits.calibration = calibration

    @property
    def file_access(self) -> FileAccess:
        """The roots and refusals of read_file: the config's, else `tool_root` alone."""
        return self._file_access or FileAccess((self.tool_root,))

    @classmethod
    def from_config(cls, store: Store, session_id: str, model: ResolvedModel,
                    provider: Provider, config: Config,
                    session: Session | None = None) -> "SessionWorker":
        """The worker the CLI and the app both run: the session's own system prompt (else the
        agent's), the model's timeout, the compaction settings (summary model included) and
        the enabled tools. `session`: the row just read, so the app's loop reads nothing."""
        own = (session or store.session(session_id)).system_prompt
        return cls(store, session_id, model, provider,
                   config.agent.system_prompt if own is None else own,
                   total_timeout=model.timeout or TOTAL_TIMEOUT_S,
                   compaction=config.context_compaction, tools=schemas(config.tools.enabled),
                   file_access=file_access(
                       Path.cwd(), config.tools.roots,
                       (store.path.parent,) + ((config.source,) if config.source else ())),
                   summary_model=resolve_summary_model(config))

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> "SessionWorker":
        if not self._jobs.started:
            await self._recover_drafts()
            self._jobs.start()
        return self

    async def _recover_drafts(self) -> None:
        """Answers a killed process was streaming become interrupted answers (any session),
        as do those a quitting one kept in the unsent file beside the database."""
        try:
            answers = await self.store.io(self._recover_answers)
        except PicochatError as exc:  # a read-only or locked database: the drafts wait
            log.warning("drafts_not_recovered kind=%s", exc.kind)
            return
        for m in answers:
            log.info("draft_recovered session=%s turn=%s seq=%d chars=%d", m.session_id,
                     m.turn_id, m.seq, len(m.content))
        self.recovered = tuple(answers)

    def _recover_answers(self) -> list[Message]:
        """On the store's thread: kept answers first (each is newer than its turn's draft),
        then the drafts. A kept answer leaves the file once written, not before."""
        folder = self.store.path.parent
        answers: list[Message] = []
        for answer in kept_answers(folder):
            answers += self.store.drafts.recover_answer(answer.session_id, answer.turn_id,
                                                        answer.text, prepare)
            forget(folder, [answer])
        return answers + self.store.drafts.recover(prepare)

    def recovered_notes(self) -> list[str]:
        """What `start()` recovered, in a line each for the user: an answer a killed picochat
        was streaming is back, marked interrupted."""
        def where(m: Message) -> str:
            return "" if m.session_id == self.session_id else " of another session"
        def late(m: Message) -> str:  # out of place: in the history, not in the context
            return ("; kept out of the context: a newer turn or a /clear came after its "
                    "question" if m.retracted else "")
        return [f"an answer cut off when picochat stopped is saved as interrupted "
                f"(message #{m.seq}{where(m)}){late(m)}" for m in self.recovered]

    async def opened(self) -> None:
        """The app now shows this worker's session (started in it, or switched to it): the
        next start reopens it (`note_opened`, on the store's thread)."""
        await self.store.io(note_opened, self.store, self.session_id)

    async def close(self, within_s: float | None = None) -> tuple[Unsent, ...]:
        """Start nothing new: cancel the running turn (keeping what it has) and every queued
        job, then stop. `within_s`: a write waits that long at most for another process's lock
        (a quitting app). Returns the messages sent but not saved: the caller keeps them."""
        self._jobs.closing = True
        if within_s is not None:
            self.store.core.stop_waiting(within_s)
        if self._current is not None:
            self._current.cancel()
        await self._jobs.close()
        await self.provider.aclose()
        if self._summary_provider is not None:
            await self._summary_provider.aclose()
        return tuple(self.unsaved)

    @property
    def closing(self) -> bool:
        return self._jobs.closing

    def not_saved(self, handle: TurnHandle) -> None:
        """A message sent while closing whose row could not be written: returned by `close`."""
        self.unsaved.append(Unsent(self.session_id, handle.turn_id, handle.text))

    def answer_not_saved(self, turn_id: str, text: str) -> None:
        """The answer streamed so far by a turn stopped while closing, which could not be
        written: returned by `close`, saved as interrupted by the next start."""
        self.unsaved.append(Unsent(self.session_id, turn_id, text, role="assistant"))

    async def __aenter__(self) -> "SessionWorker":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # --- submitting work -----------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._current is not None

    @property
    def queued(self) -> int:
        return self._jobs.waiting

    def on_queue_change(self, callback: Callable[[], None] | None) -> None:
        """`callback` is told whenever `queued` changes (the app's bar shows the count)."""
        self._jobs.on_change = callback

    def submit(self, run: Callable[[], Awaitable[T]],
               on_start: Callable[[], None] | None = None) -> "asyncio.Future[T]":
        """Queue an async command behind everything already submitted (`on_start`: called
        when it begins)."""
        return self._jobs.submit(run, on_start=on_start)

    def call(self, fn: Callable[[], T]) -> "asyncio.Future[T]":
        """Queue a quick synchronous command (clear, undo, …) now, in order with the turns;
        it runs on the store's thread."""
        async def run() -> T:
            return await self.store.io(fn)
        return self.submit(run)

    def submit_turn(self, text: str) -> TurnHandle:
        from picochat.turn import TurnRun, internal_error

        handle = TurnHandle(text)

        async def run() -> TurnOutcome:
            if handle._cancel_requested:
                return not_started(handle)
            if self._jobs.closing:
                return await self._keep_unsent(handle)
            task = asyncio.create_task(TurnRun(self, handle).run())
            handle._task = task
            self._current = handle
            try:
                await asyncio.wait([task])
            finally:
                self._current = None
            if not handle._result.done():  # a bug ended the turn without an outcome: never hang
                error = (TurnCancelled("stopped") if task.cancelled() else
                         internal_error(task.exception() or RuntimeError("no outcome"),
                                        self.session_id, handle.turn_id))
                handle._emit(TurnFailed(handle.turn_id, error, None, None))
            return await handle.result()

        queued = self._jobs.submit(run, answers_itself=True)

        def withdraw() -> None:  # cancelled before it began: it ends now, not when reached
            if self._jobs.withdraw(queued):
                log.info("turn_withdrawn session=%s turn=%s", self.session_id, handle.turn_id)
                not_started(handle)
        handle._withdraw = withdraw
        return handle

    async def _keep_unsent(self, handle: TurnHandle) -> TurnFailed:
        """The app is quitting with this message still queued: it is saved, as a turn stopped
        before any answer is (the user typed it and pressed Enter), and not sent."""
        from picochat.turn import append_new, settle

        user_seq = None
        try:
            user_seq = (await settle(self.store, append_new, self.store, self.session_id,
                                     NewMessage("user", handle.text, turn_id=handle.turn_id))
                        )[0][0].seq
        except Exception as exc:  # noqa: BLE001 - closing: report, never raise
            log.warning("turn_failed session=%s turn=%s kind=%s stage=unsent_message",
                        self.session_id, handle.turn_id, type(exc).__name__)
            self.not_saved(handle)
        log.info("turn_unsent session=%s turn=%s seq=%s", self.session_id, handle.turn_id,
                 user_seq)
        failed = TurnFailed(handle.turn_id, TurnCancelled("stopped before it was sent"),
                            user_seq, None)
        handle._emit(failed)
        return failed

    def projection(self) -> ContextProjection:
        return restore(self.store, self.session_id)

    # --- the context: budget, /info, compaction, clear, undo -----------------------------------

    @property
    def limits(self) -> BudgetLimits:
        return limits_for(self.model, self.compaction)

    @property
    def offered_tools(self) -> tuple[dict[str, Any], ...]:
        """The tools a request offers: none to a server that refuses them, nor after
        `/tools off`."""
        return () if self.model.tools_refused or self.tools_off else self.tools

    def tools_line(self) -> str:
        """What `/context` says of the tool schemas, and `/tools` of the tools."""
        names = ", ".join(t["function"]["name"] for t in self.tools) or "none"
        if not self.tools:
            return "none enabled ([tools] enabled in the config)"
        if self.model.tools_refused:
            return f"off: this model's server refuses requests that offer tools ({names})"
        if self.tools_off:
            return f"off for this session ({names}); /tools on offers them again"
        return (f"{names}: in every request, whether or not the server uses them; /tools off "
                "drops them for this session")

    def set_tools(self, on: bool) -> "asyncio.Future[int]":
        """`/tools on|off`, queued so a running turn keeps the request it started with; the
        tokens the schemas take in every request."""
        def run() -> int:
            self.tools_off = not on
            log.info("tools_offered session=%s on=%s", self.session_id, on)
            return tokens.scale(tokens.count_tools(self.tools), self.limits.token_factor)
        return self.call(run)

    def request_draft(self, projection: ContextProjection) -> RequestDraft:
        """What the next request would hold: system prompt, this context, the offered tools."""
        return RequestDraft(self.system_prompt, projection, self.offered_tools)

    def budget(self, projection: ContextProjection | None = None) -> ContextBudget:
        """The budget of the next request: the value auto compaction and /info both use."""
        return self.measure(self.request_draft(projection or self.projection()))

    def measure(self, draft: RequestDraft) -> ContextBudget:
        info = self.provider.info
        return measure(self.limits, draft, info.provider_kind, info.model, self.calibration)

    def info(self) -> ContextUsage:
        """The /info card, from the very budget auto compaction reads."""
        from picochat.context_usage import ContextUsage

        snapshot = self.store.context_snapshot(self.session_id)
        projection = project(snapshot)
        cp = snapshot.checkpoint  # numbered as the checkpoint panel numbers it ("Summary 3")
        number = numbers(self.store.checkpoints(self.session_id)).get(cp.id, 0) if cp else 0
        return ContextUsage(snapshot.session, self.model, self.compaction.enabled,
                            self.budget(projection), projection, cp, self.summary_model,
                            number, self.files_line(),
                            self.request_draft(projection).searchable, self.tools_line())

    def info_if_counted(self) -> ContextUsage | None:
        """`info()` when its figures need no encoding that is not loaded (the texts every
        request carries were counted by an earlier run, or the encoding is loaded); else
        None, and the caller loads it off its event loop (`tokens.load`, 0.25 s) first."""
        try:
            with tokens.without_loading():
                return self.info()
        except tokens.NotLoaded:
            return None

    async def counted_info(self) -> ContextUsage:
        """`info()`, the encoding loaded in a thread first if its figures need it."""
        usage = self.info_if_counted()
        if usage is None and not tokens.table_loaded():
            await asyncio.to_thread(tokens.load_table)
            usage = self.info_if_counted()
        if usage is None:  # a text too long for the table alone
            await asyncio.to_thread(tokens.load)
            usage = self.info()
        return usage

    def files_line(self) -> str:
        """Where read_file may read, for /info; why it is off; "" when it is not enabled."""
        access = self.file_access
        if not self.reads_files:
            return ""
        if not access.on:
            return access.off_reason or ""
        where = (", ".join(str(r) for r in access.roots) if access.configured
                 else "the folder picochat started in")
        return f"read_file reads {where} (never keys, credentials or picochat's own data)"

    def set_system_prompt(self, prompt: str | None, default: str) -> "asyncio.Future[str]":
        """`/system`: saved with the session (None: back to `default`), queued so a running
        turn keeps the prompt it started with."""
        def run() -> str:
            self.store.set_session_system_prompt(self.session_id, prompt)
            self.system_prompt = default if prompt is None else prompt
            log.info("system_prompt session=%s own=%s chars=%d", self.session_id,
                     prompt is not None, len(self.system_prompt))
            return self.system_prompt
        return self.call(run)

    # --- what a screen reads, on the store's thread ---------------------------------------------

    async def stored(self) -> Session:
        """The session's row as stored now (its own system prompt, its pointers)."""
        return await self.store.io(self.store.session, self.session_id)

    async def history_page(self, before_seq: int | None, limit: int) -> list[Message]:
        """Up to `limit` raw messages before `before_seq` (None: the newest), oldest first."""
        return await self.store.io(self.store.history_page, self.session_id, before_seq, limit)

    async def message(self, seq: int) -> Message | None:
        return await self.store.io(self.store.message, self.session_id, seq)

    async def active_checkpoint(self) -> Checkpoint | None:
        return await self.store.io(self.store.active_checkpoint, self.session_id)

    async def search(self, query: str, limit: int) -> tuple[list[SearchHit], int]:
        """`/search`: the best matches in the whole log, undone rows included and marked, and
        how many messages match in all."""
        def run() -> tuple[list[SearchHit], int]:
            search = self.store.search
            hits = search.messages(self.session_id, query, limit=limit)
            return hits, (search.count(self.session_id, query) if hits else 0)
        return await self.store.io(run)

    async def record(self) -> SessionRecord:
        """All that is stored of the session (`/export`)."""
        return await self.store.io(read_record, self.store, self.session_id)

    async def panel(self) -> ContextPanel:
        """The checkpoint panel's figures; the whole log it reads for the sparkline is read
        on the store's thread."""
        from picochat.context_usage import ContextPanel, context_series

        usage = self.info()  # the budget and the pins, from one read of the context

        def read() -> tuple[list[Checkpoint], Session, list[Message], list[Branch]]:
            sid = self.session_id
            return (self.store.checkpoints(sid), self.store.session(sid),
                    self.store.history(sid), self.store.branches(sid))
        checkpoints, session, history, branches = await self.store.io(read)
        series = context_series(history, checkpoints, usage.budget.parts.fixed,
                                usage.budget.limits.token_factor)
        lines = tuple(f"{'●' if b.current else ' '} {b.id}: {b.where} · {b.size}"
                      for b in branches) if len(branches) > 1 or session.forked_from else ()
        return ContextPanel(tuple(checkpoints), session.active_context_checkpoint_id,
                            tuple(series), session.context_floor_seq, tuple(usage.pins_lines()),
                            self.refused, lines)

    # --- pins ----------------------------------------------------------------------------------

    def pins(self) -> tuple[Pin, ...]:
        return self.store.pins(self.session_id)

    def add_pin(self, text: str | None = None, source_seq: int | None = None) -> Pin:
        """Pin `text`, or the message `source_seq` (yours or an answer), verbatim in every
        request from now on; refused (PinRefused, nothing written) when it is empty, holds a
        line that frames the request, or would take the pins past their cap."""
        if source_seq is not None:
            message = self.store.message(self.session_id, source_seq)
            if message is None:
                raise PinRefused(f"pin not added: this session has no message {source_seq}")
            if message.role not in ("user", "assistant"):
                raise PinRefused(f"pin not added: message {source_seq} is a tool result",
                                 "pin one of your messages or an answer")
            if message.retracted:
                raise PinRefused(f"pin not added: message {source_seq} was undone",
                                 "pin the statement itself: /pin TEXT")
            text = message.content
        text = (text or "").strip()
        if problem := pin_problem(text):
            raise PinRefused(f"pin not added: {problem}")
        pin_tokens = tokens.count_text(text)
        limits = self.limits
        cap = pin_cap(limits)
        parts = self.budget().parts
        unpinned = parts.fixed - parts.pins  # system prompt, tools, framing

        def fits(current: tuple[Pin, ...]) -> None:
            if same := next((p for p in current if p.text == text), None):
                raise PinRefused(f"pin not added: pin #{same.number} already says this, "
                                 "word for word", "/pins lists them")
            new = Pin(0, text, pin_tokens, source_seq, 0)
            cost = pins_cost(limits, current + (new,))
            if unpinned + cost >= limits.threshold:
                raise PinRefused(
                    f"pin not added: the system prompt and tools ({unpinned:,} tokens) and "
                    f"the pins ({cost:,}) would reach the {limits.threshold:,}-token "
                    "compaction threshold, leaving no room for the conversation",
                    "shorten the system prompt or the pin, or unpin one")
            if cost > cap:
                held = pins_cost(limits, current)
                raise PinRefused(
                    f"pin not added: pins would take {cost:,} tokens of every request, over "
                    f"their cap of {cap:,} (a tenth of the {limits.threshold:,}-token "
                    "compaction threshold)" + (f"; {len(current)} pins take {held:,} now"
                                               if current else ""),
                    "shorten it, or unpin one (/pins or picochat pins lists them)"
                    if current else "pin a shorter statement")
        pin = self.store.add_pin(self.session_id, text, pin_tokens, source_seq, check=fits)
        self.traits.forget_calibration()
        log.info("pin session=%s number=%d tokens=%d from_seq=%s", self.session_id,
                 pin.number, pin.tokens, source_seq)
        return pin

    def remove_pin(self, number: int) -> Pin:
        pin = self.store.remove_pin(self.session_id, number)
        if pin is None:
            numbers = ", ".join(f"#{p.number}" for p in self.pins()) or "none"
            raise PinRefused(f"no pin #{number} in this session (pins in force: {numbers})")
        self.traits.forget_calibration()
        log.info("unpin session=%s number=%d", self.session_id, number)
        return pin

    def pin(self, text: str | None = None, source_seq: int | None = None
            ) -> "asyncio.Future[Pin]":
        """`/pin`: queued, so a running turn keeps the request it started with."""
        return self.call(lambda: self.add_pin(text, source_seq))

    def unpin(self, number: int) -> "asyncio.Future[Pin]":
        return self.call(lambda: self.remove_pin(number))

    def compact(self, focus: str | None = None, *, everything: bool = False,
                on_start: Callable[[], None] | None = None
                ) -> "asyncio.Future[CompactOutcome]":
        """`/compact [focus]`: forced (no threshold, even with auto compaction off), queued
        behind the running turn rather than cancelling it; `on_start` is called when it
        begins. `everything` (`/compact all`) folds all but the newest turn, however few
        tokens `keep_recent_tokens` would keep: the way to compact a chat shorter than that.
        The summary's checks still hold (it must shrink the context), and a failure still
        keeps the old context."""
        return self.submit(lambda: self.compact_now(TriggerReason.MANUAL, focus=focus,
                                                    everything=everything), on_start)

    def uncompact(self) -> "asyncio.Future[UncompactResult]":
        """`/uncompact`: the previous checkpoint (or none) becomes active again; with none in
        use, the newest `/clear` is taken back."""
        def run() -> UncompactResult:
            result = self.store.uncompact(self.session_id)
            log.info("uncompact session=%s undone=%s uncleared=%s active=%s generation=%d",
                     self.session_id, result.undone, result.uncleared, result.active,
                     result.context_generation)
            return result
        return self.call(run)

    def clear(self) -> "asyncio.Future[Any]":
        return self.call(lambda: self.store.clear_context(self.session_id))

    def rewind(self, seq: int) -> "asyncio.Future[Rewound]":
        """A new branch that leaves the path just before message `seq` (the user's), in order
        with the turns: the message sent next lands on it (storage/branches.py)."""
        def run() -> Rewound:
            done = self.store.rewind(self.session_id, seq)
            log.info("rewind session=%s seq=%d branch=%d left=%d later=%d", self.session_id,
                     seq, done.session.branch, done.left, done.later)
            return done
        return self.call(run)

    def switch_branch(self, branch: int) -> "asyncio.Future[Session]":
        def run() -> Session:
            session = self.store.switch_branch(self.session_id, branch)
            log.info("branch_switched session=%s branch=%d", self.session_id, branch)
            return session
        return self.call(run)

    def fork(self, name: str | None) -> "asyncio.Future[Forked]":
        """`/fork`: a new session with this one's context as it is once the work queued before
        it is done (storage/forks.py); this one stays as it is."""
        def run() -> Forked:
            done = self.store.fork_session(self.session_id, name)
            log.info("fork session=%s fork=%s at=%d checkpoint=%s facts=%d pins=%d",
                     self.session_id, done.session.id, done.at, done.checkpoint, done.facts,
                     done.pins)
            return done
        return self.call(run)

    async def branches(self) -> "list[Branch]":
        """The session's branches, read now (not queued: a list to show)."""
        return await self.store.io(self.store.branches, self.session_id)

    async def branch_records(self) -> "list[tuple[Branch, SessionRecord]]":
        """Every branch with all that is stored of it (`/export --all-branches`)."""
        return await self.store.io(read_branches, self.store, self.session_id)

    def last_turn(self) -> "asyncio.Future[LastTurn | None]":
        """The turn `undo` would take back once the work queued before it is done (None:
        nothing is in the context), to be named or confirmed before it goes."""
        return self.call(self._turn_to_undo)

    def undo(self, expect: tuple[int, ...]) -> "asyncio.Future[UndoResult | None]":
        """Take back the newest turn in the context if it is still `expect` (the seqs
        `last_turn` gave). None, and nothing taken back, when it is not: another picochat
        wrote a turn after the user was told which one would go."""
        def run() -> UndoResult | None:
            now = self._turn_to_undo()
            if now is None or now.seqs != expect:
                return None
            return self.store.undo_last_turn(self.session_id)
        return self.call(run)

    def _turn_to_undo(self) -> LastTurn | None:
        """From the rows an undo looks at: every one since the last /clear that is not
        undone. Without a summary that is the context's raw tail; with one, the log is read
        (an undo may reach past the summary's boundary into the turn it cut)."""
        snapshot = self.store.context_snapshot(self.session_id)
        rows: Sequence[Message] = snapshot.messages
        if snapshot.checkpoint is not None:
            floor = snapshot.session.context_floor_seq
            rows = [m for m in self.store.history(self.session_id)
                    if m.seq > floor and not m.retracted]
        return turn_to_undo(rows)

    async def compact_now(self, reason: TriggerReason, *, focus: str | None = None,
                          mode: CompactMode | None = None,
                          everything: bool = False) -> CompactOutcome:
        """Compact now (not queued: for `compact()` and a running turn), with this session's
        prompt, tools, limits and summarizer (`mode`: a summary unless said)."""
        from picochat.compaction.compact import compact_context

        request = self._compact_request(reason, focus, mode, everything)
        outcome = await compact_context(self.store, self.provider, request)
        self._tally(outcome)
        return outcome

    def preview(self, focus: str | None = None, *, everything: bool = False,
                on_start: Callable[[], None] | None = None
                ) -> "asyncio.Future[CompactionPreview | CompactOutcome]":
        """`/compact --preview`: queued like `/compact`; the compaction drafted and checked,
        not committed (an outcome when there is nothing to preview)."""
        return self.submit(lambda: self.preview_now(TriggerReason.MANUAL, focus=focus,
                                                    everything=everything), on_start)

    async def preview_now(self, reason: TriggerReason, *, focus: str | None = None,
                          everything: bool = False) -> "CompactionPreview | CompactOutcome":
        """A preview now (not queued: for `preview()` and a running turn's auto check)."""
        from picochat.compaction.preview import CompactionPreview, preview_compaction

        got = await preview_compaction(self.store, self.provider, self._compact_request(
            reason, focus, None, everything))
        if not isinstance(got, CompactionPreview):  # nothing to preview, or a failure
            self._tally(got)
        return got

    def commit_preview(self, preview: "CompactionPreview") -> "asyncio.Future[CompactOutcome]":
        """Commit what `preview` showed, queued behind the work before it (a turn that
        arrives first makes it stale: nothing is written)."""
        return self.submit(lambda: self.commit_preview_now(preview))

    async def commit_preview_now(self, preview: "CompactionPreview") -> CompactOutcome:
        from picochat.compaction.preview import commit_preview

        outcome = await commit_preview(self.store, self.provider, preview)
        self._tally(outcome)
        return outcome

    def drop_preview(self, preview: "CompactionPreview") -> "asyncio.Future[None]":
        return self.submit(lambda: self.drop_preview_now(preview))

    async def drop_preview_now(self, preview: "CompactionPreview") -> None:
        from picochat.compaction.preview import drop_preview

        await drop_preview(self.store, preview)

    def _compact_request(self, reason: TriggerReason, focus: str | None,
                         mode: CompactMode | None, everything: bool) -> "CompactRequest":
        from picochat.compaction.compact import CompactMode, CompactRequest

        return CompactRequest(
            session_id=self.session_id, reason=reason, limits=self.limits,
            system_prompt=self.system_prompt, tools=self.offered_tools, focus=focus,
            everything=everything,
            instructions=self.compaction.instructions, mode=mode or CompactMode.SUMMARY,
            timeout=self.total_timeout, summary_model=self._summarizer(),
            reasoning=self.model.reasoning)

    def _summarizer(self) -> SummaryModel | None:
        """`[context_compaction] summary_model` as the compactor takes it; its provider is
        opened on the first summary. Its own window bounds the transcript (the agent's
        token_limit is the chat context's, not the summarizer's)."""
        from picochat.compaction.compactor import SummaryModel

        if self.summary_model is None:
            return None
        if self._summary_provider is None:
            self._summary_provider = create_provider(self.summary_model)
        return SummaryModel(self._summary_provider, self.summary_model.usable_window,
                            self.summary_model.token_factor, self.summary_model.reasoning)

    def _tally(self, outcome: CompactOutcome) -> None:
        """Count the summaries rejected in a row (a real checkpoint resets the count). While
        the chat model writes them, a rejection's hint names the setting that hands the job
        to another model, so every front end's failure line says what to do about it."""
        from picochat.compaction.candidate import RETRY, SummaryRejected

        if outcome.compacted and not outcome.degraded:
            self.rejected_in_a_row = 0
            self.refused = None
            return
        rejected = next((e for e in (outcome.error, outcome.summary_error)
                         if isinstance(e, SummaryRejected)), None)
        if rejected is None or not outcome.summary_called:  # no summary was written to judge
            return
        if rejected.summary is not None:  # the panel shows it, with the gate's reason
            from picochat.context_usage import RefusedSummary

            self.refused = RefusedSummary(rejected.message, rejected.summary,
                                          (self.summary_model or self.model).label)
        self.rejected_in_a_row += 1
        log.info("summary_rejected_in_a_row session=%s count=%d summary_model=%s",
                 self.session_id, self.rejected_in_a_row, self.summary_model is not None)
        if self.summary_model is None:  # this error is the outcome's own: extend its hint
            advice = summary_model_advice(self.rejected_in_a_row, self.model.offline)
            # the advice says which other model: the gate's generic "use another model" goes
            hint = (rejected.hint or "").replace(RETRY, "").strip("; ")
            rejected.hint = f"{hint}; {advice}" if hint else advice

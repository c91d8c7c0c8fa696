"""The session worker (design §3.1, §7.4): one asyncio task per open session.

It owns the session's turns and commands and runs them one at a time, in the order they were
submitted, so a `/compact` typed during a turn waits for it instead of racing it. Callers submit
work and await results; a turn also streams typed events (`TurnStarted`, `ThinkingDelta`,
`TextDelta`, `CompactionStarted`/`Compacted`, `TurnFinished` | `TurnFailed`) that the CLI prints
and the TUI renders. Thinking is shown, not saved: only the answer text is, except the thinking
behind tool calls for a provider that requires it back (DeepSeek; `Provider.keeps_thinking`).

Before each turn the full request draft is budgeted and compacted at most once (§11.2); an
overflow from the provider is recovered once and retried once (§11.3). `/compact`, `/uncompact`,
`/clear` and undo are queued like turns, so none of them races a running turn.

A turn writes the user's message before the provider is called; a failed or cancelled turn
keeps it, keeps any partial answer (marked interrupted) and says what happened. While an answer
streams, its text so far is saved as a draft about once a second, so a process killed mid-answer
loses at most that much: the next worker to start turns the draft into an interrupted answer.

Every write goes through `Store.io`, on the store's own thread: a write waiting for another
process's lock never freezes the event loop (the app's keys and screen) meanwhile.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence, TypeVar, Union

from picochat import crashpoints
from picochat.budget import (
    BudgetLimits,
    Calibration,
    ContextBudget,
    FixedContextExceedsBudget,
    RequestDraft,
    answer_cap,
    measure,
)
from picochat.compaction.compact import (
    CompactOutcome,
    CompactRequest,
    ContextMisfit,
    compact_context,
)
from picochat.compaction.candidate import RETRY, SummaryRejected
from picochat.compaction.compactor import SummaryModel
from picochat.config import CompactionConfig, Config
from picochat.context_usage import ContextUsage, limits_for
from picochat.errors import PicochatError
from picochat.messages import INTERRUPTED, Message, ModelTraits, NewMessage
from picochat.models import (
    SUMMARY_MODEL_KEY,
    ResolvedModel,
    create_provider,
    resolve_summary_model,
)
from picochat.projection import ContextProjection, project, restore
from picochat.agent_loop import (
    MAX_TOOL_STEPS,
    ToolCall,
    assemble_tool_calls,
    shorten_old_tool_results,
    this_turn_only,
)
from picochat.providers.base import (
    Provider,
    ProviderRequest,
    TextDelta,
    ThinkingDelta,
    Usage,
    collect,
)
from picochat.providers.errors import (
    ContextOverflow,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ToolsUnsupported,
)
from picochat.storage.store import Store, UncompactResult, UndoResult
from picochat.tools.base import ToolContext
from picochat.tools.registry import run_tool, schemas

log = logging.getLogger("picochat.session")
T = TypeVar("T")

TOTAL_TIMEOUT_S = 600.0
RETRY_WAIT_DEFAULT_S = 5.0   # a 429/503/529 that names no Retry-After
RETRY_WAIT_LIMIT_S = 30.0    # a longer Retry-After fails the turn: waiting is the user's call
# A stated window below this is not believed (nor remembered): it would hold no system prompt
# and tools, and a hostile server must not shrink every later session to nothing.
MIN_LEARNED_WINDOW = 512


def remembered(store: Store, model: ResolvedModel) -> ResolvedModel:
    """`model` with what its server taught earlier runs (a smaller window, no tools)."""
    try:
        traits = store.model_traits(model.key)
    except PicochatError as exc:  # an unreadable table only means learning it again
        log.warning("model_traits_unread kind=%s", exc.kind)
        traits = ModelTraits(model.key)
    return model.with_traits(traits)
DRAFT_EVERY_S = 1.0  # how often the answer being streamed is saved as a draft


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
    """A turn is compacting first: "auto" (over the threshold) or "overflow" (the provider
    refused the request as too long)."""

    reason: str


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


TurnEvent = Union[TurnStarted, ThinkingDelta, TextDelta, CompactionStarted, Compacted, ToolRan,
                  TurnFinished, TurnFailed]
TurnOutcome = Union[TurnFinished, TurnFailed]


def summary_model_advice(times: int, chat_offline: bool) -> str:
    """What to do when the chat model's summaries fail the checks: summarize with another."""
    failed = ("the chat model's summary failed the quality check" if times == 1 else
              f"the chat model's summaries failed the quality check {times} times in a row")
    example = "a [models] key" if chat_offline else '"offline" or a stronger model'
    return f"{failed}: set {SUMMARY_MODEL_KEY} (e.g. {example}) to summarize with another model"


def _internal(exc: Exception, session_id: str, turn_id: str) -> PicochatError:
    """A bug inside a turn, logged with its traceback (code locations, no text) and turned
    into the one line the user sees, so the turn still ends in an outcome."""
    log.error("turn_crashed session=%s turn=%s kind=%s\n%s", session_id, turn_id,
              type(exc).__name__, "".join(traceback.format_tb(exc.__traceback__)))
    return PicochatError(f"internal error ({type(exc).__name__}); see the log")


def own_view(store: Store, projection: ContextProjection, user: Message) -> ContextProjection:
    """The history one turn sends: everything before its message, its message, and its own
    later rows. Another process may append to the session meanwhile (design §12.2): a turn
    begun there after this one (a later seq, another turn id) is left out, so this turn's
    request ends with its own question, not with someone else's. And if a `clear` or
    compaction of another process took this turn's own message out of the context after it
    was written, it is put back: a request must carry the question it answers.

    The rows are filtered before the tool-chain repair, not after: a foreign row between this
    turn's tool call and its result would have the repair drop both, and the model would ask
    for the same tool again."""
    def mine(m: Message) -> bool:
        return m.seq <= user.seq or m.turn_id == user.turn_id

    if (not projection.repairs and all(map(mine, projection.raw))
            and any(m.seq == user.seq for m in projection.raw)):
        return projection  # nobody else wrote: the usual case, and no second read
    snapshot = store.context_snapshot(projection.session_id)
    rows = [m for m in snapshot.messages if mine(m)]
    if not any(m.seq == user.seq for m in rows):
        rows = sorted([*rows, user], key=lambda m: m.seq)
    return project(dataclasses.replace(snapshot, messages=tuple(rows)))


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


@dataclass(frozen=True)
class _Step:
    usage: Usage | None
    calls: tuple[ToolCall, ...]
    finish: str | None = None
    thinking: str = ""  # the reasoning model's thinking before this step's answer or calls


@dataclass
class _Job:
    run: Callable[[], Awaitable[Any]]
    future: asyncio.Future[Any]
    answers_itself: bool = False  # a turn reports its own cancellation to its handle


class SessionWorker:
    def __init__(self, store: Store, session_id: str, model: ResolvedModel, provider: Provider,
                 system_prompt: str, total_timeout: float = TOTAL_TIMEOUT_S,
                 compaction: CompactionConfig = CompactionConfig(),
                 tools: tuple[dict[str, Any], ...] = (), tool_root: Path | None = None,
                 summary_model: ResolvedModel | None = None,
                 summary_provider: Provider | None = None) -> None:
        self.store = store
        self.session_id = session_id
        self.model = remembered(store, model)  # with what its server taught earlier runs
        self.provider = provider
        # None: the chat model writes the summaries
        self.summary_model = summary_model and remembered(store, summary_model)
        self._summary_provider = summary_provider  # opened on the first summary, closed with us
        self.rejected_in_a_row = 0  # summaries rejected since the last real checkpoint
        self.system_prompt = system_prompt
        self.total_timeout = total_timeout
        self.compaction = compaction
        self.tools = tools            # OpenAI-format schemas of the enabled built-in tools
        self.tool_root = tool_root or Path.cwd()
        self.last_usage: Usage | None = None
        self.calibration: Calibration | None = None  # the last request's reported prompt size
        self._queue: asyncio.Queue[_Job | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._current: TurnHandle | None = None
        self._closing = False
        self._draft_task: asyncio.Task[None] | None = None
        self._draft_at = 0.0
        self.recovered: tuple[Message, ...] = ()  # drafts of killed processes `start()` saved

    @classmethod
    def from_config(cls, store: Store, session_id: str, model: ResolvedModel,
                    provider: Provider, config: Config) -> "SessionWorker":
        """The worker the CLI and the app both run: the session's own system prompt (else the
        agent's), the model's timeout, the compaction settings (summary model included) and
        the enabled tools."""
        own = store.session(session_id).system_prompt
        return cls(store, session_id, model, provider,
                   config.agent.system_prompt if own is None else own,
                   total_timeout=model.timeout or TOTAL_TIMEOUT_S,
                   compaction=config.context_compaction, tools=schemas(config.tools.enabled),
                   summary_model=resolve_summary_model(config))

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> "SessionWorker":
        if self._task is None:
            await self._recover_drafts()
            self._task = asyncio.create_task(self._loop(), name=f"session-{self.session_id}")
        return self

    async def _recover_drafts(self) -> None:
        """Answers a killed process was streaming become interrupted answers (any session)."""
        try:
            answers = await self.store.io(self.store.recover_drafts)
        except PicochatError as exc:  # a read-only or locked database: the drafts wait
            log.warning("drafts_not_recovered kind=%s", exc.kind)
            return
        for m in answers:
            log.info("draft_recovered session=%s turn=%s seq=%d chars=%d", m.session_id,
                     m.turn_id, m.seq, len(m.content))
        self.recovered = tuple(answers)

    def recovered_notes(self) -> list[str]:
        """What `start()` recovered, in a line each for the user: an answer a killed picochat
        was streaming is back, marked interrupted."""
        def where(m: Message) -> str:
            return "" if m.session_id == self.session_id else " of another session"
        return [f"an answer cut off when picochat was killed is saved as interrupted "
                f"(message #{m.seq}{where(m)})" for m in self.recovered]

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
        if self._summary_provider is not None:
            await self._summary_provider.aclose()

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
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # the worker itself is cancelled
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
        """Queue a quick synchronous command (clear, undo, …) now, in order with the turns;
        it runs on the store's thread."""
        async def run() -> T:
            return await self.store.io(fn)
        return self.submit(run)

    def submit_turn(self, text: str) -> TurnHandle:
        handle = TurnHandle(text)

        async def run() -> TurnOutcome:
            if handle._cancel_requested:
                failed = TurnFailed(handle.turn_id, TurnCancelled("cancelled before it started"),
                                    None, None)
                handle._emit(failed)
                return failed
            if self._closing:
                return await self._keep_unsent(handle)
            task = asyncio.create_task(self._turn(handle))
            handle._task = task
            self._current = handle
            try:
                await asyncio.wait([task])
            finally:
                self._current = None
            if not handle._result.done():  # a bug ended the turn without an outcome: never hang
                error = (TurnCancelled("stopped") if task.cancelled() else
                         _internal(task.exception() or RuntimeError("no outcome"),
                                   self.session_id, handle.turn_id))
                handle._emit(TurnFailed(handle.turn_id, error, None, None))
            return await handle.result()

        self.submit(run, _answers_itself=True)
        return handle

    async def _keep_unsent(self, handle: TurnHandle) -> TurnFailed:
        """The app is quitting with this message still queued: it is saved, as a turn stopped
        before any answer is (the user typed it and pressed Enter), and not sent."""
        user_seq = None
        try:
            user_seq = (await self._settle(self.store.append_message, self.session_id, "user",
                                           handle.text, turn_id=handle.turn_id))[0].seq
        except Exception as exc:  # noqa: BLE001 - closing: report, never raise
            log.warning("turn_failed session=%s turn=%s kind=%s stage=unsent_message",
                        self.session_id, handle.turn_id, type(exc).__name__)
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
        """The tools a request offers: none to a server that refuses them."""
        return () if self.model.tools_refused else self.tools

    def _draft(self, projection: ContextProjection) -> RequestDraft:
        return RequestDraft(self.system_prompt, projection, self.offered_tools)

    def budget(self, projection: ContextProjection | None = None) -> ContextBudget:
        """The budget of the next request: the value auto compaction and /info both use."""
        return self._measure(self._draft(projection or self.projection()))

    def _measure(self, draft: RequestDraft) -> ContextBudget:
        info = self.provider.info
        return measure(self.limits, draft, info.provider_kind, info.model, self.calibration)

    def info(self) -> ContextUsage:
        """The /info card, from the very budget auto compaction reads (§21.10)."""
        snapshot = self.store.context_snapshot(self.session_id)
        projection = project(snapshot)
        return ContextUsage(snapshot.session, self.model, self.compaction.enabled,
                            self.budget(projection), projection, snapshot.checkpoint,
                            self.summary_model)

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

    def compact(self, focus: str | None = None) -> "asyncio.Future[CompactOutcome]":
        """`/compact [focus]`: forced, queued behind the running turn (§11.1)."""
        return self.submit(lambda: self._compact("manual", focus=focus))

    def uncompact(self) -> "asyncio.Future[UncompactResult]":
        """`/uncompact`: the previous checkpoint (or none) becomes active again."""
        def run() -> UncompactResult:
            result = self.store.uncompact(self.session_id)
            log.info("uncompact session=%s undone=%s active=%s generation=%d", self.session_id,
                     result.undone, result.active, result.context_generation)
            return result
        return self.call(run)

    def clear(self) -> "asyncio.Future[Any]":
        return self.call(lambda: self.store.clear_context(self.session_id))

    def undo(self) -> "asyncio.Future[UndoResult]":
        return self.call(lambda: self.store.undo_last_turn(self.session_id))

    async def _compact(self, reason: str, *, focus: str | None = None, try_summary: bool = True,
                       degraded_fallback: bool = False,
                       limits: BudgetLimits | None = None) -> CompactOutcome:
        request = CompactRequest(
            session_id=self.session_id, reason=reason, limits=limits or self.limits,
            system_prompt=self.system_prompt, tools=self.offered_tools, focus=focus,
            instructions=self.compaction.instructions, try_summary=try_summary,
            degraded_fallback=degraded_fallback,
            timeout=self.total_timeout, summary_model=self._summarizer(),
            reasoning=self.model.reasoning)
        outcome = await compact_context(self.store, self.provider, request)
        self._tally(outcome)
        return outcome

    def _summarizer(self) -> SummaryModel | None:
        """`[context_compaction] summary_model` as the compactor takes it; its provider is
        opened on the first summary. Its own window bounds the transcript (the agent's
        token_limit is the chat context's, not the summarizer's)."""
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
        if outcome.compacted and not outcome.degraded:
            self.rejected_in_a_row = 0
            return
        rejected = next((e for e in (outcome.error, outcome.summary_error)
                         if isinstance(e, SummaryRejected)), None)
        if rejected is None or not outcome.summary_called:  # no summary was written to judge
            return
        self.rejected_in_a_row += 1
        log.info("summary_rejected_in_a_row session=%s count=%d summary_model=%s",
                 self.session_id, self.rejected_in_a_row, self.summary_model is not None)
        if self.summary_model is None:  # this error is the outcome's own: extend its hint
            advice = summary_model_advice(self.rejected_in_a_row, self.model.offline)
            # the advice says which other model: the gate's generic "use another model" goes
            hint = (rejected.hint or "").replace(RETRY, "").strip("; ")
            rejected.hint = f"{hint}; {advice}" if hint else advice

    # --- one turn ------------------------------------------------------------------------------

    async def _settle(self, fn: Callable[..., T], *args: Any, **kwargs: Any
                      ) -> tuple[T, bool]:
        """A write on the store's thread that a cancel never leaves half-known: it returns the
        write's result, and whether the turn was cancelled while it ran (the caller decides
        what that cancel means once the row is known to be there)."""
        draft = self._draft_task

        async def write() -> T:  # one shielded unit: a cancel interrupts neither part
            if draft is not None:  # the draft this write replaces goes first
                await asyncio.wait([draft])
            return await self.store.io(fn, *args, **kwargs)

        future = asyncio.ensure_future(write())
        cancelled = False
        while True:
            try:
                return await asyncio.shield(future), cancelled
            except asyncio.CancelledError:
                if future.done():  # it ended before this task resumed: the write stands
                    if future.cancelled():
                        raise
                    return future.result(), True
                cancelled = True

    def _draft_soon(self, turn_id: str, parts: list[str]) -> None:
        """Save the answer so far as the turn's draft, at most every DRAFT_EVERY_S and one
        save at a time (a save waiting for a lock is not queued behind by more)."""
        now = time.monotonic()
        if (self._draft_task is not None and not self._draft_task.done()) or \
                now - self._draft_at < DRAFT_EVERY_S:
            return
        self._draft_at = now
        self._draft_task = asyncio.create_task(self._save_draft(turn_id, "".join(parts)))

    async def _save_draft(self, turn_id: str, text: str) -> None:
        try:
            await self.store.io(self.store.save_draft, self.session_id, turn_id, text)
        except PicochatError as exc:  # the answer itself is still saved when it ends
            log.warning("draft_not_saved session=%s turn=%s kind=%s", self.session_id, turn_id,
                        exc.kind)

    async def _turn(self, handle: TurnHandle) -> None:
        sid, turn_id = self.session_id, handle.turn_id
        self._draft_at = 0.0
        try:
            user, cancelled = await self._settle(self.store.append_message, sid, "user",
                                                 handle.text, turn_id=turn_id)
        except Exception as exc:  # a turn always ends in an outcome, even on a bug
            if not isinstance(exc, PicochatError):
                exc = _internal(exc, sid, turn_id)
            log.warning("turn_failed session=%s turn=%s kind=%s stage=user_message", sid, turn_id,
                        exc.kind)
            handle._emit(TurnFailed(turn_id, exc, None, None))
            return
        crashpoints.reached("user_written")
        handle._emit(TurnStarted(turn_id, user.seq))
        parts: list[str] = []
        usage: Usage | None = None
        compactions: list[CompactOutcome] = []
        if cancelled:
            await self._fail(handle, user.seq, parts, TurnCancelled("stopped"), compactions)
            return
        try:
            projection, _ = await self._before_send(handle, compactions)
            retried = False         # the one engine-level overflow retry (before any tool ran)
            local_retried = False   # the one request-local retry (after a tool batch ran)
            waited = False          # the one wait for a rate-limited or overloaded provider
            refitted = False        # the one resend after a window learned from the server
            steps = 0
            while True:
                view = self._request_view(own_view(self.store, projection, user), user.seq,
                                          steps > 0, local_retried)
                draft = self._draft(view)
                if steps >= MAX_TOOL_STEPS:  # enough tools: ask for the answer
                    draft = dataclasses.replace(draft, tools=())
                try:
                    step = await self._stream(handle, draft, parts, steps)
                except ToolsUnsupported:
                    if not draft.tools or parts:
                        raise
                    await self._refuse_tools(handle)  # this request again, without tools
                    continue
                except RateLimited as exc:
                    if waited or parts:
                        raise
                    waited = True
                    await self._wait_to_retry(handle, exc)
                    continue
                except ContextOverflow as exc:
                    if parts:
                        raise
                    if exc.misfit and (retried or local_retried):  # the window is wrong:
                        raise  # its own line says so; "still too long" would mislead
                    if steps > 0:  # tools ran: never restart the turn from durable history
                        if local_retried:
                            raise ContextOverflow(
                                "the request is still too long for the model after leaving "
                                "out the earlier turns", exc.window, "shorten the message, "
                                "/clear, or switch to a model with a larger window") from None
                        await self._learn_window(exc)
                        local_retried = True
                        continue
                    if retried:
                        raise ContextOverflow(
                            "the request is still too long for the model after compacting "
                            "once", exc.window, "shorten the message, /clear, or switch to "
                            "a model with a larger window") from None
                    if not refitted and await self._refit(exc):
                        refitted = True  # the same messages, with an answer cap that fits
                        continue
                    retried = True
                    projection = await self._recover_overflow(handle, exc, compactions)
                    continue
                usage = step.usage or usage
                if step.calls and not draft.tools:  # asked of a request that offered none
                    self._ignore_calls(handle, step, steps, parts)
                    break
                if not step.calls:
                    break
                steps += 1
                await self._run_tools(handle, turn_id, parts, step, user.seq)
                projection = self.projection()
            reply = "".join(parts)
            if not reply.strip():
                raise ProviderError("the model returned an empty reply", "try again")
            # a stop pressed while the whole answer is being saved comes too late: it is saved
            assistant, _ = await self._settle(self.store.append_message, sid, "assistant",
                                              reply, turn_id=turn_id)
        except asyncio.CancelledError:
            await self._fail(handle, user.seq, parts, TurnCancelled("stopped"), compactions)
            return
        except PicochatError as exc:
            await self._fail(handle, user.seq, parts, exc, compactions)
            return
        except Exception as exc:  # a bug, not a provider problem: still keep the user's data
            await self._fail(handle, user.seq, parts, _internal(exc, sid, turn_id), compactions)
            return
        self.last_usage = usage
        await self._check_learned_window(usage)
        if usage is not None and usage.prompt_tokens > 0 and steps == 0:
            info = self.provider.info
            self.calibration = Calibration(draft.key(info.provider_kind, info.model),
                                           usage.prompt_tokens)
        log.info("turn_ok session=%s turn=%s user_seq=%d assistant_seq=%d tool_steps=%d "
                 "prompt_tokens=%s completion_tokens=%s", sid, turn_id, user.seq, assistant.seq,
                 steps, usage.prompt_tokens if usage else None,
                 usage.completion_tokens if usage else None)
        handle._emit(TurnFinished(turn_id, reply, usage, assistant.seq, tuple(compactions),
                                  step.finish))

    def _ignore_calls(self, handle: TurnHandle, step: "_Step", steps: int,
                      parts: list[str]) -> None:
        """Tool calls from a request that offered no tools are never run: the turn ends with
        the text that came with them, or fails with a line that says why."""
        log.warning("tool_calls_ignored session=%s turn=%s calls=%d tool_steps=%d",
                    self.session_id, handle.turn_id, len(step.calls), steps)
        if "".join(parts).strip():
            return
        if steps:
            raise ProviderError(f"the model still asked for tools after {steps} rounds of them "
                                "and gave no answer", "ask again, or ask for less at once")
        raise ProviderError("the model asked for a tool although none was offered, and gave "
                            "no answer", "ask again; if it keeps happening, switch models")

    def _request_view(self, projection: ContextProjection, user_seq: int, tools_ran: bool,
                      this_turn: bool) -> ContextProjection:
        """The request-local copy a tool step sends (§11.4): old tool results shortened when
        the request would not fit; after an overflow, only this turn (and the summary)."""
        if not tools_ran:
            return projection
        if this_turn:
            return this_turn_only(projection, user_seq)
        if self.budget(projection).over_window:
            return shorten_old_tool_results(projection, user_seq)
        return projection

    async def _run_tools(self, handle: TurnHandle, turn_id: str, parts: list[str],
                         step: "_Step", user_seq: int) -> None:
        """Run each call once, then persist the assistant's text and calls (with its thinking
        when the provider wants that back) and every result, in order, in one transaction:
        another writer can never land between a call and its results, and a crash leaves
        all of them or none. `parts` is emptied: that text is saved. A stop pressed meanwhile
        takes effect once they are saved."""
        sid, calls = self.session_id, step.calls
        thinking = step.thinking if self.provider.keeps_thinking else ""
        context = ToolContext(self.store, sid, self.tool_root, before_seq=user_seq)
        names = [t["function"]["name"] for t in self.tools]
        results = [run_tool(call.name, call.arguments, context, enabled=names) for call in calls]
        rows, stopped = await self._settle(self.store.append_messages, sid, [
            NewMessage("assistant", "".join(parts), tuple(c.openai() for c in calls),
                       turn_id=turn_id, reasoning=thinking if thinking.strip() else None),
            *(NewMessage("tool", result.content, tool_call_id=call.id, name=call.name,
                         turn_id=turn_id, tool_status=result.status)
              for call, result in zip(calls, results))])
        parts.clear()
        for call, result, row in zip(calls, results, rows[1:]):
            log.info("tool_ran session=%s turn=%s tool=%s status=%s seq=%d chars=%d", sid,
                     turn_id, call.name, result.status, row.seq, len(result.content))
            handle._emit(ToolRan(call.id, call.name, result.status, row.seq))
        if stopped:
            raise asyncio.CancelledError

    async def _before_send(self, handle: TurnHandle, compactions: list[CompactOutcome]
                           ) -> tuple[ContextProjection, ContextBudget]:
        """Auto compaction (§11.2): budget the full draft, compact at most once, re-budget.

        A failed summary leaves the context as it was, unless the draft is already over the
        hard window: then a degraded checkpoint now beats a request bound to fail. That
        check holds with auto compaction off too (it is the overflow recovery, done early).
        """
        projection = self.projection()
        if projection.repairs or projection.diagnostics:
            log.warning("projection_repaired session=%s repairs=%d diagnostics=%d",
                        self.session_id, len(projection.repairs), len(projection.diagnostics))
        budget = self.budget(projection)
        auto = budget.should_compact(self.compaction.enabled)
        if not auto and not budget.over_window:
            return projection, budget
        if budget.fixed_exceeds_threshold:  # compacting cannot help; send if it still fits
            if budget.over_window:
                raise FixedContextExceedsBudget(budget.parts, budget.limits.threshold)
            return projection, budget
        # `enabled = false` turns off only auto compaction: a draft known to be over the hard
        # window gets the overflow recovery now rather than a request bound to be refused
        reason = "auto" if auto else "overflow"
        handle._emit(CompactionStarted(reason))
        outcome = await self._compact(reason, degraded_fallback=budget.over_window)
        compactions.append(outcome)
        handle._emit(Compacted(outcome))
        # the outcome's projection is the durable context now, committed or not
        return outcome.projection, self.budget(outcome.projection)

    async def _learn_window(self, exc: ContextOverflow) -> bool:
        """§11.3 step 1: a window the provider stated is the truth from now on (only smaller),
        and remembered for this model on this server, so the next process starts with it."""
        self.calibration = None
        if not exc.window or exc.window >= self.model.usable_window:
            return False
        if exc.window < MIN_LEARNED_WINDOW:  # no real model; a hostile or broken server
            log.warning("window_not_learned session=%s window=%d", self.session_id, exc.window)
            return False
        model = self.model
        self.model = dataclasses.replace(model, learned_window=exc.window)
        log.info("window_learned session=%s window=%d configured=%d", self.session_id,
                 exc.window, model.model_window)
        try:
            await self.store.io(self.store.learn_window, model.key, exc.window,
                                model.model_window)
        except PicochatError as e:  # remembered for this process at least
            log.warning("window_not_saved session=%s kind=%s", self.session_id, e.kind)
        return True

    async def _refit(self, exc: ContextOverflow) -> bool:
        """Whether the refused request is worth sending again unchanged but for its answer cap:
        with its cap it asked for more than the window the server stated (now learned), and
        the same messages sit under the threshold of that window, so the cap the new window
        gives leaves room. No summary, no trim: nothing needed folding."""
        if not exc.window or not exc.asked or exc.asked <= exc.window:
            return False
        await self._learn_window(exc)
        if self.limits.window > exc.window or self.budget().should_compact(True):
            return False
        log.info("overflow_refit session=%s window=%d", self.session_id, exc.window)
        return True

    async def _check_learned_window(self, usage: Usage | None) -> None:
        """A server that took a prompt larger than the window it once stated has grown (its
        context was raised): the learned window is forgotten."""
        learned = self.model.learned_window
        if learned is None or usage is None or usage.prompt_tokens <= learned:
            return
        self.model = dataclasses.replace(self.model, learned_window=None)
        log.info("window_forgotten session=%s prompt_tokens=%d learned=%d", self.session_id,
                 usage.prompt_tokens, learned)
        try:
            await self.store.io(self.store.learn_window, self.model.key, None, None)
        except PicochatError as e:
            log.warning("window_not_saved session=%s kind=%s", self.session_id, e.kind)

    async def _refuse_tools(self, handle: TurnHandle) -> None:
        """The server refuses requests that offer tools: off for this model from now on
        (remembered), said once, and this request sent again without them."""
        self.model = dataclasses.replace(self.model, tools_refused=True)
        self.calibration = None
        log.info("tools_refused session=%s", self.session_id)
        handle._emit(Notice("tools_off", (
            f"{self.model.name}'s server refuses requests that offer tools: picochat sends "
            "it none from now on (history_search and the other tools are off for it; to "
            "turn them off for every model, set [tools] enabled = [])")))
        try:
            await self.store.io(self.store.refuse_tools, self.model.key)
        except PicochatError as e:
            log.warning("tools_refusal_not_saved session=%s kind=%s", self.session_id, e.kind)

    async def _wait_to_retry(self, handle: TurnHandle, exc: RateLimited) -> None:
        """One bounded wait before the one retry a 429, 503 or 529 earns: the provider's
        Retry-After when it gives one, up to RETRY_WAIT_LIMIT_S; longer than that, the turn
        fails and its line says when to retry."""
        seconds = exc.retry_after if exc.retry_after is not None else RETRY_WAIT_DEFAULT_S
        if seconds > RETRY_WAIT_LIMIT_S:
            raise exc
        seconds = max(0.0, seconds)
        log.info("retry_wait session=%s kind=%s seconds=%g", self.session_id, exc.kind, seconds)
        handle._emit(RetryWaiting(seconds, exc))
        await asyncio.sleep(seconds)

    async def _recover_overflow(self, handle: TurnHandle, exc: ContextOverflow,
                                compactions: list[CompactOutcome]) -> ContextProjection:
        """§11.3: recompute with the stated window, one summary unless this turn tried one,
        else a degraded whole-turn trim; the caller retries exactly once."""
        await self._learn_window(exc)
        handle._emit(CompactionStarted("overflow"))
        tried = any(o.summary_called for o in compactions)
        outcome = await self._compact("overflow", try_summary=not tried, degraded_fallback=True)
        compactions.append(outcome)
        handle._emit(Compacted(outcome))
        if not outcome.compacted:
            reason = outcome.error.message if outcome.error else "no summary"
            hint = (None if isinstance(outcome.error, ContextMisfit) else  # it says what to do
                    "shorten the message, or switch to a model with a larger window")
            raise ContextOverflow(f"{exc.message}, and compacting could not make it fit "
                                  f"({reason})", exc.window, hint)
        return outcome.projection

    async def _stream(self, handle: TurnHandle, draft: RequestDraft, parts: list[str],
                      step: int) -> "_Step":
        """One provider call; text goes to `parts` and the handle as it arrives, thinking to
        the handle (shown; saved only behind tool calls, for a provider that wants it back)."""
        def on_text(delta: TextDelta) -> None:
            parts.append(delta.text)
            handle._emit(delta)
            self._draft_soon(handle.turn_id, parts)

        used = self._measure(draft).used_tokens
        cap = answer_cap(self.limits, used)
        request = ProviderRequest(messages=tuple(draft.messages()), tools=tuple(draft.tools),
                                  max_tokens=cap)
        try:
            reply = await collect(self.provider, request, self.total_timeout, on_text,
                                  handle._emit)
        except ContextOverflow as exc:
            exc.asked = used + cap  # what the refused request asked of the window
            raise
        except TimeoutError:
            raise ProviderTimeout(f"no complete answer within {self.total_timeout:g} s",
                                  "retry, or check the provider") from None
        calls = reply.tool_calls
        if reply.finish == "length" and not calls and not "".join(parts).strip():
            how = "while still thinking" if reply.thinking.strip() else "before any text"
            raise ProviderError(f"the model reached its output limit {how}: no answer",
                                "ask again, or ask for less at once")
        steps = assemble_tool_calls(calls, handle.turn_id, step) if calls else ()
        return _Step(reply.usage, steps, reply.finish, reply.thinking)

    async def _fail(self, handle: TurnHandle, user_seq: int, parts: list[str],
                    error: PicochatError, compactions: Sequence[CompactOutcome] = ()) -> None:
        partial_seq = None
        text = "".join(parts)
        try:
            if text.strip():
                partial_seq = (await self._settle(
                    self.store.append_message, self.session_id, "assistant", text,
                    turn_id=handle.turn_id, status=INTERRUPTED))[0].seq
            elif self._draft_at:  # a draft of only whitespace: nothing to keep, nor to recover
                await self._settle(self.store.drop_draft, handle.turn_id)
        except PicochatError as exc:
            log.warning("partial_not_saved session=%s turn=%s kind=%s", self.session_id,
                        handle.turn_id, exc.kind)
        log.warning("turn_failed session=%s turn=%s kind=%s user_seq=%d partial_seq=%s",
                    self.session_id, handle.turn_id, error.kind, user_seq, partial_seq)
        handle._emit(TurnFailed(handle.turn_id, error, user_seq, partial_seq, tuple(compactions)))

"""One turn, from the user's message to its outcome.

A `TurnRun` owns everything one turn needs while it runs: the answer so far, the compactions it
ran, how many tool rounds it took, and its retry budget. The user's message is written before
the provider is called; a failed or cancelled turn keeps it, keeps any partial answer (marked
interrupted) and says what happened. While an answer streams, its text so far is saved as a
draft about once a second, so a process killed mid-answer loses at most that much.

How a turn recovers, each way at most once (a compaction before sending; a request refused as
too long, rate limited, or for the tools it offers), and what fails it at once, is decided by
picochat.recovery, whose docstring has the rules, and done here. After tools ran, the turn is
never restarted from the durable history: an overflow gets one request-local retry that leaves
out the earlier turns.
Tool calls run at most MAX_TOOL_STEPS rounds, MAX_CALLS_PER_ROUND calls a reply and
MAX_CALLS_PER_TURN a turn (a flood of calls is not run, and the model is told); the request after
that offers no tools, and calls that still come back are never run. Tool results are cut for a
request that would not fit the window, never in the durable history.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import traceback
from pathlib import Path
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, TypeVar

from picochat import crashpoints
from picochat.agent_loop import (
    MAX_CALLS_PER_TURN,
    MAX_TOOL_STEPS,
    ToolCall,
    assemble_tool_calls,
    fit_tool_results,
    not_run_note,
    oversized_result,
    plan_calls,
    this_turn_only,
)
from picochat.budget import (BudgetLimits, ContextBudget, FixedContextExceedsBudget, RequestDraft,
                             UsageSource, answer_cap, message_over_window, too_long_error)
from picochat.logs import where_details
from picochat.compaction.compact import CompactMode, CompactOutcome
from picochat.compaction.trim_failure import TrimImpossible
from picochat.config import CompactionConfig
from picochat.errors import PicochatError
from picochat.messages import INTERRUPTED, Message, NewMessage, TriggerReason
from picochat.prepare import prepare
from picochat.projection import ContextProjection, project
from picochat.providers.base import Provider, ProviderRequest, TextDelta, Usage, collect
from picochat.providers.errors import (
    ContextOverflow,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ToolsUnsupported,
)
from picochat.recovery import (Action, Do, Failure, Happened, Situation, Spent, before_send,
                               next_action)
from picochat.storage.store import Store
from picochat.tools.access import FileAccess
from picochat.tools.base import ERROR, ToolContext, ToolResult
from picochat.tools.registry import call_detail, run_tool
from picochat.traits import TraitsLearner
from picochat.turn_events import (
    Compacted,
    CompactionReview,
    CompactionStarted,
    Notice,
    RetryWaiting,
    ToolRan,
    TurnCancelled,
    TurnFailed,
    TurnFinished,
    TurnHandle,
    TurnStarted,
)



if TYPE_CHECKING:
    from picochat.compaction.preview import CompactionPreview

# A front end's review of an automatic compaction: the preview to commit, or None to drop it.
Reviewer = Callable[["CompactionPreview"], Awaitable["CompactionPreview | None"]]


class TurnContext(Protocol):
    """What a turn needs of its session, and all it may touch (`SessionWorker` is one). The
    turn reads the session's state and settings, asks it for the next request's draft and
    budget, hands its `traits` what the model's server taught (kept for later turns and
    processes), and asks it to compact."""

    store: Store
    session_id: str
    provider: Provider
    compaction: CompactionConfig
    total_timeout: float
    tool_root: Path
    tools: tuple[dict[str, Any], ...]
    traits: TraitsLearner  # what the model's server taught: window, tools, calibration

    @property
    def file_access(self) -> FileAccess: ...
    @property
    def limits(self) -> BudgetLimits: ...
    @property
    def closing(self) -> bool: ...

    # the state and the next request
    def projection(self) -> ContextProjection: ...
    def request_draft(self, projection: ContextProjection) -> RequestDraft: ...
    def budget(self, projection: ContextProjection | None = None) -> ContextBudget: ...
    def measure(self, draft: RequestDraft) -> ContextBudget: ...
    async def compact_now(self, reason: TriggerReason, *, focus: str | None = None,
                          mode: CompactMode | None = None,  # None: a summary
                          everything: bool = False) -> CompactOutcome: ...
    # an automatic compaction the user approves first (the app's, with `preview` on)
    reviewer: "Reviewer | None"
    async def preview_now(self, reason: TriggerReason, *, focus: str | None = None,
                          everything: bool = False) -> "CompactionPreview | CompactOutcome": ...
    async def commit_preview_now(self, preview: "CompactionPreview") -> CompactOutcome: ...
    async def drop_preview_now(self, preview: "CompactionPreview") -> None: ...

    # what a quit could not save
    def not_saved(self, handle: TurnHandle) -> None: ...
    def answer_not_saved(self, turn_id: str, text: str) -> None: ...

log = logging.getLogger("picochat.session")
T = TypeVar("T")

DRAFT_EVERY_S = 1.0          # how often the answer being streamed is saved as a draft
STILL_TOO_LONG_HINT = "shorten the message, /clear, or switch to a model with a larger window"
# what made the turn fail, as the user reads it (the provider's own error says it otherwise)
STILL_TOO_LONG = {Failure.STILL_TOO_LONG: "compacting once",
                  Failure.STILL_TOO_LONG_ALONE: "leaving out the earlier turns"}
HAPPENED = ((ContextOverflow, Happened.OVERFLOW), (RateLimited, Happened.RATE_LIMITED),
            (ToolsUnsupported, Happened.TOOLS_REFUSED))


class EmptyReply(ProviderError):
    """The model answered nothing: no text, no tool call."""


@dataclass(frozen=True)
class Step:
    """What one provider request of the turn brought back."""

    usage: Usage | None
    calls: tuple[ToolCall, ...]
    finish: str | None = None
    thinking: str = ""  # the reasoning model's thinking before this step's answer or calls


def internal_error(exc: BaseException, session_id: str, turn_id: str) -> PicochatError:
    """A bug inside a turn, logged with its traceback (code locations, no text) and turned
    into the one line the user sees, so the turn still ends in an outcome."""
    log.error("turn_crashed session=%s turn=%s kind=%s\n%s", session_id, turn_id,
              type(exc).__name__, "".join(traceback.format_tb(exc.__traceback__)))
    return PicochatError(f"internal error ({type(exc).__name__}); {where_details()}")


async def settle(store: Store, fn: Callable[..., T], *args: Any,
                 after: "asyncio.Task[None] | None" = None, **kwargs: Any) -> tuple[T, bool]:
    """A write on the store's thread that a cancel never leaves half-known: it returns the
    write's result, and whether the caller was cancelled while it ran (the caller decides what
    that cancel means once the row is known to be there). `after`: a draft save this write
    replaces, which goes first."""
    async def write() -> T:  # one shielded unit: a cancel interrupts neither part
        if after is not None:
            await asyncio.wait([after])
        return await store.io(fn, *args, **kwargs)

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


def append_new(store: Store, session_id: str, *news: NewMessage) -> list[Message]:
    """Append `news` in one transaction, each prepared first (`prepare`: valid text, token
    count, statements). Passed to `settle`, so both run on the store's thread: a long message
    is never counted on the event loop."""
    return store.append_messages(session_id, [prepare(n) for n in news])


def own_view(store: Store, projection: ContextProjection, user: Message) -> ContextProjection:
    """The history one turn sends: everything before its message, its message, and its own
    later rows. Another process may append to the session meanwhile: a turn begun there after
    this one (a later seq, another turn id) is left out, so this turn's request ends with its
    own question, not with someone else's. And if a `clear` or compaction of another process
    took this turn's own message out of the context after it was written, it is put back: a
    request must carry the question it answers.

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


class TurnRun:
    """One turn of `worker`'s session, reporting to `handle` (module docstring)."""

    def __init__(self, worker: TurnContext, handle: TurnHandle) -> None:
        self.worker = worker
        self.handle = handle
        self.store = worker.store
        self.session_id = worker.session_id
        self.turn_id = handle.turn_id
        self.parts: list[str] = []          # the answer's text so far (unsaved)
        self.compactions: list[CompactOutcome] = []
        self.spent = Spent()                # the one-shot recoveries used (picochat.recovery)
        self.steps = 0                      # tool rounds run
        self.calls_run = 0                  # tool calls run (MAX_CALLS_PER_TURN)
        self.call_ids: set[str] = set()     # ids given this turn's calls: kept unique
        self.usage: Usage | None = None
        self.user: Message | None = None
        self._draft_task: asyncio.Task[None] | None = None
        self._draft_at = 0.0

    # --- the turn ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Write the user's message, get the answer, save it; always end in one outcome."""
        handle = self.handle
        try:
            # a message over the whole window could never be answered and, once stored, would
            # be in every later request: refused before it is sent or saved (both front ends)
            limits = self.worker.limits
            size = await asyncio.to_thread(message_over_window, handle.text, limits)
            if size is not None:
                log.info("turn_refused session=%s turn=%s kind=message_too_long tokens=%d "
                         "window=%d", self.session_id, self.turn_id, size, limits.window)
                handle._emit(TurnFailed(self.turn_id, too_long_error(size, limits), None, None))
                return
            [user], cancelled = await self._settle(
                append_new, self.store, self.session_id,
                NewMessage("user", handle.text, turn_id=self.turn_id))
            self.user = user
        except Exception as exc:  # a turn always ends in an outcome, even on a bug
            if not isinstance(exc, PicochatError):
                exc = internal_error(exc, self.session_id, self.turn_id)
            log.warning("turn_failed session=%s turn=%s kind=%s stage=user_message",
                        self.session_id, self.turn_id, exc.kind)
            if self.worker.closing:  # no prompt to take it back: the app keeps it
                self.worker.not_saved(handle)
            handle._emit(TurnFailed(self.turn_id, exc, None, None))
            return
        crashpoints.reached("user_written")
        assert self.user is not None  # written, or the turn failed above
        handle._emit(TurnStarted(self.turn_id, self.user.seq))
        if cancelled:
            await self._fail(TurnCancelled("stopped"))
            return
        try:
            draft, step = await self._answer()
            reply = "".join(self.parts)
            # a stop pressed while the whole answer is being saved comes too late: it is saved
            [assistant], _ = await self._settle(
                append_new, self.store, self.session_id,
                NewMessage("assistant", reply, turn_id=self.turn_id,
                           reasoning=self._kept_thinking(step)))
        except asyncio.CancelledError:
            await self._fail(TurnCancelled("stopped"))
            return
        except PicochatError as exc:
            await self._fail(exc)
            return
        except Exception as exc:  # a bug, not a provider problem: still keep the user's data
            await self._fail(internal_error(exc, self.session_id, self.turn_id))
            return
        await self.worker.traits.learn_from_reply(self.usage,
                                                  draft if self.steps == 0 else None)
        usage = self.usage
        assert self.user is not None  # the turn began with it
        log.info("turn_ok session=%s turn=%s user_seq=%d assistant_seq=%d tool_steps=%d "
                 "prompt_tokens=%s completion_tokens=%s", self.session_id, self.turn_id,
                 self.user.seq, assistant.seq, self.steps,
                 usage.prompt_tokens if usage else None,
                 usage.completion_tokens if usage else None)
        handle._emit(TurnFinished(self.turn_id, reply, usage, assistant.seq,
                                  tuple(self.compactions), step.finish))

    async def _answer(self) -> tuple[RequestDraft, Step]:
        """Requests until the model answers without tool calls: tool rounds, and the one-shot
        recoveries of the module docstring. Returns the last request and what it brought."""
        assert self.user is not None
        projection = await self._before_send()
        while True:
            view = self._request_view(own_view(self.store, projection, self.user))
            draft = self.worker.request_draft(view)
            if self.steps >= MAX_TOOL_STEPS or self.calls_run >= MAX_CALLS_PER_TURN:
                # enough tools: ask for the answer
                draft = dataclasses.replace(draft, tools=())
            try:
                step = await self._stream(draft)
                if not step.calls and not "".join(self.parts).strip():
                    raise EmptyReply("the model returned an empty reply", "try again")
            except (ContextOverflow, RateLimited, ToolsUnsupported, EmptyReply) as exc:
                recovered = await self._recover(exc, draft)
                if recovered is not None:
                    projection = recovered
                continue
            self.usage = step.usage or self.usage
            if step.calls and not draft.tools:  # asked of a request that offered none
                self._ignore_calls(step)
                return draft, step
            if not step.calls:
                return draft, step
            self.steps += 1
            await self._run_tools(step)
            projection = self.worker.projection()

    async def _recover(self, exc: ProviderError, draft: RequestDraft
                       ) -> ContextProjection | None:
        """`draft` failed with `exc`: do what picochat.recovery says this turn still has for
        it, or raise. Returns the compacted context, or None to build the request again."""
        situation = self._situation(exc, draft)
        window = exc.window if isinstance(exc, ContextOverflow) else None
        while True:
            action = next_action(situation)
            self.spent = self.spent.after(action)
            if action.learn:
                await self.worker.traits.learn_window(window)
            if action.do is Do.FAIL:
                if action.failure is Failure.AS_IS:
                    raise exc
                raise self._too_long(action.failure, exc, window) from None
            if action.do is Do.MEASURE:  # the window is learned: do the same messages fit it?
                assert window is not None
                fits = not (self.worker.limits.window > window
                            or self.worker.budget().should_compact(True))
                situation = dataclasses.replace(situation, fits_learned=fits)
                continue
            if action.do is Do.COMPACT:
                outcome = await self._compact(action)
                if outcome.compacted:
                    return outcome.projection
                situation = dataclasses.replace(situation, happened=Happened.NOT_COMPACTED)
                continue
            if action.do is Do.WAIT:  # said to the user; a stop meanwhile ends the turn as usual
                log.info("retry_wait session=%s kind=%s seconds=%g", self.session_id, exc.kind,
                         action.wait_s)
                self.handle._emit(RetryWaiting(action.wait_s, exc))
                await asyncio.sleep(action.wait_s)
            elif action.do is Do.WITHOUT_TOOLS:
                await self.worker.traits.refuse_tools(self.handle._emit)
            elif action.do is Do.REFIT:
                log.info("overflow_refit session=%s window=%s", self.session_id, window)
            return None  # and the request is built again (THIS_TURN_ONLY: `_request_view`)

    def _situation(self, exc: ProviderError, draft: RequestDraft) -> Situation:
        """What `exc` says happened to `draft`, and where this turn stands."""
        happened = next((h for kind, h in HAPPENED if isinstance(exc, kind)), Happened.EMPTY)
        over = isinstance(exc, ContextOverflow) and bool(
            exc.window and exc.asked and exc.asked > exc.window)
        return Situation(happened, self.spent, streamed=bool(self.parts),
                         tools_offered=bool(draft.tools), tools_ran=self.steps > 0,
                         summary_tried=any(o.summary_called for o in self.compactions),
                         misfit=isinstance(exc, ContextOverflow) and exc.misfit,
                         asked_over_stated=over,
                         retry_after=exc.retry_after if isinstance(exc, RateLimited) else None)

    def _too_long(self, failure: Failure | None, exc: ProviderError, window: int | None
                  ) -> ContextOverflow:
        """The line of an overflow the turn could not recover from."""
        if failure in STILL_TOO_LONG:
            return ContextOverflow("the request is still too long for the model after "
                                   f"{STILL_TOO_LONG[failure]}", window, STILL_TOO_LONG_HINT)
        outcome = self.compactions[-1]  # Failure.NOT_FIT: the overflow's compaction failed
        reason = outcome.error.message if outcome.error else "no summary"
        # a trim's own line names the real cause and its remedy (a misfit's is in its message)
        hint = (outcome.error.hint if isinstance(outcome.error, TrimImpossible)
                else "shorten the message, or switch to a model with a larger window")
        return ContextOverflow(f"{exc.message}, and compacting could not make it fit "
                               f"({reason})", window, hint)

    def _ignore_calls(self, step: Step) -> None:
        """Tool calls from a request that offered no tools are never run: the turn ends with
        the text that came with them, or fails with a line that says why."""
        log.warning("tool_calls_ignored session=%s turn=%s calls=%d tool_steps=%d",
                    self.session_id, self.turn_id, len(step.calls), self.steps)
        if "".join(self.parts).strip():
            return
        if self.steps:
            raise ProviderError(f"the model still asked for tools after {self.steps} rounds "
                                "of them and gave no answer", "ask again, or ask for less "
                                "at once")
        raise ProviderError("the model asked for a tool although none was offered, and gave "
                            "no answer", "ask again; if it keeps happening, switch models")

    def _request_view(self, projection: ContextProjection) -> ContextProjection:
        """The request-local copy a tool round sends: old tool results shortened when the
        request would not fit; after an overflow, only this turn (and the summary)."""
        assert self.user is not None
        if self.steps == 0:
            return projection
        if self.spent.local:
            projection = this_turn_only(projection, self.user.seq)

        def fits(view: ContextProjection) -> bool:
            return not self.worker.budget(view).over_window
        # never a request over the window: tool results are cut for this request alone
        return projection if fits(projection) else fit_tool_results(projection, self.user.seq,
                                                                    fits)

    # --- the provider --------------------------------------------------------------------------

    async def _stream(self, draft: RequestDraft) -> Step:
        """One provider call; text goes to `parts` and the handle as it arrives, thinking to
        the handle (shown; saved only behind tool calls, for a provider that wants it back)."""
        worker, handle = self.worker, self.handle

        def on_text(delta: TextDelta) -> None:
            self.parts.append(delta.text)
            handle._emit(delta)
            self._draft_soon()

        budget = worker.measure(draft)
        cap = answer_cap(worker.limits, budget.used_tokens,
                         exact=budget.usage_source == UsageSource.PROVIDER)
        request = ProviderRequest(messages=tuple(draft.messages()), tools=tuple(draft.tools),
                                  max_tokens=cap)
        try:
            reply = await collect(worker.provider, request, worker.total_timeout, on_text,
                                  handle._emit)
        except ContextOverflow as exc:
            exc.asked = budget.used_tokens + cap  # what the refused request asked of the window
            raise
        except TimeoutError:
            raise ProviderTimeout(f"no complete answer within {worker.total_timeout:g} s",
                                  "retry, or check the provider") from None
        calls = reply.tool_calls
        if reply.finish == "length" and not calls and not "".join(self.parts).strip():
            how = "while still thinking" if reply.thinking.strip() else "before any text"
            raise ProviderError(f"the model reached its output limit {how}: no answer",
                                "ask again, or ask for less at once")
        steps = assemble_tool_calls(calls, self.turn_id, self.steps) if calls else ()
        return Step(reply.usage, steps, reply.finish, reply.thinking)

    # --- tools ---------------------------------------------------------------------------------

    def _kept_thinking(self, step: Step) -> str | None:
        """The thinking saved with an assistant row: only for a provider that wants it back
        (DeepSeek), and only in a turn that called tools (`steps` counts a round before its
        row is written). Its docs ask for every assistant message between two user messages
        once the model called a tool there, the answer that follows the results included; a
        plain turn's thinking it ignores."""
        if not self.worker.provider.keeps_thinking or not self.steps:
            return None
        return step.thinking if step.thinking.strip() else None

    async def _run_tools(self, step: Step) -> None:
        """Run each call once, then persist the assistant's text and calls (with its thinking
        when the provider wants that back) and every result, in order, in one transaction:
        another writer can never land between a call and its results, and a crash leaves
        all of them or none. `parts` is emptied: that text is saved. A stop pressed meanwhile
        takes effect once they are saved."""
        assert self.user is not None
        plan = plan_calls(step.calls, self.calls_run, self.call_ids)
        calls = plan.run
        results, stopped = await self._run_calls(calls, plan.oversized)
        self.calls_run += len(calls)
        if plan.not_run:
            log.warning("tool_calls_capped session=%s turn=%s asked=%d run=%d not_run=%d",
                        self.session_id, self.turn_id, len(step.calls), len(calls),
                        plan.not_run)
            last = results[-1]
            results[-1] = dataclasses.replace(last, content=last.content + not_run_note(plan))
            self.handle._emit(Notice("tools_capped", (
                f"the model asked for {len(step.calls):,} tool calls at once; "
                f"{len(calls)} ran, {plan.not_run:,} did not ({plan.cap})")))
        rows, stopped_saving = await self._settle(append_new, self.store, self.session_id,
            NewMessage("assistant", "".join(self.parts), tuple(c.openai() for c in calls),
                       turn_id=self.turn_id, reasoning=self._kept_thinking(step)),
            *(NewMessage("tool", result.content, tool_call_id=call.id, name=call.name,
                         turn_id=self.turn_id, tool_status=result.status)
              for call, result in zip(calls, results)))
        self.parts.clear()
        for call, result, row in zip(calls, results, rows[1:]):
            log.info("tool_ran session=%s turn=%s tool=%s status=%s seq=%d chars=%d",
                     self.session_id, self.turn_id, call.name, result.status, row.seq,
                     len(result.content))
            self.handle._emit(ToolRan(call.id, call.name, result.status, row.seq,
                                      call_detail(call.name, call.arguments, result.content)))
        if stopped or stopped_saving:
            raise asyncio.CancelledError

    async def _run_calls(self, calls: tuple[ToolCall, ...], oversized: frozenset[str]
                         ) -> tuple[list[ToolResult], bool]:
        """Each call once, on the store's thread (the event loop keeps drawing and hears
        Esc). A stop lets the running call end; the calls after it are not run, and say so.
        Returns the results and whether a stop came."""
        assert self.user is not None
        worker = self.worker
        context = ToolContext(self.store, self.session_id, worker.tool_root,
                              before_seq=self.user.seq, access=worker.file_access)
        names = [t["function"]["name"] for t in worker.tools]
        results: list[ToolResult] = []
        stopped = False
        for call in calls:
            if stopped:
                results.append(ToolResult(ERROR, "not run: the user stopped the turn"))
                continue
            if call.id in oversized:
                results.append(ToolResult(ERROR, oversized_result()))
                continue
            job = asyncio.ensure_future(self.store.io(run_tool, call.name, call.arguments,
                                                      context, enabled=names))
            try:
                results.append(await asyncio.shield(job))
            except asyncio.CancelledError:  # the call under way ends, and its result stands
                stopped = True
                results.append(await job)
        return results, stopped

    # --- compaction ----------------------------------------------------------------------------

    async def _before_send(self) -> ContextProjection:
        """Budget the full draft, compact at most once, and return the context to send.

        Over the threshold, auto compaction runs (when enabled). A failed summary leaves the
        context as it was, unless the draft is already over the hard window: then a degraded
        checkpoint now beats a request bound to fail. That check holds with auto compaction
        off too: it is the overflow recovery, done before the request instead of after.
        """
        worker = self.worker
        projection = worker.projection()
        if projection.repairs or projection.diagnostics:
            log.warning("projection_repaired session=%s repairs=%d diagnostics=%d",
                        self.session_id, len(projection.repairs), len(projection.diagnostics))
        budget = worker.budget(projection)
        action = before_send(auto=budget.should_compact(worker.compaction.enabled),
                             over_window=budget.over_window,
                             fixed_over_threshold=budget.fixed_exceeds_threshold)
        if action.do is Do.FAIL:
            raise FixedContextExceedsBudget(budget.parts, budget.limits.threshold)
        if action.do is Do.SEND:
            return projection
        outcome = await self._compact(action)
        return outcome.projection  # the durable context now, committed or not

    async def _compact(self, action: Action) -> CompactOutcome:
        """A COMPACT action: the compaction it names, announced before and after. An
        automatic one within the window is shown to the app's reviewer first, when there is
        one (`[context_compaction] preview`): it commits what the user approved, or nothing."""
        reason, mode = action.reason, action.mode
        assert reason is not None and mode is not None
        self.handle._emit(CompactionStarted(reason))
        reviewer = self.worker.reviewer
        if reviewer is not None and reason == TriggerReason.AUTO and not mode.may_trim:
            outcome = await self._reviewed(reviewer)
        else:
            outcome = await self.worker.compact_now(reason, mode=mode)
        self.compactions.append(outcome)
        self.handle._emit(Compacted(outcome))
        return outcome

    async def _reviewed(self, reviewer: Reviewer) -> CompactOutcome:
        from picochat.compaction.compact import NOTHING_TO_COMPACT
        from picochat.compaction.preview import CompactionPreview

        got = await self.worker.preview_now(TriggerReason.AUTO)
        if not isinstance(got, CompactionPreview):
            return got
        self.handle._emit(CompactionReview())
        chosen = await reviewer(got)
        if chosen is not None:
            return await self.worker.commit_preview_now(chosen)
        await self.worker.drop_preview_now(got)
        return CompactOutcome(NOTHING_TO_COMPACT, TriggerReason.AUTO, got.step.projection,
                              tokens_before=got.tokens_before,
                              deferred="you dropped its preview; it is offered again once "
                                       "the context has grown")

    # --- saving --------------------------------------------------------------------------------

    async def _settle(self, fn: Callable[..., T], *args: Any, **kwargs: Any
                      ) -> tuple[T, bool]:
        """`settle`, after the draft save this write replaces."""
        return await settle(self.store, fn, *args, after=self._draft_task, **kwargs)

    def _draft_soon(self) -> None:
        """Save the answer so far as the turn's draft, at most every DRAFT_EVERY_S and one
        save at a time (a save waiting for a lock is not queued behind by more)."""
        now = time.monotonic()
        if (self._draft_task is not None and not self._draft_task.done()) or \
                now - self._draft_at < DRAFT_EVERY_S:
            return
        self._draft_at = now
        self._draft_task = asyncio.create_task(self._save_draft("".join(self.parts)))

    async def _save_draft(self, text: str) -> None:
        try:
            await self.store.io(self.store.drafts.save, self.session_id, self.turn_id, text)
        except PicochatError as exc:  # the answer itself is still saved when it ends
            log.warning("draft_not_saved session=%s turn=%s kind=%s", self.session_id,
                        self.turn_id, exc.kind)

    async def _fail(self, error: PicochatError) -> None:
        """End the turn with `error`: the user's message stays, and any partial answer is
        saved, marked interrupted."""
        assert self.user is not None
        partial_seq = None
        text = "".join(self.parts)
        try:
            if text.strip():
                partial_seq = (await self._settle(
                    append_new, self.store, self.session_id,
                    NewMessage("assistant", text, turn_id=self.turn_id, status=INTERRUPTED)
                ))[0][0].seq
            elif self._draft_at:  # a draft of only whitespace: nothing to keep, nor to recover
                await self._settle(self.store.drafts.drop, self.turn_id)
        except PicochatError as exc:
            log.warning("partial_not_saved session=%s turn=%s kind=%s", self.session_id,
                        self.turn_id, exc.kind)
            if self.worker.closing and text.strip():  # kept beside the database instead
                self.worker.answer_not_saved(self.turn_id, text)
        log.warning("turn_failed session=%s turn=%s kind=%s user_seq=%d partial_seq=%s",
                    self.session_id, self.turn_id, error.kind, self.user.seq, partial_seq)
        self.handle._emit(TurnFailed(self.turn_id, error, self.user.seq, partial_seq,
                                     tuple(self.compactions)))

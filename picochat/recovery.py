"""How a turn recovers when a request goes wrong: the policy, as pure functions.

`TurnRun` (picochat.turn) carries out what these decide. Before its first request it asks
`before_send` whether the draft must be compacted first; when a request fails it describes what
happened and what the turn has already spent (`Situation`), and `next_action` says what to do
(`Action`); after doing it, the turn records what that spent (`Spent.after`). Nothing here does
I/O or awaits: tests/test_recovery.py is the specification, a row per rule, and a property test
that no sequence of failures makes a turn loop.

The rules, first match wins (DESIGN.md D11.2-D11.4; ARCHITECTURE.md rules 6, 7 and 10):

before the first request (once a turn)
- under the threshold and the window: send it;
- the fixed part (system prompt, tools, pins) over the threshold: compacting cannot help, so
  send it while it fits the window, else fail (FixedContextExceedsBudget);
- over the threshold with auto compaction on: compact (auto), a summary; over the hard window,
  also with auto compaction off: compact (overflow), a summary, else a degraded trim.

the provider says the request is too long
- some of the answer streamed: fail with the provider's error (the partial answer is kept);
- a misfit (the stated window is wrong) after a recovery: fail with its own line, which names
  the remedy ("still too long" would mislead);
- after a tool round: the turn is never restarted from durable history, so learn the window
  and resend this turn's rows alone, once; a second refusal fails;
- after the overflow compaction: fail (one compaction a turn);
- the request asked more than the window it stated: learn the window, and if the same messages
  sit under its threshold, resend them with the answer cap it gives (once, no compaction);
- else learn the window, compact (a summary unless this turn already called one, else a
  degraded whole-turn trim) and resend; a compaction that commits nothing fails the turn.

the server refuses requests that offer tools: resend without them (tools stay off for the
model), once; with text streamed, or no tools offered, fail.
429, 503, 529: wait (Retry-After, else RETRY_WAIT_DEFAULT_S) and resend, once; a longer wait
than RETRY_WAIT_LIMIT_S, or text streamed, fails (the wait is the user's call).
an empty reply: fail (the provider already asked once more unstreamed).

Every resend spends a one-shot recovery, so a turn sends at most five requests more than its
tool rounds need; every failure keeps the user's message and any partial answer (`TurnRun`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

from picochat.compaction.compact import CompactMode
from picochat.messages import TriggerReason

RETRY_WAIT_DEFAULT_S = 5.0   # a 429/503/529 that names no Retry-After
RETRY_WAIT_LIMIT_S = 30.0    # a longer Retry-After fails the turn: waiting is the user's call


class Happened(StrEnum):
    """What went wrong with the turn's last request."""

    OVERFLOW = "overflow"              # the provider said the request is too long
    NOT_COMPACTED = "not_compacted"    # the overflow's compaction committed nothing
    TOOLS_REFUSED = "tools_refused"    # the server refuses requests that offer tools
    RATE_LIMITED = "rate_limited"      # 429, 503 or 529
    EMPTY = "empty"                    # the model answered nothing


class Do(StrEnum):
    """What the turn does next."""

    SEND = "send"                      # send the request as it is (before_send only)
    COMPACT = "compact"                # compact (`reason`, `mode`), then send what it leaves
    WAIT = "wait"                      # wait `wait_s`, then send the same request again
    WITHOUT_TOOLS = "without_tools"    # the model refuses tools from now on; send again
    MEASURE = "measure"                # see if the messages fit the learned window; ask again
    REFIT = "refit"                    # send the same messages, with the cap the window gives
    THIS_TURN_ONLY = "this_turn_only"  # send this turn's rows alone (tools ran)
    FAIL = "fail"                      # end the turn with `failure`


class Failure(StrEnum):
    """Why the turn fails, which says which line the user gets."""

    AS_IS = "as_is"                    # the provider's own error: its line says what to do
    FIXED_TOO_BIG = "fixed_too_big"    # the system prompt, tools and pins alone do not fit
    STILL_TOO_LONG = "still_too_long"  # refused again after the overflow compaction
    STILL_TOO_LONG_ALONE = "still_too_long_alone"  # refused again with this turn's rows alone
    NOT_FIT = "not_fit"                # compacting could not make the request fit


@dataclass(frozen=True)
class Action:
    do: Do
    learn: bool = False                # first learn the window the refusal stated
    reason: TriggerReason | None = None  # COMPACT
    mode: CompactMode | None = None      # COMPACT
    wait_s: float = 0.0                  # WAIT
    failure: Failure | None = None       # FAIL


def fail(failure: Failure) -> Action:
    return Action(Do.FAIL, failure=failure)


SEND = Action(Do.SEND)


@dataclass(frozen=True)
class Spent:
    """The one-shot recoveries a turn has used: each at most once a turn."""

    waited: bool = False          # the wait for a rate-limited or overloaded provider
    refitted: bool = False        # the resend with an answer cap that fits a learned window
    compacted: bool = False       # the overflow recovery by compaction, before any tool ran
    local: bool = False           # the resend of this turn's rows alone, after a tool round
    tools_refused: bool = False   # the resend without tools

    def after(self, action: Action) -> "Spent":
        """What the turn has spent once it has done `action` of `next_action`."""
        field = _SPENDS.get(action.do)
        return dataclasses.replace(self, **{field: True}) if field else self


_SPENDS = {Do.WAIT: "waited", Do.REFIT: "refitted", Do.COMPACT: "compacted",
           Do.THIS_TURN_ONLY: "local", Do.WITHOUT_TOOLS: "tools_refused"}


@dataclass(frozen=True)
class Situation:
    """What happened to the turn's last request, and where the turn stands."""

    happened: Happened
    spent: Spent = Spent()
    streamed: bool = False        # some of the answer's text arrived (it is kept, never resent)
    tools_offered: bool = False   # the request offered tools
    tools_ran: bool = False       # a tool round ran this turn (its rows are saved)
    summary_tried: bool = False   # a compaction this turn called for a summary
    # an overflow's own facts
    misfit: bool = False          # the request was far under the stated window: it is wrong
    asked_over_stated: bool = False  # it stated a window, and the request asked more of it
    fits_learned: bool | None = None  # MEASURE's finding: the messages fit the learned window
    # a rate limit's
    retry_after: float | None = None  # seconds the provider asked to wait


def before_send(*, auto: bool, over_window: bool, fixed_over_threshold: bool) -> Action:
    """What the turn does with its first draft: `auto`, auto compaction is on and the draft is
    over its threshold; `over_window`, over the hard window (module docstring)."""
    if not auto and not over_window:
        return SEND
    if fixed_over_threshold:  # compacting cannot help; send if it still fits
        return fail(Failure.FIXED_TOO_BIG) if over_window else SEND
    return Action(Do.COMPACT, reason=TriggerReason.AUTO if auto else TriggerReason.OVERFLOW,
                  mode=CompactMode.SUMMARY_OR_TRIM if over_window else CompactMode.SUMMARY)


def next_action(s: Situation) -> Action:
    """What the turn does about `s` (module docstring)."""
    spent = s.spent
    if s.happened is Happened.OVERFLOW:
        return _after_overflow(s)
    if s.happened is Happened.NOT_COMPACTED:
        return fail(Failure.NOT_FIT)
    if s.happened is Happened.TOOLS_REFUSED:
        if s.streamed or not s.tools_offered or spent.tools_refused:
            return fail(Failure.AS_IS)
        return Action(Do.WITHOUT_TOOLS)
    if s.happened is Happened.RATE_LIMITED:
        wait = RETRY_WAIT_DEFAULT_S if s.retry_after is None else s.retry_after
        if s.streamed or spent.waited or wait > RETRY_WAIT_LIMIT_S:
            return fail(Failure.AS_IS)
        return Action(Do.WAIT, wait_s=max(0.0, wait))
    return fail(Failure.AS_IS)  # Happened.EMPTY: the provider already asked once more


def _after_overflow(s: Situation) -> Action:
    spent = s.spent
    if s.streamed:
        return fail(Failure.AS_IS)
    if s.misfit and (spent.compacted or spent.local):
        return fail(Failure.AS_IS)
    if s.tools_ran:  # never restart the turn from durable history
        return (fail(Failure.STILL_TOO_LONG_ALONE) if spent.local
                else Action(Do.THIS_TURN_ONLY, learn=True))
    if spent.compacted:
        return fail(Failure.STILL_TOO_LONG)
    if s.asked_over_stated and not spent.refitted:
        if s.fits_learned is None:
            return Action(Do.MEASURE, learn=True)
        if s.fits_learned:
            return Action(Do.REFIT)
    return Action(Do.COMPACT, learn=s.fits_learned is None, reason=TriggerReason.OVERFLOW,
                  mode=CompactMode.TRIM if s.summary_tried else CompactMode.SUMMARY_OR_TRIM)

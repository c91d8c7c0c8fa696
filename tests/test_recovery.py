"""How a turn recovers (picochat.recovery), as a table: a row per rule, what went wrong and what
the turn had spent on the left, what it does on the right. Then the invariants, tried against
random sequences of failures by a model of `TurnRun` that carries out the actions.

The end-to-end tests (test_overflow_e2e, test_real_servers, test_session_worker) show the same
rules through the worker and a fake server; these show the policy alone, all of it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picochat.agent_loop import MAX_TOOL_STEPS
from picochat.compaction.compact import CompactMode
from picochat.messages import TriggerReason
from picochat.recovery import (
    RETRY_WAIT_DEFAULT_S,
    RETRY_WAIT_LIMIT_S,
    SEND,
    Action,
    Do,
    Failure,
    Happened,
    Situation,
    Spent,
    before_send,
    next_action,
)

SUMMARY_OR_TRIM, TRIM, SUMMARY = (CompactMode.SUMMARY_OR_TRIM, CompactMode.TRIM,
                                  CompactMode.SUMMARY)


def compact(mode: CompactMode, learn: bool = True,
            reason: TriggerReason = TriggerReason.OVERFLOW) -> Action:
    return Action(Do.COMPACT, learn=learn, reason=reason, mode=mode)


def fails(failure: Failure = Failure.AS_IS) -> Action:
    return Action(Do.FAIL, failure=failure)


def too_long(**facts) -> Situation:
    return Situation(Happened.OVERFLOW, **facts)


def spent(*names: str) -> Spent:
    return Spent(**{name: True for name in names})


AS_IS = fails()
LEARN_AND_RESEND_ALONE = Action(Do.THIS_TURN_ONLY, learn=True)
MEASURE = Action(Do.MEASURE, learn=True)
REFIT = Action(Do.REFIT)
WITHOUT_TOOLS = Action(Do.WITHOUT_TOOLS)


def wait(seconds: float) -> Action:
    return Action(Do.WAIT, wait_s=seconds)


RULES = [
    # --- the provider says the request is too long ---------------------------------------------
    (too_long(), compact(SUMMARY_OR_TRIM),
     "a first refusal: learn the window, compact (a summary, else a trim), send once more"),
    (too_long(summary_tried=True), compact(TRIM),
     "the turn already called for a summary (auto compaction): no second one, a degraded trim"),
    (too_long(misfit=True), compact(SUMMARY_OR_TRIM),
     "a misfit before any recovery is recovered like any refusal"),
    (too_long(streamed=True), AS_IS,
     "some of the answer streamed: fail with the provider's error, the partial answer kept"),
    (too_long(streamed=True, tools_ran=True), AS_IS,
     "streamed after a tool round: the same"),
    (too_long(spent=spent("compacted")), fails(Failure.STILL_TOO_LONG),
     "refused again after the compaction: the turn fails (one compaction a turn)"),
    (too_long(spent=spent("compacted"), asked_over_stated=True), fails(Failure.STILL_TOO_LONG),
     "refused again after the compaction, however little it asked over: the turn fails"),
    (too_long(spent=spent("compacted"), misfit=True), AS_IS,
     "a misfit after the compaction: its own line names the remedy, not 'still too long'"),
    (too_long(tools_ran=True), LEARN_AND_RESEND_ALONE,
     "after a tool round: learn the window, send this turn's rows alone, never restart it"),
    (too_long(tools_ran=True, spent=spent("compacted")), LEARN_AND_RESEND_ALONE,
     "after a tool round the compaction before it does not count: this turn's rows alone"),
    (too_long(tools_ran=True, asked_over_stated=True), LEARN_AND_RESEND_ALONE,
     "after a tool round no refit: this turn's rows alone"),
    (too_long(tools_ran=True, summary_tried=True), LEARN_AND_RESEND_ALONE,
     "after a tool round no compaction at all, even a trim"),
    (too_long(tools_ran=True, spent=spent("local")), fails(Failure.STILL_TOO_LONG_ALONE),
     "refused again with this turn's rows alone: the turn fails"),
    (too_long(tools_ran=True, spent=spent("local"), misfit=True), AS_IS,
     "a misfit after the request-local retry: its own line"),
    (too_long(asked_over_stated=True), MEASURE,
     "it asked more than the window it stated: learn it, and see if the messages fit it"),
    (too_long(asked_over_stated=True, fits_learned=True), REFIT,
     "they fit the learned window: the same messages, with the cap it gives, no compaction"),
    (too_long(asked_over_stated=True, fits_learned=False), compact(SUMMARY_OR_TRIM, learn=False),
     "they do not: compact (the window is learned already) and send once more"),
    (too_long(asked_over_stated=True, fits_learned=False, summary_tried=True),
     compact(TRIM, learn=False), "they do not, and a summary was tried: a trim"),
    (too_long(asked_over_stated=True, spent=spent("refitted")), compact(SUMMARY_OR_TRIM),
     "refused again after the refit: learn, compact, send once more"),
    (Situation(Happened.NOT_COMPACTED), fails(Failure.NOT_FIT),
     "the compaction committed nothing: the turn fails, saying why"),
    # --- the server refuses requests that offer tools ------------------------------------------
    (Situation(Happened.TOOLS_REFUSED, tools_offered=True), WITHOUT_TOOLS,
     "tools refused: off for this model from now on, the request again without them"),
    (Situation(Happened.TOOLS_REFUSED, tools_offered=True, tools_ran=True), WITHOUT_TOOLS,
     "tools refused after a tool round: the same"),
    (Situation(Happened.TOOLS_REFUSED), AS_IS,
     "refused although none were offered: the server means something else, fail"),
    (Situation(Happened.TOOLS_REFUSED, tools_offered=True, streamed=True), AS_IS,
     "refused after text streamed: fail, the partial answer kept"),
    (Situation(Happened.TOOLS_REFUSED, tools_offered=True, spent=spent("tools_refused")), AS_IS,
     "refused a second time: fail"),
    # --- 429, 503, 529 -------------------------------------------------------------------------
    (Situation(Happened.RATE_LIMITED), wait(RETRY_WAIT_DEFAULT_S),
     "no Retry-After: wait the default, send once more"),
    (Situation(Happened.RATE_LIMITED, retry_after=12.0), wait(12.0),
     "a Retry-After: wait that long, send once more"),
    (Situation(Happened.RATE_LIMITED, retry_after=RETRY_WAIT_LIMIT_S), wait(RETRY_WAIT_LIMIT_S),
     "a Retry-After at the limit is still waited"),
    (Situation(Happened.RATE_LIMITED, retry_after=RETRY_WAIT_LIMIT_S + 1), AS_IS,
     "a longer one fails: waiting is the user's call, and the line says when"),
    (Situation(Happened.RATE_LIMITED, retry_after=-3.0), wait(0.0),
     "a Retry-After in the past: send again at once"),
    (Situation(Happened.RATE_LIMITED, spent=spent("waited")), AS_IS,
     "limited again after the wait: fail"),
    (Situation(Happened.RATE_LIMITED, streamed=True), AS_IS,
     "limited after text streamed: fail, the partial answer kept"),
    # --- the model answers nothing -------------------------------------------------------------
    (Situation(Happened.EMPTY), AS_IS,
     "an empty reply fails (the provider already asked once more, unstreamed)"),
    (Situation(Happened.EMPTY, tools_ran=True, tools_offered=True), AS_IS,
     "an empty reply after a tool round: the same"),
]


@pytest.mark.parametrize("situation, action", [pytest.param(s, a, id=rule)
                                               for s, a, rule in RULES])
def test_next_action(situation, action):
    assert next_action(situation) == action


BEFORE_SEND = [
    # auto: auto compaction on and over the threshold; over: over the hard window
    (dict(auto=False, over_window=False, fixed_over_threshold=False), SEND,
     "under the threshold and the window: send"),
    (dict(auto=True, over_window=False, fixed_over_threshold=False),
     compact(SUMMARY, learn=False, reason=TriggerReason.AUTO),
     "over the threshold: auto compaction, a summary (a failed one sends the draft as it was)"),
    (dict(auto=True, over_window=True, fixed_over_threshold=False),
     compact(SUMMARY_OR_TRIM, learn=False, reason=TriggerReason.AUTO),
     "over the window too: a summary, else a degraded trim rather than a request bound to fail"),
    (dict(auto=False, over_window=True, fixed_over_threshold=False),
     compact(SUMMARY_OR_TRIM, learn=False),
     "auto compaction off, over the window: the overflow recovery, before the request"),
    (dict(auto=True, over_window=False, fixed_over_threshold=True), SEND,
     "the fixed part alone is over the threshold: compacting cannot help; it fits, send it"),
    (dict(auto=True, over_window=True, fixed_over_threshold=True),
     fails(Failure.FIXED_TOO_BIG), "and over the window: fail, never delete the history"),
    (dict(auto=False, over_window=True, fixed_over_threshold=True),
     fails(Failure.FIXED_TOO_BIG), "auto compaction off: the same"),
]


@pytest.mark.parametrize("draft, action", [pytest.param(d, a, id=rule)
                                           for d, a, rule in BEFORE_SEND])
def test_before_send(draft, action):
    assert before_send(**draft) == action


@pytest.mark.parametrize("action, field", [
    (wait(1.0), "waited"), (REFIT, "refitted"), (compact(SUMMARY_OR_TRIM), "compacted"),
    (LEARN_AND_RESEND_ALONE, "local"), (WITHOUT_TOOLS, "tools_refused"),
    (MEASURE, None), (AS_IS, None),
])
def test_each_resend_spends_its_own_recovery_and_nothing_else_spends_one(action, field):
    assert Spent().after(action) == (spent(field) if field else Spent())
    everything = Spent(*[True] * 5)
    assert everything.after(action) == everything


def test_the_policy_imports_nothing_that_waits_or_writes():
    """Pure: no store, provider, clock or event loop behind the decision."""
    tree = ast.parse((Path(__file__).parents[1] / "picochat" / "recovery.py").read_text("utf-8"))
    nodes = list(ast.walk(tree))
    imported = {n.module for n in nodes if isinstance(n, ast.ImportFrom)} | {
        a.name for n in nodes if isinstance(n, ast.Import) for a in n.names}
    assert imported == {"__future__", "dataclasses", "enum", "picochat.compaction.compact",
                        "picochat.messages"}  # the last two for CompactMode and TriggerReason
    assert not [n for n in nodes if isinstance(n, (ast.AsyncFunctionDef, ast.Await))]


# --- the invariants, against any sequence of failures ---------------------------------------------

RESENDS = (Do.WAIT, Do.WITHOUT_TOOLS, Do.REFIT, Do.COMPACT, Do.THIS_TURN_ONLY)


@dataclass(frozen=True)
class Trouble:
    """One failed request, with every fact the turn would read from it drawn at random (the
    model does not keep the worker's own promises, such as never offering tools again after a
    refusal: the policy alone must bound the turn)."""

    happened: Happened
    streamed: bool
    tools_offered: bool
    misfit: bool
    asked_over_stated: bool
    fits_learned: bool       # what MEASURE would find
    committed: bool          # whether a compaction for it would commit
    retry_after: float | None


TOOL_ROUND = "a tool round ran"

troubles = st.builds(
    Trouble, st.sampled_from([h for h in Happened if h is not Happened.NOT_COMPACTED]),
    st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans(),
    st.none() | st.floats(-10, 2 * RETRY_WAIT_LIMIT_S))
turns = st.tuples(st.booleans(),  # auto compaction called for a summary before the request
                  st.lists(troubles | st.just(TOOL_ROUND), max_size=40))


@dataclass
class Recorded:
    """One turn as the model carried it out."""

    resends: list[tuple[Action, Trouble, bool]]   # the action, its trouble, tools had run
    chains: list[list[Action]]                    # the actions each trouble was answered with
    failed: bool = False


def carry_out(summary_tried: bool, events: list) -> Recorded:
    """A model of `TurnRun._answer` and `_recover`: the same bookkeeping, random outcomes."""
    record = Recorded([], [])
    spent, tools_ran, steps = Spent(), False, 0
    for event in events:
        if event == TOOL_ROUND:
            if steps < MAX_TOOL_STEPS:
                steps, tools_ran = steps + 1, True
            continue
        situation = Situation(event.happened, spent, streamed=event.streamed,
                              tools_offered=event.tools_offered, tools_ran=tools_ran,
                              summary_tried=summary_tried, misfit=event.misfit,
                              asked_over_stated=event.asked_over_stated,
                              retry_after=event.retry_after)
        chain: list[Action] = []
        record.chains.append(chain)
        while True:
            action = next_action(situation)
            chain.append(action)
            assert len(chain) <= 3, chain  # measure, compact, and what a failed one ends in
            spent = spent.after(action)
            if action.do is Do.FAIL:
                record.failed = True
                return record
            if action.do is Do.MEASURE:
                situation = replace(situation, fits_learned=event.fits_learned)
                continue
            if action.do is Do.COMPACT:
                summary_tried = summary_tried or action.mode is not TRIM
                if not event.committed:
                    situation = replace(situation, happened=Happened.NOT_COMPACTED)
                    continue
            record.resends.append((action, event, tools_ran))
            break
    return record


@settings(max_examples=400, deadline=None)
@given(turns)
def test_no_sequence_of_failures_makes_a_turn_loop(turn):
    """Every resend spends a one-shot recovery: whatever goes wrong, and however often, a turn
    sends at most five requests more than its tool rounds need, each kind once, and the sixth
    failure ends it."""
    record = carry_out(*turn)
    kinds = [action.do for action, _, _ in record.resends]
    assert len(kinds) == len(set(kinds)) <= len(RESENDS)
    if len(record.chains) > len(RESENDS):
        assert record.failed


@settings(max_examples=400, deadline=None)
@given(turns)
def test_one_overflow_recovery_before_tools_and_one_after(turn):
    """ARCHITECTURE rule 7 and DESIGN D11.3-D11.4, as the policy keeps them: one compaction a
    turn, and a refusal after it, before any tool ran, fails; after a tool round, one resend of
    this turn's rows alone, and a refusal after it fails. (Rule 7's "one recovery" leaves out
    the refit: a resend of the same messages with a smaller answer cap, no compaction, at most
    once and only before the compaction, so up to three resends follow overflows in a turn.)"""
    summary_tried, events = turn
    record = carry_out(summary_tried, events)
    overflow = [(a, ran) for a, t, ran in record.resends if t.happened is Happened.OVERFLOW]
    assert len(overflow) <= 3
    assert [a.do for a, ran in overflow if not ran] in (
        [], [Do.REFIT], [Do.COMPACT], [Do.REFIT, Do.COMPACT])
    assert [a.do for a, ran in overflow if ran] in ([], [Do.THIS_TURN_ONLY])
    compactions = [a for chain in record.chains for a in chain if a.do is Do.COMPACT]
    assert len(compactions) <= 1  # committed or not: a failed one is not tried again


@settings(max_examples=400, deadline=None)
@given(turns)
def test_the_users_message_and_a_partial_answer_are_never_given_up(turn):
    """No action leaves the user's message out or sends over what streamed: a compaction
    only before any tool ran (the turn is then the user's message alone, the newest whole turn,
    which a cut always keeps: D9.2; D11.4 makes no checkpoint mid-turn); after a tool round, the
    resend is this turn's rows from the user's message on; nothing is resent once text has
    streamed (the turn fails, and keeps it, marked interrupted); and every overflow resend
    comes after the window it stated was learned."""
    record = carry_out(*turn)
    for action, trouble, tools_ran in record.resends:
        assert not trouble.streamed
        assert not (action.do is Do.COMPACT and tools_ran)
        assert action.do is not Do.THIS_TURN_ONLY or tools_ran
    for chain in record.chains:
        if chain[-1].do in (Do.COMPACT, Do.REFIT, Do.THIS_TURN_ONLY):
            assert chain[0].learn, chain


@settings(max_examples=200, deadline=None)
@given(troubles, st.booleans(), st.booleans())
def test_a_first_overflow_with_nothing_streamed_is_always_recovered(trouble, tools_ran,
                                                                   summary_tried):
    """The other side: the policy never gives up early. A turn's first refusal, with nothing
    streamed, gets its recovery whatever the refusal said."""
    situation = Situation(Happened.OVERFLOW, tools_offered=trouble.tools_offered,
                          tools_ran=tools_ran, summary_tried=summary_tried,
                          misfit=trouble.misfit, asked_over_stated=trouble.asked_over_stated)
    action = next_action(situation)
    if action.do is Do.MEASURE:
        action = next_action(replace(situation, fits_learned=trouble.fits_learned))
    assert action.do in (Do.COMPACT, Do.REFIT, Do.THIS_TURN_ONLY)

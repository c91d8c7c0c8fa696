"""Issue 19's guarantee, tried by a machine: planted facts survive every compaction.

Random conversations plant unique facts (a port, a path, a ticket id per turn) and run random
compactions (auto, manual, overflow with and without a summary, undo, clear) with three
summarizers: the offline model, one that writes well-formed summaries without a single fact,
and one that returns junk. After every step, for every fact planted since the last clear:
it is in the request the model would receive, or the ledger counts it as dropped, and then
`history_search` finds it in the raw history. With a summarizer that keeps no facts itself,
the dropped count is exact: every statement (a message's facts, one ledger line) missing from
the request is counted, and nothing else.
"""

from __future__ import annotations

import pytest

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from picochat import ledger as fact_ledger
from picochat import summary_contract as sc
from picochat.budget import budget_limits
from picochat.compaction.compact import CompactMode, CompactRequest, compact_context
from picochat.projection import restore
from picochat.providers.errors import ProviderUnavailable
from picochat.providers.offline import OfflineProvider
from picochat.storage import open_store
from picochat.tools.base import ToolContext
from picochat.tools.history import HISTORY_SEARCH
from tests.helpers.scripted import Recorder
from tests.helpers.storage import append_message

SYSTEM = "You are a test assistant."
FILLER = ("Please keep this in mind for the rest of our work together, it matters a lot to "
          "the team and we will come back to it later when we plan the rollout. ")
# prose without one exact value (nine `- (none)` alone is an empty summary, which the gate
# refuses: issue 31, item 9)
WELL_FORMED_WITHOUT_FACTS = "\n\n".join(
    f"## {h}\n" + ("- The user asked to remember some values for later steps."
                   if h == "Objective" else "- (none)") for h in sc.HEADINGS)
JUNK = "Sure! I can help with that. What would you like to do next?"


def planted_facts(n: int) -> tuple[str, str, str]:
    return f"port {20000 + n}", f"/srv/app{n}/service.toml", f"TKT-{5000 + n}"


class Summaries(Recorder):
    """A summarizer that answers every summary request with the same text (or fails)."""

    def __init__(self, text: str | None) -> None:
        super().__init__()
        self.text = text

    async def stream(self, request):
        if request.purpose == "summary":
            self.summaries = [ProviderUnavailable("down") if self.text is None else self.text]
        async for part in super().stream(request):
            yield part


class FactsSurvive(RuleBasedStateMachine):
    summarizer_text: str | None = ""   # "" means the offline model
    exact = True                       # the summarizer keeps no fact of its own

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="facts-"))
        self.store = open_store(self.dir / "picochat.db")
        self.sid = self.store.create_session("facts").id
        self.n = 0
        self.planted: dict[str, int] = {}   # fact -> seq of the user message that said it
        self.floor = 0                      # /clear: facts at or below this seq are gone
        self.limits = budget_limits(3000, None, 1024, 300)

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize(window=st.sampled_from([1000, 1500, 3000, 8000]), keep=st.sampled_from([150, 400]))
    def choose_limits(self, window: int, keep: int) -> None:
        self.limits = budget_limits(window, None, 1024, keep)

    def provider(self):
        if self.summarizer_text == "":
            return OfflineProvider(0)
        return Summaries(self.summarizer_text)

    @rule(turns=st.integers(1, 8), filler=st.integers(0, 3), facts=st.integers(1, 3))
    def talk(self, turns: int, filler: int, facts: int) -> None:
        for _ in range(turns):
            self.n += 1
            chosen = planted_facts(self.n)[:facts]
            text = f"Remember {', '.join(chosen)} for step {self.n}. " + FILLER * filler
            turn_id = f"t{self.n}"
            m = append_message(self.store, self.sid, "user", text, turn_id=turn_id)
            for fact in chosen:
                self.planted[fact] = m.seq
            append_message(self.store, self.sid, "assistant", "Noted. " + FILLER * filler,
                           turn_id=turn_id)

    def compact(self, reason: str, **kw) -> None:
        outcome = asyncio.run(compact_context(self.store, self.provider(), CompactRequest(
            session_id=self.sid, reason=reason, limits=self.limits, system_prompt=SYSTEM, **kw)))
        event(f"{reason}: {outcome.status}" + (" degraded" if outcome.degraded else ""))

    @rule(reason=st.sampled_from(["auto", "manual"]))
    def summarize(self, reason: str) -> None:
        self.compact(reason)

    @rule(try_summary=st.booleans())
    def overflow(self, try_summary: bool) -> None:
        self.compact("overflow", mode=CompactMode.SUMMARY_OR_TRIM if try_summary
                     else CompactMode.TRIM)

    @rule()
    def undo(self) -> None:
        self.store.uncompact(self.sid)  # with no summary in use, it takes back a /clear
        self.floor = self.store.session(self.sid).context_floor_seq

    @rule()
    def clear(self) -> None:
        session = self.store.clear_context(self.sid)
        self.floor = session.context_floor_seq

    @invariant()
    def every_fact_is_in_the_request_or_counted_and_findable(self) -> None:
        projection = restore(self.store, self.sid)
        request = json.dumps(projection.provider_messages(SYSTEM), ensure_ascii=False)
        live = {f: seq for f, seq in self.planted.items() if seq > self.floor}
        missing = [f for f in live if json.dumps(f)[1:-1] not in request]
        dropped = fact_ledger.counts(projection.ledger).dropped
        event("facts dropped to fit" if dropped else
              "all facts in the request" + (" (some folded)" if projection.summary else ""))
        # a message's facts are one statement, one ledger line: kept whole, or counted once
        lines = {live[f] for f in missing}
        if self.exact:
            assert len(lines) == dropped, (missing, dropped, projection.summary)
        else:
            assert len(lines) <= dropped, (missing, dropped, projection.summary)
        ctx = ToolContext(self.store, self.sid, self.dir)
        for fact in missing:
            found = HISTORY_SEARCH.run({"query": fact, "limit": 25}, ctx)
            assert f"#{live[fact]} user" in found, (fact, found)


class OfflineSummaries(FactsSurvive):
    summarizer_text = ""
    exact = False  # the offline model's own Exact Facts may keep a fact the ledger dropped


class FactFreeSummaries(FactsSurvive):
    summarizer_text = WELL_FORMED_WITHOUT_FACTS


class JunkSummaries(FactsSurvive):
    summarizer_text = JUNK


class FailingSummaries(FactsSurvive):
    summarizer_text = None  # every summary call fails: only degraded trims compact


SETTINGS = settings(max_examples=50, stateful_step_count=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

TestOfflineSummaries = pytest.mark.slow(OfflineSummaries.TestCase)
TestOfflineSummaries.settings = SETTINGS
TestFactFreeSummaries = pytest.mark.slow(FactFreeSummaries.TestCase)
TestFactFreeSummaries.settings = SETTINGS
TestJunkSummaries = pytest.mark.slow(JunkSummaries.TestCase)
TestJunkSummaries.settings = SETTINGS
TestFailingSummaries = FailingSummaries.TestCase
TestFailingSummaries.settings = SETTINGS

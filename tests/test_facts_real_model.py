"""A real small model's conversation, replayed: issue 19's "done means" for a local model.

`fixtures/smollm2_run_a.json` is a session recorded from SmolLM2-135M-Instruct (llama-cpp-python,
window 3,000): 32 turns, each stating a port, a config path and a ticket id, and the model's own
answers, 500–2,000 tokens of invented commands and paths. Every summary that model wrote failed
the quality gate (it went on with the chat, or echoed the transcript), so the context was kept
under the window by degraded trims alone. Replayed here through the engine with such a summary,
the newest folded ports, paths and tickets must reach the model and the oldest be counted: the
user's statements rank above the model's proposals (before they did, 10 of 24 folded facts
reached the model).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from picochat.budget import RequestDraft, budget_limits
from picochat.compaction.compact import CompactMode, CompactRequest, compact_context
from picochat.ledger import counts
from picochat.projection import restore
from tests.helpers.facts import KEPT_TURNS, missing_turns
from tests.helpers.scripted import Recorder
from tests.helpers.storage import append_message

RUN = json.loads((Path(__file__).parent / "fixtures" / "smollm2_run_a.json").read_text())
SYSTEM = "You are a helpful assistant."
# what SmolLM2 answered to a summary request (one of the gate's recorded rejections)
CONTINUES = ("I'm ready to continue the conversation. You can continue with any of your "
             "questions, and I'll do my best to help you.")


class SmolSummaries(Recorder):
    async def stream(self, request):
        if request.purpose == "summary":
            self.summaries = [CONTINUES]
        async for event in super().stream(request):
            yield event


def test_a_real_small_models_session_keeps_the_newest_folded_facts(store) -> None:
    sid = store.create_session("s").id
    limits = budget_limits(3000, None, 1024, 600)
    outcomes = []
    for i, row in enumerate(RUN):
        if row["role"] == "user":  # what the session does before each turn (DESIGN.md D8, D11)
            context = restore(store, sid)
            size = RequestDraft(SYSTEM, context).parts().total + len(row["content"]) // 2
            if size > limits.threshold:
                auto = asyncio.run(compact_context(store, SmolSummaries(), CompactRequest(
                    sid, "auto", limits, SYSTEM)))
                outcomes.append(auto)
                if not auto.compacted and size > limits.window:
                    outcomes.append(asyncio.run(compact_context(
                        store, SmolSummaries(), CompactRequest(
                            sid, "overflow", limits, SYSTEM, mode=CompactMode.TRIM))))
        append_message(store, sid, row["role"], row["content"], turn_id=f"t{i // 2}")
    # every summary was rejected by the gate, and trims kept the context in the window
    assert any(o.error is not None and o.error.kind == "summary_rejected" for o in outcomes)
    assert sum(1 for o in outcomes if o.compacted and o.degraded) >= 2
    assert not any(o.compacted and not o.degraded for o in outcomes)
    context = restore(store, sid)
    request = json.dumps(context.provider_messages(SYSTEM), ensure_ascii=False)
    users = [m for m in store.history(sid) if m.role == "user"]
    folded = [int(k.group(1)) for m in users
              if (k := re.search(r"Service (\d+)", m.content)) and m.seq < context.first_raw_seq]
    assert len(folded) >= 20
    # issue 30: the ledger has its reserved share of 60 % of the threshold; each planted
    # sentence is one line in it, the newest kept whole, the oldest counted as dropped
    gone = missing_turns(folded, request, lambda n: tuple(json.dumps(f)[1:-1] for f in (
        f"port {8000 + n}", f"/etc/svc/svc{n}.toml", f"OPS-{1000 + n}")))
    assert gone == folded[:len(gone)]
    assert len(folded) - len(gone) >= KEPT_TURNS
    assert counts(context.ledger).dropped >= len(gone)

"""Overflows that begin at a real prompt size, through litellm and the fake server.

The fake refuses any prompt above `fake.window` tokens, as a model does, whatever picochat was
configured to believe. These tests count what the server received request by request: the
engine path (no tool ran yet: one summary, one retry), the request-local path (tools ran: this
turn alone, no summary), and across many compactions, that no request ever splits a tool call
from its results.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from picochat.session import Compacted, ToolRan, TurnFailed, TurnFinished
from picochat.tools.registry import schemas
from tests.helpers.config import compaction_config_text, make_worker
from tests.helpers.conversations import seed
from tests.helpers.fakes.openai import chains_whole, is_summary_request, kinds, prompt_tokens

TOOLS = schemas(["history_search", "timeline_recall", "read_file"])


def worker_config(tmp_path: Path, fake, window: int, reserve: int = 1024,
                  keep: int = 800) -> Path:
    path = tmp_path / f"w{window}.toml"
    path.write_text(compaction_config_text(fake.base_url, window=window, reserve=reserve,
                                           keep=keep), encoding="utf-8")
    return path


def sizes(fake) -> list[int]:
    return [prompt_tokens(b) for b in fake.requests]


def test_an_overflow_at_the_real_window_compacts_once_and_the_retry_fits(compacting_fake, cli_store,
                                                                         tmp_path):
    compacting_fake.window = 2_500          # the model's truth; picochat was told 16,000
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 20)    # ~4,000 tokens by the fake's count

    async def run():
        config = worker_config(tmp_path, compacting_fake, 16_000)
        async with make_worker(cli_store, s.id, config) as w:
            first = await w.submit_turn("what did we decide?").result()
            card = w.info().as_dict()
            second = await w.submit_turn("and then?").result()
            return first, card, second

    first, card, second = asyncio.run(run())
    assert isinstance(first, TurnFinished), first
    [outcome] = first.compactions
    assert outcome.reason == "overflow" and outcome.status == "compacted"
    assert kinds(compacting_fake) == ["turn", "summary", "turn", "turn"]
    over, *rest = sizes(compacting_fake)
    assert over > 2_500 and all(n <= 2_500 for n in rest), sizes(compacting_fake)
    assert card["effective_window_tokens"] == 2_500  # learnt from the error message
    assert isinstance(second, TurnFinished) and not second.compactions


def test_an_overflow_after_a_tool_batch_retries_this_turn_alone(compacting_fake, cli_store,
                                                                tmp_path):
    compacting_fake.window = 3_000
    (tmp_path / "notes.txt").write_text("release notes line\n" * 220, encoding="utf-8")
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 11)    # fits alone; with the file's contents it does not
    compacting_fake.script_turn(
        ("tool_calls", [("call_1", "read_file", json.dumps({"path": "notes.txt"}))]),
        ("text", "The notes are release notes."))

    async def run():
        config = worker_config(tmp_path, compacting_fake, 16_000)
        worker = make_worker(cli_store, s.id, config, tools=TOOLS)
        worker.tool_root = tmp_path
        async with worker as w:
            handle = w.submit_turn("what is in notes.txt?")
            events = [e async for e in handle]
            return await handle.result(), events, w.info().as_dict()

    outcome, events, card = asyncio.run(run())
    assert isinstance(outcome, TurnFinished), outcome
    assert outcome.reply == "The notes are release notes."
    assert kinds(compacting_fake) == ["turn", "turn", "turn"]      # no summary mid-turn
    first, over, retry = sizes(compacting_fake)
    assert first <= 3_000 < over and retry <= 3_000
    sent = compacting_fake.requests[2]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert "release notes line" in sent[-1]["content"]  # the result went back whole
    assert [e.name for e in events if isinstance(e, ToolRan)] == ["read_file"]  # ran once
    assert not cli_store.checkpoints(s.id)
    assert card["effective_window_tokens"] == 3_000
    roles = [m.role for m in cli_store.history(s.id)][-4:]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_no_request_ever_splits_a_tool_chain_across_compactions(compacting_fake, cli_store,
                                                                tmp_path):
    """Forty turns, most calling tools (some twice), against a model whose tokenizer is finer
    than picochat's estimate and whose 3,000-token window the fake enforces: auto compactions,
    an overflow recovery and request-local retries all happen on the way."""
    compacting_fake.window = 3_000
    compacting_fake.chars_per_token = 2.5
    for i in range(4):
        (tmp_path / f"f{i}.txt").write_text(f"file {i} says port {8000 + i}\n" * (30 * i + 10),
                                            encoding="utf-8")
    s = cli_store.create_session("s")
    script = []
    for t in range(40):
        if t % 4 != 3:
            calls = [(f"c{t}a", "read_file", json.dumps({"path": f"f{t % 4}.txt"}))]
            if t % 3 == 0:
                calls.append((f"c{t}b", "history_search", json.dumps({"query": "port"})))
            script.append(("tool_calls", calls))
            if t % 5 == 0:
                script.append(("tool_calls", [(f"c{t}c", "timeline_recall",
                                               json.dumps({"query": "port"}))]))
        script.append(("text", f"answer {t}: port {8000 + t % 4}"))
    compacting_fake.script_turn(*script)

    async def run():
        worker = make_worker(cli_store, s.id, worker_config(tmp_path, compacting_fake, 4_000,
                                                           reserve=600, keep=700), tools=TOOLS)
        worker.tool_root = tmp_path
        outcomes, compactions = [], []
        async with worker as w:
            for t in range(40):
                long = " Context: the deploy checklist again." * (40 if t % 7 == 6 else 0)
                handle = w.submit_turn(f"question {t}: which port does file {t % 4} name?{long}")
                compactions += [e.outcome for e in [e async for e in handle]
                                if isinstance(e, Compacted)]
                outcomes.append(await handle.result())
        return outcomes, compactions

    outcomes, compactions = asyncio.run(run())
    turns = [b for b in compacting_fake.requests if not is_summary_request(b)]
    summaries = [b for b in compacting_fake.requests if is_summary_request(b)]
    for body in turns:
        chains_whole(body["messages"])
    for body in summaries:
        assert not body.get("tools")
        assert {m["role"] for m in body["messages"]} <= {"system", "user"}
    done = [o for o in outcomes if isinstance(o, TurnFinished)]
    assert len(done) >= 35, [o.error.message for o in outcomes if isinstance(o, TurnFailed)]
    assert all(o.error.kind in ("context_overflow",) for o in outcomes
               if isinstance(o, TurnFailed))
    assert {c.reason for c in compactions if c.compacted} == {"auto", "overflow"}
    assert len(cli_store.checkpoints(s.id)) >= 3
    overflow_compactions = sum(c.reason == "overflow" for c in compactions)
    assert compacting_fake.overflows > overflow_compactions  # the rest were retried request-locally
    assert sum(m.role == "tool" for m in cli_store.history(s.id)) >= 30

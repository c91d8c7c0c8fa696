"""Auto compaction with a real model writing the summaries, and the fact ledger through it.

Issue 19's planted turns (a port, a config path and a ticket id each, here inside a paragraph of
plain text) in a window of the server's own size, 2,048 tokens, tools off. SmolLM2 writes the
summaries, and cannot: they go on with the chat or echo the transcript, so the quality gate and
the fact ledger meet a real adversary rather than a scripted one. Whatever the gate makes of
them, every turn is answered, every request fits the window in the server's own tokens, and
every fact of a turn folded out of the raw context is in what the model receives.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.facts import folded_turns, missing_turns, planted
from tests.helpers.fakes.openai import is_summary_request
from tests.helpers.real.llama_server import LlamaServer
from tests.helpers.real.picochat import ANSWER_CAP, Picochat
from tests.helpers.real.proxy import Proxy, overflowed

pytestmark = pytest.mark.real

WINDOW = 2048
TURNS = 10
# SmolLM2's summaries do not pass the gate, so the context folds only by degraded trims once a
# request would not fit the window: turns of some 200 tokens get there within the session. A
# small reserve puts the threshold near the window, so few turns ask SmolLM2 for a summary
# (a request of ~800 tokens each). The text holds no fact of its own (no number, path or id,
# no correction cue).
LIMITS = """
[context_compaction]
reserve_tokens = 256
"""
REVIEW = ("This note is part of the weekly operations review. The team went through the rollout "
          "plan, the on-call rotation, the open incidents and the backlog of small fixes. "
          "Everyone agreed to keep each note short, to write down what changed and why, and to "
          "ask again whenever something is unclear. The review also covered the handover between "
          "shifts, the wording of the status page, the alerts that woke people up without need, "
          "and the runbooks that are out of date. Nobody expects all of it to be fixed this week, "
          "but the list is written down and each item has an owner.")


def turn(n: int) -> str:
    return f"{REVIEW} {planted(n)}"


def test_a_real_session_compacts_answers_every_turn_and_keeps_every_folded_fact(
        picochat: Picochat, server_2048: LlamaServer, home) -> None:
    with Proxy(server_2048.base_url, answer_cap=ANSWER_CAP) as proxy:
        picochat.configure(proxy.base_url, WINDOW, tools=False, extra=LIMITS)
        turns = [picochat.ask(turn(n)) for n in range(1, TURNS + 1)]
    compactions = [t.compaction for t in turns if t.compaction]
    assert [(n, t.status, t.stderr.strip()[-160:]) for n, t in enumerate(turns, 1)
            if t.status or not t.reply.strip()] == []
    assert overflowed(proxy) == 0 and set(proxy.statuses) == {200}
    summaries = [body for body in proxy.requests if is_summary_request(body)]
    assert summaries, "SmolLM2 was never asked for a summary"
    assert any(c["status"] == "compacted" for c in compactions), compactions
    # the window held, counted by the server's tokenizer: each request, and a summary request
    # with the room it asks for its answer
    sizes = [(server_2048.count_prompt(body), body.get("max_tokens") or 0)
             for body in proxy.requests]
    assert [s for s in sizes if s[0] + s[1] > WINDOW] == [], sizes
    # every fact of every folded turn reaches the model
    folded, _, ledger = folded_turns(home)
    assert len(folded) >= 2, (folded, compactions)
    last = [body for body in proxy.requests if not is_summary_request(body)][-1]
    received = json.dumps(last["messages"], ensure_ascii=False)
    assert json.dumps(planted(TURNS))[1:-1] in received
    # (the oldest may be counted as dropped, to fit the ledger's share of a 2,048 window)
    gone = missing_turns(folded, received)
    assert gone == folded[:len(gone)]
    assert len(gone) <= ledger.dropped  # each planted sentence is one ledger line

"""Issue 30's run against the real model: how people state facts, at an 8,192-token window.

The same 40 turns as `tests/test_facts_e2e.py` (16 facts stated in plain sentences, two pasted
70-line access logs, one correction), through `picochat ask` with the default compaction
settings, SmolLM2 answering, and the summaries written as the README advises for a small local
model: `summary_model = "offline"`. (With SmolLM2 writing them too, every summary was rejected,
the context rode between the threshold and the window until a degraded trim, and each turn's
~7,500-token prompt took minutes on a busy 2-core machine: over 45 minutes for 29 turns, more
than CI can give one test. The engine's side of a summarizer that drops every fact is
`tests/test_facts_e2e.py`'s run.) What the model receives on the last turn is read, not the
ledger: every statement's subject and value on one line, the correction the newest word on
Redis, every request inside the window by the server's own count, and at most 7 compactions.
"""

from __future__ import annotations

import pytest

from tests.helpers.fakes.openai import is_summary_request
from tests.fixtures import realistic_chat
from tests.helpers.real.picochat import ANSWER_CAP, Picochat
from tests.helpers.real.llama_server import LlamaServer
from tests.helpers.real.proxy import Proxy

pytestmark = pytest.mark.real

WINDOW = 8192
SUMMARIES = """
[context_compaction]
summary_model = "offline"
"""


def test_plain_statements_reach_the_real_model_with_their_subject_at_8k(
        picochat: Picochat, server_8192: LlamaServer) -> None:
    with Proxy(server_8192.base_url, answer_cap=ANSWER_CAP) as proxy:
        picochat.configure(proxy.base_url, WINDOW, tools=False, extra=SUMMARIES)
        turns = [picochat.ask(text) for text in realistic_chat.turns()]
    assert [(n, t.status, t.stderr.strip()[-200:]) for n, t in enumerate(turns, 1)
            if t.status or not t.reply.strip()] == []
    compactions = [t.compaction["status"] for t in turns if t.compaction]
    compacted = compactions.count("compacted")
    print(f"\nreal 8K run: compaction outcomes {compactions}")
    assert 1 <= compacted <= 7, compactions
    sizes = [(server_8192.count_prompt(body), body.get("max_tokens") or 0)
             for body in proxy.requests]
    assert [s for s in sizes if s[0] + s[1] > WINDOW] == [], sizes
    last = [body for body in proxy.requests if not is_summary_request(body)][-1]
    said = [(m["role"], line) for m in last["messages"]
            for line in str(m.get("content") or "").splitlines()]
    received = "\n".join(line for _, line in said)
    missing = [f for f in realistic_chat.facts() if not realistic_chat.on_one_line(received, f)]
    assert missing == []
    # the correction is the newest word on Redis in what picochat sends: the summary, the
    # ledger and your messages (SmolLM2's own answers may repeat whatever they like)
    ours = [line for role, line in said if role != "assistant"]
    stale = [i for i, line in enumerate(ours) if "6380" in line and "6390" not in line]
    fixed = [i for i, line in enumerate(ours) if "6390" in line]
    assert fixed and all(i < fixed[-1] for i in stale), [
        (role, line[:160]) for role, line in said if "6380" in line or "6390" in line]

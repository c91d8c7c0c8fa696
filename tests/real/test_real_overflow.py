"""Issue 20's "done means" against a real model: a server context of 2,048 tokens, a configured
window of 8,192, and a 20-turn session that outgrows the server's context.

Two real server behaviours over the context:
- llama-cpp-python streaming: HTTP 200 with an empty body (the error reaches only its log);
- a server that checks the length before it streams (vLLM, OpenAI, llama.cpp's own server;
  here llama-cpp-python asked without streaming, through the proxy): HTTP 400 "This model's
  maximum context length is 2048 tokens".
Either way every turn is answered, after at most one recovery in the whole session; the window
the server revealed is kept for the model (a new process knows it) and `info` shows it learned.

The offline model writes the summaries here (`summary_model = "offline"`, the setting picochat
itself suggests once a weak model's summaries are rejected): the subject is the overflow, and
SmolLM2's summaries cost a minute a session on this machine; test_real_compaction.py has SmolLM2
summarize.
"""

from __future__ import annotations

import pytest

from tests.helpers.real.picochat import ANSWER_CAP, Picochat
from tests.helpers.real.llama_server import LlamaServer
from tests.helpers.real.proxy import Proxy, overflowed

pytestmark = pytest.mark.real

TURNS = 20
SERVER_CONTEXT = 2048
CONFIGURED = 8192
SERVICES = ("the billing service", "the search index", "the mail relay", "the build farm",
            "the metrics store")


def note(n: int) -> str:
    """About 130 of SmolLM2's tokens: twenty of them are half again the server's context."""
    service = SERVICES[n % len(SERVICES)]
    return (f"Status note {n}: this morning {service} was slow again. The on-call engineer "
            f"restarted it twice, checked the disk usage on host {n}, read the last two hundred "
            "lines of its log and opened a ticket for the team. Nobody knows yet why it happens "
            "only on weekdays between nine and ten, when the nightly batch jobs are long "
            "finished and traffic is average. The dashboard shows no spike in memory, and the "
            "database replicas look healthy. Please acknowledge this note in one short sentence.")


@pytest.mark.parametrize("server", ["stream_200_empty", "length_first_400"])
def test_a_session_over_the_server_context_answers_every_turn_and_learns_the_window(
        picochat: Picochat, server_2048: LlamaServer, server: str) -> None:
    assert server_2048.n_ctx == SERVER_CONTEXT
    with Proxy(server_2048.base_url, length_first=server == "length_first_400",
               answer_cap=ANSWER_CAP) as proxy:
        picochat.configure(proxy.base_url, CONFIGURED,
                           extra='[context_compaction]\nsummary_model = "offline"\n')
        turns = [picochat.ask(note(n)) for n in range(1, TURNS + 1)]
    failed = [(n, t.status, t.stderr.strip()[-160:]) for n, t in enumerate(turns, 1)
              if t.status != 0 or not t.reply.strip()]
    assert failed == []
    assert not any("empty reply" in t.stderr for t in turns)
    # the session did outgrow the server's context, and one recovery at most brought it back
    assert overflowed(proxy) >= 1 or picochat.checkpoints(), "the test never overflowed"
    recoveries = [n for n, t in enumerate(turns, 1)
                  if t.compaction and t.compaction["reason"] == "overflow"]
    assert len(recoveries) <= 1, recoveries
    # a new process knows the window, and says where it came from
    info, card = picochat.info()
    assert info["effective_window_tokens"] == SERVER_CONTEXT, \
        (info["effective_window_tokens"], info["window_source"])
    line = next(row for row in card.splitlines() if row.startswith("Context window"))
    assert "2,048" in line and "learned" in line, line

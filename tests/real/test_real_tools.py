"""A server that refuses every request offering tools: vLLM without
`--enable-auto-tool-choice` (400) and llama.cpp without `--jinja` (500). llama-cpp-python's
server cannot be made to refuse them (its templates ignore tools and no option loads one that
refuses), so the proxy refuses with those servers' own answers and the real model answers the
rest.

The turn is retried once without tools, the model is remembered as one without tools (a new
process sends none), and the user is told once.
"""

from __future__ import annotations

import pytest

from tests.real.conftest import ANSWER_CAP, Picochat
from tests.real.llama_server import LlamaServer
from tests.real.proxy import LLAMA_CPP_NO_JINJA, VLLM_NO_AUTO_TOOLS, Proxy

pytestmark = pytest.mark.real


def tool_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "tool" in line.lower()]


@pytest.mark.parametrize("refusal", [VLLM_NO_AUTO_TOOLS, LLAMA_CPP_NO_JINJA],
                         ids=["vllm_400", "llama_cpp_500"])
def test_a_server_without_tool_support_gets_the_turn_without_tools_once_and_for_all(
        picochat: Picochat, server_2048: LlamaServer, refusal) -> None:
    with Proxy(server_2048.base_url, reject_tools=refusal, answer_cap=ANSWER_CAP) as proxy:
        picochat.configure(proxy.base_url, 2048)  # tools on, as by default
        first = picochat.ask_process("Name three colors.")
        assert first.status == 0, first.stderr
        assert first.reply.strip()
        # one refused request with tools, then the same turn once without
        assert [bool(b.get("tools")) for b in proxy.requests] == [True, False], proxy.statuses
        assert proxy.requests[1]["messages"][-1] == proxy.requests[0]["messages"][-1]
        assert len(tool_lines(first.stderr)) == 1, first.stderr  # said once
        second = picochat.ask_process("Name three fruits.")  # a new process
    assert second.status == 0, second.stderr
    assert second.reply.strip()
    assert [bool(b.get("tools")) for b in proxy.requests] == [True, False, False]
    assert tool_lines(second.stderr) == []  # not said again

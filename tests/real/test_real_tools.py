"""A server that refuses every request offering tools: vLLM without
`--enable-auto-tool-choice` (400) and llama.cpp without `--jinja` (500). llama-cpp-python's
server cannot be made to refuse them (its templates ignore tools and no option loads one that
refuses), so the proxy refuses with those servers' own answers and the real model answers the
rest.

The turn is retried once without tools, the model is remembered as one without tools (a new
process sends none), and the user is told once.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers.real.picochat import ANSWER_CAP, Picochat
from tests.helpers.real.llama_server import LlamaServer
from tests.helpers.fakes.openai import is_summary_request
from tests.helpers.real.proxy import LLAMA_CPP_NO_JINJA, VLLM_NO_AUTO_TOOLS, Proxy

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


def notes(i: int) -> str:
    """A file as people keep them: a title, a few sections, a table (about 1,300 tokens)."""
    rows = "\n".join(f"| step {k} | owner {k % 3} | {'done' if k % 2 else 'open'} |"
                     for k in range(40))
    prose = (f"Release {i} moves the gateway to the new cluster. Each step is checked by its "
             "owner before the next begins, and a step that fails is rolled back at once. ")
    return (f"# Release {i} plan\n\n## Why\n\n{prose * 6}\n\n## Steps\n\n"
            f"| step | owner | state |\n|---|---|---|\n{rows}\n\n## Risks\n\n{prose * 4}\n")


def test_files_the_model_read_fold_as_pointer_lines_before_any_summary_call(
        picochat: Picochat, server_8192: LlamaServer, tmp_path, monkeypatch) -> None:
    """Issue 30, item 7, tier one, as a user meets it: at SmolLM2's own 8,192 window and
    default settings, six turns each read a file. The first fold makes no summary call: the
    files become pointer lines, the user's words stay whole. Later, when the kept words outgrow
    what a summary would leave, a summary is asked for; SmolLM2's is refused, and the fold is
    kept instead, so no turn ever runs over the threshold or drops a turn."""
    project = tmp_path / "project"
    project.mkdir()
    for i in range(6):
        (project / f"release{i}.md").write_text(notes(i))
    monkeypatch.chdir(project)

    def read_named(text: str) -> tuple[str, str] | None:
        m = re.search(r"release\d\.md", text)
        return ("read_file", json.dumps({"path": m.group()})) if m else None

    asked_before: list[int] = []  # summary requests the server had seen before each turn
    with Proxy(server_8192.base_url, answer_cap=ANSWER_CAP, calls_first=read_named) as proxy:
        picochat.configure(proxy.base_url, 8192)
        for i in range(6):
            asked_before.append(sum(map(is_summary_request, proxy.requests)))
            turn = picochat.ask(f"Read release{i}.md and give its title. Note: the staging "
                                f"database for release {i} is db{i}.staging.internal:54{i}2.")
            assert turn.status == 0, turn.stderr
            assert turn.reply.strip()
    folds = [(i, t.compaction) for i, t in enumerate(picochat.turns)
             if t.compaction and t.compaction.get("checkpoint_id")]
    assert folds, [t.compaction for t in picochat.turns]
    assert all(f["tool_pointers"] >= 1 and not f["degraded"] for _, f in folds), folds
    first = folds[0][0]
    assert asked_before[first] == 0 and (first + 1 == len(asked_before) or
                                         asked_before[first + 1] == 0), asked_before
    last = [b for b in proxy.requests if b["messages"][-1].get("role") == "tool"][-1]
    block = last["messages"][1]["content"]
    assert 'tool result (#3) read_file {"path": "release0.md"}' in block
    assert "history_search seq=3 reads it back" in block
    assert "the staging database for release 0 is db0.staging.internal:5402." in block
    assert "# Release 0 plan" not in json.dumps(last)  # the file itself is out of the request
    info, _ = picochat.info()
    assert info["used_tokens"] <= info["compression_threshold_tokens"], info

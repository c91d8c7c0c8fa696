"""Issue 19's planted-facts run, as a user runs it: forty `picochat ask` turns, each stating a
port, a config path and a ticket id, in a 3,000-token window (reserve 1,024, keep 600), with
auto compaction along the way. Issue 30 sized what a compaction leaves (60 % of the threshold,
the ledger's share reserved in it): the newest folded facts that fill the ledger's share reach
the model on the last turn, every older one is counted as dropped, and history_search finds it.
With the offline model, and with a server whose summaries are well-formed but hold no fact."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from picochat.storage.store import open_store
from tests.helpers.facts import KEPT_TURNS, facts_of, folded_turns, missing_turns, planted
from tests.helpers.fakes.openai import FakeOpenAI, summary_text

TURNS = 40
LIMITS = """
[context_compaction]
reserve_tokens = 1024
keep_recent_tokens = 600
"""


def chat(run_cli) -> list[dict]:
    replies = []
    for n in range(1, TURNS + 1):
        result = run_cli("ask", "--session", "s", "--json", planted(n))
        assert result.status == 0, result.stderr
        replies.append(json.loads(result.stdout))
    return replies


def chat_in_process(capsys) -> list[dict]:
    """`picochat ask` forty times in this process: litellm is imported once, not forty
    times (three minutes of subprocess start-up for the same code path)."""
    from picochat.cli.main import main

    replies = []
    for n in range(1, TURNS + 1):
        status = main(["ask", "--session", "s", "--json", planted(n)])
        out, err = capsys.readouterr()
        assert status == 0, err
        replies.append(json.loads(out))
    return replies


def assert_newest_folded_facts_reach_the_model(folded, received, ledger):
    """Every fact of the newest folded turns is in what the model received: only the oldest
    go, each counted as dropped, and at least KEPT_TURNS turns are kept whole."""
    gone = missing_turns(folded, received)
    assert gone == folded[:len(gone)]  # the oldest go first
    assert len(gone) <= ledger.dropped  # each planted sentence is one ledger line
    assert len(folded) - len(gone) >= KEPT_TURNS


@pytest.mark.slow
def test_forty_planted_turns_keep_the_newest_folded_facts_offline(run_cli, config_file, home):
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text('default_model = "small"\n[models.small]\nmodel = "offline"\n'
                           "token_limit = 3000\n" + LIMITS)
    replies = chat(run_cli)
    compactions = [r["compaction"] for r in replies
                   if r["compaction"] and r["compaction"]["status"] == "compacted"]
    # each compaction leaves room for several turns: not one every turn or two
    assert 3 <= len(compactions) <= 10
    folded, summary, ledger = folded_turns(home)
    assert len(folded) >= 30
    # the offline model's last reply is computed from the request it received; the request
    # is the active summary plus the raw tail, so the summary must hold the kept facts
    assert_newest_folded_facts_reach_the_model(folded, summary, ledger)
    # and the user can see it: info, checkpoints and export count the facts kept and dropped
    kept, gone = ledger.kept, ledger.dropped
    info = json.loads(run_cli("info", "--session", "s", "--json").stdout)
    assert (info["facts_kept"], info["facts_dropped"]) == (kept, gone) and gone > 0
    assert re.search(rf"^Exact facts +{kept:,} kept, {gone:,} dropped to fit \(history_search "
                     r"finds them\)$", run_cli("info").stdout, re.M)
    exported = run_cli("export", "--session", "s", "--format", "md").stdout
    assert f"exact facts: {kept:,} kept · {gone:,} dropped" in exported
    # what was dropped is in the raw history, where the model's history_search reads it
    store = open_store(home / "data" / "picochat.db")
    try:
        hits = store.search.messages(store.find_session("s").id, "OPS-1001")
    finally:
        store.close()
    assert any("OPS-1001" in hit.snippet.replace("«", "").replace("»", "") for hit in hits)


def use_fake_server(config_file, fake, window: int, extra: str = "") -> None:
    """A config whose default model is an o200k model on the fake server, at `window`."""
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(textwrap.dedent(f'''\
        default_model = "fake"
        [models.fake]
        model = "openai/gpt-4o-mini"
        api_base = "{fake.base_url}"
        api_key_env = "FAKE_API_KEY"
        token_limit = {window}
    ''') + extra)


def test_forty_planted_turns_keep_the_newest_folded_facts_when_summaries_drop_them(
        capsys, config_file, home, fake_openai: FakeOpenAI, monkeypatch):
    monkeypatch.setenv("FAKE_API_KEY", "test-key")
    # an answer as long as the question, as a model's would be
    fake_openai.default_text = "Noted. I will keep that in mind for the rest of our work. " * 3
    # an o200k model, as in the offline run: the same 3,000 tokens hold the same facts
    use_fake_server(config_file, fake_openai, 3000, "[tools]\nenabled = []\n" + LIMITS)
    replies = chat_in_process(capsys)
    compactions = [r["compaction"] for r in replies
                   if r["compaction"] and r["compaction"]["status"] != "nothing_to_compact"]
    assert 2 <= len(compactions) <= 10 and all(c["status"] == "compacted" for c in compactions)
    assert len(fake_openai.summary_requests) == len(compactions)
    # what the server wrote: nine headings, not one fact
    assert "port 80" not in summary_text(1) and "OPS-" not in summary_text(1)
    folded, _, ledger = folded_turns(home)
    assert len(folded) >= 25  # the rest are in the raw tail since the last compaction
    received = json.dumps(fake_openai.turn_requests[-1]["messages"], ensure_ascii=False)
    assert_newest_folded_facts_reach_the_model(folded, received, ledger)


@pytest.mark.parametrize("n", [1, 17, 40])
def test_the_planted_sentence_is_one_statement_of_exactly_three_facts(n):
    from picochat.ledger import extract
    from picochat.messages import Message

    found = extract([Message("s", 1, "user", planted(n), None, None, None, None, None,
                             "complete", 0, 0)])
    # one statement: the sentence that states them (not "Please remember all three."),
    # holding the three values
    [line] = found
    assert line.value == planted(n).split(" Please")[0] and set(facts_of(n)) <= set(line.held)


# --- issue 30's run: how people state facts ------------------------------------------------------


def test_plain_statements_reach_the_model_with_their_subject_at_8k(
        capsys, config_file, home, fake_openai: FakeOpenAI, monkeypatch):
    """Issue 30's run through `picochat ask`: an 8,192-token window with the default settings,
    a summarizer that keeps no fact, 40 turns of ordinary chat with 16 facts stated in plain
    sentences, two pasted 70-line access logs and one correction. On the last turn every
    statement's subject and value stand on one line of what the model receives, the
    correction is the newest word on Redis, and the chat compacted at most 7 times. Once
    `compact --all` folds the correction too, it has retired the old port's line."""
    from picochat.cli.main import main
    from tests.fixtures import realistic_chat

    monkeypatch.setenv("FAKE_API_KEY", "test-key")
    fake_openai.default_text = realistic_chat.ANSWER
    use_fake_server(config_file, fake_openai, 8192)
    compacted = 0
    turns = list(realistic_chat.turns())
    for text in turns:
        status = main(["ask", "--session", "s", "--json", text])
        out, err = capsys.readouterr()
        assert status == 0, err
        reply = json.loads(out)
        assert not reply["compaction"] or reply["compaction"]["status"] != "failed", reply
        compacted += bool(reply["compaction"] and reply["compaction"]["status"] == "compacted")
    # issue 30: at most 7 in this run, and ordinary turns at 8K compact at most once in six
    assert 1 <= compacted <= min(7, len(turns) // 6), (compacted, len(turns))
    assert "Redis" not in summary_text(1)  # the server's summaries keep nothing
    lines = "\n".join(str(m.get("content") or "")
                      for m in fake_openai.turn_requests[-1]["messages"]).splitlines()
    received = "\n".join(lines)
    missing = [f for f in realistic_chat.facts() if not realistic_chat.on_one_line(received, f)]
    assert missing == []
    stale = [i for i, line in enumerate(lines) if "6380" in line and "6390" not in line]
    fixed = [i for i, line in enumerate(lines) if "6390" in line]
    assert fixed and all(i < fixed[-1] for i in stale)
    # once the correction is folded too (`compact --all`), it retires the old line: the
    # ledger the model receives says 6390 and no line says 6380 alone
    assert main(["compact", "--session", "s", "--all"]) == 0, capsys.readouterr().err
    assert main(["ask", "--session", "s", "Which port is Redis on?"]) == 0
    capsys.readouterr()
    received = "\n".join(str(m.get("content") or "")
                         for m in fake_openai.turn_requests[-1]["messages"])
    ledger = received.rsplit("## Exact Facts\n", 1)[1].split("[End historical", 1)[0]
    assert "6390" in ledger and not [x for x in ledger.splitlines()
                                     if "6380" in x and "6390" not in x], ledger
    missing = [f for f in realistic_chat.facts() if not realistic_chat.on_one_line(received, f)]
    assert missing == []

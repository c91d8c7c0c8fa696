"""Issue 19's planted-facts run, as a user runs it: forty `picochat ask` turns, each stating a
port, a config path and a ticket id, in a 3,000-token window (reserve 1,024, keep 600), with
auto compaction along the way. Every folded fact must reach the model on the last turn: with
the offline model, and with a server whose summaries are well-formed but hold no fact at all."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from picochat.ledger import counts
from picochat.projection import restore
from picochat.storage.store import open_store
from tests.fake_openai import (
    FakeOpenAI,
    fake_openai,  # noqa: F401  (fixture)
    summary_text,
)

TURNS = 40
LIMITS = """
[context_compaction]
reserve_tokens = 1024
keep_recent_tokens = 600
"""


def planted(n: int) -> str:
    return (f"Service {n} listens on port {8000 + n}; its config is /etc/svc/svc{n}.toml and "
            f"the ticket is OPS-{1000 + n}. Please remember all three.")


def facts_of(n: int) -> tuple[str, str, str]:
    return f"port {8000 + n}", f"/etc/svc/svc{n}.toml", f"OPS-{1000 + n}"


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


def folded_turns(home):
    """The turns whose messages the context no longer holds raw, the active summary, and its
    ledger's counts."""
    store = open_store(home / "data" / "picochat.db")
    try:
        sid = store.find_session("s").id
        context = restore(store, sid)
        users = [m for m in store.history(sid) if m.role == "user"]
        return ([n for n, m in enumerate(users, 1) if m.seq < (context.first_raw_seq or 0)],
                context.summary or "", counts(context.ledger))
    finally:
        store.close()


def test_forty_planted_turns_keep_every_folded_fact_offline(run_cli, config_file, home):
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text('default_model = "small"\n[models.small]\nmodel = "offline"\n'
                           "token_limit = 3000\n" + LIMITS)
    replies = chat(run_cli)
    assert sum(1 for r in replies if r["compaction"]) >= 5
    folded, summary, ledger = folded_turns(home)
    assert len(folded) >= 35
    # the offline model's last reply is computed from the request it received; the request
    # is the active summary plus the raw tail, so the summary must hold the folded facts
    missing = [f for n in folded for f in facts_of(n) if f not in summary]
    assert missing == [] and ledger.dropped == 0
    # and the user can see it: info, checkpoints and export count the facts kept
    kept = ledger.kept
    info = json.loads(run_cli("info", "--session", "s", "--json").stdout)
    assert (info["facts_kept"], info["facts_dropped"]) == (kept, 0) and kept >= 3 * 35
    assert re.search(rf"^Exact facts +{kept:,} kept, none dropped$", run_cli("info").stdout,
                     re.M)
    exported = run_cli("export", "--session", "s", "--format", "md").stdout
    assert f"exact facts: {kept:,} kept · none dropped" in exported


def test_forty_planted_turns_keep_every_folded_fact_when_summaries_drop_them(
        capsys, config_file, home, fake_openai: FakeOpenAI, monkeypatch):  # noqa: F811
    monkeypatch.setenv("FAKE_API_KEY", "test-key")
    # an answer as long as the question, as a model's would be
    fake_openai.default_text = "Noted. I will keep that in mind for the rest of our work. " * 3
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(textwrap.dedent(f'''\
        default_model = "fake"
        [models.fake]
        model = "openai/gpt-4o-mini"
        api_base = "{fake_openai.base_url}"
        api_key_env = "FAKE_API_KEY"
        token_limit = 3000
        # an o200k model, as in the offline run: the same 3,000 tokens hold the same facts
        [tools]
        enabled = []
    ''') + LIMITS)
    replies = chat_in_process(capsys)
    compactions = [r["compaction"] for r in replies if r["compaction"]]
    assert len(compactions) >= 2 and all(c["status"] == "compacted" for c in compactions)
    assert len(fake_openai.summary_requests) == len(compactions)
    # what the server wrote: nine headings, not one fact
    assert "port 80" not in summary_text(1) and "OPS-" not in summary_text(1)
    folded, _, _ = folded_turns(home)
    assert len(folded) >= 25  # the rest are in the raw tail since the last compaction
    received = json.dumps(fake_openai.turn_requests[-1]["messages"], ensure_ascii=False)
    missing = [f for n in folded for f in facts_of(n) if f not in received]
    assert missing == []


@pytest.mark.parametrize("n", [1, 17, 40])
def test_the_planted_sentence_states_exactly_three_facts(n):
    from picochat.ledger import extract
    from picochat.messages import Message

    found = extract([Message("s", 1, "user", planted(n), None, None, None, None, None,
                             "complete", 0, 0)])
    assert [f.value for f in found] == list(facts_of(n))

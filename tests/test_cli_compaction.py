"""`picochat compact`, `compact --undo`, `info` and auto compaction in `ask`, as a user runs
them (offline model, real subprocesses), and the issue's "done means" fifty-turn run."""

from __future__ import annotations

import json
import re

import pytest

from picochat import tokens

SMALL = """\
default_model = "small"

[models.small]
model = "offline"
token_limit = 4096

[context_compaction]
reserve_tokens = 1024
keep_recent_tokens = 800
"""

SECTION_16_KEYS = (
    "configured_window_tokens", "effective_window_tokens", "configured_reserve_tokens",
    "reserve_tokens", "configured_keep_recent_tokens", "effective_keep_recent_tokens",
    "compression_threshold_tokens", "used_tokens", "remaining_tokens", "usage_source",
    "active_checkpoint_id", "checkpoint_generation", "checkpoint_tokens_before",
    "checkpoint_tokens_after", "checkpoint_degraded",
)

LONG = ("Please remember: service {i} listens on port {port} and its config lives in "
        "/srv/svc{i}/app.toml; version 2.{i}.0 is deployed. " * 3)


@pytest.fixture
def small(config_file):
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(SMALL)
    return config_file


def ask(run_cli, text, session="s"):
    result = run_cli("ask", "--session", session, "--json", text)
    assert result.status == 0, result.stderr
    return json.loads(result.stdout)


def chat(run_cli, turns, session="s", start=0):
    return [ask(run_cli, LONG.format(i=i, port=8000 + i), session)
            for i in range(start, start + turns)]


def as_json(run_cli, *args):
    result = run_cli(*args, "--json")
    assert result.status == 0, result.stderr
    return json.loads(result.stdout)


def test_compact_prints_the_three_lines_from_the_checkpoint_row(run_cli, small):
    chat(run_cli, 6)
    result = run_cli("compact", "--session", "s")
    assert result.status == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and lines[2] == "Raw history unchanged"
    m = re.fullmatch(r"Context compacted: ([\d,]+) -> ([\d,]+) tokens", lines[0])
    k = re.fullmatch(r"Kept (\d+) recent turns? from message seq (\d+)", lines[1])
    assert m and k, lines
    [cp] = as_json(run_cli, "checkpoints", "--session", "s")
    assert cp["active"] and cp["trigger_reason"] == "manual"
    assert (int(m[1].replace(",", "")), int(m[2].replace(",", ""))) == (cp["tokens_before"],
                                                                        cp["tokens_after"])
    assert int(k[2]) == cp["first_retained_seq"]
    assert len(as_json(run_cli, "history", "--session", "s")["messages"]) == 12


def test_compact_json_and_nothing_to_compact(run_cli, small):
    chat(run_cli, 1)
    result = run_cli("compact", "--session", "s")
    assert result.status == 0 and result.stdout == "Nothing to compact\n"
    assert "single turn" in result.stderr
    data = as_json(run_cli, "compact", "--session", "s")
    assert data["status"] == "nothing_to_compact" and data["checkpoint_id"] is None
    chat(run_cli, 5, start=1)
    data = as_json(run_cli, "compact", "--session", "s", "--focus", "ports")
    assert data["status"] == "compacted"
    for key in ("checkpoint_id", "tokens_before", "tokens_after", "first_retained_seq",
                "kept_turns"):
        assert data[key] is not None
    assert data["tokens_after"] < data["tokens_before"]


def test_compact_on_an_unknown_session_is_exit_2(run_cli, small):
    chat(run_cli, 1)
    result = run_cli("compact", "--session", "nope")
    assert result.status == 2 and "no session" in result.stderr


@pytest.mark.slow
def test_info_json_has_every_section_16_key_and_is_deterministic(run_cli, small):
    chat(run_cli, 6)
    first = as_json(run_cli, "info", "--session", "s")
    assert first == as_json(run_cli, "info", "--session", "s")
    for key in SECTION_16_KEYS:
        assert key in first
    assert first["effective_window_tokens"] == 4096 and first["reserve_tokens"] == 1024
    assert first["compression_threshold_tokens"] == 4096 - 1024
    # what a compaction leaves: 60 % of the threshold, the kept tail (under the configured
    # 800) beside the summary's and the ledger's shares and the fixed part
    assert first["after_compaction_tokens"] == int(0.6 * 3072)
    fixed = sum(first["parts"][k] for k in ("system", "tools", "framing"))
    assert 0 < first["effective_keep_recent_tokens"] <= 800
    assert (fixed + first["effective_keep_recent_tokens"] + first["summary_cap_tokens"]
            + first["ledger_share_tokens"]) < first["after_compaction_tokens"]
    assert first["remaining_tokens"] == 3072 - first["used_tokens"]
    assert first["active_checkpoint_id"] is None and first["usage_source"] == "estimate"
    run_cli("compact", "--session", "s")
    after = as_json(run_cli, "info", "--session", "s")
    [cp] = as_json(run_cli, "checkpoints", "--session", "s")
    assert after["active_checkpoint_id"] == cp["id"]
    assert after["checkpoint_tokens_after"] == cp["tokens_after"]
    assert after["used_tokens"] == cp["tokens_after"]  # the same budgeter, the same figure
    assert after["checkpoint_degraded"] is False and after["checkpoint_generation"] == 1


def test_info_text_shows_configured_and_effective_values(run_cli, config_file):
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(SMALL.replace("reserve_tokens = 1024", "reserve_tokens = 16384"))
    chat(run_cli, 1)
    text = run_cli("info", "--session", "s").stdout
    assert re.search(r"Reserve\s+2,048  \(configured 16,384\)", text), text
    assert re.search(r"Auto-compact at\s+2,048", text) and "Used" in text
    assert re.search(r"Summary in use\s+none\n", text), text


def _summary_row(run_cli) -> str:
    text = run_cli("info", "--session", "s").stdout
    # the user's words only: no ids, generations, seqs or ASCII arrows anywhere in the card
    assert not re.search(r"\bcp_|\bgen\b|\bseq\b|->", text), text
    [row] = [line for line in text.splitlines() if line.startswith("Summary in use")]
    return row


@pytest.mark.slow
def test_info_text_names_the_summary_as_the_panel_does(run_cli, small):
    chat(run_cli, 6)
    run_cli("compact", "--session", "s")
    [cp] = as_json(run_cli, "checkpoints", "--session", "s")
    saved = cp["tokens_before"] - cp["tokens_after"]
    assert _summary_row(run_cli).endswith(
        f"Summary 1 · manual · saved {saved:,} tokens · covers messages "
        f"1–{cp['first_retained_seq'] - 1}")
    text = run_cli("info", "--session", "s").stdout
    assert re.search(rf"Sent as they are\s+\d+ messages, from message "
                     rf"{cp['first_retained_seq']} on\n", text), text
    assert re.search(rf"Compacted\s+{cp['tokens_before']:,} → {cp['tokens_after']:,} tokens",
                     text), text
    chat(run_cli, 5, start=6)
    run_cli("compact", "--session", "s")
    assert "Summary 2 · manual" in _summary_row(run_cli)
    run_cli("compact", "--session", "s", "--undo")  # the first is in use again, still number 1
    assert "Summary 1 · manual" in _summary_row(run_cli)


@pytest.mark.slow
def test_compact_undo_makes_the_parent_active_again(run_cli, small):
    chat(run_cli, 6)
    one = as_json(run_cli, "compact", "--session", "s")["checkpoint_id"]
    chat(run_cli, 5, start=6)
    two = as_json(run_cli, "compact", "--session", "s")["checkpoint_id"]
    result = run_cli("compact", "--session", "s", "--undo")
    assert result.status == 0
    assert result.stdout.splitlines() == [f"Compaction undone in s: {two} is no longer active",
                                          f"The context now uses checkpoint {one}",
                                          "Raw history unchanged"]
    assert as_json(run_cli, "info", "--session", "s")["active_checkpoint_id"] == one
    data = as_json(run_cli, "compact", "--session", "s", "--undo")
    assert data["status"] == "uncompacted" and data["active_checkpoint_id"] is None
    assert run_cli("compact", "--session", "s", "--undo").stdout.startswith(
        "Nothing to uncompact")
    assert len(as_json(run_cli, "checkpoints", "--session", "s")) == 2


@pytest.mark.slow
def test_fifty_turns_in_a_4k_window_never_overflow_and_tell_the_truth(run_cli, small):
    """The issue's "done means": token_limit 4096, reserve 1024, keep 800, fifty turns."""
    window, threshold = 4096, 3072
    compactions = []
    info = None
    for i in range(50):
        reply = ask(run_cli, LONG.format(i=i, port=8000 + i))
        # the offline model reports the prompt it received, counted like the budget counts
        prompt = reply["usage"]["prompt_tokens"]
        assert prompt <= window, (i, reply["usage"])
        if reply["compaction"]:
            assert reply["compaction"]["status"] == "compacted", reply["compaction"]
            compactions.append(reply["compaction"])
            assert prompt <= threshold  # compacted first, then sent
        elif info is not None:
            # /info before this turn said what the request would hold: it did, to the token
            new = tokens.count_message("user", LONG.format(i=i, port=8000 + i))
            assert prompt == info["used_tokens"] + new, (i, info, prompt)
        info = as_json(run_cli, "info", "--session", "s")
        assert info["remaining_tokens"] == max(0, threshold - info["used_tokens"])
    assert len(compactions) >= 5
    assert all(c["reason"] == "auto" and not c["degraded"] for c in compactions)
    checkpoints = as_json(run_cli, "checkpoints", "--session", "s")
    assert [c["id"] for c in checkpoints] == [c["checkpoint_id"] for c in reversed(compactions)]
    assert all(c["tokens_after"] <= threshold for c in checkpoints)
    history = as_json(run_cli, "history", "--session", "s")["messages"]
    assert [m["seq"] for m in history] == list(range(1, 101))
    assert [m["content"] for m in history if m["role"] == "user"] == [
        LONG.format(i=i, port=8000 + i) for i in range(50)]
    # the latest summary still carries facts from the start of the conversation
    assert "8000" in checkpoints[0]["summary"] or "/srv/svc0/app.toml" in checkpoints[0]["summary"]


def test_the_log_records_compactions_by_ids_and_counts_never_text(run_cli, small, home):
    chat(run_cli, 6)
    data = as_json(run_cli, "compact", "--session", "s")
    [cp] = as_json(run_cli, "checkpoints", "--session", "s")
    log = (home / "data" / "picochat.log").read_text()
    line = next(x for x in log.splitlines() if "compaction_committed" in x)
    assert data["checkpoint_id"] in line and "reason=manual" in line
    assert f"tokens_before={cp['tokens_before']}" in line
    assert f"first_retained_seq={cp['first_retained_seq']}" in line
    for fact in ("/srv/svc0/app.toml", "Please remember", "## Objective"):
        assert fact in cp["summary"] or fact == "Please remember"
        assert fact not in log


def test_compact_all_of_turns_shorter_than_their_summary_is_nothing_to_compact(run_cli, small):
    """Two short notes: any summary (its headings and facts) is longer than they are. That is
    nothing to compact (exit 0, the figures on stderr), not a failure blamed on the model."""
    for text in ("note 1: port 801 on host h1", "note 2: port 802 on host h2"):
        assert run_cli("ask", "--session", "s", text).status == 0
    result = run_cli("compact", "--session", "s", "--all")
    assert result.status == 0, result.stderr
    assert result.stdout.strip() == "Nothing to compact"
    assert "would not make the context smaller" in result.stderr
    assert "quality check" not in result.stderr and "summary_model" not in result.stderr
    assert as_json(run_cli, "checkpoints", "--session", "s") == []


def test_compact_says_on_stderr_how_many_facts_it_had_to_drop(run_cli, config_file, home):
    from picochat.storage import open_store
    from tests.helpers.conversations import plant_services

    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(SMALL.replace("token_limit = 4096", "token_limit = 2048"))
    store = open_store(home / "data" / "picochat.db")
    try:
        plant_services(store, store.create_session("s").id)
    finally:
        store.close()
    result = run_cli("compact", "--session", "s")
    assert result.status == 0, result.stderr
    assert result.stdout.startswith("Context compacted:")
    [line] = [x for x in result.stderr.splitlines() if "dropped to fit" in x]
    said = re.match(r"picochat: ([\d,]+) older exact facts dropped to fit; history_search "
                    r"finds them in the raw history$", line)
    n = int(said.group(1).replace(",", ""))
    assert n == as_json(run_cli, "info", "--session", "s")["facts_dropped"] > 0


def test_ask_refuses_a_message_larger_than_the_whole_window(run_cli, small):
    """A message over the window could never be answered, and once stored it would be in every
    later request. Counted in tokens: 3,000 crabs are fewer characters than the 4,096-token
    window but about three times as many tokens."""
    crabs = "🦀" * 3000
    assert len(crabs) < 4096 < tokens.count_text(crabs)
    for how in ({"text": crabs}, {"text": "-", "input": "the deploy log says " * 3000}):
        result = run_cli("ask", "--session", "s", how["text"], input=how.get("input"))
        assert result.status == 2, result.stderr
        [line] = result.stderr.splitlines()
        assert "more than the model's whole window of 4,096" in line, line
        assert line.endswith("nothing was sent or saved"), line
        assert result.stdout == ""
    # nothing stored, and a refused first message leaves no empty session behind
    assert as_json(run_cli, "sessions") == []
    # the next message is answered; a refused one in an existing session stores nothing
    assert ask(run_cli, "hello")["reply"]
    assert run_cli("ask", "--session", "s", crabs).status == 2
    assert len(as_json(run_cli, "history", "--session", "s")["messages"]) == 2


def test_compact_preview_prints_the_candidate_and_writes_nothing(run_cli, small):
    chat(run_cli, 5)
    before = as_json(run_cli, "info", "-s", "s")
    result = run_cli("compact", "-s", "s", "--preview")
    assert result.status == 0, result.stderr
    text = result.stdout
    assert text.startswith("Compaction preview of s (nothing written)")
    assert re.search(r"^Folds: +messages 1–\d+ \(\d+ turns?\)$", text, re.M)
    assert re.search(r"^Tokens: +[\d,]+ → [\d,]+$", text, re.M)
    assert re.search(r"^Gate: +passed$", text, re.M)
    assert re.search(r"^\+ #1: Please remember: service 0 listens on port 8000", text, re.M)
    assert "## Objective" in text
    after = as_json(run_cli, "info", "-s", "s")
    assert after["active_checkpoint_id"] is None
    assert after["checkpoint_generation"] == before["checkpoint_generation"]
    shown = as_json(run_cli, "compact", "-s", "s", "--preview")
    assert shown["status"] == "preview" and shown["gate"] == {"passed": True, "reason": None}
    assert shown["tokens_after"] < shown["tokens_before"]
    assert shown["ledger"]["added"][0]["seq"] == 1
    # the compaction it previewed is the one /compact then makes (the offline summary is
    # deterministic): the same figures
    done = as_json(run_cli, "compact", "-s", "s")
    assert (done["tokens_before"], done["tokens_after"], done["first_retained_seq"]) == (
        shown["tokens_before"], shown["tokens_after"], shown["first_retained_seq"])


def test_compact_undo_refuses_a_preview_flag(run_cli, small):
    chat(run_cli, 1)
    result = run_cli("compact", "-s", "s", "--undo", "--preview")
    assert result.status == 2
    assert result.stderr.strip() == ("picochat: --undo cannot go with --preview (undo the last "
                                      "compaction alone, or compact without --undo)")

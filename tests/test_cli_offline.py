"""The headless CLI end to end with the built-in offline model, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

from picochat.storage import open_store
from tests.helpers.waiting import WAIT_S, read_until


def test_version_does_not_import_litellm_or_textual(home):
    code = ("import sys; from picochat.cli.main import main\n"
            "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('litellm', 'textual', 'tiktoken') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.startswith("picochat ")
    assert proc.stdout.strip().endswith("[]")


def test_ask_offline_answers_and_a_second_ask_sees_the_first_turn(run_cli):
    first = run_cli("ask", "my staging port is 8443")
    assert first.status == 0, first.stderr
    assert "offline" in first.stdout and "my staging port is 8443" in first.stdout
    second = run_cli("ask", "what did I say?")
    assert second.status == 0, second.stderr
    # The offline reply reflects the whole request: it can only quote turn 1 if it was sent.
    assert "Earlier you said: “my staging port is 8443”" in second.stdout
    assert "4 messages (2 from you)" in second.stdout


def test_sessions_survive_restarts_and_history_is_the_raw_log(run_cli):
    run_cli("ask", "--session", "work", "first")
    run_cli("ask", "--session", "work", "second")
    listed = json.loads(run_cli("sessions", "--json").stdout)
    assert [s["name"] for s in listed] == ["work"] and listed[0]["messages"] == 4
    hist = json.loads(run_cli("history", "--session", "work", "--json").stdout)
    assert [(m["seq"], m["role"]) for m in hist["messages"]] == [
        (1, "user"), (2, "assistant"), (3, "user"), (4, "assistant")]
    assert hist["messages"][2]["content"] == "second"


def test_ask_json_prints_one_object(run_cli):
    result = run_cli("ask", "--json", "hi")
    assert result.status == 0
    body = json.loads(result.stdout)
    assert set(body) == {"session_id", "reply", "usage", "compaction"}
    assert body["compaction"] is None and "offline" in body["reply"]
    assert body["usage"]["prompt_tokens"] > 0 and body["usage"]["completion_tokens"] > 0


def test_ask_reads_stdin_and_rejects_empty(run_cli):
    ok = run_cli("ask", "-", input="from stdin\n")
    assert ok.status == 0 and "from stdin" in ok.stdout
    empty = run_cli("ask", "   ")
    assert empty.status == 2 and "empty" in empty.stderr and len(empty.stderr.splitlines()) == 1


def test_unknown_session_fails_but_ask_creates_it(run_cli):
    missing = run_cli("history", "--session", "nope")
    assert missing.status == 2 and "no session named 'nope'" in missing.stderr
    assert "Traceback" not in missing.stderr
    created = run_cli("ask", "--session", "nope", "hello")
    assert created.status == 0
    assert run_cli("history", "--session", "nope").status == 0


def test_commands_before_any_session_say_how_to_start(run_cli):
    result = run_cli("history")
    assert result.status == 2 and "picochat ask" in result.stderr


def test_clear_keeps_raw_history_and_marks_it(run_cli, home):
    run_cli("ask", "remember the code RX-42")
    cleared = run_cli("clear")
    assert cleared.status == 0 and "Raw history unchanged" in cleared.stdout
    after = run_cli("ask", "what is the code?")
    assert "Earlier you said" not in after.stdout  # the model no longer sees turn 1
    assert "2 messages (1 from you)" in after.stdout
    hist = json.loads(run_cli("history", "--json").stdout)["messages"]
    assert len(hist) == 4 and hist[0]["content"] == "remember the code RX-42"
    assert hist[0]["marks"] == ["cleared"] and hist[2]["marks"] == []
    text = run_cli("history").stdout
    assert "#1 · user" in text and "cleared" in text


def test_export_md_and_json(run_cli, home):
    run_cli("ask", "--session", "w", "export me")
    md = run_cli("export", "--session", "w", "--format", "md")
    assert md.status == 0 and md.stdout.startswith("# w") and "export me" in md.stdout
    target = home / "out" / "w.json"
    missing = run_cli("export", "--session", "w", "--format", "json", "-o", str(target))
    assert missing.status == 2 and "no such folder" in missing.stderr
    assert not target.parent.exists()  # a mistyped path is not created
    target.parent.mkdir()
    js = run_cli("export", "--session", "w", "--format", "json", "-o", str(target))
    assert js.status == 0 and js.stdout == ""
    body = json.loads(target.read_text())
    assert body["session"]["name"] == "w" and len(body["messages"]) == 2
    assert body["checkpoints"] == []
    bad = run_cli("export", "--session", "w", "--format", "pdf")
    assert bad.status == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_checkpoints_listed_newest_first_with_active_marked(run_cli, home):
    from picochat.messages import NewCheckpoint

    run_cli("ask", "--session", "c", "one")
    run_cli("ask", "--session", "c", "two")
    store = open_store(home / "data" / "picochat.db")
    s = store.require_session("c")
    first = store.commit_context_checkpoint(s.id, 0, NewCheckpoint(
        None, "## Objective\n- one", 3, 4, "manual", "offline", "offline", 100, 40))
    second = store.commit_context_checkpoint(s.id, 1, NewCheckpoint(
        first.id, "## Objective\n- two", 3, 4, "auto", "offline", "offline", 90, 30))
    store.close()
    rows = json.loads(run_cli("checkpoints", "--session", "c", "--json").stdout)
    assert [r["id"] for r in rows] == [second.id, first.id]
    assert [r["active"] for r in rows] == [True, False]
    text = run_cli("checkpoints", "--session", "c").stdout
    assert "* active" in text and "90 -> 30" in text
    export = run_cli("export", "--session", "c", "--format", "md").stdout
    assert "# Checkpoints" in export and "summarized in " + second.id in export


def test_bad_usage_is_one_line_exit_2(run_cli):
    result = run_cli("frobnicate")
    assert result.status == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_log_holds_no_message_text(run_cli, home):
    run_cli("ask", "secret-sauce-1234 is my password")
    log = (home / "data" / "picochat.log").read_text()
    assert "turn_ok" in log and "secret-sauce-1234" not in log


def test_ctrl_c_mid_stream_keeps_message_and_partial_answer(home, run_cli):
    import os
    import signal

    # The offline model waits this long before each of its 44 pieces: once the first piece is
    # shown the rest needs over 80 s, far beyond any delay between reading it and the signal
    # arriving, so the answer cannot end first (a short delay let it end on a busy machine).
    env = dict(os.environ, PICOCHAT_OFFLINE_DELAY_MS="2000")
    proc = subprocess.Popen([sys.executable, "-m", "picochat", "ask", "a long story please"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        first = read_until(proc.stdout, "I'm ").encode()  # the stream has begun
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert b"stopped; your message and the partial answer are saved" in err
    assert b"Traceback" not in err
    messages = json.loads(run_cli("history", "--json").stdout)["messages"]
    assert [(m["role"], m["status"]) for m in messages] == [
        ("user", "complete"), ("assistant", "interrupted")]
    assert messages[1]["content"].encode().startswith(first)
    assert messages[1]["marks"] == ["interrupted"]


def test_a_real_model_without_its_key_fails_before_writing_anything(run_cli, home):
    result = run_cli("ask", "--session", "s", "--model", "openai/gpt-4o-mini", "hi")
    assert result.status == 2
    assert "OPENAI_API_KEY is not set" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert json.loads(run_cli("sessions", "--json").stdout) == []


def test_every_command_refuses_an_invalid_config(run_cli, config_file):
    run_cli("ask", "hi")
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text("default_model = 3\n")
    for args in (("sessions",), ("history",), ("clear",), ("export", "--format", "md")):
        result = run_cli(*args)
        assert result.status == 2, args
        assert "default_model" in result.stderr and str(config_file) in result.stderr


def test_an_explicit_config_path_must_exist(run_cli, home):
    missing = home / "typo.toml"
    result = run_cli("--config", str(missing), "config", "show")
    assert result.status == 2 and "no such config file" in result.stderr
    assert run_cli("--config", str(missing), "config", "init").status == 0
    assert run_cli("--config", str(missing), "config", "show").status == 0

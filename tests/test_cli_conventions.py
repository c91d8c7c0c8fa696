"""The command line's habits, as users of llm, aichat and elia expect them: short flags, a
message in several words or from a pipe, help with examples, `paths`, and a log level."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from picochat.cli import commands
from picochat.cli.main import build_parser, main
from tests.helpers.cli import CliResult

REPO = Path(__file__).resolve().parent.parent
COMMANDS = ("ask", "compact", "info", "clear", "pin", "pins", "unpin", "sessions", "history",
            "branches", "fork", "checkpoints", "export",
            "config", "paths", "completion")


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> CliResult:
    """`picochat ARGV` in this process (faster than a subprocess where no stdin is involved)."""
    try:
        status = main(list(argv))
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return CliResult(status, captured.out, captured.err)


def contents(run_cli, session: str) -> list[str]:
    history = json.loads(run_cli("history", "-s", session, "--json").stdout)
    return [m["content"] for m in history["messages"] if m["role"] == "user"]


# --- 1. short flags ----------------------------------------------------------------------------


def _parsers():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return [("picochat", parser), *sub.choices.items()]


def test_every_session_and_model_flag_has_its_short_form():
    seen = set()
    for name, parser in _parsers():
        flags = {tuple(a.option_strings) for a in parser._actions if a.option_strings}
        for long, short in (("--session", "-s"), ("--model", "-m")):
            owning = [f for f in flags if long in f]
            if owning:
                assert owning == [(short, long)], (name, owning)
                seen.add((name, long))
    assert ("picochat", "--session") in seen and ("ask", "--model") in seen


def test_short_flags_pick_the_session_and_the_model(run_cli):
    assert run_cli("ask", "-s", "work", "-m", "offline", "first words").status == 0
    listed = json.loads(run_cli("sessions", "--json").stdout)
    assert [(s["name"], s["model"]) for s in listed] == [("work", "offline")]
    assert contents(run_cli, "work") == ["first words"]
    args = build_parser().parse_args(["-s", "work", "-m", "offline"])  # the app's own flags
    assert (args.session, args.model) == ("work", "offline")


# --- 2. ask: several words, a pipe, a terminal ---------------------------------------------------


def test_ask_joins_its_words_before_and_after_flags(run_cli):
    assert run_cli("ask", "-s", "w", "hello", "there", "world").status == 0
    assert run_cli("ask", "explain", "this", "-s", "w", "--json", "please").status == 0
    assert run_cli("ask", "-s", "w", "--", "-v", "means", "what?").status == 0
    assert contents(run_cli, "w") == ["hello there world", "explain this please",
                                      "-v means what?"]


def test_ask_refuses_an_unknown_flag_among_its_words(run_cli):
    result = run_cli("ask", "what", "does", "-x", "do")
    assert result.status == 2 and len(result.stderr.splitlines()) == 1
    assert "-x" in result.stderr and "--" in result.stderr
    assert run_cli("sessions", "--json").stdout.strip() == "[]"  # nothing was sent


def test_ask_reads_a_pipe_without_dash(run_cli):
    result = run_cli("ask", "-s", "p", input="from a pipe\nsecond line\n")
    assert result.status == 0, result.stderr
    assert contents(run_cli, "p") == ["from a pipe\nsecond line\n"]
    dashed = run_cli("ask", "-s", "p", "-", input="with a dash")
    assert dashed.status == 0 and contents(run_cli, "p")[-1] == "with a dash"


def test_words_beat_a_pipe(run_cli):
    assert run_cli("ask", "-s", "p", "the words", input="the pipe").status == 0
    assert contents(run_cli, "p") == ["the words"]


@pytest.mark.parametrize("piped", ["", "  \n\t \n"])
def test_an_empty_or_blank_pipe_is_refused(run_cli, piped):
    result = run_cli("ask", input=piped)
    assert result.status == 2 and len(result.stderr.splitlines()) == 1
    assert "empty" in result.stderr and "Traceback" not in result.stderr


def test_ask_with_nothing_on_a_terminal_says_what_to_do(home):
    """No words and stdin a terminal: one usage line at once, not a wait for typing."""
    import pty

    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "picochat", "ask"], stdin=follower,
                              capture_output=True, text=True, timeout=60)
    finally:
        os.close(follower)
        os.close(leader)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1
    assert "no message" in proc.stderr and 'picochat ask "hello"' in proc.stderr
    assert "echo hello | picochat ask" in proc.stderr
    assert not (home / "data").exists()


# --- 3. help -------------------------------------------------------------------------------------


def _help(capsys, monkeypatch, *argv: str) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    result = run_main(capsys, *argv, "--help")
    assert result.status == 0 and not result.stderr
    return result.stdout


def _examples(text: str) -> list[str]:
    return text.split("examples:\n", 1)[1].split("\n\n", 1)[0].splitlines()


def test_the_app_alone_parses_as_with_every_command_known():
    """`picochat` alone skips building the commands' parsers (5 ms before the first frame):
    the app gets the namespace the whole parser gives (any word at all gets the whole one,
    which every other test here goes through)."""
    assert build_parser(commands=False).parse_args([]) == build_parser().parse_args([])


def test_the_command_list_is_the_parsers():
    assert tuple(name for name, _ in _parsers()[1:]) == COMMANDS


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_each_help_explains_and_shows_examples_that_parse(capsys, monkeypatch, command):
    text = _help(capsys, monkeypatch, *([command] if command else []))
    usage, description = text.split("\n\n")[:2]
    assert usage.startswith("usage: picochat")
    assert len(description.split()) >= 8  # a sentence, not a label
    examples = _examples(text)
    assert examples and all(line.startswith("  ") for line in examples)
    assert max(map(len, text.splitlines())) <= 80
    parser = build_parser()
    found = 0
    for line in examples:  # `picochat WORDS` up to a pipe, a bracket, a redirect or two spaces
        for match in re.finditer(r"picochat((?: (?:\"[^\"]*\"|[^\s|()<>\"']+))*)", line):
            found += 1
            try:
                parser.parse_args(shlex.split(match.group(1)))
            except SystemExit:
                pytest.fail(f"the example does not parse: {line.strip()}")
    capsys.readouterr()
    assert found >= (1 if command else 4)


def test_top_help_shows_examples_before_options_and_environment_after(capsys, monkeypatch):
    text = _help(capsys, monkeypatch)
    assert text.index("examples:") < text.index("options:") < text.index("environment:")
    assert all(f"    {c} " in text for c in COMMANDS)


def test_config_help_explains_each_action(capsys, monkeypatch):
    text = _help(capsys, monkeypatch, "config")
    for action in ("path", "show", "init"):
        assert re.search(rf"^  {action}\s+\w+ \w+", text, re.M), action


# Read only by the test suite, not by people: the help need not list them.
TEST_ONLY_ENV = {"PICOCHAT_OFFLINE_DELAY_MS", "PICOCHAT_BUSY_TIMEOUT_MS", "PICOCHAT_CRASH_POINT",
                 "PICOCHAT_CRASH_FILE"}


def test_top_help_lists_every_environment_variable_the_code_reads(capsys, monkeypatch):
    read = set()
    for path in (REPO / "picochat").rglob("*.py"):
        read |= set(re.findall(  # os.environ.get("X"), os.getenv("X"), os.environ["X"] not set
            r"""(?:environ\.get\(|getenv\()["']([A-Z0-9_]+)["']|environ\[["']([A-Z0-9_]+)["']\]"""
            r"""(?!\s*=)""", path.read_text(encoding="utf-8")))
    read = {name for pair in read for name in pair if name}
    assert {"PICOCHAT_DATA_DIR", "PICOCHAT_LOG_LEVEL", "OLLAMA_HOST"} <= read  # the scan works
    environment = _help(capsys, monkeypatch).split("environment:\n", 1)[1]
    missing = sorted(name for name in read - TEST_ONLY_ENV if name not in environment)
    assert not missing, f"add to the environment list of `picochat --help`: {missing}"
    assert "API_KEY" in environment  # provider keys in general


# --- 5. paths ------------------------------------------------------------------------------------


def test_paths_lists_each_file_once_a_line(capsys, home):
    result = run_main(capsys, "paths")
    assert result.status == 0, result.stderr
    rows = [re.split(r" {2,}", line, maxsplit=1) for line in result.stdout.splitlines()]
    assert dict(rows) == {
        "config": str(home / "config" / "config.toml"),
        "database": str(home / "data" / "picochat.db"),
        "log": str(home / "data" / "picochat.log"),
        "themes": str(home / "config" / "themes"),
        "cache": str(home / "data" / "cache"),
    }
    assert not (home / "data").exists() and not (home / "config").exists()


def test_paths_follows_the_flags_and_prints_json(capsys, home, tmp_path):
    result = run_main(capsys, "paths", "--json", "--data-dir", str(tmp_path / "d"),
                      "--config", str(tmp_path / "c" / "my.toml"))
    assert result.status == 0, result.stderr
    assert json.loads(result.stdout) == {
        "config": str(tmp_path / "c" / "my.toml"), "database": str(tmp_path / "d" / "picochat.db"),
        "log": str(tmp_path / "d" / "picochat.log"), "themes": str(tmp_path / "c" / "themes"),
        "cache": str(tmp_path / "d" / "cache")}


def test_paths_works_while_the_config_is_broken(capsys, config_file):
    config_file.parent.mkdir(parents=True)
    config_file.write_text("this is [not toml\n")
    assert run_main(capsys, "paths").status == 0
    assert run_main(capsys, "sessions").status == 2  # the others still refuse it


# --- 6. the log level -------------------------------------------------------------------------


def _log(home: Path) -> str:
    path = home / "data" / "picochat.log"
    return path.read_text(encoding="utf-8") if path.exists() else ""


def test_verbose_writes_debug_lines_and_still_no_message_text(run_cli, home):
    assert run_cli("ask", "-s", "v", "the secret is SWORDFISH").status == 0
    assert "DEBUG" not in _log(home) and "turn_ok" in _log(home)
    assert run_cli("--verbose", "ask", "-s", "v", "still SWORDFISH").status == 0
    assert run_cli("history", "-s", "v", "--verbose").status == 0
    debug = [line for line in _log(home).splitlines() if " DEBUG " in line]
    assert any("command=ask" in line for line in debug)
    assert any("command=history" in line for line in debug)
    assert any("model_chosen model=offline from=auto-detection" in line for line in debug)
    assert "SWORDFISH" not in _log(home)


def test_log_level_from_the_environment(run_cli, home):
    quiet = run_cli("ask", "hello", env={"PICOCHAT_LOG_LEVEL": "warning"})
    assert quiet.status == 0
    assert "turn_ok" not in _log(home)
    assert run_cli("ask", "hello", env={"PICOCHAT_LOG_LEVEL": "DEBUG"}).status == 0
    assert " DEBUG " in _log(home)


def test_a_bad_log_level_is_one_usage_line(run_cli, home):
    result = run_cli("sessions", env={"PICOCHAT_LOG_LEVEL": "LOUD"})
    assert result.status == 2 and len(result.stderr.splitlines()) == 1
    assert "PICOCHAT_LOG_LEVEL" in result.stderr and "'LOUD'" in result.stderr
    assert "DEBUG, INFO, WARNING, ERROR" in result.stderr
    assert not (home / "data").exists()


def test_an_internal_error_names_the_log_it_wrote(capsys, monkeypatch, home):
    def broken(app):
        quoted = "SWORD" + "FISH"  # the frames' source lines are logged: not this text
        raise RuntimeError(f"a message that may quote the user: {quoted}")
    monkeypatch.setitem(commands.HANDLERS, "sessions", broken)
    result = run_main(capsys, "sessions")  # reads only: it had not opened the log itself
    log = home / "data" / "picochat.log"
    assert result.status == 1 and result.stdout == ""
    assert result.stderr == f"picochat: internal error (RuntimeError); details are in {log}\n"
    text = log.read_text(encoding="utf-8")
    assert "internal_error kind=RuntimeError" in text and "SWORDFISH" not in text

"""`picochat completion bash|zsh|fish`: scripts that load in the real shells and complete the
parser's own commands, flags, choices and session names."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from picochat.cli.completion import commands
from picochat.cli.main import build_parser

COMMANDS = [c.name for c in commands(build_parser())[1:]]
SESSIONS = ["work", "my notes", "$(touch PWNED)"]


@pytest.fixture
def shell_env(home: Path, run_cli) -> dict[str, str]:
    """A PATH whose `picochat` runs this checkout, with three sessions already made."""
    bin_dir = home / "bin"
    bin_dir.mkdir()
    script = bin_dir / "picochat"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m picochat "$@"\n')
    script.chmod(0o755)
    for name in SESSIONS:
        assert run_cli("ask", "-s", name, "hello").status == 0
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _script(env: dict[str, str], shell: str) -> str:
    proc = subprocess.run(["picochat", "completion", shell], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return proc.stdout


def test_unknown_shell_is_a_usage_error(run_cli):
    result = run_cli("completion", "tcsh")
    assert result.status == 2 and "bash" in result.stderr and "fish" in result.stderr


def test_session_names_for_completion_skip_what_a_shell_cannot_take(run_cli, home):
    for name in ("plain", "-dash", "two lines"):
        assert run_cli("ask", f"--session={name}", "hi").status == 0
    # a line break in a name is refused now; an older picochat could have stored one
    with sqlite3.connect(home / "data" / "picochat.db") as db:
        db.execute("UPDATE sessions SET name = 'two\nlines' WHERE name = 'two lines'")
    db.close()
    assert sorted(run_cli("sessions", "--names").stdout.splitlines()) == ["plain"]


def test_no_sessions_no_names_and_nothing_created(run_cli, home):
    result = run_cli("sessions", "--names")
    assert result.status == 0 and result.stdout == ""
    assert not (home / "data").exists()


# --- bash ----------------------------------------------------------------------------------------


BASH_COMPLETE = r'''
source <(picochat completion bash) || exit 9
complete -p picochat
while IFS= read -r line; do
    eval "COMP_WORDS=($line)"
    COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
    COMPREPLY=()
    _picochat_complete
    (IFS='|'; printf '%s\n' "${COMPREPLY[*]}")
done
'''


def _bash(env: dict[str, str], cwd: Path, *lines: str) -> list[list[str]]:
    """What bash offers for each command line; its last word is the one being completed."""
    proc = subprocess.run(["bash", "-c", BASH_COMPLETE], env=env, cwd=cwd, capture_output=True,
                          text=True, input="\n".join(lines) + "\n", timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == "complete -F _picochat_complete picochat"
    return [row.split("|") if row else [] for row in out[1:]]


def test_bash_completes_commands_flags_choices_and_sessions(shell_env, home):
    got = _bash(shell_env, home,
                "picochat a", "picochat ''", "picochat -m offline c", "picochat config ''",
                "picochat export --format ''", "picochat ask --j", "picochat -s ''",
                "picochat ask -s m", "picochat completion ''")
    assert got[0] == ["ask"]
    assert got[1] == COMMANDS
    assert got[2] == ["compact", "clear", "checkpoints", "config", "completion"]
    assert got[3] == ["path", "show", "init"]
    assert got[4] == ["md", "json"]
    assert got[5] == ["--json"]
    assert sorted(got[6]) == sorted(["work", "my\\ notes", "\\$\\(touch\\ PWNED\\)"])
    assert got[7] == ["my\\ notes"]
    assert got[8] == ["bash", "zsh", "fish"]
    assert not (home / "PWNED").exists()  # a session's name is never run


def test_bash_offers_every_flag_of_every_command(shell_env, home):
    parser_flags = {c.name: sorted(f for o in c.options for f in o.flags)
                    for c in commands(build_parser())[1:]}
    got = _bash(shell_env, home, *(f"picochat {name} -" for name in parser_flags))
    assert {name: sorted(row) for name, row in zip(parser_flags, got)} == parser_flags
    assert "--session" in parser_flags["history"] and "--force" in parser_flags["config"]


# --- zsh -----------------------------------------------------------------------------------------

needs_zsh = pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed")
needs_fish = pytest.mark.skipif(not shutil.which("fish"), reason="fish is not installed")

# Complete one line in an interactive zsh on a pseudo-terminal (zsh/zpty), compinit loaded and
# the script sourced; compadd is wrapped to write each candidate it is given to a file.
ZSH_CAPTURE = r'''
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "autoload -U compinit; compinit -u -D; source ${(q)1}"
zpty -w z "compadd () { builtin compadd -O __hits \"\$@\"; print -rl -- \$__hits >> ${(q)2};"\
" builtin compadd \"\$@\" }"
zpty -w z "bindkey '^I' complete-word; : > ${(q)2}.ready"
for i in {1..300}; do [[ -e $2.ready ]] && break; sleep 0.1; done
zpty -n -w z "$3"$'\t'
zpty -w z $'\C-u: > '${(q)2}.done
for i in {1..300}; do [[ -e $2.done ]] && break; sleep 0.1; done
zpty -d z
[[ -e $2.done ]]
'''


def _zsh(env: dict[str, str], home: Path, line: str) -> set[str]:
    script, hits = home / "_picochat", home / "hits"
    script.write_text(_script(env, "zsh"))
    for stale in (hits, Path(f"{hits}.ready"), Path(f"{hits}.done")):
        stale.unlink(missing_ok=True)
    proc = subprocess.run(["zsh", "-f", "-c", ZSH_CAPTURE, "capture", str(script), str(hits),
                           line], env=env, cwd=home, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(hits.read_text().splitlines()) - {""} if hits.exists() else set()


@needs_zsh
def test_zsh_script_parses(shell_env, home):
    path = home / "_picochat"
    path.write_text(_script(shell_env, "zsh"))
    proc = subprocess.run(["zsh", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@needs_zsh
def test_zsh_completes_commands_choices_and_sessions(shell_env, home):
    assert _zsh(shell_env, home, "picochat a") == {"ask"}
    assert _zsh(shell_env, home, "picochat ") == set(COMMANDS)
    assert _zsh(shell_env, home, "picochat config ") == {"path", "show", "init"}
    assert _zsh(shell_env, home, "picochat ask -s ") == set(SESSIONS)
    assert "--json" in _zsh(shell_env, home, "picochat history --")
    assert not (home / "PWNED").exists()


# --- fish ----------------------------------------------------------------------------------------


def _fish(env: dict[str, str], home: Path, line: str) -> list[str]:
    code = f"picochat completion fish | source; complete -C {_fish_quote(line)}"
    proc = subprocess.run(["fish", "--no-config", "-c", code], env=env, cwd=home,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [row.split("\t", 1)[0] for row in proc.stdout.splitlines()]


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@needs_fish
def test_fish_script_parses(shell_env):
    proc = subprocess.run(["fish", "--no-config", "-n"], input=_script(shell_env, "fish"),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@needs_fish
def test_fish_completes_commands_choices_and_sessions(shell_env, home):
    assert _fish(shell_env, home, "picochat a") == ["ask"]
    assert sorted(_fish(shell_env, home, "picochat ")) == sorted(COMMANDS)
    assert sorted(_fish(shell_env, home, "picochat config ")) == ["init", "path", "show"]
    assert sorted(_fish(shell_env, home, "picochat ask -s ")) == sorted(SESSIONS)
    assert "--json" in _fish(shell_env, home, "picochat history --")
    assert not (home / "PWNED").exists()

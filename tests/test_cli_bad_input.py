"""Bad input that used to end badly (issue 18, items 7 and 8), through the real CLI: stdout on
a full disk, a message or a config that never ends, a FIFO where a file should be, a config
nested thousands of levels deep, an empty `--session`, read-only commands on a fresh machine,
and the app started without a terminal. Each ends with one line, the documented exit status,
and nothing lost or created. Every subprocess is bounded: a regression fails, never hangs."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import CliResult

TIMEOUT = 60.0  # seconds: each run takes about a second; this only catches a hang
FULL = Path("/dev/full")


def run_with(*args: str, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
             timeout: float = TIMEOUT) -> CliResult:
    """`python -m picochat ARGS` with the given stdin and stdout (files or pipes)."""
    proc = subprocess.run([sys.executable, "-m", "picochat", *args], stdin=stdin, stdout=stdout,
                          stderr=subprocess.PIPE, timeout=timeout, env=dict(os.environ))
    out = proc.stdout.decode("utf-8", "replace") if proc.stdout is not None else ""
    return CliResult(proc.returncode, out, proc.stderr.decode("utf-8", "replace"))


def one_line(result: CliResult, status: int, *phrases: str) -> str:
    assert result.status == status, (result.status, result.stderr)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("picochat: "), result.stderr
    for phrase in phrases:
        assert phrase in lines[0], (phrase, lines[0])
    return lines[0]


def messages(run_cli, session: str = "s") -> list[tuple[str, str, str]]:
    body = json.loads(run_cli("history", "--session", session, "--json").stdout)
    return [(m["role"], m["status"], m["content"]) for m in body["messages"]]


# --- 7c, 7d: configs that are not small regular files, or nest too deep --------------------------


def deep_list(path: Path) -> Path:
    path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    return path


def deep_table(path: Path) -> Path:
    path.write_text("a = " + "{b = " * 5000 + "1" + "}" * 5000 + "\n")
    return path


def big_file(path: Path) -> Path:
    path.write_text("# padding\n" * 120_000)  # 1.2 MB of comments: valid TOML, too large
    return path


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("make, phrase", [
    (lambda p: Path("/dev/zero"), "not a regular file (a character device)"),
    (fifo, "not a regular file (a FIFO)"),
    (big_file, "larger than 1 MiB"),
    (deep_list, "nested too deeply"),
    (deep_table, "nested too deeply"),
])
@pytest.mark.parametrize("args", [("info",), ("ask", "hi")])
def test_a_config_that_is_no_small_regular_file_or_nests_too_deep_is_exit_2(
        run_cli, home, make, phrase, args):
    path = make(home / "bad.toml")
    result = run_cli("--config", str(path), *args, timeout=TIMEOUT)
    one_line(result, 2, str(path), phrase)
    assert not (home / "data").exists()


def test_a_fifo_as_the_default_config_does_not_hang_the_app(run_cli, config_file):
    config_file.parent.mkdir(parents=True)
    fifo(config_file)
    one_line(run_cli("sessions", timeout=TIMEOUT), 2, str(config_file), "a FIFO")


def test_a_symlink_to_a_regular_config_is_read(run_cli, home):
    real = home / "real.toml"
    real.write_text('[agents.default]\nsystem_prompt = "via a link"\n')
    link = home / "link.toml"
    link.symlink_to(real)
    result = run_cli("--config", str(link), "config", "show", timeout=TIMEOUT)
    assert result.status == 0 and "via a link" in result.stdout, result.stderr


def test_a_fifo_or_a_deep_file_among_the_themes_is_a_problem_not_a_hang(tmp_path):
    from picochat.tui.themes import load_themes

    folder = tmp_path / "themes"
    folder.mkdir()
    fifo(folder / "pipe.toml")
    deep_list(folder / "deep.toml")
    (folder / "ok.toml").write_text('name = "mine"\nprimary = "#7aa2f7"\n')
    found: list = []
    worker = threading.Thread(target=lambda: found.append(load_themes(folder)), daemon=True)
    worker.start()
    worker.join(TIMEOUT)
    if worker.is_alive():  # let the stuck open() go: a writer on the FIFO releases it
        os.close(os.open(folder / "pipe.toml", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("load_themes hung on a FIFO")
    [(themes, problems)] = found
    assert [t.name for t in themes] == ["mine"]
    assert {(p.path.name, p.message) for p in problems} == {
        ("deep.toml", "not valid TOML (nested too deeply)"),
        ("pipe.toml", "not a regular file (a FIFO); not read")}

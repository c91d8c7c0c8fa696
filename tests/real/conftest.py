"""Fixtures of the real-model tests (`pytest -m real`): llama-cpp-python's server with
SmolLM2-135M-Instruct on 127.0.0.1, started once per context size for the whole run, and a
picochat pointed at it as a user points it (a config file, `--data-dir`, `--config`).

Without the `real` extra installed, every test here fails with one line saying how to install
it: CI must not pass by skipping them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.conftest import CliResult
from tests.real.llama_server import LlamaServer, RealServerError, start_server

HERE = Path(__file__).parent
# SmolLM2 answers at length unless told not to; every answer costs the suite seconds
SHORT_ANSWERS = "You are a helpful assistant. Answer in one short sentence."
ANSWER_CAP = 64  # tokens of a chat answer the server writes in a session test (see proxy.py)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test in this folder is `real`, so the default run (`-m 'not ... real'`) leaves
    it out even if its module forgot the mark."""
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.real)


class ServerPool:
    """One server per context size, started on first use, all stopped at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.servers: dict[int, LlamaServer] = {}
        self.failed: dict[int, str] = {}

    def get(self, n_ctx: int) -> LlamaServer:
        if n_ctx in self.failed:
            pytest.fail(self.failed[n_ctx], pytrace=False)
        server = self.servers.get(n_ctx)
        if server is not None and server.process.poll() is not None:
            pytest.fail(f"the real server (n_ctx {n_ctx}) died during the run: "
                        f"{server.log_tail()} (log: {server.log})", pytrace=False)
        if server is None:
            try:
                server = self.servers[n_ctx] = start_server(n_ctx, self.log_dir)
            except RealServerError as exc:
                self.failed[n_ctx] = str(exc)
        if n_ctx in self.failed:  # outside the except: one line, no chained traceback
            pytest.fail(self.failed[n_ctx], pytrace=False)
        return server

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()


@pytest.fixture(scope="session")
def real_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    pool = ServerPool(tmp_path_factory.mktemp("llama-server"))
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture(scope="session")
def server_2048(real_servers: ServerPool) -> LlamaServer:
    """The server with a 2,048-token context (the issue's "small n_ctx")."""
    return real_servers.get(2048)


@pytest.fixture(scope="session")
def server_8192(real_servers: ServerPool) -> LlamaServer:
    """The server with an 8,192-token context: SmolLM2's own, and issue 30's window."""
    return real_servers.get(8192)


@dataclass(frozen=True)
class Turn:
    status: int
    out: dict[str, Any] | None   # the `--json` answer, None when stdout held none
    stderr: str

    @property
    def reply(self) -> str:
        return (self.out or {}).get("reply") or ""

    @property
    def compaction(self) -> dict[str, Any] | None:
        return (self.out or {}).get("compaction")


@dataclass
class Picochat:
    """picochat with its own data dir and config file, run as a user runs it."""

    data_dir: Path
    config: Path
    capsys: pytest.CaptureFixture[str]
    turns: list[Turn] = field(default_factory=list)

    def configure(self, api_base: str, token_limit: int, *, tools: bool = True,
                  extra: str = "") -> None:
        self.config.parent.mkdir(parents=True, exist_ok=True)
        self.config.write_text(textwrap.dedent(f'''\
            default_model = "smol"
            [models.smol]
            model = "openai/smollm2"
            api_base = "{api_base}"
            token_limit = {token_limit}
            [agents.default]
            system_prompt = "{SHORT_ANSWERS}"
        ''') + ("" if tools else "[tools]\nenabled = []\n") + textwrap.dedent(extra))

    def flags(self) -> list[str]:
        return ["--data-dir", str(self.data_dir), "--config", str(self.config)]

    def ask(self, text: str, session: str = "s") -> Turn:
        """`picochat ask --json` in this process (litellm is imported once, not per turn):
        everything that outlives a turn must be in the data dir, as between processes."""
        from picochat.cli.main import main

        status = main(["ask", *self.flags(), "--session", session, "--json", text])
        out, err = self.capsys.readouterr()
        try:
            parsed = json.loads(out) if out.strip() else None
        except ValueError:
            parsed = None
        turn = Turn(status, parsed, err)
        self.turns.append(turn)
        return turn

    def run(self, *args: str, timeout: float = 300) -> CliResult:
        """`picochat ARGS` as its own process."""
        proc = subprocess.run([sys.executable, "-m", "picochat", *args, *self.flags()],
                              capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ))
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    def ask_process(self, text: str, session: str = "s") -> Turn:
        """`picochat ask --json` as its own process: nothing carries over but the data dir."""
        result = self.run("ask", "--session", session, "--json", text)
        try:
            parsed = json.loads(result.stdout) if result.stdout.strip() else None
        except ValueError:
            parsed = None
        return Turn(result.status, parsed, result.stderr)

    def info(self, session: str = "s") -> tuple[dict[str, Any], str]:
        """`picochat info` from a new process: (its --json, its text card)."""
        as_json = self.run("info", "--session", session, "--json")
        assert as_json.status == 0, as_json.stderr
        text = self.run("info", "--session", session)
        assert text.status == 0, text.stderr
        return json.loads(as_json.stdout), text.stdout

    def checkpoints(self, session: str = "s") -> list[dict[str, Any]]:
        result = self.run("checkpoints", "--session", session, "--json")
        assert result.status == 0, result.stderr
        return json.loads(result.stdout)


@pytest.fixture
def picochat(home: Path, capsys: pytest.CaptureFixture[str]) -> Picochat:
    return Picochat(home / "data", home / "config" / "config.toml", capsys)

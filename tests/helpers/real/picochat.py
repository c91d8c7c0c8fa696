"""picochat pointed at a real server as a user points it (a config file, `--data-dir`,
`--config`), run in this process or as its own, with what each turn answered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import CliResult

# SmolLM2 answers at length unless told not to; every answer costs the suite seconds
SHORT_ANSWERS = "You are a helpful assistant. Answer in one short sentence."
ANSWER_CAP = 64  # tokens of a chat answer the server writes in a session test (see proxy.py)


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

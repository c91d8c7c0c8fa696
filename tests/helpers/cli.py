"""Running the `picochat` command as a user does, and reading what it printed."""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass

from tests.helpers.config import ENV
from tests.helpers.waiting import WAIT_S


@dataclass(frozen=True)
class CliResult:
    status: int
    stdout: str
    stderr: str


NOISE = ("Traceback", "Give Feedback", "Provider List", "LiteLLM")


# Records every outgoing connection and DNS lookup of the CLI subprocess to a file.
SITECUSTOMIZE = textwrap.dedent('''
    import json, os, sys
    _log = os.environ.get("PICOCHAT_TEST_NET_LOG")
    if _log:
        def _hook(event, args):
            if event in ("socket.connect", "socket.getaddrinfo"):
                addr = args[1] if event == "socket.connect" else args[:2]
                if isinstance(addr, tuple):
                    addr = list(addr)[:2]
                with open(_log, "a") as f:
                    f.write(json.dumps([event, addr], default=str) + "\\n")
        sys.addaudithook(_hook)
''')


def history(run_cli, *args: str) -> list[dict]:
    result = run_cli("history", *args, "--json", env=ENV)
    assert result.status == 0, result.stderr
    return json.loads(result.stdout)["messages"]


def assert_clean_failure(result) -> None:
    assert result.status == 1, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("picochat: ")
    clean(result)


def clean(result) -> None:
    """Nothing of litellm's own noise (a traceback, its banners) reached the user."""
    for word in NOISE:
        assert word not in result.stdout and word not in result.stderr, (word, result)


LITELLM_WORDS = ("litellm", "OpenAIException", "APIConnectionError", "MidStreamFallback",
                 "Expecting value", "Original exception", "Connection error")


def ask(run_cli, text: str, env: dict[str, str] | None = None):
    # through litellm: its import alone took ~50 s on a busy machine (run_cli's 60 s default
    # was hit under load)
    return run_cli("ask", text, env=env or ENV, timeout=3 * WAIT_S)


def assert_no_internals(result) -> None:
    for word in LITELLM_WORDS + NOISE:
        assert word not in result.stderr and word not in result.stdout, (word, result.stderr)


def roles(run_cli) -> list[tuple[str, str]]:
    return [(m["role"], m["status"]) for m in history(run_cli)]

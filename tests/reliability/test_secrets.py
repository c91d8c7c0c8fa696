"""Secrets and privacy (issue 7): a planted API key reaches no file, no output and no error
message; message text and summaries reach no file but the database and the user's exports;
config writes are private (mode 0600); a summary request carries no provider-private reasoning.

The session test runs a realistic CLI session in subprocesses against the fake OpenAI server,
then greps every file written under the test's directory (data, config, log, exports, and the
HOME, XDG and TMPDIR the processes were given) and every command's stdout and stderr.
"""

from __future__ import annotations

import json
import os
import stat
import textwrap
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from picochat.config import load_config, save_ui_theme
from tests.helpers.fakes import openai as fo
from tests.helpers.fakes.openai import FakeOpenAI, summary_text

KEY_ENV = "PICOCHAT_PLANTED_KEY"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- config writes ----------------------------------------------------------------------------


def test_config_init_and_a_theme_write_leave_the_config_private(run_cli, config_file, tmp_path):
    os.umask(umask := os.umask(0o022))  # read the umask; files would be 0644 under it
    try:
        result = run_cli("config", "init")
        assert result.status == 0, result.stderr
        assert mode(config_file) == 0o600, oct(mode(config_file))

        save_ui_theme(config_file, "picochat-light")  # what /theme calls
        assert load_config(config_file).ui.theme == "picochat-light"
        assert mode(config_file) == 0o600, oct(mode(config_file))

        fresh = tmp_path / "elsewhere" / "config.toml"  # /theme with no config file yet
        save_ui_theme(fresh, "picochat-light")
        assert mode(fresh) == 0o600, oct(mode(fresh))
    finally:
        os.umask(umask)


# --- the fake server streams reasoning ---------------------------------------------------------


def _answer_with_reasoning(original):
    """The fake's handler, plus ("reasoning", thoughts, reply): a stream whose first deltas
    carry provider-private `reasoning_content` (as DeepSeek-R1 and reasoning proxies send it)."""

    def answer(self, body, item):
        if item[0] != "reasoning":
            return original(self, body, item)
        thoughts, reply = item[1], item[2]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body.get("model", "fake-model")}

        def send(**extra):
            self._chunk(b"data: " + json.dumps({**base, **extra}).encode() + b"\n\n")

        for piece in thoughts.split(" "):
            send(choices=[{"index": 0, "delta": {"role": "assistant", "content": None,
                                                  "reasoning_content": piece + " "},
                           "finish_reason": None}])
        send(choices=[{"index": 0, "delta": {"content": reply}, "finish_reason": None}])
        send(choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}])
        send(choices=[], usage=self.server.fake.usage_for(body, reply))
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    return answer


# --- the session --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    args: tuple[str, ...]
    status: int
    stdout: str
    stderr: str


# stdout that may show message text or summaries: the user asked for exactly that
SHOWS_TEXT = {"ask", "history", "export", "checkpoints"}
FILLER = " ".join(f"detail {i} of the plan." for i in range(150))  # a turn worth folding


class Sandbox:
    """CLI runs with a planted key, a marker tag, and HOME, XDG and TMPDIR inside `root`, so
    every file the processes write lands where the checks look."""

    def __init__(self, root: Path, run_cli, config_file: Path) -> None:
        self.root, self.run_cli, self.config_file = root, run_cli, config_file
        self.key = f"sk-planted-{uuid.uuid4().hex}"
        self.tag = uuid.uuid4().hex  # every marker holds it; nothing else does
        self.exports = root / "exports"
        dirs = {d: root / d for d in ("exports", "home", "tmp", "xdg-cache", "xdg-config",
                                      "xdg-data", "xdg-state")}
        for d in dirs.values():
            d.mkdir()
        self.env = {KEY_ENV: self.key, "HOME": str(dirs["home"]), "TMPDIR": str(dirs["tmp"]),
                    **{f"XDG_{d[4:].upper()}_HOME": str(p) for d, p in dirs.items()
                       if d.startswith("xdg-")}}
        self.ran: list[Ran] = []

    def mark(self, name: str) -> str:
        return f"{name}-{self.tag}"

    def configure(self, base_url: str) -> None:
        self.config_file.parent.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(textwrap.dedent(f'''\
            default_model = "fake"
            [models.fake]
            model = "openai/fake-model"
            api_base = "{base_url}"
            api_key_env = "{KEY_ENV}"
            token_limit = 8192
            [context_compaction]
            keep_recent_tokens = 40
        '''), encoding="utf-8")

    def cli(self, *args: str, expect: int | None = 0, input: str | None = None) -> Ran:
        result = self.run_cli(*args, env=self.env, input=input)
        r = Ran(args, result.status, result.stdout, result.stderr)
        self.ran.append(r)
        if expect is not None:
            assert r.status == expect, r
        return r

    def files(self) -> list[Path]:
        return [p for p in self.root.rglob("*") if p.is_file()]

    def file_leaks(self, text_allowed: set[Path]) -> tuple[list[str], set[Path]]:
        """(what leaked where, the files that hold message text)."""
        leaks, holding = [], set()
        for path in self.files():
            raw = path.read_bytes()
            if self.key.encode() in raw:
                leaks.append(f"the API key is in {path}")
            if self.tag.encode() in raw:
                holding.add(path)
                if path not in text_allowed:
                    leaks.append(f"message text or a summary is in {path}")
        return leaks, holding

    def output_leaks(self) -> list[str]:
        leaks = []
        for r in self.ran:
            for name, text in (("stdout", r.stdout), ("stderr", r.stderr)):
                where = f"the {name} of `{' '.join(r.args)[:60]}`: {text[:300]}"
                if self.key in text:
                    leaks.append("the key on " + where)
                if self.tag in text and (name == "stderr" or r.args[0] not in SHOWS_TEXT):
                    leaks.append("message text on " + where)
        return leaks


@pytest.fixture
def sandbox(home, run_cli, config_file):
    return Sandbox(home, run_cli, config_file)


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(fo._Handler, "_answer", _answer_with_reasoning(fo._Handler._answer))
    with FakeOpenAI() as server:
        yield server


@pytest.mark.reliability
def test_no_key_anywhere_and_message_text_only_in_the_database_and_exports(sandbox, fake):
    sb, cli = sandbox, sandbox.cli
    user = [sb.mark(f"umark{i}") for i in range(5)]
    answer = [sb.mark(f"amark{i}") for i in range(3)]
    thoughts = [sb.mark(f"rmark{i}") + " private chain of thought" for i in range(2)]
    summary = summary_text(1).replace("- fake summary 1", f"- {sb.mark('smark')} was discussed")

    cli("config", "init")
    sb.configure(fake.base_url)
    # two answers come with provider-private reasoning
    fake.script_turn(("reasoning", thoughts[0], f"{answer[0]}: noted."),
                     ("reasoning", thoughts[1], f"{answer[1]}: done."),
                     ("text", f"{answer[2]}: ok."))
    cli("ask", f"please remember {user[0]} for later. {FILLER}")
    cli("ask", f"and also {user[1]}, the port is 8443. {FILLER}")
    cli("ask", "-", input=f"a pasted note: {user[2]}\nsecond line\n")
    assert all(t not in json.dumps(body) for body in fake.requests for t in thoughts), \
        "reasoning was sent back to the provider"

    # the summary request holds the history but none of the reasoning (DESIGN.md D5.11)
    fake.script_summary(("text", summary))
    compacted = cli("compact", "--json")
    assert json.loads(compacted.stdout)["status"] == "compacted", compacted
    [request] = fake.summary_requests
    sent = json.dumps(request)
    assert user[0] in sent and answer[0] in sent  # the transcript did carry the history
    for thought in thoughts:
        assert thought.split()[0] not in sent, "the summary request holds private reasoning"
    cli("ask", f"after compaction {user[3]}")  # its request carries the summary

    # a refused key: the error names the variable, never its value
    fake.script_turn(("status", 401, {"error": {
        "message": f"Incorrect API key provided: {sb.key}", "type": "invalid_request_error",
        "param": None, "code": "invalid_api_key"}}))
    refused = cli("ask", f"this fails {user[4]}", expect=1)
    assert KEY_ENV in refused.stderr

    for args in (("info",), ("info", "--json"), ("history",), ("history", "--json"),
                 ("checkpoints",), ("checkpoints", "--json"), ("sessions",),
                 ("sessions", "--json"), ("config", "show"), ("config", "path"),
                 ("export", "--format", "md"), ("export", "--format", "json")):
        cli(*args)
    cli("export", "--format", "md", "-o", str(sb.exports / "chat.md"))
    cli("export", "--format", "json", "-o", str(sb.exports / "chat.json"))

    data = sb.root / "data"
    log = data / "picochat.log"
    assert log.is_file() and log.stat().st_size > 0, "no log: the log checks would prove nothing"
    db = {data / n for n in ("picochat.db", "picochat.db-wal", "picochat.db-shm")}
    exports = {sb.exports / "chat.md", sb.exports / "chat.json"}
    leaks, holding = sb.file_leaks(db | exports)
    assert not leaks + sb.output_leaks(), "\n".join(leaks + sb.output_leaks())
    assert holding & db and exports <= holding, holding  # the checks did see the text
    for export in exports:
        text = export.read_text(encoding="utf-8")
        assert all(u in text for u in user) and sb.mark("smark") in text, export
    files = sb.files()
    print(f"\nsearched {len(files)} files ({sum(p.stat().st_size for p in files):,} bytes) and "
          f"the output of {len(sb.ran)} commands; message text only in "
          f"{sorted(p.name for p in holding)}")


@pytest.mark.reliability
def test_a_provider_error_that_echoes_the_key_is_not_repeated(sandbox, fake):
    """Servers quote what they were sent: a proxy's 500, a 400 naming the key, a failed
    summary call. picochat shows their words, so it must blank the key out of them."""
    sb, cli = sandbox, sandbox.cli
    sb.configure(fake.base_url)
    fake.script_turn(("text", "first"), ("text", "second"))
    cli("ask", f"one {FILLER}")
    cli("ask", f"two {FILLER}")
    fake.script_summary(("status", 500, {"error": {"message": f"summarizer down, key {sb.key}",
                                                   "type": "server_error", "code": None}}))
    cli("compact", expect=1)
    fake.script_turn(
        ("status", 500, {"error": {"message": f"upstream failed for {sb.key}",
                                   "type": "server_error", "code": None}}),
        ("status", 500, {"error": {"message": f"upstream failed for {sb.key}",
                                   "type": "server_error", "code": None}}),
        ("status", 400, {"error": {"message": f"Bad key {sb.key}",
                                   "type": "invalid_request_error", "code": None}}),
        ("status", 418, {"error": {"message": f"teapot {sb.key}", "type": "teapot"}}))
    cli("ask", "three", expect=1)
    cli("ask", "--json", "four", expect=1)
    cli("ask", "five", expect=1)
    cli("ask", "six", expect=1)
    assert len(fake.summary_requests) == 1 and len(fake.turn_requests) == 6
    leaks = sb.file_leaks(set())[0] + sb.output_leaks()
    assert not [x for x in leaks if "the key" in x or "API key" in x], "\n".join(leaks)

"""Hostile sizes and bytes through the headless CLI (issue 7): a 10 MB paste, a 1 MB line with
no whitespace at all, NUL bytes, invalid UTF-8 on stdin and in argv. Each is stored exactly
(invalid UTF-8 becomes U+FFFD, one per bad byte, as `ask -` decodes stdin), counted in the
budget as tiktoken counts it, and shown back; each operation's time is printed. No timing is
asserted: the subprocess timeouts only catch true hangs."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

import pytest

from picochat import bpe
from tests.helpers.fakes.openai import FakeOpenAI, transcript_of

MB = 1 << 20
HANG = 120.0  # seconds: far above any figure measured on a slow 2-core machine


@dataclass(frozen=True)
class Run:
    status: int
    stdout: bytes
    stderr: str
    seconds: float


def cli(*args: str | bytes, stdin: bytes | None = None, timeout: float = HANG) -> Run:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "picochat", *args], input=stdin,
                          capture_output=True, timeout=timeout, env=dict(os.environ))
    return Run(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"),
               time.perf_counter() - start)


def ok(*args: str | bytes, stdin: bytes | None = None, timeout: float = HANG,
       label: str = "") -> Run:
    r = cli(*args, stdin=stdin, timeout=timeout)
    assert r.status == 0, (args[:3], r.stderr)
    shown = [a if isinstance(a, str) else "<bytes>" for a in args if a != "-"][:4]
    print(f"  {label or ' '.join(shown):<40} {r.seconds:6.2f} s")
    return r


def tiktoken_count(text: str) -> int:
    """o200k, straight from tiktoken (not through picochat's counting)."""
    bpe.configure_tiktoken_cache()  # the bundled files: no network
    import tiktoken

    return len(tiktoken.get_encoding("o200k_base").encode(text, disallowed_special=()))


def user_messages(session: str) -> list[dict]:
    body = json.loads(ok("history", "--session", session, "--json").stdout)
    return [m for m in body["messages"] if m["role"] == "user"]


def assert_stored_and_counted(session: str, expected: str) -> int:
    """The session's one user message is `expected` exactly, and both its stored count and the
    budget's `used_tokens` hold it at tiktoken's figure. Returns that figure."""
    [message] = user_messages(session)
    assert len(message["content"]) == len(expected)
    assert message["content"] == expected
    real = tiktoken_count(expected)
    # stored: content plus the message frame and role (a few tokens), never less than the text
    assert real <= message["tokens"] <= real + 16, (message["tokens"], real)
    info = json.loads(ok("info", "--session", session, "--json").stdout)
    assert info["used_tokens"] >= message["tokens"]
    assert info["used_tokens"] <= real * 1.01 + 4000, (info["used_tokens"], real)  # + the reply
    return real


def prose(size: int, seed: int = 7) -> str:
    """`size` characters of word-like text in 100-character lines, deterministic."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(4000)]
    text = " ".join(rng.choices(words, k=size // 5))
    while len(text) < size:
        text += " " + text[: size - len(text)]
    return "\n".join(text[i:i + 99] for i in range(0, size, 99))[:size]


@pytest.fixture
def offline(home):
    """The offline model answers without delay (the `home` fixture's environment)."""
    return home


# --- bytes ---------------------------------------------------------------------------------------


def test_nul_bytes_and_invalid_utf8_are_stored_shown_and_counted(offline):
    print()
    cases = [
        ("nul", "stdin", b"before\x00after\x00\x00 the end"),
        ("badstdin", "stdin", b"caf\xc3\xa9 \xff\xfe broken \xc3( tail \xed\xa0\x80"),
        ("badargv", "argv", b"an argv with \xff and \xfe\xfd bytes"),
    ]
    for session, how, raw in cases:
        expected = raw.decode("utf-8", "replace")
        if how == "stdin":
            r = ok("ask", "--model", "offline", "--session", session, "-", stdin=raw,
                   timeout=60, label=f"ask {session}")
        else:
            r = ok("ask", "--model", "offline", "--session", session, raw, timeout=60,
                   label=f"ask {session}")
        assert b"offline" in r.stdout
        assert_stored_and_counted(session, expected)
        shown = ok("history", "--session", session).stdout.decode("utf-8")
        assert expected in shown


# --- sizes ---------------------------------------------------------------------------------------


@pytest.mark.reliability
@pytest.mark.parametrize("name, make", [
    ("paste-10mb", lambda: prose(10 * MB)),
    ("line-1mb", lambda: "".join(random.Random(3).choices(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789{}[]:,\"", k=MB))),
])
def test_a_huge_message_is_stored_counted_and_shown_without_freezing(offline, config_file, name,
                                                                   make):
    text = make()
    data = text.encode("utf-8")
    print(f"\n{name}: {len(data):,} bytes, {text.count(chr(10)) + 1:,} lines")
    # over the offline model's 128k window the message is refused before anything is stored
    refused = cli("ask", "--model", "offline", "--session", name, "-", stdin=data)
    assert refused.status == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "nothing was sent or saved" in refused.stderr
    assert name.encode() not in ok("sessions").stdout
    # a model whose window holds it: stored exactly, counted, shown, and the chat goes on
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text('[models.roomy]\nmodel = "offline"\ntoken_limit = 16000000\n',
                           encoding="utf-8")
    ok("ask", "--model", "roomy", "--session", name, "-", stdin=data, label="ask -")
    real = assert_stored_and_counted(name, text)
    print(f"  tiktoken o200k: {real:,} tokens")
    shown = ok("history", "--session", name, label="history (text)").stdout
    assert data in shown
    exported = ok("export", "--session", name, "--format", "md", label="export md").stdout
    assert data in exported
    second = ok("ask", "--model", "roomy", "--session", name, "and now a short question",
                label="ask after it")
    assert b"offline" in second.stdout


@pytest.mark.reliability
def test_compacting_a_session_that_holds_a_10mb_message_bounds_the_summary_request(
        offline, config_file):
    big = prose(10 * MB, seed=11)
    with FakeOpenAI() as fake:
        config_file.parent.mkdir(parents=True, exist_ok=True)
        config_file.write_text(textwrap.dedent(f'''\
            [models.fake]
            model = "openai/fake-model"
            api_base = "{fake.base_url}"
            token_limit = 8192
            [models.roomy]
            model = "offline"
            token_limit = 16000000
            [context_compaction]
            enabled = false
        '''), encoding="utf-8")
        print()
        # a model whose window holds the 10 MB message, so nothing folds it before /compact
        # (enabled = false stops auto compaction, never the check against the window)
        ok("ask", "--model", "roomy", "--session", "big", "-", stdin=big.encode(),
           label="ask 10 MB")
        ok("ask", "--model", "roomy", "--session", "big", "second, short", label="ask")
        ok("ask", "--model", "roomy", "--session", "big", "third, short", label="ask")
        r = ok("compact", "--session", "big", "--model", "fake", "--json",
               label="compact (summary via the fake)")
        outcome = json.loads(r.stdout)
        assert outcome["status"] == "compacted" and not outcome["degraded"], outcome
        assert outcome["tokens_before"] > 2_000_000
        assert outcome["tokens_after"] < 8192
        [request] = fake.summary_requests
        transcript = transcript_of(request)
        assert big[:200] in transcript and big[-200:] in transcript  # head and tail kept
        assert "characters cut" in transcript
        sent = tiktoken_count("\n".join(m["content"] for m in request["messages"]))
        print(f"  summary request: {sent:,} tokens (window 8,192)")
        assert sent + request["max_tokens"] <= 8192
    [first, *_] = user_messages("big")
    assert first["content"] == big  # the raw row is unchanged
    info = json.loads(ok("info", "--session", "big", "--model", "fake", "--json").stdout)
    assert info["used_tokens"] < info["compression_threshold_tokens"]

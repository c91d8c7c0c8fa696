"""Provider errors say what really happened (issue 18, item 9): the real CLI against the fake
OpenAI server. A stream cut after the server answered is not "cannot connect"; a malformed stream
is named as such, without litellm's words; an overflow on a request far under the stated window
blames the window, with figures and what to do; a configured key of any length is masked."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.helpers.cli import ask, assert_clean_failure, assert_no_internals, history, roles
from tests.helpers.config import write_config
from tests.helpers.fakes.openai import FakeOpenAI, overflow_body
from tests.helpers.waiting import WAIT_S


@pytest.fixture
def fake(fake_openai: FakeOpenAI, config_file: Path) -> FakeOpenAI:
    # a bound on a hang, generous under load: no test here waits for it to pass
    write_config(config_file, fake_openai.base_url, f"timeout = {WAIT_S:g}\n")
    return fake_openai


# --- a stream that breaks after the server answered -----------------------------------------


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_a_stream_cut_mid_answer_says_the_connection_broke_and_the_answer_is_kept(run_cli,
                                                                                    fake):
    fake.script(("cut", "the first half of a long answer that never"))
    result = ask(run_cli, "tell me everything")
    assert_clean_failure(result)
    assert result.stderr == (
        f"picochat: the connection to {fake.base_url} broke mid-answer (the answer so far is "
        "kept where it is; retry, or check the server); your message and the partial answer "
        "are saved\n")
    assert result.stdout == "the first half of a long answer that never\n"
    assert_no_internals(result)
    assert roles(run_cli) == [("user", "complete"), ("assistant", "interrupted")]
    assert history(run_cli)[1]["content"] == "the first half of a long answer that never"
    assert len(fake.requests) == 1


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_a_stream_cut_before_any_text_is_not_cannot_connect(run_cli, fake):
    fake.script(("cut", "never sent", 0))  # 200 and headers, then the connection closes
    result = ask(run_cli, "hello?")
    assert_clean_failure(result)
    assert result.stderr == (
        f"picochat: {fake.base_url} accepted the request, then closed the connection before "
        "any answer text (retry, or check the server's log); your message is saved\n")
    assert_no_internals(result)
    assert roles(run_cli) == [("user", "complete")]


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_a_connection_closed_without_a_response_is_not_cannot_connect(run_cli, fake):
    fake.script(("drop",))
    result = ask(run_cli, "hello?")
    assert_clean_failure(result)
    assert result.stderr == (
        f"picochat: {fake.base_url} accepted the connection, then closed it without answering "
        "(retry, or check the server's log); your message is saved\n")
    assert_no_internals(result)
    assert len(fake.requests) == 1


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_malformed_sse_names_the_fault_not_litellms_text(run_cli, fake):
    fake.script(("garbage", "text before the bad line", "text after it"))
    result = ask(run_cli, "stream something odd")
    assert_clean_failure(result)
    assert result.stderr == (
        f"picochat: the server at {fake.base_url} sent a malformed stream (a data line that is "
        "not JSON) (the answer so far is kept where it is; retry, or check the server); your "
        "message and the partial answer are saved\n")
    assert_no_internals(result)
    assert roles(run_cli) == [("user", "complete"), ("assistant", "interrupted")]
    assert history(run_cli)[1]["content"] == "text before the bad line"


# --- an overflow the request's size cannot explain ------------------------------------------

_COUNTED = re.compile(r"picochat counts about ([\d,]+) tokens in the request, within the window "
                      r"of ([\d,]+)")


def counted(stderr: str) -> tuple[int, int]:
    m = _COUNTED.search(stderr)
    assert m, stderr
    return int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_an_overflow_on_a_small_request_blames_the_servers_real_context(run_cli, fake):
    # the server names a window larger than the configured 8,192: request (~750) plus the
    # answer cap (4,096, the reserve) fill less than half of it
    fake.script(("status", 400, overflow_body(12288, 13000)))
    result = ask(run_cli, "word " * 400)  # about 400 tokens, with the tool schemas ~750
    assert_clean_failure(result)
    line = result.stderr
    assert "newest turn alone" not in line and "larger than the model's window" not in line
    assert line.startswith(f"picochat: {fake.base_url} refused the request as too long for its "
                           "window of 12,288 tokens")
    request, window = counted(line)
    assert 400 <= request <= 1000 and window == 8192, line  # 12,288 is not believed
    assert ("the server's real context must be smaller than its error or the config says "
            "(llama.cpp's -c / n_ctx, or a per-slot context), or the prompt plus max_tokens "
            "exceed it; set token_limit for this model in the config to the server's real "
            "context, or raise the server's context") in line
    assert line.endswith("; your message is saved\n")
    assert_no_internals(result)
    assert len(fake.requests) == 1  # no summary call: nothing older to fold


def test_an_overflow_without_a_stated_window_weighs_the_configured_one(run_cli, fake):
    fake.script(("status", 400, {"error": {"message": "Context length exceeded.",
                                           "type": "invalid_request_error",
                                           "code": "context_length_exceeded"}}))
    result = ask(run_cli, "hello")
    assert_clean_failure(result)
    assert result.stderr.startswith(f"picochat: {fake.base_url} refused the request as too long "
                                    "for the model's window")
    request, window = counted(result.stderr)
    assert request < 1000 and window == 8192  # the config's token_limit
    assert "set token_limit for this model" in result.stderr
    assert "newest turn alone" not in result.stderr


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_a_llama_cpp_overflow_reads_its_window(run_cli, fake):
    fake.script(("status", 400, {"error": {
        "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096,
        "message": "request (5000 tokens) exceeds the available context size (4096 tokens), "
                   "try increasing it"}}))
    result = ask(run_cli, "word " * 2000)
    assert_clean_failure(result)
    assert "the model's window of 4,096 tokens" in result.stderr
    assert counted(result.stderr)[1] == 4096
    assert_no_internals(result)


@pytest.mark.slow
def test_a_misfit_in_a_longer_session_keeps_its_own_line(run_cli, fake):
    """With older turns to trim, the misfit is retried once on less history, and then says the
    window is wrong, not "still too long after compacting"."""
    for n in range(3):
        assert ask(run_cli, f"turn {n}: " + "word " * 50).status == 0
    fake.script(*[("status", 400, overflow_body(4096, 4500))] * 6)
    result = ask(run_cli, "one more")
    assert result.status == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith(f"picochat: {fake.base_url} refused the "
                                                     "request as too long for its window")
    assert "still too long" not in result.stderr
    assert "set token_limit for this model in the config" in result.stderr, result.stderr
    assert "shorten the message, or switch to a model" not in result.stderr
    assert_no_internals(result)


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_a_real_overflow_still_says_the_turn_does_not_fit(run_cli, fake):
    fake.script(("status", 400, overflow_body(4096, 6000)))
    result = ask(run_cli, "word " * 5000)  # over the stated window by picochat's count too
    assert_clean_failure(result)
    assert "the request is larger than the model's window of 4,096 tokens" in result.stderr
    # the message named, with its size beside the rest: it is what does not fit
    assert re.search(r"\(your message #1 is [\d,]+ tokens and the system prompt and tools "
                     r"[\d,]+: together over the model's window of 4,096 tokens, and there is "
                     r"no older turn to drop\)", result.stderr), result.stderr
    assert "picochat counts" not in result.stderr


# --- keys of any length are masked ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("status", [500, 400])
def test_a_short_key_echoed_by_the_server_is_masked(run_cli, fake, home, status):
    env = {"FAKE_API_KEY": "Zq7x", "OPENAI_API_KEY": "Wv3"}  # the model's key; a provider key
    fake.script(("status", status, {"error": {
        "message": "Incorrect API key provided: Zq7x. Also seen: 'Wv3'", "type": "x"}}))
    result = ask(run_cli, "hello", env)
    assert_clean_failure(result)
    assert "Incorrect API key provided: [key]. Also seen: '[key]'" in result.stderr, result.stderr
    log = (home / "data" / "picochat.log").read_text(encoding="utf-8")
    for key in ("Zq7x", "Wv3"):
        assert key not in result.stderr and key not in result.stdout and key not in log


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_an_echoed_key_in_any_encoding_is_masked_in_the_line_and_the_log(run_cli, fake, home):
    """A proxy quotes the upstream body (JSON inside the message, `/` written `\\/`), the
    request URL (lower-case percent-encoding), the Authorization header (base64 of `Bearer
    KEY`) and the key upper-cased across a line break: none of them is the key to the user."""
    from tests.helpers.redaction import KEY, leaks

    encoded = quote(KEY, safe="").replace("%2F", "%2f").replace("%2B", "%2b")
    header = base64.b64encode(f"Bearer {KEY}".encode()).decode()
    upper = KEY.upper()[:10] + "\n" + KEY.upper()[10:]
    escaped = KEY.replace("/", "\\/")
    fake.script(("status", 400, {"error": {"type": "x", "message": (
        f'upstream: {{"detail": "bad key {escaped}"}} url=?k={encoded} auth={header} '
        f"seen={upper}")}}))
    result = ask(run_cli, "hello", {"FAKE_API_KEY": KEY})
    assert_clean_failure(result)
    assert ('upstream: {"detail": "bad key [key]"} url=?k=[key] auth=[key] seen=[key]'
            in result.stderr), result.stderr
    log = (home / "data" / "picochat.log").read_text(encoding="utf-8")
    for out in (result.stderr, result.stdout, log):
        assert leaks(out, KEY) == [], out


def test_short_keys_are_masked_as_whole_tokens_only():
    from picochat.providers.redact import redact

    assert redact("key a rejected; a bad day", ["a"]) == "key [key] rejected; [key] bad day"
    assert redact("abcdef-x abc. xabc abc_1 (abc)", ["abc"]) == \
        "abcdef-x [key]. xabc abc_1 ([key])"
    assert redact("sent abcdefgh12 and xxabcdefgh12yy", ["abcdefgh12"]) == \
        "sent [key] and xx[key]yy"  # long keys: anywhere
    assert redact("quoted p%40ss%2Fw and p@ss/w", ["p@ss/w"]) == "quoted [key] and [key]"


_LOG_PROBE = """
import io, logging, os
from picochat.providers.litellm_env import import_litellm
import_litellm()
os.environ["OPENAI_API_KEY"] = "Wv3"
out = io.StringIO()
logger = logging.getLogger("LiteLLM")
logger.addHandler(logging.StreamHandler(out))
try:
    raise ValueError("server echoed Wv3")
except ValueError:
    logger.warning("provider said %s", "bad key Wv3", exc_info=True)
print(out.getvalue())
"""


def test_litellm_log_records_are_masked(home):
    """What litellm, httpx or the OpenAI SDK log reaches picochat's log file without keys (in
    a subprocess: importing litellm here would change this process for later tests)."""
    import subprocess
    import sys

    # it imports litellm: on a busy machine that alone took ~50 s
    proc = subprocess.run([sys.executable, "-c", _LOG_PROBE], capture_output=True, text=True,
                          timeout=3 * WAIT_S)
    assert proc.returncode == 0, proc.stderr
    assert "provider said bad key [key]" in proc.stdout
    assert "ValueError: server echoed [key]" in proc.stdout
    assert "Wv3" not in proc.stdout

"""A key echoed by a server is masked in every encoding it may come back in (issue 31, item 7).

Each case puts a configured key in a provider's error words in one encoding, then checks the
line the user would see (the provider's own redaction and shortening) and a log record
(`RedactingFilter`, message and traceback). The check does not trust the code under test: it
decodes the output every way the key could have been encoded (line breaks, JSON and URL
escapes, HTML entities, base64 and base32 at every alignment, hex, any case, backwards, with
gaps and invisible characters taken out) and looks for any 12 characters of
the key in what comes out. The end-to-end case, through the real CLI and a fake server, is in
`test_provider_errors.py`.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import re
from collections.abc import Callable
from urllib.parse import quote, quote_plus

import pytest

from picochat.providers import redact as redact_module
from picochat.providers.translate import _provider_words, _short
from picochat.providers.litellm_provider import LiteLLMProvider
from picochat.providers.redact import MASK, RedactingFilter, redact
from tests.helpers.redaction import KEY, leaks

KEY_SPACED = "open sesame 0451 gw"  # a passphrase: URL forms write its spaces as `+`
KEY_ODD = KEY + "~?"  # its base64 holds `/`, which JSON may write as `\/`


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _b64url(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


def _every_char(fmt: str) -> Callable[[str], str]:
    return lambda key: "".join(fmt % ord(c) for c in key)


def _mixed(key: str) -> str:
    """Characters escaped in turn as JSON, URL and HTML would: encoders a server may chain."""
    forms = ("%s", "\\u%04x", "%%%02X", "%s", "&#%d;")
    return "".join(f % (c if f == "%s" else ord(c)) for f, c in
                   zip((forms * len(key))[:len(key)], key))


# (case id, key, the key as the server wrote it)
ENCODED: list[tuple[str, str, str]] = [
    ("json_slash", KEY, KEY.replace("/", "\\/")),
    ("json_u_dash", KEY, KEY.replace("-", "\\u002d")),
    ("json_u_dash_upper_hex", KEY, KEY.replace("-", "\\u002D").replace("+", "\\u002B")),
    ("json_u_every_char", KEY, _every_char("\\u%04x")(KEY)),
    ("json_twice", KEY, KEY.replace("/", "\\\\\\/").replace("-", "\\\\u002d")),
    ("url_lower_hex", KEY, re.sub("%[0-9A-F]{2}", lambda m: m[0].lower(), quote(KEY, safe=""))),
    ("url_every_byte", KEY, _every_char("%%%02X")(KEY)),
    ("url_every_byte_lower", KEY, _every_char("%%%02x")(KEY)),
    ("url_twice", KEY, quote(quote(KEY, safe=""), safe="")),
    ("url_plus_for_space", KEY_SPACED, quote_plus(KEY_SPACED)),
    ("python_x_escapes", KEY, KEY.replace("-", "\\x2d").replace("/", "\\x2F")),
    ("html_entities", KEY, _every_char("&#%d;")(KEY)),
    ("html_hex_entities", KEY, _every_char("&#x%X;")(KEY)),
    ("lower_case", KEY, KEY.lower()),
    ("upper_case", KEY, KEY.upper()),
    ("lower_case_url", KEY, quote(KEY.lower(), safe="")),
    ("line_break", KEY, KEY[:14] + "\n" + KEY[14:]),
    ("line_break_crlf_indented", KEY, KEY[:9] + "\r\n    " + KEY[9:]),
    ("json_line_break", KEY, KEY[:20] + "\\n" + KEY[20:]),
    ("quoted_repeated_escaped", KEY, '\\"{0}\\", \\"{0}\\"'.format(KEY.replace("/", "\\/"))),
    ("repeated_joined_lower", KEY, KEY.lower() * 3),
    ("mixed_escapes", KEY, _mixed(KEY)),
    ("base64_bearer", KEY, _b64(f"Bearer {KEY}")),
    ("base64_key", KEY, _b64(KEY)),
    ("base64url_key", KEY, _b64url(KEY)),
    ("base64_basic_user", KEY, _b64(f"alice:{KEY}")),
    ("base64_basic_key_as_user", KEY, _b64(f"{KEY}:")),
    ("base64url_bearer", KEY, _b64url(f"Bearer {KEY}")),
    ("base64_header_in_json", KEY, _b64(json.dumps({"Authorization": f"Bearer {KEY}"}))),
    ("base64_wrapped", KEY, _b64(f"Bearer {KEY}")[:30] + "\n" + _b64(f"Bearer {KEY}")[30:]),
    ("base64_json_slash", KEY_ODD, _b64(f"Bearer {KEY_ODD}").replace("/", "\\/")),
    ("base64_url_encoded", KEY, quote(_b64(f"Bearer {KEY}"), safe="")),
    # beyond what an honest server writes: a hostile one echoing the key so the user sees it
    ("hex_lower", KEY, KEY.encode().hex()),
    ("hex_upper_colons", KEY, ":".join(f"{b:02X}" for b in KEY.encode())),
    ("hex_python_bytes", KEY, "".join(f"\\x{b:02x}" for b in KEY.encode())),
    ("base32_key", KEY, base64.b32encode(KEY.encode()).decode()),
    ("base32_bearer_lower", KEY, base64.b32encode(f"Bearer {KEY}".encode()).decode().lower()),
    ("reversed", KEY, KEY[::-1]),
    ("spaced", KEY, " ".join(KEY)),
    ("zero_width_joined", KEY, "\u200b".join(KEY)),
    ("word_joiner_and_tags", KEY, "\u2060\U000e0041".join(KEY)),
    ("last_12", KEY, "..." + KEY[-12:]),
    ("first_12", KEY, KEY[:12] + "..."),
    ("middle_14_reversed", KEY, KEY[9:23][::-1]),
    # what a terminal draws as nothing between the characters: picochat cleans the line after
    ("sgr_reset_joined", KEY, "\x1b[0m".join(KEY)),
    ("nul_joined", KEY, "\x00".join(KEY)),
    ("bel_joined", KEY, "\x07".join(KEY)),
    ("del_joined", KEY, "\x7f".join(KEY)),
    ("colours_joined", KEY, "".join(f"\x1b[3{i % 8}m{c}" for i, c in enumerate(KEY))),
    ("osc_title_joined", KEY, "\x1b]0;t\x07".join(KEY)),
    ("carriage_returns", KEY, KEY[:11] + "\r" + KEY[11:22] + "\r" + KEY[22:]),
    ("hex_0x_spaced", KEY, " ".join(f"0x{b:02x}" for b in KEY.encode())),
    ("fullwidth", KEY, "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in KEY)),
]


# --- the oracle (tests/helpers/redaction.py): every way back to the key ---------------------


def test_the_oracle_finds_every_case_unmasked():
    """Each case really is the key (else a passing test would prove nothing)."""
    for name, key, written in ENCODED:
        assert leaks(f"provided: {written}.", key), name


# --- the line and the log -------------------------------------------------------------------


@pytest.fixture
def configured():
    """Keys registered by a test are forgotten after it."""
    before = set(redact_module._configured)
    yield
    with redact_module._lock:
        redact_module._configured.intersection_update(before)


def user_line(key: str, words: str) -> str:
    """What `translate` makes of a server's error words for a model configured with `key`."""
    provider = LiteLLMProvider("openai/fake-model", "openai", api_base="http://127.0.0.1:9/v1",
                               api_key=key, api_key_env="GATEWAY_API_KEY")
    return _short(provider._redact(_provider_words(words)))


def log_output(words: str) -> str:
    """A record of `words`, with a traceback quoting them, as a log handler writes it."""
    out = io.StringIO()
    logger = logging.getLogger("picochat.test.redaction")
    handler = logging.StreamHandler(out)
    logger.addHandler(handler)
    logger.addFilter(filter_ := RedactingFilter())
    try:
        try:
            raise ValueError(f"server said: {words}")
        except ValueError:
            logger.exception("provider error %s", words)
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(filter_)
    return out.getvalue()


@pytest.mark.parametrize(("key", "written"), [(k, w) for _, k, w in ENCODED],
                         ids=[name for name, _, _ in ENCODED])
def test_an_encoded_key_never_reaches_the_line_or_the_log(configured, monkeypatch, key,
                                                           written):
    words = f"Incorrect API key provided: {written}. Check it."
    line = user_line(key, words)
    assert leaks(line, key) == [], line
    assert line.startswith("Incorrect API key provided: ") and line.endswith(". Check it.")
    assert MASK in line

    monkeypatch.setenv("GATEWAY_API_KEY", key)  # where litellm's log filter finds it
    logged = log_output(words)
    assert leaks(logged, key) == [], logged
    assert "provider error Incorrect API key provided: " in logged
    assert "ValueError: server said: Incorrect API key provided: " in logged


def test_a_json_error_body_quoting_the_key_escaped_is_masked(configured):
    """A proxy's error quotes the upstream body, a JSON document inside the message."""
    escaped = KEY.replace("/", "\\/").replace("-", "\\u002d")
    inner = f'{{"detail": "invalid token {escaped}"}}'
    body = json.dumps({"error": {"message": f"upstream: {inner}"}})
    line = user_line(KEY, body)
    assert line.startswith("upstream: {")
    assert leaks(line, KEY) == [], line


# --- what is not masked -----------------------------------------------------------------------


def test_short_keys_stay_whole_token_and_case_sensitive():
    """A key under 8 characters is an ordinary word too: not its capital, not inside words."""
    assert redact("Abc abc xabc ABC abc_1", ["abc"]) == "Abc [key] xabc ABC abc_1"
    assert redact("key a rejected; A bad day", ["a"]) == "key [key] rejected; A bad day"
    assert redact("quoted p%40ss%2Fw and p%40ss%2fw", ["p@ss/w"]) == "quoted [key] and [key]"


def test_the_word_before_a_base64_key_is_kept():
    header = _b64(f"Bearer {KEY}")
    assert redact(f"auth={header}; basic:{header}, x", [KEY]) == "auth=[key]; basic:[key], x"


def test_a_long_key_leaves_ordinary_text_and_other_base64_alone():
    text = ("Request failed: rate limit for gw-Zq7x reached; trace "
            + _b64("Bearer another-token-0123456789") + " at 12:00.")
    assert redact(text, [KEY]) == text


# --- keys picochat does not know, by their shape ----------------------------------------------


def test_generic_shapes_are_still_masked():
    assert redact("bad key sk-abcdefghijklmnop1234.") == "bad key [key]."
    assert redact("bad key sk\\u002dabcdefghijklmnop1234.") == "bad key [key]."
    assert redact("bad key sk-proj%2Dabcdefghijklmnop1234.") == "bad key [key]."
    assert redact("sent Authorization: Bearer abc123def456ghi") == \
        "sent Authorization: Bearer [key]"
    assert redact("BEARER tok_9f8e7d6c5b4a") == "BEARER [key]"


def test_generic_shapes_leave_words_alone():
    for text in ("Bearer authentication is required", "a sk- prefix", "key-value store",
                 "Bearer 1234"):
        assert redact(text) == text


def test_long_runs_of_escape_characters_are_masked_whole():
    """A body of 100,000 backslashes (or `%25`s) goes through (its speed, linear, is in
    tests/bench/redact_cases.py), and a key behind such a run is still masked."""
    for text in ("\\" * 100_000, "%25" * 50_000, "sk-" + "\\" * 100_000, "&#" + "0" * 100_000):
        assert redact(text + " " + KEY, [KEY, "abc"]).endswith("[key]"), text[:10]

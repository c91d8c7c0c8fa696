"""Which key a request carries, and what a missing or refused key says (issue 20, item 4).

A proxy `api_base` (a LiteLLM proxy, a corporate gateway) gets the provider's own key from the
environment unless `api_key_env` says otherwise; only a server with no key anywhere gets the
placeholder. Keys are checked by litellm's own environment validation. The fake OpenAI server
records each request's Authorization header.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from picochat.config import Config
from picochat.errors import ConfigError
from picochat.models import create_provider, resolve_model
from tests.helpers.cli import assert_clean_failure
from tests.helpers.fakes.openai import AUTH_BODY, FakeOpenAI

ENV_KEY = "sk-user-env-key-0123456789"


def proxy_config(config_file: Path, base_url: str, api_key_env: str | None = None) -> None:
    """A LiteLLM proxy or gateway in front of OpenAI: an `openai/` model at an `api_base`."""
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(textwrap.dedent(f'''\
        default_model = "proxy"
        [models.proxy]
        model = "openai/gpt-4o-mini"
        api_base = "{base_url}"
        token_limit = 8192
    ''') + (f'api_key_env = "{api_key_env}"\n' if api_key_env else ""), encoding="utf-8")


@pytest.fixture
def proxy(fake_openai: FakeOpenAI, config_file: Path) -> FakeOpenAI:
    proxy_config(config_file, fake_openai.base_url)
    return fake_openai


@pytest.mark.slow
def test_a_proxy_gets_the_providers_key_unless_api_key_env_names_another(run_cli, proxy,
                                                                         config_file):
    assert run_cli("ask", "hello", env={"OPENAI_API_KEY": ENV_KEY}).status == 0
    assert run_cli("ask", "no key anywhere").status == 0
    proxy_config(config_file, proxy.base_url, api_key_env="GATEWAY_TOKEN")
    env = {"OPENAI_API_KEY": ENV_KEY, "GATEWAY_TOKEN": "gw-token-abcdefghij"}
    assert run_cli("ask", "through the gateway", env=env).status == 0
    assert [h["authorization"] for h in proxy.headers] == [
        f"Bearer {ENV_KEY}",             # the provider's own variable, not a placeholder
        "Bearer not-needed",             # no key at all: the OpenAI SDK needs something
        "Bearer gw-token-abcdefghij"]    # api_key_env says otherwise


@pytest.mark.slow
def test_a_refused_key_names_the_variable_that_supplied_it(run_cli, proxy, config_file,
                                                           home):
    proxy.script(("status", 401, AUTH_BODY), ("status", 401, AUTH_BODY))
    result = run_cli("ask", "hello", env={"OPENAI_API_KEY": ENV_KEY})
    assert_clean_failure(result)
    assert proxy.headers[0]["authorization"] == f"Bearer {ENV_KEY}"
    assert "refused the API key" in result.stderr and "set OPENAI_API_KEY" in result.stderr
    proxy_config(config_file, proxy.base_url, api_key_env="GATEWAY_TOKEN")
    refused = run_cli("ask", "again", env={"OPENAI_API_KEY": ENV_KEY,
                                           "GATEWAY_TOKEN": "gw-token-abcdefghij"})
    assert_clean_failure(refused)
    assert "set GATEWAY_TOKEN" in refused.stderr and "OPENAI_API_KEY" not in refused.stderr
    log = (home / "data" / "picochat.log").read_text(encoding="utf-8")
    for key in (ENV_KEY, "gw-token-abcdefghij"):
        assert key not in result.stderr + refused.stderr + log


# --- a missing key: litellm's names, one line, nothing written -----------------------------------


@pytest.mark.slow
def test_a_missing_key_names_the_variables_litellm_reads(run_cli):
    result = run_cli("ask", "--session", "s", "--model", "gemini/gemini-2.0-flash", "hi")
    assert result.status == 2, result.stderr
    assert result.stderr == (
        "picochat: no API key for gemini/gemini-2.0-flash: GOOGLE_API_KEY or GEMINI_API_KEY "
        "is not set (export GOOGLE_API_KEY=…, or use --model offline)\n")
    empty = run_cli("ask", "--session", "s", "--model", "openai/gpt-4o-mini", "hi",
                    env={"OPENAI_API_KEY": ""})  # set, but empty: no key
    assert empty.status == 2 and "OPENAI_API_KEY is not set" in empty.stderr
    assert json.loads(run_cli("sessions", "--json").stdout) == []


def test_keys_under_other_names_litellm_accepts_are_keys(monkeypatch, home):
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "anthropic-token-abcdefgh")
    assert create_provider(resolve_model(Config(), "anthropic/claude-sonnet-4-5"))
    monkeypatch.setenv("GOOGLE_API_KEY", "google-key-abcdefgh")
    assert create_provider(resolve_model(Config(), "gemini/gemini-2.0-flash"))
    monkeypatch.delenv("GOOGLE_API_KEY")
    with pytest.raises(ConfigError, match="GOOGLE_API_KEY or GEMINI_API_KEY is not set"):
        create_provider(resolve_model(Config(), "gemini/gemini-2.0-flash"))


_INFO = """
import sys
from picochat.cli.main import main
code = main(["info"])
print("litellm imported:", "litellm" in sys.modules)
sys.exit(code)
"""


def test_a_key_under_another_name_passes_without_importing_litellm(run_cli, config_file):
    """Start-up: litellm's check (2 s of import) is asked only when no key variable named
    after the provider is set; `info` with a keyed summary model needs none."""
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text('[context_compaction]\n'
                           'summary_model = "anthropic/claude-sonnet-4-5"\n', encoding="utf-8")
    keyed = {"ANTHROPIC_AUTH_TOKEN": ENV_KEY, "PICOCHAT_MODEL": "offline"}
    assert run_cli("ask", "hi", env=keyed).status == 0
    proc = subprocess.run([sys.executable, "-c", _INFO], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **keyed})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("litellm imported: False"), proc.stdout

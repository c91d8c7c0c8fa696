"""Shared fixtures: a temporary data and config dir per test, a way to run the real CLI, and
the fake provider servers (tests/helpers/fakes). What test files share besides fixtures is in
tests/helpers.

No test may reach a network or a real provider: provider keys are removed from the environment
and the offline model answers without delay.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis.configuration import set_hypothesis_home_dir

# before any helper is imported: their asserts say what failed, as a test's own do
pytest.register_assert_rewrite("tests.helpers")

from picochat.storage import open_store
from tests.helpers.cli import CliResult
from tests.helpers.config import ENV, compaction_config_text, write_config
from tests.helpers.fakes.anthropic import FakeAnthropic
from tests.helpers.fakes.ollama import FakeOllama
from tests.helpers.fakes.openai import FakeOpenAI

# Keep hypothesis's files (example database, caches) beside the tests, not at the repo's top.
set_hypothesis_home_dir(str(Path(__file__).parent / ".hypothesis"))


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the programs the tests start, however pytest was started. A shell
    starts a background job (`cmd &`, and so a CI step or a stress run launched that way) with
    SIGINT ignored, every child inherits that, and a `picochat ask` that ignores SIGINT never
    stops: the Ctrl-C tests then time out. A handled signal is reset to its default on exec,
    an ignored one is not, so handle it here."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

_PROVIDER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "PICOCHAT_MODEL", "OPENAI_BASE_URL",
                  "OPENAI_API_BASE", "OLLAMA_HOST", "OLLAMA_API_BASE")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh PICOCHAT_DATA_DIR and PICOCHAT_CONFIG_DIR under tmp_path, set for this test."""
    data, config = tmp_path / "data", tmp_path / "config"
    monkeypatch.setenv("PICOCHAT_DATA_DIR", str(data))
    monkeypatch.setenv("PICOCHAT_CONFIG_DIR", str(config))
    monkeypatch.setenv("PICOCHAT_OFFLINE_DELAY_MS", "0")
    for key in _PROVIDER_KEYS:
        monkeypatch.delenv(key, raising=False)
    return tmp_path


@pytest.fixture
def config_file(home: Path) -> Path:
    """Where the CLI looks for config.toml in this test (not created)."""
    return home / "config" / "config.toml"


@pytest.fixture
def run_cli(home: Path):
    """Run `python -m picochat ARGS` as a user would, in the test's environment."""

    # a failure bound, not a guess: a command that imports litellm took ~50 s on a busy machine
    def run(*args: str, input: str | None = None, timeout: float = 180,
            env: dict[str, str] | None = None) -> CliResult:
        full_env = dict(os.environ)
        full_env.update(env or {})
        proc = subprocess.run([sys.executable, "-m", "picochat", *args], input=input,
                              capture_output=True, text=True, timeout=timeout, env=full_env)
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def store(tmp_path: Path):
    s = open_store(tmp_path / "store" / "picochat.db")
    yield s
    s.close()


@pytest.fixture
def fake_openai():
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def fake_ollama():
    with FakeOllama() as fake:
        fake.add_model("llama3.2", context_length=131072)
        yield fake


@pytest.fixture
def fake_anthropic():
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def fake(fake_openai: FakeOpenAI, config_file: Path) -> FakeOpenAI:
    """The fake OpenAI server, and a config whose default model `fake` points at it (a test
    passes `ENV` for its key)."""
    write_config(config_file, fake_openai.base_url)
    return fake_openai


@pytest.fixture
def keyed_fake(fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    """The fake OpenAI server, with its key (`ENV`) in this test's environment; the config is
    the test's to write."""
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    return fake_openai


@pytest.fixture
def compacting_fake(keyed_fake: FakeOpenAI, config_file: Path) -> FakeOpenAI:
    """The keyed fake, and a config whose default model (8,192-token window, threshold 7,168,
    keep-recent 800) points at it."""
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(compaction_config_text(keyed_fake.base_url), encoding="utf-8")
    return keyed_fake


@pytest.fixture
def db(home: Path) -> Path:
    return home / "data" / "picochat.db"  # where the CLI keeps it (PICOCHAT_DATA_DIR)


@pytest.fixture
def cli_store(db: Path):
    """This process's connection to the CLI's database."""
    s = open_store(db)
    yield s
    s.close()

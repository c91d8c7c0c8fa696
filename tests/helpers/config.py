"""Config files for the tests: a fake model behind the fake OpenAI server (its key in `ENV`),
with or without compaction settings, a second model that summarizes, and the worker a config
gives; and what a bad config must do."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from picochat.config import Config, load_config
from picochat.models import create_provider, resolve_model
from picochat.session import SessionWorker
from tests.helpers.fakes.openai import FakeOpenAI

ENV = {"FAKE_API_KEY": "test-key"}


def write_config(config_file: Path, api_base: str, extra: str = "") -> None:
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(textwrap.dedent(f'''\
        default_model = "fake"
        [models.fake]
        model = "openai/fake-model"
        api_base = "{api_base}"
        api_key_env = "FAKE_API_KEY"
        token_limit = 8192
    ''') + extra, encoding="utf-8")


def compaction_config_text(api_base: str, window: int = 8192, reserve: int = 1024,
                           keep: int = 800, instructions: str = "") -> str:
    return textwrap.dedent(f'''\
        default_model = "fake"
        [models.fake]
        model = "openai/fake-model"
        api_base = "{api_base}"
        api_key_env = "FAKE_API_KEY"
        token_limit = {window}

        [context_compaction]
        reserve_tokens = {reserve}
        keep_recent_tokens = {keep}
        instructions = {json.dumps(instructions)}
    ''')


def make_worker(store, sid: str, config_path: Path, tools=()) -> SessionWorker:
    config = load_config(config_path)
    resolved = resolve_model(config, "fake")
    return SessionWorker(store, sid, resolved, create_provider(resolved),
                         config.agent.system_prompt, compaction=config.context_compaction,
                         tools=tuple(tools))


def summary_config_text(api_base: str, chat: str, summary_model: str | None) -> str:
    """Two models, `fake` (the fake server, 8,192 tokens) and `small` (offline, 4,096), the
    chat model `chat`, and summary_model when given."""
    summary = f"summary_model = {json.dumps(summary_model)}" if summary_model else ""
    return textwrap.dedent(f'''\
        default_model = "{chat}"
        [models.fake]
        model = "openai/fake-model"
        api_base = "{api_base}"
        api_key_env = "FAKE_API_KEY"
        token_limit = 8192

        [models.small]
        model = "offline"
        token_limit = 4096

        [context_compaction]
        reserve_tokens = 1024
        keep_recent_tokens = 800
        {summary}
    ''')


def configure(config_file: Path, fake: FakeOpenAI, chat: str,
              summary_model: str | None) -> Config:
    write(config_file, summary_config_text(fake.base_url, chat, summary_model))
    return load_config(config_file)


def db_files(home: Path) -> list[Path]:
    data = home / "data"
    return sorted(data.rglob("*.db*")) if data.exists() else []


def assert_config_error(result, home: Path, *needles: str) -> None:
    """One line on stderr, exit 2, no traceback, every needle present."""
    assert result.status == 2, (result.status, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert db_files(home) == [], "a database was created despite the config error"


def write(path: Path, text: str | bytes) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8") if isinstance(text, str) else text
    path.write_bytes(data)
    return data

"""`[context_compaction] summary_model` (issue 19, item 4): summaries written by a model of the
user's choosing, the chat model untouched; `/info` and `info --json` say who summarizes; and
when the chat model's summaries are rejected, the failure line names the setting.

The fake OpenAI server (127.0.0.1) stands in for a real model on either side; the other side is
the built-in offline model, so a request that reaches the wrong model is counted, not guessed.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from picochat import tokens
from picochat.compaction import report
from picochat.config import CompactionConfig, Config, ModelConfig
from picochat.errors import ConfigError
from picochat.models import SUMMARY_MODEL_KEY, create_provider, resolve_model, \
    resolve_summary_model
from picochat.providers.offline import OfflineProvider
from picochat.session import SessionWorker, TurnFinished
from tests.helpers.cli import clean
from tests.helpers.config import assert_config_error, configure, write
from tests.helpers.conversations import seed
from tests.helpers.fakes.openai import SUMMARY_HEADINGS, is_summary_request, kinds


def worker(store, sid: str, config: Config) -> SessionWorker:
    """The worker `ask`, `compact` and the app build for this config."""
    model = resolve_model(config, config.default_model)
    return SessionWorker.from_config(store, sid, model, create_provider(model), config)


def compact_times(store, sid: str, config: Config, n: int = 1):
    async def run():
        async with worker(store, sid, config) as w:
            return [await w.compact() for _ in range(n)]
    return asyncio.run(run())


def has_headings(summary: str) -> bool:
    return all(f"## {heading}" in summary for heading in SUMMARY_HEADINGS)


# --- the setting ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value, needles", [
    ("3", ["expected a string", "a number"]),
    ('""', ["is empty", "offline"]),
    ("false", ["expected a string", "a boolean"]),
], ids=["number", "empty", "boolean"])
def test_a_bad_summary_model_value_is_one_line_exit_2(value, needles, run_cli, home,
                                                      config_file):
    write(config_file, f"[context_compaction]\nsummary_model = {value}\n")
    result = run_cli("ask", "--model", "offline", "hi")
    assert_config_error(result, home, str(config_file), "context_compaction.summary_model",
                         "(line 2)", *needles)


def test_an_unknown_summary_model_names_the_setting_and_the_choices(run_cli, home, config_file):
    write(config_file, '[models.local]\nmodel = "offline"\n'
                        '[context_compaction]\nsummary_model = "nosuch"\n')
    needles = (str(config_file), SUMMARY_MODEL_KEY, "'nosuch'", "local", '"offline"')
    assert_config_error(run_cli("ask", "--model", "offline", "hi"), home, *needles)
    config_file.rename(config_file.with_suffix(".off"))
    assert run_cli("ask", "--model", "offline", "hi").status == 0
    config_file.with_suffix(".off").rename(config_file)
    for command in ("compact", "info"):  # a session exists now: the setting is what fails
        result = run_cli(command)
        assert result.status == 2 and "Traceback" not in result.stderr
        [line] = result.stderr.splitlines()
        assert all(needle in line for needle in needles), line


def test_summary_model_resolves_a_models_key_a_litellm_string_and_offline(monkeypatch):
    models = {"fake": ModelConfig("fake", "openai/fake-model", api_base="http://127.0.0.1:9/v1",
                                  token_limit=8192),
              "small": ModelConfig("small", "offline", token_limit=4096)}

    def resolve(name: str):
        return resolve_summary_model(Config(models=models,
                                            context_compaction=CompactionConfig(
                                                summary_model=name)))

    assert resolve_summary_model(Config(models=models)) is None  # unset: the chat model
    key = resolve("fake")
    assert (key.model, key.provider_kind, key.model_window, key.window_source) == \
        ("openai/fake-model", "openai", 8192, "config")
    small = resolve("small")
    assert small.offline and small.model_window == 4096 and small.label == "small (offline)"
    offline = resolve("offline")
    assert offline.offline and isinstance(create_provider(offline), OfflineProvider)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "dummy")
    hosted = resolve("anthropic/claude-haiku-4-5")
    assert (hosted.provider_kind, hosted.model_window, hosted.window_source) == \
        ("anthropic", 200_000, "litellm")
    assert hosted.token_factor == tokens.ANTHROPIC_FACTOR != 1.0  # Claude's tokens, not o200k's
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ConfigError) as missing:
        resolve("anthropic/claude-haiku-4-5")
    line = missing.value.user_line()
    assert SUMMARY_MODEL_KEY in line and "ANTHROPIC_API_KEY" in line and "\n" not in line


def test_config_show_and_init_mention_summary_model(run_cli, config_file):
    assert run_cli("config", "init").status == 0
    assert '# summary_model = "offline"' in config_file.read_text(encoding="utf-8")
    shown = run_cli("config", "show").stdout
    assert "summary_model" not in shown  # unset: nothing to show, and still valid TOML
    write(config_file, '[context_compaction]\nsummary_model = "offline"\n')
    assert 'summary_model = "offline"' in run_cli("config", "show").stdout


# --- who writes the summary ----------------------------------------------------------------------


def test_an_offline_summary_model_keeps_summaries_off_the_chat_server(keyed_fake, cli_store,
                                                                     config_file):
    config = configure(config_file, keyed_fake, chat="fake", summary_model="offline")
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)

    async def run():
        async with worker(cli_store, s.id, config) as w:
            compacted = await w.compact()
            answered = await w.submit_turn("and now?").result()
            return compacted, answered, w.info()  # what the app's /info card shows

    compacted, answered, info = asyncio.run(run())
    assert ("Summaries by", "offline") in info.rows()
    assert info.as_dict()["summary_model"] == "offline" and info.as_dict()["model"] == "fake"
    assert compacted.status == "compacted", compacted.error
    assert isinstance(answered, TurnFinished)
    assert kinds(keyed_fake) == ["turn"]  # only the turn reached the chat model's server
    cp = compacted.checkpoint
    assert (cp.provider_kind, cp.model) == ("offline", "offline")  # the summarizer, named
    assert has_headings(cp.summary)


def test_a_fake_summary_model_writes_the_offline_chat_models_summaries(keyed_fake, cli_store,
                                                                      config_file):
    config = configure(config_file, keyed_fake, chat="small", summary_model="fake")
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)
    [outcome] = compact_times(cli_store, s.id, config)
    assert outcome.status == "compacted", outcome.error
    [body] = keyed_fake.requests
    assert is_summary_request(body) and body["model"] == "fake-model"
    cp = outcome.checkpoint
    assert (cp.provider_kind, cp.model) == ("openai", "openai/fake-model")
    assert "fake summary 1" in cp.summary


def test_auto_compaction_before_a_turn_uses_the_summary_model(keyed_fake, cli_store, config_file):
    config = configure(config_file, keyed_fake, chat="small", summary_model="fake")
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 12, repeat=8)  # over the 3,072-token threshold of the 4K offline model

    async def run():
        async with worker(cli_store, s.id, config) as w:
            return await w.submit_turn("one more").result()

    outcome = asyncio.run(run())
    assert isinstance(outcome, TurnFinished), outcome
    [auto] = outcome.compactions
    assert auto.compacted and auto.checkpoint.model == "openai/fake-model"
    assert kinds(keyed_fake) == ["summary"]  # the answer itself came from the offline chat model


@pytest.mark.slow
def test_compact_and_info_from_the_command_line(run_cli, keyed_fake, config_file):
    configure(config_file, keyed_fake, chat="small", summary_model="fake")
    for i in range(6):
        result = run_cli("ask", "--session", "s", f"question {i}: " + "words to fold " * 60)
        assert result.status == 0, result.stderr
    assert keyed_fake.requests == []  # the turns were the offline model's
    result = run_cli("compact", "--session", "s")
    assert result.status == 0, result.stderr
    clean(result)
    assert kinds(keyed_fake) == ["summary"]
    first = json.loads(run_cli("info", "--session", "s", "--json").stdout)
    assert first == json.loads(run_cli("info", "--session", "s", "--json").stdout)
    assert first["summary_model"] == "fake" and first["model"] == "small"
    text = run_cli("info", "--session", "s").stdout
    assert any(line.split() == ["Summaries", "by", "fake"] for line in text.splitlines()), text


def test_info_says_the_chat_model_summarizes_when_unset(run_cli, config_file):
    assert run_cli("ask", "--model", "offline", "hi").status == 0
    data = json.loads(run_cli("info", "--json").stdout)
    assert data["summary_model"] is None
    text = run_cli("info").stdout
    assert any(line.split() == ["Summaries", "by", "the", "chat", "model"]
               for line in text.splitlines()), text


# --- rejected summaries name the setting ---------------------------------------------------------


def test_rejected_summaries_name_the_setting_and_count_in_a_row(keyed_fake, cli_store, config_file):
    config = configure(config_file, keyed_fake, chat="fake", summary_model=None)
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)
    keyed_fake.script_summary(("text", " "), ("text", " "))  # no summary at all: rejected
    first, second, good = compact_times(cli_store, s.id, config, 3)
    for outcome in (first, second):
        assert outcome.status == "failed" and outcome.error.kind == "summary_rejected"
    line = first.error.user_line()
    assert "the model returned an empty summary" in line
    assert f"set {SUMMARY_MODEL_KEY}" in line and "in a row" not in line
    assert "failed the quality check 2 times in a row" in second.error.user_line()
    assert good.compacted  # the third, unscripted, is a real summary: the count starts over


def test_a_rejected_auto_summary_names_the_setting_on_the_turns_note(keyed_fake, cli_store,
                                                                    config_file):
    """The line `ask` prints on stderr and the app shows as a notice."""
    config = configure(config_file, keyed_fake, chat="fake", summary_model=None)
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 28)  # over the 7,168-token threshold, under the 8,192 window
    keyed_fake.script_summary(("text", " "))

    async def run():
        async with worker(cli_store, s.id, config) as w:
            return await w.submit_turn("go on").result()

    turn = asyncio.run(run())
    assert isinstance(turn, TurnFinished)  # the turn goes on with the context as it was
    [auto] = turn.compactions
    note = report.compaction_note(auto)
    assert note.startswith("auto compaction failed (the model returned an empty summary")
    assert f"set {SUMMARY_MODEL_KEY}" in note and "continuing with the context as it was" in note
    # and the next turns do not ask for another summary at once (issue 30)
    # (half the 1,024 reserve: a quarter of the 7,168 threshold would outlast the window)
    assert note.endswith("the next automatic try waits until the context has grown by 512 "
                         "tokens (/compact tries now)")


def test_a_summary_models_rejection_does_not_point_at_the_setting(keyed_fake, cli_store,
                                                                  config_file):
    config = configure(config_file, keyed_fake, chat="small", summary_model="fake")
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)
    keyed_fake.script_summary(("text", " "))
    [outcome] = compact_times(cli_store, s.id, config)
    assert outcome.error.kind == "summary_rejected"
    assert SUMMARY_MODEL_KEY not in outcome.error.user_line()


def test_the_command_line_compact_failure_names_the_setting(run_cli, keyed_fake, cli_store,
                                                            config_file):
    configure(config_file, keyed_fake, chat="fake", summary_model=None)
    s = cli_store.create_session("s")
    seed(cli_store, s.id, 10)
    keyed_fake.script_summary(("text", ""))
    result = run_cli("compact", "--session", "s")
    assert result.status == 1
    clean(result)
    [line] = result.stderr.splitlines()
    assert line.startswith("picochat: compaction failed: the model returned an empty summary")
    assert f'set {SUMMARY_MODEL_KEY} (e.g. "offline" or a stronger model)' in line


# --- the summary provider's life -----------------------------------------------------------------


class ClosingOffline(OfflineProvider):
    closed = 0

    async def aclose(self) -> None:
        ClosingOffline.closed += 1


def test_the_summary_provider_is_closed_with_the_worker(store):
    s = store.create_session("s")
    summary = resolve_model(Config(), "offline")

    async def run():
        async with SessionWorker(store, s.id, summary, OfflineProvider(), "sys",
                                 summary_model=summary, summary_provider=ClosingOffline()):
            pass

    asyncio.run(run())
    assert ClosingOffline.closed == 1

"""The config file as a user meets it: errors, defaults, `config path|show|init`, model windows
and the model-choice precedence (DESIGN.md: contract "Config (TOML)" and "Command line", D21.14)."""

from __future__ import annotations

import dataclasses
import re
import socket
import tomllib

import pytest

from picochat import models as models_mod
from picochat.config import AgentConfig, Config, ModelConfig, load_config, save_ui_theme
from picochat.config_starter import starter_config_text
from picochat.errors import ConfigError
from picochat.models import auto_detect, choose_model_name, lookup_window, resolve_model
from tests.helpers.config import assert_config_error, write


# --- helpers -------------------------------------------------------------------------------------


# --- every error path: one line, exit 2, file + key named, nothing written -----------------------

MODEL_KEYS = ("model", "api_base", "api_key_env", "token_limit", "timeout")
TOP_KEYS = ("default_model", "models", "agents", "context_compaction", "tools", "ui")
COMPACTION_KEYS = ("enabled", "reserve_tokens", "keep_recent_tokens", "instructions",
                   "summary_model", "preview")
TOOLS = ("history_search", "timeline_recall", "read_file")

BAD_CONFIGS = {
    "unknown_top_level_key": (
        'colour = "red"\n',
        ["colour", "unknown key", "(line 1)", *TOP_KEYS]),
    "unknown_key_in_models_x": (
        '[models.x]\nmodel = "openai/m"\ntokens = 5\n',
        ["models.x.tokens", "unknown key", "(line 3)", *MODEL_KEYS]),
    "unknown_key_in_context_compaction": (
        '[context_compaction]\nreserve = 5\n',
        ["context_compaction.reserve", "unknown key", "(line 2)", *COMPACTION_KEYS]),
    "unknown_key_in_tools": (
        '[tools]\nenable = ["read_file"]\n',
        ["tools.enable", "unknown key", "valid: enabled"]),
    "unknown_key_in_ui": (
        '[ui]\ncolor = "blue"\n',
        ["ui.color", "unknown key", "valid: theme"]),
    "string_for_token_limit": (
        '[models.x]\nmodel = "openai/m"\ntoken_limit = "8192"\n',
        ["models.x.token_limit", "(line 3)", "whole number", "a string"]),
    "number_for_api_base": (
        '[models.x]\nmodel = "openai/m"\napi_base = 8080\n',
        ["models.x.api_base", "expected a string", "a number"]),
    "enabled_yes_string": (
        '[context_compaction]\nenabled = "yes"\n',
        ["context_compaction.enabled", "true or false", "'yes'"]),
    "preview_yes_string": (
        '[context_compaction]\npreview = "yes"\n',
        ["context_compaction.preview", "(line 2)", "true or false", "'yes'"]),
    "boolean_for_int": (
        '[context_compaction]\nkeep_recent_tokens = true\n',
        ["context_compaction.keep_recent_tokens", "whole number", "a boolean"]),
    "boolean_for_agent_token_limit": (
        '[agents.default]\ntoken_limit = false\n',
        ["agents.default.token_limit", "whole number", "a boolean"]),
    "float_for_int": (
        '[context_compaction]\nreserve_tokens = 1.5\n',
        ["context_compaction.reserve_tokens", "whole number"]),
    "negative_reserve_tokens": (
        '[context_compaction]\nreserve_tokens = -1\n',
        ["context_compaction.reserve_tokens", "at least 0", "-1"]),
    "zero_token_limit": (
        '[models.x]\nmodel = "openai/m"\ntoken_limit = 0\n',
        ["models.x.token_limit", "positive", "0"]),
    "zero_timeout": (
        '[models.x]\nmodel = "openai/m"\ntimeout = 0\n',
        ["models.x.timeout", "(line 3)", "positive number of seconds", "0"]),
    "string_timeout": (
        '[models.x]\nmodel = "openai/m"\ntimeout = "30s"\n',
        ["models.x.timeout", "number of seconds", "a string"]),
    "unknown_tool": (
        '[tools]\nenabled = ["history_search", "shell"]\n',
        ["tools.enabled", "'shell'", *TOOLS]),
    "tools_enabled_not_a_list": (
        '[tools]\nenabled = "read_file"\n',
        ["tools.enabled", "list", *TOOLS]),
    "models_x_without_model": (
        '[models.x]\napi_base = "http://127.0.0.1:9/v1"\n',
        ["models.x.model", "missing"]),
    "models_is_a_string": (
        'models = "openai/gpt-4o-mini"\n',
        ["models", "(line 1)", "table"]),
    "models_entry_is_a_string": (
        '[models]\nx = "openai/gpt-4o-mini"\n',
        ["models.x", "(line 2)", "table"]),
    "ui_theme_number": (
        '[ui]\ntheme = 3\n',
        ["ui.theme", "expected a string"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("command", [("ask", "hi"), ("config", "show")], ids=["ask", "show"])
@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_invalid_config_is_one_line_exit_2_and_nothing_written(case, command, run_cli, home,
                                                               config_file):
    text, needles = BAD_CONFIGS[case]
    before = write(config_file, text)
    result = run_cli(*command)
    assert_config_error(result, home, str(config_file), *needles)
    assert result.stdout == ""
    assert config_file.read_bytes() == before


@pytest.mark.parametrize("command", [("ask", "hi"), ("config", "show")], ids=["ask", "show"])
def test_bad_toml_syntax_names_line_and_column(command, run_cli, home, config_file):
    before = write(config_file, '[context_compaction]\nenabled = true\nreserve_tokens = \n')
    result = run_cli(*command)
    assert_config_error(result, home, str(config_file), "invalid TOML", "line 3, column 18")
    assert config_file.read_bytes() == before


def test_bad_toml_unclosed_table_header(run_cli, home, config_file):
    before = write(config_file, 'default_model = "offline"\n[ui\ntheme = "x"\n')
    result = run_cli("ask", "hi")
    assert_config_error(result, home, str(config_file), "invalid TOML")
    assert re.search(r"line 2, column \d+", result.stderr), result.stderr
    assert config_file.read_bytes() == before


def test_config_flag_pointing_at_a_directory(run_cli, home, tmp_path):
    folder = tmp_path / "a_folder"
    folder.mkdir()
    for command in (("ask", "--config", str(folder), "hi"),
                    ("config", "show", "--config", str(folder))):
        result = run_cli(*command)
        assert_config_error(result, home, str(folder), "directory")
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("command", [("ask", "hi"), ("config", "show")], ids=["ask", "show"])
def test_non_utf8_config_file(command, run_cli, home, config_file):
    before = write(config_file, b'default_model = "caf\xe9"\n')
    result = run_cli(*command)
    assert_config_error(result, home, str(config_file), "UTF-8", "byte 20")
    assert config_file.read_bytes() == before


def test_api_key_env_not_set_is_a_one_line_error(run_cli, home, config_file):
    write(config_file, '[models.x]\nmodel = "openai/fake-model"\n'
                        'api_key_env = "PICOCHAT_TEST_SURELY_UNSET_KEY"\n')
    result = run_cli("ask", "--model", "x", "hi")
    assert result.status == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "models.x.api_key_env" in result.stderr
    assert "PICOCHAT_TEST_SURELY_UNSET_KEY" in result.stderr


def test_api_key_env_not_set_names_the_file_and_writes_nothing(run_cli, home, config_file):
    before = write(config_file, '[models.x]\nmodel = "openai/fake-model"\n'
                                 'api_key_env = "PICOCHAT_TEST_SURELY_UNSET_KEY"\n')
    result = run_cli("ask", "--model", "x", "hi")
    assert config_file.read_bytes() == before
    assert_config_error(result, home, str(config_file), "models.x.api_key_env",
                         "PICOCHAT_TEST_SURELY_UNSET_KEY")


def test_unknown_default_model_names_file_and_key_and_writes_nothing(run_cli, home, config_file):
    write(config_file, 'default_model = "nosuch"\n')
    result = run_cli("ask", "hi")
    assert_config_error(result, home, str(config_file), "default_model", "nosuch")


def test_set_api_key_env_passes_resolution(config_file, home, monkeypatch):
    write(config_file, '[models.x]\nmodel = "openai/fake-model"\napi_key_env = "PICO_K"\n')
    config = load_config(config_file)
    monkeypatch.delenv("PICO_K", raising=False)
    with pytest.raises(ConfigError, match="PICO_K is not set"):
        resolve_model(config, "x")
    monkeypatch.setenv("PICO_K", "dummy")
    resolved = resolve_model(config, "x")
    assert resolved.api_key_env == "PICO_K" and resolved.model == "openai/fake-model"


# --- a missing file is not an error --------------------------------------------------------------


def test_missing_config_file_shows_defaults(run_cli, config_file, home):
    assert not config_file.exists()
    result = run_cli("config", "show")
    assert result.status == 0, result.stderr
    assert result.stderr == ""
    assert "no config file" in result.stdout
    shown = tomllib.loads(result.stdout)
    assert shown["context_compaction"] == {"enabled": True, "reserve_tokens": 16384,
                                           "keep_recent_tokens": 20000, "instructions": "",
                                           "preview": False}
    assert shown["tools"]["enabled"] == list(TOOLS)
    assert shown["ui"]["theme"] == "picochat-dark"
    assert "default_model" not in shown
    assert not config_file.exists(), "config show must not create the file"
    assert load_config(config_file) == Config()


def test_missing_config_file_lets_ask_run_offline(run_cli, config_file):
    result = run_cli("ask", "--model", "offline", "hi")
    assert result.status == 0, result.stderr
    assert not config_file.exists()


def test_config_show_reflects_the_file(run_cli, config_file):
    write(config_file, 'default_model = "fake"\n[models.fake]\nmodel = "openai/fake-model"\n'
                        'token_limit = 8192\n[context_compaction]\nreserve_tokens = 1000\n'
                        '[tools]\nenabled = ["read_file", "read_file"]\n')
    result = run_cli("config", "show")
    assert result.status == 0, result.stderr
    assert f"# source: {config_file}" in result.stdout
    shown = tomllib.loads(result.stdout)
    assert shown["default_model"] == "fake"
    assert shown["models"]["fake"] == {"model": "openai/fake-model", "token_limit": 8192}
    assert shown["context_compaction"]["reserve_tokens"] == 1000
    assert shown["context_compaction"]["keep_recent_tokens"] == 20000
    assert shown["tools"]["enabled"] == ["read_file"]


# --- config path ---------------------------------------------------------------------------------


def test_config_path_is_under_picochat_config_dir(run_cli, config_file):
    result = run_cli("config", "path")
    assert result.status == 0, result.stderr
    assert result.stdout.strip() == str(config_file)
    assert not config_file.exists()


def test_config_flag_overrides_the_path(run_cli, tmp_path, config_file):
    other = tmp_path / "elsewhere" / "my.toml"
    for args in (("config", "path", "--config", str(other)),
                 ("--config", str(other), "config", "path")):
        result = run_cli(*args)
        assert result.status == 0, result.stderr
        assert result.stdout.strip() == str(other)


def test_config_flag_is_the_file_that_is_read(run_cli, tmp_path, config_file):
    write(config_file, '[ui]\ntheme = "from-default-location"\n')
    other = tmp_path / "other.toml"
    write(other, '[ui]\ntheme = "from-flag"\n')
    result = run_cli("config", "show", "--config", str(other))
    assert result.status == 0, result.stderr
    assert tomllib.loads(result.stdout)["ui"]["theme"] == "from-flag"


# --- config init ---------------------------------------------------------------------------------


def test_config_init_writes_commented_defaults(run_cli, config_file):
    assert not config_file.parent.exists()
    result = run_cli("config", "init")
    assert result.status == 0, result.stderr
    assert str(config_file) in result.stdout
    text = config_file.read_text(encoding="utf-8")
    assert any(line.startswith("#") for line in text.splitlines())
    loaded = load_config(config_file)
    assert loaded.source == config_file
    assert dataclasses.replace(loaded, source=None) == Config()
    assert text == starter_config_text()
    # No stray temp files next to it.
    assert sorted(p.name for p in config_file.parent.iterdir()) == ["config.toml"]


def test_config_init_twice_refuses_and_keeps_the_edited_file(run_cli, config_file, home):
    assert run_cli("config", "init").status == 0
    edited = config_file.read_bytes() + b'\n# my edit\n[agents.default]\ntoken_limit = 9000\n'
    config_file.write_bytes(edited)
    result = run_cli("config", "init")
    assert result.status == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert "--force" in result.stderr and str(config_file) in result.stderr
    assert config_file.read_bytes() == edited

    forced = run_cli("config", "init", "--force")
    assert forced.status == 0, forced.stderr
    assert config_file.read_text(encoding="utf-8") == starter_config_text()
    assert dataclasses.replace(load_config(config_file), source=None) == Config()


def test_config_init_with_config_flag(run_cli, tmp_path, config_file):
    target = tmp_path / "deep" / "dir" / "pc.toml"
    result = run_cli("config", "init", "--config", str(target))
    assert result.status == 0, result.stderr
    assert target.is_file() and not config_file.exists()


def test_config_init_force_replaces_an_invalid_file(run_cli, config_file):
    write(config_file, "this is [not toml\n")
    result = run_cli("config", "init", "--force")
    assert result.status == 0, result.stderr
    assert run_cli("config", "show").status == 0


# --- /theme saves one line, keeping the rest of the file byte for byte ----------------------------


def test_save_theme_keeps_the_config_init_comments(run_cli, config_file):
    assert run_cli("config", "init").status == 0
    before = config_file.read_text(encoding="utf-8")
    assert before.count('theme = "picochat-dark"') == 1
    save_ui_theme(config_file, "picochat-light")
    after = config_file.read_text(encoding="utf-8")
    assert after == before.replace('theme = "picochat-dark"', 'theme = "picochat-light"')
    assert load_config(config_file).ui.theme == "picochat-light"
    assert sorted(p.name for p in config_file.parent.iterdir()) == ["config.toml"]


THEME_EDITS = {
    "value_replaced_comment_kept": (
        '# mine\n[ui]\ntheme = "a#b"  # my pick\n\n[tools]\nenabled = ["read_file"]\n',
        '# mine\n[ui]\ntheme = "new"  # my pick\n\n[tools]\nenabled = ["read_file"]\n'),
    "commented_out_theme_is_not_the_setting": (
        '[ui]\n# theme = "x"\ntheme = \'old\'\n',
        '[ui]\n# theme = "x"\ntheme = "new"\n'),
    "ui_without_theme_gets_it_under_the_header": (
        '[ui]  # look\n# theme = "x"\n\n[tools]\nenabled = []\n',
        '[ui]  # look\ntheme = "new"\n# theme = "x"\n\n[tools]\nenabled = []\n'),
    "ui_header_last_without_newline": (
        'default_model = "offline"\n[ui]',
        'default_model = "offline"\n[ui]\ntheme = "new"\n'),
    "no_ui_table_appends_one": (
        'default_model = "offline"  # keep\n[tools]\nenabled = []\n',
        'default_model = "offline"  # keep\n[tools]\nenabled = []\n\n[ui]\ntheme = "new"\n'),
    "no_ui_table_no_final_newline": (
        '# one\n# two',
        '# one\n# two\n\n[ui]\ntheme = "new"\n'),
    "theme_line_in_another_table_is_not_ours": (
        '[context_compaction]\ninstructions = "theme = x"\n',
        '[context_compaction]\ninstructions = "theme = x"\n\n[ui]\ntheme = "new"\n'),
}


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("case", sorted(THEME_EDITS))
def test_save_theme_changes_only_the_theme(case, newline, config_file):
    before, after = (text.replace("\n", newline) for text in THEME_EDITS[case])
    write(config_file, before)
    save_ui_theme(config_file, "new")
    assert config_file.read_bytes() == after.encode("utf-8")
    assert load_config(config_file).ui.theme == "new"


def test_save_theme_creates_a_missing_file_private(config_file):
    assert not config_file.parent.exists()
    save_ui_theme(config_file, 'odd "name" \\ here')
    assert config_file.read_text(encoding="utf-8") == '[ui]\ntheme = "odd \\"name\\" \\\\ here"\n'
    assert load_config(config_file).ui.theme == 'odd "name" \\ here'
    assert config_file.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in config_file.parent.iterdir()) == ["config.toml"]


UNEDITABLE_THEME_FILES = {
    "invalid_toml": ('[ui\ntheme = "x"\n', "invalid TOML"),
    "invalid_config": ('[ui]\ntheme = "x"\ncolor = "red"\n', "ui.color"),
    "inline_ui_table": ('# c\nui = { theme = "x" }\n', "nothing written"),
    "dotted_ui_theme": ('# c\nui.theme = "x"\n', "nothing written"),
    "multiline_theme_value": ('[ui]\ntheme = """\nx"""\n', "nothing written"),
    "ui_header_inside_a_string": (
        '[context_compaction]\ninstructions = """\n[ui]\n"""\n', "nothing written"),
}


@pytest.mark.parametrize("case", sorted(UNEDITABLE_THEME_FILES))
def test_save_theme_refuses_what_it_cannot_edit_and_leaves_it(case, config_file):
    text, needle = UNEDITABLE_THEME_FILES[case]
    before = write(config_file, text)
    with pytest.raises(ConfigError) as raised:
        save_ui_theme(config_file, "new")
    line = raised.value.user_line()
    assert str(config_file) in line and needle in line, line
    assert "\n" not in line
    assert config_file.read_bytes() == before
    assert sorted(p.name for p in config_file.parent.iterdir()) == ["config.toml"]


# --- model windows (DESIGN.md D21.14) -------------------------------------------------------------


def test_models_token_limit_wins_over_litellm_map():
    config = Config(models={"m": ModelConfig(name="m", model="openai/gpt-4o-mini",
                                             token_limit=8192)})
    r = resolve_model(config, "m")
    assert (r.model_window, r.window, r.window_source) == (8192, 8192, "config")
    assert r.model == "openai/gpt-4o-mini" and r.provider_kind == "openai"


@pytest.mark.parametrize("model, window", [("openai/gpt-4o-mini", 128000),
                                           ("gpt-4o-mini", 128000),
                                           ("ollama/llama3.1", 8192)])
def test_window_from_litellm_map(model, window):
    assert lookup_window(model) == window
    r = resolve_model(Config(), model)
    assert (r.model_window, r.window, r.window_source) == (window, window, "litellm")
    # The same, through a [models] entry without token_limit.
    r = resolve_model(Config(models={"e": ModelConfig(name="e", model=model)}), "e")
    assert (r.model_window, r.window_source) == (window, "litellm")


def test_unknown_prefixed_model_gets_default_window():
    r = resolve_model(Config(), "openai/picochat-no-such-model-xyz")
    assert (r.model_window, r.window, r.window_source) == (128000, 128000, "default")
    assert r.provider_kind == "openai"


def test_offline_window_is_default():
    r = resolve_model(Config(), "offline")
    assert r.offline and r.window == 128000 and r.window_source == "default"


def _with_agent_limit(limit: int, **model_kwargs) -> Config:
    return Config(models={"m": ModelConfig(name="m", **model_kwargs)},
                  agents={"default": AgentConfig(name="default", token_limit=limit)})


def test_agent_token_limit_tightens_the_window():
    r = resolve_model(_with_agent_limit(6000, model="openai/fake-model", token_limit=8192), "m")
    assert (r.model_window, r.window, r.window_source) == (8192, 6000, "config")
    r = resolve_model(_with_agent_limit(64000, model="openai/gpt-4o-mini"), "m")
    assert (r.model_window, r.window) == (128000, 64000)


def test_agent_token_limit_never_widens_the_window():
    r = resolve_model(_with_agent_limit(100000, model="openai/fake-model", token_limit=8192), "m")
    assert (r.model_window, r.window) == (8192, 8192)
    r = resolve_model(_with_agent_limit(1_000_000, model="ollama/llama3.1"), "m")
    assert (r.model_window, r.window) == (8192, 8192)


def test_windows_from_a_real_config_file(config_file):
    write(config_file, '[models.fake]\nmodel = "openai/fake-model"\ntoken_limit = 8192\n'
                        '[agents.default]\nmodel = "fake"\ntoken_limit = 6000\n')
    config = load_config(config_file)
    r = resolve_model(config, choose_model_name(config, None, None))
    assert r.name == "fake" and r.window == 6000 and r.model_window == 8192


# --- model choice precedence ---------------------------------------------------------------------

FULL = Config(default_model="from-default",
              agents={"default": AgentConfig(name="default", model="from-agent")})


def test_precedence_flag_env_session_agent_default(home, monkeypatch):
    monkeypatch.setenv("PICOCHAT_MODEL", "from-env")
    assert choose_model_name(FULL, "from-flag", "from-session") == "from-flag"
    assert choose_model_name(FULL, None, "from-session") == "from-env"
    monkeypatch.delenv("PICOCHAT_MODEL")
    assert choose_model_name(FULL, None, "from-session") == "from-session"
    assert choose_model_name(FULL, None, None) == "from-agent"
    assert choose_model_name(Config(default_model="from-default"), None, None) == "from-default"


def test_precedence_falls_back_to_auto_detect(home, monkeypatch):
    monkeypatch.setattr(models_mod, "auto_detect", lambda: "auto-detected")
    assert choose_model_name(Config(), None, None) == "auto-detected"
    monkeypatch.setenv("PICOCHAT_MODEL", "")
    assert choose_model_name(Config(), None, "") == "auto-detected"


def _ollama_port_in_use() -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", 11434)) == 0


def test_auto_detect_without_keys_or_ollama_is_offline(home, monkeypatch):
    if _ollama_port_in_use():
        pytest.skip("something listens on 127.0.0.1:11434")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert auto_detect() == "offline"
    assert choose_model_name(Config(), None, None) == "offline"
    assert resolve_model(Config(), "offline").offline


def test_auto_detect_key_order(home, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "dummy")
    assert auto_detect().startswith("anthropic/")
    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    assert auto_detect().startswith("openai/")


def test_auto_detect_uses_first_ollama_model(home, monkeypatch):
    monkeypatch.setattr(models_mod, "_first_ollama_model", lambda: "llama3.1")
    assert auto_detect() == "ollama/llama3.1"


def test_cli_flag_beats_env_and_env_beats_config(run_cli, config_file):
    write(config_file, 'default_model = "nosuch-default"\n')
    bad_env = {"PICOCHAT_MODEL": "nosuch-env"}
    result = run_cli("ask", "--model", "offline", "hi", env=bad_env)
    assert result.status == 0, result.stderr
    result = run_cli("ask", "--session", "s2", "hi", env={"PICOCHAT_MODEL": "offline"})
    assert result.status == 0, result.stderr
    result = run_cli("ask", "--session", "s3", "hi", env=bad_env)
    assert result.status == 2 and "nosuch-env" in result.stderr
    assert "Traceback" not in result.stderr


# --- unknown model names -------------------------------------------------------------------------


def test_unknown_bare_model_name_lists_configured_models():
    config = Config(models={"zeta": ModelConfig(name="zeta", model="openai/z"),
                            "alpha": ModelConfig(name="alpha", model="openai/a")})
    with pytest.raises(ConfigError) as info:
        resolve_model(config, "nosuch")
    msg = info.value.user_line()
    assert "'nosuch'" in msg and "alpha, zeta" in msg
    assert "\n" not in msg


def test_unknown_bare_model_name_without_models_configured():
    with pytest.raises(ConfigError, match="none configured"):
        resolve_model(Config(), "nosuch")


def test_unknown_model_via_cli_is_exit_2(run_cli, config_file):
    write(config_file, '[models.fake]\nmodel = "openai/fake-model"\n')
    result = run_cli("ask", "--model", "nosuch", "hi")
    assert result.status == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert "nosuch" in result.stderr and "fake" in result.stderr


def test_empty_existing_config_file_is_named_as_the_source(run_cli, config_file):
    write(config_file, "")
    result = run_cli("config", "show")
    assert result.status == 0, result.stderr
    assert f"# source: {config_file}" in result.stdout

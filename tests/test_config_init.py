"""`picochat config init` writes a file a person can learn from: every key explained with its
default, examples for each kind of provider, and it still means exactly "no file"."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

from picochat.config import (BUILTIN_TOOLS, AgentConfig, CompactionConfig, Config, ModelConfig,
                             ToolsConfig, UiConfig, effective_config_text, load_config,
                             save_ui_theme)
from picochat.models import DEFAULT_WINDOW, resolve_model
from picochat.providers import ollama
from picochat.session import TOTAL_TIMEOUT_S
from picochat.tui.themes import bundled_dir

# Where each kind of key is explained: the section whose heading names its table.
SECTIONS = {ModelConfig: "[models.NAME]", AgentConfig: "[agents.default]",
            CompactionConfig: "[context_compaction]", ToolsConfig: "[tools]", UiConfig: "[ui]"}
NOT_KEYS = {"name", "source"}  # filled in by the loader, never written in a file
EXAMPLE_LINE = re.compile(r"^# (\[[\w.]+\]|[a-z_]+ = .+)$")


def _init(run_cli, config_file: Path) -> str:
    result = run_cli("config", "init")
    assert result.status == 0, result.stderr
    return config_file.read_text(encoding="utf-8")


def _sections(text: str) -> dict[str, str]:
    """The file cut at its `# --- [table]` headings; "" is the top, before the first."""
    parts = re.split(r"^# --- (\[[\w.]+\])", text, flags=re.M)
    return {"": parts[0], **dict(zip(parts[1::2], parts[2::2]))}


def _keys() -> list[tuple[str, str]]:
    """(section, key) for every key the config dataclasses hold: a new one lands here."""
    keys = []
    for f in dataclasses.fields(Config):
        if f.name in NOT_KEYS:
            continue
        default = getattr(Config(), f.name)
        kind = type(default) if dataclasses.is_dataclass(default) else None
        if f.name in ("models", "agents"):
            kind = ModelConfig if f.name == "models" else AgentConfig
        if kind is None:
            keys.append(("", f.name))
            continue
        assert kind in SECTIONS, f"a new table {f.name}: give it a section in config init"
        keys += [(SECTIONS[kind], g.name) for g in dataclasses.fields(kind)
                 if g.name not in NOT_KEYS]
    return keys


def test_every_config_key_is_explained_in_its_section(run_cli, config_file):
    sections = _sections(_init(run_cli, config_file))
    assert set(SECTIONS.values()) <= set(sections)
    keys = _keys()
    assert ("[models.NAME]", "token_limit") in keys and ("[ui]", "theme") in keys
    for section, key in keys:
        body = sections[section]
        explained = re.search(rf"^#\s+{key}(:| {{2,}})\s*\S", body, re.M)
        shown = re.search(rf"^(# )?{key} = ", body, re.M)
        assert explained and shown, f"config init says nothing of {section} {key}"


def test_it_loads_to_the_same_config_as_no_file(run_cli, config_file):
    _init(run_cli, config_file)
    loaded = load_config(config_file)
    assert dataclasses.replace(loaded, source=None) == Config()
    show = run_cli("config", "show")
    assert show.status == 0
    same = effective_config_text(dataclasses.replace(loaded, source=None))
    assert show.stdout.split("\n", 1)[1] == same.split("\n", 1)[1]  # below the "# source:" line


def test_the_defaults_it_states_are_the_codes(run_cli, config_file):
    raw = _init(run_cli, config_file)
    text = " ".join(raw.split())  # sentences may wrap
    assert f"else {DEFAULT_WINDOW})" in text
    assert f"(default: {int(TOTAL_TIMEOUT_S)})" in text
    assert f"at most {ollama.WINDOW_CAP})" in text
    assert f'(default: "{AgentConfig(name="x").system_prompt}")' in text
    for tool in BUILTIN_TOOLS:
        assert re.search(rf"^#\s+{tool} {{2,}}\S", _sections(raw)["[tools]"], re.M), tool
    for theme in sorted(p.stem for p in bundled_dir().glob("*.toml")):
        assert theme in text, f"config init does not name the theme {theme}"


def test_the_examples_uncommented_are_a_valid_config_that_means_what_it_says(
        run_cli, config_file, monkeypatch, tmp_path):
    (tmp_path / "home" / "src" / "project").mkdir(parents=True)  # the example's read_file root
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    text = _init(run_cli, config_file)
    examples = [line for line in text.splitlines() if EXAMPLE_LINE.match(line)]
    assert len(examples) >= 15
    config_file.write_text("\n".join(EXAMPLE_LINE.sub(r"\1", line) for line in text.splitlines())
                           + "\n")
    config = load_config(config_file)  # the real loader: every example is a valid setting
    assert {"gpt", "claude", "llama", "server"} <= set(config.models)
    assert config.models["gpt"].model.startswith("openai/")
    assert config.models["claude"].model.startswith("anthropic/")
    server = config.models["server"]
    assert server.api_base and server.api_key_env and server.token_limit and server.timeout
    assert config.context_compaction.summary_model == "offline"
    assert config.tools.roots == (tmp_path / "home" / "src" / "project",)
    llama = resolve_model(config, "llama")  # configured window: no server is asked
    assert llama.provider_options == {"num_ctx": config.models["llama"].token_limit}


def test_all_tools_are_on_and_the_ui_theme_can_still_be_saved_in_place(run_cli, config_file):
    text = _init(run_cli, config_file)
    assert tomllib.loads(text)["tools"]["enabled"] == list(BUILTIN_TOOLS)
    save_ui_theme(config_file, "picochat-light")  # what /theme does to the file
    after = config_file.read_text(encoding="utf-8")
    assert after == text.replace('theme = "picochat-dark"', 'theme = "picochat-light"')


# --- config init --model: a working file in one step (issue 35, item 7) -------------------------

def test_init_with_a_model_writes_a_file_that_uses_it(run_cli, config_file, fake_openai):
    result = run_cli("config", "init", "--model", "openai/qwen2.5-7b", "--api-base",
                     fake_openai.base_url, "--token-limit", "8192")
    assert result.status == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (f"default_model is local: [models.local] runs "
                                              f"openai/qwen2.5-7b at {fake_openai.base_url}")
    config = load_config(config_file)
    assert config.default_model == "local"
    assert config.models["local"] == ModelConfig("local", "openai/qwen2.5-7b",
                                                 api_base=fake_openai.base_url, token_limit=8192)
    answer = run_cli("ask", "hello")  # no -m, no edit: it talks to that server
    assert answer.status == 0, answer.stderr
    assert fake_openai.requests and fake_openai.requests[-1]["model"] == "qwen2.5-7b"
    info = run_cli("info", "--json")
    assert '"effective_window_tokens": 8192' in info.stdout


def test_init_with_a_hosted_model_names_it_after_the_model(run_cli, config_file):
    assert run_cli("config", "init", "--model", "anthropic/claude-sonnet-4-5").status == 0
    config = load_config(config_file)
    assert config.default_model == "claude-sonnet-4-5"
    assert config.models["claude-sonnet-4-5"].model == "anthropic/claude-sonnet-4-5"


def test_init_flags_without_a_model_or_with_a_bad_value_write_nothing(run_cli, config_file):
    lone = run_cli("config", "init", "--api-base", "http://127.0.0.1:8080/v1")
    assert lone.status == 2 and lone.stderr.startswith("picochat: --api-base goes with --model")
    assert not config_file.exists()
    bad = run_cli("config", "init", "--model", "openai/m", "--token-limit", "0")
    assert bad.status == 2 and "--token-limit must be a positive number" in bad.stderr
    assert not config_file.exists()
    assert len(bad.stderr.strip().splitlines()) == 1


def test_a_top_level_key_appended_after_a_table_says_where_it_belongs(run_cli, config_file):
    text = _init(run_cli, config_file)
    config_file.write_text(text + '\ndefault_model = "local"\n', encoding="utf-8")
    result = run_cli("config", "show")
    assert result.status == 2
    line = result.stderr.strip()
    assert "ui.default_model" in line and "unknown key" in line
    assert "default_model belongs at the top of the file, above the first [table] line" in line

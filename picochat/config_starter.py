"""The file `picochat config init` writes: a config a person can learn from.

Every key is explained with its default; the keys that have a default are set to it (rendered
by tomli-w from the dataclasses, so the file means exactly "no file"), and the rest are
commented-out examples, one per kind of provider. tests/test_config_init.py fails when a key is
added to config.py without a word here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from picochat.config import DEFAULT_SYSTEM_PROMPT, Config
from picochat.errors import ConfigError
from picochat.fsutil import atomic_write_text

# Figures that live above config.py (models, session, providers.ollama); the test checks them.
DEFAULT_WINDOW = 128_000
DEFAULT_TIMEOUT_S = 600
OLLAMA_WINDOW_CAP = 32_768

TEMPLATE = """\
# picochat configuration (TOML). Every key is optional: a line commented out
# or deleted keeps its default, and the values set below are the defaults.
# `picochat config show` prints the config in force; `picochat config init
# --force` writes this file afresh. Keys never go in this file: name the
# environment variable that holds one with api_key_env.
#
# The model, first match wins: -m/--model, the environment variable
# PICOCHAT_MODEL, the session's own (remembered from an earlier -m), the
# model of [agents.default], default_model; else auto-detection:
# OPENAI_API_KEY picks openai/gpt-4o-mini, ANTHROPIC_API_KEY picks
# anthropic/claude-sonnet-4-5, a running Ollama its first model, and with none
# of those the built-in "offline" model answers (no network, no key).

# default_model: a NAME of [models.NAME] below, or a litellm model string
# ("anthropic/claude-sonnet-4-5", "ollama/llama3.2", "offline").
# Default: auto-detection.
# default_model = "openai/gpt-4o-mini"


# --- [models.NAME]: a model picochat can talk to, called NAME ---------------
#   model        the litellm model string, "provider/model" (required)
#   api_base     the server's URL, for a local server or a proxy
#                (default: the provider's own address)
#   api_key_env  the environment variable that holds the key (default: the
#                provider's own: OPENAI_API_KEY for openai/..., and so on)
#   token_limit  the model's context window in tokens (default: what an
#                Ollama server says, else litellm's model map, else {window})
#   timeout      seconds one whole request may take, streaming included
#                (default: {timeout})
# Uncomment one, then set default_model to its NAME (or run picochat -m NAME).
#
# OpenAI; export OPENAI_API_KEY=sk-...
# [models.gpt]
# model = "openai/gpt-4o-mini"
#
# Anthropic; export ANTHROPIC_API_KEY=sk-ant-...
# [models.claude]
# model = "anthropic/claude-sonnet-4-5"
#
# Ollama, no key; first `ollama pull llama3.2`. token_limit is sent to Ollama
# as num_ctx, the context it sets memory aside for: give the num_ctx you want
# (unset, picochat asks the server and uses at most {ollama_cap}).
# [models.llama]
# model = "ollama/llama3.2"
# token_limit = 8192
# api_base = "http://127.0.0.1:11434"    # the default; OLLAMA_HOST also sets it
#
# An OpenAI-compatible server: llama.cpp's llama-server, vLLM, LM Studio, a
# LiteLLM proxy. The model is "openai/" + the name the server serves, and
# token_limit the server's context (llama.cpp -c, vLLM --max-model-len).
# [models.server]
# model = "openai/my-model"
# api_base = "http://127.0.0.1:8080/v1"
# api_key_env = "MY_SERVER_KEY"          # only for a server that wants a key
# token_limit = 8192
# timeout = 300


# --- [agents.default]: what every session starts with -----------------------
#   model          as default_model, and it outranks default_model
#   system_prompt  the system message sent first in every request
#                  (default: "{system_prompt}")
#   token_limit    a smaller window than the model's; it can only shrink it
# [agents.default]
# model = "openai/gpt-4o-mini"
# system_prompt = "You are a terse senior engineer."
# token_limit = 16000


# --- [context_compaction]: folding old turns into a summary -----------------
# The raw history is never rewritten: a summary (a checkpoint) stands in for
# the older turns in what the model is sent.
[context_compaction]
# enabled: compact on its own before a turn whose request would pass the
# window minus reserve_tokens. /compact, `picochat compact` and recovery
# from a too-long request work either way.
{enabled}
# reserve_tokens: kept free for the answer, and the most an answer may be
# (at most half the window on a small one).
{reserve_tokens}
# keep_recent_tokens: about how much of the newest whole turns stays word for
# word after a compaction (at most half of what is below the threshold).
{keep_recent_tokens}
# instructions: added to every summary request ("Keep every file path").
{instructions}
# summary_model: the model that writes summaries: a [models] NAME, a litellm
# model string, or "offline" (the built-in extractive summarizer). Default:
# the chat model.
# summary_model = "offline"
# preview: in the app, show each automatic compaction before it is written:
# Enter commits it, e edits the summary, Esc drops it (the turn then goes on
# uncompacted). `picochat ask` never waits for one.
{preview}


# --- [tools]: the built-in tools the model may call -------------------------
#   history_search   full-text search over the session's whole raw log
#   timeline_recall  search over the session's earlier summaries
#   read_file        read a text file under the folder picochat started in
# enabled: the tools offered; an empty list [] offers none, for a server
# that refuses requests with tools.
# roots: the folders read_file may read, e.g. ["~/src/project"]; unset, the
# folder picochat started in, and none at all when that is your home folder
# or /. Keys and credentials (.ssh, .aws, .env*, *.pem, id_rsa …) and
# picochat's own data are never read, wherever they are.
[tools]
{tools}
# roots = ["~/src/project"]


# --- [ui]: the chat app -----------------------------------------------------
# theme: picochat-dark, picochat-light, picochat-high-contrast, or NAME for
# your own <config dir>/themes/NAME.toml (`picochat paths` shows the folder).
# /theme NAME in the app switches theme and saves it here.
[ui]
{theme}
"""


def starter_config_text() -> str:
    """The text `config init` writes; it loads to the same config as no file at all."""
    d = Config()
    c = d.context_compaction
    return TEMPLATE.format(
        window=DEFAULT_WINDOW, timeout=DEFAULT_TIMEOUT_S, ollama_cap=OLLAMA_WINDOW_CAP,
        system_prompt=DEFAULT_SYSTEM_PROMPT,
        enabled=_setting("enabled", c.enabled),
        reserve_tokens=_setting("reserve_tokens", c.reserve_tokens),
        keep_recent_tokens=_setting("keep_recent_tokens", c.keep_recent_tokens),
        instructions=_setting("instructions", c.instructions),
        preview=_setting("preview", c.preview),
        tools=_setting("enabled", list(d.tools.enabled)),
        theme=_setting("theme", d.ui.theme),
    )


def _setting(key: str, value: Any) -> str:
    """`key = value` as tomli-w writes it (quoting, arrays), without the final newline."""
    import tomli_w

    return tomli_w.dumps({key: value}).rstrip("\n")


@dataclass(frozen=True)
class FirstModel:
    """`config init --model …`: the model the starter file sets up and makes the default."""

    model: str
    api_base: str | None = None
    token_limit: int | None = None
    name: str | None = None

    @property
    def key(self) -> str:
        """Its [models.NAME]: the name given, "local" for a server at an address, else the
        model's own last part (`openai/gpt-4o-mini` → `gpt-4o-mini`)."""
        if self.name:
            return self.name
        if self.api_base:
            return "local"
        return re.sub(r"[^A-Za-z0-9_-]+", "-", self.model.rsplit("/", 1)[-1]).strip("-") or "main"


def with_model(text: str, first: FirstModel) -> str:
    """The starter text with `default_model` set to `first` and its [models.NAME] table, placed
    where TOML reads them: the key above every table, the table after the examples."""
    import tomli_w

    head = f"default_model = {tomli_w.dumps({'k': first.key}).split('=', 1)[1].strip()}"
    marker = '# default_model = "openai/gpt-4o-mini"\n'
    assert marker in text
    text = text.replace(marker, marker + head + "\n", 1)
    entry: dict[str, Any] = {"model": first.model}
    if first.api_base:
        entry["api_base"] = first.api_base
    if first.token_limit:
        entry["token_limit"] = first.token_limit
    table = tomli_w.dumps({"models": {first.key: entry}}).strip()
    anchor = "\n\n# --- [agents.default]"
    assert anchor in text
    return text.replace(anchor, f"\n\n# Set up by `picochat config init --model`:\n{table}\n"
                        + anchor, 1)


def write_starter_config(path: Path, *, force: bool = False,
                         first: FirstModel | None = None) -> None:
    """Write the starter file atomically; refuse to replace an existing file unless forced.
    With `first`, the file sets that model up and makes it the default; it is read back
    first, so a file that would not load is never written."""
    if path.exists() and not force:
        raise ConfigError(f"{path}: already exists; nothing written",
                          "use `picochat config init --force` to replace it")
    text = starter_config_text()
    if first is not None:
        from picochat.config import load_config_text

        text = with_model(text, first)
        load_config_text(text, path)  # a bad value is the usual one line, nothing written
    atomic_write_text(path, text)

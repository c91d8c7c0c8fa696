"""Which model a session talks to, and how big its window is.

Precedence, highest first: the `--model` flag, `PICOCHAT_MODEL`, the session's own model (set by
an earlier `--model` or `/model`), `[agents.default].model`, `default_model`, auto-detection.
The window is the `[models]` entry's `token_limit`, else litellm's bundled model map (read as
JSON, without importing litellm), else 128000; the agent's `token_limit` can only tighten it
(design §10.3, §21.14).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from picochat import tokens
from picochat.budget import effective_window
from picochat.config import Config, ModelConfig
from picochat.errors import ConfigError
from picochat.providers.base import Provider

DEFAULT_WINDOW = 128_000
OFFLINE = "offline"
OLLAMA_URL = "http://127.0.0.1:11434"


@dataclass(frozen=True)
class ResolvedModel:
    name: str                 # what the user typed or configured: a [models] key or a model string
    model: str                # the litellm model string ("offline" for the built-in model)
    provider_kind: str        # "offline", "openai", "anthropic", "ollama", ...
    model_window: int
    window_source: str        # "config" | "litellm" | "default"
    agent_limit: int | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    timeout: float | None = None   # seconds one whole call may take; None: the session default

    @property
    def offline(self) -> bool:
        return self.provider_kind == OFFLINE

    @property
    def window(self) -> int:
        """The effective window: the agent may only tighten the model's."""
        return effective_window(self.model_window, self.agent_limit)

    @property
    def token_factor(self) -> float:
        """Our o200k counts times this estimate the model's own tokens (tokens.family_factor)."""
        return tokens.family_factor(self.provider_kind, self.model)

    @property
    def reasoning(self) -> bool:
        """Whether the model thinks before it answers (its output cap must leave room)."""
        return not self.offline and supports_reasoning(self.model)

    @property
    def label(self) -> str:
        return f"{self.name} (offline)" if self.offline and self.name != OFFLINE else self.name


def choose_model(config: Config, flag: str | None,
                 session_model: str | None) -> tuple[str, str]:
    """The model name and where it came from (for error messages that say where to fix it)."""
    candidates = (
        (flag, "--model"),
        (os.environ.get("PICOCHAT_MODEL"), "PICOCHAT_MODEL"),
        (session_model, "the session's model"),
        (config.agent.model, _in_file(config, "agents.default.model")),
        (config.default_model, _in_file(config, "default_model")),
    )
    for candidate, origin in candidates:
        if candidate:
            return candidate, origin
    return auto_detect(), "auto-detection"


def choose_model_name(config: Config, flag: str | None, session_model: str | None) -> str:
    return choose_model(config, flag, session_model)[0]


def _in_file(config: Config, key: str) -> str:
    return f"{config.source}: {key}" if config.source else key


def resolve_model(config: Config, name: str, origin: str | None = None) -> ResolvedModel:
    entry = config.models.get(name)
    if entry is None and name != OFFLINE and "/" not in name and lookup_window(name) is None:
        choices = ", ".join(sorted(config.models)) or "none configured"
        where = f"{origin}: " if origin else ""
        raise ConfigError(
            f"{where}unknown model {name!r}: not a [models] key ({choices}) and not a litellm "
            "model string", 'use e.g. "offline", "openai/gpt-4o-mini" or a [models] key')
    if entry is None:
        entry = ModelConfig(name=name, model=name)
    if entry.api_key_env and not os.environ.get(entry.api_key_env):
        key = _in_file(config, f"models.{entry.name}.api_key_env")
        raise ConfigError(f"{key}: the environment variable {entry.api_key_env} is not set",
                          f"export {entry.api_key_env}=…")
    if entry.token_limit is not None:
        window, source = entry.token_limit, "config"
    else:
        mapped = lookup_window(entry.model) if entry.model != OFFLINE else None
        window, source = (mapped, "litellm") if mapped else (DEFAULT_WINDOW, "default")
    return ResolvedModel(
        name=name,
        model=entry.model,
        provider_kind=provider_kind(entry.model),
        model_window=window,
        window_source=source,
        agent_limit=config.agent.token_limit,
        api_base=entry.api_base,
        api_key_env=entry.api_key_env,
        timeout=entry.timeout,
    )


SUMMARY_MODEL_KEY = "[context_compaction] summary_model"


def resolve_summary_model(config: Config) -> ResolvedModel | None:
    """The model `[context_compaction] summary_model` names, None when unset (the chat model
    summarizes). Resolved like the chat model, and its key checked now, so a bad setting is one
    line before anything is written rather than a failed compaction later."""
    name = config.context_compaction.summary_model
    if name is None:
        return None
    resolved = resolve_model(config, name, _in_file(config, SUMMARY_MODEL_KEY))
    missing = _missing_key(resolved)
    if missing:
        raise ConfigError(f"{_in_file(config, SUMMARY_MODEL_KEY)}: no API key for "
                          f"{resolved.model}: {missing} is not set",
                          f"export {missing}=…, or set summary_model to \"offline\"")
    return resolved


def provider_kind(model: str) -> str:
    if model == OFFLINE:
        return OFFLINE
    if "/" in model:
        return model.split("/", 1)[0]
    info = _model_map().get(model) or {}
    return str(info.get("litellm_provider") or "openai")


def lookup_window(model: str) -> int | None:
    """The input window from litellm's bundled map, trying the name with and without prefix."""
    table = _model_map()
    for key in (model, model.split("/", 1)[1] if "/" in model else None):
        info = table.get(key) if key else None
        if info:
            value = info.get("max_input_tokens") or info.get("max_tokens")
            if isinstance(value, int) and value > 0:
                return value
    return None


# Open-weight reasoning models served locally (no entry in litellm's map): DeepSeek-R1 and its
# distills, QwQ, Qwen3, gpt-oss, Magistral, and releases named "thinking" or "reasoning".
_REASONING_NAME = re.compile(r"qwq|(?<![a-z0-9])r1(?![0-9])|think|reason|qwen3|gpt-oss|magistral",
                             re.I)


def supports_reasoning(model: str) -> bool:
    """litellm's bundled map says the model reasons (`supports_reasoning`), or its name is one
    of a local reasoning model."""
    table = _model_map()
    for key in (model, model.split("/", 1)[1] if "/" in model else None):
        info = table.get(key) if key else None
        if info and info.get("supports_reasoning") is True:
            return True
    return bool(_REASONING_NAME.search(model))


@lru_cache(maxsize=1)
def _model_map() -> dict[str, Any]:
    spec = importlib.util.find_spec("litellm")
    if not spec or not spec.submodule_search_locations:
        return {}
    path = Path(list(spec.submodule_search_locations)[0]) / \
        "model_prices_and_context_window_backup.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def auto_detect() -> str:
    """The contract's default: a key picks its provider, then a local Ollama, else offline."""
    if os.environ.get("OPENAI_API_KEY"):
        return "openai/gpt-4o-mini"
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic/claude-sonnet-4-5"
    first = _first_ollama_model()
    return f"ollama/{first}" if first else OFFLINE


def _first_ollama_model() -> str | None:
    import urllib.request  # only with no model configured: 15 ms of http and email modules

    try:
        with urllib.request.urlopen(f"{OLLAMA_URL}/api/tags", timeout=0.3) as response:
            models = json.load(response).get("models") or []
    except (OSError, ValueError):
        return None
    names = [m.get("name") for m in models if isinstance(m, dict) and m.get("name")]
    return names[0] if names else None


def create_provider(resolved: ResolvedModel) -> Provider:
    """The provider for a model; litellm is imported only when a real model is used."""
    if resolved.offline:
        from picochat.providers.offline import OfflineProvider

        return OfflineProvider()
    from picochat.providers.litellm_provider import READ_TIMEOUT_S, LiteLLMProvider

    missing = _missing_key(resolved)
    if missing:
        raise ConfigError(f"no API key for {resolved.model}: {missing} is not set",
                          f"export {missing}=…, or use --model offline")
    key = os.environ.get(resolved.api_key_env) if resolved.api_key_env else None
    return LiteLLMProvider(model=resolved.model, provider_kind=resolved.provider_kind,
                           api_base=resolved.api_base, api_key=key,
                           api_key_env=resolved.api_key_env,
                           read_timeout=resolved.timeout or READ_TIMEOUT_S)


def _missing_key(resolved: ResolvedModel) -> str | None:
    """The env var a hosted model's key must be in, when it is not set (none: an `api_base`
    server, a configured `api_key_env`, or a provider picochat knows no key variable for)."""
    if resolved.offline or resolved.api_base:
        return None
    if resolved.api_key_env and os.environ.get(resolved.api_key_env):
        return None
    from picochat.providers.litellm_provider import KEY_ENV

    implicit = KEY_ENV.get(resolved.provider_kind)
    return implicit if implicit and not os.environ.get(implicit) else None

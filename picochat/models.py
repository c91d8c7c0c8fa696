"""Which model a session talks to, and how big its window is.

Precedence, highest first: the `--model` flag, `PICOCHAT_MODEL`, the session's own model (set by
an earlier `--model` or `/model`), `[agents.default].model`, `default_model`, auto-detection.
The window is the `[models]` entry's `token_limit`, else, for an Ollama model, what the server
gives it (`/api/show`, capped: providers.ollama.WINDOW_CAP), else litellm's bundled model map
(read as JSON, without importing litellm), else 128000; the agent's `token_limit` can only
tighten it, never widen it.

An Ollama model (`ollama/…`, configured or auto-detected) is sent as `ollama_chat/…`: litellm's
`ollama/` calls `/api/generate`, which puts tools in the prompt and forces JSON replies, while
`ollama_chat/` uses Ollama's chat API with native tool calls. Its requests go to the address
the window was read from and carry `num_ctx` = the window, since Ollama otherwise cuts a longer
prompt at its own default without a word.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from picochat import tokens
from picochat.budget import BudgetLimits, budget_limits, effective_window
from picochat.config import CompactionConfig, Config, ModelConfig
from picochat.errors import ConfigError
from picochat.messages import ModelTraits, model_key
from picochat.providers import keys, ollama
from picochat.providers.base import Provider
from picochat.providers.model_map import entry

DEFAULT_WINDOW = 128_000
OFFLINE = "offline"
OLLAMA = "ollama"


class WindowSource(StrEnum):
    """Where a model's window comes from (shown by /info and `info --json`)."""

    CONFIG = "config"      # the model's token_limit
    OLLAMA = "ollama"      # the Ollama server's /api/show
    LITELLM = "litellm"    # litellm's bundled model map
    DEFAULT = "default"    # none of those: DEFAULT_WINDOW
    LEARNED = "learned"    # a smaller window the server stated in an overflow error


@dataclass(frozen=True)
class ResolvedModel:
    name: str                 # what the user typed or configured: a [models] key or a model string
    model: str                # the litellm model string ("offline" for the built-in model)
    provider_kind: str        # "offline", "openai", "anthropic", "ollama", ...
    model_window: int
    window_source: WindowSource
    agent_limit: int | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    timeout: float | None = None   # seconds one whole call may take; None: the session default
    configured_model: str | None = None  # the model string as written, when sent as another
    learned_window: int | None = None  # a smaller window the server stated (ModelTraits)
    tools_refused: bool = False        # the server refuses requests that offer tools

    @property
    def key(self) -> str:
        """What the server taught is remembered under this (model_key)."""
        return model_key(self.model, self.api_base)

    def with_traits(self, traits: ModelTraits) -> "ResolvedModel":
        """This model with what its server taught in earlier runs applied."""
        return dataclasses.replace(self, learned_window=traits.window_for(self.model_window),
                                   tools_refused=traits.tools_refused)

    @property
    def window_said(self) -> str:
        """Where the window comes from, in words for /info."""
        if self.learned_window is not None:
            return "learned from the server's error"
        return self.window_source

    @property
    def offline(self) -> bool:
        return self.provider_kind == OFFLINE

    @property
    def window(self) -> int:
        """The effective window: the agent and the server may only tighten the model's."""
        return effective_window(self.usable_window, self.agent_limit)

    @property
    def usable_window(self) -> int:
        """The model's window, or the smaller one its server stated."""
        learned = self.learned_window
        return self.model_window if learned is None else min(self.model_window, learned)

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
        if self.offline and self.name != OFFLINE:
            return f"{self.name} (offline)"
        if self.configured_model and self.provider_kind == OLLAMA:
            return f"{self.name} (as {self.model}: Ollama's chat API)"
        return self.name

    @property
    def provider_options(self) -> dict[str, Any]:
        """Options sent with every request: an Ollama model is told its window (`num_ctx`)."""
        return {"num_ctx": self.window} if self.provider_kind == OLLAMA else {}


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


def model_name_without_probing(config: Config, session_model: str | None) -> str | None:
    """The model a session opens with, as far as the config and environment say it (no
    server is asked): for a list of sessions, where auto-detection per row would be slow."""
    return (os.environ.get("PICOCHAT_MODEL") or session_model or config.agent.model
            or config.default_model or None)


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
    if ollama.is_ollama(entry.model):
        return _resolve_ollama(config, name, entry)
    if entry.token_limit is not None:
        window, source = entry.token_limit, WindowSource.CONFIG
    else:
        mapped = lookup_window(entry.model) if entry.model != OFFLINE else None
        window, source = ((mapped, WindowSource.LITELLM) if mapped
                          else (DEFAULT_WINDOW, WindowSource.DEFAULT))
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


def _resolve_ollama(config: Config, name: str, entry: ModelConfig) -> ResolvedModel:
    """An Ollama model: sent as `ollama_chat/…` to the server `providers.ollama.base_url`
    finds; its window from `token_limit`, else from that server, else (the server cannot be
    reached) as for any model; never above WINDOW_CAP unless configured, since the window is
    sent as `num_ctx` and Ollama allocates memory for all of it."""
    base = ollama.base_url(entry.api_base)
    served = None if entry.token_limit is not None else \
        ollama.context_window(base, ollama.model_name(entry.model))
    if entry.token_limit is not None:
        window, source = entry.token_limit, WindowSource.CONFIG
    elif served is not None:
        window, source = served, WindowSource.OLLAMA
    else:
        mapped = lookup_window(entry.model)
        window, source = ((mapped, WindowSource.LITELLM) if mapped
                          else (DEFAULT_WINDOW, WindowSource.DEFAULT))
        window = min(window, ollama.WINDOW_CAP)
    model = ollama.chat_model(entry.model)
    return ResolvedModel(
        name=name,
        model=model,
        provider_kind=OLLAMA,
        model_window=window,
        window_source=source,
        agent_limit=config.agent.token_limit,
        api_base=base,
        api_key_env=entry.api_key_env,
        timeout=entry.timeout,
        configured_model=entry.model if model != entry.model else None,
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
                          f"{resolved.model}: {' or '.join(missing)} is not set",
                          f"export {missing[0]}=…, or set summary_model to \"offline\"")
    return resolved


def provider_kind(model: str) -> str:
    if model == OFFLINE:
        return OFFLINE
    if "/" in model:
        return model.split("/", 1)[0]
    info = entry(model) or {}
    return str(info.get("litellm_provider") or "openai")


def lookup_window(model: str) -> int | None:
    """The input window from litellm's bundled map, trying the name with and without prefix."""
    for key in (model, model.split("/", 1)[1] if "/" in model else None):
        info = entry(key) if key else None
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
    for key in (model, model.split("/", 1)[1] if "/" in model else None):
        info = entry(key) if key else None
        if info and info.get("supports_reasoning") is True:
            return True
    return bool(_REASONING_NAME.search(model))


def auto_detect() -> str:
    """The contract's default (DESIGN.md, contract "Config (TOML)"): a key picks its provider,
    then an Ollama server (OLLAMA_HOST, OLLAMA_API_BASE, else 127.0.0.1:11434) with a model,
    else offline."""
    if os.environ.get("OPENAI_API_KEY"):
        return "openai/gpt-4o-mini"
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic/claude-sonnet-4-5"
    first = _first_ollama_model()
    return f"ollama/{first}" if first else OFFLINE


def _first_ollama_model() -> str | None:
    names = ollama.list_models(ollama.base_url())
    return names[0] if names else None


def create_provider(resolved: ResolvedModel) -> Provider:
    """The provider for a model: the built-in one, the direct client for an OpenAI-compatible
    server (providers.openai_compat), else litellm, imported only when first used."""
    if resolved.offline:
        from picochat.providers.offline import OfflineProvider

        return OfflineProvider()
    from picochat.providers.openai_compat import OpenAICompatProvider, speaks_directly

    missing = _missing_key(resolved)
    if missing:
        raise ConfigError(f"no API key for {resolved.model}: {' or '.join(missing)} is not set",
                          f"export {missing[0]}=…, or use --model offline")
    key = os.environ.get(resolved.api_key_env) if resolved.api_key_env else None
    if resolved.api_base and speaks_directly(resolved.model, resolved.provider_kind,
                                             resolved.api_base):
        return OpenAICompatProvider(model=resolved.model, provider_kind=resolved.provider_kind,
                                    api_base=resolved.api_base, api_key=key,
                                    api_key_env=resolved.api_key_env,
                                    read_timeout=read_timeout(resolved),
                                    extra=resolved.provider_options)
    from picochat.providers.litellm_provider import LiteLLMProvider

    return LiteLLMProvider(model=resolved.model, provider_kind=resolved.provider_kind,
                           api_base=resolved.api_base, api_key=key,
                           api_key_env=resolved.api_key_env,
                           read_timeout=read_timeout(resolved),
                           extra=resolved.provider_options)


LOCAL_FIRST_BYTE_S = 600.0  # how long a server on this machine or the LAN may stay silent


def read_timeout(resolved: ResolvedModel) -> float:
    """How long a read may wait for the server: the model's `timeout` when set; else, for a
    server on this machine or a private network (a CPU server evaluating a long prompt sends
    nothing for minutes), LOCAL_FIRST_BYTE_S; else READ_TIMEOUT_S."""
    from picochat.providers.chat_completions import READ_TIMEOUT_S

    if resolved.timeout:
        return resolved.timeout
    return LOCAL_FIRST_BYTE_S if is_local(resolved) else READ_TIMEOUT_S


def is_local(resolved: ResolvedModel) -> bool:
    """The model's server is on this machine or a private network: its api_base's host is
    loopback, private or link-local (or `localhost`), or it is an Ollama model without one."""
    import ipaddress
    from urllib.parse import urlsplit

    if not resolved.api_base:
        return resolved.provider_kind == OLLAMA
    host = (urlsplit(resolved.api_base).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local


def _missing_key(resolved: ResolvedModel) -> tuple[str, ...]:
    """The env vars one of which must hold a hosted model's key, when none is set; empty for
    an `api_base` server (a key is optional there: the provider sends the environment's, else
    a placeholder), a configured `api_key_env` (checked by resolve_model), an Ollama model, or
    a provider litellm checks no key for. litellm's own check decides, imported only when no
    key variable named after the provider is set (see providers.keys)."""
    if resolved.offline or resolved.api_base or resolved.provider_kind == OLLAMA:
        return ()
    if resolved.api_key_env:
        return () if os.environ.get(resolved.api_key_env) else (resolved.api_key_env,)
    return keys.missing(resolved.model, resolved.provider_kind)


def limits_for(model: ResolvedModel, compaction: CompactionConfig) -> BudgetLimits:
    """The session's limits, the one place the window becomes budget figures: a window learnt
    from an overflow error only tightens (it never grows a window), and the configured window
    stays beside it for /info."""
    limits = budget_limits(model.usable_window, model.agent_limit, compaction.reserve_tokens,
                           compaction.keep_recent_tokens, model.token_factor)
    return dataclasses.replace(limits, configured_window=model.model_window)

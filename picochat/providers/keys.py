"""Which environment variable supplies a model's API key, by litellm's own check.

`litellm.validate_environment` knows each provider's variables (GEMINI_API_KEY or
GOOGLE_API_KEY, TOGETHERAI_API_KEY, ANTHROPIC_AUTH_TOKEN, ...); asking it means importing
litellm, about 2 s. So the usual case is answered without it: a set variable named after the
provider (OPENAI_API_KEY for `openai/…`, ANTHROPIC_AUTH_TOKEN for `anthropic/…`). litellm is
asked only when there is none: where a provider is created for a call without `api_base` (a
missing key must be one line before anything is written; that is the error path), and at a
provider's first request, where litellm is imported anyway, to choose between the
environment's key and a placeholder for an `api_base` server.

A variable set to the empty string holds no key. Only names are handled here; values stay in
the environment, where litellm reads them (and the redaction filter masks them).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

# The OpenAI SDK refuses a request without any key; servers that take none ignore this one.
PLACEHOLDER = "not-needed"
# Key variables, not a provider's api_base / api_version / project / location variables.
_KEY_NAME = re.compile(r"(?:KEY|TOKEN)$")


@dataclass(frozen=True)
class KeySource:
    """Where a model's key comes from. `env`: the variable that supplies it (present) or should
    (missing), None when none is known; `missing`: litellm's names for it when none is set."""

    env: str | None
    present: bool
    missing: tuple[str, ...] = ()


def own_variable(provider_kind: str) -> str:
    """The conventional variable of a provider: OPENAI_API_KEY for "openai"."""
    return re.sub(r"[^A-Z0-9]", "_", provider_kind.upper()) + "_API_KEY"


def named_after(provider_kind: str) -> str | None:
    """A set key variable named after the provider: its own `<PROVIDER>_API_KEY`, else the
    first other `<PROVIDER>…KEY/TOKEN` (ANTHROPIC_AUTH_TOKEN, TOGETHERAI_API_KEY)."""
    own = own_variable(provider_kind)
    if os.environ.get(own):
        return own
    stem = re.sub(r"[^A-Z0-9]", "", provider_kind.upper())
    for name in sorted(os.environ):
        if (stem and _KEY_NAME.search(name) and os.environ.get(name)
                and re.sub(r"[^A-Z0-9]", "", name.upper()).startswith(stem)):
            return name
    return None


def quick(provider_kind: str) -> KeySource | None:
    """The answer without litellm when it is sure: a key variable named after the provider."""
    name = named_after(provider_kind)
    return KeySource(name, True) if name else None


def source(model: str, provider_kind: str, api_base: str | None, litellm: Any) -> KeySource:
    """Where the key of `model` comes from, asking litellm unless `quick` is sure.

    present: a key is in the environment and litellm reads it itself. Not present, with
    `missing`: litellm names the variable(s) it wants. Not present, nothing missing: litellm
    checks no key for this provider (a local server such as hosted_vllm or lm_studio), or
    could not tell."""
    fast = quick(provider_kind)
    if fast is not None:
        return fast
    try:
        verdict = litellm.validate_environment(model=model, api_base=api_base)
    except Exception:  # an unknown provider: litellm cannot tell, and neither can we
        return KeySource(None, False)
    named = tuple(n for n in verdict.get("missing_keys") or () if _KEY_NAME.search(n))
    unset = tuple(n for n in named if not os.environ.get(n))
    if unset:
        return KeySource(unset[0], False, unset)
    if named:  # the key is set; litellm misses something else (AZURE_API_VERSION)
        return KeySource(named[0], True)
    own = own_variable(provider_kind)
    if own in os.environ and not os.environ[own]:  # litellm counts an empty variable as set
        return KeySource(own, False, (own,))
    # litellm is satisfied: a variable named otherwise (GOOGLE_API_KEY for gemini), or a
    # provider that needs none (hosted_vllm, lm_studio fill in their own placeholder).
    return KeySource(None, bool(verdict.get("keys_in_environment")))


def missing(model: str, provider_kind: str) -> tuple[str, ...]:
    """The variables one of which must hold the key of a hosted model (no `api_base`), empty
    when a key is there or none is needed. Imports litellm only when `quick` is not sure."""
    if quick(provider_kind) is not None:
        return ()
    from picochat.providers.litellm_env import import_litellm

    return source(model, provider_kind, None, import_litellm()).missing

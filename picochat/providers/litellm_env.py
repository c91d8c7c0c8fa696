"""Importing litellm safely: offline, quiet, and logging only to picochat's log file.

The environment must be set before the import (field notes): otherwise litellm fetches its cost
map from the network, may download tokenizers, and prints to stdout.
"""

from __future__ import annotations

import logging
import os
import threading
from types import ModuleType

from picochat import bpe
from picochat.providers import http_bounds
from picochat.providers.redact import RedactingFilter

_OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_OFFLINE_MODE": "true",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "true",
    "HF_HUB_OFFLINE": "1",
    "LITELLM_LOG": "ERROR",
}
_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx", "openai")
_lock = threading.Lock()
_module: ModuleType | None = None


def import_litellm() -> ModuleType:
    """Import litellm once, configured for picochat; thread-safe so a UI can warm it up."""
    global _module
    with _lock:
        if _module is not None:
            return _module
        for key, value in _OFFLINE_ENV.items():
            os.environ.setdefault(key, value)
        bpe.configure_tiktoken_cache()
        ours = logging.getLogger("picochat")  # has a handler: NullHandler or the log file
        for name in _LOGGERS:
            lg = logging.getLogger(name)
            lg.handlers[:] = list(ours.handlers)
            lg.propagate = False
            lg.setLevel(logging.WARNING)
            if not any(isinstance(f, RedactingFilter) for f in lg.filters):
                lg.addFilter(RedactingFilter())  # servers echo keys; litellm logs their words
        import litellm

        litellm.suppress_debug_info = True
        litellm.disable_hf_tokenizer_download = True
        litellm.drop_params = True
        litellm.telemetry = False
        for name in _LOGGERS:  # litellm adds its own stderr handler at import: replace it
            lg = logging.getLogger(name)
            lg.handlers[:] = list(ours.handlers)
            lg.propagate = False
        http_bounds.install()  # no stream event or error body without a bound
        _module = litellm
        return litellm

"""Keys never reach the user or the log through a server's words.

Servers quote what they were sent ("Incorrect API key provided: abc123"). Every key picochat
configured, and every provider key in the environment litellm would read, is replaced by
`[key]` in provider error text before it becomes a user line, and in whatever litellm, httpx or
the OpenAI SDK log.

A key of any length is redacted. A key of 8 characters or more is replaced wherever it occurs;
a shorter one only where it stands as a whole token (not inside a longer run of letters, digits,
`_` or `-`): a 3-character key is still caught in "provided: abc." but a 1-character key does
not blank out every occurrence of that letter in the message.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from typing import Iterable
from urllib.parse import quote

MASK = "[key]"
ANYWHERE_MIN = 8  # shorter keys are matched as whole tokens only
# Environment variables litellm reads provider keys from (OPENAI_API_KEY, AZURE_API_KEY, ...).
_KEY_ENV_NAME = re.compile(r"_(?:API_KEY|API_TOKEN|AUTH_TOKEN|SECRET_ACCESS_KEY)$|^HF_TOKEN$")
_KEY_LIKE = re.compile(r"\b(?:sk|pk|rk|key)-[A-Za-z0-9_\-]{12,}")  # OpenAI/Anthropic style
_TOKEN_CHAR = r"[A-Za-z0-9_\-]"

_lock = threading.Lock()
_configured: set[str] = set()


def register(key: str | None) -> None:
    """Remember a key this process was configured with (a model's key from its api_key_env)."""
    if key:
        with _lock:
            _configured.add(key)


def known_keys(extra: Iterable[str | None] = ()) -> set[str]:
    """Configured keys, provider keys in the environment, and `extra`."""
    with _lock:
        keys = set(_configured)
    keys.update(v for name, v in os.environ.items() if _KEY_ENV_NAME.search(name))
    keys.update(extra)
    return {k for k in keys if k and k.strip()}


def redact(text: str, extra: Iterable[str | None] = ()) -> str:
    """`text` with every known key (and anything shaped like an OpenAI key) masked."""
    for key in sorted(known_keys(extra), key=len, reverse=True):
        for form in _forms(key):
            if len(form) >= ANYWHERE_MIN:
                text = text.replace(form, MASK)
            elif form in text:
                text = re.sub(rf"(?<!{_TOKEN_CHAR}){re.escape(form)}(?!{_TOKEN_CHAR})", MASK,
                              text)
    return _KEY_LIKE.sub(MASK, text)


def _forms(key: str) -> set[str]:
    """The key as a server may quote it: verbatim, JSON-escaped, or URL-encoded."""
    return {key, json.dumps(key)[1:-1], quote(key, safe="")}


class RedactingFilter(logging.Filter):
    """Masks keys in a record's message and traceback before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            record.msg = redact(record.getMessage())
            record.args = None
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text:
                record.exc_text = redact(record.exc_text)
        except Exception:  # a log line is never worth a crash
            record.msg, record.args, record.exc_info, record.exc_text = (
                "log record dropped: could not redact it", None, None, None)
        return True

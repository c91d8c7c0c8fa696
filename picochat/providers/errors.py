"""Typed provider failures, each with one line that tells the user what to do."""

from __future__ import annotations

import re

from picochat.errors import PicochatError


class ProviderError(PicochatError):
    kind = "provider_error"


class ContextOverflow(ProviderError):
    """The request did not fit; `window` is the real window when the provider said it.

    `tool_progress` is set when a tool already ran in the turn: then only the request-local
    retry inside the tool loop may recover, never a checkpoint and a turn restart (§11.3, §11.4).
    `misfit` is set when the request was far under the stated window: the window is wrong, and
    the hint (set token_limit, or raise the server's context) is the remedy, not a shorter turn.
    """

    kind = "context_overflow"

    def __init__(self, message: str, window: int | None = None, hint: str | None = None,
                 tool_progress: bool = False, misfit: bool = False) -> None:
        super().__init__(message, hint)
        self.window = window
        self.tool_progress = tool_progress
        self.misfit = misfit


class ProviderAuthError(ProviderError):
    kind = "auth"


class RateLimited(ProviderError):
    kind = "rate_limit"

    def __init__(self, message: str, retry_after: float | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.retry_after = retry_after


class ModelNotFound(ProviderError):
    kind = "model_not_found"


class ProviderUnavailable(ProviderError):
    """Connection refused, DNS failure, 5xx: the provider could not answer."""

    kind = "unavailable"


class StreamBroken(ProviderUnavailable):
    """The connection closed after the server had accepted the request: mid-answer, or
    before the first piece of text; never "cannot connect"."""

    kind = "stream_broken"


class MalformedStream(ProviderError):
    """The server's event stream could not be read (a `data:` line that is not JSON)."""

    kind = "malformed_stream"


class ProviderTimeout(ProviderError):
    kind = "timeout"


class BadProviderRequest(ProviderError):
    kind = "bad_request"


_WINDOW_PATTERNS = (
    re.compile(r"maximum context length is (\d[\d,]*) tokens", re.I),
    re.compile(r"prompt is too long: \d[\d,]* tokens > (\d[\d,]*) maximum", re.I),
    re.compile(r"context (?:window|length)(?: of| is)? (\d[\d,]*) tokens", re.I),
    re.compile(r"available context size \((\d[\d,]*) tokens\)", re.I),  # llama.cpp server
    re.compile(r"exceeds? (?:the )?(?:maximum|max)[^0-9]{0,40}(\d[\d,]*) tokens", re.I),
)


def parse_context_window(message: str) -> int | None:
    """The window an overflow message states, OpenAI- or Anthropic-style (design §11.3 step 1)."""
    for pattern in _WINDOW_PATTERNS:
        m = pattern.search(message)
        if m:
            return int(m.group(1).replace(",", ""))
    return None

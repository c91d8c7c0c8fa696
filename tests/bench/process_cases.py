"""The app as a user starts it, seen from outside: `picochat --version` as a whole process, and
what every terminal case shares: a private tmux server that runs one command in a 120×40
window and is polled as a user's eyes would see it, the floor (a bare Textual app: a header, a
scroll view and an input) that those cases run beside picochat, run by run, and RSS read from
/proc once memory has stopped moving.

Children import picochat from the tree this bench lives in (PYTHONPATH), whatever is installed."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from statistics import median
from typing import Any, Callable

from tests.bench.timing import Figure, times_ms

ROOT = Path(__file__).resolve().parents[2]  # the tree under test
SIZE = (120, 40)
PROVIDER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "PICOCHAT_MODEL", "OPENAI_BASE_URL",
                 "OPENAI_API_BASE", "OLLAMA_HOST", "OLLAMA_API_BASE")
CLOSED_PORT = "http://127.0.0.1:9/v1"  # nothing listens: for cases that never send
MODEL_TOML = """default_model = "fake"

[models.fake]
model = "openai/fake-model"
api_base = "{api_base}"
api_key_env = "BENCH_FAKE_KEY"
token_limit = 8192
"""
FAKE_KEY = "sk-bench"
FLOOR_PLACEHOLDER = "bench-bare-input"
BARE_APP = '''from textual.app import App
from textual.containers import VerticalScroll
from textual.widgets import Header, Input


class Bare(App):
    AUTO_FOCUS = "Input"  # as a chat app's prompt is: the scroll view would take it first

    def compose(self):
        yield Header()
        yield VerticalScroll()
        yield Input(placeholder="bench-bare-input")


Bare().run()
'''
FLAGS = """import json, sys
from picochat.cli import main
try:
    main.main(["--version"])
except SystemExit:
    pass
print(json.dumps({"litellm_imported": "litellm" in sys.modules,
                  "textual_imported": "textual" in sys.modules}))
"""
_sockets = itertools.count()


def picochat_command() -> list[str]:
    """The installed console script when there is one (what users run), else `-m picochat`;
    either imports picochat from ROOT, which `child_env` puts first on PYTHONPATH."""
    script = Path(sys.executable).with_name("picochat")
    return [str(script)] if script.exists() else [sys.executable, "-m", "picochat"]


def bytecode_env(folder: Path) -> dict[str, str]:
    """This sandbox sets PYTHONDONTWRITEBYTECODE and the source tree holds no .pyc, so each
    start would compile picochat anew, which an installed picochat never does: the first,
    untimed run writes the bytecode under `folder` (never into the repo) and the rest read it."""
    return {"PYTHONPYCACHEPREFIX": str(folder / "pycache")}


def child_env(folder: Path) -> dict[str, str]:
    """What a child needs on top of the bench's own environment: bytecode under `folder` and
    this tree's picochat first on the path."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**bytecode_env(folder), "PYTHONPATH": path}


def python_env(folder: Path) -> dict[str, str]:
    """A whole environment for subprocess.run: the bench's, less what would change what is
    measured (no bytecode writing, a real provider's key or base URL)."""
    drop = {"PYTHONDONTWRITEBYTECODE", *PROVIDER_KEYS}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, **child_env(folder)}


def model_env(folder: Path, api_base: str = CLOSED_PORT) -> dict[str, str]:
    """Data and config folders under `folder`, the config naming an openai/ model at
    `api_base` (the fake server; by default a closed port)."""
    config = folder / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(MODEL_TOML.format(api_base=api_base), encoding="utf-8")
    return {"PICOCHAT_DATA_DIR": str(folder / "data"), "PICOCHAT_CONFIG_DIR": str(config),
            "BENCH_FAKE_KEY": FAKE_KEY, **child_env(folder)}


def rss_mib(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        raise RuntimeError(f"the app (pid {pid}) exited while its memory was read") from None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def settled_rss(pid: int, since: float, what: str, min_wait: float = 3.0, window: float = 1.5,
                tolerance: float = 1.0, timeout: float = 45.0) -> tuple[float, float]:
    """RSS in MiB once memory is flat: at least `min_wait` s after `since` (a perf_counter
    time, e.g. the first frame), and moved by at most `tolerance` MiB over the last `window` s
    (sampled every 0.1 s). Also returns when that was, in seconds after `since`. Raises,
    naming `what`, if memory is still moving after `timeout` s."""
    seen: deque[tuple[float, float]] = deque()
    first = time.perf_counter()
    while True:
        now, rss = time.perf_counter(), rss_mib(pid)
        seen.append((now, rss))
        while len(seen) > 1 and seen[1][0] <= now - window:
            seen.popleft()  # seen[0] stays the last sample at or before the window's start
        values = [v for _, v in seen]
        if (now - since >= min_wait and seen[0][0] <= now - window
                and max(values) - min(values) <= tolerance):
            return rss, now - since
        if now - first > timeout:
            raise RuntimeError(f"{what}: memory never settled within {timeout:.0f} s "
                               f"(still moving: {min(values):.1f}–{max(values):.1f} MiB over "
                               f"the last {window} s)")
        time.sleep(0.1)


class Terminal:
    """A tmux server of our own (its own -L socket, no config file) running one command in a
    120×40 window: the app in a real terminal, polled as a user's eyes would see it."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        if shutil.which("tmux") is None:
            raise RuntimeError("tmux not found")
        self.socket = f"picochat-bench-{os.getpid()}-{next(_sockets)}"
        unset = ["-u" + k for k in ("COLUMNS", "LINES", "PYTHONDONTWRITEBYTECODE",
                                    *PROVIDER_KEYS)]
        assigns = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
        self.shell = " ".join(["exec env", *unset, *assigns, *map(shlex.quote, command)])
        self.started = 0.0
        self._pid: int | None = None

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-f", "/dev/null", "-L", self.socket, *args],
                              capture_output=True, text=True, check=True).stdout

    def start(self) -> None:
        """Start the app; its pane stays when it exits, so a crash leaves its last screen."""
        self.started = time.perf_counter()
        self.tmux("new-session", "-d", "-s", "b", "-x", str(SIZE[0]), "-y", str(SIZE[1]),
                  self.shell, ";", "set-option", "-w", "-t", "b", "remain-on-exit", "on")

    def exited(self) -> bool:
        return self.tmux("display", "-p", "-t", "b", "#{pane_dead}").strip() == "1"

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "b")

    def type(self, text: str) -> None:
        """Type `text` literally, as keys."""
        self.tmux("send-keys", "-t", "b", "-l", text)

    def press(self, key: str) -> None:
        self.tmux("send-keys", "-t", "b", key)

    def wait_for(self, ready: Callable[[str], bool], what: str = "the expected screen",
                 timeout: float = 30.0, since: float | None = None) -> float:
        """Seconds from `since` (default: just before `new-session`) to the first screen where
        `ready` holds; raises naming `what` if it never does within `timeout` s."""
        start = self.started if since is None else since
        deadline = time.perf_counter() + timeout
        check = time.perf_counter() + 0.5
        while True:
            text = self.screen()
            if ready(text):
                return time.perf_counter() - start
            if time.perf_counter() > check:  # now and then, not at every poll
                check += 0.5
                if self.exited():  # its last lines may have scrolled into the history
                    last = self.tmux("capture-pane", "-p", "-t", "b", "-S", "-60")
                    last = re.sub(r"\n{3,}", "\n\n", last.strip("\n"))
                    raise RuntimeError(f"the app exited before {what} appeared; its last "
                                       f"lines:\n{last}")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{what} never appeared on the screen within {timeout:.0f} s;"
                                   f" it shows:\n{text}")
            time.sleep(0.002)  # leave the CPU to the app between polls (2 cores here)

    def echo(self, what: str, timeout: float = 10.0) -> float:
        """Type one character (one the screen shows least, best not at all) and return the
        seconds from `send-keys` until the screen shows it once more."""
        before = self.screen()
        char = min("xjkvqXJKVQ#%=+~", key=before.count)  # the rarest: best unused
        start = time.perf_counter()
        self.type(char)
        count = before.count(char)
        return self.wait_for(lambda text: text.count(char) > count,
                             f"{what}: the typed {char!r}", timeout, since=start)

    def pid(self) -> int:
        """The app's pid: the shell execs env, which execs the program (checked)."""
        if self._pid is None:
            pid = int(self.tmux("display", "-p", "-t", "b", "#{pane_pid}").strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"python" not in cmdline and b"picochat" not in cmdline:
                raise RuntimeError(f"pane pid {pid} is not the app: {cmdline!r}")
            self._pid = pid
        return self._pid

    def close(self) -> None:
        """Kill the server, wait until the app has exited (so it takes no CPU from the next
        launch; killed after 10 s) and remove the socket file (tmux leaves it behind)."""
        try:
            pid: int | None = self.pid() if self.started else None
        except (subprocess.CalledProcessError, OSError, ValueError, RuntimeError):
            pid = self._pid
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)
        deadline = time.perf_counter() + 10
        while pid is not None and Path(f"/proc/{pid}").exists():
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0:1]
            if state == ["Z"]:
                break  # exited; its parent reaps it
            if time.perf_counter() > deadline:
                os.kill(pid, signal.SIGKILL)
                deadline += 10
            time.sleep(0.02)
        folder = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}"
        (folder / self.socket).unlink(missing_ok=True)

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def chat_ready(text: str) -> bool:
    """The chat screen is up: status bar, prompt box (rounded border) and footer. The
    context figures may still be counting."""
    lines = text.splitlines()
    return (bool(lines) and "picochat ·" in lines[0] and "F1 Help" in text
            and any(line.lstrip().startswith("╰") for line in lines[-6:]))


def floor_ready(text: str) -> bool:
    return FLOOR_PLACEHOLDER in text


def floor_app(folder: Path) -> list[str]:
    """The command that runs the floor: a bare Textual app, written under `folder`."""
    script = folder / "bare_app.py"
    script.write_text(BARE_APP, encoding="utf-8")
    return [sys.executable, str(script)]


def bare_app(folder: Path) -> Callable[[], float]:
    """One launch of the floor to its first frame, in seconds."""
    command = floor_app(folder)

    def run() -> float:
        with Terminal(command, child_env(folder)) as term:
            term.start()
            return term.wait_for(floor_ready, "the bare app's input")
    return run


def version(ctx: Any) -> list[Figure]:
    """The lazy-import promise, seen from outside: the version path loads no UI, no litellm."""
    repeat = max(5, ctx.repeat)
    command = picochat_command() + ["--version"]
    env = python_env(ctx.folder)

    def run(argv: list[str]) -> str:
        return subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout

    out = run(command)
    samples = times_ms(lambda: run(command), repeat)
    baseline = times_ms(lambda: run([sys.executable, "-c", "pass"]), repeat)
    flags = json.loads(run([sys.executable, "-c", FLAGS]).splitlines()[-1])
    seconds = tuple(s / 1000 for s in samples)
    met = median(seconds) <= 0.10 and not any(flags.values())
    return [Figure("picochat --version (whole process)", out.strip(), seconds, "s", "≤ 0.10 s",
                   met, "python -c pass", tuple(b / 1000 for b in baseline), extra=flags)]


CASES = {
    "version": version,
}

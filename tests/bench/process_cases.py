"""The app as a user starts it: `picochat --version` as a whole process, and the chat screen's
first frame in a real terminal (tmux), with a litellm model configured, so the measured path is
the one where litellm must not be waited for. Nothing is ever sent: the model's base URL is a
closed local port and litellm runs offline."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from statistics import median
from typing import Any, Callable

from tests.bench.timing import Figure, times_ms

SIZE = (120, 40)
FAKE_MODEL_TOML = """default_model = "fake"

[models.fake]
model = "openai/fake-model"
api_base = "http://127.0.0.1:9/v1"
api_key_env = "BENCH_FAKE_KEY"
token_limit = 8192
"""
BARE_APP = '''from textual.app import App
from textual.containers import VerticalScroll
from textual.widgets import Header, Input


class Bare(App):
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
    """The installed console script when there is one (what users run), else `-m picochat`."""
    script = Path(sys.executable).with_name("picochat")
    return [str(script)] if script.exists() else [sys.executable, "-m", "picochat"]


def bytecode_env(folder: Path) -> dict[str, str]:
    """This sandbox sets PYTHONDONTWRITEBYTECODE and the source tree holds no .pyc, so each
    start would compile picochat anew, which an installed picochat never does: the first,
    untimed run writes the bytecode under `folder` (never into the repo) and the rest read it."""
    return {"PYTHONPYCACHEPREFIX": str(folder / "pycache")}


def python_env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **bytecode_env(folder)}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Terminal:
    """A tmux server of our own (its own -L socket, no config file) running one command in a
    120×40 window: the app in a real terminal, polled as a user's eyes would see it."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        if shutil.which("tmux") is None:
            raise RuntimeError("tmux not found")
        self.socket = f"picochat-bench-{os.getpid()}-{next(_sockets)}"
        assigns = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
        self.shell = " ".join(["exec env -u COLUMNS -u LINES -u PYTHONDONTWRITEBYTECODE", *assigns,
                               *map(shlex.quote, command)])
        self.started = 0.0

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-f", "/dev/null", "-L", self.socket, *args],
                              capture_output=True, text=True, check=True).stdout

    def start(self) -> None:
        self.started = time.perf_counter()
        self.tmux("new-session", "-d", "-s", "b", "-x", str(SIZE[0]), "-y", str(SIZE[1]),
                  self.shell)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "b")

    def wait_for(self, ready: Callable[[str], bool], timeout: float = 30.0) -> float:
        """Seconds from just before `new-session` to the first screen where `ready` holds."""
        deadline = time.perf_counter() + timeout
        while True:
            text = self.screen()
            if ready(text):
                return time.perf_counter() - self.started
            if time.perf_counter() > deadline:
                raise RuntimeError(f"the screen never got ready; it shows:\n{text}")
            time.sleep(0.002)  # leave the CPU to the app between polls (2 cores here)

    def pid(self) -> int:
        """The app's pid: the shell execs env, which execs the program (checked)."""
        pid = int(self.tmux("display", "-p", "-t", "b", "#{pane_pid}").strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"python" not in cmdline and b"picochat" not in cmdline:
            raise RuntimeError(f"pane pid {pid} is not the app: {cmdline!r}")
        return pid

    def close(self) -> None:
        """Kill the server and remove its socket file (tmux leaves it behind on kill)."""
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)
        folder = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}"
        (folder / self.socket).unlink(missing_ok=True)

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def fake_model_env(folder: Path) -> dict[str, str]:
    """Data and config folders for a run, with the config naming a litellm model."""
    config = folder / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(FAKE_MODEL_TOML, encoding="utf-8")
    return {"PICOCHAT_DATA_DIR": str(folder / "data"), "PICOCHAT_CONFIG_DIR": str(config),
            "BENCH_FAKE_KEY": "sk-bench", **bytecode_env(folder)}


def chat_ready(text: str) -> bool:
    """The chat screen is up: status bar, prompt box (rounded border) and footer. The
    context figures may still be counting (tiktoken loads after the first frame)."""
    lines = text.splitlines()
    return (bool(lines) and "picochat ·" in lines[0] and "F1 Help" in text
            and any(line.lstrip().startswith("╰") for line in lines[-6:]))


def litellm_ready_at(log: Path) -> float | None:
    """Wall-clock time of the log's `litellm_warm_up` line: litellm imported and its first
    (mock) call made, ok or failed; the log's asctime has 1 ms resolution."""
    if not log.exists():
        return None
    for line in log.read_text(encoding="utf-8").splitlines():
        if "litellm_warm_up" in line:
            return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


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


ISSUE_BARE_S = 0.18  # the bare app's first frame on the machine where the targets were set


def bare_app(folder: Path) -> Callable[[], float]:
    """One launch of a bare Textual app (a header, a scroll view and an input) to its first
    frame: this machine's speed, taken right beside each timed run so drift cancels out."""
    script = folder / "bare_app.py"
    script.write_text(BARE_APP, encoding="utf-8")

    def run() -> float:
        with Terminal([sys.executable, str(script)], bytecode_env(folder)) as term:
            term.start()
            return term.wait_for(lambda text: "bench-bare-input" in text)
    return run


def at_this_speed(target_s: float, seconds: tuple[float, ...],
                  bare: tuple[float, ...]) -> tuple[str, dict[str, Any]]:
    """The target scaled by how much slower the bare app starts here than where the target
    was set, as a note and JSON fields: absolute seconds on a noisy 2-core machine say little."""
    scale = median(bare) / ISSUE_BARE_S
    scaled = target_s * scale
    met = median(seconds) <= scaled
    note = (f"bare Textual app {median(bare):.2f} s here, {ISSUE_BARE_S} s where the target was "
            f"set: at this machine's speed the target is ≤ {scaled:.2f} s, "
            f"{'met' if met else 'missed'} ({median(seconds) / median(bare):.2f}× the bare app)")
    return note, {"machine_scale": round(scale, 2), "target_at_this_speed_s": round(scaled, 3),
                  "met_at_this_speed": met}


def tui_start(ctx: Any) -> list[Figure]:
    """Launch to a usable screen, as the terminal shows it; litellm must load behind it."""
    repeat = max(5, ctx.repeat)
    env = fake_model_env(ctx.folder)
    log = Path(env["PICOCHAT_DATA_DIR"]) / "picochat.log"
    bare_run = bare_app(ctx.folder)
    frames, rss, ready_after, bare = [], [], [], []
    for i in range(repeat + 1):  # the first run creates the database: untimed
        log.unlink(missing_ok=True)
        with Terminal(picochat_command(), env) as term:
            wall = time.time()
            term.start()
            frame = term.wait_for(chat_ready)
            rss_first = rss_mb(term.pid())
            deadline = time.perf_counter() + 30
            while (ready := litellm_ready_at(log)) is None and time.perf_counter() < deadline:
                time.sleep(0.05)
        bare_s = bare_run()
        if i == 0:
            continue
        frames.append(frame)
        bare.append(bare_s)
        rss.append(rss_first)
        ready_after.append(ready - wall if ready is not None else float("inf"))
    early = any(r <= f for r, f in zip(ready_after, frames))
    note, scaled = at_this_speed(0.35, tuple(frames), tuple(bare))
    extra = {"rss_at_first_frame_mb": round(median(rss), 1),
             "litellm_ready_s": round(median(ready_after), 2),
             "litellm_warm_up_done_at_first_frame": early, **scaled}
    return [Figure("TUI start to first frame, prompt ready (tmux)", "litellm model, "
                   "empty session", tuple(frames), "s", "≤ 0.35 s", median(frames) <= 0.35,
                   "bare Textual app", tuple(bare),
                   note=f"{note}; litellm warm-up done {extra['litellm_ready_s']} s after launch",
                   extra=extra)]


CASES = {
    "version": version,
    "tui-start": tui_start,
}

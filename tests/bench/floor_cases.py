"""picochat beside its floor, run by run (issue 33, item 4). picochat's model is an openai/ one
whose api_base is a fake OpenAI-compatible server in this process that answers at once
(tests/helpers/fakes/openai.py); the terminal is a private tmux server at 120×40, polled.

- tui-start: launch → first frame, key echo right after it, and idle RSS before any send (with
  the fake-server model, and with the built-in offline model), against a bare Textual app (a
  header, a scroll view and an input).
- tui-send: the first send one second after the first frame, Enter → the answer on screen; RSS
  once it is and memory is flat; a second send in the same app; against the standard library
  making the same request in a fresh interpreter, plus the bare app's key echo.
- ask: `picochat ask hi` as a whole process, against a python process that makes the same
  request with the standard library.

Each case makes one warm-up run of both, untimed (bytecode, the database), then N runs each,
alternating picochat and the floor; ratios are taken run by run. Every launch of the app
starts from a fresh copy of one prepared data folder (a database with one empty session), so
no launch meets another's drafts or messages. Nothing here imports picochat: it is measured as
a user runs it, whatever its code does."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from statistics import median
from typing import Any, Callable

from tests.bench.process_cases import (FAKE_KEY, Terminal, chat_ready, child_env, floor_app,
                                       floor_ready, model_env, picochat_command, python_env,
                                       rss_mib, settled_rss)
from tests.bench.timing import Figure, per_run
from tests.helpers.fakes.openai import FakeOpenAI

KEYS = 5                 # keys typed once idle, each after the one before has echoed
FRAME_TIMEOUT = 60.0     # launch → first frame, on a loaded 2-core machine
ANSWER_TIMEOUT = 90.0    # Enter → answer, litellm's import included
FLOOR = "bare Textual app"
FLOOR_SEND = "stdlib POST in a fresh python + bare app's key echo"
FLOOR_ASK = "stdlib POST in a fresh python (whole process)"
FLOOR_POST = r'''import sys, time
start = time.perf_counter()
import json, urllib.request
url, path, key = sys.argv[1:4]
with open(path, "rb") as f:
    body = f.read()
request = urllib.request.Request(url + "/chat/completions", data=body, headers={
    "Content-Type": "application/json", "Authorization": "Bearer " + key})
text = []
with urllib.request.urlopen(request, timeout=30) as response:
    for line in response:
        if line.startswith(b"data: {"):
            for choice in json.loads(line[6:])["choices"]:
                text.append(choice["delta"].get("content") or "")
print("".join(text))
print(time.perf_counter() - start)
'''


def rounds(ctx: Any) -> tuple[int, int]:
    """(untimed warm-up runs, timed runs): quick makes two timed runs and no warm-up run (the
    preparing launch has written the bytecode); a full run one warm-up and `repeat`."""
    return (0, max(1, min(ctx.repeat, 2))) if ctx.quick else (1, max(1, ctx.repeat))


class Picochat:
    """Launches of the app in tmux, each on a fresh copy of one prepared data folder."""

    def __init__(self, folder: Path, api_base: str) -> None:
        self.folder = folder
        self.env = model_env(folder, api_base)
        self.template = folder / "template"
        self.serial = itertools.count()

    def prepare(self, floor_cmd: list[str], fake: FakeOpenAI | None = None) -> None:
        """Untimed: one launch to the first frame and until memory is flat (whatever loads
        behind the frame has loaded and written its bytecode); its data folder (a database
        with one empty session) becomes every launch's starting point. With `fake`, one more
        launch on a copy that sends once, so what a send loads has its bytecode too. Then the
        floor once, for its bytecode."""
        with Terminal(picochat_command(), self.env) as term:
            term.start()
            frame = term.wait_for(chat_ready, "picochat's chat screen (preparing)",
                                  FRAME_TIMEOUT)
            settled_rss(term.pid(), term.started + frame, "picochat (preparing), idle")
        shutil.copytree(self.env["PICOCHAT_DATA_DIR"], self.template,
                        ignore=shutil.ignore_patterns("*.log"))
        if fake is not None:
            with self.terminal() as term:
                term.start()
                term.wait_for(chat_ready, "picochat's chat screen (preparing)", FRAME_TIMEOUT)
                send(term, fake, "warm up", "quokkawarm")
        with Terminal(floor_cmd, child_env(self.folder)) as term:
            term.start()
            term.wait_for(floor_ready, "the bare app", FRAME_TIMEOUT)

    def terminal(self, *args: str) -> Terminal:
        data = self.folder / f"data-{next(self.serial)}"
        shutil.copytree(self.template, data)
        return Terminal(picochat_command() + list(args),
                        {**self.env, "PICOCHAT_DATA_DIR": str(data)})


def arrival(fake: FakeOpenAI, count: int) -> Callable[[], float | None]:
    """When the fake's `count`-th turn request arrives (perf_counter), read after the fact;
    None if it has not."""
    got: list[float] = []

    def wait() -> None:
        if fake.wait_for(count, "turn", timeout=ANSWER_TIMEOUT):
            got.append(time.perf_counter())

    thread = threading.Thread(target=wait, daemon=True, name="bench-arrival")
    thread.start()
    return lambda: got[0] if got else None


def send(term: Terminal, fake: FakeOpenAI, message: str, answer: str) -> tuple[float, float]:
    """Type `message`, wait until it shows, script the fake's answer to contain `answer`,
    press Enter: the seconds from Enter until `answer` is on screen, and from Enter until the
    request reached the fake (nan if it never did)."""
    term.type(message)
    term.wait_for(lambda screen: message in screen, f"the typed message {message!r}")
    fake.script_turn(("text", f"The answer: {answer} here."))
    arrived = arrival(fake, len(fake.turn_requests) + 1)
    start = time.perf_counter()
    term.press("Enter")
    took = term.wait_for(lambda screen: answer in screen, f"the answer {answer!r}",
                         ANSWER_TIMEOUT, since=start)
    at = arrived()
    return took, (at - start if at is not None else float("nan"))


def floor_post(folder: Path, url: str, body: dict[str, Any]) -> tuple[float, float, str]:
    """The standard library making `body`'s request in a fresh interpreter: (the whole
    process's seconds, the seconds inside it from before its imports to the answer read, the
    answer's text)."""
    script, path = folder / "floor_post.py", folder / "floor_body.json"
    script.write_text(FLOOR_POST, encoding="utf-8")
    path.write_text(json.dumps(body), encoding="utf-8")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(script), url, str(path), FAKE_KEY],
                          capture_output=True, text=True, env=python_env(folder), timeout=60)
    whole = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"the floor's request failed: {proc.stderr[-2000:]}")
    text, inside = proc.stdout.rstrip("\n").rsplit("\n", 1)
    return whole, float(inside), text


def ms(values: list[float]) -> tuple[float, ...]:
    return tuple(v * 1000 for v in values)


def tui_start(ctx: Any) -> list[Figure]:
    """Launch → first frame, key echo right after it, idle RSS before any send."""
    warm, runs = rounds(ctx)
    floor_cmd, floor_env = floor_app(ctx.folder), child_env(ctx.folder)
    got: dict[str, list[float]] = {k: [] for k in (
        "frame", "echo", "echo_first", "rss", "settled", "rss_frame", "off_frame", "off_rss",
        "off_settled", "off_rss_frame", "off_echo_first", "off_echo", "f_frame", "f_echo",
        "f_echo_first", "f_rss", "f_settled", "f_rss_frame", "typed_rss", "off_typed_rss",
        "f_typed_rss")}

    def quiet_run(term: Terminal, ready: Callable[[str], bool], what: str,
                  prefix: str) -> dict[str, float]:
        """A launch left alone: no key is typed, so nothing a message would need loads."""
        term.start()
        frame = term.wait_for(ready, what, FRAME_TIMEOUT)
        rss, settled = settled_rss(term.pid(), term.started + frame, f"{what}, idle, no key")
        return {f"{prefix}rss": rss, f"{prefix}settled": settled}

    def app_run(term: Terminal, ready: Callable[[str], bool], what: str,
                prefix: str) -> dict[str, float]:
        term.start()
        frame = term.wait_for(ready, what, FRAME_TIMEOUT)
        seen = term.started + frame
        out = {f"{prefix}frame": frame, f"{prefix}rss_frame": rss_mib(term.pid())}
        out[f"{prefix}echo_first"] = term.echo(f"{what}'s input")
        out[f"{prefix}typed_rss"], _ = settled_rss(term.pid(), seen, f"{what}, after a key")
        out[f"{prefix}echo"] = median(term.echo(f"{what}'s input, idle") for _ in range(KEYS))
        return out

    with FakeOpenAI() as fake:
        app = Picochat(ctx.folder, fake.base_url)
        app.prepare(floor_cmd)
        before = len(fake.requests)
        for i in range(warm + runs):
            run: dict[str, float] = {}
            for measure in (app_run, quiet_run):  # keys typed, then a launch left alone
                for launch, ready, what, prefix in (
                        (app.terminal, chat_ready, "picochat's chat screen", ""),
                        (lambda: app.terminal("-m", "offline"), chat_ready,
                         "picochat's chat screen (offline model)", "off_"),
                        (lambda: Terminal(floor_cmd, floor_env), floor_ready, "the bare app",
                         "f_")):
                    with launch() as term:
                        run.update(measure(term, ready, what, prefix))
            if i >= warm:
                for key, value in run.items():
                    if key in got:
                        got[key].append(value)
        sent = len(fake.requests) - before
    ratio = {k: per_run(got[k], got["f_" + k])
             for k in ("frame", "echo_first", "echo", "rss", "typed_rss")}
    for k in ("frame", "echo_first", "rss", "typed_rss"):
        ratio["off_" + k] = per_run(got["off_" + k], got["f_" + k])
    size, offline = f"openai/ model on the fake, {runs} runs", f"built-in offline model, {runs} runs"
    requests = {"requests_to_the_fake": sent}
    settled = ("RSS once flat (≤ 1 MiB over 1.5 s, at least 3 s after the first frame): "
               "{:.1f} s after it (median; the floor {:.1f} s); at the first frame {:.0f} MiB "
               "(the floor {:.0f} MiB)")

    def row(case: str, key: str, size: str, unit: str, target: str, met: bool,
            scale: float = 1.0, **more: Any) -> Figure:
        floor = "f_" + key.removeprefix("off_")
        return Figure(case, size, tuple(v * scale for v in got[key]), unit, target, met,
                      floor=FLOOR, floor_samples=tuple(v * scale for v in got[floor]),
                      ratios=ratio[key], **more)

    def first_frame(key: str, size: str) -> Figure:
        return row("TUI launch → first frame (tmux 120×40)", key, size, "s", "≤ 1.3× floor",
                   median(ratio[key]) <= 1.3, extra=requests)

    def first_key(key: str, size: str) -> Figure:
        return row("TUI key echo: a key sent at the first frame", key, size, "ms",
                   "≤ 1.5× floor", median(ratio[key]) <= 1.5, 1000,
                   note="tmux send-keys of a character the moment the first frame is seen → "
                   "the character on screen")

    def idle_rss(key: str, size: str) -> Figure:
        p = key.removesuffix("rss")
        return row("TUI idle RSS before any send", key, size, "MiB", "≤ 80 MiB",
                   median(got[key]) <= 80,
                   note=settled.format(median(got[p + "settled"]), median(got["f_settled"]),
                                       median(got[p + "rss_frame"]),
                                       median(got["f_rss_frame"])),
                   extra={**requests, "settled_after_s": round(median(got[p + "settled"]), 2),
                          "rss_at_first_frame_mib": round(median(got[p + "rss_frame"]), 1),
                          "floor_rss_at_first_frame_mib": round(median(got["f_rss_frame"]),
                                                                1)})

    return [
        first_frame("frame", size), first_frame("off_frame", offline),
        first_key("echo_first", size), first_key("off_echo_first", offline),
        row("TUI key echo once idle", "echo", f"{KEYS} keys a run, {runs} runs", "ms",
            "≤ 1.5× floor", median(ratio["echo"]) <= 1.5, 1000,
            note=f"{KEYS} keys once memory is flat, each after the one before has echoed; "
            "each run's median"),
        idle_rss("rss", size), idle_rss("off_rss", offline),
        row("TUI RSS after one key, before any send", "typed_rss", size, "MiB", "≤ 80 MiB",
            median(got["typed_rss"]) <= 80,
            note="a key typed at the first frame, then memory flat: a message is coming, so "
            "a turn's modules and the token rank table (5 MiB) load at the pause"),
        row("TUI RSS after one key, before any send", "off_typed_rss", offline, "MiB",
            "≤ 80 MiB", median(got["off_typed_rss"]) <= 80),
    ]


def tui_send(ctx: Any) -> list[Figure]:
    """The first send one second after the first frame, and a second one in the same app."""
    warm, runs = rounds(ctx)
    floor_cmd, floor_env = floor_app(ctx.folder), child_env(ctx.folder)
    got: dict[str, list[float]] = {k: [] for k in (
        "first", "to_request", "second", "second_to_request", "rss", "http", "f_echo",
        "f_rss")}
    with FakeOpenAI(default_text="Floor answer from the fake.") as fake:
        app = Picochat(ctx.folder, fake.base_url)
        app.prepare(floor_cmd, fake)
        for i in range(warm + runs):
            run: dict[str, float] = {}
            with app.terminal() as term:
                term.start()
                seen = term.started + term.wait_for(chat_ready, "picochat's chat screen",
                                                    FRAME_TIMEOUT)
                time.sleep(max(0.0, seen + 1.0 - time.perf_counter()))
                run["first"], run["to_request"] = send(term, fake, "hello bench",
                                                       f"quokka{i}first")
                body = fake.turn_requests[-1]
                run["rss"] = settled_rss(term.pid(), time.perf_counter(),
                                         "picochat after its first answer", min_wait=1.5)[0]
                run["second"], run["second_to_request"] = send(term, fake, "and again",
                                                               f"quokka{i}second")
            run["http"] = floor_post(ctx.folder, fake.base_url, body)[1]
            with Terminal(floor_cmd, floor_env) as term:
                term.start()
                seen = term.started + term.wait_for(floor_ready, "the bare app", FRAME_TIMEOUT)
                time.sleep(max(0.0, seen + 1.0 - time.perf_counter()))
                run["f_echo"] = term.echo("the bare app's input")
                run["f_rss"] = settled_rss(term.pid(), seen, "the bare app, idle")[0]
            if i >= warm:
                for key, value in run.items():
                    got[key].append(value)
    floor = [h + e for h, e in zip(got["http"], got["f_echo"])]
    over = tuple(f - b for f, b in zip(got["first"], floor))
    over_second = tuple(f - s for f, s in zip(got["first"], got["second"]))
    met = median(over) <= 0.5
    size = f"frame + 1 s, {runs} runs"
    where = {"enter_to_request_s": round(median(got["to_request"]), 3),
             "floor_http_s": round(median(got["http"]), 4),
             "floor_echo_s": round(median(got["f_echo"]), 4)}
    return [
        Figure("TUI first send: Enter → answer on screen", size, tuple(got["first"]), "s",
               "overhead ≤ 0.5 s", met, floor=FLOOR_SEND, floor_samples=tuple(floor),
               ratios=per_run(got["first"], floor),
               note=f"Enter → the request at the fake: {median(got['to_request']):.2f} s "
               "(median); the rest is the answer's way to the screen", extra=where),
        Figure("TUI first send: client overhead", size, over, "s", "≤ 0.5 s", met,
               floor=FLOOR_SEND, floor_samples=tuple(floor),
               note="the first send less the floor's cost of the same exchange: the request "
               "picochat sent, POSTed with urllib by a fresh python (timed inside it, imports "
               "included, interpreter start not), plus the bare app's key echo (the "
               "terminal's round trip); first minus second send: "
               f"{median(over_second):.2f} s",
               extra={"first_minus_second_s": round(median(over_second), 3)}),
        Figure("TUI second send, same app (steady)", size, tuple(got["second"]), "s",
               floor=FLOOR_SEND, floor_samples=tuple(floor),
               ratios=per_run(got["second"], floor),
               extra={"enter_to_request_s": round(median(got["second_to_request"]), 3)}),
        Figure("TUI RSS after one real send", "answer on screen, memory flat",
               tuple(got["rss"]), "MiB", "≤ 200 MiB", median(got["rss"]) <= 200,
               floor=FLOOR, floor_samples=tuple(got["f_rss"]),
               ratios=per_run(got["rss"], got["f_rss"])),
    ]


def ask(ctx: Any) -> list[Figure]:
    """`picochat ask hi` against the fake, whole process, against the standard library."""
    warm, runs = (1, rounds(ctx)[1])  # even quick warms up: the first ask creates the database
    marker = "Answer quokka from the fake."
    got: dict[str, list[float]] = {k: [] for k in ("ask", "to_request", "floor")}
    with FakeOpenAI(default_text=marker) as fake:
        env = {**python_env(ctx.folder), **model_env(ctx.folder, fake.base_url)}
        for i in range(warm + runs):
            arrived = arrival(fake, len(fake.turn_requests) + 1)
            start = time.perf_counter()
            proc = subprocess.run(picochat_command() + ["ask", "hi"], capture_output=True,
                                  text=True, env=env, timeout=ANSWER_TIMEOUT)
            took = time.perf_counter() - start
            if proc.returncode or marker not in proc.stdout:
                raise RuntimeError(f"picochat ask failed ({proc.returncode}); stdout: "
                                   f"{proc.stdout[-500:]!r}; stderr: {proc.stderr[-2000:]}")
            at = arrived()
            whole, _, text = floor_post(ctx.folder, fake.base_url, fake.turn_requests[-1])
            if marker not in text:
                raise RuntimeError(f"the floor's request got {text!r}")
            if i >= warm:
                got["ask"].append(took)
                got["to_request"].append(at - start if at is not None else float("nan"))
                got["floor"].append(whole)
    over = tuple(a - f for a, f in zip(got["ask"], got["floor"]))
    met = median(over) <= 0.5
    size = f"openai/ model on the fake, {runs} runs"
    return [
        Figure("picochat ask hi (whole process)", size, tuple(got["ask"]), "s",
               "overhead ≤ 0.5 s", met, floor=FLOOR_ASK, floor_samples=tuple(got["floor"]),
               ratios=per_run(got["ask"], got["floor"]),
               note=f"launch → the request at the fake {median(got['to_request']):.2f} s, "
               "the request → the process's exit "
               f"{median(a - r for a, r in zip(got['ask'], got['to_request'])):.2f} s "
               "(medians)", extra={"to_request_s": round(median(got["to_request"]), 3)}),
        Figure("picochat ask: client overhead", size, over, "s", "≤ 0.5 s", met,
               floor=FLOOR_ASK, floor_samples=tuple(got["floor"]),
               note="the whole process less a python process making the same request (the "
               "body picochat sent) with urllib and printing the answer"),
    ]


CASES = {
    "tui-start": tui_start,
    "tui-send": tui_send,
    "ask": ask,
}

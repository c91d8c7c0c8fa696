"""The chat screen under load: a long session opened in a real terminal beside the floor
(and the memory the app holds once flat), and a long answer streamed through the real app
at a real model's pace, timing the final render and the event loop's worst stall."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any, AsyncIterator

from picochat import tokens
from picochat.config import Config, ModelConfig, load_config
from picochat.models import resolve_model
from picochat.providers.base import Finish, ModelInfo, Provider, ProviderRequest, TextDelta, Usage
from picochat.storage.store import open_store
from picochat.tui.app import PicochatApp
from picochat.tui.chat import AssistantMessage, ChatView
from picochat.tui.prompt import Prompt
from tests.bench.data import session_with, text
from tests.bench.process_cases import (Terminal, bare_app, model_env, picochat_command,
                                       python_env, settled_rss)
from tests.bench.timing import Figure, per_run
from tests.helpers.storage import append_message

MARKER = "zulu-marker-final-answer"
RATE = 1_000  # tokens per second, a fast model's pace


def tui_open(ctx: Any) -> list[Figure]:
    """`picochat --session` on 5,000 messages: launch until the newest answer is on screen,
    run by run beside the floor's first frame; and the memory held once it is flat."""
    size, tail = 5_000, 200
    runs = min(ctx.repeat, 2) if ctx.quick else ctx.repeat
    env = model_env(ctx.folder)
    data = Path(env["PICOCHAT_DATA_DIR"])
    data.mkdir(parents=True, exist_ok=True)
    store, sid = session_with(data, "picochat", size, tail=tail)  # data/picochat.db
    store.rename_session(sid, "big")
    append_message(store, sid, "user", "and the last question?", turn_id="last")
    append_message(store, sid, "assistant", f"The last answer: {MARKER}.", turn_id="last")
    total = store.max_seq(sid)
    store.close()
    bare_run = bare_app(ctx.folder)
    opened, rss, bare = [], [], []
    for i in range(runs + 1):  # the first run writes the bytecode: untimed
        with Terminal(picochat_command() + ["--session", "big"], env) as term:
            term.start()
            seconds = term.wait_for(lambda screen: MARKER in screen,
                                    "the long session's last answer", 60)
            if i:
                opened.append(seconds)
                rss.append(settled_rss(term.pid(), term.started + seconds,
                                       "picochat with the long session open")[0])
        bare_s = bare_run()
        if i:
            bare.append(bare_s)
    return [
        Figure("TUI open a long session → last message (tmux)",
               f"{total:,} msgs, {tail}-msg tail", tuple(opened), "s",
               "keep; ≤ 0.35 s on a quiet machine", median(opened) <= 0.35,
               floor="bare Textual app", floor_samples=tuple(bare), ratios=per_run(opened, bare),
               note="launch to the newest message on screen, openai/ model configured (never "
               "sent to); the floor is the bare app's first frame; met: the absolute median"),
        Figure("TUI RSS, long session open", f"{total:,} msgs open", tuple(rss), "MiB",
               "≤ 350 MiB", median(rss) <= 350,
               note="once flat (≤ 1 MiB over 1.5 s, at least 3 s after the last message "
               "showed)"),
    ]


def answer_pieces(n_tokens: int, seed: int = 3) -> tuple[list[str], list[int]]:
    """A Markdown answer (headings, paragraphs, lists, code blocks) cut into `n_tokens` real
    o200k tokens, in chunks of 1–5 tokens as a provider streams them; the chunks and their
    token counts."""
    rng, blocks, serial, have = random.Random(seed), [], 0, 0
    while have < n_tokens * 1.1:  # per-block counts run high: joined, blocks share tokens
        serial += 1
        kind = serial % 6
        if kind == 1:
            block = f"## Step {serial}: {text(rng, 4, serial)}"
        elif kind == 3:
            block = "\n".join(f"- {text(rng, 8, serial + j)}" for j in range(4))
        elif kind == 5:
            body = "\n".join(f"    port_{j} = {8000 + j}  # {text(rng, 5, j)}" for j in range(6))
            block = f"```python\ndef step_{serial}():\n{body}\n```"
        else:
            block = text(rng, 60, serial)
        blocks.append(block)
        have += tokens.count_text(block) + 1
    return chunked("\n\n".join(blocks), n_tokens, rng)


def chunked(text: str, n_tokens: int, rng: random.Random) -> tuple[list[str], list[int]]:
    """The first `n_tokens` o200k tokens of `text` in chunks of 1–5 tokens, as a provider
    streams them; the chunks and their token counts."""
    encoding = tokens._encoding(tokens.ENCODING)
    ids = encoding.encode(text, disallowed_special=())[:n_tokens]
    pieces, sizes, i = [], [], 0
    while i < len(ids):
        step = min(rng.randint(1, 5), len(ids) - i)
        pieces.append(encoding.decode(ids[i:i + step]))
        sizes.append(step)
        i += step
    return pieces, sizes


class Paced(Provider):
    """Streams `pieces` at RATE tokens per second on a cumulative schedule (a slow chunk is
    caught up, not added), noting when the last text piece was handed over."""

    def __init__(self, pieces: list[str], sizes: list[int]) -> None:
        self.info = ModelInfo("bench", "paced")
        self.pieces, self.sizes = pieces, sizes
        self.first = self.last = 0.0

    async def stream(self, request: ProviderRequest) -> AsyncIterator[Any]:
        start, sent = time.perf_counter(), 0
        self.first = start
        for piece, size in zip(self.pieces, self.sizes):
            sent += size
            await asyncio.sleep(max(0.0, start + sent / RATE - time.perf_counter()))
            self.last = time.perf_counter()
            yield TextDelta(piece)
        yield Usage(100, sent)
        yield Finish()


async def watch_final_render(chat: ChatView, expected: str, done: asyncio.Future[float]) -> None:
    """Resolve `done` with the time of the first screen refresh after the answer's widgets
    show the whole text. Polled every 2 ms, cheaply: the answer is found once."""
    answer = None
    while answer is None:
        found = list(chat.query(AssistantMessage))
        answer = found[-1] if found and found[-1].parts else None
        await asyncio.sleep(0.01)
    while True:
        if answer.rendered and sum(map(len, answer.parts)) == len(expected):
            chat.app.call_after_refresh(
                lambda: None if done.done() else done.set_result(time.perf_counter()))
            return
        await asyncio.sleep(0.002)


async def ticker(stop: asyncio.Event, worst: list[float], period: float = 0.005) -> None:
    """The event loop's lateness: how much longer than `period` a sleep took, at worst."""
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(period)
        worst[0] = max(worst[0], time.perf_counter() - start - period)


async def stream_once(folder: Path, pieces: list[str], sizes: list[int]) -> dict[str, float]:
    config = Config(models={"bench": ModelConfig("bench", "offline", token_limit=400_000)})
    store = open_store(folder / f"stream{time.monotonic_ns()}.db")
    provider = Paced(pieces, sizes)
    app = PicochatApp(store, store.create_session("s"), resolve_model(config, "bench"),
                      provider, config)
    expected = "".join(pieces)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[float] = loop.create_future()
        watcher = asyncio.create_task(watch_final_render(app.query_one(ChatView), expected,
                                                         done))
        stop, worst = asyncio.Event(), [0.0]
        tick = asyncio.create_task(ticker(stop, worst))
        app.query_one(Prompt).load_text("write the long answer")
        await pilot.press("enter")
        rendered = await asyncio.wait_for(done, timeout=60 + len(pieces) * 5 / RATE)
        while app.worker.busy or app.state:  # the stall figure covers saving the answer too
            await asyncio.sleep(0.01)
        stop.set()
        await tick
        await watcher
        saved = store.history(app.session.id)[-1].content
    store.close()
    assert saved == expected, "the saved answer differs from what was streamed"
    return {"final_ms": (rendered - provider.last) * 1000, "stall_ms": worst[0] * 1000,
            "rate": sum(sizes) / (provider.last - provider.first)}


def tui_stream(ctx: Any) -> list[Figure]:
    n = 1_000 if ctx.quick else 20_000
    runs = max(1, ctx.repeat) if ctx.quick else min(ctx.repeat, 3)
    pieces, sizes = answer_pieces(n)
    asyncio.run(stream_once(ctx.folder, pieces[:40], sizes[:40]))  # untimed: lazy imports
    results = [asyncio.run(stream_once(ctx.folder, pieces, sizes)) for _ in range(runs)]
    size = f"{sum(sizes):,} tokens in {len(pieces):,} chunks at {RATE:,}/s"
    rates = {"achieved_tokens_per_s": round(median(r["rate"] for r in results))}
    final = tuple(r["final_ms"] for r in results)
    stall = tuple(r["stall_ms"] for r in results)
    return [
        Figure("TUI stream: last chunk to final render", size, final, "ms", "≤ 200 ms",
               median(final) <= 200, extra=rates),
        Figure("TUI stream: longest event-loop stall", size, stall, "ms", "≤ 100 ms",
               median(stall) <= 100, note="5 ms ticker in the app's loop, send to answer saved",
               extra=rates),
    ]


def one_block(kind: str, chars: int) -> str:
    """An answer that is one huge top-level block: a list or a table of `chars`."""
    rows, i = ["Ports:", ""] if kind == "list" else ["| host | port | note |", "|---|---|---|"], 0
    while sum(map(len, rows)) < chars:
        i += 1
        rows.append(f"- host cn-{i} keeps port {8000 + i} for the **replica** set" if kind ==
                    "list" else f"| cn-{i} | {8000 + i} | the replica keeps `its` port |")
    return "\n".join(rows) + "\n"


def tui_stream_block(ctx: Any) -> list[Figure]:
    """The shapes the stream case never meets: one list or table of 37k characters (about
    13k tokens), streamed at the same pace."""
    chars = 4_000 if ctx.quick else 37_000
    runs = max(1, ctx.repeat) if ctx.quick else min(ctx.repeat, 3)
    figures = []
    for kind in ("list", "table"):
        pieces, sizes = chunked(one_block(kind, chars), 10 ** 6, random.Random(5))
        results = [asyncio.run(stream_once(ctx.folder, pieces, sizes)) for _ in range(runs)]
        size = f"one {kind} of {chars:,} chars, {sum(sizes):,} tokens at {RATE:,}/s"
        stall = tuple(r["stall_ms"] for r in results)
        final = tuple(r["final_ms"] for r in results)
        figures += [Figure(f"TUI stream one huge {kind}: longest stall", size, stall, "ms",
                           "≤ 100 ms", median(stall) <= 100),
                    Figure(f"TUI stream one huge {kind}: last chunk to final render", size,
                           final, "ms", "≤ 200 ms", median(final) <= 200)]
    return figures


async def _warm_up_stall(folder: Path) -> dict[str, float]:
    """In a fresh process: the app on the bench's litellm model, from its first frame until
    tiktoken and litellm have loaded behind it (threads, but their imports hold the GIL in
    spells)."""
    from picochat.models import create_provider

    env = model_env(folder)
    os.environ["BENCH_FAKE_KEY"] = env["BENCH_FAKE_KEY"]
    config = load_config(Path(env["PICOCHAT_CONFIG_DIR"]) / "config.toml")
    store = open_store(folder / "warm.db")
    resolved = resolve_model(config, config.default_model or "fake")
    app = PicochatApp(store, store.create_session("s"), resolved, create_provider(resolved),
                      config)
    async with app.run_test(size=(120, 40)):
        start, stop, worst = time.perf_counter(), asyncio.Event(), [0.0]
        tick = asyncio.create_task(ticker(stop, worst))
        await app.transcript_ready.wait()
        await app.worker.provider.warm_up()
        while not app.ready:
            await asyncio.sleep(0.01)
        stop.set()
        await tick
    store.close()
    return {"stall_ms": worst[0] * 1000, "seconds": time.perf_counter() - start}


def warm_up_probe() -> None:
    with tempfile.TemporaryDirectory() as folder:
        print(json.dumps(asyncio.run(_warm_up_stall(Path(folder)))))


def tui_warm_up(ctx: Any) -> list[Figure]:
    """What typing right after launch meets: the event loop's longest stall while litellm
    and tiktoken load in threads (each run a new process: an import happens once)."""
    code = "from tests.bench.tui_cases import warm_up_probe; warm_up_probe()"
    root = Path(__file__).resolve().parents[2]
    runs = []
    for _ in range(max(1, min(ctx.repeat, 5))):
        out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                             text=True, check=True, env=python_env(ctx.folder)).stdout
        runs.append(json.loads(out.splitlines()[-1]))
    return [Figure("TUI longest stall while litellm loads", "first frame to litellm ready, "
                   f"{median(r['seconds'] for r in runs):.1f} s",
                   tuple(r["stall_ms"] for r in runs), "ms",
                   note="no target in the issue; keys typed meanwhile wait at most this long")]


CASES = {
    "tui-warm-up": tui_warm_up,
    "tui-open": tui_open,
    "tui-stream": tui_stream,
    "tui-stream-block": tui_stream_block,
}

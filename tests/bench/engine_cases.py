"""The engine's promises, measured: resume cost flat in history once a checkpoint exists, a
budget that never re-tokenizes history, cheap compaction bookkeeping, fast appends and search."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from dataclasses import replace
from statistics import median
from pathlib import Path
from typing import Any

from picochat import tokens
from picochat.budget import RequestDraft, measure
from picochat.compaction.compact import CompactRequest, compact_context
from picochat.config import CompactionConfig, Config, ModelConfig
from picochat.models import limits_for, resolve_model
from picochat.projection import restore
from picochat.providers.base import Finish, Provider, TextDelta, Usage
from picochat.providers.offline import OfflineProvider
from picochat.tools.registry import schemas
from tests.bench.data import fill, session_with
from tests.bench.timing import Figure, times_ms
from tests.helpers.storage import append_message

TOOLS = tuple(schemas(["history_search", "timeline_recall", "read_file"]))
SYSTEM = "You are a helpful assistant."


def restore_with_checkpoint(ctx: Any) -> list[Figure]:
    sizes = (1_000, 10_000) if ctx.quick else (1_000, 100_000, 1_000_000)
    figures, medians = [], {}
    for size in sizes:
        store, sid = session_with(ctx.folder, f"cp{size}", size, tail=200)
        samples = times_ms(lambda: restore(store, sid), ctx.repeat)
        baseline: tuple[float, ...] = ()
        if size <= 100_000:  # the naive resume: read the whole log, then project
            baseline = times_ms(lambda: store.history(sid), max(3, ctx.repeat // 3))
        tail = len(restore(store, sid).raw)
        figures.append(Figure("restore + projection, checkpoint",
                              f"{size:,} msgs, {tail}-msg tail", samples, "ms", "≤ 20 ms",
                              median(samples) <= 20, "read the whole log" if baseline else "",
                              baseline))
        medians[size] = median(samples)
        store.close()
    lo, hi = sizes[0], sizes[-1]
    ratio = medians[hi] / medians[lo]
    figures.append(Figure("restore growth with history", f"{hi:,} / {lo:,} msgs", (ratio,),
                          "×", "≤ 2", ratio <= 2))
    return figures


def restore_without_checkpoint(ctx: Any) -> list[Figure]:
    size = 2_000 if ctx.quick else 10_000
    store, sid = session_with(ctx.folder, f"raw{size}", size)
    samples = times_ms(lambda: restore(store, sid), ctx.repeat)
    store.close()
    return [Figure("restore + projection, no checkpoint", f"{size:,} msgs", samples, "ms",
                   "≤ 150 ms", median(samples) <= 150)]


def _big_projection(ctx: Any, target_tokens: int):
    store, sid = session_with(ctx.folder, f"budget{target_tokens}", 100)
    while restore(store, sid).raw_tokens < target_tokens:
        fill(store, sid, store.max_seq(sid) + 1_000)
    return store, sid


def budget_next_request(ctx: Any) -> list[Figure]:
    target = 20_000 if ctx.quick else 200_000
    store, sid = _big_projection(ctx, target)
    projection = restore(store, sid)
    config = Config(models={"big": ModelConfig("big", "offline", token_limit=400_000)})
    limits = limits_for(resolve_model(config, "big"), CompactionConfig())
    draft = RequestDraft(SYSTEM, projection, TOOLS, "and one more question about the canary")
    samples = times_ms(lambda: measure(limits, draft, "offline", "offline"), ctx.repeat * 5)
    baseline = times_ms(lambda: tokens.count_provider_messages(draft.messages()), ctx.repeat)
    estimated = measure(limits, draft).used_tokens
    recount = tokens.count_provider_messages(draft.messages()) + tokens.count_tools(TOOLS)
    store.close()
    fig = Figure("budget for the next request", f"{projection.raw_tokens:,}-token projection, "
                 f"{len(projection.raw):,} msgs", samples, "ms", "≤ 5 ms, ≥ 50× re-tokenizing",
                 None, "re-tokenize the projection", baseline,
                 extra={"estimate_tokens": estimated, "recount_tokens": recount})
    return [replace(fig, met=fig.median <= 5 and (fig.ratio or 0) >= 50)]


class ReplaySummary(Provider):
    """The offline model's summary, computed once and then replayed at once: what remains of a
    compaction's time is everything but the provider call. Time inside calls is recorded."""

    def __init__(self) -> None:
        self.inner = OfflineProvider(0)
        self.info = self.inner.info
        self.cached: str | None = None
        self.seconds = 0.0

    async def stream(self, request):
        start = time.perf_counter()
        if self.cached is None:
            parts = []
            async for event in self.inner.stream(request):
                if isinstance(event, TextDelta):
                    parts.append(event.text)
            self.cached = "".join(parts)
        self.seconds += time.perf_counter() - start
        yield TextDelta(self.cached)
        yield Usage(1_000, tokens.count_text(self.cached))
        yield Finish()


def cold() -> None:
    """Forget the facts read from stored statements, so a timed run reads them all again."""
    from picochat import ledger
    ledger._stored_facts.cache_clear()


def compaction_overhead(ctx: Any) -> list[Figure]:
    target = 20_000 if ctx.quick else 200_000
    store, sid = _big_projection(ctx, target)
    config = Config(models={"big": ModelConfig("big", "offline", token_limit=400_000)})
    limits = limits_for(resolve_model(config, "big"), CompactionConfig())
    provider = ReplaySummary()
    request = CompactRequest(sid, "manual", limits, SYSTEM, TOOLS)
    outcomes: list[float] = []

    async def runs() -> None:  # one task for every run: the loop's own set-up is not ours
        for _ in range(ctx.repeat + 1):
            provider.seconds = 0.0
            cold()  # what a compaction after start-up pays: no message's facts read yet
            start = time.perf_counter()
            outcome = await compact_context(store, provider, request)
            total = time.perf_counter() - start
            assert outcome.compacted, outcome
            outcomes.append((total - provider.seconds) * 1000)
            store.uncompact(sid)  # back to the raw history: the next run folds the same span

    asyncio.run(runs())
    samples = tuple(outcomes[1:])  # the first run paid for the offline summary itself
    tokens_before = restore(store, sid).raw_tokens
    store.close()
    return [Figure("compaction overhead (all but the provider call)",
                   f"{tokens_before:,}-token history", samples, "ms", "≤ 100 ms",
                   median(samples) <= 100, note="plan, serialize, validate, commit, re-project")]


def append_rate(ctx: Any) -> list[Figure]:
    n = 300 if ctx.quick else 3_000
    store, sid = session_with(ctx.folder, "append", 10)
    rates = []
    for _ in range(ctx.repeat):
        start = time.perf_counter()
        for i in range(n):
            append_message(store, sid, "user" if i % 2 == 0 else "assistant",
                           f"message {i} about the canary host and its port")
        rates.append(n / (time.perf_counter() - start))
    store.close()
    return [Figure("append a message (one transaction each, WAL)", f"{n:,} appends",
                   tuple(rates), "msg/s", "≥ 2,000 msg/s", median(rates) >= 2_000)]


def history_search(ctx: Any) -> list[Figure]:
    size = 5_000 if ctx.quick else 100_000
    store, sid = session_with(ctx.folder, f"search{size}", size)
    db = Path(store.path)
    naive = sqlite3.connect(db)

    def like(term: str) -> None:
        naive.execute("SELECT seq FROM messages WHERE session_id = ? AND content LIKE ? "
                      "ORDER BY seq DESC LIMIT 10", (sid, f"%{term}%")).fetchall()

    figures = []
    for label, query in (("a rare term", "note 1234:"), ("a common word", "canary")):
        samples = times_ms(lambda: store.search.messages(sid, query, limit=10), ctx.repeat)
        baseline = times_ms(lambda: like(query), max(3, ctx.repeat // 2))
        hits = len(store.search.messages(sid, query, limit=10))
        figures.append(Figure(f"history_search, {label}", f"{size:,} msgs, {hits} hits shown",
                              samples, "ms", "≤ 50 ms", median(samples) <= 50, "LIKE scan",
                              baseline))
    naive.close()
    store.close()
    return figures


CASES = {
    "restore": restore_with_checkpoint,
    "restore-raw": restore_without_checkpoint,
    "budget": budget_next_request,
    "compaction": compaction_overhead,
    "append": append_rate,
    "search": history_search,
}

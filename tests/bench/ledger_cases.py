"""The exact-fact ledger's cost (issue 19): extraction over a 214k-token span, the whole ledger
overhead of one compaction at that size (target ≤ 100 ms), and `fit` on a 5,000-fact ledger.

The span is a coding session as a user would have it: prose, code and shell blocks, tool
results (config files, logs, JSON), and a few hundred planted facts (paths, ports, host:port,
ids, URLs, versions, key=value) with user corrections that override some of them. Built as
`Message` values in memory: the ledger reads messages, not the store.
"""

from __future__ import annotations

import dataclasses
import json
import random
from statistics import median
from typing import Any

from picochat import ledger as L
from picochat import statements as S
from picochat import tokens
from picochat.compaction.compactor import CompactionPlan, ContextCompactor
from picochat.compaction.gate import check_summary
from picochat.compaction.transcript import serialize
from picochat.config import CompactionConfig, Config, ModelConfig
from picochat.messages import Message
from picochat.models import limits_for, resolve_model
from picochat.projection import ContextProjection
from picochat.providers.offline import OfflineProvider
from picochat.summary_contract import HEADINGS
from tests.bench.data import WORDS
from tests.bench.engine_cases import SYSTEM, TOOLS
from tests.bench.engine_cases import cold
from tests.bench.timing import Figure, times_ms

SPAN_TOKENS = 214_000
QUICK_SPAN_TOKENS = 20_000
WINDOW = 400_000           # a window that can fold a 214k-token span in one compaction
SUMMARY_TOKENS = 2_000

PROSE = (WORDS + ("the a of to and we it is that this for with when then so but if not all "
                  "should would could first next after before again still only also each "
                  "works fails looks seems keeps needs").split())
SERVICES = ("api", "billing", "search", "auth", "ingest", "gateway", "scheduler", "export")
PACKAGES = ("numpy", "httpx", "pydantic", "sqlalchemy", "uvicorn", "redis", "celery", "rich")


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(PROSE) for _ in range(n)).capitalize() + "."


def prose(rng: random.Random, sentences: int) -> str:
    return " ".join(sentence(rng, rng.randint(8, 20)) for _ in range(sentences))


class Planter:
    """Fresh exact facts, each value once; the ports it has given out, for corrections."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.n, self.ports = rng, 0, []

    def fact(self) -> str:
        self.n += 1
        n, rng, svc = self.n, self.rng, self.rng.choice(SERVICES)
        kind = n % 7
        if kind == 0:
            port = 10_000 + n
            self.ports.append(port)
            return f"the {svc} service listens on port {port}"
        if kind == 1:
            return f"its config lives at /srv/{svc}-{n}/conf/settings.toml"
        if kind == 2:
            return f"the replica answers on {svc}-db-{n}.internal:{5_000 + n}"
        if kind == 3:
            return f"ticket OPS-{1_000 + n} tracks it (commit {rng.getrandbits(40):010x})"
        if kind == 4:
            return f"the runbook is at https://wiki.example.com/{svc}/runbook-{n}?rev={n % 13}"
        if kind == 5:
            return f"pin {rng.choice(PACKAGES)}=={n % 5}.{n % 17}.{n % 11} for now"
        return f"set MAX_CONN_{n}={n % 90 + 10} in the env"


def code_block(rng: random.Random) -> str:
    """A function as an assistant writes one: names, calls, a default or two, a status code."""
    name, thing, other = (rng.choice(WORDS) for _ in range(3))
    lines = [f"def {name}_{thing}(request, retries=3):",
             f'    """{sentence(rng, rng.randint(6, 12))}"""',
             f"    {thing} = load_{thing}(request.{other})"]
    for _ in range(rng.randint(2, 6)):
        a, b = rng.choice(WORDS), rng.choice(WORDS)
        lines += rng.choice((
            [f"    if not {a}.{b}:", f"        raise ValueError(\"{a} has no {b}\")"],
            [f"    for {a} in {thing}.{b}s:", f"        {a}.update({b}={a}.{b})"],
            [f"    {a}_{b} = client.get(request.url, timeout=30)",
             f"    if {a}_{b}.status == 200:", f"        return {a}_{b}.json()"],
            [f"    # {sentence(rng, rng.randint(5, 10))}", f"    {a} = {b}({thing})"],
        ))
    lines.append(f"    return {thing}")
    return "```python\n" + "\n".join(lines) + "\n```"


def shell_block(rng: random.Random, n: int) -> str:
    return (f"```bash\ncurl -s http://localhost:{8000 + n % 50}/health\n"
            f"kubectl rollout restart deploy/{rng.choice(SERVICES)}\n```")


def tool_result(rng: random.Random, n: int) -> str:
    kind = n % 3  # n counts tool calls
    if kind == 0:  # a config file read
        values = [str(rng.randint(1, 500)), f'"{rng.choice(WORDS)}"', "true"]
        return "\n".join([f"[{rng.choice(WORDS)}]"] + [
            f"{rng.choice(WORDS)}_{rng.choice(WORDS)} = {rng.choice(values)}"
            for _ in range(rng.randint(20, 60))])
    if kind == 1:  # a log
        return "\n".join(f"2024-05-{1 + j % 28:02d}T12:{j % 60:02d}:03Z INFO worker-{j % 8} "
                         f"{rng.choice(WORDS)} {rng.choice(WORDS)} in {rng.randint(2, 900)} ms"
                         for j in range(rng.randint(20, 60)))
    return json.dumps({"items": [{"name": rng.choice(WORDS), "count": rng.randint(1, 99),
                                  "state": rng.choice(("ok", "failed", "pending"))}
                                 for _ in range(rng.randint(10, 40))]}, indent=2)


def span_of(n_tokens: int, seed: int = 19, first_seq: int = 1,
            fact_every: int = 2) -> tuple[Message, ...]:
    """Whole turns until `n_tokens` (o200k): every `fact_every`-th user message plants a
    fact, about one turn in 25 corrects an earlier port, every third turn reads a file."""
    rng, planter = random.Random(seed), Planter(random.Random(seed + 1))
    out: list[Message] = []
    have, seq, turn, reads = 0, first_seq, 0, 0

    def add(role: str, text: str, **kw: Any) -> None:
        nonlocal have, seq
        calls = kw.get("tool_calls")
        counted = tokens.count_message(role, text, calls, kw.get("tool_call_id"), kw.get("name"))
        row = Message("bench", seq, role, text, calls, kw.get("tool_call_id"),
                      kw.get("name"), f"t{turn}", kw.get("tool_status"), "complete", counted, 0)
        # its statements as the store takes them at append: a compaction reads these
        out.append(dataclasses.replace(row, statements=S.to_json(S.statements_of(row))))
        have += counted
        seq += 1

    while have < n_tokens:
        turn += 1
        ask = prose(rng, rng.randint(1, 4))
        if turn % fact_every == 0:
            ask += f" Note: {planter.fact()}; and {planter.fact()}."
        if turn % 25 == 0 and planter.ports:
            old = rng.choice(planter.ports)
            ask += f" Actually, use port {old + 1} instead of port {old}."
        add("user", ask)
        if turn % 3 == 0:
            reads += 1
            call = {"id": f"c{turn}", "type": "function", "function": {
                "name": "read_file",
                "arguments": json.dumps({"path": f"src/{rng.choice(WORDS)}_{turn}.py"})}}
            add("assistant", "", tool_calls=(call,))
            add("tool", tool_result(rng, reads), tool_call_id=f"c{turn}", name="read_file",
                tool_status="ok")
        answer = [prose(rng, rng.randint(3, 9))]
        if turn % 2:
            answer.append(code_block(rng))
        if turn % 5 == 0:
            answer.append(shell_block(rng, turn))
        answer.append(prose(rng, rng.randint(1, 4)))
        add("assistant", "\n\n".join(answer))
    return tuple(out)


def summary_text(rng: random.Random, n_tokens: int) -> str:
    """A well-formed summary of about `n_tokens`: the nine headings, each with a line of prose
    and then bullets (prose lines are what the gate compares with the transcript's lines)."""
    sections = {h: [sentence(rng, rng.randint(12, 20))] for h in HEADINGS}
    while tokens.count_text("\n".join(f"## {h}\n" + "\n".join(v)
                                      for h, v in sections.items())) < n_tokens:
        for h in HEADINGS:
            sections[h].append("- " + sentence(rng, rng.randint(10, 18)))
    return "\n\n".join(f"## {h}\n" + "\n".join(v) for h, v in sections.items())


def previous_checkpoint(share: int) -> tuple[str, L.Ledger]:
    """An earlier checkpoint's summary (its own 2k tokens of prose and a full ledger) and its
    ledger, as its rows give it back."""
    earlier = span_of(40_000, seed=7, first_seq=1, fact_every=1)
    ledger = L.fit(L.carry(L.Ledger(), earlier), share)
    return (L.merge_into(summary_text(random.Random(3), SUMMARY_TOKENS), ledger),
            L.from_stored(L.to_stored(ledger)))


class Compaction:
    """One compaction's inputs at this span size, and the ledger work it does on them."""

    def __init__(self, span_tokens: int) -> None:
        config = Config(models={"big": ModelConfig("big", "offline", token_limit=WINDOW)})
        self.limits = limits_for(resolve_model(config, "big"), CompactionConfig())
        self.compactor = ContextCompactor(OfflineProvider(0), self.limits, SYSTEM, TOOLS)
        self.room = self.compactor.room(ContextProjection("bench", None, 0, None, (), None, 0))
        self.share = self.limits.counted(self.room.ledger)
        self.previous, self.previous_ledger = previous_checkpoint(self.share)
        first = 100_000  # seqs after the earlier checkpoint's span
        self.span = span_of(span_tokens, first_seq=first)
        tail = span_of(2_000, seed=23, first_seq=self.span[-1].seq + 1)
        self.plan = CompactionPlan(None, 0, self.previous, L.to_stored(self.previous_ledger),
                                   self.span, tail, 1, tail[0].seq, tail[-1].seq)
        self.after = ContextProjection("bench", None, 0, None, tail, tail[0].seq, tail[-1].seq)
        self.transcript = serialize(self.previous, self.span, span_tokens * 2).text
        self.reply = summary_text(random.Random(5), SUMMARY_TOKENS)
        self.reserve = 2_048

    def ledger_work(self) -> L.Ledger:
        """What a compaction now does beyond the summary call and its old checks: the ledger
        carried over the span (`ledger_of`), the prose cap left beside it (`prose_cap`: fit
        and count), the quality gate on the reply, the ledger fitted and merged into the
        summary (`with_ledger`), and the counts read back for the log line. A compactor of
        its own each time, as each compaction has: nothing it caches carries over."""
        cold()
        compactor = ContextCompactor(OfflineProvider(0), self.limits, SYSTEM, TOOLS)
        ledger = compactor.ledger_of(self.plan)
        cap = compactor.prose_cap(self.reserve, ledger, self.room.ledger, self.limits.threshold)
        text = check_summary(self.reply, self.transcript, max_tokens=cap, finish="stop")
        _, fitted = compactor.with_ledger(text, ledger, self.after, self.limits.threshold,
                                          self.room.ledger)
        L.counts(L.to_stored(fitted))
        return fitted


def ledger_extract(ctx: Any) -> list[Figure]:
    size = QUICK_SPAN_TOKENS if ctx.quick else SPAN_TOKENS
    c = Compaction(size)
    previous = c.previous_ledger
    found = L.extract(c.span)
    carried = L.carry(previous, c.span)
    label = f"{sum(m.tokens for m in c.span):,}-token span, {len(c.span):,} msgs"
    extra = {"facts_in_span": len(found), "facts_carried": carried.kept,
             "previous_facts": previous.kept, "retired": carried.retired}
    return [
        Figure("ledger.extract", label, times_ms(lambda: (cold(), L.extract(c.span)),
                                                  ctx.repeat), "ms",
               note=f"{len(found):,} facts found", extra=extra),
        Figure("ledger.carry (previous ledger + span)", label,
               times_ms(lambda: (cold(), L.carry(previous, c.span)), ctx.repeat), "ms",
               note=f"{previous.kept:,} previous facts + the span's; {carried.retired} retired "
                    "(corrected, or a setting given a new value)", extra=extra),
    ]


def ledger_overhead(ctx: Any) -> list[Figure]:
    size = QUICK_SPAN_TOKENS if ctx.quick else SPAN_TOKENS
    c = Compaction(size)
    samples = times_ms(c.ledger_work, ctx.repeat)
    ledger = c.ledger_work()
    gate = times_ms(lambda: check_summary(c.reply, c.transcript, max_tokens=c.reserve,
                                          finish="stop"), ctx.repeat)
    label = (f"{sum(m.tokens for m in c.span):,}-token span, "
             f"{tokens.count_text(c.reply):,}-token summary")
    return [
        Figure("compaction's ledger + gate overhead", label, samples, "ms", "≤ 100 ms",
               median(samples) <= 100,
               note="ledger_of + prose_cap + check_summary + with_ledger + counts; "
                    f"{ledger.kept:,} facts kept, {ledger.dropped:,} dropped",
               extra={"facts_kept": ledger.kept, "facts_dropped": ledger.dropped}),
        Figure("check_summary (part of the above)", label, gate, "ms"),
    ]


def many_facts(n: int, seed: int = 11) -> L.Ledger:
    """A ledger of `n` distinct facts of every kind, a few to a message, oldest first."""
    rng, planter = random.Random(seed), Planter(random.Random(seed))
    said, seq, found = [], 1, 0
    while found < n:
        text = "Note: " + "; ".join(planter.fact() for _ in range(rng.randint(2, 3))) + "."
        said.append(Message("bench", seq, "user", text, None, None, None, None, None,
                            "complete", 0, 0))
        found += len(L.extract(said[-1:]))
        seq += rng.randint(1, 3)
    return L.Ledger(tuple(L.extract(said)[:n]))


def ledger_fit(ctx: Any) -> list[Figure]:
    n, budget = (500, 1_024) if ctx.quick else (5_000, 4_096)
    ledger = many_facts(n)
    fitted = L.fit(ledger, budget)
    return [Figure("ledger.fit", f"{ledger.kept:,} facts into {budget:,} tokens",
                   times_ms(lambda: L.fit(ledger, budget), ctx.repeat), "ms",
                   note=f"{fitted.kept:,} kept, {fitted.dropped:,} dropped",
                   extra={"kept": fitted.kept, "dropped": fitted.dropped})]


CASES = {
    "ledger-extract": ledger_extract,
    "ledger-overhead": ledger_overhead,
    "ledger-fit": ledger_fit,
}

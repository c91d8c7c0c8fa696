"""Key masking on hostile bodies (issue 31 item 7): long runs of escape characters must cost
linear time in the log filter, not a stall (an uncapped pattern took ~70 s on 100,000
backslashes; capped, ~0.05 s)."""

from __future__ import annotations

from typing import Any

from picochat.providers.redact import redact
from tests.bench.timing import Figure, times_ms

KEY = "sk-proj-Zq8vN3xR7tLm2WpK9yHd4BfJ6cGs1Ae5"
BODIES = {"backslashes": "\\" * 100_000, "%25 runs": "%25" * 50_000,
          "sk- then backslashes": "sk-" + "\\" * 100_000, "entity digits": "&#" + "0" * 100_000}


def redact_hostile(ctx: Any) -> list[Figure]:
    scale = 10 if ctx.quick else 1
    figures = []
    for name, body in BODIES.items():
        body = body[: len(body) // scale]
        samples = times_ms(lambda: redact(body, [KEY, "abc"]), ctx.repeat)
        figures.append(Figure(f"redact: {name}", f"{len(body):,} chars", samples, "ms",
                              "≤ 500 ms", sorted(samples)[len(samples) // 2] <= 500))
    return figures


CASES = {"redact_hostile": redact_hostile}

"""Figures and how they are taken: each case runs several times and reports median, min and
max; where a naive way exists it runs in the same process and the ratio is the figure to
quote, since one machine's absolute times drift from run to run. The terminal cases run a
floor (a bare Textual app, or the standard library making the same request) run by run beside
picochat and report picochat's figure as a ratio to it, per run."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Figure:
    case: str
    size: str
    samples: tuple[float, ...]
    unit: str                      # "ms", "s", "msg/s", "MiB", "×"
    target: str = ""               # the target, as text
    met: bool | None = None        # None: no target to compare with
    baseline: str = ""             # what the naive way is
    baseline_samples: tuple[float, ...] = ()
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    floor: str = ""                # what the floor is, measured in the same run
    floor_samples: tuple[float, ...] = ()
    ratios: tuple[float, ...] = ()  # picochat / floor, run by run

    @property
    def vs_floor(self) -> float | None:
        """The median of the run-by-run ratios to the floor (picochat / floor)."""
        return statistics.median(self.ratios) if self.ratios else None

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def ratio(self) -> float | None:
        """How many times better than the baseline (rates: ours / theirs; times: theirs / ours)."""
        if not self.baseline_samples or not self.median:
            return None
        base = statistics.median(self.baseline_samples)
        return self.median / base if self.unit.endswith("/s") else base / self.median

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "case": self.case, "size": self.size, "unit": self.unit,
            "median": round(self.median, 4), "min": round(min(self.samples), 4),
            "max": round(max(self.samples), 4), "runs": len(self.samples),
            "target": self.target, "met": self.met,
        }
        if self.baseline_samples:
            out["baseline"] = self.baseline
            out["baseline_median"] = round(statistics.median(self.baseline_samples), 4)
            out["ratio"] = round(self.ratio or 0.0, 2)
        if self.floor_samples:
            out["floor"] = self.floor
            out["floor_median"] = round(statistics.median(self.floor_samples), 4)
            out["floor_min"] = round(min(self.floor_samples), 4)
            out["floor_max"] = round(max(self.floor_samples), 4)
        if self.ratios:
            out["vs_floor"] = round(statistics.median(self.ratios), 3)
            out["vs_floor_min"] = round(min(self.ratios), 3)
            out["vs_floor_max"] = round(max(self.ratios), 3)
        if self.note:
            out["note"] = self.note
        out.update(self.extra)
        return out


def times_ms(fn: Callable[[], Any], repeat: int, setup: Callable[[], Any] | None = None,
             warmup: int = 1) -> tuple[float, ...]:
    """Wall time of `fn()` in milliseconds, `repeat` times after `warmup` untimed runs;
    `setup()` runs untimed before each."""
    out = []
    for i in range(warmup + repeat):
        if setup is not None:
            setup()
        start = time.perf_counter()
        fn()
        elapsed = (time.perf_counter() - start) * 1000
        if i >= warmup:
            out.append(elapsed)
    return tuple(out)


def per_run(ours: list[float], floor: list[float]) -> tuple[float, ...]:
    """Run-by-run ratios, ours / floor (the lists are paired: run i of each)."""
    if len(ours) != len(floor):
        raise ValueError(f"unpaired runs: {len(ours)} against {len(floor)} of the floor")
    return tuple(a / b for a, b in zip(ours, floor))


def at_most(limit: float) -> Callable[[float], bool]:
    return lambda value: value <= limit


def at_least(limit: float) -> Callable[[float], bool]:
    return lambda value: value >= limit

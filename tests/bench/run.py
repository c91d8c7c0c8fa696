"""Run picochat's benchmarks and print their figures.

    python -m tests.bench                 # every case, full sizes (10 minutes or more)
    python -m tests.bench --quick         # small sizes, to check that every case runs
    python -m tests.bench --only restore budget --repeat 9 --json figures.json
    python -m tests.bench --only tui-start tui-send ask tui-open   # issue 33's table

Each case builds its own data in a temporary folder through the real storage API, runs
several times, and prints a row: case, size, median, min, max, unit, the target and whether
it was met, and where a naive way exists, its median and the ratio (the figure to quote: this
machine is noisy). The terminal and process cases (tui-start, tui-send, ask, tui-open) run a
floor beside picochat, run by run: a bare Textual app, or the standard library making the same
request; their rows add the floor's median and picochat's ratio to it (median, min–max of the
runs). The last line is one JSON object with the same figures.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any, Callable

from tests.bench.timing import Figure

MODULES = ("tests.bench.process_cases", "tests.bench.floor_cases", "tests.bench.engine_cases",
           "tests.bench.ledger_cases", "tests.bench.tui_cases", "tests.bench.estimate_cases",
           "tests.bench.statement_cases", "tests.bench.redact_cases")


@dataclass(frozen=True)
class Context:
    quick: bool
    repeat: int
    folder: Path


def all_cases() -> dict[str, Callable[[Context], list[Figure]]]:
    cases: dict[str, Callable[[Context], list[Figure]]] = {}
    for name in MODULES:
        cases.update(importlib.import_module(name).CASES)
    return cases


def fmt(value: float, unit: str) -> str:
    if unit == "msg/s":
        return f"{value:,.0f}"
    if unit in ("×", "%"):
        return f"{value:.2f}"
    if unit == "MiB":
        return f"{value:,.1f}"
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def table(figures: list[Figure]) -> str:
    """One row a figure. The floor columns (the floor's median, and picochat's run-by-run
    ratio to it: median, min–max) and the naive column appear when some figure has them."""
    head = ["case", "size", "median", "min", "max", "unit", "floor", "× floor", "target", "met",
            "vs naive"]
    rows = []
    for f in figures:
        naive = f"{f.ratio:,.1f}× ({f.baseline})" if f.ratio is not None else ""
        met = {True: "yes", False: "NO", None: ""}[f.met]
        floor = fmt(median(f.floor_samples), f.unit) if f.floor_samples else ""
        vs = (f"{f.vs_floor:.2f}× ({min(f.ratios):.2f}–{max(f.ratios):.2f})"
              if f.ratios else "")
        rows.append([f.case, f.size, fmt(f.median, f.unit), fmt(min(f.samples), f.unit),
                     fmt(max(f.samples), f.unit), f.unit, floor, vs, f.target, met, naive])
    keep = [i for i, h in enumerate(head)
            if h not in ("floor", "× floor", "vs naive") or any(r[i] for r in rows)]
    rows = [[r[i] for i in keep] for r in [head, *rows]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(keep))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    floors = sorted({f.floor for f in figures if f.floor})
    notes = [f"  × floor is picochat / floor, run by run; floors: {'; '.join(floors)}"
             ] if floors else []
    for f in figures:  # a case's note once; its size too where its rows' notes differ
        if f.note:
            alike = {g.note for g in figures if g.case == f.case and g.note}
            line = f"  {f.case}{'' if len(alike) == 1 else f' ({f.size})'}: {f.note}"
            notes += [] if line in notes else [line]
    return "\n".join(lines + (["", "notes:"] + notes if notes else []))


def main(argv: list[str] | None = None) -> int:
    cases = all_cases()
    parser = argparse.ArgumentParser(prog="python -m tests.bench",
                                     description="picochat's benchmarks")
    parser.add_argument("--quick", action="store_true", help="small sizes, fewer runs")
    parser.add_argument("--repeat", type=int, help="timed runs per case (default 7; quick 3)")
    parser.add_argument("--only", nargs="+", choices=sorted(cases), metavar="CASE",
                        help=f"run only these: {', '.join(cases)}")
    parser.add_argument("--json", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 7)
    chosen = args.only or list(cases)
    figures: list[Figure] = []
    ids: list[str] = []  # the case each figure came from
    failures: dict[str, str] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="picochat-bench-") as tmp:
        os.environ["PICOCHAT_DATA_DIR"] = str(Path(tmp) / "data")
        os.environ["PICOCHAT_CONFIG_DIR"] = str(Path(tmp) / "config")
        for name in chosen:
            folder = Path(tmp) / name
            folder.mkdir()
            print(f"… {name}", file=sys.stderr, flush=True)
            try:
                got = cases[name](Context(args.quick, repeat, folder))
                figures.extend(got)
                ids.extend([name] * len(got))
            except Exception as exc:  # one broken case must not hide the others' figures
                failures[name] = f"{type(exc).__name__}: {exc}"
                print(f"  {name} failed: {failures[name]}", file=sys.stderr)
    print(table(figures))
    result: dict[str, Any] = {
        "quick": args.quick, "repeat": repeat, "cases": chosen,
        "seconds": round(time.perf_counter() - started, 1),
        "figures": [{"id": i, **f.as_dict()} for i, f in zip(ids, figures)],
        "failed": failures,
    }
    text = json.dumps(result, ensure_ascii=False)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    return 1 if failures else 0

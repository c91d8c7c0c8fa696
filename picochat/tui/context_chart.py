"""The checkpoint panel's chart of context tokens per turn. Bars rise from 0 (a compaction
that halves the context halves the bar), the axis names the largest figure and 0, and a ▴
under a turn marks where the context got smaller: a compaction (nothing else shrinks it)."""

from __future__ import annotations

from typing import Sequence

from rich.text import Text
from textual.widget import Widget

BARS = " ▁▂▃▄▅▆▇█"
MARK = "▴"


def drops(series: Sequence[int]) -> list[int]:
    """The turns (indexes) whose context is smaller than the turn's before."""
    return [i for i in range(1, len(series)) if series[i] < series[i - 1]]


def _columns(series: Sequence[int], plot: int) -> tuple[list[int], list[bool]]:
    """One value per column (the largest of the turns it holds) and whether a compaction
    falls in it. Few turns get up to three columns each; many share a column."""
    n, marked = len(series), set(drops(series))
    if n <= plot:
        each = max(1, min(3, plot // n))
        values = [v for v in series for _ in range(each)]
        marks = [i in marked and k == 0 for i in range(n) for k in range(each)]
        return values, marks
    spans = [(j * n // plot, (j + 1) * n // plot) for j in range(plot)]
    return ([max(series[a:b]) for a, b in spans],
            [any(a <= i < b for i in marked) for a, b in spans])


def chart(series: Sequence[int], width: int, height: int = 3) -> Text:
    """The chart as lines of text `width` wide: `height` rows of bars with the axis, a row of
    compaction marks and a caption."""
    if not series:
        return Text("No turns yet.", style="dim")
    top = max(series)
    label = max(len(f"{top:,}"), 1)
    plot = max(1, width - label - 2)
    values, marks = _columns(series, plot)
    steps = height * 8
    levels = [0 if v <= 0 or top <= 0 else min(steps, max(1, round(v / top * steps)))
              for v in values]
    out = Text(no_wrap=True, overflow="crop")
    for row in reversed(range(height)):
        name = f"{top:,}" if row == height - 1 else "0" if row == 0 else ""
        axis = " ┤" if name else " │"
        out.append(name.rjust(label) + axis, style="dim")
        out.append("".join(BARS[max(0, min(8, lv - row * 8))] for lv in levels))
        out.append("\n")
    out.append(" " * (label + 2) + "".join(MARK if m else " " for m in marks).rstrip(),
               style="bold")
    turns = "turn 1" if len(series) == 1 else f"turns 1–{len(series)}"
    said = f" · {MARK} compaction" if any(marks) else ""  # one after the last turn: no drop yet
    out.append(f"\n{turns}{said}", style="dim")
    return out


class ContextChart(Widget):
    """`chart` at the widget's width, redrawn when the panel's width changes."""

    DEFAULT_CSS = """
    ContextChart { height: auto; color: $secondary; }
    """

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.series: list[int] = []

    def show(self, series: Sequence[int]) -> None:
        self.series = list(series)
        self.refresh(layout=True)

    def render(self) -> Text:
        return chart(self.series, self.content_size.width or 40)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(chart(self.series, width).plain.splitlines())

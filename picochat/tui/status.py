"""The top bar: session, model (with an offline badge) and the context gauge, whose numbers
are the `/info` card's: the same ContextUsage value fills both."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from picochat.context_usage import ContextUsage


def gauge_text(usage: ContextUsage) -> str:
    b, lim = usage.budget, usage.budget.limits
    left = 100 * b.remaining_tokens / lim.threshold if lim.threshold else 0
    return (f"{b.used_tokens:,} / {lim.threshold:,} / {lim.window:,} · "
            f"{left:.0f}% left before auto-compact")


class StatusBar(Static):
    DEFAULT_CSS = """
    StatusBar { dock: top; height: 1; background: $panel; color: $text; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__("picochat", id="status")
        self.state = ""

    def show(self, usage: ContextUsage, state: str = "") -> None:
        self.state = state
        line = Text()
        line.append("picochat ", style="bold")
        line.append(f"· {usage.session.name} ", style="")
        if usage.model.offline:
            if usage.model.name != "offline":
                line.append(f"· {usage.model.name} ")
            line.append("· ")
            line.append(" offline ", style="reverse")
            line.append(" ")
        else:
            line.append(f"· {usage.model.name} ")
        b, lim = usage.budget, usage.budget.limits
        ratio = b.used_tokens / lim.threshold if lim.threshold else 1
        style = "green" if ratio < 0.7 else "yellow" if ratio < 1 else "red"
        line.append("· ")
        line.append(gauge_text(usage), style=style)
        if state:
            line.append(f" · {state}", style="bold")
        self.update(line)

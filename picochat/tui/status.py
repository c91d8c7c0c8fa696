"""The top bar: session, model (with an offline badge) and the context gauge, whose numbers
are the `/info` card's: the same ContextUsage value fills both."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from picochat.context_usage import ContextUsage
from picochat.models import ResolvedModel
from picochat.tui.safe import literal


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

    def _head(self, session_name: str, model: ResolvedModel) -> Text:
        line = Text()
        line.append("picochat ", style="bold")
        line.append(literal(f"· {session_name} "))  # names come from the user and the config
        if model.offline:
            if model.name != "offline":
                line.append(literal(f"· {model.name} "))
            line.append("· ")
            line.append(" offline ", style="reverse")
            line.append(" ")
        else:
            line.append(literal(f"· {model.name} "))
        return line

    def counting(self, session_name: str, model: ResolvedModel, state: str = "") -> None:
        """Before the tokenizer has loaded: everything but the figures."""
        self.state = state
        line = self._head(session_name, model)
        line.append("· counting the context…", style="dim")
        if state:
            line.append(literal(f" · {state}", style="bold"))
        self.update(line)

    def show(self, usage: ContextUsage, state: str = "") -> None:
        self.state = state
        line = self._head(usage.session.name, usage.model)
        b, lim = usage.budget, usage.budget.limits
        ratio = b.used_tokens / lim.threshold if lim.threshold else 1
        style = "green" if ratio < 0.7 else "yellow" if ratio < 1 else "red"
        line.append("· ")
        line.append(gauge_text(usage), style=style)
        if state:
            line.append(literal(f" · {state}", style="bold"))
        self.update(line)

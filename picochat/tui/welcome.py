"""What an empty session shows: who answers, how to reach a real model, the keys that matter.

Shown only while the session has no messages (the first one sent replaces it), never stored: the transcript is what the
database holds, and a welcome is not part of the conversation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Static

from picochat.tui.safe import literal

if TYPE_CHECKING:  # the model opens after the first frame
    from picochat.models import ResolvedModel

KEYS = "Enter sends · ctrl+j adds a line · F1 help · F2 checkpoints · ctrl+q quits"


def welcome_text(model: ResolvedModel, window: int, statements: int) -> str:
    """The welcome for `model` (the offline model gets the way to a real one); `statements`:
    how many of the user's statements the exact facts' share holds at least, at this window."""
    kept = (f"at least {statements:,} of your statements kept with their subject"
            if statements > 0 else "your statements kept with their subject")
    if model.offline:
        return "\n".join([
            "Welcome to picochat.",
            "",
            "You are talking to the built-in offline model: no network and no key. It only "
            "reflects what you send, so you can try everything here, compaction included: "
            f"{kept}, pastes as pointer lines, /pin TEXT word for word in every request.",
            "",
            "To talk to a real model, pick one of:",
            "  · export OPENAI_API_KEY=… (or ANTHROPIC_API_KEY=…) and start picochat again",
            "  · start Ollama with a model pulled: picochat finds it",
            "  · /model NAME here, e.g. /model openai/gpt-4o-mini",
            "  · picochat config init, then edit the file it writes (a server of your own)",
            "",
            KEYS,
        ])
    return "\n".join([
        "Welcome to picochat.",
        "",
        f"You are talking to {model.label}, with a window of {window:,} tokens. Long chats are "
        f"compacted as they grow: {kept}, pastes and old tool "
        "results as pointer lines (past their share the oldest are counted, and /search finds "
        "them); /pin TEXT keeps a statement word for word in every request, never dropped. F2 "
        "shows what was summarized.",
        "",
        KEYS,
    ])


class Welcome(Static):
    DEFAULT_CSS = """
    Welcome { margin: 1 0 0 0; padding: 1 2; border: round $primary 50%; color: $text; }
    """

    def __init__(self, model: ResolvedModel, window: int, statements: int) -> None:
        super().__init__(literal(welcome_text(model, window, statements)),
                         classes="until-first")

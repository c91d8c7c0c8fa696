"""The keys F1 lists beside the app's bindings: the prompt's, the hints', the panel's and
selection's, which live on those widgets (or in the terminal) rather than on the app."""

from __future__ import annotations

from typing import Iterable

from textual.binding import Binding

from picochat.tui import slash

KEYS: tuple[tuple[str, str], ...] = (
    ("enter", "send"),
    ("ctrl+j", "newline (also shift+enter where the terminal reports it; most report "
               "alt+enter as enter, which sends)"),
    ("esc or ctrl+c", "stop the running answer (esc also closes the slash-command list)"),
    ("up / down", "earlier prompts; with the slash-command list open, walk it"),
    ("pageup / pagedown", "scroll the transcript a page (from the prompt too)"),
    ("ctrl+home / ctrl+end", "the transcript's start (older messages load) / its newest "
                             "message, following new text again"),
    ("up (empty prompt, while queued)", "take the newest queued message back to edit it "
                                        "(Enter sends it again; up again takes the one "
                                        "before)"),
    ("tab / shift+tab", "complete a slash command, then walk the list"),
    ("ctrl+z (in the panel)", "undo the summary in use, after asking"),
    ("alt+↑ or click", "select a message or code block; then ↑ / ↓ move, c copies, alt+p pins "
                       "a message (kept word for word in every request), e edits one of "
                       "yours and sends it as a new branch from there, enter "
                       "expands or folds a long message of yours, enter elsewhere or typing "
                       "goes back to the prompt"),
    ("← / → (a selected code block)", "scroll a block wider than the screen sideways; "
                                      "home / end go to its edges (shift+wheel too)"),
    ("ctrl+p", "command palette"),
    ("//text", "send text that starts with /"),
)


def help_rows(bindings: Iterable[Binding | tuple[str, ...]]) -> list[tuple[str, str]]:
    """F1's card: the app's own bindings, the other keys, then every slash command."""
    rows = [(b.key_display or b.key, b.description) for b in bindings if isinstance(b, Binding)]
    rows += KEYS
    rows += [(f"/{c.name} {c.args}".strip(), c.help) for c in slash.COMMANDS]
    return rows

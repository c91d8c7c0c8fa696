"""Slash commands: names, one-line help, parsing, and the nearest name for a typo.

Pure and UI-free, so the app, the completion pop-up, the command palette and F1 help all read
the same table."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    name: str
    args: str
    help: str


COMMANDS: tuple[Command, ...] = (
    Command("compact", "[--preview] [focus|all]",
            "summarize older turns now (all: all but the newest; --preview: see, edit or drop "
            "it before it is written); the raw history stays"),
    Command("uncompact", "", "undo the last compaction (or, with none in use, the last /clear)"),
    Command("info", "", "context usage: window, threshold, what is used"),
    Command("context", "", "where the window goes: a bar and a table of its parts"),
    Command("tools", "[on|off]", "the tools offered; off drops their schemas for this session"),
    Command("checkpoints", "", "show or hide the checkpoint panel"),
    Command("clear", "", "start the context afresh; the raw history and the pins stay "
                         "(/uncompact brings it back)"),
    Command("pin", "TEXT", "keep a statement word for word in every request, never "
                           "summarized (or select a message and press alt+p)"),
    Command("pins", "", "list the pins and what they cost"),
    Command("unpin", "N", "remove pin N"),
    Command("stop", "", "stop the running answer (Esc)"),
    Command("undo", "", "take back the last turn from the context"),
    Command("retry", "", "take back the last turn and ask it again"),
    Command("new", "[name]", "start a new session"),
    Command("sessions", "", "switch to another session"),
    Command("branches", "", "list this session's branches and switch to one (ctrl+b); e on "
                            "an earlier message of yours starts one"),
    Command("fork", "[NAME]", "a new session that starts with this one's context (its "
                              "summary, ledger and pins); this one stays as it is"),
    Command("rename", "NAME", "rename this session"),
    Command("delete", "", "delete this session (asks first; the rows are kept)"),
    Command("model", "[NAME]", "show or switch this session's model; the budget follows"),
    Command("system", "[TEXT]", "show or set this session's system prompt (default resets)"),
    Command("search", "TEXT", "search the whole raw history (\"quotes\" for a phrase); pick a "
                              "match to jump to it"),
    Command("copy", "", "copy the last answer to the clipboard"),
    Command("export", "[md|json] [PATH] [--all-branches]", "write the branch on screen to a "
                                                              "file (or every branch)"),
    Command("theme", "[NAME]", "list themes, or switch and remember one"),
    Command("reload", "", "read the config file again and apply what changed"),
    Command("help", "", "keys and commands"),
    Command("quit", "", "leave picochat (ctrl+q)"),
)
BY_NAME = {c.name: c for c in COMMANDS}


@dataclass(frozen=True)
class Parsed:
    name: str
    arg: str


class UnknownCommand(ValueError):
    def __init__(self, name: str, suggestion: str | None,
                 starting: tuple[str, ...] = ()) -> None:
        if len(starting) > 1:  # the start of several: which ones, not "unknown"
            listed = ", ".join(f"/{c}" for c in starting)
            message = f"/{name} could be {listed}: type more of it, or Tab"
        else:
            hint = f"; did you mean /{suggestion}?" if suggestion else "; /help lists them"
            message = f"unknown command /{name}{hint}"
        super().__init__(message)
        self.name = name
        self.suggestion = suggestion
        self.starting = starting


def is_command(text: str) -> bool:
    """A leading slash makes a command; `//text` sends "/text" as a message."""
    return text.startswith("/") and not text.startswith("//")


def parse(text: str) -> Parsed:
    """`/name rest…` → Parsed; raises UnknownCommand naming the nearest command."""
    body = text.strip()[1:]
    name, _, arg = body.partition(" ")
    name = name.lower()
    if name not in BY_NAME:
        close = difflib.get_close_matches(name, BY_NAME, n=1, cutoff=0.5)
        prefix = [c for c in BY_NAME if name and c.startswith(name)]
        raise UnknownCommand(name, prefix[0] if len(prefix) == 1 else (close[0] if close
                                                                        else None),
                             tuple(prefix))
    return Parsed(name, arg.strip())


def completions(text: str) -> list[Command]:
    """Commands whose name starts with what follows the slash (all of them for a bare '/')."""
    if not is_command(text) or " " in text:
        return []
    typed = text[1:].lower()
    return [c for c in COMMANDS if c.name.startswith(typed)]


def complete(text: str) -> str | None:
    """What Tab turns `text` into: the one matching command (with a space when it takes an
    argument), else the longest prefix the matches share; None when there is nothing to add."""
    matches = completions(text)
    if not matches:
        return None
    if len(matches) == 1:
        c = matches[0]
        return f"/{c.name}" + (" " if c.args else "")
    names = [c.name for c in matches]
    shared = os.path.commonprefix(names)
    return f"/{shared}" if len(shared) > len(text) - 1 else None


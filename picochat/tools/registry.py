"""The built-in tools by name; turning a model's call into a result that never raises."""

from __future__ import annotations

import json
import posixpath
import re
import unicodedata
import logging
from typing import Any, Iterable

from picochat.textsafe import clean
from picochat.tools.base import ERROR, OK, Tool, ToolContext, ToolError, ToolResult
from picochat.tools.files import READ_FILE
from picochat.tools.history import HISTORY_SEARCH, TIMELINE_RECALL

log = logging.getLogger("picochat.tools")

BUILTIN: dict[str, Tool] = {t.name: t for t in (HISTORY_SEARCH, TIMELINE_RECALL, READ_FILE)}


def schemas(enabled: Iterable[str]) -> tuple[dict[str, Any], ...]:
    """The OpenAI-format tool list for the enabled tools, in a stable order."""
    wanted = set(enabled)
    return tuple(t.schema() for name, t in BUILTIN.items() if name in wanted)


def run_tool(name: str, arguments: str | None, ctx: ToolContext,
             enabled: Iterable[str] | None = None) -> ToolResult:
    """Run one call. Unknown tools, bad arguments and failures are error results."""
    tool = BUILTIN.get(name)
    if tool is None or (enabled is not None and name not in set(enabled)):
        choices = ", ".join(sorted(enabled if enabled is not None else BUILTIN))
        return ToolResult(ERROR, f"error: no tool named {name!r}; available: {choices}")
    try:
        args = json.loads(arguments) if arguments and arguments.strip() else {}
    except ValueError:
        return ToolResult(ERROR, "error: the arguments are not valid JSON")
    if not isinstance(args, dict):
        return ToolResult(ERROR, "error: the arguments must be a JSON object")
    try:
        return ToolResult(OK, tool.run(args, ctx))
    except ToolError as exc:
        return ToolResult(ERROR, f"error: {exc}")
    except Exception as exc:  # a bug in a tool must not kill the turn
        log.error("tool_crashed tool=%s kind=%s", name, type(exc).__name__)
        return ToolResult(ERROR, f"error: the tool failed ({type(exc).__name__})")


DETAIL_CHARS = 60


def call_detail(name: str, arguments: str | None, result: str) -> str:
    """What a tool line shows beside the tool's name, so a user sees what was read or
    searched: `notes.md · 2,345 chars`, `“canary host”`, `#14`. The arguments are the model's
    words: shown cleaned and cut, never trusted."""
    try:
        args = json.loads(arguments) if arguments and arguments.strip() else {}
    except ValueError:
        args = {}
    if not isinstance(args, dict):
        args = {}
    size = "" if result.startswith("error:") else f" · {len(result):,} chars"  # a refusal
    if name == "read_file" and isinstance(args.get("path"), str):
        return f"{_shown(posixpath.normpath(args['path']))}{size}"
    if name == "history_search" and args.get("seq") is not None:
        return f"#{_shown(args.get('seq'))}{size}"
    if args.get("query") is not None:
        return f"“{_shown(args.get('query'))}”"
    return size.removeprefix(" · ")


def tool_label(name: str | None) -> str:
    """A tool's name as a line shows it: the model chose it, so it is cleaned and kept to one
    short line like its arguments."""
    return _shown(name or "tool")


def _shown(value: object) -> str:
    """The model's text on one line: no escapes, no invisible characters, and cut in the
    middle when long, so a path keeps its file name (`src/…/deploy_notes.txt`)."""
    text = "".join("?" if unicodedata.category(c) == "Cf" else c for c in clean(str(value)))
    flat = re.sub(r"[^\S ]+", " ", text).strip()  # one line; its spaces as the model wrote them
    if len(flat) <= DETAIL_CHARS:
        return flat
    keep = DETAIL_CHARS - 1
    return flat[: keep // 3] + "…" + flat[len(flat) - (keep - keep // 3):]

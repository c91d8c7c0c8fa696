"""What a tool is: a name, a JSON-schema of its arguments, and a function from arguments and
context to a result."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from picochat.storage.store import Store
from picochat.tools.access import FileAccess

OK = "ok"
ERROR = "error"


@dataclass(frozen=True)
class ToolContext:
    store: Store
    session_id: str
    root: Path  # read_file is confined to this directory (where picochat was started)
    before_seq: int | None = None  # the running turn's first seq: searches leave it out
    access: FileAccess | None = None  # the roots and refusals in force (None: `root` alone)

    @property
    def files(self) -> FileAccess:
        return self.access or FileAccess((self.root,))


@dataclass(frozen=True)
class ToolResult:
    status: str   # OK | ERROR: kept as the tool message's `tool_status`
    content: str


class ToolError(Exception):
    """A tool's refusal or failure, worded for the model (and the user reading along)."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: Mapping[str, Any]
    run: Callable[[Mapping[str, Any], ToolContext], str]

    def schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name,
                                                 "description": self.description,
                                                 "parameters": dict(self.parameters)}}


def int_arg(args: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolError(f"`{name}` must be a number")
    return max(low, min(high, int(value)))


def str_arg(args: Mapping[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"`{name}` is required and must be a non-empty string")
    return value

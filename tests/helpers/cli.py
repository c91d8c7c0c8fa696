"""Running the `picochat` command as a user does, and reading what it printed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CliResult:
    status: int
    stdout: str
    stderr: str

"""The slash-command table: every command the hints, F1 and the palette offer has a handler,
and no handler hides without a command to reach it."""

from __future__ import annotations

from picochat.tui import commands, slash


def test_every_listed_command_has_a_handler_and_every_handler_a_listing():
    assert set(commands.HANDLERS) == set(slash.BY_NAME)
    assert all(callable(h) for h in commands.HANDLERS.values())

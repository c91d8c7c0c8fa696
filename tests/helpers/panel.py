"""The checkpoint panel in a pilot: opening it, and reading what it shows on screen."""

from __future__ import annotations

from textual.widgets import OptionList

from picochat.tui.panel import CheckpointPanel
from tests.helpers.waiting import settle


async def open_panel(pilot, app) -> CheckpointPanel:
    await pilot.press("f2")
    panel = app.query_one(CheckpointPanel)
    await settle(pilot, app, lambda: panel_drawn(app, panel),
                 what="the panel never opened filled, focused and drawn")
    return panel


def panel_drawn(app, panel: CheckpointPanel) -> bool:
    """The panel is open, filled and on screen: its list has the focus, and the line its
    filling writes last (what the summary in use covers, or "No summary in use") is drawn."""
    if not panel.has_class("open") or not panel.query("#cp-meta"):
        return False
    if not (isinstance(app.focused, OptionList) and panel in app.focused.ancestors):
        return False
    first = " ".join(str(panel.query_one("#cp-meta").render()).split()[:4])
    return bool(first) and first in " ".join(line.strip() for line in panel_lines(app))


def panel_lines(app) -> list[str]:
    """What the panel shows on screen, row by row (the compositor's characters)."""
    region = app.query_one(CheckpointPanel).region
    strips = app.screen._compositor.render_strips()
    rows = ["".join(segment.text for segment in strip) for strip in strips]
    return [row[region.x:region.right].removeprefix("│").rstrip()
            for row in rows[region.y:region.bottom]]

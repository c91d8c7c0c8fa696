"""Wide code blocks scroll sideways (issue 35.8: code was cut at the screen's edge, with no
way to read the rest). A selected block that is wider than the transcript: ←/→ move it half
its width, home/end go to its edges, and a thin bar under it says there is more; the footer
offers ←→ only then. A narrow block leaves the arrows and home/end to the transcript."""

from __future__ import annotations

from picochat.tui.answer import AssistantMessage, CodeFence
from picochat.tui.chat import UserMessage
from tests.helpers.storage import append_message
from tests.helpers.tui import make_app
from tests.helpers.waiting import settle

WIDE = "ports = [" + ", ".join(str(8000 + i) for i in range(40)) + "]  # LAST-PORT"
NARROW = "print('hello')"
ANSWER = f"Wide:\n\n```python\n{WIDE}\nshort = 1\n```\n\nNarrow:\n\n```python\n{NARROW}\n```\n"


def screen_rows(app) -> list[str]:
    """What the terminal shows, row by row."""
    return ["".join(segment.text for segment in strip)
            for strip in app.screen._compositor.render_strips()]


def footer(app) -> str:
    return screen_rows(app)[-1]


def shows(app, text: str) -> bool:
    return any(text in row for row in screen_rows(app))


async def test_a_wide_code_block_scrolls_sideways_from_the_keyboard(store):
    session = store.create_session("t")
    append_message(store, session.id, "user", "which ports?", turn_id="x")
    append_message(store, session.id, "assistant", ANSWER, turn_id="x")
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: app.ready and len(app.query(CodeFence)) == 2)
        wide, narrow = app.query(CodeFence)
        await settle(pilot, app, lambda: wide.region.width > 0 and shows(app, "ports = ["))
        assert not shows(app, "LAST-PORT")  # cut at the screen's edge
        assert wide.wide and not narrow.wide

        await pilot.press("alt+up")          # the answer's last part: the narrow block
        await settle(pilot, app, lambda: app.focused is narrow)
        await pilot.pause()
        assert "Scroll" not in footer(app)   # nothing to the side of it
        await pilot.press("right", "end")
        assert narrow.scroll_x == 0 and app.focused is narrow
        await pilot.press("up")              # the arrows still walk the transcript
        await settle(pilot, app, lambda: app.focused is wide)
        await settle(pilot, app, lambda: "←→ Scroll" in footer(app),
                     what="the footer never offered the scroll")

        await pilot.press("right")
        await settle(pilot, app, lambda: wide.scroll_x > 0)
        first_step = wide.scroll_x
        assert first_step >= wide.scrollable_content_region.width // 3  # a real step
        assert not shows(app, "ports = [")   # the start moved out of view
        await pilot.press("end")
        await settle(pilot, app, lambda: shows(app, "LAST-PORT"),
                     what="the end of the wide line never came into view")
        assert wide.scroll_x == wide.max_scroll_x
        await pilot.press("left")
        await settle(pilot, app, lambda: wide.scroll_x < wide.max_scroll_x)
        await pilot.press("home")
        await settle(pilot, app, lambda: wide.scroll_x == 0 and shows(app, "ports = ["))
        await pilot.press("c")  # and c still copies the whole code, not what shows
        await settle(pilot, app, lambda: WIDE in (app.clipboard or ""))

        await pilot.press("up")  # on past the block: the answer, then the user's message
        await settle(pilot, app, lambda: isinstance(app.focused, AssistantMessage))
        await pilot.press("up")
        await settle(pilot, app, lambda: isinstance(app.focused, UserMessage))


async def test_an_empty_fence_at_the_end_of_an_answer_takes_no_room(store):
    """A small model's answers ended in a stray ``` (seen with SmolLM2): an empty fence drew
    five blank rows under each answer, and alt+↑ selected it."""
    session = store.create_session("t")
    append_message(store, session.id, "user", "the log?", turn_id="x")
    append_message(store, session.id, "assistant", "job=1072 status=ok\n```", turn_id="x")
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: app.ready and bool(app.query(AssistantMessage)))
        answer = app.query_one(AssistantMessage)
        await settle(pilot, app, lambda: answer.region.height > 0)
        assert [fence.display for fence in answer.query(CodeFence)] == [False]
        assert answer.region.height <= 2   # its one line, and the margin above it
        await pilot.press("alt+up")
        await settle(pilot, app, lambda: app.focused is answer)

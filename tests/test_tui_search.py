"""A /search jump (issue 22.10): the pick list says who wrote each hit as a reader would, and
the message it lands on is marked, whatever its kind (your message, an answer, a tool result),
in view and legible in every theme, until the next jump or the next message sent."""

from __future__ import annotations

from textual.widgets import OptionList

from picochat.tui.answer import AssistantMessage
from picochat.tui.chat import ChatView, ToolBlock
from picochat.tui.screens import PickScreen
from tests.helpers.tui import SIZE, chat_once, contrast, make_app, say
from tests.helpers.waiting import settle
from tests.helpers.storage import append_message

WORD = "zebrafish"  # only answer 5 (message 10) holds it


def _session(store, turns: int = 40):
    session = store.create_session("t")
    for i in range(1, turns + 1):
        append_message(store, session.id, "user", f"question {i}", turn_id=f"x{i}")
        append_message(store, session.id, "assistant",
                       f"answer {i} " + (f"{WORD} " if i == 5 else "") + "words " * 30,
                       turn_id=f"x{i}")
    return session


async def _jump(pilot, app, query: str) -> list[str]:
    """Search, pick the best hit; the list's lines as shown."""
    await say(pilot, f"/search {query}")
    await settle(pilot, app, lambda: isinstance(app.screen, PickScreen))
    options = app.screen.query_one(OptionList)
    lines = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
    await pilot.press("enter")
    await settle(pilot, app, lambda: bool(app.query(".found")))
    # the scroll lands after a refresh: wait until the found message's first row is on screen
    await settle(pilot, app, lambda: _top_in_view(app, app.query(".found").first()),
                 what="the jump never scrolled to the message")
    return lines


def _top_in_view(app, widget) -> bool:
    """The widget's first row is in the chat's visible area (where a jump puts it)."""
    region = widget.region
    return region.height > 0 and app.query_one(ChatView).region.contains(region.x, region.y)


def _in_view(app, widget) -> bool:
    return bool(widget.region.intersection(app.query_one(ChatView).region))


async def test_a_jump_to_an_answer_marks_it_in_view_until_the_next_message(store):
    _session(store)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, app.transcript_ready.is_set)
        target = lambda: [w for w in app.query(AssistantMessage) if w.seq == 10]  # noqa: E731
        assert not target()  # far above what the app mounts at open
        [line] = await _jump(pilot, app, WORD)
        assert line.startswith(f"message 10 · answer: answer 5 «{WORD}» words")
        [found] = app.query(".found")
        assert found is target()[0] and _in_view(app, found)
        await chat_once(pilot, app, store, "thanks, that was it")
        assert not app.query(".found")  # sending ends the jump


async def test_a_jump_to_a_tool_result_opens_and_marks_it(store):
    session = _session(store, turns=3)
    append_message(store, session.id, "user", "which port?", turn_id="t")
    append_message(store, session.id, "assistant", "", turn_id="t", tool_calls=[{
        "id": "call_1", "type": "function",
        "function": {"name": "history_search", "arguments": "{}"}}])
    tool = append_message(store, session.id, "tool", "the gateway listens on port 8443",
                          tool_call_id="call_1", name="history_search",
                          tool_status="ok", turn_id="t")
    append_message(store, session.id, "assistant", "Port 8443.", turn_id="t")
    append_message(store, session.id, "user", "is the gateway on 8443 still?", turn_id="u")
    store.undo_last_turn(session.id)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, app.transcript_ready.is_set)
        lines = await _jump(pilot, app, "gateway listens")  # the result first
        assert [line.split(":")[0] for line in lines] == [
            f"message {tool.seq} · tool result", f"message {tool.seq + 2} · you (undone)"]
        [found] = app.query(".found")
        assert isinstance(found, ToolBlock) and found.seq == tool.seq
        assert not found.collapsed and _in_view(app, found)  # the match itself shows


async def test_the_mark_shows_in_every_theme(store):
    """Over the found answer's first row as the screen paints it: its bar against the
    transcript's background at least 3:1 (WCAG's contrast for a non-text mark), its text on
    the tint at least 4.5:1, and the tint unlike the background around it. ANSI themes take
    the terminal's own colours, which cannot be measured here."""
    _session(store)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, app.transcript_ready.is_set)
        await _jump(pilot, app, WORD)
        [found] = app.query(".found")
        themes = sorted(t for t in app.available_themes if not t.startswith("ansi"))
        assert {"picochat-dark", "picochat-light", "picochat-high-contrast"} <= set(themes)
        applied: list[str] = []  # Textual says a theme is applied once its CSS is refreshed
        app.theme_changed_signal.subscribe(app, lambda t: applied.append(t.name))
        for theme in themes:
            if app.theme != theme:  # (the one in use is applied already: no change to wait for)
                app.theme = theme
                await settle(pilot, app, lambda: applied and applied[-1] == theme,
                             what=f"{theme} was never applied")
            await pilot.pause()  # and the screen repainted with it
            row = list(app.screen._compositor.render_strips()[found.region.y])
            x, cells = 0, []
            for segment in row:  # (x, segment) for each run of cells
                cells.append((x, segment))
                x += segment.cell_length

            def at(column: int):
                return next(s for start, s in reversed(cells) if start <= column)

            def rgb(colour):
                return tuple(colour.get_truecolor(app.ansi_theme))

            left = found.region.x
            around, bar, text = at(left - 1), at(left), at(left + 1)
            assert bar.text[0] == "█", theme
            background = rgb(around.style.bgcolor)
            assert contrast(rgb(bar.style.color), background) >= 3, theme
            assert contrast(rgb(text.style.color), rgb(text.style.bgcolor)) >= 4.5, theme
            assert rgb(text.style.bgcolor) != background, theme

"""The checkpoint panel as a user meets it (issue 22, items 7 and 8): the list of summaries is
the first thing it shows, undoing one asks first, a letter typed right after F2 is the start of
a message, the chart says what its bars measure, the panel fits the terminal, and it speaks of
summaries and message numbers, not of ids and generations."""

from __future__ import annotations

import pytest
from textual.widgets import Collapsible, OptionList

from picochat.context_usage import context_series
from picochat.models import resolve_model
from picochat.providers.offline import OfflineProvider
from picochat.tui.app import PicochatApp
from picochat.tui.chat import CheckpointDivider, ChatView
from picochat.tui.conversation import Conversation
from picochat.tui.prompt import Prompt
from picochat.tui.screens import ConfirmScreen
from tests.helpers.panel import open_panel, panel_lines
from tests.helpers.tui import SMALL_KEEP, chat_once, idle, say, type_keys
from tests.helpers.waiting import settle
from tests.helpers.storage import append_message

BARS = " ▁▂▃▄▅▆▇█"


def make_app(store, turns: int = 8, name: str = "t") -> PicochatApp:
    session = store.create_session(name)
    for i in range(turns):
        append_message(store, session.id, "user", f"q{i} " + "words " * 60, turn_id=f"x{i}")
        append_message(store, session.id, "assistant", f"a{i} " + "words " * 60,
                       turn_id=f"x{i}")
    return PicochatApp(store, session, resolve_model(SMALL_KEEP, "offline"),
                       OfflineProvider(0), SMALL_KEEP)


async def compact(pilot, app, store, then: int = 0) -> None:
    """/compact, then `then` more turns (so the chart has turns after the drop)."""
    await settle(pilot, app, lambda: app.ready)
    await say(pilot, "/compact")
    await settle(pilot, app, lambda: bool(app.query(CheckpointDivider))
                 and not app.worker.busy)
    for i in range(then):
        await chat_once(pilot, app, store, f"next {i} " + "words " * 40)


def active_id(store, app) -> str | None:
    return store.session(app.session.id).active_context_checkpoint_id


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_the_list_of_summaries_is_what_the_open_panel_shows_first(store, size):
    app = make_app(store)
    async with app.run_test(size=size) as pilot:
        await compact(pilot, app, store)
        panel = await open_panel(pilot, app)
        listing = panel.query_one(OptionList)
        assert app.focused is listing                         # ready to pick, as before
        assert listing.highlighted_option.id == active_id(store, app)  # the cursor on it
        shown = panel_lines(app)
        row = next((i for i, line in enumerate(shown) if "● Summary 1" in line), None)
        assert row is not None and row < 4                    # at the top, not below a summary
        assert panel.region.contains_region(listing.region)   # in view, not scrolled off
        assert listing.region.y < panel.query_one("#cp-summary").region.y


async def test_undo_asks_first_and_only_y_undoes(store):
    app = make_app(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await compact(pilot, app, store)
        [cp] = store.checkpoints(app.session.id)
        await open_panel(pilot, app)
        await pilot.press("ctrl+z")
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen))
        question = str(app.screen.query_one("Static").render())
        assert "Undo Summary 1" in question
        assert f"messages 1–{cp.first_retained_seq - 1}" in question
        assert "whole conversation" in question               # what the model reads after
        await pilot.press("n")
        # the dialog answered and closed, and no command runs or waits: an undo would
        # have started by now
        await settle(pilot, app, lambda: not isinstance(app.screen, ConfirmScreen)
                     and idle(app))
        assert active_id(store, app) == cp.id
        await pilot.press("ctrl+z")
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("escape")
        await settle(pilot, app, lambda: not isinstance(app.screen, ConfirmScreen)
                     and idle(app))
        assert active_id(store, app) == cp.id
        assert app.query(CheckpointDivider)
        assert footer_offers_undo(app)
        await pilot.press("ctrl+z", "y")
        await settle(pilot, app, lambda: not app.query(CheckpointDivider))
        assert active_id(store, app) is None
        await settle(pilot, app, lambda: any("No summary in use" in line
                                             for line in panel_lines(app)))
        await settle(pilot, app, lambda: not footer_offers_undo(app))  # nothing left to undo
        await pilot.press("ctrl+z")
        # the key handled and every message it caused too (no time: the queues drained); a
        # dialog it opened would be on the screen by now
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)


def footer_offers_undo(app) -> bool:
    return any(b.binding.description == "Undo summary"
               for b in app.screen.active_bindings.values()
               if b.enabled and b.binding.show)


async def test_a_letter_typed_right_after_f2_starts_the_message(store):
    app = make_app(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await compact(pilot, app, store)
        [cp] = store.checkpoints(app.session.id)
        prompt = app.query_one(Prompt)
        prompt.focus()
        await pilot.press("f2", "u", "s", "e")
        await settle(pilot, app, lambda: prompt.text == "use" and app.focused is prompt,
                     what="the letters did not reach the prompt")
        assert prompt.text == "use" and app.focused is prompt
        assert not isinstance(app.screen, ConfirmScreen)
        assert active_id(store, app) == cp.id and app.query(CheckpointDivider)


async def test_a_question_typed_fast_into_the_open_panel_is_sent_whole(store):
    """F2, then a fast typist's "which port?" and Enter, as a terminal delivers them (all at
    once): the text went to the prompt, but Enter reached the panel's list before the focus
    did, opened a summary and the message was never sent."""
    app = make_app(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        panel = await open_panel(pilot, app)
        count = len(store.history(app.session.id))
        type_keys(app, "which port?\n")
        await settle(pilot, app, lambda: len(store.history(app.session.id)) == count + 2
                     and not app.worker.busy)
        assert store.history(app.session.id)[count].content == "which port?"
        assert app.query_one(Prompt).text == "" and panel.reading is None


async def test_the_chart_shows_tokens_from_zero_and_marks_the_compaction(store):
    app = make_app(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await compact(pilot, app, store, then=3)
        fixed = app.worker.budget().parts.fixed   # the system prompt and tools
        series = context_series(store.history(app.session.id),
                                store.checkpoints(app.session.id), fixed,
                                app.worker.limits.token_factor)
        assert min(series) < max(series) / 2    # a first turn far below the largest
        # measured as the top bar measures: a turn's context holds the system prompt too,
        # before the compaction as after it (a checkpoint's figure always did)
        first = next(m for m in store.history(app.session.id) if m.role == "user")
        assert series[0] == fixed + first.tokens
        await open_panel(pilot, app)
        shown = panel_lines(app)
        top = next((i for i, line in enumerate(shown) if f"{max(series):,} ┤" in line), None)
        assert top is not None, "the axis names the largest figure"
        axis = shown[top].index("┤") + 1
        assert shown[top + 2][:axis].split()[-2:] == ["0", "┤"]  # the axis: largest and 0
        rows = [shown[top + k][axis:].rstrip() for k in range(3)]
        # the chart's columns: the bottom row is drawn for every turn (none is 0 tokens); a
        # glyph further right (the panel's scrollbar, where the text's length puts it) is not
        width = len(rows[2].split(" ", 1)[0])
        levels = [sum(BARS.index(r[c]) if c < len(r) else 0 for r in rows)
                  for c in range(width)]
        assert max(levels) == 24
        # scaled from 0: the smallest turn's bar is its share of the largest, not empty
        assert abs(min(levels) - min(series) / max(series) * 24) <= 1
        marks = shown[top + 3][axis:]
        assert "▴" in marks and any("▴ compaction" in line for line in shown)
        where = marks.index("▴")
        assert levels[where] < levels[where - 1]              # under the drop it marks


async def test_the_panel_follows_the_terminal_width(store):
    widths = {}
    for size in [(80, 24), (120, 40)]:
        app = make_app(store, name=f"at {size[0]}")
        async with app.run_test(size=size) as pilot:
            panel = await open_panel(pilot, app)
            widths[size[0]] = panel.outer_size.width
            if size[0] == 80:
                assert app.query_one(ChatView).outer_size.width >= 44  # the chat stays usable
            assert 34 <= panel.outer_size.width <= size[0] // 2
            assert any("No summary in use" in line for line in panel_lines(app))
    assert widths[120] > widths[80]


async def test_a_narrow_terminal_gives_the_panel_the_whole_width_and_a_message_closes_it(
        store):
    """Beside the chat, the panel's 34 columns would leave a 60-column terminal a chat of 26
    (and a 50-column one 16): there it takes the whole width while open, and sending a
    message from the prompt brings the chat back to show the answer."""
    app = make_app(store, turns=60)  # more messages than a page: paging must stay put
    async with app.run_test(size=(60, 24)) as pilot:
        chat = app.query_one(Conversation)  # the transcript and all it holds
        transcript = app.query_one(ChatView)
        await settle(pilot, app, lambda: app.ready)
        first_shown = transcript._first_seq
        panel = await open_panel(pilot, app)
        assert panel.outer_size.width == 60 and not chat.display
        assert any("No summary in use" in line for line in panel_lines(app))
        height = panel.region.height
        await pilot.resize_terminal(60, 40)  # taller: a hidden chat has nothing to fill
        # the new size laid out (the panel grew), the callbacks after that refresh run, and
        # no page of older messages is on its way: a fill would have begun by now
        await settle(pilot, app, lambda: panel.region.height > height)
        await pilot.pause()
        await settle(pilot, app, lambda: not any(w.group == "older" and not w.is_finished
                                                 for w in app.workers))
        assert transcript._first_seq == first_shown
        await pilot.press("f2")
        await settle(pilot, app, lambda: chat.display and not panel.is_open)
        assert chat.outer_size.width == 60

        await open_panel(pilot, app)
        await say(pilot, "a question while the panel is open")
        await settle(pilot, app, lambda: not panel.is_open and chat.display)
        assert app.focused is app.query_one(Prompt)

        await pilot.resize_terminal(120, 40)  # wide again: side by side, as before
        await open_panel(pilot, app)
        assert chat.display and 34 <= panel.outer_size.width <= 60


async def test_in_a_narrow_terminal_nothing_happens_in_the_chat_the_panel_hides(store):
    """A command's outcome, a selection and a focused message all belong to the chat: below
    76 columns each brings it back (or, on a resize, hands the focus to the prompt) rather
    than acting unseen behind the panel."""
    app = make_app(store)
    async with app.run_test(size=(60, 24)) as pilot:
        chat, prompt = app.query_one(Conversation), app.query_one(Prompt)
        await settle(pilot, app, lambda: app.ready)
        panel = await open_panel(pilot, app)
        await say(pilot, "/nosuchcommand")  # its "unknown command" line is in the chat
        await settle(pilot, app, lambda: not panel.is_open and chat.display)

        await open_panel(pilot, app)
        await say(pilot, "/checkpoints")  # the one command that is about the panel: a toggle
        await settle(pilot, app, lambda: not panel.is_open)

        await open_panel(pilot, app)
        await pilot.press("alt+up")  # select messages: in view, not behind the panel
        await settle(pilot, app, lambda: not panel.is_open and chat.display)
        assert app.focused is not None and chat in app.focused.ancestors

        await pilot.resize_terminal(120, 40)
        await open_panel(pilot, app)
        await pilot.press("alt+up")  # wide: beside the panel, the selection stays in the chat
        await settle(pilot, app, lambda: app.focused is not None
                     and chat in app.focused.ancestors, what="no message was selected")
        assert panel.is_open and chat in app.focused.ancestors
        await pilot.resize_terminal(60, 24)  # narrow now: the selected message is hidden
        await settle(pilot, app, lambda: app.focused is prompt)
        assert panel.is_open and not chat.display


async def test_the_panel_speaks_of_summaries_and_messages_not_ids(store):
    app = make_app(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await compact(pilot, app, store)
        [cp] = store.checkpoints(app.session.id)
        panel = await open_panel(pilot, app)
        shown = " ".join(line.strip() for line in panel_lines(app))  # wrapped lines joined
        saved = cp.tokens_before - cp.tokens_after
        assert (f"Summary 1 · manual · saved {saved:,} tokens · covers messages "
                f"1–{cp.first_retained_seq - 1}") in shown
        assert f"messages {cp.first_retained_seq} onward are sent as they are" in shown
        assert "exact facts:" in shown
        for word in ("cp_", "seq", "gen ", "generation", "#", "->", "raw tail"):
            assert word not in shown, word
        details = panel.query_one("#cp-details", Collapsible)
        details.collapsed = False                              # the user opens the details
        await settle(pilot, app, lambda: cp.id in " ".join(panel_lines(app)),
                     what="the details never showed the checkpoint's id")


async def test_an_earlier_summary_says_why_the_model_no_longer_reads_it(store):
    app = make_app(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await compact(pilot, app, store, then=3)
        await say(pilot, "/compact")
        await settle(pilot, app, lambda: len(store.checkpoints(app.session.id)) == 2
                     and not app.worker.busy)
        await open_panel(pilot, app)
        await pilot.press("down", "enter")                   # the earlier one, from the list

        def shown() -> str:
            return " ".join(line.strip() for line in panel_lines(app))
        await settle(pilot, app, lambda: "Summary 1 · manual" in shown(),
                     what="the earlier summary was never shown")
        shown = shown()
        assert "Summary 1 · manual" in shown
        assert "Not in use: Summary 2, in use, includes it" in shown


def footer_line(app) -> str:
    strips = app.screen._compositor.render_strips()
    return "".join(segment.text for segment in strips[-1])


async def test_every_key_of_the_footer_fits_at_80_columns_with_a_summary_to_undo(store):
    """With ^z shown beside the panel, the footer's last key used to be cut ("alt▏"): under
    100 columns it is compact and leaves the palette to ctrl+p and F1."""
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await compact(pilot, app, store)
        await open_panel(pilot, app)
        line = footer_line(app)
        for key in ("^z Undo summary", "ctrl+q Quit", "F1 Help", "F2 Checkpoints", "F3 Info",
                    "alt+↑ Select"):
            assert key in line, line
        await pilot.resize_terminal(120, 40)
        await settle(pilot, app, lambda: "^p palette" in footer_line(app),
                     what="the wide footer never showed")
        assert "^p palette" in footer_line(app) and "alt+↑ Select" in footer_line(app)

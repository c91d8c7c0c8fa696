"""The session picker (issue 35, item 5): `/sessions` lists every session with when it was last
active, its size, its model and how it began, most recently active first; typing filters it,
Enter opens the one highlighted; what it shows of names and first lines is plain text."""

from __future__ import annotations

import datetime as dt

from textual.widgets import OptionList

from picochat.messages import Session
from picochat.tui.session_picker import Row, SessionPicker, label, matching, when
from tests.helpers.storage import append_message
from tests.helpers.tui import make_app, say
from tests.helpers.waiting import settle


def shown(app) -> list[str]:
    options = app.screen.query_one("#sp-list", OptionList)
    return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]


async def test_sessions_are_listed_with_how_they_began_and_typing_filters_them(store):
    for name, first in (("deploy", "How do we roll back the payments deploy?"),
                        ("redis", "Our Redis cache runs on 6380; why is it slow?"),
                        ("[b]x[/b]", "[@click=app.quit]hi[/]\nsecond line")):
        sid = store.create_session(name).id
        append_message(store, sid, "user", first, turn_id="t")
        append_message(store, sid, "assistant", "ok", turn_id="t")
    app = make_app(store, name="redis")
    async with app.run_test(size=(110, 36)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/sessions")
        await settle(pilot, app, lambda: isinstance(app.screen, SessionPicker))
        await pilot.pause()
        rows = shown(app)
        [mine] = [r for r in rows if r.startswith("● ")]  # the one on screen, marked
        assert mine.startswith("● redis") and "2 messages" in mine
        assert "offline" in mine  # the model it opens with: the default one, named
        assert "Our Redis cache runs on 6380; why is it slow?" in mine
        assert rows[0].startswith("  [b]x[/b]")  # the most recently active first
        assert any("[@click=app.quit]hi[/]" in r and "second line" not in r for r in rows)
        await pilot.press(*"roll back")
        await settle(pilot, app, lambda: len(shown(app)) == 1)
        assert shown(app)[0].startswith("  deploy")
        await pilot.press("enter")
        await settle(pilot, app, lambda: app.session.name == "deploy",
                     what="enter did not open the session found")
        assert app.is_running  # the click action in a first line never ran


def test_a_filter_matches_every_word_in_any_order_in_name_model_or_first_words():
    def row(name, first, model=None):
        return Row(Session(name, name, 0, 0, model, None, 0, 0, None, None), first, model or "")

    rows = [row("deploy", "roll back payments"), row("redis", "cache on 6380", "openai/qwen"),
            row("notes", "")]
    assert [r.session.name for r in matching(rows, "PAYMENTS roll")] == ["deploy"]
    assert [r.session.name for r in matching(rows, "qwen")] == ["redis"]
    assert [r.session.name for r in matching(rows, "")] == ["deploy", "redis", "notes"]
    assert matching(rows, "nothing") == []


def test_when_a_session_was_active_reads_as_a_time_today_a_day_this_year_else_a_date():
    now = dt.datetime(2026, 12, 6, 23, 0)
    at = lambda *a: int(dt.datetime(*a).timestamp() * 1000)  # noqa: E731
    assert when(at(2026, 12, 6, 9, 5), now) == "09:05"
    assert when(at(2026, 3, 2, 14, 0), now) == "Mar 2 14:00"
    assert when(at(2025, 11, 30, 8, 0), now) == "2025-11-30"
    long = Row(Session("s", "s", 0, 0, None, None, 0, 0, None, None, None, 3), "x" * 300)
    assert str(label(long, False, now)).rstrip().endswith("…")


async def test_on_a_narrow_screen_each_row_is_cut_to_the_width_not_wrapped(store):
    """At 80 columns a first line wrapped its last word under the next row's name."""
    first = "Our Redis runs on port 6380 and the staging box is stage-db-02. Write a list"
    sid = store.create_session("chat-1").id
    append_message(store, sid, "user", first, turn_id="t")
    store.create_session("ops-notes")
    app = make_app(store, name="ops-notes")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/sessions")
        await settle(pilot, app, lambda: isinstance(app.screen, SessionPicker))
        await pilot.pause()
        rows = ["".join(seg.text for seg in strip)
                for strip in app.screen._compositor.render_strips()]
        [line] = [r for r in rows if "Our Redis runs on port 6380" in r]
        assert "…" in line
        at = rows.index(line)
        assert "chat-1" in rows[at - 1] and "Write" not in rows[at + 1]


def test_a_fork_says_whose_it_is_on_the_second_line_and_nothing_hangs_off_it():
    """A fork begins as its source did: "fork of X" comes first on the second line, where
    80 columns still show it. A first message with nothing visible adds nothing to it."""
    from picochat.messages import Session

    def row(first: str, fork_of: str = "") -> str:
        s = Session("s_1", "idea", 0, 0, None, None, 0, 0, None, None)
        return label(Row(s, first, "", fork_of), current=False).plain

    assert row("our redis runs on 6380", "work").split("\n")[1].strip() == \
        "fork of work · our redis runs on 6380"
    assert row(" \t\x00", "work").split("\n")[1].strip() == "fork of work"
    assert "\n" not in row(" \t\x00") and "\n" not in row("")

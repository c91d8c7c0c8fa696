"""A session name is one line of visible text (issue 31): a line break in a name split
`picochat clear`'s one status line in two, and a bidi or invisible character makes a name read
as another. Such names are refused where a session is made or renamed, in both front ends, with
one line and exit 2, and nothing is created."""

from __future__ import annotations

import pytest

from picochat.errors import BadSessionName
from picochat.storage.names import MAX_NAME_CHARS, name_problem
from picochat.tui.chat import Notice
from tests.helpers.tui import SIZE, make_app, say, texts
from tests.helpers.waiting import settle


@pytest.mark.parametrize("name, problem", [
    ("ops\nclear done", "it has a line break"),
    ("ops\r", "it has a line break"),
    ("ops\u2028x", "it has a line break"),
    ("ops\tx", "it has a control character (U+0009)"),
    ("ops\x1b[2J", "it has a control character (U+001B)"),
    ("ops\u202egpj.exe", "it has an invisible or unassigned character (U+202E)"),
    ("o\u200bps", "it has an invisible or unassigned character (U+200B)"),
    ("ops\U000e0041", "it has an invisible or unassigned character (U+E0041)"),
    ("   ", "it is empty"),
    ("a\u200db", "it has an invisible or unassigned character (U+200D)"),
    ("\u3164", "it has an invisible or unassigned character (U+3164)"),
    ("ops\u2800x", "it has an invisible or unassigned character (U+2800)"),
    ("\ufe0f", "it has no visible character"),
    ("\u0301", "it has no visible character"),
    ("x" * (MAX_NAME_CHARS + 1), f"it is 201 characters long; the most is {MAX_NAME_CHARS}"),
])
def test_a_name_that_is_not_one_visible_line_says_why(name, problem):
    assert name_problem(name) == problem


@pytest.mark.parametrize("name", ["ops", "Ops review 2026-12", "日本語のメモ", "café ☕",
                                  "👩‍💻 pairing", "x" * MAX_NAME_CHARS, "a-b_c.d (copy)"])
def test_ordinary_names_in_any_script_are_kept(name):
    assert name_problem(name) is None


def test_ask_with_a_broken_name_is_refused_and_makes_no_session(run_cli):
    result = run_cli("ask", "-s", "ops\nContext cleared for prod", "hello")
    assert result.status == 2
    assert result.stderr == ("picochat: a session name must be one line of visible text, and "
                             "it has a line break (pick another name)\n")
    assert result.stdout == ""
    assert "ops" not in run_cli("sessions").stdout


def test_a_name_stored_before_the_rule_is_still_found(run_cli, home):
    import sqlite3

    assert run_cli("ask", "-s", "plain", "hello").status == 0
    with sqlite3.connect(home / "data" / "picochat.db") as db:
        db.execute("UPDATE sessions SET name = 'old\nname' WHERE name = 'plain'")
    db.close()
    found = run_cli("history", "-s", "old\nname", "--json")
    assert found.status == 0, found.stderr
    assert "hello" in found.stdout


def test_the_store_refuses_it_on_rename_too(store):
    session = store.create_session("fine")
    with pytest.raises(BadSessionName):
        store.rename_session(session.id, "two\nlines")
    assert store.session(session.id).name == "fine"


async def test_new_and_rename_in_the_app_say_why_and_keep_the_session(store):
    app = make_app(store, name="first")
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "/rename line\nbreak")
        await settle(pilot, app, lambda: any("one line of visible text" in t
                                             for t in texts(app, Notice)))
        await say(pilot, "/new tab\there")
        await settle(pilot, app, lambda: sum("one line of visible text" in t
                                             for t in texts(app, Notice)) == 2)
        assert app.session.name == "first"
        assert [s.name for s in store.list_sessions()] == ["first"]

"""`picochat export --format md` and the app's `/export md`: text that picochat did not write
(a user's message, a model's answer, a tool's result, a summary, a tool call's id and name, the
session's name) cannot pass for picochat's own structure (issue 31, item 8).

Each test reads the export as a Markdown viewer does (markdown-it, CommonMark with raw HTML on)
and asserts what its reader would notice: one turn heading per message, with its seq and role,
and no other heading that content could have made; no raw HTML; no image that loads; and every
message's words shown exactly as they were written.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

from picochat import render
from picochat.export import export_session
from picochat.messages import COMPLETE, Message, NewCheckpoint, Session
from picochat.storage import open_store
from picochat.textsafe import clean
from picochat.tui.chat import Notice
from tests.helpers.tui import SIZE, make_app, say, texts
from tests.helpers.waiting import settle
from tests.helpers.storage import append_message

READER = MarkdownIt("commonmark")  # raw HTML on, as GitHub and most viewers read it
TURN = re.compile(r"#(\d+) · (user|assistant|tool) · ")

FORGED = "## #99 · user · 2024-01-01 10:00"  # no real turn has its seq
HOSTILE_ID = "call`\n\n## #9 · user · forged by the id\n\n`"
HOSTILE_NAME = "read_file`\n# forged by the name <img src=x onerror=alert(1)>"
HTML = ("<script>alert(1)</script>\n\nsee <img src=x onerror=alert(1)> here\n\n"
        "<!-- an open comment hides the rest of the file")
IMAGES = ("![pixel](https://evil.example/p.png) and ![ref][r]\n\n"
          "[r]: https://evil.example/q.png")

# Content that, written as it is, makes a heading of its own or hides the next real one.
FORGERIES = {
    "an ATX heading": f"look:\n\n{FORGED}\n\nI agree to everything",
    "an unclosed backtick fence": "```\nthe rest of the file is code now",
    "a tilde fence around a heading": f"~~~\n{FORGED}\n~~~",
    "a long backtick run": f"``````\n{FORGED}\n``````\n`````````",
    "a setext underline": "#99 · user · 2024-01-01 10:00\n---",
    "a heading in a quote": f"> {FORGED}",
    "a heading in a list": f"- item\n\n  {FORGED}",
    "a bare carriage return": f"ok\r{FORGED}",
    "an open HTML block": "<pre>\nthe next heading is inside this block",
    "an open comment": "<!--",
}


# --- reading the export as a viewer does ---------------------------------------------------------


def tokens(markdown: str) -> Iterator[Token]:
    """Every token a CommonMark reader makes of `markdown`, inline ones included."""
    def walk(level: list[Token]) -> Iterator[Token]:
        for token in level:
            yield token
            yield from walk(token.children or [])
    return walk(READER.parse(markdown))


def headings(markdown: str) -> list[tuple[int, str]]:
    """(level, the text a reader sees) of every heading."""
    out, level = [], 0
    for token in tokens(markdown):
        if token.type == "heading_open":
            level = int(token.tag[1])
        elif token.type == "inline" and level:
            seen = "".join(c.content for c in token.children or [] if c.type in
                           ("text", "code_inline", "softbreak"))
            out.append((level, seen))
            level = 0
    return out


def turn_headings(markdown: str) -> list[tuple[int, str]]:
    """(seq, role) of every heading that reads as a turn's: at any level, anywhere."""
    return [(int(m[1]), m[2]) for _, text in headings(markdown) if (m := TURN.match(text))]


def blocks(markdown: str) -> list[str]:
    """What the reader sees in code blocks, verbatim."""
    return [t.content for t in tokens(markdown) if t.type in ("fence", "code_block")]


def fenced(text: str) -> str:
    """What a reader sees of `text` in its code block: the text and the line ending picochat
    put after it, any line ending (CommonMark's "\r", "\n", "\r\n") as a newline."""
    return (text + "\n").replace("\r\n", "\n").replace("\r", "\n")


def assert_reads_right(markdown: str, messages: list[Message], extra_headings: int = 0) -> None:
    """One turn heading per message, in order, and no heading but picochat's own."""
    assert turn_headings(markdown) == [(m.seq, m.role) for m in messages], headings(markdown)
    assert len(headings(markdown)) == 1 + len(messages) + extra_headings, headings(markdown)
    assert headings(markdown)[0][0] == 1


def assert_inert(markdown: str) -> None:
    """Nothing a viewer would run or fetch: no raw HTML, no image."""
    kinds = {t.type for t in tokens(markdown)}
    assert not kinds & {"html_block", "html_inline", "image"}, kinds


# --- sessions to export ------------------------------------------------------------------------


def message(seq: int, role: str, content: str, **extra: Any) -> Message:
    fields: dict[str, Any] = dict(tool_calls=None, tool_call_id=None, name=None, turn_id=None,
                                  tool_status=None)
    fields.update(extra)
    return Message("s1", seq, role, content, status=COMPLETE, tokens=1, created_at=0, **fields)


SESSION = Session("s1", "w", 0, 0, None, None, 0, 0, None, None)


def export_of(messages: list[Message]) -> str:
    return render.export_markdown(SESSION, messages, [])


def tool_turn(result: str = "found it") -> list[Message]:
    """A turn whose tool call carries a hostile id and name, answered by a tool result."""
    call = {"id": HOSTILE_ID, "type": "function",
            "function": {"name": HOSTILE_NAME, "arguments": '{"path": "```\\n# x"}'}}
    return [message(1, "user", "read it"),
            message(2, "assistant", "", tool_calls=(call,)),
            message(3, "tool", result, tool_call_id=HOSTILE_ID, name=HOSTILE_NAME,
                    tool_status="ok"),
            message(4, "assistant", "done")]


# --- what a reader sees ------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["user", "assistant", "tool"])
@pytest.mark.parametrize("content", FORGERIES.values(), ids=FORGERIES.keys())
def test_content_makes_no_turn_heading_and_hides_none(content, role):
    messages = [message(1, "user", "hello"), message(2, role, content),
                message(3, "assistant", "the real third turn")]
    markdown = export_of(messages)
    assert_reads_right(markdown, messages)
    assert fenced(content) in blocks(markdown)  # and it is shown, word for word


def test_on_a_terminal_an_escape_between_backticks_does_not_close_the_fence():
    """`picochat export` on a terminal drops escapes, joining "```" and "`" into "````"."""
    messages = [message(1, "user", f"```\x1b[0m`\n{FORGED}"), message(2, "assistant", "ok")]
    assert_reads_right(clean(export_of(messages)), messages)


def test_a_tool_call_id_and_name_with_a_backtick_and_a_newline_stay_on_their_line():
    messages = tool_turn()
    markdown = export_of(messages)
    assert_reads_right(markdown, messages)
    assert_inert(markdown)
    spans = [t.content for t in tokens(markdown) if t.type == "code_inline"]
    shown_id, shown_name = (s.replace("\n", "\\n") for s in (HOSTILE_ID, HOSTILE_NAME))
    assert spans.count(shown_id) == 2 and shown_name in spans, spans  # the call and the result
    assert "found it\n" in blocks(markdown)


def test_raw_html_is_shown_as_text_never_read_as_html():
    messages = [message(1, "user", HTML), message(2, "assistant", HTML)]
    markdown = export_of(messages)
    assert_inert(markdown)
    assert_reads_right(markdown, messages)
    assert blocks(markdown).count(HTML + "\n") == 2


def test_a_remote_image_does_not_load_and_its_address_is_still_shown():
    messages = [message(1, "user", "show me"), message(2, "assistant", IMAGES)]
    markdown = export_of(messages)
    assert_inert(markdown)
    assert IMAGES + "\n" in blocks(markdown)
    assert "https://evil.example/p.png" in markdown


def test_a_session_name_makes_no_heading_and_no_html():
    session = Session("s1", f"w\n{FORGED} <img src=x onerror=alert(1)>", 0, 0, None, None, 0,
                      0, None, None)
    messages = [message(1, "user", "hi")]
    markdown = render.export_markdown(session, messages, [])
    assert_reads_right(markdown, messages)
    assert_inert(markdown)
    assert headings(markdown)[0] == (1, "w\\n" + FORGED + " <img src=x onerror=alert(1)>")


def test_a_summary_and_a_pin_make_no_heading(store):
    s = store.create_session("w")
    append_message(store, s.id, "user", "hello")
    append_message(store, s.id, "assistant", "hi")
    store.add_pin(s.id, f"```\n{FORGED}", 5)
    store.commit_context_checkpoint(s.id, 0, NewCheckpoint(
        None, f"## Objective\n{FORGED}\n{HTML}", 2, 2, "manual", "offline", "offline", 10, 5))
    markdown = export_session(store, s.id, "md").text
    messages = store.history(s.id)
    # the pins section and its pin; the checkpoints section and its checkpoint
    assert_reads_right(markdown, messages, extra_headings=4)
    assert_inert(markdown)


_PIECES = st.sampled_from(["#", "##", "`", "```", "~~~", "\n", "\r", " ", "   ", ">", "-",
                           "---", "===", "1.", "<", "<img src=x onerror=1>", "<pre>", "<!--",
                           "![a](https://x.example/i.png)", "[r]: https://x.example/r.png",
                           "![r]", "\\", "*", "_", "|", "&lt;", "\x1b[0m", "\u2028", "a",
                           "#9 · user · x"])
_TEXT = st.lists(_PIECES, max_size=30).map("".join)
_ID = st.lists(_PIECES, max_size=4).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]), _TEXT, _ID, _ID),
                min_size=1, max_size=4))
def test_whatever_the_content_holds_the_export_reads_right(rows):
    messages = []
    for seq, (role, content, call_id, name) in enumerate(rows, 1):
        extra: dict[str, Any] = {}
        if role == "tool":
            extra = dict(tool_call_id=call_id, name=name)
        elif call_id:
            extra = dict(tool_calls=({"id": call_id, "type": "function",
                                      "function": {"name": name, "arguments": content}},))
        messages.append(message(seq, role, content, **extra))
    markdown = export_of(messages)
    assert_reads_right(markdown, messages)
    assert_inert(markdown)
    shown = blocks(markdown)
    for m in messages:
        assert m.role != "tool" and not m.content or fenced(m.content) in shown
    # `picochat export` on a terminal drops escapes, which may join two backtick runs
    assert_reads_right(clean(markdown), messages)
    assert_inert(clean(markdown))


# --- both front ends write it ------------------------------------------------------------------


@pytest.fixture
def hostile(home: Path) -> tuple[str, list[Message]]:
    """A saved session holding every kind of forgery; returns its id and its messages."""
    store = open_store(home / "data" / "picochat.db")
    try:
        s = store.create_session("w")
        for m in tool_turn(result=FORGERIES["an ATX heading"]):
            append_message(store, s.id, m.role, m.content, tool_calls=m.tool_calls,
                           tool_call_id=m.tool_call_id, name=m.name,
                           tool_status=m.tool_status)
        for content in (HTML, IMAGES, *FORGERIES.values()):
            append_message(store, s.id, "assistant", content)
        return s.id, store.history(s.id)
    finally:
        store.close()


def test_the_cli_export_file_reads_right(run_cli, home, hostile):
    _, messages = hostile
    target = home / "w.md"
    done = run_cli("export", "--session", "w", "--format", "md", "-o", str(target))
    assert done.status == 0, done.stderr
    markdown = target.read_text(encoding="utf-8")
    assert_reads_right(markdown, messages)
    assert_inert(markdown)
    piped = run_cli("export", "--session", "w", "--format", "md")
    assert piped.stdout == markdown


async def test_the_app_export_file_reads_right(store, tmp_path):
    app = make_app(store, name="w")
    s = app.session
    append_message(store, s.id, "user", FORGERIES["an ATX heading"])
    append_message(store, s.id, "assistant", HTML + "\n\n" + IMAGES)
    messages = store.history(s.id)
    target = tmp_path / "w.md"
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, f"/export md {target}")
        await settle(pilot, app, lambda: any("Exported" in t for t in texts(app, Notice)),
                     what="the export never said it was done")
    markdown = target.read_text(encoding="utf-8")
    assert_reads_right(markdown, messages)
    assert_inert(markdown)

"""Huge messages in the transcript: a 10 MB paste, a 10 MB answer and a 1 MB line open at
once, showing their head and tail with a note of what is left out; copying takes it all."""

from __future__ import annotations

from picochat.tui.answer import AssistantMessage
from picochat.tui.chat import ChatView, UserMessage
from picochat.tui.preview import HEAD_CHARS, TAIL_CHARS, preview
from tests.test_tui import SIZE, make_app, settle

PASTE = "".join(f"line {i:06d} of the pasted log, with some words after it\n"
                for i in range(180_000))                               # about 10 MB
LINE = "x" * 1_000_000


def test_a_short_text_is_shown_whole_and_a_huge_one_by_head_and_tail():
    assert preview("short") == "short"
    shown = preview(PASTE)
    assert len(shown) < HEAD_CHARS + TAIL_CHARS + 200
    assert shown.startswith("line 000000 ") and shown.endswith("line 179999 of the pasted "
                                                               "log, with some words after it\n")
    note = next(line for line in shown.splitlines() if line.startswith("…"))
    head, tail = shown.split(f"\n\n{note}\n\n")
    assert head.endswith("\n") and PASTE.startswith(head) and PASTE.endswith(tail)
    assert f"{len(PASTE) - len(head) - len(tail):,} characters not shown" in note
    assert preview(LINE).startswith("x" * HEAD_CHARS)  # no line break near: cut where it falls


async def test_a_session_with_huge_messages_opens_and_copies_them_whole(store):
    app = make_app(store)
    sid = app.session.id
    store.append_message(sid, "user", PASTE, turn_id="t1")
    store.append_message(sid, "assistant", "# Log\n\n" + PASTE, turn_id="t1")
    store.append_message(sid, "user", LINE, turn_id="t2")
    store.append_message(sid, "assistant", "ok", turn_id="t2")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, app.transcript_ready.is_set)
        await pilot.pause()
        # the 1 MB line alone fills the screens mounted at open; the rest loads on scrolling up
        assert [m.text for m in app.query(UserMessage)] == [LINE]
        chat = app.query_one(ChatView)
        chat.scroll_home(animate=False, immediate=True)
        await settle(pilot, app, lambda: len(app.query(UserMessage)) == 2)
        paste, line = app.query(UserMessage)
        answer = app.query(AssistantMessage).first()
        assert "characters not shown" in str(paste.render())
        assert len(str(line.render())) < HEAD_CHARS + TAIL_CHARS + 200
        shown = "".join(p.source for p in answer.query("ProseBlock"))
        assert "characters not shown" in shown and len(shown) < HEAD_CHARS + TAIL_CHARS + 200
        answer.focus()
        await pilot.press("c")
        assert app.clipboard == "# Log\n\n" + PASTE
        paste.focus()
        await pilot.press("c")
        assert app.clipboard == PASTE
        await pilot.press("enter", "h", "i")  # the prompt still answers at once
        assert app.query_one("#prompt").text == "hi"


def test_a_cut_inside_a_code_fence_closes_and_reopens_it():
    from picochat.tui.markdown import split_blocks

    code = "".join(f"value_{i} = {i}  # a line of the generated module\n" for i in range(3_000))
    answer = "Here it is:\n\n```python\n" + code + "```\n\nClosing remarks.\n"
    shown = preview(answer, markdown=True)
    blocks = split_blocks(shown)
    assert [b.kind for b in blocks] == ["text", "code", "text", "code", "text"]
    assert "characters not shown" in blocks[2].source  # the note is prose, not code
    assert blocks[1].lang == blocks[3].lang == "python"
    assert code.startswith(blocks[1].code) and code.endswith(blocks[3].code)
    assert blocks[4].source == "Closing remarks.\n"       # prose again, not a new fence
    assert preview(answer).count("```") == 2  # plain text is left as it is

"""An answer on screen: prose runs and code fences cut from the Markdown, streamed in any
chunking to the same text, themed, and the garbage collector kept out of the stream."""

from __future__ import annotations

import gc
import random
import weakref
from contextlib import asynccontextmanager

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from picochat.tui import idle_gc
from picochat.tui.markdown import Prose, markdown_theme, split_blocks

ANSWER = """# Plan

Intro with `code` and **bold**.

- one
- two

```python
x = 1


y = 2
```

| a | b |
|---|---|
| 1 | 2 |

~~~
tilde fence
~~~
Last words.
"""


def test_blocks_join_back_to_the_text_and_fences_stand_alone():
    blocks = split_blocks(ANSWER)
    assert "".join(b.source for b in blocks) == ANSWER
    assert [b.kind for b in blocks] == ["text", "code", "text", "code", "text"]
    assert blocks[1].code == "x = 1\n\n\ny = 2\n" and blocks[1].lang == "python"
    assert blocks[3].code == "tilde fence\n" and blocks[3].lang == ""
    assert blocks[4].source == "Last words.\n"


def test_a_long_prose_run_is_cut_between_blocks_only():
    paragraph = "word " * 200 + "\n\n"
    text = paragraph * 10
    blocks = split_blocks(text, max_chars=2_500)
    assert "".join(b.source for b in blocks) == text
    assert len(blocks) == 4 and all(b.kind == "text" for b in blocks)
    assert all(b.source.endswith("\n\n") for b in blocks)  # never inside a paragraph
    assert len(split_blocks(text)) == 1


def test_an_unclosed_fence_runs_to_the_end():
    blocks = split_blocks("Look:\n\n```sh\nls -l\n")
    assert [b.kind for b in blocks] == ["text", "code"]
    assert blocks[1].code == "ls -l\n"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["# h\n", "para text\n", "\n", "- item\n", "```py\n",
                                 "```\n", "> quote\n", "| a |\n|---|\n", "    indented\n",
                                 "~~~\n", "x = [1, 2]\n", "\t\n", "text without newline"]),
                max_size=30),
       st.one_of(st.none(), st.integers(1, 40)))
def test_any_markdown_splits_into_blocks_that_join_back(lines, max_chars):
    text = "".join(lines)
    blocks = split_blocks(text, max_chars)
    assert "".join(b.source for b in blocks) == text
    assert all(b.source for b in blocks)
    for a, b in zip(blocks, blocks[1:]):  # prose runs merge unless cut by size
        assert not (a.kind == b.kind == "text" and max_chars is None)


def test_prose_renders_literally_with_the_theme_colours():
    theme = markdown_theme({"markdown-h1-color": "#123456", "markdown-h1-text-style": "bold",
                            "accent": "#ff0000"})
    console = Console(width=40, color_system="truecolor", force_terminal=True)
    with console.capture() as captured:
        console.print(Prose("# Title\n\n[red]not markup[/red] and `x`\n", theme, True))
    out = captured.get()
    assert "[red]not markup[/red]" in out           # Rich markup in model text stays text
    assert "38;2;18;52;86" in out                   # the heading in the theme's h1 colour
    assert not out.startswith("\n")


def test_a_table_first_does_not_open_with_a_blank_line():
    console = Console(width=40, color_system=None)
    with console.capture() as captured:
        console.print(Prose("| a | b |\n|---|---|\n| 1 | 2 |\n", markdown_theme({}), True))
    assert captured.get().splitlines()[0].split() == ["a", "b"]


def test_full_collections_wait_for_an_idle_moment(monkeypatch):
    saved = gc.get_threshold()
    now = [1000.0]
    monkeypatch.setattr(idle_gc.time, "monotonic", lambda: now[0])
    collector = idle_gc.IdleCollector()
    collector.start()
    try:
        assert gc.get_threshold()[2] == idle_gc.NEVER  # none in the middle of a frame
        freed = []

        class Node:
            pass

        def garbage() -> None:
            a, b = Node(), Node()
            a.other, b.other = b, a
            weakref.finalize(a, freed.append, 1)
            for _ in range(3):
                gc.collect(1)  # both survive into the old generation, still cyclic
            # (they are referenced from this frame until it returns)

        garbage()
        for _ in range(idle_gc.WANTED):
            gc.collect(1)
        assert collector.tick(busy=True) is False      # a turn is running
        now[0] += idle_gc.IDLE_S / 2
        assert collector.tick(busy=False) is False     # not idle long enough yet
        now[0] += idle_gc.IDLE_S
        assert collector.tick(busy=False) is True and freed == [1]
        assert collector.tick(busy=False) is False     # nothing more is due
    finally:
        collector.stop()
    assert gc.get_threshold() == saved


def test_collection_is_off_while_the_app_starts_and_back_on_after_its_first_frame():
    """`picochat` turns collection off before it imports the app (start-up's objects are not
    garbage); the app's first frame turns it back on, and so does the CLI's end if the app
    never got that far. A collector someone else turned off stays off."""
    assert gc.isenabled()
    idle_gc.hold_until_first_frame()
    collector = idle_gc.IdleCollector()
    try:
        assert not gc.isenabled()
        collector.start()  # the first frame
        assert gc.isenabled()
    finally:
        collector.stop()
        idle_gc.release_hold()
    idle_gc.hold_until_first_frame()
    idle_gc.release_hold()  # the CLI's end
    assert gc.isenabled()
    gc.disable()
    try:
        idle_gc.hold_until_first_frame()
        idle_gc.release_hold()
        assert not gc.isenabled()  # not ours to turn on
    finally:
        gc.enable()


def test_what_start_up_built_is_not_walked_by_the_first_collection_after_the_frame():
    """Held off during start-up, everything built sat in the young generation, and the first
    young collection after the frame walked it all (9 ms, when the first keys arrive). The
    first frame freezes it instead; the app's end unfreezes."""
    idle_gc.hold_until_first_frame()
    collector = idle_gc.IdleCollector()
    try:
        built = [[i] for i in range(20_000)]  # start-up's objects: tracked, not garbage
        assert gc.get_count()[0] >= 20_000
        frozen_before = gc.get_freeze_count()
        collector.start()
        assert gc.get_freeze_count() >= frozen_before + 20_000
        assert gc.get_count()[0] < 1_000  # the young generation starts empty
        assert len(built) == 20_000
    finally:
        collector.stop()
        idle_gc.release_hold()
    assert gc.get_freeze_count() == 0


async def test_a_streamed_answer_ends_as_the_same_text_in_any_chunking(store):
    from picochat.tui.answer import AssistantMessage, CodeFence, ProseBlock
    from tests.helpers.tui import SIZE, make_app
    from tests.helpers.waiting import settle

    rng = random.Random(7)
    text = ANSWER * 4
    expected_code = [b.code for b in split_blocks(text) if b.kind == "code"]
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await app.transcript_ready.wait()
        for _ in range(3):
            message = AssistantMessage()
            await app.query_one("ChatView").mount(message)
            i = 0
            while i < len(text):
                step = rng.randint(1, 40)
                message.add_text(text[i:i + step])
                i += step
                if rng.random() < 0.3:  # let the screen catch up now and then
                    await settle(pilot, app, lambda: message.rendered)
            await message.finish(seq=None)
            await pilot.pause()
            parts = list(message.children)
            assert message.text == text and message.rendered
            assert [p.code for p in parts if isinstance(p, CodeFence)] == expected_code
            prose = "".join(p.source for p in parts if isinstance(p, ProseBlock))
            assert prose.count("Intro with") == 4 and "x = 1" not in prose
            assert all(isinstance(p, (CodeFence, ProseBlock)) for p in parts)
            assert len(parts) <= 2 * len(expected_code) + 1  # a few widgets, not one a block


async def test_a_live_block_that_turns_into_a_fence_is_replaced_not_kept(store):
    from picochat.tui.answer import AssistantMessage, CodeFence, ProseBlock
    from tests.helpers.tui import SIZE, make_app
    from tests.helpers.waiting import settle

    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await app.transcript_ready.wait()
        message = AssistantMessage()
        await app.query_one("ChatView").mount(message)
        # the tail after the first fence starts as prose ("`", "``") and becomes a fence
        for piece in ("```py\nprint(1)\n```\n\n`", "`", "`sh\nls\n", "```\n\nAfter.\n"):
            message.add_text(piece)
            # each piece reaches the screen on its own: its redraw done, its widgets mounted
            await settle(pilot, app, lambda: message.rendered)
            await pilot.pause()
        await message.finish(seq=None)
        await pilot.pause()
        kinds = [type(p).__name__ for p in message.children]
        assert kinds == ["CodeFence", "CodeFence", "ProseBlock"]
        assert [f.code for f in message.query(CodeFence)] == ["print(1)\n", "ls\n"]
        assert [p.source for p in message.query(ProseBlock)] == ["After.\n"]


@asynccontextmanager
async def streamed_and_whole(store, text: str, step: int, draw_every: int):
    """`text` streamed `step` characters at a time into one answer, the screen catching up
    after every `draw_every` pieces, and beside it the same text opened whole."""
    from picochat.tui.answer import AssistantMessage
    from tests.helpers.tui import SIZE, make_app

    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await app.transcript_ready.wait()
        chat = app.query_one("ChatView")
        streamed = AssistantMessage()
        await chat.mount(streamed)
        for n, i in enumerate(range(0, len(text), step)):
            streamed.add_text(text[i:i + step])
            if n % draw_every == 0:
                streamed._draw(final=False)
        await streamed.finish(seq=None)
        whole = AssistantMessage(text)
        await chat.mount(whole)
        await pilot.pause()
        yield streamed, whole


async def test_a_half_received_line_never_settles_a_block_boundary(store):
    """"```" at the end of a stream looks like a fence until "foo` inline" arrives; "#" like a
    heading until "include". Drawn after every character, the answer still ends as the same
    widgets as when it is opened whole."""
    text = ("Use\n```foo` inline code, then\n#include <stdio.h> as written.\n\n"
            "***Note*** and\n<port> stays text\n\n```py\nx = 1\n```\nAfter.\n")
    async with streamed_and_whole(store, text, step=1, draw_every=1) as (streamed, whole):

        def parts(message):
            return [(type(p).__name__, getattr(p, "source", None) or p.code)
                    for p in message.children]
        assert parts(streamed) == parts(whole)
        assert [kind for kind, _ in parts(whole)] == ["ProseBlock", "CodeFence", "ProseBlock"]
        assert "<port> stays text" in parts(whole)[0][1]


def test_a_very_long_busy_spell_still_collects_once_in_a_while(monkeypatch):
    collector = idle_gc.IdleCollector()
    collector.start()
    try:
        assert collector.tick(busy=True) is False
        for _ in range(idle_gc.BACKSTOP):
            gc.collect(1)
        assert collector.tick(busy=True) is True
        assert gc.get_count()[2] == 0
    finally:
        collector.stop()


LIST = "".join(f"- item {i}: host cn-{i} keeps port {8000 + i}\n" for i in range(300))


def test_a_long_list_is_cut_between_items_and_draws_as_one_list():
    blocks = split_blocks("Ports:\n\n" + LIST + "\nDone.\n", max_chars=2_000)
    assert "".join(b.source for b in blocks) == "Ports:\n\n" + LIST + "\nDone.\n"
    assert len(blocks) >= 5
    assert all(b.source.startswith("- item") for b in blocks[1:])  # only between items
    assert [b.joined for b in blocks] == [False] + [True] * (len(blocks) - 1)
    assert len(split_blocks(LIST)) == 1  # cut only while streaming (a size is given)

    def lines(source: str) -> list[str]:
        console = Console(width=60, color_system=None)
        with console.capture() as captured:
            console.print(Prose(source, markdown_theme({}), True))
        return captured.get().splitlines()

    pieces = split_blocks(LIST, max_chars=2_000)
    assert [line for p in pieces for line in lines(p.source)] == lines(LIST)
    numbered = "".join(f"{i}. step {i}\n" for i in range(1, 200))
    assert [line.split()[0] for p in split_blocks(numbered, 1_000)
            for line in lines(p.source)] == [str(i) for i in range(1, 200)]


async def test_a_long_list_streams_into_a_few_blocks_with_no_gaps_between_them(store):
    from picochat.tui.answer import ProseBlock

    text = "Ports:\n\n" + LIST + "\nThat is all.\n"  # short of a preview's cut
    async with streamed_and_whole(store, text, step=30, draw_every=20) as (streamed, whole):
        parts = list(streamed.query(ProseBlock))
        assert len(parts) >= 4 and max(len(p.source) for p in parts) < 4_000  # not redrawn whole
        assert len(whole.query(ProseBlock)) == 1
        assert not any(p.has_class("after") for p in parts)  # no blank row between items
        assert streamed.text == whole.text == text
        assert streamed.outer_size.height == whole.outer_size.height


def test_prose_drawn_again_at_a_new_width_wraps_to_it():
    prose = Prose("word " * 40 + "\n", markdown_theme({}), True)  # drawn once per width

    def height(width: int) -> int:
        console = Console(width=width, color_system=None)
        with console.capture() as captured:
            console.print(prose)
        return len(captured.get().splitlines())

    assert [height(30), height(30), height(100), height(30)] == [7, 7, 2, 7]

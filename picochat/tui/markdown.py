"""An answer's Markdown as a few flat pieces: runs of prose and code fences.

Textual's Markdown widget mounts a widget per block (a four-item list is a dozen), and every
frame lays out every widget on the screen: a 20k-token answer stalled the event loop for
half a second. Here a run of prose is one widget that renders with Rich, and each top-level
code fence is one selectable widget, so an answer costs a handful of widgets however long.

markdown-it and rich.markdown load on first use: the first frame never waits for them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Mapping

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.theme import Theme

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from rich.markdown import Markdown


@lru_cache(maxsize=1)
def _parser() -> "MarkdownIt":
    """Rich's own Markdown dialect, so blocks split where Rich draws them, but with HTML off:
    Rich draws an HTML block as nothing, and a model's `<port>` line must not vanish."""
    from markdown_it import MarkdownIt

    return (MarkdownIt("commonmark").enable(["strikethrough", "table"])
            .disable(["html_block", "html_inline"]))


@lru_cache(maxsize=4)
def _parse(text: str) -> list[Any]:
    """Tokens of `text`, kept for the next call: a streaming tail that is one block is parsed
    to be split and again to be drawn. (Neither changes the tokens.)"""
    return _parser().parse(text)


def _lines(text: str) -> list[str]:
    """Lines as markdown-it counts them (`\n` only: str.splitlines would also break at
    U+2028, U+2029 and the like, and shift every block after them)."""
    return _LINE.findall(text)


_LINE = re.compile(r"[^\n]*\n|[^\n]+$")


@dataclass(frozen=True)
class Block:
    """A slice of the source: `kind` is "text" (any run of non-fence blocks) or "code" (one
    top-level fence, whose `code` and `lang` are what the fence holds)."""

    kind: str
    source: str
    code: str = ""
    lang: str = ""
    joined: bool = False  # goes on the previous block's list: no gap between the two


def split_blocks(text: str, max_chars: int | None = None) -> list[Block]:
    """`text` cut into blocks whose sources join back to exactly `text`. Consecutive prose
    blocks share one text block, which starts afresh past `max_chars` (so a streaming
    answer re-renders only its last few thousand characters); a long top-level list is cut
    between its items, which Rich draws the same as one list (numbering included)."""
    if not text:
        return []
    lines = _lines(text)
    starts: list[tuple[int, Any]] = []  # (first line, fence token, "item" or None) per start
    for token in _parse(text):
        if token.map is None or token.nesting < 0:
            continue
        if token.level == 0:
            starts.append((token.map[0], token if token.type == "fence" else None))
        elif token.level == 1 and token.type == "list_item_open" and max_chars is not None:
            starts.append((token.map[0], "item"))  # an item of a top-level list
    starts = [s for i, s in enumerate(starts) if i == 0 or s[0] != starts[i - 1][0]]
    if not starts:
        return [Block("text", text)]
    starts[0] = (0, starts[0][1])  # leading blank lines belong to the first block
    ends = [line for line, _ in starts[1:]] + [len(lines)]
    blocks: list[Block] = []
    run, joined = "", False
    for (first, kind), end in zip(starts, ends):
        source = "".join(lines[first:end])
        if kind is None or isinstance(kind, str):
            if run and max_chars is not None and len(run) >= max_chars:
                blocks.append(Block("text", run, joined=joined))
                run, joined = "", kind == "item"
            run += source
            continue
        if run:
            blocks.append(Block("text", run, joined=joined))
            run, joined = "", False
        blocks.append(Block("code", source, kind.content, (kind.info.split() or [""])[0]))
    if run:
        blocks.append(Block("text", run, joined=joined))
    return blocks


@lru_cache(maxsize=1)
def _prose_class() -> "type[Markdown]":
    """Rich's Markdown as the transcript wants it, built on first use."""
    from rich import box
    from rich.markdown import Heading, Markdown, TableElement
    from rich.table import Table

    class _LeftHeading(Heading):
        """Headings flush left, as the rest of the transcript reads (Rich centres h1)."""

        def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
            text = self.text.copy()
            text.justify = "left"
            yield text

    class _Table(TableElement):
        """Rich's table without its blank top and bottom edges, which doubled the gaps."""

        def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
            table = Table(box=box.SIMPLE, pad_edge=False, style="markdown.table.border",
                          show_edge=False, collapse_padding=True)
            if self.header is not None and self.header.row is not None:
                for column in self.header.row.cells:
                    heading = column.content.copy()
                    heading.stylize("markdown.table.header")
                    table.add_column(heading)
            if self.body is not None:
                for row in self.body.rows:
                    table.add_row(*(cell.content for cell in row.cells))
            yield table

    class _Prose(Markdown):
        elements = {**Markdown.elements, "heading_open": _LeftHeading, "table_open": _Table}

        def __init__(self, markup: str, code_theme: str) -> None:
            super().__init__("", code_theme=code_theme, hyperlinks=False)
            self.markup = markup
            self.parsed = _parse(markup)  # HTML shown as text (see _parser)

    return _Prose


class Prose:
    """A run of Markdown prose, rendered by Rich under styles taken from the app's theme.
    Links show their address instead of being clickable: model output is untrusted."""

    def __init__(self, source: str, theme: Theme, dark: bool) -> None:
        self.markdown = _prose_class()(source, code_theme="ansi_dark" if dark else "ansi_light")
        self.theme = theme
        self._drawn: tuple[tuple[Any, ...], list[list[Segment]]] | None = None

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self._lines(console, options):
            yield from line
            yield Segment.line()

    def _lines(self, console: Console, options: ConsoleOptions) -> list[list[Segment]]:
        """Drawn once per width: Textual renders a widget once to learn its height and again
        to paint it, which for one long table was two 270 ms renders a frame."""
        key = (options.max_width, options.min_width, options.justify, options.overflow,
               options.no_wrap)
        if self._drawn is None or self._drawn[0] != key:
            with console.use_theme(self.theme):
                lines = console.render_lines(self.markdown, options, pad=False)
            while lines and not "".join(s.text for s in lines[0]).strip():
                del lines[0]  # Rich opens with a blank line when a table comes first
            self._drawn = (key, lines)
        return self._drawn[1]


def _color(value: str | None) -> str | None:
    """A theme variable as a Rich color: alpha dropped, "auto …" and the like skipped."""
    if not value or not value.startswith("#") or len(value) not in (7, 9):
        return None
    return value[:7]


def _style(*parts: str | None) -> str:
    return " ".join(p for p in parts if p) or "none"


def markdown_theme(variables: Mapping[str, str]) -> Theme:
    """Rich's markdown styles from Textual's theme variables, so prose follows /theme."""
    get = variables.get
    styles = {}
    for level in range(1, 7):
        tag = f"h{level}"
        style = get(f"markdown-{tag}-text-style", "bold")
        styles[f"markdown.{tag}"] = _style(style if style != "none" else None,
                                            _color(get(f"markdown-{tag}-color")))
    accent, primary = _color(get("accent")), _color(get("primary"))
    muted = _color(get("foreground-darken-2")) or _color(get("secondary"))
    styles.update({
        "markdown.code": _style("bold", accent),
        "markdown.link": _style("underline", primary),
        "markdown.link_url": _style("underline", primary),
        "markdown.item.bullet": _style("bold", accent),
        "markdown.item.number": _style("bold", accent),
        "markdown.block_quote": _style("italic", muted),
        "markdown.hr": _style(muted),
        "markdown.table.border": _style(muted),
        "markdown.table.header": _style("bold", primary),
    })
    return Theme(styles)


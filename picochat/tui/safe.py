"""Text that did not come from picochat's own code (model output, provider errors, file and
theme names, session and model names, config values, search queries and snippets) reaches the
screen only through this module, cleaned by `clean` (from `picochat.textsafe`, below both front
ends, so the CLI shows the same text): no terminal escape, no control character.

- `literal(text)`: for every widget that shows plain text. Textual reads a `str` as markup
  almost everywhere (Static, Label, OptionList options, border and Collapsible titles, notify),
  where `[@click=app.quit]` became an action and a stray `[/]` raised MarkupError; a rich Text
  is never read as markup. `PicochatApp.notify` shows a Text as its plain text, markup off.
- `clean(text)`: for what is not a Text: Markdown prose (rendered by Rich, which reads no
  markup) and the editable prompt.
"""

from __future__ import annotations

from rich.text import Text

from picochat.textsafe import clean

__all__ = ["clean", "literal"]


def literal(text: str, style: str = "") -> Text:
    """`text` as the screen may show it: a rich Text (never parsed as markup) of `clean(text)`."""
    return Text(clean(text), style=style)

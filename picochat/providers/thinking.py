"""Inline thinking: `<think>…</think>` in a model's answer text, split off as it streams.

DeepSeek-R1, QwQ and Qwen3 served without a reasoning parser (llama.cpp without `--jinja`,
Ollama's raw templates, vLLM without `--reasoning-parser`) write their thinking into the answer
text between `<think>` and `</think>`. Some chat templates open the block in the prompt, so the
reply starts inside the thinking with no opening tag and only `</think>` marks its end.

`ThinkSplitter` turns such text, fed in pieces of any size, into the same `ThinkingDelta` and
`TextDelta` events a server that splits thinking itself (`reasoning_content`) produces: any
chunking of the same text gives the same thinking and the same answer. It is pure: no I/O.

The rules, in order:
- Only one thinking block, at the very start of the reply (whitespace before it allowed). A
  `<think>` later in an answer is text the model wrote about tags, and stays answer text.
- `starts_inside=True` (the model's template opens the block): the reply is thinking until
  `</think>`. If no `</think>` ever comes, the model did not think after all: the whole text is
  the answer, emitted when the stream ends (`not_thinking`): a wrong guess shows the answer as
  thinking first and delays it, but loses nothing and stores nothing wrong.
- Thinking that arrived separately (`server_thinks`) means the text is all answer.
- The whitespace that follows `</think>` (models write a blank line there) is not answer text.
- A reply that ends inside an opened `<think>` (cut at the output limit) has no answer.
- A `</think>` in the answer of a reply that had no thinking block is kept as text, but noted
  (`stray_close`): the template opens the block, and the next reply starts inside it.
"""

from __future__ import annotations

import re
from typing import Union

from picochat.providers.base import TextDelta, ThinkingDelta

OPEN, CLOSE = "<think>", "</think>"
Piece = Union[TextDelta, ThinkingDelta]

_START, _THINK, _ANSWER = "start", "think", "answer"

# Models whose chat templates commonly open the thinking block in the prompt (DeepSeek-R1 and
# its distills, QwQ, the Qwen3 "Thinking" releases): their replies may start inside it.
_OPENS_INSIDE = re.compile(r"qwq|(?<![a-z0-9])r1(?![0-9])|thinking", re.I)


def starts_inside(model: str) -> bool:
    """Whether `model`'s replies may start inside a thinking block opened by its template."""
    return bool(_OPENS_INSIDE.search(model))


def _held(text: str, tag: str) -> int:
    """How many characters at the end of `text` could be the start of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class ThinkSplitter:
    """Feed answer text as it streams; get thinking and answer pieces back (module docstring)."""

    def __init__(self, starts_inside: bool = False) -> None:
        self.starts_inside = starts_inside
        self.stray_close = False    # a `</think>` came in the answer of a reply with no block
        self.not_thinking = False   # what was shown as thinking turned out to be the answer
        self._state = _START
        self._buf = ""              # text not yet emitted: a possible tag, or leading space
        self._explicit = False      # the block was opened by `<think>` in the text
        self._closed = False        # a thinking block ended with `</think>`
        self._implicit: list[str] = []  # thinking of a block the template opened (see flush)
        self._after_close = False   # the whitespace after `</think>` is being skipped
        self._tail = ""             # the answer's last characters, to see a `</think>` split

    def server_thinks(self) -> None:
        """The server sent thinking separately: the text that follows is the answer, without
        the blank lines some servers leave where `</think>` was."""
        if self._state == _START:
            self._state, self._closed, self._after_close = _ANSWER, True, True

    def feed(self, text: str) -> list[Piece]:
        out: list[Piece] = []
        self._buf += text
        while self._buf:
            before = (self._state, len(self._buf))
            if self._state == _START:
                self._start(out)
            elif self._state == _THINK:
                self._think(out)
            else:
                self._answer(out)
            if (self._state, len(self._buf)) == before:
                break  # waiting for more text
        return out

    def flush(self) -> list[Piece]:
        """The stream ended: whatever is still held, as what it turned out to be."""
        out: list[Piece] = []
        buf, self._buf = self._buf, ""
        if self._state == _THINK and not self._explicit:  # no `</think>` came: it was the answer
            text = "".join(self._implicit) + buf
            self._implicit.clear()
            self.not_thinking = bool(text)
            if text:
                out.append(TextDelta(text))
        elif self._state == _THINK:
            if buf:
                out.append(ThinkingDelta(buf))  # cut off while thinking: no answer
        elif buf and not self._after_close:
            out.append(TextDelta(buf))  # leading whitespace, or a partial "<thi" that stayed so
        self._state = _ANSWER
        return out

    # --- states ---------------------------------------------------------------------------------

    def _start(self, out: list[Piece]) -> None:
        stripped = self._buf.lstrip()
        if not stripped:
            return  # only whitespace so far
        if stripped.startswith(OPEN):
            self._state, self._explicit = _THINK, True
            self._buf = stripped[len(OPEN):]
        elif OPEN.startswith(stripped):
            return  # "<thi": wait for the rest
        elif self.starts_inside:
            self._state = _THINK
        else:
            self._state = _ANSWER

    def _think(self, out: list[Piece]) -> None:
        end = self._buf.find(CLOSE)
        if end >= 0:
            self._emit_thinking(out, self._buf[:end])
            self._buf = self._buf[end + len(CLOSE):]
            self._state, self._closed, self._after_close = _ANSWER, True, True
            self._implicit.clear()
            return
        keep = _held(self._buf, CLOSE)
        self._emit_thinking(out, self._buf[:len(self._buf) - keep])
        self._buf = self._buf[len(self._buf) - keep:]

    def _emit_thinking(self, out: list[Piece], text: str) -> None:
        if not text:
            return
        if not self._explicit:
            self._implicit.append(text)
        out.append(ThinkingDelta(text))

    def _answer(self, out: list[Piece]) -> None:
        text = self._buf
        if self._after_close:
            text = text.lstrip()
            if not text:
                self._buf = ""
                return
            self._after_close = False
        self._buf = ""
        if not self._closed and not self.stray_close and CLOSE in self._tail + text:
            self.stray_close = True
        self._tail = (self._tail + text)[-(len(CLOSE) - 1):]
        out.append(TextDelta(text))


def split(text: str, starts_inside: bool = False) -> tuple[str, str]:
    """The (thinking, answer) of a whole reply: what a stream of it splits into."""
    splitter = ThinkSplitter(starts_inside)
    events = splitter.feed(text) + splitter.flush()
    thinking = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    return ("" if splitter.not_thinking else thinking), answer

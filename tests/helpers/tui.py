"""Driving the app through Textual's pilot: an app on a store, typing and sending, waiting for
an answer to be shown, and reading what the screen holds."""

from __future__ import annotations

import asyncio

from textual import events

from picochat.config import CompactionConfig, Config
from picochat.models import resolve_model
from picochat.providers.base import Finish, ModelInfo, Provider, TextDelta, Usage
from picochat.providers.offline import OfflineProvider
from picochat.tui.app import PicochatApp
from picochat.tui.chat import AssistantMessage, ChatView, CheckpointDivider, Notice, UserMessage
from picochat.tui.prompt import Prompt
from picochat.tui.status import StatusBar
from tests.helpers.waiting import settle

SIZE = (110, 36)
SMALL_KEEP = Config(context_compaction=CompactionConfig(keep_recent_tokens=300))


class Slow(Provider):
    """Streams `pieces` one every `gap` seconds, then, given `hold`, keeps the stream open
    until the test sets it: a turn that is still running when the test acts.

    The gap only paces the output (no test may count on its length to find the turn still
    running: that is what `hold` is for); `gap=0` still yields to the event loop."""

    def __init__(self, pieces, gap=0.05, hold: asyncio.Event | None = None):
        self.info = ModelInfo("test", "slow")
        self.pieces, self.gap, self.hold = pieces, gap, hold

    async def stream(self, request):
        for piece in self.pieces:
            await asyncio.sleep(self.gap)  # pacing, not a wait: see the docstring
            yield TextDelta(piece)
        if self.hold is not None:
            await self.hold.wait()
        yield Usage(10, 2)
        yield Finish()


def make_app(store, provider=None, config=SMALL_KEEP, name="t"):
    session = store.find_session(name) or store.create_session(name)
    model = resolve_model(config, "offline")
    return PicochatApp(store, session, model, provider or OfflineProvider(0), config)


async def say(pilot, text: str) -> None:
    prompt = pilot.app.query_one(Prompt)
    prompt.focus()
    prompt.load_text(text)
    await pilot.press("enter")


def answered(app, store) -> bool:
    """The newest answer is on screen in full: its widget carries the saved row's seq (given
    when the turn's end is shown) and the bar no longer says anything runs."""
    rows = store.history(app.session.id)
    answers = app.query_one(ChatView).query(AssistantMessage)
    return (bool(rows) and bool(answers) and answers.last().seq == rows[-1].seq
            and app.query_one(StatusBar).state == "")


async def chat_once(pilot, app, store, text: str) -> None:
    """Send `text` and wait for the answer to be saved and shown in full."""
    count = len(store.history(app.session.id))
    await say(pilot, text)
    await settle(pilot, app, lambda: len(store.history(app.session.id)) == count + 2
                 and not app.worker.busy and answered(app, store),
                 what="the answer was never saved and shown")
    await pilot.pause()  # the answer's last blocks, mounted as it finished, are composed


def texts(app, kind) -> list[str]:
    return [str(w.render()) if not isinstance(w, AssistantMessage) else "".join(w.parts)
            for w in app.query_one(ChatView).query(kind)]


def screen(app) -> list[tuple[str, str]]:
    """The transcript top to bottom, as (kind, text): what the user reads, in order."""
    rows: list[tuple[str, str]] = []
    for w in app.query_one(ChatView).children:
        if isinstance(w, UserMessage):
            rows.append(("user", w.text))
        elif isinstance(w, AssistantMessage):
            rows.append(("assistant", ("".join(w.parts) or w.source).strip()))
        elif isinstance(w, Notice):
            rows.append(("notice", str(w.render())))
        elif isinstance(w, CheckpointDivider):
            rows.append(("divider", w.checkpoint_id))
    return rows


def conversation(app) -> list[tuple[str, str]]:
    """The user messages and answers on screen, in order (notices and dividers left out)."""
    return [row for row in screen(app) if row[0] in ("user", "assistant")]


def type_keys(app, text: str) -> None:
    """Keys as a terminal delivers a fast typist: posted at once, no pause between them
    (pilot.press waits for the screen to go idle after each key)."""
    for char in text:
        if char == "\n":
            app.post_message(events.Key("enter", "\r"))
        elif char == " ":
            app.post_message(events.Key("space", " "))
        else:
            app.post_message(events.Key(char, char))


async def type_unevenly(app, text: str, rng) -> None:
    """Keys as a terminal delivers them in reads of uneven size: after each, the app's tasks
    may run zero to three steps before the next arrives (`rng` picks, seeded by the test)."""
    for char in text:
        type_keys(app, char)
        for _ in range(rng.randrange(4)):
            await asyncio.sleep(0)


def status(app) -> str:
    """What the bar says runs ("" when nothing does)."""
    return app.query_one(StatusBar).state


def idle(app) -> bool:
    """The worker has nothing running or queued, and the app has shown all of it."""
    return (not app.worker.busy and app.worker.queued == 0
            and not any(w.group in ("turns", "commands") and not w.is_finished
                        for w in app.workers))


def luminance(rgb: tuple[int, int, int]) -> float:
    def channel(c: int) -> float:
        c = c / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = rgb
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """WCAG 2 contrast ratio."""
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)

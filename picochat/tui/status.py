"""The top bar: what runs now (a spinner, the time it has taken or the countdown to a retry,
what Esc does, the queued messages), the context gauge (the `/info` card's figures: the same
ContextUsage fills both), the session and the model.

What runs is never cut. When the line is too long the other parts give way in the order of
FORMS: the gauge's words first (its figures stay), then the "picochat" name, the session and
model names (shortened, then gone), the offline badge, the running state's longer words, and
the gauge's figures last (down to its percentage).

The app drives it through reactive attributes (`activity`, `stoppable`, `retry_at`, `queued`,
`used`, …, or `set_usage`): it sets values, and the bar lays itself out and ticks its clock.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.content import Content
from textual.reactive import reactive
from textual.timer import Timer
from textual.widget import Widget

from picochat.textsafe import clean

if TYPE_CHECKING:  # the figures, the session and the model come after the first frame
    from picochat.context_usage import ContextUsage
    from picochat.messages import Session
    from picochat.models import ResolvedModel

ANSWERING, COMPACTING, WAITING = "answering", "compacting", "waiting"
OPENING = "opening"  # the first frame is up; the session and its model are opening
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
FRAME_SECONDS = 0.1
SEP = " · "
GAP = 2  # at least this many spaces between the left part and the gauge


@dataclass(frozen=True)
class Running:
    """What runs, at one moment: plain values, so the words can be tested without a clock."""
    activity: str = ""      # ANSWERING, COMPACTING, WAITING, another short text, or "" (idle)
    seconds: int = 0        # the time it has taken; for WAITING, the time until the retry
    stoppable: bool = False  # Esc stops it (said for a compaction and a retry wait)
    queued: int = 0         # messages and commands waiting behind it


def duration(seconds: int) -> str:
    return f"{seconds}s" if seconds < 60 else f"{seconds // 60}m{seconds % 60:02d}s"


def running_text(run: Running, short: bool = False) -> str:
    """`answering… 12s · 2 queued`, `compacting… 40s · Esc cancels`; `short` drops the
    ellipsis and says `retry in` for `sending again in`."""
    dots = "" if short else "…"
    took = duration(run.seconds)
    if run.activity == ANSWERING:
        head = f"answering{dots} {took}"
    elif run.activity == COMPACTING:
        head = f"compacting{dots} {took}" + (" · Esc cancels" if run.stoppable else "")
    elif run.activity == WAITING:
        head = (f"retry in {took}" if short else f"sending again in {took}") \
            + (" · Esc stops" if run.stoppable else "")
    elif run.activity == OPENING:  # a blink, usually: its clock only once it takes a second
        head = f"opening{dots}" + (f" {took}" if run.seconds else "")
    elif run.activity:
        head = f"{run.activity} {took}"
    else:
        head = ""
    if run.queued:
        head += (SEP if head else "") + f"{run.queued} queued"
    return head


def short_count(n: int) -> str:
    if n < 1000:
        return str(n)
    if n < 10_000:
        return f"{n / 1000:.1f}k"
    if n < 1_000_000:
        return f"{n / 1000:.0f}k"
    return f"{n / 1_000_000:.1f}M"


@dataclass(frozen=True)
class Figures:
    """The gauge's figures, from the ContextUsage the `/info` card shows."""
    used: int
    threshold: int  # auto compaction runs above it (the window less the answer's reserve)
    window: int
    auto_compact: bool = True
    warning: str = ""  # past the soft point: "compacting in about 3 turns" (context_usage)

    @property
    def ratio(self) -> float:
        return self.used / self.threshold if self.threshold else 1.0


GAUGE_HIDDEN = 4  # gauge_text's level that shows nothing


def gauge_text(figures: Figures | None, level: int = 0) -> str:
    """Level 0 names every figure; 1 keeps them without the words; 2 is `70% · 1.0k/1.5k`;
    3 the percentage alone; 4 nothing. None: the tokenizer is still loading."""
    if figures is None:
        return ("counting the context…", "counting…", "counting…", "…", "")[level]
    f, pct = figures, f"{100 * figures.ratio:.0f}%"
    if f.warning and not (f.auto_compact and f.ratio > 1):  # compaction coming: said first
        return (f"context {pct} full · {f.warning} · ctrl+k compacts now · window {f.window:,}",
                f"{pct} · {f.warning} · ctrl+k compacts now", f"{pct} · {f.warning}",
                pct, "")[level]
    if level == 0:
        if f.auto_compact and f.ratio > 1:  # "189% full" read as broken; the next turn compacts
            return (f"context {f.used:,} tokens, over the {f.threshold:,} auto-compact point · "
                    f"window {f.window:,}")
        until = "before auto-compact" if f.auto_compact else "(auto-compact off)"
        return (f"context {pct} full · {f.used:,} of {f.threshold:,} tokens {until} · "
                f"window {f.window:,}")
    if level == 1:
        return f"{pct} · {f.used:,}/{f.threshold:,} tokens · window {f.window:,}"
    if level == 2:
        return f"{pct} · {short_count(f.used)}/{short_count(f.threshold)}"
    return pct if level == 3 else ""


def gauge_style(figures: Figures | None) -> str:
    """Textual's text colours for the theme ($text-success, …): legible on its panel."""
    if figures is None:
        return "$text-muted"
    ratio = figures.ratio
    return "$text-success" if ratio < 0.7 else "$text-warning" if ratio < 1 else "$text-error"


@dataclass(frozen=True)
class Form:
    """How much of each part a line shows."""
    gauge: int = 0          # gauge_text's level
    brand: bool = True      # "picochat"
    names: int = 0          # longest session or model name, in cells (0: no limit)
    session: bool = True
    model: bool = True      # the model's name (an offline model keeps its badge)
    badge: bool = True      # the reversed " offline "
    short: bool = False     # the running state's shorter words
    pad: bool = True        # a space at each end


def _forms() -> tuple[Form, ...]:
    steps: list[dict[str, Any]] = [{}, {"gauge": 1}, {"brand": False}, {"names": 20}, {"gauge": 2}, {"names": 12},
             {"session": False}, {"model": False}, {"badge": False}, {"short": True},
             {"gauge": 3}, {"pad": False}, {"gauge": 4}]
    forms, form = [], Form()
    for step in steps:
        form = dataclasses.replace(form, **step)
        forms.append(form)
    return tuple(forms)


FORMS = _forms()  # widest first: the first that fits is shown


def _name(text: str, limit: int) -> Content:
    """A session or model name: from the user or the config, so cleaned and never markup."""
    content = Content(clean(text).replace("\n", " ").replace("\t", " "))
    return content.truncate(limit, ellipsis=True) if limit else content


def compose_line(form: Form, session: str, model: str, offline: bool, run: Running,
                 figures: Figures | None, width: int, frame: int = 0) -> Content:
    """One line of the bar in `form`; the gauge sits at the right end when `width` allows."""
    left: list[Content] = []
    if form.brand:
        left.append(Content.styled("picochat", "bold"))
    if form.session and session:
        left.append(_name(session, form.names))
    named = form.model and model and not (offline and model == "offline")
    badge = offline and form.badge
    if named or badge:
        left.append(Content.assemble(_name(model, form.names) if named else "",
                                     " " if named and badge else "",
                                     (" offline ", "reverse") if badge else ""))
    running = running_text(run, form.short)
    if running:
        spin = SPINNER[frame % len(SPINNER)] + " " if run.activity else ""
        left.append(Content.styled(spin + running, "bold"))
    head = Content(SEP).join(left)
    level = GAUGE_HIDDEN if run.activity == OPENING else form.gauge  # nothing to count yet
    gauge = Content.styled(gauge_text(figures, level), gauge_style(figures))
    pad = " " if form.pad else ""
    used = len(pad) * 2 + head.cell_length + gauge.cell_length
    gap = GAP if head.cell_length and gauge.cell_length else 0
    gap = max(gap, width - used)
    return Content.assemble(pad, head, " " * gap, gauge, pad)


class StatusBar(Widget):
    """The top bar. Set its reactive attributes; it lays itself out for its width and, while
    something runs, ticks its spinner and clock on its own."""

    DEFAULT_CSS = """
    StatusBar { dock: top; height: 1; background: $panel; color: $text; }
    """

    activity: reactive[str] = reactive("")    # ANSWERING, COMPACTING, WAITING, other, or ""
    stoppable: reactive[bool] = reactive(False)  # Esc stops what runs: the bar says so
    started: reactive[float] = reactive(0.0)  # monotonic; set when `activity` changes
    retry_at: reactive[float] = reactive(0.0)  # monotonic time of the retry, while WAITING
    queued: reactive[int] = reactive(0)
    used: reactive[int | None] = reactive(None)  # None: still counting (tiktoken loads)
    threshold: reactive[int] = reactive(0)
    window: reactive[int] = reactive(0)
    auto_compact: reactive[bool] = reactive(True)
    warning: reactive[str] = reactive("")  # compaction coming (Figures.warning)
    session_name: reactive[str] = reactive("")
    model_name: reactive[str] = reactive("")
    offline: reactive[bool] = reactive(False)

    def __init__(self) -> None:
        super().__init__(id="status")
        self._frames: Timer | None = None

    def on_mount(self) -> None:
        self._frames = self.set_interval(FRAME_SECONDS, self.refresh, pause=not self.activity)

    def watch_activity(self, activity: str) -> None:
        self.started = time.monotonic() if activity else 0.0
        if activity != WAITING:
            self.retry_at = 0.0
        if self._frames is not None:
            self._frames.resume() if activity else self._frames.pause()

    # --- what it shows ----------------------------------------------------------------------------

    def running(self) -> Running:
        now = time.monotonic()
        if self.activity == WAITING and self.retry_at:
            seconds = max(0.0, self.retry_at - now)
        else:
            seconds = now - self.started if self.started else 0.0
        return Running(self.activity, round(seconds), self.stoppable, self.queued)

    @property
    def state(self) -> str:
        """What runs, in words (`answering… 12s · 2 queued`); "" when nothing does."""
        return running_text(self.running())

    def figures(self) -> Figures | None:
        if self.used is None:
            return None
        return Figures(self.used, self.threshold, self.window, self.auto_compact, self.warning)

    def render(self) -> Content:
        width = self.size.width
        run, figures = self.running(), self.figures()
        frame = int(time.monotonic() / FRAME_SECONDS)
        line = Content("")
        for form in FORMS:
            line = compose_line(form, self.session_name, self.model_name, self.offline, run,
                                figures, width, frame)
            if line.cell_length <= width:
                break
        return line

    # --- set from the app's values ----------------------------------------------------------------

    def show_activity(self, activity: str, stoppable: bool, retry_in: float | None) -> None:
        """What runs now (a new activity restarts the clock), whether Esc stops it, and for a
        wait, in how many seconds the request goes again."""
        self.activity, self.stoppable = activity, stoppable
        if retry_in is not None:
            self.retry_at = time.monotonic() + retry_in

    def set_usage(self, usage: ContextUsage) -> None:
        b, lim = usage.budget, usage.budget.limits
        self.used, self.threshold, self.window = b.used_tokens, lim.threshold, lim.window
        self.auto_compact = usage.enabled
        self.warning = usage.warning
        self.session_name = shown_name(usage.session)
        self.set_model(usage.model)

    def set_model(self, model: ResolvedModel) -> None:
        self.model_name, self.offline = model.name, model.offline


def shown_name(session: Session) -> str:
    """The session's name in the bar, and its branch once it has more than one."""
    return session.name + (f" · branch {session.branch}" if session.branch else "")

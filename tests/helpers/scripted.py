"""In-process providers for engine tests: scripted turn replies, scripted summary behaviour,
and a record of every request, so a test can count calls and read what was sent."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from picochat.providers.base import (
    Finish,
    ModelInfo,
    Provider,
    ProviderRequest,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from picochat.config import Config, ModelConfig
from picochat.models import resolve_model
from picochat.providers.offline import reply_for
from picochat import summary_contract as sc
from picochat import tokens


class Recorder(Provider):
    """Answers like the offline model, unless a scripted step says otherwise.

    `turns` and `summaries` are lists consumed one per request of that purpose; an item is an
    exception instance (raised), a string (the reply), a `(finish_reason, reply)` pair, or an
    async callable run first (to wait, or to act while the call is "in flight") whose result,
    if a string, is the reply.
    """

    def __init__(self, turns: list[Any] | None = None, summaries: list[Any] | None = None,
                 kind: str = "test", model: str = "scripted", usage_scale: float = 1.0) -> None:
        self.info = ModelInfo(kind, model)
        self.usage_scale = usage_scale  # a provider whose tokenizer counts differently
        self.turns = list(turns or [])
        self.summaries = list(summaries or [])
        self.requests: list[ProviderRequest] = []

    @property
    def turn_requests(self) -> list[ProviderRequest]:
        return [r for r in self.requests if r.purpose == "turn"]

    @property
    def summary_requests(self) -> list[ProviderRequest]:
        return [r for r in self.requests if r.purpose == "summary"]

    async def stream(self, request: ProviderRequest):
        self.requests.append(request)
        queue = self.summaries if request.purpose == "summary" else self.turns
        text, finish = None, "stop"
        if queue:
            step = queue.pop(0)
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, tuple):  # ("length", text): cut off at max_tokens
                finish, step = step
            if isinstance(step, dict):   # {"calls": [(id, name, arguments)], "text": "..."}
                if step.get("text"):
                    yield TextDelta(step["text"])
                for i, (cid, name, args) in enumerate(step["calls"]):
                    yield ToolCallDelta(i, cid, name, args[: len(args) // 2])
                    yield ToolCallDelta(i, None, None, args[len(args) // 2:])
                yield Usage(tokens.count_provider_messages(request.messages), 5)
                yield Finish("tool_calls")
                return
            if callable(step):
                result = await step()
                text = result if isinstance(result, str) else None
            else:
                text = step
        if text is None:
            text = reply_for(request)
        await asyncio.sleep(0)
        yield TextDelta(text)
        prompt = int(tokens.count_provider_messages(request.messages) * self.usage_scale)
        yield Usage(prompt, tokens.count_text(text))
        yield Finish(finish)


def waiter(event: asyncio.Event, then: Callable[[], Any] | None = None
           ) -> Callable[[], Awaitable[None]]:
    """A step that runs `then` (while the call is in flight) and waits for `event`."""
    async def step() -> None:
        if then is not None:
            then()
        await event.wait()
    return step


class Hold:
    """A turn step for `Streaming`: stream the words of `before`, set `reached`, wait for
    `release`, then stream the words of `after`: an answer caught mid-stream. With `burst`,
    the words of each part arrive in one go (as a network read of many chunks does), with no
    yield to the event loop between them."""

    def __init__(self, before: str, after: str = "", burst: bool = False) -> None:
        self.before, self.after, self.burst = before, after, burst
        self.reached = asyncio.Event()
        self.release = asyncio.Event()


class Streaming(Recorder):
    """A Recorder whose turn replies stream word by word (one delta each, with a yield
    between), and whose turn steps may also be a `Hold`. Summaries behave as in Recorder."""

    async def stream(self, request: ProviderRequest):
        step = self.turns[0] if self.turns and request.purpose != "summary" else None
        if not isinstance(step, (str, Hold)):
            async for event in super().stream(request):
                yield event
            return
        self.turns.pop(0)
        self.requests.append(request)
        before, after = (step, "") if isinstance(step, str) else (step.before, step.after)
        burst = isinstance(step, Hold) and step.burst
        for word in before.split(" "):
            if not burst:
                await asyncio.sleep(0)
            yield TextDelta(word + " ")
        if isinstance(step, Hold):
            step.reached.set()
            await step.release.wait()
            for word in after.split(" ") if after else ():
                if not burst:
                    await asyncio.sleep(0)
                yield TextDelta(word + " ")
        text = before + " " + after if after else before
        yield Usage(tokens.count_provider_messages(request.messages), tokens.count_text(text))
        yield Finish("stop")


def well_formed(objective: str, **sections: str) -> str:
    """A summary that passes the quality gate: the nine headings, `objective` under the first,
    `sections` (by heading, spaces as underscores) under theirs, `- (none)` elsewhere."""
    body = {"Objective": objective, **{k.replace("_", " "): v for k, v in sections.items()}}
    return "\n\n".join(f"## {h}\n{body.get(h, '- (none)')}" for h in sc.HEADINGS)


def model(window):
    """The offline model with a window of `window` tokens."""
    return resolve_model(Config(models={"m": ModelConfig("m", "offline", token_limit=window)}),
                         "m")


WORD = "lorem "  # one o200k token a word


class Filler(Recorder):
    """A summarizer that writes a well-formed summary filling `share` of its cap."""

    def __init__(self, share: float) -> None:
        super().__init__()
        self.share = share

    async def stream(self, request):
        if request.purpose == "summary":
            headings = tokens.count_text(well_formed(""))
            words = max(1, int((request.max_tokens - headings - 2) * self.share))
            while words > 1 and tokens.count_text(well_formed(WORD * words)) > \
                    request.max_tokens:
                words -= 1
            self.summaries = [well_formed(WORD * words)]
        async for part in super().stream(request):
            yield part

"""The built-in `offline` model: no network, no key, deterministic.

Its reply is a function of the request alone. It streams in small pieces, reports usage with
the same tokenizer the budget uses, and answers summary requests with an extractive summary
(`offline_summary`), so that every feature of picochat works on a fresh machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from typing import Any, AsyncIterator

from picochat import tokens
from picochat.pins import PINS_OPEN
from picochat.summary_contract import SUMMARY_OPEN
from picochat.providers.base import (
    Finish,
    ModelInfo,
    Provider,
    ProviderRequest,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
)

OFFLINE_MODEL = "offline"
DEFAULT_DELAY_MS = 4.0  # between streamed pieces; PICOCHAT_OFFLINE_DELAY_MS overrides


class OfflineProvider(Provider):
    def __init__(self, delay_ms: float | None = None) -> None:
        self.info = ModelInfo(provider_kind="offline", model=OFFLINE_MODEL, offline=True,
                              labels=("offline",))
        if delay_ms is None:
            delay_ms = float(os.environ.get("PICOCHAT_OFFLINE_DELAY_MS", DEFAULT_DELAY_MS))
        self.delay = max(0.0, delay_ms) / 1000

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamEvent]:
        call = tool_call_for(request)
        if call is not None:
            name, arguments = call
            await asyncio.sleep(self.delay)
            yield ToolCallDelta(0, f"call_offline_{len(request.messages)}", name, arguments)
            yield Usage(prompt_tokens=tokens.count_provider_messages(request.messages)
                        + tokens.count_tools(request.tools),
                        completion_tokens=tokens.count_text(arguments))
            yield Finish("tool_calls")
            return
        text = reply_for(request)
        for piece in _pieces(text):
            if self.delay:
                await asyncio.sleep(self.delay)
            else:
                await asyncio.sleep(0)
            yield TextDelta(piece)
        yield Usage(prompt_tokens=tokens.count_provider_messages(request.messages)
                    + tokens.count_tools(request.tools),
                    completion_tokens=tokens.count_text(text))
        yield Finish("stop")


_SEARCH = re.compile(r"^\s*(?:please\s+)?(?:search|find|look up)\s+(?:the\s+)?(?:history|"
                     r"conversation|earlier messages)\s+(?:for\s+)?(?P<q>.+)$", re.I | re.S)
_READ = re.compile(r"^\s*(?:please\s+)?(?:read|open|show)\s+(?:the\s+)?file\s+(?P<p>\S+)",
                   re.I)


def tool_call_for(request: ProviderRequest) -> tuple[str, str] | None:
    """A tool call when the user plainly asks for one ("search history for …", "read file …")
    and the tool is offered; never right after a tool result, so the loop always ends."""
    if request.purpose != "turn" or not request.messages:
        return None
    last = request.messages[-1]
    if last.get("role") != "user":
        return None
    offered = {t.get("function", {}).get("name") for t in request.tools}
    text = _text(last)
    m = _SEARCH.match(text)
    if m and "history_search" in offered:
        return "history_search", json.dumps({"query": m.group("q").strip(" ?.!")[:200]})
    m = _READ.match(text)
    if m and "read_file" in offered:
        return "read_file", json.dumps({"path": m.group("p").strip("`'\".,")})
    return None


def reply_for(request: ProviderRequest) -> str:
    """The whole reply, before streaming: deterministic in the request."""
    from picochat.providers import offline_summary  # its ledger's regexes: after the frame

    joined = "\n".join(_text(m) for m in request.messages)
    if request.purpose == "summary" or offline_summary.is_summary_request(joined):
        return offline_summary.summarize(joined, request.max_tokens)
    if request.messages and request.messages[-1].get("role") == "tool":
        return _after_tools(request.messages)
    return _chat_reply(request.messages)


def _after_tools(messages: tuple[dict[str, Any], ...]) -> str:
    """The answer after a tool batch: what each tool returned, quoted."""
    results = []
    for m in reversed(messages):
        if m.get("role") != "tool":
            break
        results.append(m)
    lines = ["I'm picochat's built-in **offline** model. Here is what the tools returned:", ""]
    for m in reversed(results):
        lines.append(f"**{m.get('name') or 'tool'}**:")
        lines.append("")
        lines.extend("> " + line for line in (_text(m).splitlines()[:12] or [""]))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _chat_reply(messages: tuple[dict[str, Any], ...]) -> str:
    framed = (SUMMARY_OPEN, PINS_OPEN)  # picochat's own blocks, not something the user said
    users = [_text(m) for m in messages
             if m.get("role") == "user" and not _text(m).startswith(framed)]
    has_summary = any(_text(m).startswith(SUMMARY_OPEN) for m in messages)
    pins = any(_text(m).startswith(PINS_OPEN) for m in messages)
    last = users[-1] if users else ""
    lines = [
        "I'm picochat's built-in **offline** model: no network and no key, so I can only "
        "reflect what you sent.",
        "",
        f"> {_quote(last) or '(an empty message)'}",
        "",
    ]
    count = tokens.count_provider_messages(messages)
    lines.append(f"This request holds {len(messages)} messages ({len(users)} from you), "
                 f"about {count:,} tokens.")
    if len(users) > 1:
        lines.append(f"Earlier you said: “{_quote(users[0], 120)}”.")
    if has_summary:
        lines.append("Part of this conversation reaches me as a checkpoint summary.")
    if pins:
        lines.append("Your pins reach me in every request, before everything else.")
    lines.append("")
    lines.append("Set a real model with `--model` or `picochat config init`.")
    return "\n".join(lines)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _quote(text: str, limit: int = 300) -> str:
    """`text` on one line, clipped at a word: half a ticket id quoted back would read as a
    different id to the next summary and to the exact-fact ledger."""
    from picochat.providers import offline_summary

    return offline_summary.clip(" ".join(text.split()), limit)


def _pieces(text: str) -> list[str]:
    """Split into word-sized pieces that concatenate back to `text` exactly."""
    return re.findall(r"\S+\s*|\s+", text) or [""]

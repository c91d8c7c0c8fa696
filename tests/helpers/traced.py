"""Conversations for the branch and fork specs: turns whose every message names itself with a
token, and compactions as each trigger runs one.

A message's token is `fact<N>x`, N its seq plus `tag` times `TAG`: a fork's rows (tag 1, 2…)
never share a token with its source's, so a summary or a ledger row can be traced back to the
one row it came from, whatever session wrote it.
"""

from __future__ import annotations

import asyncio
import re

from picochat.budget import budget_limits
from picochat.compaction.compact import CompactMode, CompactRequest, compact_context
from picochat.providers.errors import ProviderUnavailable
from picochat.providers.offline import OfflineProvider
from tests.helpers.storage import append_message

TAG = 100_000
TOKEN = re.compile(r"\bfact(\d+)x\b")  # each message begins with one; the user's also
# state it as a fact with a port, which the ledger keeps


def turn(store, sid: str, text: str, answer: str, tag: int = 0) -> tuple[int, int]:
    """A user message and its answer; their seqs."""
    seq = store.max_seq(sid) + 1
    n = tag * TAG + seq
    u = append_message(store, sid, "user", f"fact{n}x: the fact{n}x service runs on port "
                       f"{6000 + n}. {text}", turn_id=f"t{n}")
    a = append_message(store, sid, "assistant", f"fact{n + 1}x: {answer}", turn_id=f"t{n}")
    return u.seq, a.seq


def seqs(messages) -> list[int]:
    return [m.seq for m in messages]


class Down(OfflineProvider):
    """A summarizer that cannot be reached: an overflow then folds without a summary."""

    async def stream(self, request):
        raise ProviderUnavailable("connection refused")
        yield  # an async generator, as a provider's stream is


def compact(store, sid: str, everything: bool = True, reason: str = "manual",
            down: bool = False):
    """A compaction as each trigger runs one: `/compact [all]`, the automatic one before a
    turn, or overflow recovery (which trims without a summary when the summary fails)."""
    window = {"manual": 1200, "auto": 700, "overflow": 500}[reason]
    return asyncio.run(compact_context(
        store, Down(0) if down else OfflineProvider(0), CompactRequest(
            session_id=sid, reason=reason, limits=budget_limits(window, None, 200, 60),
            system_prompt="sys", everything=everything and reason == "manual",
            mode=CompactMode.SUMMARY_OR_TRIM if reason == "overflow" else CompactMode.SUMMARY)))

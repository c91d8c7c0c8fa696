"""ContextProjection: the one history the provider sees, derived from durable state.

`project` is a pure function of a storage snapshot: the user's pins (if any), the summary block
of the active checkpoint (if any), then the raw messages from its `first_retained_seq`, or every
raw message since the last `/clear`. It never calls a provider and never writes, so the same database always gives the
same projection: a restarted session sends the model what it sent before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from picochat.messages import Message, Pin, StoredLedger
from picochat.pins import pins_block
from picochat.storage.store import ContextSnapshot, Store
from picochat.summary_contract import SUMMARY_CLOSE, SUMMARY_OPEN


SEARCH_HINT = ("(The exact earlier messages are not lost: the history_search tool searches "
               "them.)")


def summary_block(summary: str, searchable: bool = False) -> str:
    """The text of the user-role message that carries a checkpoint summary, delimited so the
    model reads it as a record, never as a system instruction or a new request; with
    `searchable`, a last line inside the block says `history_search` can reach the raw log."""
    hint = f"\n{SEARCH_HINT}" if searchable else ""
    return f"{SUMMARY_OPEN}\n{summary.strip()}{hint}\n{SUMMARY_CLOSE}"


@dataclass(frozen=True)
class Repair:
    """One message left out of the projection by the tool-chain rule, and why."""

    seq: int
    kind: str  # "orphan_tool_result" | "incomplete_tool_group"
    # The row itself, so compaction can still fold it into a summary: left out of the
    # context, it must not be left out of the summary too.
    message: Message | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ContextProjection:
    session_id: str
    checkpoint_id: str | None
    context_generation: int
    summary: str | None
    raw: tuple[Message, ...]
    first_raw_seq: int | None
    max_raw_seq: int
    repairs: tuple[Repair, ...] = ()
    diagnostics: tuple[str, ...] = ()  # e.g. an unusable active checkpoint we fell back from
    ledger: StoredLedger = StoredLedger()  # the checkpoint's exact-fact ledger (its rows)
    pins: tuple[Pin, ...] = ()  # sent verbatim before everything else, whatever is compacted

    @property
    def pins_text(self) -> str | None:
        return pins_block(self.pins)

    @property
    def raw_tokens(self) -> int:
        """From the counts stored at append: no re-tokenizing of history."""
        return sum(m.tokens for m in self.raw)

    @property
    def last_raw_seq(self) -> int | None:
        return self.raw[-1].seq if self.raw else None

    def history_messages(self, searchable: bool = False) -> list[dict[str, Any]]:
        """Pins and summary block (each if any) and raw tail, as OpenAI-format messages."""
        out: list[dict[str, Any]] = []
        if self.pins:
            out.append({"role": "user", "content": self.pins_text})
        if self.summary is not None:
            out.append({"role": "user", "content": summary_block(self.summary, searchable)})
        out.extend(m.provider_dict() for m in self.raw)
        return out

    def provider_messages(self, system_prompt: str,
                          searchable: bool = False) -> list[dict[str, Any]]:
        """What the provider receives: the system prompt first, then the history."""
        head = [{"role": "system", "content": system_prompt}] if system_prompt else []
        return head + self.history_messages(searchable)


def project(snapshot: ContextSnapshot) -> ContextProjection:
    """Build the projection from one consistent storage read."""
    raw, repairs = repair_tool_chains(snapshot.messages)
    checkpoint = snapshot.checkpoint
    diagnostics = (snapshot.checkpoint_problem,) if snapshot.checkpoint_problem else ()
    return ContextProjection(
        session_id=snapshot.session.id,
        checkpoint_id=checkpoint.id if checkpoint else None,
        context_generation=snapshot.session.context_generation,
        summary=checkpoint.summary if checkpoint else None,
        raw=raw,
        first_raw_seq=raw[0].seq if raw else None,
        max_raw_seq=snapshot.max_seq,
        repairs=repairs,
        diagnostics=diagnostics,
        ledger=checkpoint.ledger if checkpoint else StoredLedger(),
        pins=snapshot.pins,
    )


def restore(store: Store, session_id: str) -> ContextProjection:
    """Restore a session's context from the database alone: no provider, no writes."""
    return project(store.context_snapshot(session_id))


def repair_tool_chains(messages: Sequence[Message]) -> tuple[tuple[Message, ...], tuple[Repair, ...]]:
    """The one repair rule: a tool group reaches the provider whole or not at all (providers
    refuse a tool call without its results, and a result without its call).

    A group is an assistant message with `tool_calls` followed directly by a result for every
    call. An incomplete group is left out entirely; a tool result outside a group is an orphan
    and left out. Messages are never altered, only omitted, and each omission is reported.
    """
    kept: list[Message] = []
    repairs: list[Repair] = []
    i, n = 0, len(messages)
    while i < n:
        m = messages[i]
        if m.role == "assistant" and m.tool_calls:
            wanted = {c.get("id") for c in m.tool_calls}
            j = i + 1
            results: list[Message] = []
            while j < n and messages[j].role == "tool":
                results.append(messages[j])
                j += 1
            answered = {r.tool_call_id for r in results}
            if wanted <= answered and None not in wanted:
                kept.append(m)
                seen: set[str | None] = set()
                for r in results:
                    if r.tool_call_id in wanted and r.tool_call_id not in seen:
                        kept.append(r)
                        seen.add(r.tool_call_id)
                    else:
                        repairs.append(Repair(r.seq, "orphan_tool_result", r))
            else:
                repairs.append(Repair(m.seq, "incomplete_tool_group", m))
                repairs.extend(Repair(r.seq, "incomplete_tool_group", r) for r in results)
            i = j
            continue
        if m.role == "tool":
            repairs.append(Repair(m.seq, "orphan_tool_result", m))
        else:
            kept.append(m)
        i += 1
    return tuple(kept), tuple(repairs)

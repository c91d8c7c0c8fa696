"""The values that flow from storage upward: sessions, raw messages and checkpoints.

Frozen, so a projection built from them can be compared field by field and never drifts.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Sequence

ROLES = ("user", "assistant", "tool")

# A message's status: how its turn ended. Only assistant messages are ever not "complete".
COMPLETE = "complete"
INTERRUPTED = "interrupted"  # the stream stopped (cancel, error) after some text arrived


class TriggerReason(StrEnum):
    """Why a compaction ran; stored with its checkpoint."""

    MANUAL = "manual"      # `/compact` or `picochat compact`
    AUTO = "auto"          # the check before a turn: the next request was over the threshold
    OVERFLOW = "overflow"  # the request did not fit the window (the provider said so, or the
    #                        estimate knew before sending)


def valid_text(text: str) -> str:
    """`text` with every lone surrogate (undecodable argv bytes under surrogateescape, a JSON
    \\udXXX escape from a provider) replaced by U+FFFD, one per bad byte: SQLite, tiktoken
    and the terminal all need valid UTF-8, and a message must never fail to save over it."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


@dataclass(frozen=True)
class Session:
    id: str
    name: str
    created_at: int
    updated_at: int
    model: str | None
    active_context_checkpoint_id: str | None
    context_generation: int
    context_floor_seq: int  # /clear: the context holds only messages with seq > this
    last_compressed_message_at: int | None
    deleted_at: int | None
    system_prompt: str | None = None  # set by /system; None: the agent's prompt
    message_count: int = 0
    branch: int = 0  # the branch in use (storage/branches.py); 0 for one never rewound
    forked_from: str | None = None  # a fork's source session (storage/forks.py)
    fork_seq: int = 0  # a fork: the last message of its source it starts from


@dataclass(frozen=True)
class Message:
    session_id: str
    seq: int
    role: str
    content: str
    tool_calls: tuple[dict[str, Any], ...] | None
    tool_call_id: str | None
    name: str | None
    turn_id: str | None
    tool_status: str | None
    status: str
    tokens: int
    created_at: int
    retracted: bool = False  # removed from the context by undo; still in the raw log
    statements: str | None = None  # its ledger statements as JSON (`statements.to_json`),
    # taken once at append; None: not taken (a row from before schema 12, or built in memory)
    reasoning: str | None = None  # the thinking of an assistant row in a turn that called
    # tools, kept only for a provider that wants it back (`Provider.keeps_thinking`: DeepSeek)

    def provider_dict(self) -> dict[str, Any]:
        """The OpenAI-format message the provider receives: the raw row, unchanged. Kept
        thinking rides along as `reasoning_content`; a provider that does not want it back
        leaves it out of the request."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [dict(c) for c in self.tool_calls]
        if self.reasoning:
            out["reasoning_content"] = self.reasoning
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role == "tool":
            out["name"] = self.name
        return out


@dataclass(frozen=True)
class LedgerRow:
    """One line of a checkpoint's exact-fact ledger, as stored beside the checkpoint.

    The ledger is picochat's own record of what a compaction folded: written from the raw
    messages, never read back out of summary text, so nothing a model writes can become one."""

    seq: int        # the message it came from
    kind: str       # "statement", "correction", "paste", or (rows from before schema 12)
    # a bare value's kind ("port", "path", …)
    said_by: str    # "user", "answer" or "tool"
    text: str       # what the line says
    values: tuple[str, ...] = ()  # the exact values it holds (what a correction may retire)


@dataclass(frozen=True)
class StoredLedger:
    """A checkpoint's ledger rows, oldest first, and the facts evicted along its chain."""

    rows: tuple[LedgerRow, ...] = ()
    dropped: int = 0         # facts evicted so far, over every checkpoint of the chain
    dropped_up_to: int = 0   # the newest seq among them


POINTERS_KIND = "picochat"       # provider_kind of a checkpoint tier one wrote (no model)
POINTERS_MODEL = "tool-pointers"


@dataclass(frozen=True)
class Checkpoint:
    """A row of `context_checkpoints` and its ledger: never changed once written."""

    id: str
    session_id: str
    generation: int
    parent_checkpoint_id: str | None
    summary: str
    first_retained_seq: int
    source_max_seq: int
    trigger_reason: TriggerReason
    provider_kind: str
    model: str
    tokens_before: int
    tokens_after: int
    degraded: bool
    created_at: int
    ledger: StoredLedger = StoredLedger()

    @property
    def pointers(self) -> bool:
        """Tier one wrote it, with no summary call: the older turns word for word, their tool
        results as pointer lines (`compaction/pointers.py`)."""
        return (self.provider_kind, self.model) == (POINTERS_KIND, POINTERS_MODEL)


@dataclass(frozen=True)
class Pin:
    """A statement the user pinned: sent verbatim in every request of its session, never
    summarized and never evicted, until `/unpin`. Numbered per session from 1, and a number is
    never reused, so `/unpin 3` means the pin the list showed as #3."""

    number: int
    text: str
    tokens: int              # counted once, when pinned
    source_seq: int | None   # the message it was pinned from; None: typed with /pin
    created_at: int


@dataclass(frozen=True)
class NewMessage:
    """A message about to be appended, as its writer says it; `prepare` (picochat/prepare.py)
    makes it a `PreparedMessage`, the store then gives it its seq and time."""
    role: str
    content: str
    tool_calls: tuple[dict[str, Any], ...] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    turn_id: str | None = None
    tool_status: str | None = None
    status: str = COMPLETE
    token_count: int | None = None
    reasoning: str | None = None


@dataclass(frozen=True)
class PreparedMessage:
    """A message ready to insert, its derived data computed once by its writer
    (`prepare.prepare`): text made valid, tool calls serialized, token count and statements
    taken. The store inserts it as it is, giving it only its seq and time."""

    role: str
    content: str
    tool_calls: tuple[dict[str, Any], ...] | None   # as the `Message` holds them
    tool_calls_json: str | None                     # as the row stores them
    tool_call_id: str | None
    name: str | None
    turn_id: str | None
    tool_status: str | None
    status: str
    tokens: int
    statements: str  # `statements.to_json`
    reasoning: str | None

    def stored(self, session_id: str, seq: int, created_at: int,
               retracted: bool = False) -> Message:
        """The `Message` this becomes once the store has given it its place."""
        return Message(session_id, seq, self.role, self.content, self.tool_calls,
                       self.tool_call_id, self.name, self.turn_id, self.tool_status, self.status,
                       self.tokens, created_at, retracted=retracted, statements=self.statements,
                       reasoning=self.reasoning)


@dataclass(frozen=True)
class NewCheckpoint:
    """What a compaction asks storage to commit; storage assigns id, generation and time."""

    parent_checkpoint_id: str | None
    summary: str
    first_retained_seq: int
    source_max_seq: int
    trigger_reason: TriggerReason
    provider_kind: str
    model: str
    tokens_before: int
    tokens_after: int
    degraded: bool = False
    ledger: StoredLedger = StoredLedger()


@dataclass(frozen=True)
class CompactionWait:
    """Automatic compaction failed to get a usable summary at this context: it is not asked
    for again until the context (still this generation) has grown past `tokens_before` by a
    quarter of the threshold. A compaction of any kind, or a new generation, ends the wait."""

    context_generation: int
    tokens_before: int
    kind: str            # the error kind that started it: "summary_rejected", "summary_failed"


@dataclass(frozen=True)
class ModelTraits:
    """What a model's server taught picochat by failing, remembered across processes.

    `learned_window` applies only while the config still says `configured_window`: a user who
    edits `token_limit` has taken charge of the window."""

    model: str                        # the litellm model string and its api_base (`model_key`)
    learned_window: int | None = None
    configured_window: int | None = None
    tools_refused: bool = False

    def window_for(self, configured: int) -> int | None:
        """The learned window, when it still corrects this configured window."""
        if self.learned_window is None or self.configured_window != configured:
            return None
        return self.learned_window if self.learned_window < configured else None


def model_key(model: str, api_base: str | None) -> str:
    """One model on one server: the same name behind two addresses may differ."""
    return f"{model} @ {api_base}" if api_base else model


def pair_tool_calls(messages: Sequence[Message]
                    ) -> tuple[dict[int, dict[str, Any]], dict[int, list[dict[str, Any]]]]:
    """Each tool result's call (by the result's seq), and each assistant message's calls that
    got no result (by its seq). A result answers a call of the nearest assistant message before
    it: some servers number their calls `call_0`, `call_1` … afresh each time, so an id alone
    names many calls."""
    results: dict[int, dict[str, Any]] = {}
    unanswered: dict[int, list[dict[str, Any]]] = {}
    owner: int | None = None
    open_calls: dict[Any, dict[str, Any]] = {}
    waiting: list[dict[str, Any]] = []

    def close() -> None:
        if owner is not None and waiting:
            unanswered[owner] = list(waiting)

    for m in messages:
        if m.role == "tool":
            call = open_calls.get(m.tool_call_id)
            if call is not None:
                results[m.seq] = call
                waiting[:] = [c for c in waiting if c is not call]
            continue
        close()
        owner, waiting = m.seq, list(m.tool_calls or ())
        open_calls = {c.get("id"): c for c in waiting}
    close()
    return results, unanswered

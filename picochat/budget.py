"""ContextBudget: how full the next request is, and whether to compact first.

Every figure comes from counts taken once: each message's tokens are stored at append, the
system prompt, tool schemas and a checkpoint summary are counted once and cached. Nothing here
re-tokenizes history. The same `ContextBudget` value decides auto compaction and fills `/info`,
so `/info` shows what the trigger sees.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any, Iterable, Mapping, Sequence

from picochat import tokens
from picochat.errors import MessageTooLong, PicochatError
from picochat.messages import Pin
from picochat.pins import pins_block
from picochat.projection import ContextProjection, summary_block


@dataclass(frozen=True)
class BudgetLimits:
    """Configured and effective limits side by side, so `/info` can show both: small windows
    shrink the reserve and the kept tail, and that must not be hidden."""

    configured_window: int
    window: int
    configured_reserve: int
    reserve: int
    configured_keep_recent: int
    keep_recent: int
    threshold: int
    token_factor: float = 1.0  # the model family's tokens per o200k token (tokens.family_factor)

    def counted(self, model_tokens: int) -> int:
        """A limit in the model's tokens as o200k counts: what stored counts compare against."""
        return int(model_tokens / self.token_factor)


def message_over_window(text: str, limits: BudgetLimits) -> int | None:
    """The message's size in the model's tokens when it alone is larger than the whole window,
    else None. A token is at least one UTF-8 byte, so a message with no more bytes than the
    window fits without a count (characters are no bound: one emoji is several tokens)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if tokens.scale(size, limits.token_factor) <= limits.window:
        return None
    size = tokens.scale(tokens.count_text(text), limits.token_factor)
    return size if size > limits.window else None


def too_long_error(size: int, limits: BudgetLimits) -> "MessageTooLong":
    return MessageTooLong(
        f"this message is about {size:,} tokens, more than the model's whole window of "
        f"{limits.window:,}", "shorten it, send it in parts, or use a model with a larger window")


def effective_window(model_window: int, agent_limit: int | None) -> int:
    """An agent's limit may only tighten the model's window, never widen it."""
    return model_window if agent_limit is None else min(model_window, agent_limit)


def budget_limits(model_window: int, agent_limit: int | None, reserve_tokens: int,
                  keep_recent_tokens: int, token_factor: float = 1.0) -> BudgetLimits:
    """The agent only tightens; reserve and keep shrink with small windows (to half the
    window, half the threshold), so the threshold stays above zero and the kept tail under it."""
    window = effective_window(model_window, agent_limit)
    reserve = min(reserve_tokens, window // 2)
    threshold = window - reserve
    keep = min(keep_recent_tokens, threshold // 2)
    return BudgetLimits(model_window, window, reserve_tokens, reserve, keep_recent_tokens, keep,
                        threshold, token_factor)


MIN_ANSWER_TOKENS = 256


ESTIMATE_SLACK = 0.05  # of an estimated request: what a server's tokenizer may count over it


def answer_cap(limits: BudgetLimits, request_tokens: int, exact: bool = False) -> int:
    """`max_tokens` for a chat request: the reserve, the room the budget keeps for the answer,
    lowered so that request and answer together fit the window, and never below
    MIN_ANSWER_TOKENS (or the reserve, if that is smaller). Sent on every request, so a
    provider never fills in its own (litellm asks Anthropic for 64,000, more than the window
    leaves), and a server that counts the answer into its context (llama.cpp) is asked for
    what fits. Unless the provider counted this very request (`exact`), the request is an
    estimate, and a server's own tokenizer may count more (SmolLM2's counted a 6,607-token
    estimate with access logs in it as 6,639): ESTIMATE_SLACK of it is left over."""
    floor = min(limits.reserve, MIN_ANSWER_TOKENS)
    slack = 0 if exact else math.ceil(request_tokens * ESTIMATE_SLACK)
    return max(floor, min(limits.reserve, limits.window - request_tokens - slack))


def should_compact(enabled: bool, context_tokens: int, threshold: int) -> bool:
    """The one auto-compaction rule: strictly above the threshold, and only if enabled."""
    return enabled and context_tokens > threshold


# --- the warning before it --------------------------------------------------------------------
# Compaction announced, never a surprise (issue 34): past SOFT_SHARE of the point where it runs
# (auto-compaction on) or where the next request no longer fits (off: the same point, the
# window less the answer's reserve), the app says how many turns of the recent size are left.
SOFT_SHARE = 0.85
RECENT_TURNS = 3  # the turns whose average size the forecast assumes for the next ones


@dataclass(frozen=True)
class Forecast:
    """How near the compaction point the context is, once past the soft point."""

    in_turns: int | None  # the turn that reaches it, if turns stay the recent size: 1 is the
    #                       next one; None: no turn to judge by yet
    auto: bool            # auto-compaction on (else: the window fills there)


def compaction_forecast(used: int, threshold: int, auto: bool,
                        recent_turns: Sequence[int]) -> Forecast | None:
    """None below SOFT_SHARE of `threshold`; else which turn reaches it if turns stay the size
    of the last RECENT_TURNS (`recent_turns`: their sizes in the model's tokens, oldest first).
    Their median, not their mean: one pasted log among them said "at the next turn" for turns
    that then went on for several more."""
    if threshold <= 0 or used < SOFT_SHARE * threshold:
        return None
    if used >= threshold:
        return Forecast(1, auto)
    sizes = [n for n in recent_turns[-RECENT_TURNS:] if n > 0]
    if not sizes:
        return Forecast(None, auto)
    typical = statistics.median(sizes)
    return Forecast(math.floor((threshold - used) / typical) + 1, auto)


# --- what a compaction leaves --------------------------------------------------------------------

AFTER_SHARE = 0.6   # a compaction leaves the context at most this share of the threshold...
GAIN_SHARE = 0.25   # ...and an automatic one is worth a summary only if it frees this share
LEDGER_PART = 0.40  # of the room left after the fixed part: the exact-fact ledger's, reserved
PROSE_PART = 0.20   # the model's summary text; the kept raw tail takes the rest
MIN_PROSE = 160     # nine headings and a line under each
MIN_LEDGER = 160    # a handful of statements and the drop note
TINY_PROSE = 112    # where 60 % has no room for both: nine headings, a few words, the drop note
TINY_LEDGER = 96    # ...and two statements
TINY_PROSE_SHARE = (9, 20)  # of a tiny room, the prose's: the ledger takes a little more


def summary_reserve(window: int) -> int:
    """The most a summary's prose may be, at any size of context: a quarter of the window up
    to 2,048 tokens."""
    return min(2048, window // 4)


def ledger_cap(window: int) -> int:
    """The most the exact-fact ledger may be: a third of the window up to 4,096 tokens (some
    100 statements)."""
    return min(4096, window // 3)


@dataclass(frozen=True)
class CompactionRoom:
    """How a compaction spends the context it leaves, so that the next turns have room to grow
    before the threshold comes round again (a compaction landing near the threshold is paid
    for again on the next turn). Ledger first: where room is short, the raw tail gives way
    before the user's statements do, as a fact cannot be rebuilt from prose or a shorter tail.
    In the model's tokens."""

    target: int   # the whole context after a compaction: AFTER_SHARE of the threshold
    ledger: int   # the exact-fact ledger's reserved share
    prose: int    # the model's summary text
    tail: int     # the newest whole turns kept word for word (at least the newest turn is),
    # and what the ledger leaves of its share (`with_spare`)

    def with_spare(self, ledger_tokens: int, keep_recent: int) -> int:
        """The tail's budget when the ledger needs only `ledger_tokens` of its share: the
        rest goes to the tail, up to keep_recent_tokens."""
        return max(self.tail, min(keep_recent, self.tail + self.ledger - ledger_tokens))


def worth_compacting(limits: BudgetLimits, before: int, after: int) -> bool:
    """An automatic compaction that frees less than GAIN_SHARE of the threshold would come
    round again within a turn or two: it is not worth a summary call until the context has
    grown by that much. `before` and `after` are estimates from stored counts; where the
    provider's own count put the context over the threshold and the estimate did not, the
    gain counts in proportion (the provider's tokens shrink as the estimate's do)."""
    if before <= 0:
        return False
    gain = (before - after) * max(1.0, limits.threshold / before)
    return gain >= GAIN_SHARE * limits.threshold


def retry_growth(limits: BudgetLimits) -> int:
    """How much the context grows after a failed automatic summary before the next is asked
    for: GAIN_SHARE of the threshold, or half of the reserve where that is less (at 128K a
    quarter of the threshold is more than the reserve: the wait would outlast the window)."""
    return max(1, min(math.ceil(GAIN_SHARE * limits.threshold),
                      (limits.window - limits.threshold) // 2))


def compaction_room(limits: BudgetLimits, fixed: int) -> CompactionRoom:
    """The room a compaction leaves under AFTER_SHARE of the threshold, after `fixed` (the
    system prompt, tools and framing), split into the ledger's share, the prose and the tail;
    each is also bounded by its own cap (the configured keep_recent_tokens for the tail). The
    ledger and the prose have floors (MIN_LEDGER, MIN_PROSE) that may take a tiny window past
    AFTER_SHARE, never past the threshold."""
    target = int(limits.threshold * AFTER_SHARE)
    framed = fixed + tokens.scale(_summary_framing(), limits.token_factor)
    room = max(0, target - framed)
    if room < MIN_PROSE + MIN_LEDGER:
        return _tiny_room(limits, framed, target, room)
    ledger = min(ledger_cap(limits.window), max(MIN_LEDGER, int(room * LEDGER_PART)), room)
    prose = min(summary_reserve(limits.window), max(MIN_PROSE, int(room * PROSE_PART)))
    tail = max(0, min(limits.keep_recent, room - ledger - prose))
    return CompactionRoom(target, ledger, prose, tail)


def _tiny_room(limits: BudgetLimits, framed: int, target: int, room: int) -> CompactionRoom:
    """A tiny window (2K with the built-in tools) or a big system prompt leaves less under 60 %
    than a summary and a ledger take at their usual floors: the two share what there is
    (the ledger a little more: a fact cannot be rebuilt from prose), the tail keeps only the
    newest turn. Under TINY_PROSE + TINY_LEDGER they keep those floors, past 60 % but never
    past the threshold."""
    room = max(room, min(TINY_PROSE + TINY_LEDGER, max(0, limits.threshold - framed)))
    part, whole = TINY_PROSE_SHARE
    prose = max(min(TINY_PROSE, room), room * part // whole)
    return CompactionRoom(target, max(0, room - prose), prose, 0)


# --- pins ----------------------------------------------------------------------------------------

PIN_SHARE = 0.10  # of the threshold: the most the user's pins may take together


def pin_cap(limits: BudgetLimits) -> int:
    """The most all pins together may cost (model tokens): a tenth of the threshold. Pins are
    fixed like the system prompt, so past that they would squeeze the room every compaction
    leaves; a pin that does not fit is refused, never trimmed."""
    return int(limits.threshold * PIN_SHARE)


def pins_cost(limits: BudgetLimits, pins: Sequence[Pin]) -> int:
    """What `pins` add to every request, in the model's tokens."""
    return tokens.scale(pins_tokens(pins_block(pins)), limits.token_factor)


# --- the next request ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestParts:
    """Token counts of each part of the next request."""

    system: int = 0
    tools: int = 0
    summary: int = 0
    raw_tail: int = 0
    current_input: int = 0
    framing: int = 0  # the reply priming every chat request carries
    pins: int = 0     # the user's pins: never summarized, never evicted

    @property
    def fixed(self) -> int:
        """What compaction cannot shrink: it only removes history."""
        return self.system + self.tools + self.framing + self.pins

    @property
    def total(self) -> int:
        return self.fixed + self.summary + self.raw_tail + self.current_input

    def scaled(self, factor: float) -> RequestParts:
        """The same parts in a model family's tokens (each rounded up)."""
        if factor == 1.0:
            return self
        return RequestParts(*(tokens.scale(n, factor) for n in (
            self.system, self.tools, self.summary, self.raw_tail, self.current_input,
            self.framing, self.pins)))


@dataclass(frozen=True)
class CalibrationKey:
    """Identifies one exact request prefix; provider usage is reused only on a match."""

    provider: str
    model: str
    context_generation: int
    last_raw_seq: int | None
    digest: str


@dataclass(frozen=True)
class Calibration:
    """The prompt tokens a provider reported for the request identified by `key`."""

    key: CalibrationKey
    prompt_tokens: int


def request_digest(system_prompt: str, tools: Sequence[Mapping[str, Any]],
                   checkpoint_id: str | None, raw_seqs: Iterable[int],
                   pins: str | None = None) -> str:
    """A digest of a request's messages and tools.

    Raw rows are immutable (append-only; undo and `/clear` bump the generation, which is part of
    the key), so a row is identified by its seq and a summary by its checkpoint id: hashing
    identities instead of text keeps this cheap on long histories.
    """
    h = hashlib.sha256()
    h.update(system_prompt.encode("utf-8"))
    h.update(b"\0" + tokens.tools_json(tools).encode("utf-8"))
    h.update(b"\0" + (pins or "").encode("utf-8"))
    h.update(b"\0" + (checkpoint_id or "").encode("ascii") + b"\0")
    h.update(",".join(map(str, raw_seqs)).encode("ascii"))
    return h.hexdigest()


@dataclass(frozen=True)
class RequestDraft:
    """The complete next request before it is sent: system, tools, history, new input."""

    system_prompt: str
    projection: ContextProjection
    tools: tuple[Mapping[str, Any], ...] = ()
    current_input: str = ""

    def parts(self) -> RequestParts:
        return RequestParts(
            system=_system_tokens(self.system_prompt),
            tools=tokens.count_tools(self.tools),
            summary=summary_tokens(self.projection.summary, self.searchable),
            raw_tail=self.projection.raw_tokens,
            current_input=(tokens.count_message("user", self.current_input)
                           if self.current_input else 0),
            framing=tokens.REPLY_PRIMING_TOKENS,
            pins=pins_tokens(self.projection.pins_text),
        )

    @property
    def searchable(self) -> bool:
        """`history_search` is offered, so the summary block says the raw log is reachable."""
        return any((t.get("function") or {}).get("name") == "history_search" for t in self.tools)

    def messages(self) -> list[dict[str, Any]]:
        out = self.projection.provider_messages(self.system_prompt, self.searchable)
        if self.current_input:
            out.append({"role": "user", "content": self.current_input})
        return out

    def key(self, provider: str, model: str, upto_seq: int | None = None) -> CalibrationKey:
        """The key of this request (with `upto_seq`: of its prefix up to that raw seq)."""
        raw = self.projection.raw
        if upto_seq is not None:
            raw = tuple(m for m in raw if m.seq <= upto_seq)
        last = raw[-1].seq if raw else None
        digest = request_digest(self.system_prompt, self.tools, self.projection.checkpoint_id,
                                (m.seq for m in raw), self.projection.pins_text)
        return CalibrationKey(provider, model, self.projection.context_generation, last, digest)


class UsageSource(StrEnum):
    """How the budget's used figure was made."""

    ESTIMATE = "estimate"                            # stored token counts only
    PROVIDER = "provider"                            # the provider's count of this very prompt
    PROVIDER_AND_ESTIMATE = "provider+estimate"      # its count of a prefix, plus the tail


@dataclass(frozen=True)
class ContextBudget:
    limits: BudgetLimits
    parts: RequestParts
    used_tokens: int
    usage_source: UsageSource

    @property
    def remaining_tokens(self) -> int:
        """Tokens left before auto compaction would trigger."""
        return max(0, self.limits.threshold - self.used_tokens)

    @property
    def over_window(self) -> bool:
        """The request would not fit the hard window at all."""
        return self.used_tokens > self.limits.window

    def should_compact(self, enabled: bool) -> bool:
        return should_compact(enabled, self.used_tokens, self.limits.threshold)

    @property
    def fixed_exceeds_threshold(self) -> bool:
        """System prompt and tools alone reach the threshold: compacting cannot help."""
        return self.parts.fixed >= self.limits.threshold


class FixedContextExceedsBudget(PicochatError):
    """System prompt and tools alone reach the threshold: compaction cannot help, and dropping
    all history must not pass for a success."""

    kind = "fixed_context_exceeds_budget"

    def __init__(self, parts: RequestParts, threshold: int) -> None:
        pins = f", your pins ({parts.pins:,} tokens)" if parts.pins else ""
        super().__init__(
            f"the system prompt ({parts.system:,} tokens), tool schemas ({parts.tools:,} "
            f"tokens){pins} and request framing ({parts.framing:,} tokens) alone reach the "
            f"compaction threshold of {threshold:,} tokens",
            "shorten the system prompt, " + ("unpin a pin (/pins lists them), "
                                             if parts.pins else "")
            + "disable tools, or use a model with a larger window")
        self.parts = parts
        self.threshold = threshold


def check_fixed(limits: BudgetLimits, parts: RequestParts) -> None:
    if parts.fixed >= limits.threshold:
        raise FixedContextExceedsBudget(parts, limits.threshold)


def estimate(limits: BudgetLimits, draft: RequestDraft) -> RequestParts:
    """The draft's parts from stored counts, in the model family's tokens."""
    return draft.parts().scaled(limits.token_factor)


def measure(limits: BudgetLimits, draft: RequestDraft, provider: str = "", model: str = "",
            calibration: Calibration | None = None) -> ContextBudget:
    """The budget of the next request (never raises: `/info` shows even a hopeless one).

    When the provider reported usage for a request whose key matches this draft's prefix field
    for field, that figure is the truth for the prefix and only the raw messages after it are
    estimated; otherwise the whole request is the sum of the stored counts.
    """
    parts = estimate(limits, draft)
    if calibration is not None:
        key = calibration.key
        if draft.key(provider, model, key.last_raw_seq) == key:
            tail = sum(m.tokens for m in draft.projection.raw
                       if key.last_raw_seq is None or m.seq > key.last_raw_seq)
            extra = tokens.scale(tail, limits.token_factor) + parts.current_input
            source = UsageSource.PROVIDER_AND_ESTIMATE if extra else UsageSource.PROVIDER
            return ContextBudget(limits, parts, calibration.prompt_tokens + extra, source)
    return ContextBudget(limits, parts, parts.total, UsageSource.ESTIMATE)


# --- cached counts of the parts that are not stored per message ----------------------------------
# Counted with remember=True: the figures of an app just started come from counts an earlier run
# kept (tokens.remembered), with no encoding loaded.


@lru_cache(maxsize=1)
def _summary_framing() -> int:
    """The summary block's own words around a summary, and the ledger's heading and drop
    note: what a compacted context holds besides prose, facts and the tail."""
    note = ("- (1,000 older exact facts, from messages up to #100000, were dropped to fit; "
            "history_search finds them in the raw history)")
    return tokens.count_message("user", summary_block(f"\n\n## Exact Facts\n{note}", True),
                                remember=True)


@lru_cache(maxsize=64)
def pins_tokens(block: str | None) -> int:
    """The pins message's tokens; counted once per set of pins."""
    return tokens.count_message("user", block, remember=True) if block else 0


@lru_cache(maxsize=64)
def _system_tokens(system_prompt: str) -> int:
    return tokens.count_message("system", system_prompt, remember=True) if system_prompt else 0


@lru_cache(maxsize=256)
def summary_tokens(summary: str | None, searchable: bool = False) -> int:
    """A summary block's tokens; counted once per summary text (summaries are bounded)."""
    if summary is None:
        return 0
    return tokens.count_message("user", summary_block(summary, searchable), remember=True)

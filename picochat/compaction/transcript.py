"""The bounded transcript a summary call reads.

A request-local copy: the raw rows are never changed. Its size comes from the summarizing
model's window, not a fixed cap, so a 128K model reads up to ~125K tokens of source and a 4K
model ~2.5K. When the source is larger, nothing is refused and nothing is summarized twice: the
previous summary goes first, then the newest records of the span backwards; a record too long
for its share keeps its head and tail; binary and base64 payloads become a description; and the
transcript says how much it left out, so the summary can say so too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Sequence

from picochat import summary_contract as sc
from picochat import tokens
from picochat.messages import INTERRUPTED, Message

UNKNOWN_TOOL_STATUS = "unknown_not_persisted_separately"
MIN_RECORD_TOKENS = 48      # below this a cut record says nothing useful; leave it out instead
TOOL_RECORD_SHARE = 8       # one tool result may take at most 1/8 of the source budget
RECORD_SHARE = 3            # any other record at most 1/3
PREVIOUS_SUMMARY_SHARE = 2  # the previous summary at most 1/2
ARGS_CHARS = 300            # tool-call arguments shown per call

_DATA_URI = re.compile(r"data:([\w.+-]+/[\w.+-]+)?(?:;[\w=-]+)*;base64,[A-Za-z0-9+/=\s]{16,}")
_BASE64_RUN = re.compile(r"(?:[A-Za-z0-9+/]{76}\s*){4,}[A-Za-z0-9+/]*={0,2}|[A-Za-z0-9+/]{320,}={0,2}")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class SummaryBudget:
    """How one summary call splits a model's window; the transcript gets what is left."""

    window: int
    output_reserve: int          # the summary's own size: its prose cap
    safety: int
    prompt_overhead: int
    reasoning: int = 0           # room a reasoning model thinks in, on top of the summary

    @property
    def source_budget(self) -> int:
        return (self.window - self.output_reserve - self.reasoning - self.prompt_overhead
                - self.safety)


def summary_budget(window: int, prompt_overhead: int, cap: int | None = None,
                   reasoning: bool = False) -> SummaryBudget:
    """`cap`: a tighter output cap (the chat model's, when another model summarizes).
    `reasoning`: the summarizing model thinks first, and its thinking counts against the
    request's `max_tokens`: it gets `reasoning_allowance(window)` more, taken from the
    transcript's share of the window."""
    reserve = min(2048, window // 4)
    return SummaryBudget(window, reserve if cap is None else min(reserve, cap),
                         min(512, window // 16), prompt_overhead,
                         reasoning_allowance(window) if reasoning else 0)


REASONING_TOKENS = 8192   # the most a summary request leaves a reasoning model to think in
REASONING_SHARE = 8       # and at most this fraction of its window


def reasoning_allowance(window: int) -> int:
    """Output tokens a reasoning model may think in before it writes a summary."""
    return min(REASONING_TOKENS, window // REASONING_SHARE)


@dataclass(frozen=True)
class Transcript:
    text: str
    tokens: int
    source_messages: int
    included: int
    omitted: int                 # oldest records of the span that did not fit
    truncated: int               # records cut to head and tail
    binary: int                  # records whose binary/base64 payload became a description
    previous_summary: str        # "none" | "full" | "truncated"

    @property
    def strategy(self) -> str:
        return "previous summary first, newest records first, head/tail for long records"


def serialize(previous_summary: str | None, span: Sequence[Message],
              budget_tokens: int) -> Transcript:
    """The transcript of `previous_summary` + `span`, at most `budget_tokens` tokens."""
    frame = _frame_tokens(previous_summary is not None, len(span))
    remaining = max(0, budget_tokens - frame)

    prev_text, prev_state = "", "none"
    if previous_summary is not None:
        share = remaining // PREVIOUS_SUMMARY_SHARE
        fitted, cut, used = _fit(previous_summary.strip(), share)
        prev_text = fitted or ""
        prev_state = "truncated" if cut else "full"
        remaining -= used

    chosen: list[str] = []
    truncated = binary = 0
    record_cap = max(MIN_RECORD_TOKENS, budget_tokens // RECORD_SHARE)
    tool_cap = max(MIN_RECORD_TOKENS, budget_tokens // TOOL_RECORD_SHARE)
    for m in reversed(span):
        header, body, was_binary = _record(m)
        header_tokens = tokens.count_text(header) + 1
        cap = min(remaining, tool_cap if m.role == "tool" else record_cap) - header_tokens
        if cap < MIN_RECORD_TOKENS // 2:
            break
        # a plain message's stored count (taken once, at append) bounds its body's tokens:
        # no need to tokenize 200k tokens of history again to know they fit
        known = m.tokens if not was_binary and not m.tool_calls and body == m.content else None
        fitted, cut, used = _fit(body, cap, known)
        if fitted is None:
            break
        chosen.append(header + "\n" + fitted if fitted else header)
        remaining -= header_tokens + used
        truncated += cut
        binary += was_binary
    chosen.reverse()

    omitted = len(span) - len(chosen)
    meta = _meta_line(span, len(chosen), omitted, truncated, binary, prev_state)
    parts = [sc.TRANSCRIPT_BEGIN, meta]
    if previous_summary is not None:
        parts += [sc.PREVIOUS_SUMMARY_BEGIN, prev_text, sc.PREVIOUS_SUMMARY_END]
    if omitted:
        parts.append(f"[{omitted:,} older messages omitted: they did not fit this request]")
    parts += chosen
    parts.append(sc.TRANSCRIPT_END)
    text = "\n".join(parts)
    # what was counted against the budget: an upper bound of the text's own tokens
    return Transcript(text, budget_tokens - remaining, len(span), len(chosen), omitted,
                      truncated, binary, prev_state)


# --- one record ----------------------------------------------------------------------------------


def _record(m: Message) -> tuple[str, str, bool]:
    """(header, body, binary payload replaced) for one raw message."""
    detail = ""
    if m.role == "tool":
        status = m.tool_status or UNKNOWN_TOOL_STATUS
        detail = (f"name={m.name or 'unknown'} call={m.tool_call_id or '?'} status={status} "
                  f"chars={len(m.content):,}")
    elif m.status == INTERRUPTED:
        detail = "(interrupted: the answer stopped early)"
    body, was_binary = describe_binary(m.content)
    if m.tool_calls:
        calls = [_call_line(c) for c in m.tool_calls]
        body = "\n".join([body] + calls if body else calls)
    return sc.record_header(m.seq, m.role, detail), body, was_binary


def _call_line(call: dict) -> str:
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    args, _ = _cut_chars(describe_binary(args or "")[0], ARGS_CHARS)
    return f"[tool call {fn.get('name') or '?'} id={call.get('id') or '?'} args: {args}]"


def describe_binary(text: str) -> tuple[str, bool]:
    """Replace binary and base64 payloads with their type and size: a summary can use only
    that they were there."""
    if text and len(_CONTROL.findall(text[:4096])) > max(8, len(text[:4096]) // 20):
        return f"[binary content: {len(text):,} characters, not shown]", True
    found = False

    def data_uri(m: re.Match[str]) -> str:
        nonlocal found
        found = True
        return f"[base64 data ({m.group(1) or 'unknown type'}): {len(m.group(0)):,} characters]"

    def run(m: re.Match[str]) -> str:
        nonlocal found
        found = True
        return f"[base64-like data: {len(m.group(0)):,} characters]"

    out = _BASE64_RUN.sub(run, _DATA_URI.sub(data_uri, text))
    return out, found


def _fit(text: str, cap: int, known: int | None = None) -> tuple[str | None, bool, int]:
    """(`text` within `cap` tokens, whether it was cut, its tokens): whole, or head and tail
    around a marker; None when not even that fits. `known`: an upper bound of its tokens."""
    if not text:
        return "", False, 0
    if cap <= 0:
        return None, False, 0
    if known is not None and known <= cap:
        return text, False, known
    n = tokens.count_text(text)
    if n <= cap:
        return text, False, n
    if cap < MIN_RECORD_TOKENS // 2:
        return None, False, 0
    chars = int(len(text) * (cap - 16) / n)  # 16: the marker line
    for _ in range(6):
        cut, _ = _cut_chars(text, chars)
        used = tokens.count_text(cut)
        if used <= cap:
            return cut, True, used
        chars = int(chars * 0.8)
    return None, False, 0


def _cut_chars(text: str, chars: int) -> tuple[str, bool]:
    if len(text) <= chars:
        return text, False
    head = max(0, chars * 3 // 5)
    tail = max(0, chars - head)
    removed = len(text) - head - tail
    return (f"{text[:head]}\n[… {removed:,} characters cut …]\n"
            f"{text[len(text) - tail:] if tail else ''}"), True


def _meta_line(span: Sequence[Message], included: int, omitted: int, truncated: int,
               binary: int, previous: str) -> str:
    seqs = f"#{span[0].seq}–#{span[-1].seq}" if span else "none"
    return (f"[source: {len(span):,} messages ({seqs}); included {included:,}; omitted "
            f"{omitted:,} oldest; cut to head/tail {truncated:,}; binary described {binary:,}; "
            f"previous summary {previous}]")


def _frame_tokens(has_previous: bool, n: int) -> int:
    """The transcript's own lines: markers, the source line and an omission line."""
    lines = [sc.TRANSCRIPT_BEGIN, sc.TRANSCRIPT_END,
             _meta_line((), 0, n, n, n, "truncated").replace("none", f"#{n}–#{n}"),
             f"[{n:,} older messages omitted: they did not fit this request]"]
    if has_previous:
        lines += [sc.PREVIOUS_SUMMARY_BEGIN, sc.PREVIOUS_SUMMARY_END]
    return tokens.count_text("\n".join(lines)) + len(lines) + 8

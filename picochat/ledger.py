"""The exact-fact ledger: the verbatim facts of everything a compaction folds, kept by picochat,
not by the model.

A summary model may drop a port or a ticket id, however it is asked; a ledger cannot. Each
message's statements are taken when it is appended (`picochat.statements`: the user's sentence
around its values, so a line says what a value is; a paste as one pointer line; an answer's
few proposals). When a compaction folds a span, `extract` reads them back, `carry` merges them
into the previous checkpoint's ledger (a user's correction retires a line whose every value it
overrides), and `fit` evicts to the ledger's share, the answers' lines first, the user's
statements last, and counts what went.

The ledger is stored as rows beside its checkpoint (`to_stored`, `from_stored`): the next
compaction carries the rows, never anything read out of summary text, so nothing a model writes
can become a fact. The text the model reads is `merge_into`'s: the summary with every lookalike
of the ledger disarmed (`disarm`: its heading renamed, its `#12 …:` tags taken off, in fences
too), then the ledger alone under the last heading, `## Exact Facts`:

    - #12: Our Redis cache runs on port 6380
    - #31 correction: Actually, use port 9090 instead of 8080.
    - #40 paste: an access log, 70 lines, 10.0.0.1 … 10.0.0.9, req-0001 … req-0070 (history_search finds it)
    - (7 older exact facts, from messages up to #9, were dropped to fit; history_search finds them in the raw history)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Iterable, Sequence

from picochat import tokens
from picochat.fact_values import _TRAILING, SEP, kind_of
from picochat.messages import LedgerRow, Message, StoredLedger
from picochat.statements import (
    ANSWER,
    CORRECTION,
    PASTE,
    STATEMENT,
    TOOL,
    USER,
    from_json,
    statements_of,
)
from picochat.summary_contract import LEDGER_LABELS as _LEDGER_LABELS
from picochat.summary_contract import LOOKALIKE_FACTS_HEADING as _LOOKALIKE_HEADING
from picochat.summary_contract import LOOKALIKE_TAG as _LOOKALIKE_TAG
from picochat.textsafe import as_read

FACTS_HEADING = "Exact Facts"
_SAID_BY = {"user": USER, "assistant": ANSWER, "tool": TOOL}

# in a correction, a value right after one of these (or right before "is wrong") is overridden
_RETIRES_BEFORE = re.compile(r"(?:instead of|rather than|\bnot|no longer|\bfrom|replac\w*|"
                             r"don't use|do not use|forget(?: about)?|drop|remove)"
                             r"(?:\s+(?:the|a|an|port|version|path|file|url|id|ticket|to))*\s*$",
                             re.I)
_RETIRES_AFTER = re.compile(r"^\W{0,2}\s*(?:is|was|are|were)\s+(?:wrong|outdated|obsolete|"
                            r"incorrect|stale|gone|dead)", re.I)

_LINE = re.compile(r"^- #(\d+)(?: (correction|paste|answer|tool))?: (.+)$")
_NOTE = re.compile(r"^- \((\d[\d,]*) older exact facts?, from messages up to #(\d+), "
                   r"(?:was|were) dropped to fit; history_search finds them in the raw history\)$")
_HEADING = re.compile(r"^## (.+?)\s*$")


@dataclass(frozen=True)
class Fact:
    """One ledger line: a statement (the user's sentence around its values), a correction, a
    paste's pointer, or, carried from a checkpoint written before statements, one bare value."""

    value: str                 # what the line says
    seq: int
    kind: str                  # STATEMENT, CORRECTION, PASTE, or a bare value's kind ("port", …)
    said_by: str = USER        # USER, ANSWER or TOOL: who stated it (the user's go last)
    values: tuple[str, ...] = ()  # the exact values the line holds (a bare value: itself)

    @cached_property  # asked for again and again by carry, fit and merge_into
    def key(self) -> str:
        """What makes two facts the same: the words, case and spacing aside."""
        return " ".join(self.value.split()).casefold()

    @property
    def held(self) -> tuple[str, ...]:
        """The values this line holds."""
        return self.values or ((self.value,) if self.kind not in _LINES else ())


_LINES = (STATEMENT, CORRECTION, PASTE)  # the kinds that are whole lines, not bare values


@dataclass(frozen=True)
class Ledger:
    facts: tuple[Fact, ...] = ()   # oldest first
    dropped: int = 0               # facts evicted so far, over every checkpoint of the chain
    dropped_up_to: int = 0         # the newest seq among them
    retired: int = field(default=0, compare=False)  # facts a correction overrode (this step)

    @property
    def kept(self) -> int:
        return len(self.facts)


# --- extraction -----------------------------------------------------------------------------------


def extract(messages: Iterable[Message]) -> list[Fact]:
    """Every statement of `messages`, in seq order, each once (its latest mention): read back
    from what was taken at append, or (a row from before schema 12) taken now."""
    found: list[Fact] = []
    for m in messages:
        if m.statements is not None:
            found.extend(_stored_facts(m.statements, m.seq, _SAID_BY[m.role]))
        else:
            found.extend(Fact(st.text, st.seq, st.kind, st.said_by, st.values)
                         for st in statements_of(m))
    return _latest_first_seen(found)


@lru_cache(maxsize=16_384)
def _stored_facts(stored: str, seq: int, said_by: str) -> tuple[Fact, ...]:
    """One message's facts from its stored statements: a compaction reads the same messages
    several times (sizing the tail, the cut, the summary), and every compaction the new ones."""
    return tuple(Fact(st.text, st.seq, st.kind, st.said_by, st.values)
                 for st in from_json(stored, seq, said_by))


def _latest_first_seen(facts: Sequence[Fact]) -> list[Fact]:
    """One fact per key, at its latest mention by the user if the user ever stated it (an
    answer repeating it does not make it the model's), else at its latest mention; in the
    order of those mentions."""
    last: dict[tuple[str, str], int] = {}
    by_user: dict[tuple[str, str], int] = {}
    for i, f in enumerate(facts):
        key = (f.kind == CORRECTION and CORRECTION or "", f.key)
        last[key] = i
        if f.said_by == USER:
            by_user[key] = i
    keep = sorted(by_user.get(key, i) for key, i in last.items())
    return [facts[i] for i in keep]


# --- carrying a ledger forward ------------------------------------------------------------------


def carry(previous: Ledger, span: Sequence[Message]) -> Ledger:
    """`previous` plus the statements of `span`. A user's correction retires a line whose
    every value it overrides ("Redis is on 6381 now, not 6380"), and a new value of a setting
    (`retries=5`) the lines that held only its old values; a line that also holds another
    value stays (the correction, newer, says what changed). A paste is never retired, and a
    correction inside a paste is no correction (`statements` never makes one)."""
    new = extract(span)
    facts: list[Fact | None] = list(previous.facts)  # None: retired on the way
    retired = 0
    for fact in new:
        if fact.kind == CORRECTION and fact.said_by == USER:
            low = fact.value.casefold()
            for i, f in enumerate(facts):
                if f is not None and f.kind not in (CORRECTION, PASTE) and f.held and all(
                        _retires_folded(low, v) for v in f.held):
                    facts[i] = None
                    retired += 1
        # a new value of a setting retires its old values, said by the user: an answer or a
        # tool result proposing `retries=5` does not overrule the user's `retries=3`
        names = {_setting_name(v) for v in fact.held if _is_setting(v)} \
            if fact.said_by == USER and fact.kind != PASTE else set()
        if names:
            for i, f in enumerate(facts):
                if f is not None and f.kind not in (CORRECTION, PASTE) and f.held and all(
                        _is_setting(v) and _setting_name(v) in names
                        and v not in fact.held for v in f.held):
                    facts[i] = None
                    retired += 1
        facts.append(fact)
    merged = _latest_first_seen([f for f in facts if f is not None])
    merged.sort(key=lambda f: f.seq)
    return Ledger(tuple(merged), previous.dropped, previous.dropped_up_to, retired)


_BARE_NAMED = ("port", "version")  # kinds a correction may name by the number alone


def _is_setting(value: str) -> bool:
    return "=" in value and kind_of(value) == "setting"


def _setting_name(value: str) -> str:
    return value.split("=", 1)[0].casefold()


def retires(correction: str, value: str) -> bool:
    """Whether `correction` overrides `value`: it names the value right after "instead of",
    "not", "from", … or right before "is wrong"."""
    return _retires_folded(correction.casefold(), value)


def _retires_folded(low: str, value: str) -> bool:
    """`retires` for a correction already casefolded (`carry` tries one on every value)."""
    key = " ".join(value.split()).casefold()
    names = [key]
    if " " in key and kind_of(value) in _BARE_NAMED:  # "instead of 8080" names port 8080
        names.append(key.rsplit(" ", 1)[1].lstrip("v:="))
    for name in names:
        start = low.find(name)
        while start >= 0:
            end = start + len(name)
            bounded = ((start == 0 or not low[start - 1].isalnum())
                       and (end == len(low) or not low[end].isalnum()))
            if bounded and (_RETIRES_BEFORE.search(low[max(0, start - 40):start])
                            or _RETIRES_AFTER.match(low[end:end + 24])):
                return True
            start = low.find(name, start + 1)
    return False


# --- budget ------------------------------------------------------------------------------------


def _rank(f: Fact) -> int:
    """Which lines are kept first: the user's statements and corrections, then the user's
    pastes, then what tools returned, then the answers' proposals."""
    if f.said_by == USER:
        return 1 if f.kind == PASTE else 0
    return 2 if f.said_by == TOOL else 3


@lru_cache(maxsize=16_384)
def _value_tokens(value: str) -> int:
    """A value's count as it stands in a line, after a space, kept: one compaction fits the
    same ledger three times (to size the tail, to cap the prose, then for good), and carries
    most lines into the next."""
    return tokens.count_text(" " + value)


def fit(ledger: Ledger, budget_tokens: int) -> Ledger:
    """The ledger within `budget_tokens`, and what went counted: the answers' lines go first,
    oldest first, then the tools', then the user's pastes, then the user's statements. A
    small model's answers can hold dozens of invented commands a turn; they must not push out
    the port the user gave."""
    if not ledger.facts:
        return ledger
    # A value costs at least its count after a space (`_value_tokens`), less one, wherever it
    # stands in the rendered text (its first word may merge with `- #N: `): far over budget
    # by that bound, the whole text needs no count.
    least = sum(_value_tokens(f.value) - 1 for f in ledger.facts)
    if least <= budget_tokens and tokens.count_text(render_text(ledger)) <= budget_tokens:
        return ledger
    n = len(ledger.facts)
    order = sorted(range(n), key=lambda i: (_rank(ledger.facts[i]), -i))  # newest first
    # Estimate each kept line's cost, then check the real count: only the lines that might
    # fit are tokenized, however long the ledger is.
    note = tokens.count_text(_note(ledger.dropped + n, 10 ** 9)) + 1
    room = budget_tokens - note
    keep = 0
    seen_lines: set[tuple[int, str]] = set()
    for i in order:
        f = ledger.facts[i]
        cost = _value_tokens(f.value) + 2
        if f.kind in _LINES or (f.seq, f.said_by) not in seen_lines:
            cost += 7  # "- #1234 answer: " and the line break
        if cost > room:
            break
        room -= cost
        seen_lines.add((f.seq, f.said_by))
        keep += 1

    def keeping(k: int) -> Ledger:
        chosen = set(order[:k])
        kept = tuple(f for i, f in enumerate(ledger.facts) if i in chosen)
        gone = [f for i, f in enumerate(ledger.facts) if i not in chosen]
        return Ledger(kept, ledger.dropped + len(gone),
                      max([ledger.dropped_up_to] + [f.seq for f in gone]), ledger.retired)

    def fits(k: int) -> bool:
        return k == 0 or tokens.count_text(render_text(keeping(k))) <= budget_tokens

    # the estimate is a start, not the answer: the real count decides, by halves either way
    low, high = (keep, n - 1) if fits(keep) else (0, keep - 1)
    return keeping(tokens.most_that_fit(low, high, fits))


# --- the ledger in a summary ------------------------------------------------------------------


def render(ledger: Ledger) -> list[str]:
    """The ledger's lines under `## Exact Facts`, one per statement: `- #12: Our Redis cache
    runs on port 6380.` for the user's, `- #15 correction: …`, `- #40 paste: …`, and
    `- #13 answer: …`, `- #14 tool: …` for the model's side. Bare values carried from before
    statements share one line per message."""
    lines: list[str] = []
    if ledger.dropped:
        lines.append(_note(ledger.dropped, ledger.dropped_up_to))
    group: list[str] = []
    head: tuple[int, str] | None = None

    def flush() -> None:
        if group and head is not None:
            lines.append(f"- #{head[0]}{_label(head[1], '')}: " + SEP.join(group))
        group.clear()

    for f in ledger.facts:
        if f.kind in _LINES:
            flush()
            lines.append(f"- #{f.seq}{_label(f.said_by, f.kind)}: {f.value}")
            head = None
            continue
        if (f.seq, f.said_by) != head:
            flush()
            head = (f.seq, f.said_by)
        group.append(f.value)
    flush()
    return lines


def _label(said_by: str, kind: str) -> str:
    if said_by != USER:
        return f" {said_by}"
    return f" {kind}" if kind in (CORRECTION, PASTE) else ""


def row_line(row: LedgerRow) -> str:
    """One stored row as the ledger shows it, without the bullet: `#12: Our Redis …`."""
    return f"#{row.seq}{_label(row.said_by, row.kind)}: {row.text}"


def render_text(ledger: Ledger) -> str:
    return "\n".join(render(ledger))


def _note(dropped: int, up_to: int) -> str:
    one = dropped == 1
    return (f"- ({dropped:,} older exact {'fact' if one else 'facts'}, from messages up to "
            f"#{up_to}, {'was' if one else 'were'} dropped to fit; history_search finds them "
            "in the raw history)")


def parse(summary: str | None) -> Ledger:
    """The ledger lines a summary's text shows under `## Exact Facts` (its last such section:
    the one picochat writes). For a model reading a summary as text (the offline summarizer);
    picochat itself never reads a ledger out of text: a checkpoint's ledger is its rows
    (`from_stored`)."""
    facts: list[Fact] = []
    dropped = up_to = 0
    for line in _last_section(summary or "", FACTS_HEADING):
        if m := _NOTE.match(line):
            dropped, up_to = int(m.group(1).replace(",", "")), int(m.group(2))
        elif m := _LINE.match(line):
            seq, label = int(m.group(1)), m.group(2)
            kind = label if label in (CORRECTION, PASTE) else STATEMENT
            facts.append(Fact(m.group(3), seq, kind, label if label in (ANSWER, TOOL) else USER))
    return Ledger(tuple(facts), dropped, up_to)


# --- the ledger as stored: rows beside the checkpoint ---------------------------------------------

LEGACY_KIND = "fact"  # rows carried from a summary written before schema 11 (kind not stored)


def to_stored(ledger: Ledger) -> StoredLedger:
    """The rows a checkpoint stores for `ledger`."""
    return StoredLedger(tuple(LedgerRow(f.seq, f.kind, f.said_by, f.value, f.values)
                              for f in ledger.facts), ledger.dropped, ledger.dropped_up_to)


def from_stored(stored: StoredLedger) -> Ledger:
    """A checkpoint's ledger, from its rows."""
    return Ledger(tuple(Fact(r.text, r.seq, kind_of(r.text) if r.kind == LEGACY_KIND else r.kind,
                             r.said_by, r.values) for r in stored.rows),
                  stored.dropped, stored.dropped_up_to)


# --- the ledger in the summary text the model reads -----------------------------------------------

# What a model's text may not look like: picochat's ledger heading and ledger lines. Each
# line is looked at as a reader would see it (`textsafe.as_read`: compatibility forms, no
# invisible or control characters, common Cyrillic and Greek lookalike letters as Latin), past
# any markup or list numbering (the shapes live in `summary_contract`); only a line that turns
# out to be a lookalike is rewritten, every other line stays exactly as the model wrote it. A
# list of shapes cannot be complete: the ledger itself is rows, and this only keeps the text the
# model reads from showing a second one.
MODEL_FACTS_HEADING = "Facts noted by the summary"
_ANY_HEADING = re.compile(r"^\s{0,3}(?:#{1,6}\s|<h[1-6])", re.I)
_TAG = re.compile(r"^\s*#\d+(?: \w+)?:\s*")  # a piece of a ledger line a model copied


def merge_into(summary: str, ledger: Ledger) -> str:
    """The text the model reads: `summary` (the model's, or a degraded breadcrumb) made unable
    to pass for the ledger (`disarm`), then the ledger alone under `## Exact Facts`, last."""
    known = {_norm(v) for f in ledger.facts for v in (f.value, *f.held)}
    prose = disarm(summary, known).rstrip()
    body = render(ledger) or ["- (none)"]
    return "\n".join(([prose, ""] if prose else []) + [f"## {FACTS_HEADING}"] + body)


def disarm(text: str, known: frozenset[str] | set[str] = frozenset()) -> str:
    """`text` with every heading that reads as the ledger's renamed ("Facts noted by the
    summary"), every line that reads as a ledger line stripped of its `#12 correction:` tag
    (a plain `#4521:` keeps its number, as `(#4521)`), and the drop-note lookalikes left out,
    inside fences too: only picochat writes the ledger. Under the renamed heading, a line
    saying nothing but what the ledger keeps is left out (a fact is not paid for twice)."""
    out: list[str] = []
    in_model_facts = False
    for line in text.splitlines():
        probe = as_read(line)
        if m := _LOOKALIKE_HEADING.match(probe):
            lead = m.group("lead").rstrip("[(")
            out.append(f"{lead}{MODEL_FACTS_HEADING}{m.group('tail')}".rstrip())
            in_model_facts = True
            continue
        if _ANY_HEADING.match(probe):
            in_model_facts = False
        stripped = probe.strip()
        if _NOTE.match(stripped) or stripped.startswith("- (") and \
                "history_search finds them" in stripped:
            continue
        if m := _LOOKALIKE_TAG.match(probe):
            label = m.group("label")
            keep = "" if _LEDGER_LABELS.search(label) or not label.strip(" *_`") and \
                in_model_facts else f"(#{m.group('n')}{label.rstrip()}) "
            line = m.group("lead") + keep + probe[m.end():]
        kept = _model_line(line, known) if in_model_facts else line
        if kept is None:
            continue
        out.append(kept)
    return "\n".join(out)


def _model_line(line: str, known: set[str] | frozenset[str]) -> str | None:
    """A model's line under its facts heading without what the ledger already says; None to
    drop."""
    stripped = line.strip()
    if not stripped.startswith("- ") or stripped == "- (none)":
        return line
    parts = [_TAG.sub("", p).strip() for p in stripped[2:].split(SEP.strip())]
    parts = [p for p in parts if p and _norm(p) not in known]
    return ("- " + SEP.join(parts)) if parts else None


def _norm(text: str) -> str:
    return " ".join(text.strip().strip("`*_").strip(_TRAILING).split()).casefold()


def _last_section(summary: str, heading: str) -> list[str]:
    out: list[str] = []
    inside = False
    for line in summary.splitlines():
        if h := _HEADING.match(line):
            inside = h.group(1) == heading
            if inside:
                out = []
            continue
        if inside:
            out.append(line.strip())
    return out


def without_ledger(summary: str) -> str:
    """`summary` without picochat's ledger lines (a degraded checkpoint carries an earlier
    summary's prose and writes the ledger again, merged): the last `## Exact Facts` section's,
    and in a summary written before schema 11, the first's."""
    lines = summary.splitlines()
    heads = [i for i, line in enumerate(lines)
             if (h := _HEADING.match(line)) and h.group(1) == FACTS_HEADING]
    drop: set[int] = set()
    for at in heads[:1] + heads[-1:]:
        end = next((i for i in range(at + 1, len(lines)) if _HEADING.match(lines[i])),
                   len(lines))
        ours = {i for i in range(at + 1, end)
                if _LINE.match(lines[i].strip()) or _NOTE.match(lines[i].strip())}
        drop |= ours
        rest = [lines[i].strip() for i in range(at + 1, end) if i not in ours]
        if end == len(lines) and all(line in ("", "- (none)") for line in rest):
            drop.update(range(at, end))  # the ledger's own section, last: nothing else in it
    return "\n".join(line for i, line in enumerate(lines) if i not in drop).rstrip()


@dataclass(frozen=True)
class LedgerCounts:
    kept: int
    dropped: int


def counts(stored: StoredLedger | None) -> LedgerCounts:
    """Facts a checkpoint's ledger keeps and has dropped (for /info, the panel and export)."""
    if stored is None:
        return LedgerCounts(0, 0)
    return LedgerCounts(len(stored.rows), stored.dropped)


def facts_line(stored: StoredLedger | None) -> str:
    """"exact facts: 105 kept · 14 dropped (history_search finds them)", for the panel and
    the export."""
    c = counts(stored)
    dropped = (f" · {c.dropped:,} dropped (history_search finds them in the raw history)"
               if c.dropped else " · none dropped")
    return f"exact facts: {c.kept:,} kept{dropped}"

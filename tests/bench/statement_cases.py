"""Statements (picochat/statements.py): precision and recall on the labelled corpus, and the
time to take 100k tokens' statements (scan) and to read them back from their stored JSON."""

from __future__ import annotations

from typing import Any

from picochat import statements as S
from picochat.messages import Message
from tests.bench.ledger_cases import span_of
from tests.bench.timing import Figure, times_ms
from tests.fixtures.statements_corpus import NEGATIVES, PASTES, SENTENCES

TOKENS = 100_000
QUICK_TOKENS = 20_000


def _msg(seq: int, text: str) -> Message:
    return Message("bench", seq, "user", text, None, None, None, None, None, "complete", 0, 0)


def quality() -> dict[str, float]:
    """Recall of the labelled values, how many values taken from the labelled sentences
    their labels name, precision on chit-chat, and pastes read right."""
    total = kept = taken = labelled = 0
    for text, _, values in SENTENCES:
        found = S.statements_of(_msg(1, text))
        for value in values:
            total += 1
            kept += any(v == value or value in v and len(v) <= len(value) + 12
                        for s in found for v in s.values)
        for v in (v for s in found for v in s.values):
            taken += 1
            labelled += any(value in v or v in value for value in values)
    quiet = sum(1 for t in NEGATIVES if not S.statements_of(_msg(1, t)))
    pastes = 0
    for text, kind, ids in PASTES:
        lines = [s for s in S.statements_of(_msg(40, text)) if s.kind == S.PASTE]
        pastes += len(lines) == 1 and kind.casefold() in lines[0].text.casefold() and all(
            i in lines[0].text for i in ids)
    return {"recall": kept / total, "precision": quiet / len(NEGATIVES),
            "labelled": labelled / max(1, taken), "pastes": pastes / len(PASTES)}


def cases(quick: bool, repeat: int = 5) -> list[Figure]:
    q = quality()
    size = QUICK_TOKENS if quick else TOKENS
    span = span_of(size, seed=30)
    label = f"{sum(m.tokens for m in span):,}-token span, {len(span):,} msgs"
    stored = [(m.seq, S._SAID_BY.get(m.role, "user"), S.to_json(S.statements_of(m)))
              for m in span]
    found = sum(len(S.from_json(j, seq, by)) for seq, by, j in stored)
    scan = times_ms(lambda: [S.statements_of(m) for m in span], repeat)
    read = times_ms(lambda: [S.from_json(j, seq, by) for seq, by, j in stored], repeat)
    per = TOKENS / max(1, sum(m.tokens for m in span))  # figures scaled to 100k tokens
    scan = tuple(t * per for t in scan)
    read = tuple(t * per for t in read)
    return [
        Figure("statements: recall of labelled values", f"{len(SENTENCES)} sentences",
               (q["recall"] * 100,), "%", "≥ 95 %", q["recall"] >= 0.95),
        Figure("statements: precision on chit-chat", f"{len(NEGATIVES)} negatives",
               (q["precision"] * 100,), "%", "≥ 90 %", q["precision"] >= 0.9),
        Figure("statements: values the labels name", f"{len(SENTENCES)} sentences",
               (q["labelled"] * 100,), "%", "≥ 90 %", q["labelled"] >= 0.9,
               note="precision's floor: the labels leave some true values out"),
        Figure("statements: pastes as one named line", f"{len(PASTES)} pastes",
               (q["pastes"] * 100,), "%"),
        Figure("statements_of (scan), per 100k tokens", label, scan, "ms",
               note=f"{found:,} statements"),
        Figure("from_json (read back), per 100k tokens", label, read, "ms", "≤ 10 ms",
               sorted(read)[len(read) // 2] <= 10),
    ]


def statements(ctx: Any) -> list[Figure]:
    return cases(ctx.quick, ctx.repeat)


CASES = {"statements": statements}

if __name__ == "__main__":
    for f in cases(quick=False):
        print(f"{f.case:45} {f.size:32} {f.median:10.2f} {f.unit:3} {f.target:8} {f.note}")

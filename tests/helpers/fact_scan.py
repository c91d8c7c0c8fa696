"""Text at the edges of the exact-fact patterns, and the recording of what the fact scan and the
summary gate make of it: tests/fixtures/fact_scan_expected.json, which test_fact_scan.py checks
picochat against.

The corpus is drawn from a seeded random.Random, so the same inputs come out every time. It
covers what the property tests draw: the PIECES combinations (every kind's markers, near
misses, the characters where the ASCII and Unicode classes differ), Unicode words, code spans,
shell fences and prompt lines, correction cues, people's own sentences and pastes
(fixtures/statements_corpus.py, fixtures/realistic_chat.py), and summaries copied from a
transcript line by line.

The first recording was made with the implementations as first written (the frozen copies
test_fact_scan.py kept until then), and matched what picochat gave. Record again only once a
change in what the scan or the gate finds is meant:

    python -m tests.helpers.fact_scan
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Callable

# Pieces that sit at the edges of the fact patterns: every kind's markers, near misses, the
# characters where the ASCII and Unicode classes differ, and Unicode letters that fold to ASCII.
PIECES = ["port", "Port", "port:", "port=", " is ", " of ", "version", "Python", "node", "go",
          "rust", "java", "release", "RELEAſE", "v", "http://", "https://", "ssh://", "ftp",
          "@", "a@b.co", "ops@", ".py", ".toml", ".tar.gz", "./", "../", "~/", "/", "/etc/x",
          "-", "--", "+", ".", "..", ":", "::", "=", "==", '="', "='", '"', "'", "`", "```",
          "```bash\n", "$ ", "#", "#12", "&#12", "$", "€", "£", "°C", "µs", " ms", "ms", "MB",
          "x", "%", ",", ";", ")", "]", "(", "…", "_", "OPS-", "svc-", "A1", "deadbeef",
          "123e4567-e89b-12d3-a456-426614174000", "10.0.0.", "1", "12", "255", "8080", "3.11",
          "1,024", " ", "  ", "\t", "\n", "\n\n", "\r", "\x1c", "\x1f", "\xa0", "\u2003", "é",
          "İ", "ı", "K", "ß", "日本", "٣", "word", "Deploy", "the", "canary", "e.g."]
# What a message holds besides: code spans, shell fences, prompt lines, a correction.
MARKUP = ["`", "`x y`", "```bash\n$ cd /opt\nls\n```", "```\n", "\n$ make x=1\n", "$ ",
          "Actually, use port 9 instead of port 8080. ", "no, ", "\x1c", "5\tms", "5\nms",
          'x="a\tb"', "`a\tb`", "a · b=1", "`a·b`", "x=a·b"]
# The correction cue's words, their case and Unicode near misses.
CUE_PIECES = ["actually", "ACTUALLY", "İnstead", "instead", "ıf", "scratch that", "ſcratch that",
              "no,", " no.", "No!", "not this but", "that's wrong", "is wrong", "forget the",
              "i meant", "don't use", "change it", "rather than", "was wrong", "correction",
              "no longer", "do not use", "forget about", "That is wrong", "not what", "x", "-",
              " ", "\n", "\x1c", "é"]
# Lines of a transcript and of a summary: copies, near copies, headers, bullets, delimiters.
LINES = ["The canary deploy failed on the second region", "the  canary deploy failed on the "
         "second region", "\tThe canary deploy failed on the second region ", "### #12 user",
         "# #3", "## Progress", "- a bullet line that is long enough", "short", "",
         "<<<TRANSCRIPT", "TRANSCRIPT>>>",
         "We moved the queue worker to the new cluster.", "Rollback is ready if latency grows.",
         "We moved the queue worker to the new cluster.\x1c", "Then we restarted every worker."]

EXPECTED = Path(__file__).resolve().parents[1] / "fixtures" / "fact_scan_expected.json"
SEED = 20261206


def _joined(rng: random.Random, pieces: list[str], most: int) -> str:
    return "".join(rng.choice(pieces) for _ in range(rng.randint(0, most)))


def _word(rng: random.Random) -> str:
    """Up to 40 characters from U+0009 to U+2FFF, as the property tests' `words`."""
    return "".join(chr(rng.randint(9, 0x2FFF)) for _ in range(rng.randint(0, 40)))


def _people() -> list[str]:
    """Sentences, near misses and pastes as people write them, and issue 30's chat."""
    from tests.fixtures import realistic_chat
    from tests.fixtures.statements_corpus import NEGATIVES, PASTES, SENTENCES

    return ([s[0] for s in SENTENCES] + list(NEGATIVES) + [p[0] for p in PASTES[::4]]
            + realistic_chat.turns()[:12])


def corpus() -> dict[str, list[Any]]:
    """The inputs, by what they are fed to: the same ones on every call."""
    rng = random.Random(SEED)
    people = _people()
    messages = [_joined(rng, PIECES + MARKUP, 40) for _ in range(1200)]
    texts = [_joined(rng, PIECES, 30) for _ in range(500)]
    words = [_word(rng) for _ in range(400)]
    mixed = [_joined(rng, PIECES, 30) + _word(rng) + _joined(rng, PIECES, 30)
             for _ in range(300)]
    cues = [_joined(rng, CUE_PIECES, 12) for _ in range(1000)]
    runs = []
    for _ in range(600):
        previous = None if rng.random() < 0.5 else [rng.choice(LINES)
                                                     for _ in range(rng.randint(0, 5))]
        records = [rng.choice(LINES) for _ in range(rng.randint(0, 25))]
        summary = [rng.choice(LINES) for _ in range(rng.randint(0, 8))]
        runs.append([previous, records, summary])
    return {"values": messages + texts + words + mixed + people,
            "cues": cues + words[:200] + [s for s in people if len(s) < 2000],
            "lines": texts[:400] + words[:400] + people[:60],
            "copied_runs": runs}


def transcript_of(previous: list[str] | None, records: list[str]) -> str:
    """The summary request's transcript: the previous summary's block, if any, then records."""
    block = [] if previous is None else ["<<<PREVIOUS SUMMARY", *previous, "PREVIOUS SUMMARY>>>"]
    return "\n".join(["<<<TRANSCRIPT", *block, *records, "TRANSCRIPT>>>"])


def record(values: Callable[[str], Any], corrections: Callable[[str], list[str]],
           cue_spans: Callable[[str], list[tuple[int, int]]],
           content: Callable[[str], list[str]],
           copied_run: Callable[[list[str], str], int]) -> dict[str, list[Any]]:
    """Each input with what the given functions make of it."""
    inputs = corpus()
    return {
        "values": [{"text": t, "values": [list(v) for v in values(t)],
                    "corrections": corrections(t)} for t in inputs["values"]],
        "cues": [{"text": t, "spans": [list(s) for s in cue_spans(t)]} for t in inputs["cues"]],
        "lines": [{"text": t, "content": content(t)} for t in inputs["lines"]],
        "copied_runs": [{"previous": p, "records": r, "summary": s,
                         "longest": copied_run(s, transcript_of(p, r))}
                        for p, r, s in inputs["copied_runs"]],
    }


def write(recording: dict[str, list[Any]], path: Path = EXPECTED) -> None:
    """One case a line, so that a change shows as the cases it changed."""
    parts = []
    for kind, cases in recording.items():
        lines = ",\n".join(json.dumps(case, ensure_ascii=False) for case in cases)
        parts.append(f"{json.dumps(kind)}: [\n{lines}\n]")
    path.write_text("{\n" + ",\n".join(parts) + "\n}\n", encoding="utf-8")


def current() -> dict[str, list[Any]]:
    """What picochat makes of the corpus now."""
    from picochat import fact_values as V
    from picochat.compaction import gate

    return record(lambda t: list(V._values(t)), V.corrections,
                  lambda t: [m.span() for m in V._CORRECTION_CUE.finditer(t)],
                  gate._content, gate._longest_copied_run)


if __name__ == "__main__":
    write(current())
    print(f"recorded {EXPECTED}")

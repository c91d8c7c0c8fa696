"""The fast paths of the exact-fact ledger and the summary gate find exactly what their plain
definitions find, and what they found when first written (recorded for a fixed corpus): the
same facts at the same places, the same corrections, the same retired facts, the same copied
lines. A fact the fast scan missed would be a fact lost at compaction."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from picochat import fact_values as V
from picochat.compaction import gate
from tests.helpers.fact_scan import EXPECTED, PIECES, transcript_of

texts = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)
words = st.text(alphabet=st.characters(min_codepoint=9, max_codepoint=0x2fff), max_size=40)


def plain_scan(text: str) -> list[tuple[tuple[int, int], str | None]]:
    return [(m.span(), m.lastgroup) for m in V._FACT.finditer(text)]


def fast_scan(pattern: re.Pattern, text: str) -> list[tuple[tuple[int, int], str | None]]:
    return [(m.span(m.lastgroup), m.lastgroup) for m in pattern.finditer(text) if m.lastgroup]


@settings(max_examples=3000, deadline=None)
@given(st.one_of(texts, words, st.tuples(texts, words, texts).map("".join)))
def test_the_walk_finds_what_the_fact_pattern_finds(text: str) -> None:
    assert fast_scan(V._SCAN, text) == plain_scan(text)
    if V._plain(text):
        assert fast_scan(V._SCAN_ASCII, text) == plain_scan(text)


def test_the_walk_agrees_on_every_kind_of_fact_and_its_near_misses() -> None:
    text = ("Service svc-12 listens on port 8012 behind db.internal:5432 (10.0.0.5), config at "
            "/etc/svc/12.toml and ./deploy.yaml; see https://wiki.example.com/ops?id=7. Ticket "
            "OPS-1012, commit 3fa9c2e1, run 123e4567-e89b-12d3-a456-426614174000. Needs "
            "version v1.2.3, python 3.11 and numpy==1.26.4; timeout=30s, retries=3, 512 MB, "
            "250 ms. Mail ops@example.com, budget $120, £ 5, 20 °C, #1234 but not &#1234, "
            "12:00:03Z, 2024-05-01T12:00:03Z, a.b.c, x==, port is 80, deadbeef-dead-beef-dead-"
            "beefdeadbeef, name=\"the big one\", ~/notes.md, ../up, e.g. 3 users.")
    assert len(plain_scan(text)) > 25
    assert fast_scan(V._SCAN, text) == plain_scan(text)
    assert fast_scan(V._SCAN_ASCII, text) == plain_scan(text)


ENDS = ["", "12ms", "x=1", "port 80", "v1.2", "/a", "OPS-1", "a.py", "a@b.co", "$5", "#12",
        "10.0.0.1", "h.io:80", "x", "x.", "x-", "1"]
STARTS = ["+a@b.co", "-a@b.co", ".a@b.co", ".a.py", "-a.py", "..py", "$5", "€ 5", "£5", "#12",
          "~/x", "/x", "./x", "../x", "+", "-", ".", "port 80", "port: 80", "port is 80", "v1.2",
          "version 1.2", "Python 3.11", "node 20.1", "go 1.22", "rust 1.75", "java 21.0",
          "RELEASE 2.1", "a=1", 'a="b c"', "a='b'",
          "deadbeef-dead-beef-dead-beefdeadbeef", "a1b2c3d", "x-1", "A-1", "a:80", "a.b:80",
          "a==1", "a@1", "https://x", "a.@b.co", "a+b@c.de", "5 ms", "5\nms", "1.2.3"]


def test_the_walk_agrees_where_a_fact_starts_right_after_another() -> None:
    for end in ENDS:
        for gap in ("", " ", "\n"):
            for start in STARTS:
                text = end + gap + start + " tail"
                assert fast_scan(V._SCAN, text) == plain_scan(text), text
                assert fast_scan(V._SCAN_ASCII, text) == plain_scan(text), text


def test_ascii_and_unicode_classes_differ_only_where_the_ascii_check_says() -> None:
    differ = {chr(c) for c in range(128)
              for p in (r"\s", r"\w", r"\d", r"\b", r"(?i)[a-z]")
              if bool(re.match(p, chr(c))) != bool(re.match(p, chr(c), re.ASCII))}
    assert differ == {"\x1c", "\x1d", "\x1e", "\x1f"}
    assert not any(V._plain(c) for c in differ)


# What the ledger's values, the corrections, the correction cue and the gate's reading of lines
# were when first written, recorded for a fixed corpus (tests/helpers/fact_scan.py says what it
# covers and how to record it again).
RECORDED = json.loads(EXPECTED.read_text(encoding="utf-8"))


def test_the_values_are_what_they_were_before() -> None:
    for case in RECORDED["values"]:
        text = case["text"]
        assert [list(v) for v in V._values(text)] == case["values"], text
        assert V.corrections(text) == case["corrections"], text


def test_the_correction_cue_finds_what_it_found_before() -> None:
    for case in RECORDED["cues"]:
        text, expected = case["text"], [tuple(s) for s in case["spans"]]
        assert [m.span() for m in V._CORRECTION_CUE.finditer(text)] == expected, text
        if V._plain(text):
            assert [m.span() for m in V._CORRECTION_CUE_ASCII.finditer(text)] == expected, text


def test_the_gate_reads_lines_as_it_did() -> None:
    for case in RECORDED["lines"]:
        assert gate._content(case["text"]) == case["content"], case["text"]


def test_the_gate_finds_the_copied_runs_it_found() -> None:
    for case in RECORDED["copied_runs"]:
        transcript = transcript_of(case["previous"], case["records"])
        assert gate._longest_copied_run(case["summary"], transcript) == case["longest"], case


def test_record_headers_and_blank_lines_do_not_break_a_copied_run() -> None:
    copied = ["We moved the queue worker to the new cluster.", "Rollback is ready if latency "
              "grows.", "Then we restarted every worker."]
    transcript = "\n".join(["<<<TRANSCRIPT", "### #4 user", copied[0], "", "# #5", copied[1],
                            "### #6 assistant", "  " + copied[2].replace(" ", "  "),
                            "TRANSCRIPT>>>"])
    assert gate._longest_copied_run(copied, transcript) == 3

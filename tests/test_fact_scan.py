"""The fast paths of the exact-fact ledger and the summary gate find exactly what their plain
definitions find: the same facts at the same places, the same corrections, the same retired
facts, the same copied lines. A fact the fast scan missed would be a fact lost at compaction."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from picochat import fact_values as V
from picochat.compaction import gate

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


def old_clip(value: str, limit: int = V.VALUE_CHARS) -> str:
    value = " ".join(value.replace(V.SEP.strip(), "-").split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def old_values(text: str):
    """`ledger._values` as first written: `_FACT.finditer` over the whole text."""
    taken: list[tuple[int, int]] = []
    for block in V._SHELL_FENCE.finditer(text):
        taken.append(block.span())
        for line in block.group(1).splitlines():
            line = line.strip().removeprefix("$ ").strip()
            if line and not line.startswith("#"):
                yield "command", old_clip(line)
    for m in V._PROMPT_LINE.finditer(text):
        if not V._inside(m.start(), taken):
            taken.append(m.span())
            yield "command", old_clip(m.group(1).strip())
    for m in V._CODE_SPAN.finditer(text):
        code = m.group(1).strip()
        if code and not V._inside(m.start(), taken):
            if any(c in code for c in " /="):
                taken.append(m.span())
            yield "code", old_clip(code)
    text = text.replace("`", " ")
    for m in V._FACT.finditer(text):
        if taken and V._inside(m.start(), taken) or text.startswith("…", m.end()):
            continue
        kind, value = m.lastgroup or "fact", m.group(0)
        if kind != "number" and not value.endswith(("\"", "'")):
            value = value.rstrip(V._TRAILING)
        if kind == "number" and not any(c.isdigit() for c in value):
            continue
        if value:
            yield kind, old_clip(value)


def old_corrections(text: str) -> list[str]:
    if not CUE.search(text):
        return []
    return [old_clip(" ".join(s.split()), V.CORRECTION_CHARS) for s in V._SENTENCE.split(text)
            if s.strip() and CUE.search(s)]


MARKUP = ["`", "`x y`", "```bash\n$ cd /opt\nls\n```", "```\n", "\n$ make x=1\n", "$ ",
          "Actually, use port 9 instead of port 8080. ", "no, ", "\x1c", "5\tms", "5\nms",
          'x="a\tb"', "`a\tb`", "a · b=1", "`a·b`", "x=a·b"]
messages = st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]),
                              st.lists(st.sampled_from(PIECES + MARKUP), max_size=40)
                              .map("".join), st.none() | texts), max_size=6)


@settings(max_examples=1500, deadline=None)
@given(messages)
def test_the_values_are_what_they_were_before(raw) -> None:
    for _, text, args in raw:
        for source in (text, args):
            if source is not None:
                assert list(V._values(source)) == list(old_values(source))
        assert V.corrections(text) == old_corrections(text)


CUE = re.compile(  # the correction cue as first written, before its first-letter lookahead
    r"\b(?:actually|instead|correction|rather than|not what|(?:that's|that is|was|is) wrong|"
    r"change (?:it|that|this)|scratch that|i meant|no longer|don't use|do not use|"
    r"forget (?:the|that|about)|not \S+ but)\b|^\s*no[,.!]", re.I)
CUE_PIECES = ["actually", "ACTUALLY", "İnstead", "instead", "ıf", "scratch that", "ſcratch that",
              "no,", " no.", "No!", "not this but", "that's wrong", "is wrong", "forget the",
              "i meant", "don't use", "change it", "rather than", "was wrong", "correction",
              "no longer", "do not use", "forget about", "That is wrong", "not what", "x", "-",
              " ", "\n", "\x1c", "é"]


@settings(max_examples=1500, deadline=None)
@given(st.one_of(st.lists(st.sampled_from(CUE_PIECES), max_size=12).map("".join), words))
def test_the_correction_cue_finds_what_it_found_before(text: str) -> None:
    expected = [m.span() for m in CUE.finditer(text)]
    assert [m.span() for m in V._CORRECTION_CUE.finditer(text)] == expected
    if V._plain(text):
        assert [m.span() for m in V._CORRECTION_CUE_ASCII.finditer(text)] == expected


def old_content(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


@settings(max_examples=800, deadline=None)
@given(st.one_of(texts, words))
def test_the_gate_reads_lines_as_it_did(text: str) -> None:
    assert gate._content(text) == old_content(text)


def old_longest_copied_run(summary_lines: list[str], transcript: str) -> int:
    """`gate._longest_copied_run` as first written: every record line indexed."""
    previous, records = gate._split_previous(transcript)
    keep = set(old_content(previous))
    record_lines = [l for l in old_content(records) if not gate._RECORD_HEADER.match(l)
                    and l not in gate._DELIMITERS]
    at: dict[str, list[int]] = {}
    for j, line in enumerate(record_lines):
        at.setdefault(line, []).append(j)

    def copied(line: str) -> list[int]:
        if (len(line) < gate.ECHO_MIN_CHARS or line in keep or gate._bullet(line)
                or line.lstrip("#").strip().lower() in gate._CANONICAL):
            return []
        return at.get(line, [])

    best, runs = 0, {}
    for line in old_content("\n".join(summary_lines)):
        runs = {j: runs.get(j - 1, 0) + 1 for j in copied(line)}
        best = max(best, *runs.values(), 0)
    return best


LINES = ["The canary deploy failed on the second region", "the  canary deploy failed on the "
         "second region", "\tThe canary deploy failed on the second region ", "### #12 user",
         "# #3", "## Progress", "- a bullet line that is long enough", "short", "",
         "<<<TRANSCRIPT", "TRANSCRIPT>>>",
         "We moved the queue worker to the new cluster.", "Rollback is ready if latency grows.",
         "We moved the queue worker to the new cluster.\x1c", "Then we restarted every worker."]


@settings(max_examples=800, deadline=None)
@given(st.none() | st.lists(st.sampled_from(LINES), max_size=5),
       st.lists(st.sampled_from(LINES), max_size=25), st.lists(st.sampled_from(LINES), max_size=8))
def test_the_gate_finds_the_copied_runs_it_found(previous, records, summary) -> None:
    block = [] if previous is None else ["<<<PREVIOUS SUMMARY", *previous, "PREVIOUS SUMMARY>>>"]
    transcript = "\n".join(["<<<TRANSCRIPT", *block, *records, "TRANSCRIPT>>>"])
    assert gate._longest_copied_run(summary, transcript) == \
        old_longest_copied_run(summary, transcript)


def test_record_headers_and_blank_lines_do_not_break_a_copied_run() -> None:
    copied = ["We moved the queue worker to the new cluster.", "Rollback is ready if latency "
              "grows.", "Then we restarted every worker."]
    transcript = "\n".join(["<<<TRANSCRIPT", "### #4 user", copied[0], "", "# #5", copied[1],
                            "### #6 assistant", "  " + copied[2].replace(" ", "  "),
                            "TRANSCRIPT>>>"])
    assert gate._longest_copied_run(copied, transcript) == 3
    assert old_longest_copied_run(copied, transcript) == 3

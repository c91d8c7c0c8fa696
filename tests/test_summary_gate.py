"""The summary quality gate (issue 19, item 3): what a summarizer returns becomes a checkpoint
only if it is a summary. Real junk from a small local model is rejected with the check that
says what went wrong; well-formed summaries, the offline summarizer's included, pass with their
headings made canonical."""

from __future__ import annotations

import asyncio
import string
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picochat import summary_contract as sc
from picochat import tokens
from picochat.compaction.candidate import SummaryRejected
from picochat.compaction.gate import CHECKS, SummaryJunk, check_summary
from picochat.compaction.prompt import summary_request
from picochat.compaction.transcript import serialize
from picochat.messages import Message
from picochat.providers.offline_summary import summarize
from tests.helpers.storage import append_message


def msg(seq: int, role: str, content: str, **kw) -> Message:
    return Message("s", seq, role, content, None, kw.get("tool_call_id"), kw.get("name"), None,
                   kw.get("tool_status"), "complete", tokens.count_text(content), 0)


def transcript(span: list[Message], previous: str | None = None) -> str:
    return serialize(previous, span, 4_000).text


def offline(text: str, cap: int = 512) -> str:
    """What picochat's offline summarizer answers to the summary request over `text`."""
    return summarize(summary_request(text, cap).messages[-1]["content"], cap)


def gate(text: str, source: str | None = None, *, max_tokens: int = 512,
         finish: str | None = "stop") -> str:
    return check_summary(text, DEPLOY if source is None else source, max_tokens=max_tokens,
                         finish=finish)


def rejected(text: str, source: str | None = None, *, max_tokens: int = 512,
             finish: str | None = "stop") -> SummaryJunk:
    with pytest.raises(SummaryJunk) as caught:
        gate(text, source, max_tokens=max_tokens, finish=finish)
    err = caught.value
    assert isinstance(err, SummaryRejected) and err.kind == "summary_rejected"
    assert "previous context is unchanged" in (err.hint or "")
    assert "\n" not in err.user_line()
    return err


DEPLOY_SPAN = [
    msg(1, "user", "Deploy the api service to staging on port 8443 using version v2.3.1."),
    msg(2, "assistant", "I deployed api v2.3.1 to staging. It listens on port 8443 and the "
                        "health check at /healthz returns 200."),
    msg(3, "user", "The config lives in /etc/api/config.toml. Never edit /etc/nginx/nginx.conf."),
    msg(4, "assistant", "Understood. I will only change /etc/api/config.toml and leave nginx "
                        "alone."),
    msg(5, "user", "Actually, use port 9443 instead of 8443; ticket OPS-7731 tracks it."),
    msg(6, "assistant", "Switched the service to port 9443 and noted ticket OPS-7731."),
]
DEPLOY = transcript(DEPLOY_SPAN)

GOOD = """## Objective
The user asked to deploy the api service to staging; the user said "I want it on 9443 now".

## Constraints
- Never edit /etc/nginx/nginx.conf; only /etc/api/config.toml changes.

## Progress
- api v2.3.1 runs on staging; /healthz returned 200.

## Decisions
- Port 9443 replaced 8443 (ticket OPS-7731).

## Files and Operations
- /etc/api/config.toml: port changed.

## Tool Results and Failures
- (none)

## Outstanding Work
- (none)

## Exact Facts
- port 9443 · v2.3.1 · OPS-7731 · /healthz

## Recent User Corrections
- Port 9443 instead of 8443 (overrides the first request)."""


def sections(style) -> str:
    """GOOD with each heading written by `style(heading)`."""
    out = GOOD
    for h in sc.HEADINGS:
        out = out.replace(f"## {h}\n", style(h) + "\n")
    return out


# --- real junk -------------------------------------------------------------------------------
# Replies of SmolLM2-135M-Instruct (Q4_1 GGUF, llama-cpp-python's OpenAI-compatible server,
# n_ctx 2048) to summary requests built by picochat itself (`serialize` + `summary_request`),
# with the finish_reason the server reported. Each passed the old check: non-empty, under its cap.


@dataclass(frozen=True)
class Real:
    check: str
    max_tokens: int
    finish: str | None
    transcript: str
    reply: str


# Echoes the records, ends in the transcript's own end marker (the case of issue 19).
ECHO_ENDING_IN_DELIMITER = Real(
    check='echo', max_tokens=400, finish='stop',
    transcript=(
        '<<<TRANSCRIPT\n'
        '[source: 6 messages (#1–#6); included 6; omitted 0 oldest; cut to head/tail 0; '
        'binary described 0; previous summary none]\n'
        '### #1 user\n'
        'I want to bake sourdough bread. My starter is 5 days old.\n'
        '### #2 assistant\n'
        'A 5-day-old starter may be ready. Feed it and check it doubles within 6 hours.\n'
        '### #3 user\n'
        'It doubled in 4 hours. What hydration should I use?\n'
        '### #4 assistant\n'
        'Start with 70% hydration: 500 g flour, 350 g water, 100 g starter, 10 g salt.\n'
        '### #5 user\n'
        'I only have 400 g of flour. Scale it please.\n'
        '### #6 assistant\n'
        'For 400 g flour: 280 g water, 80 g starter, 8 g salt.\n'
        'TRANSCRIPT>>>'
    ),
    reply=(
        '### #1 user\n'
        "I want to bake sourdough bread. My starter is 5 days old, and I'm unsure about "
        'the best way to prepare it.\n'
        '### #2 assistant\n'
        'A 5-day-old starter may be ready. Feed it and check it doubles within 6 hours.\n'
        '### #3 user\n'
        'It doubled in 4 hours. What hydration should I use?\n'
        '### #4 assistant\n'
        'Start with 70% hydration: 10 g flour, 20 g water, 5 g salt.\n'
        'TRANSCRIPT>>>'
    ))

# A repeated compaction: some headings, repeated, between `### #N` record headers.
ECHO_OVER_A_PREVIOUS_SUMMARY = Real(
    check='echo', max_tokens=512, finish='length',
    transcript=(
        '<<<TRANSCRIPT\n'
        '[source: 8 messages (#9–#16); included 8; omitted 0 oldest; cut to head/tail 0; '
        'binary described 0; previous summary full]\n'
        '<<<PREVIOUS SUMMARY\n'
        '## Objective\n'
        '- Step 0: open config/service0.yaml and set port 8000; ticket INC-4100 covers '
        'it. Keep the timeout at 30 s.\n'
        '- Latest request: Step 3: open config/service3.yaml and set port 8003; ticket '
        'INC-4103 covers it. Keep the timeout at 33 s.\n'
        '\n'
        '## Constraints\n'
        '- (none)\n'
        '\n'
        '## Progress\n'
        '- 4 assistant replies summarized so far; last: Set port 8003 in '
        'config/service3.yaml, kept the timeout at 33 s and linked INC-4103.\n'
        '\n'
        '## Decisions\n'
        '- (none)\n'
        '\n'
        '## Files and Operations\n'
        '- service0.yaml · service1.yaml · service2.yaml · service3.yaml\n'
        '\n'
        '## Tool Results and Failures\n'
        '- (none)\n'
        '\n'
        '## Outstanding Work\n'
        '- (none)\n'
        '\n'
        '## Exact Facts\n'
        '- port 8000 · port 8001 · port 8002 · port 8003 · INC-4100 · INC-4101 · '
        'INC-4102 · INC-4103\n'
        '- 30 s · 31 s · 32 s · 33 s\n'
        '\n'
        '## Recent User Corrections\n'
        '- (none)\n'
        'PREVIOUS SUMMARY>>>\n'
        '### #9 user\n'
        'Step 4: open config/service4.yaml and set port 8004; ticket INC-4104 covers it. '
        'Keep the timeout at 34 s.\n'
        '### #10 assistant\n'
        'Set port 8004 in config/service4.yaml, kept the timeout at 34 s and linked INC-4104.\n'
        '### #11 user\n'
        'Step 5: open config/service5.yaml and set port 8005; ticket INC-4105 covers it. '
        'Keep the timeout at 35 s.\n'
        '### #12 assistant\n'
        'Set port 8005 in config/service5.yaml, kept the timeout at 35 s and linked INC-4105.\n'
        '### #13 user\n'
        'Step 6: open config/service6.yaml and set port 8006; ticket INC-4106 covers it. '
        'Keep the timeout at 36 s.\n'
        '### #14 assistant\n'
        'Set port 8006 in config/service6.yaml, kept the timeout at 36 s and linked INC-4106.\n'
        '### #15 user\n'
        'Step 7: open config/service7.yaml and set port 8007; ticket INC-4107 covers it. '
        'Keep the timeout at 37 s.\n'
        '### #16 assistant\n'
        'Set port 8007 in config/service7.yaml, kept the timeout at 37 s and linked INC-4107.\n'
        'TRANSCRIPT>>>'
    ),
    reply=(
        '#1\n'
        '## Objective\n'
        '- Step 0: open config/service3.yaml and set port 8005; ticket INC-4107 covers '
        'it. Keep the timeout at 36 s.\n'
        '### #2\n'
        'Step 1: open config/service3.yaml, kept the timeout at 36 s and linked INC-4107.\n'
        '## Constraints\n'
        '- (none)\n'
        '#5\n'
        '## Progress\n'
        '- 4 assistant replies summarized so far; last: Set port 8005 in '
        'config/service2.yaml, kept the timeout at 39 s.\n'
        '### #6\n'
        'Step 2: open config/service1.yaml, kept the timeout at 39 s and linked INC-4107.\n'
        '## Constraints\n'
        '- (none)\n'
        '#8\n'
        '## Decisions\n'
        '- (none)\n'
        '## Exact Facts\n'
        '- port 8005 · port 8006 · port 8002 · port 8003 · INC-4109 covers it.\n'
        '### #7\n'
        'Step 3: open config/service7.yaml, kept the timeout at 7 s and linked INC-4109.\n'
        '## Exact Facts\n'
        '- port 8005 · port 8006 · port 8002 · port 8003 · INC-410A covers it.\n'
        '### #8\n'
        'Step 4: open config/service7.yaml, kept the timeout at 8 s and linked INC-410B.\n'
        '## Exact Facts\n'
        '- port 8005 · port 8006 · port 8002 · port 8003 · INC-410A covers it.\n'
        '### #9\n'
        'Step 5: open config/service7.yaml, kept the timeout at 9 s and linked INC-410B.\n'
        '## Exact Facts\n'
        '- port 8005 · port 8006 · port 8002 · port 8003 · INC-41A covers it.\n'
        '### #10\n'
        'Step 6: open config/service7.yaml, kept the timeout at 10 s and linked INC-41B.\n'
        '## Exact Facts\n'
        '- port'
    ))

# Two lines to the user, no summary at all.
READY_TO_CONTINUE = Real(
    check='continuation', max_tokens=400, finish='stop',
    transcript=(
        '<<<TRANSCRIPT\n'
        '[source: 6 messages (#1–#6); included 6; omitted 0 oldest; cut to head/tail 0; '
        'binary described 0; previous summary none]\n'
        '### #1 user\n'
        'Deploy the api service to staging on port 8443 using version v2.3.1.\n'
        '### #2 assistant\n'
        'I deployed api v2.3.1 to staging. It listens on port 8443 and the health check '
        'at /healthz returns 200.\n'
        '### #3 user\n'
        'The config lives in /etc/api/config.toml. Never edit /etc/nginx/nginx.conf.\n'
        '### #4 assistant\n'
        'Understood. I will only change /etc/api/config.toml and leave nginx alone.\n'
        '### #5 user\n'
        'Actually, use port 9443 instead of 8443; ticket OPS-7731 tracks it.\n'
        '### #6 assistant\n'
        'Switched the service to port 9443 and noted ticket OPS-7731.\n'
        'TRANSCRIPT>>>'
    ),
    reply=(
        "I'm ready to continue the conversation.\n"
        "You can continue with any of your questions, but I'll make sure to keep it as a "
        'checkpoint summary.'
    ))

# A repeated compaction answered with an essay on summaries and wine, cut at the cap.
ANSWERS_AN_INVENTED_QUESTION = Real(
    check='continuation', max_tokens=400, finish='length',
    transcript=(
        '<<<TRANSCRIPT\n'
        '[source: 2 messages (#5–#6); included 2; omitted 0 oldest; cut to head/tail 0; '
        'binary described 0; previous summary full]\n'
        '<<<PREVIOUS SUMMARY\n'
        '## Objective\n'
        '- Deploy the api service to staging on port 8443 using version v2.3.1.\n'
        '- Latest request: The config lives in /etc/api/config.toml. Never edit '
        '/etc/nginx/nginx.conf.\n'
        '\n'
        '## Constraints\n'
        '- Never edit /etc/nginx/nginx.conf.\n'
        '\n'
        '## Progress\n'
        '- 2 assistant replies summarized so far; last: Understood. I will only change '
        '/etc/api/config.toml and leave nginx alone.\n'
        '\n'
        '## Decisions\n'
        '- (none)\n'
        '\n'
        '## Files and Operations\n'
        '- /healthz · /etc/api/config.toml. · /etc/nginx/nginx.conf. · /etc/api/config.toml\n'
        '\n'
        '## Tool Results and Failures\n'
        '- (none)\n'
        '\n'
        '## Outstanding Work\n'
        '- (none)\n'
        '\n'
        '## Exact Facts\n'
        '- port 8443 · v2.3.1\n'
        '\n'
        '## Recent User Corrections\n'
        '- (none)\n'
        'PREVIOUS SUMMARY>>>\n'
        '### #5 user\n'
        'Actually, use port 9443 instead of 8443; ticket OPS-7731 tracks it.\n'
        '### #6 assistant\n'
        'Switched the service to port 9443 and noted ticket OPS-7731.\n'
        'TRANSCRIPT>>>'
    ),
    reply=(
        '[1 message]\n'
        'The user asked: "What is the difference between a summary and an overview?"\n'
        '\n'
        "I'll explain. An overview is just a summary that covers what was done, but it "
        "doesn't give you any information about what happened next. A summary is like a "
        "brief description of something; it's usually short and to the point.\n"
        '\n'
        'A summary is often used in business or news writing, but it can also be used '
        'for other purposes. For example, a report might include an overview that '
        "summarizes key points, but it doesn't give you much detail about what happened next.\n"
        '\n'
        "An overview is like a high-level view of something; it's usually just a few "
        'bullet points to tell you what was done. An overview can be useful for people '
        'who want to know exactly what happened, but it might not be very helpful if you '
        'need more detailed information later on.\n'
        '\n'
        "A summary gives you all the details about what happened, but it doesn't give "
        'you much detail about where things went next. A high-level view of something is '
        "like a high-end wine; it's just a few words that tell you what was done.\n"
        '\n'
        'An overview is like a high-end wine: it has many ingredients, and each one is '
        'very good. An overview can be used for people who want to know exactly what '
        'happened, but it might not give you much detail about where things went next.\n'
        '\n'
        "A summary gives you all the details about what was done; it's usually just a "
        'few words that tell you what was done. A high-end wine is like a fine wine: it '
        'has many ingredients, and each one is very good. A high-level view of something '
        'is like a fine wine: it can be used for people who want to know exactly where '
        'things went next.\n'
        '\n'
        "A summary gives you all the details about what happened; it's usually just a "
        'few words that tell you what was done. A high-end'
    ))

# `[1] [2] [3] …` until the cap: 307 tokens by picochat's count, 400 by the model's.
NUMBERS_UNTIL_THE_CAP = Real(
    check='cut_off', max_tokens=400, finish='length',
    transcript=(
        '<<<TRANSCRIPT\n'
        '[source: 5 messages (#1–#5); included 5; omitted 0 oldest; cut to head/tail 0; '
        'binary described 0; previous summary none]\n'
        '### #1 user\n'
        "Our test suite fails with ImportError: cannot import name 'parse' from "
        "'picolib.util'.\n"
        '### #2 assistant\n'
        'The function parse was moved to picolib/parse.py in version 1.4.0. Update the '
        'import to `from picolib.parse import parse`.\n'
        '### #3 user\n'
        'Done, now tests/test_io.py fails: AssertionError: expected 3 rows, got 2.\n'
        '### #4 assistant\n'
        'The CSV reader now skips the header by default. Pass header=None to read_rows '
        'to keep all 3 rows.\n'
        '### #5 user\n'
        'That fixed it. Next, make the CI run on Python 3.12 too.\n'
        'TRANSCRIPT>>>'
    ),
    reply=(
        'The user asked for a summary of the chat. The transcript is here:\n'
        '[1] [2] [3] [4] [5] [6] [7] [8] [9] [10] [11] [12] [13] [14] [15] [16] [17] '
        '[18] [19] [20]\n'
        '[1] [21] [22] [23] [24] [25] [26] [27] [28] [29] [30] [31] [32] [33] [34] [35] '
        '[36] [37]\n'
        '[30] [31] [32] [33] [34] [35] [36] [37] [38] [39] [40] [41] [42] [43] [44] [45]\n'
        '[46] [47] [48] [49] [50] [51] [52] [53] [54] [55] [56] [57] [58] [59] [60] [61]\n'
        '[62] [63] [64] [65] [66] [67] [68] [69] [70] [71] [72] [73] [74] [75] [76] [77]\n'
        '[78] [79] [80] [81] [82] [83] [84] [85] [86] [87] [88] ['
    ))

# A code block of numbered lines that never closes.
OPEN_CODE_BLOCK = Real(
    check='cut_off', max_tokens=200, finish='length',
    transcript=(
        '<<<TRANSCRIPT\n'
        '[source: 3 messages (#1–#3); included 3; omitted 0 oldest; cut to head/tail 0; '
        'binary described 0; previous summary none]\n'
        '### #1 user\n'
        'Write a Dockerfile for a Flask app on port 5000 using python:3.12-slim.\n'
        '### #2 assistant\n'
        '```dockerfile\n'
        'FROM python:3.12-slim\n'
        'WORKDIR /app\n'
        'COPY requirements.txt .\n'
        'RUN pip install -r requirements.txt\n'
        'COPY . .\n'
        'EXPOSE 5000\n'
        'CMD ["flask", "run", "--host=0.0.0.0"]\n'
        '```\n'
        '### #3 user\n'
        'Use gunicorn with 4 workers instead of flask run.\n'
        'TRANSCRIPT>>>'
    ),
    reply=(
        'The user asked for a summary of the conversation transcript. The response is:\n'
        '\n'
        '```\n'
        '[1] User: [user_name]\n'
        '[2] \n'
        '[3] \n'
        '[4] \n'
        '[5] \n'
        '[6] \n'
        '[7] \n'
        '[8] \n'
        '[9] \n'
        '[10] \n'
        '[11] \n'
        '[12] \n'
        '[13] \n'
        '[14] \n'
        '[15] \n'
        '[16] \n'
        '[17] \n'
        '[18] \n'
        '[19] \n'
        '[20] \n'
        '[21] \n'
        '[22] \n'
        '[23] \n'
        '[24] \n'
        '[25] \n'
        '[26] \n'
        '[27] \n'
        '[28] \n'
        '[29] \n'
        '[30] \n'
        '[31]'
    ))

REAL = {"echo ending in the transcript's delimiter": ECHO_ENDING_IN_DELIMITER,
        "echo over a previous summary": ECHO_OVER_A_PREVIOUS_SUMMARY,
        "ready to continue the conversation": READY_TO_CONTINUE,
        "an essay answering an invented question": ANSWERS_AN_INVENTED_QUESTION,
        "numbers until the cap": NUMBERS_UNTIL_THE_CAP,
        "a code block that never closes": OPEN_CODE_BLOCK}


@pytest.mark.parametrize("name", REAL)
def test_real_junk_of_a_small_model_is_rejected_with_the_right_check(name):
    real = REAL[name]
    assert real.reply.strip() and tokens.count_text(real.reply) <= real.max_tokens  # was accepted
    err = rejected(real.reply, real.transcript, max_tokens=real.max_tokens, finish=real.finish)
    assert err.check == real.check, err.message


def test_the_echo_is_named_by_the_delimiter_it_ends_in():
    real = ECHO_ENDING_IN_DELIMITER
    err = rejected(real.reply, real.transcript, finish=real.finish)
    assert "TRANSCRIPT>>>" in err.message and "copies the transcript" in err.message


def test_a_cut_off_is_seen_even_when_the_server_does_not_say_so():
    real = OPEN_CODE_BLOCK
    for finish in (None, "stop"):
        err = rejected(real.reply, real.transcript, max_tokens=real.max_tokens, finish=finish)
        assert err.check == "cut_off" and "code block" in err.message


def test_junk_the_server_reports_as_complete_still_lacks_the_headings():
    real = NUMBERS_UNTIL_THE_CAP
    err = rejected(real.reply, real.transcript, max_tokens=real.max_tokens, finish=None)
    assert err.check == "headings"
    assert all(h in err.message for h in sc.HEADINGS)


# --- good summaries pass ---------------------------------------------------------------------

BUG_SPAN = [
    msg(1, "user", "Our suite fails: ImportError: cannot import name 'parse' from 'picolib.util'."),
    msg(2, "assistant", "parse moved to picolib/parse.py in 1.4.0; I ran the tests again."),
    msg(3, "tool", "error: tests/test_io.py::test_rows AssertionError: expected 3 rows, got 2",
        name="shell", tool_call_id="c1", tool_status="error"),
    msg(4, "user", "You must keep Python 3.11 support.\nNever pin numpy.\n"
                   "Always run the suite with -x before pushing."),
]


def test_offline_summaries_pass_unchanged():
    for source in (DEPLOY, transcript(BUG_SPAN), transcript(DEPLOY_SPAN + BUG_SPAN[3:])):
        summary = offline(source)
        assert gate(summary, source) == summary


def test_offline_summaries_of_repeated_compactions_pass():
    """Ten compactions in a row, each folding the previous summary: its lines come back
    verbatim, which is what the prompt asks for, never an echo."""
    turns = []
    for i in range(40):
        turns += [msg(2 * i + 1, "user", f"Turn {i}: the service listens on port {7000 + i}, "
                                         f"its config is /srv/app{i}/config.toml, ticket "
                                         f"OPS-{1000 + i}.\nYou must keep the retries at {i}.\n"
                                         f"Never restart db{i}."),
                  msg(2 * i + 2, "assistant", f"Noted port {7000 + i} and OPS-{1000 + i}.")]
    previous = None
    for start in range(0, 80, 8):
        source = transcript(turns[start:start + 8], previous)
        summary = offline(source, 512)
        assert gate(summary, source, max_tokens=512) == summary
        previous = summary
    assert sc.PREVIOUS_SUMMARY_BEGIN in source


def test_a_hand_written_summary_passes_unchanged():
    assert gate(GOOD) == GOOD


@pytest.mark.parametrize("style", [
    lambda h: f"### {h.lower()}",
    lambda h: f"# {h.upper()}",
    lambda h: f"#### {h}:",
    lambda h: f"**{h}**",
    lambda h: f"**{h}:**",
    lambda h: f"**{h}**:",
    lambda h: f"## **{h}**",
    lambda h: f"  ## {h}  ",
    lambda h: f"## {sc.HEADINGS.index(h) + 1}. {h}",
    lambda h: f"{h}:",
], ids=["h3 lower", "h1 upper", "h4 colon", "bold", "bold colon inside", "bold colon outside",
        "heading bold", "spaces", "numbered", "bare with colon"])
def test_heading_variants_become_canonical(style):
    assert gate(sections(style)) == GOOD


def test_a_bold_label_with_text_on_its_line_becomes_a_heading_and_its_text():
    text = GOOD.replace("## Objective\nThe user", "**Objective:** The user")
    assert gate(text) == GOOD


def test_one_short_preamble_line_and_trailing_space_are_dropped():
    assert gate("Here is the checkpoint summary:\n\n" + GOOD + "\n\n  \n") == GOOD


def test_a_markdown_fence_around_the_whole_summary_is_removed():
    inner = GOOD.replace("## Exact Facts\n", "## Exact Facts\n```sh\nmake deploy PORT=9443\n```\n")
    assert gate("```markdown\n" + inner + "\n```") == inner
    assert gate("Here is the summary:\n```\n" + GOOD + "\n```\n") == GOOD


def test_a_bare_word_without_a_colon_is_not_a_heading():
    err = rejected(GOOD.replace("## Progress\n", "Progress\n"))
    assert err.check == "headings" and "Progress" in err.message


def test_prose_that_quotes_the_user_and_bullets_that_name_a_speaker_pass():
    text = GOOD.replace("## Decisions\n", "## Decisions\nThe user said: \"I'll take 9443.\"\n"
                                         "- User: asked for 9443 after the first deploy.\n")
    assert gate(text) == text


def test_lines_copied_from_the_previous_summary_are_not_an_echo():
    previous = ("## Objective\nThe user is migrating the billing service to Postgres 16.\n"
                "The old MySQL host db-legacy-03 must stay read-only until March.\n"
                "All migrations run through scripts/migrate.sh with --dry-run first.\n"
                "The cutover window is Saturday 02:00 to 04:00 UTC.")
    source = transcript([msg(7, "user", "Add the index on invoices.customer_id too.")], previous)
    kept = "\n".join(previous.splitlines()[1:])
    summary = GOOD.replace("## Progress\n", f"## Progress\n{kept}\n")
    assert gate(summary, source) == summary


def test_a_user_name_among_the_facts_is_not_a_speaker():
    text = GOOD.replace("## Exact Facts\n", "## Exact Facts\nUser: postgres\nHost: db-2:5432\n")
    assert gate(text) == text


def test_a_command_kept_verbatim_in_a_code_block_is_not_an_echo():
    script = ("python -m venv /opt/app/venv --upgrade-deps\n"
              "/opt/app/venv/bin/pip install -r requirements.lock\n"
              "/opt/app/venv/bin/gunicorn app:server --workers 4 --bind 0.0.0.0:5000")
    source = transcript([msg(1, "user", "Run these:\n" + script)])
    summary = GOOD.replace("## Exact Facts\n", f"## Exact Facts\n```sh\n{script}\n```\n")
    assert gate(summary, source) == summary


def test_the_users_own_bullet_list_kept_verbatim_is_not_an_echo():
    rules = ("- the api must answer on port 9443 only\n- every release is tagged vX.Y.Z in git\n"
             "- nobody edits /etc/nginx/nginx.conf by hand")
    source = transcript([msg(1, "user", "House rules:\n" + rules)])
    summary = GOOD.replace("## Constraints\n", f"## Constraints\n{rules}\n")
    assert gate(summary, source) == summary


def test_a_delimiter_named_in_inline_code_is_not_an_echo():
    text = GOOD.replace("- (none)", "- the request ends with `TRANSCRIPT>>>`", 1)
    assert gate(text) == text


# --- each check ------------------------------------------------------------------------------


@pytest.mark.parametrize("marker", [sc.TRANSCRIPT_BEGIN, sc.TRANSCRIPT_END,
                                    sc.PREVIOUS_SUMMARY_BEGIN, sc.PREVIOUS_SUMMARY_END,
                                    sc.SUMMARY_OPEN, sc.SUMMARY_CLOSE])
def test_echo_a_transcript_delimiter(marker):
    assert rejected(GOOD + "\n" + marker).check == "echo"


def test_echo_a_record_header():
    err = rejected(GOOD + "\n" + sc.record_header(5, "user") + "\nActually, use port 9443.")
    assert err.check == "echo" and "### #5 user" in err.message


def test_echo_three_record_lines_in_a_row():
    copied = [m.content for m in DEPLOY_SPAN[:3]]
    text = GOOD.replace("## Progress\n", "## Progress\n" + "\n".join(copied) + "\n")
    err = rejected(text)
    assert err.check == "echo" and "3 lines in a row" in err.message
    two = GOOD.replace("## Progress\n", "## Progress\n" + "\n".join(copied[:2]) + "\n")
    assert gate(two) == two  # two lines may be a quoted request and its answer


@pytest.mark.parametrize("line", ["User: thanks, that works!", "Assistant: You're welcome.",
                                  "**Assistant:** Anything else?", "Human: next question"])
def test_continuation_a_speaker_line(line):
    assert rejected(GOOD + "\n\n" + line).check == "continuation"


def test_continuation_a_dialogue_inside_the_summary():
    dialogue = "User: postgres or mysql?\nAssistant: Postgres 16, as decided.\n"
    assert rejected(GOOD.replace("## Exact Facts\n", "## Exact Facts\n" + dialogue)).check \
        == "continuation"


@pytest.mark.parametrize("line", ["<|im_start|>user", "Done.<|im_end|>", "<|assistant|>",
                                  "[INST] and now the tests [/INST]", "<start_of_turn>user"])
def test_continuation_a_chat_template_token(line):
    assert rejected(GOOD + "\n" + line).check == "continuation"


def test_continuation_a_long_preamble():
    two = "Sure! I read the whole conversation.\nHere is what I found:\n\n"
    assert rejected(two + GOOD).check == "continuation"
    assert rejected("Here is the summary " + "of everything " * 10 + "\n" + GOOD).check \
        == "continuation"


def test_continuation_a_reply_to_the_reader_without_headings():
    err = rejected("Sure, I can help with that! What would you like to deploy next?")
    assert err.check == "continuation"
    prose = rejected("The user deployed api v2.3.1 and moved it to port 9443.")
    assert prose.check == "headings"  # a summary without structure, not a chat reply


def test_cut_off_when_the_provider_says_length():
    err = rejected(GOOD, finish="length", max_tokens=300)
    assert err.check == "cut_off" and "300" in err.message


def test_cut_off_inside_a_code_block():
    assert rejected(GOOD + "\n```sh\npython -m venv /opt/app").check == "cut_off"


def test_cut_off_near_the_cap_when_the_last_headings_are_missing():
    summary = offline(transcript(BUG_SPAN))
    head = summary.split("\n\n## Files and Operations")[0]
    near = int(tokens.count_text(head) / 0.8)
    err = rejected(head, transcript(BUG_SPAN), max_tokens=near)
    assert err.check == "cut_off" and "Files and Operations" in err.message
    far = rejected(head, transcript(BUG_SPAN), max_tokens=near * 4)
    assert far.check == "headings"  # short of the cap: it stopped, it was not cut


def test_an_empty_reply_lacks_the_headings_unless_cut_off():
    for empty in ("", "  \n\n "):
        assert rejected(empty).message == "the model returned an empty summary"
        assert rejected(empty).check == "headings"
    assert rejected("", finish="length").check == "cut_off"  # a reasoning model's spent cap


def test_headings_missing_are_named():
    text = GOOD.replace("## Decisions\n", "").replace("## Exact Facts\n", "")
    err = rejected(text)
    assert err.check == "headings"
    assert err.message == "the summary lacks the headings Decisions, Exact Facts"


def test_headings_repeated_are_named():
    err = rejected(GOOD + "\n\n## Exact Facts\n- port 8443")
    assert err.check == "headings" and "repeats the heading Exact Facts" in err.message


def test_the_first_failed_check_is_the_one_reported():
    echo_and_more = "User: hi\n" + sc.record_header(1, "user") + "\nhi"
    assert rejected(echo_and_more, finish="length").check == "echo"
    assert rejected("User: hi\nAssistant: hello", finish="length").check == "continuation"


def test_an_unknown_check_is_a_programming_error():
    with pytest.raises(ValueError):
        SummaryJunk("x", check="vibes")


# --- an empty summary (issue 31, item 9) -----------------------------------------------------
# Nine `- (none)` sections passed the four checks above and became a checkpoint: the span's
# prose was gone. A weak model (or an attacker) may write nothing in many ways; a summary of a
# span that said nothing (a greeting) may say nothing too.

GREETING = transcript([msg(1, "user", "hi"), msg(2, "assistant", "hello")])


def nine(body) -> str:
    """The nine headings, `body(heading)` under each."""
    return "\n\n".join(f"## {h}\n{body(h)}".rstrip() for h in sc.HEADINGS)


NONE = nine(lambda h: "- (none)")
EMPTY_LINE = "the summary is empty: its nine headings hold nothing but placeholders like '(none)'"


def test_nine_headings_of_none_for_a_span_with_content_are_rejected_as_empty():
    err = rejected(NONE)
    assert err.check == "empty" and err.message == EMPTY_LINE


@pytest.mark.parametrize("placeholder", [
    "none", "None.", "N/A", "n/a", "-", "—", "nothing", "Nothing.", "(empty)", "*(none)*",
    "- none", "- N/A", "- —", "- Nothing to report yet.", "- Not applicable.", "- TBD",
    "- null", "- (none)\n- (none)\n- none", "none none none none", "- None, nothing, N/A.",
])
def test_every_kind_of_placeholder_is_empty(placeholder):
    err = rejected(nine(lambda h: placeholder))
    assert err.check == "empty" and err.message == EMPTY_LINE


@pytest.mark.parametrize("name, summary", [
    ("only the headings", nine(lambda h: "")),
    ("only whitespace", nine(lambda h: "   \n\t\n ")),
    ("only punctuation", nine(lambda h: "- ...\n- ;;\n- ()\n- ***")),
    ("bold headings, nothing else", "\n".join(f"**{h}:**" for h in sc.HEADINGS)),
    ("labels with placeholders", "\n".join(f"**{h}:** none" for h in sc.HEADINGS)),
    ("each heading says it is empty", nine(lambda h: f"- No {h.lower()} recorded.")),
    ("an empty code block", nine(lambda h: "```\n```" if h == "Exact Facts" else "- (none)")),
])
def test_headings_with_nothing_under_them_are_empty(name, summary):
    err = rejected(summary)
    assert err.check == "empty" and err.message == EMPTY_LINE, name


def test_one_word_for_a_span_with_content_is_nearly_empty():
    for word in ("ok", "Done.", "**deployed**"):
        err = rejected(nine(lambda h: f"- {word}" if h == "Progress" else "- (none)"))
        assert err.check == "empty"
        assert err.message.startswith("the summary is nearly empty: 1 word of content under "
                                      "its nine headings, for ")


def test_padding_a_placeholder_with_filler_is_still_empty():
    padded = nine(lambda h: f"- There is no {h.lower()} in this conversation so far.")
    assert rejected(padded).check == "empty"


def test_the_previous_summary_is_content_an_empty_summary_would_lose():
    previous = ("## Objective\n- Migrate billing to Postgres 16; db-legacy-03 stays "
                "read-only until March.")
    source = transcript([msg(9, "user", "ok"), msg(10, "assistant", "ok")], previous)
    assert rejected(NONE, source).check == "empty"


def test_an_empty_summary_of_a_span_that_said_nothing_passes():
    assert gate(NONE, GREETING) == NONE
    summary = offline(GREETING)
    assert gate(summary, GREETING) == summary


def test_short_summaries_that_say_something_pass():
    for said in ("- run the services", "- The user said hi.", "- 部署服务", "- port 9443"):
        summary = nine(lambda h: said if h == "Objective" else "- (none)")
        assert gate(summary) == summary
        assert gate(summary, GREETING) == summary


def test_content_in_a_code_block_or_under_exact_facts_is_content():
    code = nine(lambda h: "```sh\nmake deploy\n```" if h == "Exact Facts" else "- (none)")
    assert gate(code) == code
    facts = nine(lambda h: "- #5: port 9443" if h == "Exact Facts" else "- (none)")
    assert gate(facts) == facts


def test_an_empty_summary_is_judged_after_the_headings():
    assert rejected(NONE.replace("## Decisions\n- (none)\n\n", "")).check == "headings"
    assert rejected(NONE, finish="length").check == "cut_off"


PLACEHOLDERS = st.sampled_from(["- (none)", "none", "N/A", "-", "—", "nothing", "(empty)",
                                "n/a", "", "- ...", "- Nothing yet.", "- None so far."])


@settings(max_examples=100, deadline=None)
@given(bodies=st.lists(PLACEHOLDERS, min_size=9, max_size=9),
       styles=st.lists(st.sampled_from(range(4)), min_size=9, max_size=9))
def test_any_nine_headings_of_placeholders_are_empty_for_a_span_with_content(bodies, styles):
    text = "\n\n".join(f"{STYLES[s](h)}\n{b}" for h, s, b in zip(sc.HEADINGS, styles, bodies))
    err = rejected(text)
    assert err.check == "empty" and err.message == EMPTY_LINE


def test_an_empty_summary_changes_nothing_through_compact_context(store):
    """The rejection happens before any commit: no checkpoint, no timeline entry, the same
    context, and one line that says why, on both the `compact` and the auto path."""
    from picochat.compaction import report
    from picochat.compaction.compact import CompactRequest, compact_context
    from picochat.budget import budget_limits
    from picochat.failures import compaction_failure_line
    from picochat.projection import restore
    from tests.helpers.scripted import Recorder

    s = store.create_session("empty")
    for i in range(30):  # over the auto-compact point of a 3,000-token window
        append_message(store, s.id, "user", f"question {i}: " + "the api runs on port 8443. " * 6,
                       turn_id=f"t{i}")
        append_message(store, s.id, "assistant", f"answer {i}: " + "noted, port 8443. " * 6,
                       turn_id=f"t{i}")
    before = restore(store, s.id)
    for reason in ("manual", "auto"):
        provider = Recorder(summaries=[NONE])
        request = CompactRequest(session_id=s.id, reason=reason, system_prompt="sys",
                                 limits=budget_limits(3_000, None, 1_024, 400))
        outcome = asyncio.run(compact_context(store, provider, request))
        assert len(provider.summary_requests) == 1 and outcome.summary_called
        assert outcome.status == "failed" and not outcome.compacted
        assert isinstance(outcome.error, SummaryJunk) and outcome.error.check == "empty"
        assert store.checkpoints(s.id) == [] and store.search.timeline_entries(s.id) == []
        after = restore(store, s.id)
        assert after.summary is None and after.ledger == before.ledger
        assert [m.seq for m in after.raw] == [m.seq for m in before.raw]
        assert after.context_generation == before.context_generation
        for line in (compaction_failure_line(outcome.error), report.compaction_note(outcome)):
            assert "\n" not in line and EMPTY_LINE in line
            assert "previous context is unchanged" in line


# --- properties ------------------------------------------------------------------------------

STYLES = [lambda h: f"## {h}", lambda h: f"### {h.lower()}", lambda h: f"**{h}:**",
          lambda h: f"## **{h}**", lambda h: f"#### {h.upper()}:", lambda h: f"{h}:"]
WORDS = st.text(alphabet=string.ascii_letters + string.digits + " .,;:()/-_=", min_size=1,
                max_size=60).map(str.strip).filter(bool)


@settings(max_examples=150, deadline=None)
@given(bullets=st.lists(st.lists(WORDS, min_size=0, max_size=4), min_size=9, max_size=9),
       styles=st.lists(st.sampled_from(range(len(STYLES))), min_size=9, max_size=9),
       preamble=st.sampled_from(["", "Here is the summary:\n", "Checkpoint summary\n\n"]))
def test_any_summary_of_the_nine_headings_passes_and_normalizes_once(bullets, styles, preamble):
    """Of a span with nothing to say (a greeting), as the bullets may say nothing either: an
    empty summary of a span with content is check 5's (below)."""
    body = ["\n".join(["- " + b for b in items] or ["- (none)"]) for items in bullets]
    canonical = "\n\n".join(f"## {h}\n{b}" for h, b in zip(sc.HEADINGS, body))
    styled = preamble + "\n\n".join(f"{STYLES[s](h)}\n{b}"
                                    for h, s, b in zip(sc.HEADINGS, styles, body))
    out = gate(styled, GREETING)
    assert out == canonical
    assert gate(out, GREETING) == out


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=400), finish=st.sampled_from([None, "stop", "length"]))
def test_any_reply_is_a_summary_or_one_named_rejection(text, finish):
    try:
        out = gate(text, finish=finish)
    except SummaryJunk as err:
        assert err.check in CHECKS and "\n" not in err.user_line()
    else:
        assert all(out.count(f"## {h}\n") + out.endswith(f"## {h}") == 1 for h in sc.HEADINGS)


def test_a_message_quoting_the_previous_summary_markers_backwards_is_judged_not_a_crash():
    from picochat.messages import Message

    quoted = Message("s", 3, "user", f"why does {sc.PREVIOUS_SUMMARY_END} come before "
                     f"{sc.PREVIOUS_SUMMARY_BEGIN} in your prompt? " + "x y z " * 10, None,
                     None, None, None, None, "complete", 40, 0)
    transcript = serialize(None, [quoted], 4_000).text
    good = "\n\n".join(f"## {h}\n- the user asked about the prompt's markers"
                       for h in sc.HEADINGS)
    assert check_summary(good, transcript, max_tokens=1_000, finish="stop") == good

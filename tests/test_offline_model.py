"""The built-in offline model: deterministic, streams, reports usage, summarizes extractively."""

from __future__ import annotations

from picochat import summary_contract as sc
from picochat import tokens
from picochat.providers.base import Finish, ProviderRequest, TextDelta, Usage
from picochat.providers.offline import OfflineProvider, reply_for


async def collect(request):
    return [e async for e in OfflineProvider(0).stream(request)]


def summary_request(transcript: str, max_tokens: int | None = None) -> ProviderRequest:
    body = f"Summarize.\n{sc.TRANSCRIPT_BEGIN}\n{transcript}\n{sc.TRANSCRIPT_END}"
    return ProviderRequest(messages=({"role": "system", "content": "You summarize."},
                                     {"role": "user", "content": body}),
                           purpose="summary", max_tokens=max_tokens)


async def test_reply_is_a_function_of_the_request_alone():
    request = ProviderRequest(messages=({"role": "system", "content": "s"},
                                        {"role": "user", "content": "ping 42"}))
    a, b = await collect(request), await collect(request)
    assert a == b
    assert sum(isinstance(e, TextDelta) for e in a) > 3  # it streams in pieces
    assert isinstance(a[-1], Finish) and isinstance(a[-2], Usage)
    text = "".join(e.text for e in a if isinstance(e, TextDelta))
    assert "offline" in text and "ping 42" in text


async def test_usage_uses_the_budget_tokenizer():
    messages = ({"role": "user", "content": "count me " * 50},)
    events = await collect(ProviderRequest(messages=messages))
    usage = next(e for e in events if isinstance(e, Usage))
    assert usage.prompt_tokens == tokens.count_provider_messages(messages)
    reply = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert usage.completion_tokens == tokens.count_text(reply)


def test_summary_has_the_nine_headings_and_keeps_exact_facts():
    transcript = "\n".join([
        sc.record_header(1, "user"), "Deploy the api to staging on port 8443 using v2.3.1.",
        "You must never touch /etc/nginx/nginx.conf.",
        sc.record_header(2, "assistant"), "Deployed build ab12cd34ef to staging.",
        sc.record_header(3, "tool", "name=shell"), "error: permission denied on /var/run/app.sock",
        sc.record_header(4, "user"), "Actually, use port 9443 instead.",
    ])
    summary = reply_for(summary_request(transcript))
    headings = [line[3:] for line in summary.splitlines() if line.startswith("## ")]
    assert headings == list(sc.HEADINGS)
    for fact in ("8443", "9443", "v2.3.1", "/etc/nginx/nginx.conf", "ab12cd34ef",
                 "/var/run/app.sock"):
        assert fact in summary, fact
    corrections = summary.split("## Recent User Corrections", 1)[1]
    assert "9443" in corrections
    assert "failed" in summary.split("## Tool Results and Failures", 1)[1].split("##")[0]


def test_previous_summary_facts_are_carried_forward():
    first = reply_for(summary_request(sc.record_header(1, "user") + "\nThe ticket is OPS-7731."))
    transcript = (f"{sc.PREVIOUS_SUMMARY_BEGIN}\n{first}\n{sc.PREVIOUS_SUMMARY_END}\n"
                  + sc.record_header(9, "user") + "\nNow rename the branch to fix-7731b.")
    second = reply_for(summary_request(transcript))
    assert "OPS-7731" in second and "fix-7731b" in second


def test_summary_respects_the_output_cap():
    transcript = "\n".join(sc.record_header(i, "user") + f"\nfile{i}.py must use port {1000 + i}"
                           for i in range(1, 400))
    summary = reply_for(summary_request(transcript, max_tokens=300))
    assert tokens.count_text(summary) <= 300
    assert all(f"## {h}" in summary for h in sc.HEADINGS)
    assert "1399" in summary  # the newest facts win when the cap bites

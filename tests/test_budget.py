"""ContextBudget, as DESIGN.md D8 and D20.1 state it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picochat import tokens
from picochat.budget import (
    Calibration,
    FixedContextExceedsBudget,
    RequestDraft,
    RequestParts,
    answer_cap,
    budget_limits,
    check_fixed,
    measure,
    request_digest,
    should_compact,
)
from picochat.messages import Message
from picochat.projection import ContextProjection


def test_128k_defaults_give_the_pi_style_threshold():
    limits = budget_limits(128_000, None, 16_384, 20_000)
    assert limits.threshold == 128_000 - 16_384
    assert (limits.reserve, limits.keep_recent) == (16_384, 20_000)


def test_small_windows_scale_reserve_and_keep():
    limits = budget_limits(8_192, None, 16_384, 20_000)
    assert limits.reserve == 4_096 and limits.threshold == 4_096 and limits.keep_recent == 2_048
    assert limits.configured_reserve == 16_384 and limits.configured_keep_recent == 20_000


def test_agent_limit_only_tightens_the_window():
    assert budget_limits(128_000, 6_000, 1_024, 800).window == 6_000
    assert budget_limits(8_192, 200_000, 1_024, 800).window == 8_192


def test_equal_to_threshold_does_not_trigger_one_more_does():
    assert not should_compact(True, 1_000, 1_000)
    assert should_compact(True, 1_001, 1_000)


def test_disabled_never_auto_compacts():
    assert not should_compact(False, 10**9, 1_000)


@given(st.integers(2, 10**7), st.integers(0, 10**7), st.integers(0, 10**7),
       st.one_of(st.none(), st.integers(2, 10**7)))
def test_threshold_is_positive_and_keep_fits_below_it(window, reserve, keep, agent):
    limits = budget_limits(window, agent, reserve, keep)
    assert 0 < limits.threshold <= limits.window <= window
    assert limits.keep_recent <= limits.threshold // 2
    assert limits.reserve <= limits.window // 2


def proj(seqs, generation=3, checkpoint=None, summary=None, tokens=100):
    raw = tuple(Message("s", q, "user" if q % 2 else "assistant", f"m{q}", None, None, None,
                        None, None, "complete", tokens, 0) for q in seqs)
    return ContextProjection("s", checkpoint, generation, summary, raw,
                             raw[0].seq if raw else None, raw[-1].seq if raw else 0)


def test_the_estimate_is_the_sum_of_stored_counts_and_fixed_parts():
    limits = budget_limits(8_192, None, 1_024, 800)
    draft = RequestDraft("be brief", proj(range(1, 11)))
    budget = measure(limits, draft)
    assert budget.usage_source == "estimate"
    assert budget.parts.raw_tail == 1_000  # ten stored counts of 100: nothing re-tokenized
    assert budget.used_tokens == budget.parts.total == 1_000 + budget.parts.fixed
    assert budget.parts.system == tokens.count_message("system", "be brief")


def test_provider_usage_counts_only_when_the_key_matches_field_for_field():
    limits = budget_limits(8_192, None, 1_024, 800)
    sent = RequestDraft("sys", proj(range(1, 5)))
    cal = Calibration(sent.key("openai", "gpt-4o-mini"), 777)
    # the same request: the reported figure is the truth
    same = measure(limits, sent, "openai", "gpt-4o-mini", cal)
    assert (same.usage_source, same.used_tokens) == ("provider", 777)
    # the next request: the reported prefix plus the stored counts of the two new messages
    grown = measure(limits, RequestDraft("sys", proj(range(1, 7))), "openai", "gpt-4o-mini", cal)
    assert (grown.usage_source, grown.used_tokens) == ("provider+estimate", 777 + 200)
    for draft, provider, model in (
            (RequestDraft("sys", proj(range(1, 7), generation=4)), "openai", "gpt-4o-mini"),
            (RequestDraft("other", proj(range(1, 7))), "openai", "gpt-4o-mini"),
            (RequestDraft("sys", proj(range(1, 7)), tools=({"name": "t"},)), "openai",
             "gpt-4o-mini"),
            (RequestDraft("sys", proj(range(1, 7), checkpoint="cp_1", summary="s")), "openai",
             "gpt-4o-mini"),
            (RequestDraft("sys", proj([1, 3, 4, 5, 6])), "openai", "gpt-4o-mini"),
            (RequestDraft("sys", proj(range(1, 7))), "openai", "gpt-4o"),
            (RequestDraft("sys", proj(range(1, 7))), "anthropic", "gpt-4o-mini")):
        fallback = measure(limits, draft, provider, model, cal)
        assert fallback.usage_source == "estimate"
        assert fallback.used_tokens == draft.parts().total


def test_digest_changes_with_messages_tools_and_summary():
    base = request_digest("s", (), None, [1, 2])
    assert base != request_digest("s", (), None, [1, 3])
    assert base != request_digest("s", [{"name": "t"}], None, [1, 2])
    assert base != request_digest("s", (), "cp_1", [1, 2])
    assert base != request_digest("t", (), None, [1, 2])


def test_fixed_context_over_the_threshold_is_an_error_listing_each_part():
    limits = budget_limits(4_096, None, 1_024, 800)
    with pytest.raises(FixedContextExceedsBudget) as info:
        check_fixed(limits, RequestParts(system=2_000, tools=1_100, raw_tail=10))
    assert "2,000" in info.value.message and "1,100" in info.value.message
    assert "3,072" in info.value.message


def test_a_long_system_prompt_is_reported_before_any_history_is_dropped():
    limits = budget_limits(4_096, None, 1_024, 800)
    budget = measure(limits, RequestDraft("word " * 4_000, proj(range(1, 3))))
    assert budget.fixed_exceeds_threshold  # /info can still show the card
    with pytest.raises(FixedContextExceedsBudget):
        check_fixed(limits, budget.parts)


def test_an_estimated_request_leaves_slack_for_the_servers_own_tokenizer():
    """Issue 30's real run: SmolLM2 counted a 6,607-token estimate as 6,639, so an answer cap
    of exactly window - estimate asked llama.cpp for 32 tokens more than its context held."""
    limits = budget_limits(8_192, None, 16_384, 20_000)
    estimated = answer_cap(limits, 6_607)
    assert 6_639 + estimated <= 8_192
    assert estimated == 8_192 - 6_607 - 331
    # a count the provider made of this very request needs none
    assert answer_cap(limits, 6_607, exact=True) == 8_192 - 6_607
    # small requests still get the whole reserve, and a full one the floor
    assert answer_cap(limits, 500) == limits.reserve
    assert answer_cap(limits, 8_000) == 256

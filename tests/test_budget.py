"""ContextBudget, as design §8 and §20.1 state it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picochat.budget import (
    CalibrationKey,
    FixedContextExceedsBudget,
    RequestParts,
    budget_limits,
    measure,
    request_digest,
    should_compact,
)


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


def test_provider_usage_is_used_only_when_the_key_matches_field_for_field():
    limits = budget_limits(8_192, None, 1_024, 800)
    parts = RequestParts(system=50, summary=300, raw_tail=2_000, current_input=20)
    key = CalibrationKey("openai", "gpt-4o-mini", 3, 41, request_digest([{"role": "user"}]))
    assert measure(limits, parts, key, (key, 2_500)).usage_source == "provider"
    assert measure(limits, parts, key, (key, 2_500)).used_tokens == 2_500
    for changed in (CalibrationKey("openai", "gpt-4o-mini", 4, 41, key.digest),
                    CalibrationKey("openai", "gpt-4o-mini", 3, 42, key.digest),
                    CalibrationKey("openai", "gpt-4o", 3, 41, key.digest),
                    CalibrationKey("openai", "gpt-4o-mini", 3, 41, "other")):
        fallback = measure(limits, parts, key, (changed, 2_500))
        assert fallback.usage_source == "estimate" and fallback.used_tokens == parts.total


def test_digest_changes_with_messages_and_tools():
    base = request_digest([{"role": "user", "content": "a"}])
    assert base != request_digest([{"role": "user", "content": "b"}])
    assert base != request_digest([{"role": "user", "content": "a"}], [{"name": "t"}])


def test_fixed_context_over_the_threshold_is_an_error_listing_each_part():
    limits = budget_limits(4_096, None, 1_024, 800)
    with pytest.raises(FixedContextExceedsBudget) as info:
        measure(limits, RequestParts(system=2_000, tools=1_100, raw_tail=10))
    assert "2,000" in info.value.message and "1,100" in info.value.message
    assert "3,072" in info.value.message

"""ModelDrafter.prefill: reading the prompt ahead changes what is cached, never the draft."""

from __future__ import annotations

import numpy as np
import pytest

from reference import ModelDrafter, SamplingParams

from .helpers import assert_cache_is_prefill, assert_close_scaled

SOFT = SamplingParams(temperature=1.0)


def test_prefill_then_propose_drafts_what_propose_alone_drafts(draft):
    context = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    plain, early = ModelDrafter(draft), ModelDrafter(draft)
    early.prefill(context[:-1])
    assert early.cache.length == len(context) - 1
    assert_cache_is_prefill(draft, early.cache, context[:-1], "prefilled draft")
    a = plain.propose(context, 4, SOFT, np.random.default_rng(7))
    b = early.propose(context, 4, SOFT, np.random.default_rng(7))
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert_close_scaled(b.q, a.q, "q rows")


def test_prefill_of_nothing_leaves_the_cache_empty(draft):
    drafter = ModelDrafter(draft)
    drafter.prefill([])
    assert (drafter.cache.length, drafter.cache.pending) == (0, 0)


def test_prefill_needs_a_fresh_context(draft):
    drafter = ModelDrafter(draft)
    drafter.prefill([1, 2, 3])
    with pytest.raises(ValueError, match="call reset\\(\\) first"):
        drafter.prefill([4, 5])
    assert (drafter.cache.length, drafter.cache.pending) == (3, 0)  # untouched
    drafter.reset()
    drafter.prefill([4, 5])
    assert drafter.cache.length == 2


def test_prefill_longer_than_the_cache_is_refused(draft):
    drafter = ModelDrafter(draft)
    too_long = np.zeros(drafter.cache.capacity + 1, dtype=np.int64)
    with pytest.raises(ValueError, match="exceeds the drafter's cache"):
        drafter.prefill(too_long)
    assert (drafter.cache.length, drafter.cache.pending) == (0, 0)


@pytest.mark.parametrize("bad", [[1, -1], [1, 10_000], [[1, 2]], [1.5]])
def test_prefill_refuses_bad_tokens(draft, bad):
    drafter = ModelDrafter(draft)
    with pytest.raises((TypeError, ValueError), match="tokens"):
        drafter.prefill(bad)
    assert (drafter.cache.length, drafter.cache.pending) == (0, 0)

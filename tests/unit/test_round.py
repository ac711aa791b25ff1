"""One round by itself: `speculative_round` drafts, runs one verification pass, verifies,
commits the kept prefix and visibly rolls back the rest of both caches."""

from __future__ import annotations

import numpy as np
import pytest

from reference import (
    Draft,
    KVCache,
    ModelDrafter,
    SamplingParams,
    SpeculativeStats,
    catch_up_tokens,
    speculative_round,
    verification_pass,
)
from reference.speculative import ACCEPTED, NEVER_EXAMINED, REJECTED, RoundTrace, prefill

from .helpers import assert_cache_is_prefill, assert_close_scaled, snapshot

SOFT = SamplingParams(temperature=1.0)


class RecordingCache(KVCache):
    """A KVCache that logs commit / rollback calls, to see what the round does."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple] = []

    def commit(self, n: int) -> None:
        self.calls.append(("commit", n, self.pending))
        super().commit(n)

    def rollback(self) -> None:
        self.calls.append(("rollback", self.pending))
        super().rollback()


def recording(cache: KVCache) -> RecordingCache:
    L, nh, N, hs = cache.k.shape
    return RecordingCache(L, nh, hs, N)


def start(target, draft, prompt):
    cache = recording(target.new_cache())
    drafter = ModelDrafter(draft)
    drafter.cache = recording(drafter.cache)
    prompt = np.asarray(prompt, dtype=np.int64)
    prefill(target, cache, drafter, prompt)
    cache.calls.clear()
    drafter.cache.calls.clear()
    return cache, drafter, prompt


def test_a_round_commits_the_accepted_prefix_then_rolls_back_the_rest(target, draft):
    """Both caches: one commit of exactly the kept slots, then one rollback of what is left
    (the rejected drafts' slots); the committed parts then equal a fresh prefill."""
    seen_rejection = seen_bonus = False
    for seed in range(12):
        cache, drafter, context = start(target, draft, [3, 1, 4, 1])
        rng = np.random.default_rng(seed)
        for _ in range(4):
            rnd = speculative_round(target, cache, drafter, context, 4, SOFT, rng)
            n = rnd.verification.accepted
            assert cache.calls == [
                ("commit", rnd.n_catch_up + n, rnd.n_catch_up + rnd.k),
                ("rollback", rnd.k - n),
            ]
            assert drafter.cache.calls[-1][0] == "rollback" and drafter.cache.pending == 0
            assert cache.pending == 0 and cache.length == len(context) + n
            context = np.concatenate([context, rnd.verification.emitted(rnd.draft.tokens)])
            assert_cache_is_prefill(target, cache, context[: cache.length], "target")
            assert_cache_is_prefill(draft, drafter.cache, context[: drafter.cache.length], "draft")
            cache.calls.clear()
            drafter.cache.calls.clear()
            seen_rejection |= n < rnd.k
            seen_bonus |= n == rnd.k
    assert seen_rejection and seen_bonus


def test_the_round_reports_what_happened(target, draft):
    """Round: the draft, the pass's k+1 rows, the verification, the catch-up count and both
    caches' (before, written, after) pointers."""
    cache, drafter, context = start(target, draft, [2, 7, 1])
    rnd = speculative_round(target, cache, drafter, context, 3, SOFT, np.random.default_rng(0))
    assert rnd.k == 3 and rnd.p.shape == (4, target.n_vocab)
    assert rnd.n_catch_up == 1  # the prompt's last token
    n = rnd.verification.accepted
    assert (rnd.target_cache.before, rnd.target_cache.written, rnd.target_cache.after) == (
        2,
        2 + 1 + 3,
        2 + 1 + n,
    )
    assert rnd.draft_cache.before == 2 and rnd.draft_cache.written == 2 + 1 + 2


def test_verification_pass_is_one_forward_over_catch_up_plus_drafts(target):
    """The k+1 rows equal the target's own rows for the same tokens without a cache."""
    context = np.array([5, 9, 2, 6, 1])
    cache = target.new_cache()
    target.forward(context[:3], cache)
    cache.commit(3)
    drafts = np.array([4, 4, 8])
    assert list(catch_up_tokens(cache, context)) == [6, 1]
    p, n, h = verification_pass(target, cache, context, drafts, SamplingParams(temperature=1.0))
    assert n == 2 and cache.pending == 5
    full = target.forward(np.concatenate([context, drafts]))
    expected = np.exp(full - full.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    assert_close_scaled(p, expected[-4:], "verification rows")
    assert_close_scaled(target.logits(h), full[-4:], "the hidden rows are what the output reads")


class Overdrafter(ModelDrafter):
    def propose(self, context, k, sampling, rng):
        d = super().propose(context, k, sampling, rng)
        return Draft(np.append(d.tokens, 0), np.vstack([d.q, np.full(d.q.shape[1], 1 / 16)]))


class OutOfVocabulary(ModelDrafter):
    def propose(self, context, k, sampling, rng):
        d = super().propose(context, k, sampling, rng)
        return Draft(d.tokens + 100, d.q)


class UnnormalisedQ(ModelDrafter):
    def propose(self, context, k, sampling, rng):
        d = super().propose(context, k, sampling, rng)
        return Draft(d.tokens, d.q * 0.5)


@pytest.mark.parametrize(
    "cls, message",
    [
        (Overdrafter, "proposed 4 tokens but was asked for at most 3"),
        (OutOfVocabulary, r"the drafter's tokens contains id 1\d\d"),
        (UnnormalisedQ, "the drafter's q rows must each sum to 1"),
    ],
)
def test_a_bad_proposal_is_refused_before_the_target_reads_it(target, draft, cls, message):
    """A plugged-in drafter's proposal is checked once per round; the target cache is left
    at its committed state."""
    cache = target.new_cache()
    drafter = cls(draft)
    context = np.array([1, 2, 3])
    prefill(target, cache, drafter, context)
    snap = snapshot(cache)
    with pytest.raises(ValueError, match=message):
        speculative_round(target, cache, drafter, context, 3, SOFT, np.random.default_rng(0))
    assert snapshot(cache)[:2] == snap[:2]


def test_draft_fates_and_pooled_stats():
    """A draft is accepted, the one rejected, or never examined; pooled stats add counts."""
    trace = RoundTrace(
        5, np.array([1, 2, 3, 4]), None, None, 1, 0, "correction", [], (0, 0, 0), None
    )
    assert trace.draft_fates == [ACCEPTED, REJECTED, NEVER_EXAMINED, NEVER_EXAMINED]
    a, b = SpeculativeStats(k=2), SpeculativeStats(k=2)
    a.record(2, 2)
    b.record(2, 0)
    b.record(2, 1)
    pooled = SpeculativeStats.pooled([a, b])
    assert (pooled.rounds, pooled.accepted, pooled.rejections) == (3, 3, 2)
    assert pooled.alpha == 3 / 5
    np.testing.assert_array_equal(pooled.reached, a.reached + b.reached)
    with pytest.raises(ValueError, match="one k"):
        SpeculativeStats.pooled([a, SpeculativeStats(k=3)])

"""ModelDrafter(min_confidence=...): rounds that stop drafting early, and what must not change."""

from __future__ import annotations

import numpy as np
import pytest

from reference import Draft, ModelDrafter, SamplingParams, generate

from .helpers import GREEDY, assert_cache_is_prefill, speculative_run

SOFT = SamplingParams(temperature=1.0)
PROMPTS = [[1, 2, 3], [5, 5, 5, 5], [0], [7, 3, 9, 1, 4, 2]]


def run(target, drafter, prompt, *, k=4, n=24, seed=0, sampling=SOFT):
    return speculative_run(
        target, drafter, prompt, k=k, max_new_tokens=n, seed=seed, sampling=sampling, trace=True
    )


def test_threshold_zero_is_plain_fixed_k_drafting(target, draft):
    for seed, prompt in enumerate(PROMPTS):
        plain = run(target, ModelDrafter(draft), prompt, seed=seed)
        zero = run(target, ModelDrafter(draft, min_confidence=0.0), prompt, seed=seed)
        assert zero.tokens == plain.tokens
        assert zero.stats.drafted_per_round == plain.stats.drafted_per_round


def test_threshold_one_drafts_a_single_token_per_round(target, draft):
    res = run(target, ModelDrafter(draft, min_confidence=1.0), [1, 2, 3], n=30)
    assert set(res.stats.drafted_per_round) <= {0, 1}  # 0: a last round with no room
    assert res.stats.drafted_per_round.count(1) >= 10


@pytest.mark.parametrize("tau", [0.3, 0.6, 0.9])
def test_greedy_output_is_still_the_autoregressive_output(target, draft, tau):
    for prompt in PROMPTS:
        ar = generate(
            target, prompt, max_new_tokens=24, rng=np.random.default_rng(0), sampling=GREEDY
        )
        drafter = ModelDrafter(draft, min_confidence=tau)
        res = run(target, drafter, prompt, sampling=GREEDY)
        assert res.tokens == ar


def test_short_rounds_leave_both_caches_equal_to_a_fresh_prefill(target, draft):
    drafter = ModelDrafter(draft, min_confidence=0.6)
    res = run(target, drafter, [1, 2, 3], k=5, n=40, seed=3)
    lengths = set(res.stats.drafted_per_round)
    assert len(lengths - {0}) >= 2, lengths  # short and long rounds both happened
    context = [1, 2, 3] + res.tokens
    assert_cache_is_prefill(draft, drafter.cache, context[: drafter.cache.length], "draft")
    for r in res.trace:  # the target never keeps more than the context it verified
        before, end, after = r.target_cache
        assert end == r.context_len + len(r.draft_tokens)
        assert after == r.context_len + r.accepted


@pytest.mark.parametrize(
    ("bad", "error"), [(-0.1, ValueError), (1.5, ValueError), ("0.5", TypeError), (True, TypeError)]
)
def test_bad_thresholds_are_refused(draft, bad, error):
    with pytest.raises(error, match="min_confidence"):
        ModelDrafter(draft, min_confidence=bad)


class GreedyOverdrafter(ModelDrafter):
    """Returns one token more than it was asked for."""

    def propose(self, context, k, sampling, rng):
        d = super().propose(context, k, sampling, rng)
        extra = np.zeros((1, d.q.shape[1]), dtype=d.q.dtype)
        extra[0, 0] = 1.0
        return Draft(np.append(d.tokens, 0), np.vstack([d.q, extra]))


def test_a_drafter_that_proposes_too_many_tokens_is_stopped(target, draft):
    with pytest.raises(ValueError, match="proposed 4 tokens but was asked for at most 3"):
        run(target, GreedyOverdrafter(draft), [1, 2], k=3)

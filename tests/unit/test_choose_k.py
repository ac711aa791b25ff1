"""Choosing k by measurement (specdec/measure/choose_k.py): the formula's argmax, a true
acceptance rate."""

from __future__ import annotations

import numpy as np
import pytest

from reference.sampling import SamplingParams
from specdec.costs import CostProfile, predicted_speedup
from specdec.measure.choose_k import acceptance_rate, best_k, choose_k
from specdec.standins import random_pair

GREEDY, SAMPLED = SamplingParams(), SamplingParams(temperature=0.8)


def profile(c: float, v: dict[int, float]) -> CostProfile:
    # a made-up profile: one-row step 1 s, draft step c s, T-row pass v[T] s
    return CostProfile(target_step=1.0, draft_step=c, target_append={1: 1.0, **v})


def test_best_k_is_the_argmax_of_leviathans_formula():
    # cheap long passes (SkylakeX-like) favour a long draft; dear ones (Haswell-like) a short
    cheap = profile(0.05, {T: 1.0 + 0.1 * (T - 1) for T in range(2, 10)})
    dear = profile(0.05, {T: 1.0 + 0.6 * (T - 1) for T in range(2, 10)})
    long, short = best_k(0.8, cheap, 8), best_k(0.8, dear, 8)
    assert long.k > short.k, (long.predicted, short.predicted)
    for choice, costs in ((long, cheap), (short, dear)):
        assert set(choice.predicted) == set(range(1, 9))
        expected = {
            k: predicted_speedup(0.8, k, 0.05, costs.verify_cost(k + 1)) for k in range(1, 9)
        }
        assert choice.predicted == pytest.approx(expected)
        assert choice.predicted[choice.k] == max(choice.predicted.values())


def test_a_machine_where_nothing_pays_says_so():
    choice = best_k(0.2, profile(0.5, {T: float(T) for T in range(2, 6)}), 4)
    assert max(choice.predicted.values()) < 1
    assert "no k is predicted to beat plain decoding" in choice.explain()


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "T=0.8"])
def test_a_draft_identical_to_the_target_is_always_accepted(sampling):
    target, _ = random_pair(seed=0)
    prompt = np.arange(5)
    alpha = acceptance_rate(target, target, prompt, sampling, np.random.default_rng(0), 12)
    assert alpha == pytest.approx(1.0, abs=1e-5)


def test_acceptance_of_a_real_pair_is_a_probability():
    target, draft = random_pair(seed=0)
    alpha = acceptance_rate(target, draft, np.arange(5), SAMPLED, np.random.default_rng(0), 12)
    assert 0.0 <= alpha <= 1.0


def test_choose_k_measures_and_stays_in_range():
    target, draft = random_pair(seed=0)
    choice = choose_k(target, draft, np.arange(6), GREEDY, 3, np.random.default_rng(0))
    assert 1 <= choice.k <= 3 and sorted(choice.costs.target_append) == [1, 2, 3, 4]
    assert choice.explain().startswith(f"k={choice.k} chosen on this machine")

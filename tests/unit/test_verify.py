"""`verify` on crafted inputs whose accept / reject path is certain (no statistics)."""

from __future__ import annotations

import numpy as np
import pytest

from reference import (
    SamplingParams,
    Verification,
    acceptance_probability,
    probabilities,
    residual_distribution,
    verify,
)

V = 6


def one_hot_rows(ids, n: int = V, dtype=np.float64) -> np.ndarray:
    # [k] ints -> [k, n]
    return np.eye(n, dtype=dtype)[np.asarray(ids, dtype=np.int64)].reshape(len(ids), n)


def sharp_rows(ids, n: int = V) -> np.ndarray:
    # ±large logits through the real sampler: float32 rows that are one-hot to rounding
    logits = np.full((len(ids), n), -60.0, dtype=np.float32)
    logits[np.arange(len(ids)), ids] = 60.0
    return probabilities(logits, SamplingParams())


def soft_rows(seed: int, k: int, n: int = V) -> np.ndarray:
    return probabilities(np.random.default_rng(seed).normal(0, 1, (k, n)), SamplingParams())


# ---------------------------------------------------------------- deterministic paths


@pytest.mark.parametrize("rows", [one_hot_rows, sharp_rows], ids=["one-hot", "±60 logits"])
def test_all_accepted_emits_the_bonus_from_row_k(rows):
    """Target agrees with every draft: accepted = k, token from p's last row."""
    drafts = [2, 0, 5]
    p = rows(drafts + [4])
    q = rows(drafts)
    for seed in range(20):
        assert verify(p, q, drafts, np.random.default_rng(seed)) == Verification(3, 4)


@pytest.mark.parametrize("rows", [one_hot_rows, sharp_rows], ids=["one-hot", "±60 logits"])
@pytest.mark.parametrize("first_bad", [0, 1, 2])
def test_first_disagreement_emits_the_target_argmax_in_greedy(rows, first_bad):
    """Greedy: drafts up to the first disagreement are kept, then the target's own choice;
    later rows (and the bonus row) are never used."""
    drafts = [1, 3, 5]
    target_choice = [1, 3, 5]
    target_choice[first_bad] = 0
    p = rows(target_choice + [2])
    q = rows(drafts)
    for seed in range(20):
        v = verify(p, q, drafts, np.random.default_rng(seed))
        assert v == Verification(first_bad, 0)
        assert v.emitted(drafts) == drafts[:first_bad] + [0]


def test_point_mass_draft_the_target_never_picks_is_always_rejected():
    """One-hot q (n-gram / prompt lookup) with p(x) = 0: reject, residual = p itself."""
    p = np.array([[0.0, 0.5, 0.25, 0.25, 0, 0], [1 / 6] * 6])
    q = one_hot_rows([0])
    np.testing.assert_allclose(residual_distribution(p[0], q[0]), p[0])
    rng = np.random.default_rng(0)
    for _ in range(200):
        v = verify(p, q, [0], rng)
        assert v.accepted == 0 and v.token in (1, 2, 3)


def test_point_mass_draft_is_accepted_with_probability_p_of_x():
    """One-hot q: a(x) = min(1, p(x) / 1) = p(x); on rejection x itself is impossible."""
    p = np.array([[0.1, 0.6, 0.3, 0, 0, 0], [0, 0, 0, 0, 0, 1.0]])
    q = one_hot_rows([1])
    assert acceptance_probability(p[0, 1], q[0, 1]) == pytest.approx(0.6)
    np.testing.assert_allclose(residual_distribution(p[0], q[0]), [0.25, 0, 0.75, 0, 0, 0])
    rng = np.random.default_rng(1)
    outcomes = {(v.accepted, v.token) for v in (verify(p, q, [1], rng) for _ in range(300))}
    assert outcomes == {(1, 5), (0, 0), (0, 2)}  # bonus is a point mass at 5


def test_target_certain_of_the_draft_accepts_even_a_soft_draft():
    """p(x) = 1 >= q(x): min(1, p/q) = 1, accepted whatever the uniform draw."""
    q = soft_rows(2, 2)
    drafts = [int(np.argmin(q[0])), int(np.argmin(q[1]))]  # even unlikely drafts
    p = one_hot_rows(drafts + [3])
    for seed in range(50):
        assert verify(p, q, drafts, np.random.default_rng(seed)) == Verification(2, 3)


def test_p_equal_q_always_accepts():
    """p == q on the draft rows: the ratio is 1 everywhere, nothing is ever rejected."""
    rng = np.random.default_rng(3)
    for trial in range(100):
        k = 1 + trial % 5
        q = soft_rows(trial, k)
        p = np.concatenate([q, soft_rows(1000 + trial, 1)])
        drafts = [int(rng.choice(V, p=row / row.sum())) for row in q.astype(np.float64)]
        v = verify(p, q, drafts, rng)
        assert v.accepted == k


def test_k_zero_is_a_bonus_only_round():
    """k = 0: p has one row, q none, no drafts; the token is drawn from p's only row."""
    p = one_hot_rows([4])
    q = np.zeros((0, V))
    for seed in range(10):
        v = verify(p, q, [], np.random.default_rng(seed))
        assert v == Verification(0, 4)
        assert v.emitted([]) == [4]
    v = verify(np.full((1, V), 1 / V), q, np.array([], dtype=np.int64), np.random.default_rng(0))
    assert v.accepted == 0 and 0 <= v.token < V


def test_verify_accepts_float32_and_float64_and_numpy_token_arrays():
    """The rows may be float32 (from the models) or float64 (exact-law tests)."""
    drafts = np.array([3, 1], dtype=np.int32)
    for dtype in (np.float32, np.float64):
        p = one_hot_rows([3, 1, 2], dtype=dtype)
        q = one_hot_rows([3, 1], dtype=dtype)
        v = verify(p, q, drafts, np.random.default_rng(0))
        assert v == Verification(2, 2)
        assert type(v.accepted) is int and type(v.token) is int


def test_verify_is_reproducible_with_the_same_seed():
    """Every random choice comes from the generator passed in."""
    p, q = soft_rows(4, 4), soft_rows(5, 3)
    drafts = [0, 1, 2]
    a = [verify(p, q, drafts, np.random.default_rng(s)) for s in range(30)]
    b = [verify(p, q, drafts, np.random.default_rng(s)) for s in range(30)]
    assert a == b
    assert len({x.accepted for x in a}) > 1  # soft rows: several paths occur


# ---------------------------------------------------------------- pieces


def test_verification_emitted_is_accepted_prefix_plus_token():
    """emitted = draft_tokens[:accepted] + [token], as plain ints."""
    drafts = np.array([3, 1, 4], dtype=np.int64)
    assert Verification(0, 9).emitted(drafts) == [9]
    assert Verification(2, 7).emitted(drafts) == [3, 1, 7]
    out = Verification(3, 5).emitted(drafts)
    assert out == [3, 1, 4, 5] and all(type(t) is int for t in out)


def test_acceptance_probability_is_min_one_p_over_q():
    """a = min(1, p/q): capped at 1, zero when the target gives no mass."""
    assert acceptance_probability(0.6, 0.8) == pytest.approx(0.75)
    assert acceptance_probability(0.9, 0.3) == 1.0
    assert acceptance_probability(0.0, 0.5) == 0.0
    assert acceptance_probability(np.float32(0.2), np.float32(0.2)) == 1.0


def test_residual_is_normalised_positive_part_of_p_minus_q():
    """norm(max(0, p - q)) in float64; the article's A/B example gives all mass to B."""
    p, q = np.array([0.6, 0.4]), np.array([0.8, 0.2])
    np.testing.assert_allclose(residual_distribution(p, q), [0.0, 1.0])
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.2, 0.2, 0.2, 0.4])
    r = residual_distribution(p.astype(np.float32), q.astype(np.float32))
    assert r.dtype == np.float64
    np.testing.assert_allclose(r, [0.75, 0.25, 0.0, 0.0], atol=1e-7)


def test_residual_of_equal_rows_falls_back_to_p():
    """p == q: a rejection cannot happen; the fallback is still a valid law (p itself)."""
    p = np.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(residual_distribution(p, p.copy()), p)

"""Logits -> processed distribution (greedy, temperature, top-k, top-p) and sample_token."""

from __future__ import annotations

import numpy as np
import pytest

from reference import SamplingParams, probabilities, sample_token
from reference.sampling import (
    GREEDY,
    draw_token,
    probabilities_unchecked,
    sample_token_unchecked,
    top_p_filter,
)


def softmax64(z) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def distinct_logits(seed: int, shape=(20,)) -> np.ndarray:
    # a permutation of spaced values: no ties, so top-k / top-p sets are unambiguous
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    return (rng.permutation(n).reshape(shape) * 0.37 + rng.normal(0, 0.01, shape)).astype(
        np.float32
    )


# ---------------------------------------------------------------- greedy and temperature


def test_greedy_is_one_hot_at_the_argmax():
    """Temperature 0 gives a one-hot row per position, at the first maximal logit."""
    z = np.array([[0.1, 2.0, -1.0, 2.0], [5.0, 1.0, 0.0, -3.0]], dtype=np.float32)
    p = probabilities(z, SamplingParams(temperature=0))
    np.testing.assert_array_equal(p, [[0, 1, 0, 0], [1, 0, 0, 0]])
    assert p.dtype == np.float32


def test_temperature_divides_the_logits():
    """probabilities(z, T) == softmax(z / T) for several temperatures, rows independent."""
    z = np.random.default_rng(0).normal(0, 3, (4, 10)).astype(np.float32)
    for T in (0.25, 0.7, 1.0, 1.5, 10.0):
        p = probabilities(z, SamplingParams(temperature=T))
        assert p.dtype == np.float32
        np.testing.assert_allclose(p, softmax64(z.astype(np.float64) / T), atol=1e-6)


def test_higher_temperature_flattens_the_distribution():
    """Entropy grows with the temperature; the ranking of the ids is kept."""
    z = distinct_logits(1)

    def entropy(p):
        return float(-(p * np.log(np.where(p > 0, p, 1))).sum())

    ps = [probabilities(z, SamplingParams(temperature=T)) for T in (0.3, 1.0, 3.0)]
    assert entropy(ps[0]) < entropy(ps[1]) < entropy(ps[2])
    for p in ps:
        np.testing.assert_array_equal(np.argsort(p, kind="stable"), np.argsort(z, kind="stable"))


def test_tiny_temperature_still_gives_a_distribution():
    """A temperature far below the logit gaps must tend to greedy, not overflow into NaN."""
    z = np.array([10.0, 1.0, 0.0, 9.5], dtype=np.float32)
    for T in (1e-3, 1e-20, 1e-38, 1e-45, 1e-60):
        p = probabilities(z, SamplingParams(temperature=T))
        assert np.all(np.isfinite(p)), T
        np.testing.assert_allclose(p, [1, 0, 0, 0], atol=1e-6)


# ---------------------------------------------------------------- top-k and top-p


@pytest.mark.parametrize("top_k", [1, 2, 5, 19])
def test_top_k_keeps_exactly_k_ids_renormalised(top_k):
    """With distinct logits: exactly k non-zero entries, the k largest, in softmax ratio."""
    z = distinct_logits(2)
    p = probabilities(z, SamplingParams(top_k=top_k))
    kept = np.flatnonzero(p)
    assert len(kept) == top_k
    assert set(kept) == set(np.argsort(z)[-top_k:])
    expected = softmax64(z[kept])
    np.testing.assert_allclose(p[kept], expected, atol=1e-6)
    np.testing.assert_allclose(p.sum(), 1.0, atol=1e-6)


def test_top_k_at_least_the_vocabulary_changes_nothing():
    """top_k >= V keeps every id."""
    z = distinct_logits(3)
    base = probabilities(z, SamplingParams())
    np.testing.assert_array_equal(probabilities(z, SamplingParams(top_k=20)), base)
    np.testing.assert_array_equal(probabilities(z, SamplingParams(top_k=1000)), base)


def test_top_p_keeps_the_smallest_nucleus_reaching_top_p():
    """p = [.5, .25, .15, .1]: top_p .7 keeps {0, 1} (0.5 < .7 <= .75), .8 keeps {0, 1, 2}."""
    z = np.log(np.array([0.15, 0.5, 0.1, 0.25]))
    cases = {0.3: [1], 0.7: [1, 3], 0.8: [0, 1, 3], 0.95: [0, 1, 2, 3], 1.0: [0, 1, 2, 3]}
    for top_p, kept in cases.items():
        p = probabilities(z, SamplingParams(top_p=top_p))
        assert list(np.flatnonzero(p)) == kept, top_p
        base = np.array([0.15, 0.5, 0.1, 0.25])
        np.testing.assert_allclose(p[kept], base[kept] / base[kept].sum(), atol=1e-12)


def test_top_p_nucleus_stops_when_it_reaches_top_p_exactly():
    """Exact binary fractions: {.5, .25} already has mass .75, so the third id is not kept."""
    probs = np.array([[0.25, 0.5, 0.25], [0.5, 0.125, 0.375]])
    kept = top_p_filter(probs, 0.75)
    np.testing.assert_array_equal(kept, [[1 / 3, 2 / 3, 0.0], [4 / 7, 0.0, 3 / 7]])


def test_top_p_always_keeps_the_most_likely_token():
    """Even a tiny top_p leaves the argmax with probability 1."""
    z = distinct_logits(4, (3, 20))
    p = probabilities(z, SamplingParams(top_p=1e-9))
    np.testing.assert_array_equal(p, np.eye(20)[np.argmax(z, axis=-1)])


def test_top_p_nucleus_is_minimal_on_random_rows():
    """For random rows: the kept ids are the most likely ones, their mass reaches top_p, and
    dropping the least likely kept id would fall below top_p."""
    rng = np.random.default_rng(5)
    for _ in range(50):
        z = rng.normal(0, 2, 12)
        top_p = float(rng.uniform(0.05, 0.99))
        base = softmax64(z)
        p = probabilities(z, SamplingParams(top_p=top_p))
        kept = np.flatnonzero(p)
        order = np.argsort(-base)
        assert set(kept) == set(order[: len(kept)])
        mass = base[kept].sum()
        assert mass >= top_p - 1e-12
        assert mass - base[kept].min() < top_p
        np.testing.assert_allclose(p[kept], base[kept] / mass, atol=1e-12)


def test_temperature_top_k_top_p_combined_in_that_order():
    """T first, then top-k on the scaled logits, softmax, then the nucleus; rows renormalised."""
    z = distinct_logits(6).astype(np.float64)
    T, top_k, top_p = 0.7, 6, 0.8
    p = probabilities(z, SamplingParams(temperature=T, top_k=top_k, top_p=top_p))
    scaled = z / T
    keep_k = np.argsort(scaled)[-top_k:]
    q = np.zeros_like(z)
    q[keep_k] = softmax64(scaled[keep_k])
    order = np.argsort(-q)
    before = np.cumsum(q[order]) - q[order]
    nucleus = order[before < top_p]
    expected = np.zeros_like(z)
    expected[nucleus] = q[nucleus] / q[nucleus].sum()
    np.testing.assert_allclose(p, expected, atol=1e-12)
    assert 1 <= np.count_nonzero(p) < top_k


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0),
        SamplingParams(),
        SamplingParams(temperature=0.5, top_k=3),
        SamplingParams(top_p=0.6),
        SamplingParams(temperature=2.0, top_k=4, top_p=0.9),
    ],
    ids=lambda s: s.describe(),
)
def test_dtype_is_preserved(params):
    """float64 logits stay float64 (exact-law tests), float32 stays float32, ints -> float32."""
    z = distinct_logits(7, (2, 9))
    assert probabilities(z.astype(np.float64), params).dtype == np.float64
    assert probabilities(z, params).dtype == np.float32
    assert probabilities(np.arange(9), params).dtype == np.float32
    for out in (probabilities(z.astype(np.float64), params), probabilities(z, params)):
        np.testing.assert_allclose(out.sum(axis=-1), 1.0, atol=1e-6)


def test_describe_names_the_transforms():
    """The label printed next to statistics."""
    assert SamplingParams(temperature=0).describe() == "greedy"
    assert SamplingParams(temperature=0.7, top_k=5, top_p=0.9).describe() == (
        "T=0.7, top-k=5, top-p=0.9"
    )
    assert SamplingParams().greedy is False and SamplingParams(temperature=0).greedy is True


# ---------------------------------------------------------------- sample_token


def test_sample_token_never_returns_a_zero_probability_id():
    """Inverse-CDF sampling skips ids with no mass, at either end and in the middle."""
    probs = np.array([0, 0.2, 0, 0, 0.5, 0, 0.3, 0], dtype=np.float32)
    rng = np.random.default_rng(8)
    seen = {sample_token(probs, rng) for _ in range(3000)}
    assert seen == {1, 4, 6}


def test_sample_token_on_a_one_hot_row_is_deterministic():
    """A point mass is always returned, whatever the generator state."""
    rng = np.random.default_rng(9)
    for i in (0, 5, 9):
        assert {sample_token(np.eye(10)[i], rng) for _ in range(50)} == {i}


def test_sample_token_follows_its_law_roughly():
    """A sanity check only (the oracle tests laws): frequencies within 0.02 of probabilities
    after 20k draws (about 6 standard deviations)."""
    probs = np.array([0.05, 0.4, 0.15, 0.3, 0.1])
    rng = np.random.default_rng(10)
    counts = np.bincount([sample_token(probs, rng) for _ in range(20_000)], minlength=5)
    np.testing.assert_allclose(counts / 20_000, probs, atol=0.02)


def test_sample_token_returns_a_python_int_and_is_reproducible():
    """Same seed, same draws; plain ints so the output list is JSON-friendly."""
    probs = np.full(7, 1 / 7)
    a = [sample_token(probs, np.random.default_rng(11)) for _ in range(3)]
    b = [sample_token(probs, np.random.default_rng(11)) for _ in range(3)]
    assert a == b and all(type(t) is int for t in a)


def test_the_unchecked_draw_is_the_same_draw():
    """A drafter's per-token fast path (no checks) draws the very token `sample_token` draws
    from the same generator state, at every temperature: the random stream is unchanged."""
    from reference.sampling import probabilities_unchecked, sample_token_unchecked

    z = np.random.default_rng(5).standard_normal((20, 33)).astype(np.float32)
    for sampling in (SamplingParams(), SamplingParams(temperature=0.7, top_k=5), GREEDY):
        a, b = np.random.default_rng(9), np.random.default_rng(9)
        for row in z:
            q = probabilities(row, sampling)
            np.testing.assert_array_equal(probabilities_unchecked(row, sampling), q)
            assert sample_token(q, a) == sample_token_unchecked(q, b)


@pytest.mark.parametrize("temperature", [0.0, 1e-30, 0.05, 0.8, 1.0, 3.0, 1e6])
@pytest.mark.parametrize("top_k, top_p", [(None, 1.0), (5, 1.0), (None, 0.8)])
def test_a_drafters_draw_is_the_unchecked_row_and_draw_bit_for_bit(temperature, top_k, top_p):
    """draw_token (ModelDrafter's per-token path) writes probabilities_unchecked's row and
    draws sample_token_unchecked's token from the same uniform -- the same bits, ties and
    temperatures far below the logit gaps included -- and leaves the generator where they do."""
    sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    z = np.random.default_rng(3).standard_normal((40, 257)).astype(np.float32)
    z *= np.float32(8.0)
    z[::5, 7] = z[::5].max(axis=1)  # ties for the top
    a, b = np.random.default_rng(11), np.random.default_rng(11)
    for row in z:
        out = np.full(257, 0.5, dtype=np.float32)  # a row that was not zero before
        token = draw_token(row, sampling, a, out)
        q = probabilities_unchecked(row, sampling)
        assert token == sample_token_unchecked(q, b)
        assert out.tobytes() == q.tobytes()
    assert a.random() == b.random()


def test_a_draft_model_with_nan_logits_fails_loudly():
    from reference import ModelDrafter

    from .helpers import TARGET_CFG, make_model

    broken = make_model(TARGET_CFG, seed=0)
    broken.params["ln_f.bias"][:] = np.nan
    drafter = ModelDrafter(broken)
    with pytest.raises(ValueError, match="the draft model's logits contains NaN"):
        drafter.propose(np.array([1, 2]), 3, GREEDY, np.random.default_rng(0))

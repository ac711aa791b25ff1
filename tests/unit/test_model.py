"""The GPT forward pass: components, parameters, and cached == uncached at every step."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import erf

from reference import GPT, GPTConfig, init_params
from reference.model import causal_mask, expected_param_shapes, gelu, layer_norm, softmax

from .helpers import TARGET_CFG, assert_close_scaled

# ---------------------------------------------------------------- components


def test_causal_mask_square_is_lower_triangular():
    """Without a cache (S == T) position i sees keys 0..i."""
    np.testing.assert_array_equal(causal_mask(4, 4), np.tril(np.ones((4, 4), dtype=bool)))


def test_causal_mask_offset_by_cache_length():
    """With S - T cached keys, new row i sits at absolute position S - T + i."""
    for T, S in [(1, 1), (1, 7), (3, 5), (4, 9), (6, 6)]:
        mask = causal_mask(T, S)
        assert mask.shape == (T, S) and mask.dtype == bool
        expected = np.array([[j <= S - T + i for j in range(S)] for i in range(T)])
        np.testing.assert_array_equal(mask, expected)
    # the classic off-by-one: one decode step attends to every cached key and itself
    assert causal_mask(1, 5).all()
    np.testing.assert_array_equal(causal_mask(2, 5), [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])


def test_softmax_rows_sum_to_one_and_ignore_shifts():
    """softmax is a distribution and invariant to adding a constant per row."""
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    s = softmax(x)
    assert s.dtype == np.float32
    np.testing.assert_allclose(s.sum(axis=-1), 1.0, atol=1e-6)
    assert np.all(s > 0)
    np.testing.assert_allclose(softmax(x + 100.0), s, atol=1e-6)
    np.testing.assert_allclose(softmax(x, axis=0).sum(axis=0), 1.0, atol=1e-6)


def test_softmax_does_not_overflow_on_large_logits():
    """Subtracting the max keeps exp() finite even for logits of 1e4."""
    s = softmax(np.array([1e4, 1e4 - 1.0, -1e4], dtype=np.float32))
    assert np.all(np.isfinite(s))
    np.testing.assert_allclose(s, [1 / (1 + math.e**-1), 1 / (1 + math.e), 0.0], atol=1e-6)


def test_layer_norm_normalises_then_scales_and_shifts():
    """Unit gain and zero bias give mean 0 / variance 1; g and b act elementwise after."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4, 8)) * 3 + 2).astype(np.float32)
    ones, zeros = np.ones(8, np.float32), np.zeros(8, np.float32)
    y = layer_norm(x, ones, zeros, eps=1e-5)
    np.testing.assert_allclose(y.mean(axis=-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(y.var(axis=-1), 1.0, atol=1e-3)
    g = rng.standard_normal(8).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    np.testing.assert_allclose(layer_norm(x, g, b, eps=1e-5), g * y + b, atol=1e-5)


def test_gelu_matches_the_exact_gelu_closely():
    """The tanh approximation stays within 1e-3 of x * Phi(x) and keeps float32."""
    x = np.linspace(-6, 6, 241, dtype=np.float32)
    y = gelu(x)
    assert y.dtype == np.float32
    exact = 0.5 * x * (1 + erf(x / np.sqrt(2)))
    np.testing.assert_allclose(y, exact, atol=1e-3)
    assert gelu(np.float32(0.0)) == 0.0
    np.testing.assert_allclose(gelu(np.float32([10.0, -10.0])), [10.0, 0.0], atol=1e-6)


# ---------------------------------------------------------------- parameters


def test_init_params_has_every_checkpoint_key_with_its_shape():
    """Names and shapes follow the HF GPT-2 checkpoint; gains are 1, biases 0, float32."""
    cfg = GPTConfig(n_vocab=11, n_ctx=9, n_embd=12, n_head=3, n_layer=2)
    params = init_params(cfg, np.random.default_rng(0), std=0.02)
    expected = expected_param_shapes(cfg)
    assert set(params) == set(expected)
    assert len(params) == 4 + 12 * cfg.n_layer
    for name, shape in expected.items():
        assert params[name].shape == shape, name
        assert params[name].dtype == np.float32, name
    assert params["wte.weight"].shape == (11, 12) and params["wpe.weight"].shape == (9, 12)
    assert params["h.1.attn.c_attn.weight"].shape == (12, 36)
    assert params["h.0.mlp.c_fc.weight"].shape == (12, 48)
    for name in ("ln_f.weight", "h.0.ln_1.weight", "h.1.ln_2.weight"):
        np.testing.assert_array_equal(params[name], 1.0)
    for name in ("ln_f.bias", "h.0.attn.c_attn.bias", "h.1.mlp.c_proj.bias"):
        np.testing.assert_array_equal(params[name], 0.0)


def test_init_params_is_reproducible_and_uses_std():
    """Same seed, same weights; the weights' spread follows std."""
    a = init_params(TARGET_CFG, np.random.default_rng(5), std=0.5)
    b = init_params(TARGET_CFG, np.random.default_rng(5), std=0.5)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert abs(float(a["h.0.mlp.c_fc.weight"].std()) - 0.5) < 0.05


def test_gpt_rejects_parameters_of_the_wrong_shape():
    """A checkpoint that does not fit the config fails loudly, naming the key."""
    params = init_params(TARGET_CFG, np.random.default_rng(0))
    bad = dict(params, **{"h.1.ln_2.bias": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match=r"h\.1\.ln_2\.bias"):
        GPT(TARGET_CFG, bad)
    missing = {k: v for k, v in params.items() if k != "wpe.weight"}
    with pytest.raises(ValueError, match="wpe.weight"):
        GPT(TARGET_CFG, missing)


# ---------------------------------------------------------------- forward


def test_forward_returns_logits_for_every_position(target):
    """Verification needs all rows: [T] -> [T, V] float32."""
    logits = target.forward([1, 2, 3, 4, 5])
    assert logits.shape == (5, target.n_vocab) and logits.dtype == np.float32


def test_forward_is_causal(target):
    """Changing later tokens never changes earlier rows."""
    rng = np.random.default_rng(2)
    a = rng.integers(0, 16, 12)
    b = a.copy()
    b[7:] = (b[7:] + 1) % 16
    la, lb = target.forward(a), target.forward(b)
    assert_close_scaled(la[:7], lb[:7], "rows before the change")
    assert not np.allclose(la[7:], lb[7:])  # and the model does read its context


def test_cached_prefill_then_decodes_equal_uncached(target):
    """Prefill then one-token decodes: each row equals the full uncached forward's row."""
    tokens = np.random.default_rng(3).integers(0, 16, 20)
    full = target.forward(tokens)
    cache = target.new_cache()
    assert_close_scaled(target.forward(tokens[:6], cache), full[:6], "prefill")
    cache.commit(6)
    for t in range(6, 20):
        row = target.forward(tokens[t : t + 1], cache)
        assert_close_scaled(row, full[t : t + 1], f"decode at {t}")
        cache.commit(1)
    assert cache.length == 20


def test_cached_k_token_appends_equal_uncached(target):
    """Appends of k+1 tokens (a verification pass) after committed history match too."""
    tokens = np.random.default_rng(4).integers(0, 16, 30)
    full = target.forward(tokens)
    cache = target.new_cache()
    pos = 0
    for size in [3, 1, 4, 2, 5, 1, 6, 3, 5]:
        logits = target.forward(tokens[pos : pos + size], cache)
        assert_close_scaled(logits, full[pos : pos + size], f"append at {pos}")
        cache.commit(size)
        pos += size
    assert pos == 30


def test_cached_appends_after_partial_commits_and_rollbacks_equal_uncached(target):
    """After commit(n < pending) and rollback, the next append sees only committed history."""
    rng = np.random.default_rng(5)
    committed = list(rng.integers(0, 16, 4))
    cache = target.new_cache()
    target.forward(committed, cache)
    cache.commit(4)
    for step in range(12):
        candidates = list(rng.integers(0, 16, 1 + step % 4))
        logits = target.forward(candidates, cache)
        full = target.forward(committed + candidates)
        assert_close_scaled(logits, full[-len(candidates) :], f"step {step}")
        if step % 3 == 2:
            cache.rollback()
        else:
            n = int(rng.integers(0, len(candidates) + 1))
            cache.commit(n)
            cache.rollback()
            committed += candidates[:n]
        assert cache.length == len(committed) and cache.pending == 0


def test_appends_on_top_of_pending_slots_continue_after_them(target):
    """Two forwards without a commit between them: the second continues after the first."""
    tokens = np.random.default_rng(6).integers(0, 16, 9)
    full = target.forward(tokens)
    cache = target.new_cache()
    target.forward(tokens[:4], cache)
    assert (cache.length, cache.pending) == (0, 4)
    assert_close_scaled(target.forward(tokens[4:9], cache), full[4:9], "second append")
    assert (cache.length, cache.pending) == (0, 9)


def test_new_cache_matches_the_model(target):
    """The cache is [L, nh, N, hs] with N = n_ctx unless a smaller capacity is asked for."""
    cfg = target.config
    cache = target.new_cache()
    assert cache.k.shape == (cfg.n_layer, cfg.n_head, cfg.n_ctx, cfg.head_size)
    assert cache.v.shape == cache.k.shape and cache.k.dtype == np.float32
    assert target.new_cache(5).capacity == 5
    with pytest.raises(ValueError, match="capacity"):
        target.new_cache(cfg.n_ctx + 1)


def test_model_refuses_a_cache_made_for_another_model(target, small_model):
    """A cache of another shape is refused before anything is written to it."""
    foreign = small_model.new_cache()
    before = foreign.k.copy()
    with pytest.raises(ValueError, match="another model"):
        target.forward([1, 2, 3], foreign)
    assert (foreign.length, foreign.pending) == (0, 0)
    np.testing.assert_array_equal(foreign.k, before)
    with pytest.raises(ValueError, match="new_cache"):
        small_model.forward([1], target.new_cache())

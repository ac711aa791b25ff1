"""Small shared helpers for the unit tests: model builders, cache checks, toy drafters."""

from __future__ import annotations

import numpy as np

from reference import (
    GPT,
    Draft,
    GPTConfig,
    KVCache,
    init_params,
    speculative_generate,
)
from reference.drafters import Drafter
from reference.sampling import GREEDY, one_hot

# Dimension letters as in reference/config.py: V vocabulary, C width, L layers, N slots.
TARGET_CFG = GPTConfig(n_vocab=16, n_ctx=64, n_embd=16, n_head=2, n_layer=2)
SMALL_CFG = GPTConfig(n_vocab=16, n_ctx=64, n_embd=8, n_head=2, n_layer=1)  # another shape
SHORT_CFG = GPTConfig(n_vocab=16, n_ctx=24, n_embd=8, n_head=2, n_layer=1)  # short context
OTHER_VOCAB_CFG = GPTConfig(n_vocab=12, n_ctx=64, n_embd=8, n_head=2, n_layer=1)


# float32 forward passes over different splits of the same tokens agree to rounding only
ATOL_REL = 1e-5


def make_model(cfg: GPTConfig, seed: int, std: float = 0.5) -> GPT:
    """A random GPT; a large std makes its output depend strongly on the context."""
    return GPT(cfg, init_params(cfg, np.random.default_rng(seed), std=std))


def assert_close_scaled(actual: np.ndarray, expected: np.ndarray, what: str = "") -> None:
    """float32 equality up to rounding, relative to the magnitude of the values compared."""
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    scale = max(1.0, float(np.max(np.abs(expected))) if expected.size else 1.0)
    err = float(np.max(np.abs(actual - expected))) if expected.size else 0.0
    assert err <= ATOL_REL * scale, f"{what}: max |diff| {err:.3g} > {ATOL_REL:g} * {scale:.3g}"


def prefill_cache(model: GPT, tokens) -> KVCache:
    """A fresh cache holding exactly `tokens`, committed: what the invariant compares with."""
    cache = model.new_cache()
    if len(tokens):
        model.forward(np.asarray(tokens, dtype=np.int64), cache)
        cache.commit(len(tokens))
    return cache


def assert_cache_is_prefill(model: GPT, cache: KVCache, tokens, what: str = "cache") -> None:
    """The committed slots equal a fresh prefill of the committed tokens (docs/kv-cache.md,
    'The invariant')."""
    assert cache.length == len(tokens), f"{what}: length {cache.length} != {len(tokens)} tokens"
    k, v = cache.committed()
    k_ref, v_ref = prefill_cache(model, tokens).committed()
    assert_close_scaled(k, k_ref, f"{what} keys")
    assert_close_scaled(v, v_ref, f"{what} values")


def snapshot(cache: KVCache) -> tuple[int, int, np.ndarray, np.ndarray]:
    return cache.length, cache.pending, cache.k.copy(), cache.v.copy()


def assert_unchanged(cache: KVCache, snap) -> None:
    """Pointers and every slot (committed, temporary and free) exactly as before."""
    length, pending, k, v = snap
    assert (cache.length, cache.pending) == (length, pending)
    np.testing.assert_array_equal(cache.k, k)
    np.testing.assert_array_equal(cache.v, v)


class ConstantDrafter(Drafter):
    """A deliberately bad point-mass drafter: always proposes the same token, q one-hot."""

    def __init__(self, token: int, n_vocab: int, n_ctx: int) -> None:
        self.token, self.n_vocab, self.n_ctx = token, n_vocab, n_ctx

    def reset(self) -> None:
        pass

    def prefill(self, tokens) -> None:
        pass

    def propose(self, context, k, sampling, rng) -> Draft:
        tokens = np.full(k, self.token, dtype=np.int64)
        return Draft(tokens, one_hot(tokens, self.n_vocab, np.float32))

    def commit(self, n_accepted: int) -> None:
        pass

    def rollback(self) -> None:
        pass


class RecordingGPT(GPT):
    """A GPT that remembers every cache it hands out, so tests can inspect the target's."""

    def __init__(self, model: GPT) -> None:
        super().__init__(model.config, model.params)
        self.caches: list[KVCache] = []

    def new_cache(self, capacity: int | None = None) -> KVCache:
        cache = super().new_cache(capacity)
        self.caches.append(cache)
        return cache


def speculative_run(
    target, drafter, prompt, *, k, max_new_tokens, seed=0, sampling=GREEDY, eos_id=None, trace=False
):
    """speculative_generate with a fresh generator seeded by `seed` (the tests' one entry)."""
    return speculative_generate(
        target,
        drafter,
        prompt,
        k=k,
        max_new_tokens=max_new_tokens,
        rng=np.random.default_rng(seed),
        sampling=sampling,
        eos_id=eos_id,
        trace=trace,
    )

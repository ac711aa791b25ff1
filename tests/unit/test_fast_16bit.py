"""The fast path's 16-bit weights (specdec/fast_cpu/sixteen.py): the compiled passes reading
the linear and output-layer weights in the 16 bits they were stored in give the float32 fast
path's logits (the bundled pair's float16, a Llama's bfloat16), the same greedy tokens and
the same sampled rows; the plan may choose them, may refuse them, and never offers them
without numba or without 16-bit weights."""

from __future__ import annotations

import numpy as np
import pytest

from reference import ModelDrafter, generate
from reference.config import LlamaConfig
from reference.llama import Llama, init_llama_params
from reference.sampling import SamplingParams
from specdec.bundled import load_bundled_pair
from specdec.fast_cpu import FastGPT, fast, llama_step, sixteen
from specdec.fast_cpu import compiled as fast_compiled
from specdec.fast_cpu import model as fast_model
from specdec.fast_cpu import plan as fast_plan
from specdec.fast_cpu import step as fast_step
from specdec.measure import roofline

from .helpers import GREEDY, assert_close_scaled, speculative_run
from .test_fast_cpu import made_up_plan

needs_numba = pytest.mark.skipif(not fast_compiled.AVAILABLE, reason="numba not installed")
PAIRS = [("fused", "fused16"), ("stepwise", "stepwise16")]  # (float32, its 16-bit twin)
CODE = b"class Rectangle:\n    def area(self):\n        return self.w * self.h\n"


def bfloat16_llama(seed: int = 0, **kw) -> Llama:
    # a random Llama whose every weight is a bfloat16 number (the low 16 bits cut off), as a
    # checkpoint stored in bf16 loads (reference/weights.py widens it)
    cfg = LlamaConfig(n_vocab=40, n_ctx=64, **kw)
    params = init_llama_params(cfg, np.random.default_rng(seed), std=0.2)
    cut = {
        n: (w.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32) for n, w in params.items()
    }
    return Llama(cfg, cut)


@pytest.fixture(scope="module")
def llama():
    return bfloat16_llama(n_layer=2, n_embd=64, n_head=4, n_kv_head=2, n_inner=96)


@pytest.fixture(scope="module")
def bundled():
    return load_bundled_pair()


def configured(model, config: str) -> FastGPT:
    kind = fast_model.FastLlama if isinstance(model, Llama) else FastGPT
    return kind(model.config, dict(model.params), fast_plan.TrickPlan.fixed(config))


def max_diff_through_a_run(a: FastGPT, b: FastGPT, tokens: np.ndarray) -> float:
    """Prefill, one-row steps, then 2..16-row appends rolled back (verification): the two
    models' logits agree at every call to float32 rounding; returns the largest difference."""
    caches, worst = (a.new_cache(), b.new_cache()), 0.0
    n = len(tokens) // 2
    calls = [(tokens[:n], n), *((tokens[i : i + 1], 1) for i in range(n, n + 3))]
    calls += [(tokens[-T:], 0) for T in range(2, fast_plan.FEW_ROWS + 1)]
    for rows, keep in calls:
        ours, theirs = a.forward(rows, caches[0]), b.forward(rows, caches[1])
        assert_close_scaled(theirs, ours, f"{len(rows)} rows")
        worst = max(worst, float(np.max(np.abs(theirs - ours))))
        for c in caches:
            c.commit(keep) if keep else c.rollback()
    return worst


def test_narrowed_weights_widen_back_to_the_same_float32():
    """float16 and bfloat16 numbers survive the round trip bit for bit; a float32 that is
    neither has no 16-bit copy, and the format is read from the values."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    halves = w.astype(np.float16).astype(np.float32)
    bfloats = (w.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    assert sixteen.format_of([halves]) == "float16"
    assert sixteen.format_of([bfloats]) == "bfloat16"
    beyond = bfloats * np.float32(2.0**20)  # bfloat16 numbers past float16's range
    assert sixteen.format_of([beyond]) == "bfloat16"
    assert sixteen.format_of([w]) is None and sixteen.format_of([halves, beyond]) is None
    for values, fmt, dtype in ((halves, "float16", np.int16), (bfloats, "bfloat16", np.uint16)):
        bits = sixteen.narrowed(values, fmt)
        assert bits.dtype == dtype and not bits.flags.writeable
        assert np.array_equal(sixteen.widened(bits), values)
        assert sixteen.narrowed(w, fmt) is None


@needs_numba
@pytest.mark.parametrize("fmt", sixteen.FORMATS)
@pytest.mark.parametrize("T", [1, 3, 8])
def test_the_compiled_product_widens_16_bit_weights_exactly(fmt, T):
    """The few-row kernel on 16-bit weights: the float32 kernel's result on the widened ones,
    bit for bit (the same sums in the same order)."""
    rng = np.random.default_rng(T)
    w_t = rng.standard_normal((96, 70)).astype(np.float32)
    bits = sixteen.narrowed(fast_widened(w_t, fmt), fmt)
    x, b = rng.standard_normal((T, 70)).astype(np.float32), np.zeros(96, np.float32)
    want = fast_compiled.few_rows_product(x, sixteen.widened(bits), b)
    assert np.array_equal(fast_compiled.few_rows_product(x, bits, b), want)


def fast_widened(w: np.ndarray, fmt: str) -> np.ndarray:  # w rounded to the format's numbers
    if fmt == "bfloat16":
        return (w.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    return w.astype(np.float16).astype(np.float32)


@needs_numba
@pytest.mark.parametrize("pair", PAIRS, ids=[p[1] for p in PAIRS])
def test_the_bundled_pairs_16_bit_passes_give_the_float32_passes_logits(bundled, pair):
    """The bundled checkpoints are float16: both models get 16-bit copies, the compiled calls
    read them (not the NumPy fallback), and every call's logits equal the float32 compiled
    call's to float32 rounding (measured: identical, the sums run in the same order)."""
    tokens = np.frombuffer(CODE, np.uint8).astype(np.int64)
    for model in bundled:
        f32, f16 = (configured(model, c) for c in pair)
        assert f16.sixteen_copies.fmt == "float16"
        assert max_diff_through_a_run(f32, f16, tokens) <= 1e-5
        assert f16.compiled_weights16.lists is not None, "fell back to the NumPy pass"


@needs_numba
@pytest.mark.parametrize("pair", PAIRS, ids=[p[1] for p in PAIRS])
def test_a_bfloat16_llamas_16_bit_passes_give_the_float32_passes_logits(llama, pair):
    f32, b16 = (configured(llama, c) for c in pair)
    assert b16.sixteen_copies.fmt == "bfloat16"
    assert max_diff_through_a_run(f32, b16, np.random.default_rng(1).integers(0, 40, 40)) < 1e-5
    assert b16.compiled_weights16.lists is not None, "fell back to the NumPy pass"


@needs_numba
def test_greedy_tokens_are_unchanged_with_the_16_bit_path_forced(bundled, llama):
    """Target fused16, draft stepwise16: greedy speculative decoding still emits the plain
    target's greedy tokens, for the bundled pair and a bfloat16 Llama pair."""
    draft_llama = bfloat16_llama(seed=1, n_layer=1, n_embd=32, n_head=2, n_kv_head=1, n_inner=64)
    code = np.frombuffer(CODE, np.uint8).astype(np.int64)
    for (target, draft), prompt in (
        (bundled, code),
        ((llama, draft_llama), np.random.default_rng(8).integers(0, 40, 12)),
    ):
        want = generate(
            target, prompt, max_new_tokens=32, rng=np.random.default_rng(0), sampling=GREEDY
        )
        quick = configured(target, "fused16"), configured(draft, "stepwise16")
        got = speculative_run(quick[0], ModelDrafter(quick[1]), prompt, k=5, max_new_tokens=32)
        assert got.tokens == want


@needs_numba
def test_a_sampled_run_draws_from_the_same_rows_in_16_bits(llama):
    """At T = 0.8 the 16-bit pair's q and p rows are the float32 pair's to rounding, so the
    law of the output is the same (the oracle's laws hold for the float32 path)."""
    draft = bfloat16_llama(seed=1, n_layer=1, n_embd=32, n_head=2, n_kv_head=1, n_inner=64)
    prompt = np.random.default_rng(8).integers(0, 40, 12)
    runs = []
    for target_config, draft_config in (("fused", "stepwise"), ("fused16", "stepwise16")):
        drafter = ModelDrafter(configured(draft, draft_config))
        runs.append(
            speculative_run(
                configured(llama, target_config), drafter, prompt, k=4, max_new_tokens=24,
                sampling=SamplingParams(temperature=0.8), trace=True,
            )
        )  # fmt: skip
    ours, theirs = runs
    assert theirs.tokens == ours.tokens  # the rows agree far inside a draw's resolution
    for a, b in zip(ours.trace, theirs.trace, strict=True):
        np.testing.assert_allclose(b.q_rows, a.q_rows, atol=1e-6)
        np.testing.assert_allclose(b.p_rows, a.p_rows, atol=1e-6)


@needs_numba
def test_the_plan_can_choose_the_16_bit_pass_and_the_model_then_runs_it(llama, monkeypatch):
    """fused16 faster at 2-8 rows, fused at 9-16: each size runs its choice (the 16-bit
    copies at 2-8); and where the 16-bit pass timed slower it is refused."""
    faster = {("fused16", T) for T in range(2, 9)} | {("fused", T) for T in range(9, 17)}
    plan = made_up_plan(lambda c, T: 1.0 if (c, T) in faster else 2.0)
    assert plan.chosen[4] == "fused16" and plan.chosen[12] == "fused"
    line = next(x for x in fast_plan.describe_plan(plan).splitlines() if "| fused16 |" in x)
    assert "16-bit weights" in line and line.endswith("| 2-8 rows |"), line
    calls = []
    real = llama_step.compiled_forward
    monkeypatch.setattr(
        llama_step, "compiled_forward", lambda *a: calls.append(a[1].sixteen) or real(*a)
    )
    quick = fast_model.FastLlama(llama.config, dict(llama.params), plan)
    cache = quick.new_cache()
    quick.forward(np.arange(4), cache)
    quick.forward(np.arange(12), cache)
    assert calls == [True, False]
    slower = made_up_plan(lambda c, T: 3.0 if c in fast_plan.SIXTEEN_BIT else 2.0)
    assert not set(slower.chosen.values()) & set(fast_plan.SIXTEEN_BIT)


def test_the_16_bit_configurations_are_offered_only_where_they_can_run(llama, monkeypatch):
    """Offered with numba and 16-bit weights; "off" drops them, "on" drops their float32
    twins instead; never without numba, nor for float32 weights; a bad setting is an error."""
    quick = fast(llama, "none")
    f32_weights = Llama(llama.config, {n: w + np.float32(1e-7) for n, w in llama.params.items()})
    assert fast(f32_weights, "none").sixteen_copies.fmt is None
    monkeypatch.delenv(sixteen.ENV, raising=False)
    offered = set(fast_model.offered_configs(quick))
    if fast_compiled.AVAILABLE:
        assert offered >= {"fused", "fused16", "stepwise", "stepwise16"}
        monkeypatch.setenv(sixteen.ENV, "on")
        assert "fused16" in fast_model.offered_configs(quick)
        assert "fused" not in fast_model.offered_configs(quick)
    monkeypatch.setenv(sixteen.ENV, "off")
    assert not set(fast_model.offered_configs(quick)) & set(fast_plan.SIXTEEN_BIT)
    monkeypatch.setenv(sixteen.ENV, "sometimes")
    with pytest.raises(ValueError, match="SPECDEC_FAST_16BIT must be one of"):
        fast_model.offered_configs(quick)
    monkeypatch.delenv(sixteen.ENV)
    monkeypatch.setattr(fast_compiled, "AVAILABLE", False)
    no_numba = fast(llama, "none")
    assert no_numba.sixteen_copies.fmt is None
    assert not set(fast_model.offered_configs(no_numba)) & set(fast_plan.COMPILED_CONFIGS)


@needs_numba
def test_a_replaced_weight_that_is_not_16_bit_leaves_the_pass_to_numpy(bundled):
    """A weight replaced by one no float16 holds: the 16-bit pass declines (nothing written)
    and the layer-by-layer pass runs, with the edited model's logits."""
    target = bundled[1]
    quick = configured(target, "fused16")
    name = "h.0.mlp.c_fc.weight"
    quick.params[name] = quick.params[name] + np.float32(1e-4)
    cache = quick.new_cache()
    assert (
        fast_step.compiled_forward(quick, quick.compiled_weights16, np.arange(3), cache, 3) is None
    )
    assert (cache.length, cache.pending) == (0, 0)
    edited = configured(type(target)(target.config, dict(quick.params)), "fused")
    max_diff_through_a_run(edited, quick, np.frombuffer(CODE, np.uint8).astype(np.int64))


def test_the_roofline_counts_two_bytes_a_weight_where_a_pass_reads_16_bits(llama):
    """A plan running 2-8-row passes in 16 bits: those passes read half the weight bytes
    (the cache's float32 K/V unchanged), and the bench's table says which is which."""
    faster = {("fused16", T) for T in range(2, 9)}
    plan = made_up_plan(lambda c, T: 1.0 if (c, T) in faster else 2.0)
    quick = fast_model.FastLlama(llama.config, dict(llama.params), plan)
    if quick.sixteen_copies.fmt is None:
        pytest.skip("numba not installed: no 16-bit copies")
    assert roofline.weight_bytes(quick, 4) == 2 and roofline.weight_bytes(quick, 12) == 4
    assert roofline.weight_bytes(llama, 4) == 4, "the plain model reads float32"
    S = 20  # cached positions before the pass
    half, full = (roofline.pass_products(quick, T, S + T) for T in (4, 12))
    for a, b in zip(half, full, strict=True):
        if a.name != "attention":
            assert a.bytes == pytest.approx(b.bytes / 2), a.name  # no biases in this Llama
    rates = roofline.Rates(bandwidth=1e10, flops=1e11, dram_bandwidth=5e9)
    table = roofline.pass_bytes_table(quick, {4: 1e-3, 12: 2e-3}, S, rates)
    rows = table.splitlines()[2:]
    assert "16-bit weights" in rows[0] and "32-bit weights" in rows[1], table
    n = sum(p.bytes for p in half)
    assert f"| {n / 1e6:.1f} MB" in rows[0] and f"{n / 1e-3 / 1e10:.2f}" in rows[0], table

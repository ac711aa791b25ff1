"""The fused kernels at every size and layout: zero rows, strided views, other dtypes.

On a device a kernel gets bare pointers and a grid: CuPy raises a zero grid dimension to 1
and gives a zero-size array the pointer 0, and it passes a strided view or a float64 array
as if it were C-contiguous float32. So a call with zero rows must launch nothing, and every
array a plan hands a kernel must be of the kernel's dtype and C-contiguous -- made so (an
input), or refused so that the body runs (an output the kernel would write in place). The
emulator (tests/twin/cuda_emulator.py) runs a zero grid as CuPy does, so these tests run the
exact plans and would see a kernel read past its arrays.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gpu
import reference
from gpu import sampling, verification
from gpu.device import fused, kernels
from gpu.device.backend import counting_launches, to_host, xp
from gpu.device.kernels import KernelCannot, KernelMode, Plan
from gpu.kv_cache import KVCache
from reference.batch import batch_placement
from reference.config import GPTConfig
from reference.model import causal_placement, init_params
from reference.sampling import GREEDY, SamplingParams
from tests.twin.cuda_emulator import compiler

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C++ compiler (g++) on this machine")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def launched(emulator, monkeypatch) -> list[str]:
    """Every fused call goes to the emulator, as it would go to the device; the names of the
    kernels launched, in order."""
    names: list[str] = []

    class Module:
        def get_function(self, name):
            def launch(grid, block, args):
                names.append(name)
                emulator.launch(Plan(name, grid, block, args, None))

            return launch

    monkeypatch.setattr(kernels, "mode", KernelMode(on=True, why_off=""))
    monkeypatch.setattr(kernels, "compiled_module", lambda: Module())
    return names


def rows(rng, *shape, scale=1.0, dtype=np.float32):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def strided(a):  # the same values as a view with every other column (a fresh buffer's)
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), dtype=a.dtype)
    wide[..., ::2] = a
    return wide[..., ::2]


CONFIG = GPTConfig(n_vocab=40, n_ctx=32, n_embd=32, n_head=2, n_layer=2)


@pytest.fixture(scope="module")
def target():
    return reference.GPT(CONFIG, init_params(CONFIG, np.random.default_rng(0), std=0.3))


# ---------------------------------------------------------------- zero rows


def test_the_emulator_runs_a_zero_grid_as_one_block_as_cupy_does(emulator):
    """A zero grid dimension is launched as 1 on a device (CuPy's rule), so the emulator runs
    block 0 too: here into buffers that are large enough, so that the block shows."""
    rng = np.random.default_rng(0)
    x, g, b = rows(rng, 1, 40), rows(rng, 40), rows(rng, 40)
    out = np.full((1, 40), 7.0, dtype=np.float32)
    args = (x, np.int32(40), g, b, np.float32(1e-5), out)
    emulator.launch(Plan("layer_norm_rows", (0,), (128,), args, out))
    np.testing.assert_allclose(out, fused.layer_norm(x, g, b, 1e-5), atol=1e-5)


def test_a_zero_row_linear_plan_is_idle_and_its_kernel_touches_no_row(emulator):
    """The zero-row linear plan is idle (never launched). Launched anyway, as CuPy would (one
    block: the emulator raises the zero grid as CuPy does), the kernel reads and writes no
    row: a sentinel output where row 0 would go stays as it was."""
    rng = np.random.default_rng(0)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    plan = fused.linear_plan(f(0, 8), f(8, 40), ln=(f(8), f(8), 1e-5))
    assert plan.idle()
    sentinel = np.full((1, 40), 7.0, np.float32)
    args = tuple(sentinel if a is plan.result else a for a in plan.args)  # out, not row 0
    emulator.launch(Plan(plan.name, plan.grid, plan.block, args, sentinel))
    np.testing.assert_array_equal(sentinel, 7.0)


def test_every_fused_call_with_zero_rows_launches_nothing(launched):
    """Zero rows through each fused entry point: the body's empty result, no launch."""
    rng = np.random.default_rng(1)
    C, N, V = 16, 24, 30
    x, w, bias = rows(rng, 0, C), rows(rng, C, N), rows(rng, N)
    ln = (rows(rng, C), rows(rng, C), 1e-5)
    got = fused.fused_linear(x, w, bias, ln=ln, act="gelu", resid=rows(rng, 0, N))
    assert got.shape == (0, N) and got.dtype == np.float32
    assert fused.layer_norm_rows(x, *ln).shape == (0, C)
    wte, wpe = rows(rng, V, C), rows(rng, 20, C)
    none = np.zeros(0, dtype=np.int64)
    assert fused.embed(wte, wpe, none, slice(3, 3)).shape == (0, C)
    assert fused.embed(wte, wpe, none, none).shape == (0, C)
    probs = np.zeros((0, V), np.float32)
    params = SamplingParams(temperature=0.7)
    sampling.pick(rows(rng, 0, V), params, np.zeros(0), probs=probs, tokens=none.copy())
    assert sampling.probabilities(rows(rng, 0, V), GREEDY).shape == (0, V)
    assert launched == []
    # and each plan knows it has nothing to do
    assert fused.linear_plan(x, w, bias, ln=ln).idle()
    assert fused.layer_norm_plan(x, *ln).idle()
    assert fused.embed_plan(wte, wpe, none, slice(3, 3)).idle()
    assert fused.pick_plan(rows(rng, 0, V), params, None, probs, None, None).idle()


def test_the_stand_in_counts_no_launch_for_zero_rows():
    """The stand-in for a device counts what a device would launch: nothing for zero rows."""
    for R in (0, 2):
        with counting_launches() as log:
            x, w = xp.zeros((R, 8), dtype=np.float32), xp.ones((8, 4), dtype=np.float32)
            g, b = xp.ones(8, dtype=np.float32), xp.zeros(8, dtype=np.float32)
            fused.fused_linear(x, w, ln=(g, b, 1e-5))
            fused.layer_norm_rows(x, g, b, 1e-5)
        fused_launches = [log.by_name[f"fused {n}"] for n in ("fused_linear", "layer_norm_rows")]
        assert fused_launches == ([0, 0] if R == 0 else [1, 1])


def test_a_batch_pass_of_zero_positions_on_a_filled_cache_launches_nothing(launched, target):
    """tokens [B, 0], every n_new 0, on a cache that holds tokens: the reference returns
    [B, 0, V]; the twin returns it too and launches nothing (its attention plan over zero
    positions is idle even if reached)."""
    twin = gpu.GPT(CONFIG, target.params)
    first, n_first = np.array([[1, 2, 3], [4, 5, 0]]), np.array([3, 2])
    ours, theirs = gpu.new_batch_cache(twin, 2), reference.new_batch_cache(target, 2)
    gpu.batched_forward(twin, first, n_first, ours)
    reference.batched_forward(target, first, n_first, theirs)
    assert ours.end.tolist() == [3, 2]
    launched.clear()
    empty, zero = np.zeros((2, 0), dtype=np.int64), np.zeros(2, dtype=np.int64)
    got = to_host(gpu.batched_forward(twin, empty, zero, ours))
    want = reference.batched_forward(target, empty, zero, theirs)
    assert got.shape == want.shape == (2, 0, CONFIG.n_vocab)
    assert launched == []
    at = batch_placement(ours.end, zero, 0)
    assert at.stop > 0  # the history: not the "nothing at all" case
    qkv = np.zeros((0, 3 * CONFIG.n_embd), dtype=np.float32)
    assert fused.attention_plan(twin, qkv, 0, ours, at).idle()


def test_a_bonus_only_round_decides_in_the_kernel(emulator):
    """k = 0 drafts (q and the drafts empty: pointer 0 on a device) is not a zero grid: the
    kernel runs, reads only p, and decides as the body does."""
    rng = np.random.default_rng(2)
    p = rng.random((1, 50)).astype(np.float32)
    p /= p.sum()
    q, x, u = np.zeros((0, 50), np.float32), np.zeros(0, np.int64), np.array([0.37])
    plan = fused.decide_plan(p, q, x, u)
    assert not plan.idle()
    emulator.launch(plan)
    np.testing.assert_array_equal(plan.result, verification.decide_packed.body(p, q, x, u))


# ---------------------------------------------------------------- layouts and dtypes


def test_strided_and_float64_inputs_reach_the_linear_kernel_as_float32_rows(emulator):
    rng = np.random.default_rng(3)
    R, C_in, N = 3, 40, 70
    x, w, bias = rows(rng, R, C_in), rows(rng, C_in, N, scale=0.1), rows(rng, N)
    g, b, resid = rows(rng, C_in), rows(rng, C_in), rows(rng, R, N)
    want = fused.fused_linear.body(x, w, bias, ln=(g, b, 1e-5), act="gelu", resid=resid)
    w_t = np.ascontiguousarray(w.T).astype(np.float64).T  # a transposed view, float64
    views = [strided(a.astype(np.float64)) for a in (x, bias, g, b, resid)]
    assert not any(a.flags.c_contiguous for a in (w_t, *views))
    x_v, bias_v, g_v, b_v, resid_v = views
    plan = fused.linear_plan(x_v, w_t, bias_v, ln=(g_v, b_v, 1e-5), act="gelu", resid=resid_v)
    emulator.launch(plan)
    np.testing.assert_allclose(plan.result, want, atol=2e-5)


def test_the_output_layer_reads_the_right_rows_without_its_copy(emulator):
    """fused_linear(h, wte.T) with no row-major copy: the plan copies the view itself (on a
    device the kernel would otherwise read wte.T's memory as if it were row-major)."""
    rng = np.random.default_rng(4)
    wte, h = rows(rng, 40, 24), rows(rng, 3, 24)
    plan = fused.linear_plan(h, wte.T)
    emulator.launch(plan)
    np.testing.assert_allclose(plan.result, h @ wte.T, atol=1e-5)


def test_strided_inputs_reach_the_norm_and_embedding_kernels_as_rows(emulator):
    rng = np.random.default_rng(5)
    x, g, b = rows(rng, 4, 50), rows(rng, 50), rows(rng, 50)
    plan = fused.layer_norm_plan(*(strided(a.astype(np.float64)) for a in (x, g, b)), 1e-5)
    emulator.launch(plan)
    np.testing.assert_allclose(plan.result, fused.layer_norm(x, g, b, 1e-5), atol=1e-5)
    wte, wpe = rows(rng, 30, 8), rows(rng, 20, 8)
    tokens, positions = np.array([3, 29, 0, 7]), np.array([5, 1, 19, 0])
    want = fused.embed.body(wte, wpe, tokens, positions)
    ids = strided(tokens.astype(np.int32)), strided(positions.astype(np.int32))
    plan = fused.embed_plan(strided(wte), strided(wpe.astype(np.float64)), *ids)
    emulator.launch(plan)
    np.testing.assert_array_equal(plan.result, want)


def test_a_strided_qkv_reaches_the_attention_kernel_as_rows(emulator, target):
    rng = np.random.default_rng(6)
    twin = gpu.GPT(CONFIG, target.params)
    C, T, start = CONFIG.n_embd, 3, 4
    qkv = rows(rng, T, 3 * C)
    caches = [KVCache(2, 2, 16, 16) for _ in range(2)]
    for cache in caches:
        cache.k[:], cache.v[:] = 0.5, -0.25
        cache.length = start
    at = causal_placement(start, T)
    want = fused.cached_attention.body(twin, qkv, 1, caches[0], at)
    plan = fused.attention_plan(twin, strided(qkv.astype(np.float64)), 1, caches[1], at)
    emulator.launch(plan)
    np.testing.assert_allclose(plan.result, want, atol=1e-5)
    np.testing.assert_array_equal(caches[1].k, caches[0].k)


def test_a_cache_the_kernel_cannot_write_in_place_runs_the_body(launched, target):
    """The K/V cache is written in place: a float64 cache cannot be copied for the kernel
    (the writes would go to the copy), so the plan refuses it and the body runs."""
    twin = gpu.GPT(CONFIG, target.params)
    qkv = rows(np.random.default_rng(7), 2, 3 * CONFIG.n_embd)
    cache = KVCache(2, 2, 16, 16, dtype=np.float64)
    at = causal_placement(0, 2)
    with pytest.raises(KernelCannot):
        fused.attention_plan(twin, qkv, 0, cache, at)
    plain = KVCache(2, 2, 16, 16, dtype=np.float64)
    want = fused.cached_attention.body(twin, qkv, 0, plain, at)
    np.testing.assert_array_equal(fused.cached_attention(twin, qkv, 0, cache, at), want)
    np.testing.assert_array_equal(cache.k, plain.k)
    assert launched == []


def test_strided_and_float64_inputs_reach_the_pick_and_decide_kernels(emulator):
    rng = np.random.default_rng(8)
    logits, u = rows(rng, 3, 70, scale=2.0), rng.random(3)
    params = SamplingParams(temperature=0.7)
    want = [np.zeros((3, 70), np.float32), np.zeros(3, np.int64), np.zeros(3, np.int64)]
    sampling.pick.body(logits, params, u, probs=want[0], tokens=want[1], finite=want[2])
    got = [np.zeros((3, 70), np.float32), np.zeros(3, np.int64), np.zeros(3, np.int64)]
    plan = fused.pick_plan(strided(logits.astype(np.float64)), params, strided(u), *got)
    emulator.launch(plan)
    np.testing.assert_allclose(got[0], want[0], atol=1e-6)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])

    k, V = 3, 60
    p, q = rng.random((k + 1, V)).astype(np.float32), rng.random((k, V)).astype(np.float32)
    p, q = p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)
    x, u = rng.integers(0, V, k), rng.random(k + 1)
    want = verification.decide_packed.body(p, q, x, u)
    views = strided(p.astype(np.float64)), strided(q), strided(x.astype(np.int32)), strided(u)
    plan = fused.decide_plan(*views)
    emulator.launch(plan)
    np.testing.assert_array_equal(plan.result, want)


@pytest.mark.parametrize("output", ["strided probs", "int32 tokens", "unequal strides"])
def test_outputs_the_pick_kernel_cannot_write_in_place_run_the_body(launched, output):
    rng = np.random.default_rng(9)
    logits, u, params = rows(rng, 3, 40), rng.random(3), SamplingParams(temperature=1.3)
    wide = np.full((3, 80), -1.0, np.float32)
    probs = wide[:, ::2] if output == "strided probs" else np.zeros((3, 40), np.float32)
    packed = np.zeros((3, 3), np.int64)  # tokens at stride 3, finite at stride 2 below
    tokens = np.zeros(3, np.int32) if output == "int32 tokens" else packed[:, 0]
    finite = np.zeros(6, np.int64)[::2] if output == "unequal strides" else packed[:, 1]
    with pytest.raises(KernelCannot):
        fused.pick_plan(logits, params, u, probs, tokens, finite)
    want = [np.zeros((3, 40), np.float32), np.zeros(3, np.int64), np.zeros(3, np.int64)]
    sampling.pick.body(logits, params, u, probs=want[0], tokens=want[1], finite=want[2])
    sampling.pick(logits, params, u, probs=probs, tokens=tokens, finite=finite)
    assert launched == []  # the body wrote them
    np.testing.assert_array_equal(probs, want[0])
    np.testing.assert_array_equal(tokens, want[1])
    np.testing.assert_array_equal(finite, want[2])
    if output == "strided probs":
        assert (wide[:, 1::2] == -1.0).all()  # the columns between untouched


def test_the_temperature_reaches_the_kernel_as_a_double(emulator):
    """The body divides by the temperature as a Python float (a double); the kernel multiplies
    by its reciprocal, computed once, as a double too (1 / 0.7 as a float32 is one float32
    ulp away in some scaled logits), so a scaled logit rounds to the same float32."""
    rng = np.random.default_rng(10)
    logits = rows(rng, 2, 300, scale=3.0)
    probs = np.zeros((2, 300), np.float32)
    plan = fused.pick_plan(logits, SamplingParams(temperature=0.7), None, probs, None, None)
    inv_t = plan.args[3]
    assert type(inv_t) is np.float64 and inv_t == 1.0 / 0.7
    assert float(np.float32(1.0 / 0.7)) != 1.0 / 0.7  # what a float32 argument would carry
    emulator.launch(plan)  # the emulator checks the C type: double
    want = sampling.processed(logits, SamplingParams(temperature=0.7))
    np.testing.assert_allclose(probs, want, atol=1e-6)


# ---------------------------------------------------------------- the mode, per call


def test_a_twin_built_with_the_kernels_off_is_right_with_them_on(launched, target):
    """Built while the kernels were off, used with them on: the output layer's row-major copy
    is made at its first kernel call, and the logits are the kernels-off twin's."""
    with kernels.kernels_off("built off"):
        twin = gpu.GPT(CONFIG, target.params)
        prompt = np.array([3, 1, 4, 1, 5])
        want = twin.forward(prompt, twin.new_cache())
    assert twin._wte_rows is None  # nothing made at construction
    got = twin.forward(prompt, twin.new_cache())
    assert "fused_linear_8" in launched and twin._wte_rows is not None  # 5 rows
    np.testing.assert_allclose(got, want, atol=1e-4)
    np.testing.assert_allclose(got, target.forward(prompt, target.new_cache()), atol=1e-4)

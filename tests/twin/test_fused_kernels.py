"""The fused kernels (gpu/device/kernels.cu), run as written on the CPU, against their NumPy bodies.

No GPU is needed: tests/twin/cuda_emulator.py compiles the CUDA source with the host's C++
compiler (one fiber per CUDA thread, barriers for __syncthreads) and runs the exact
plans gpu/device/fused.py would launch on a device -- grid, block, argument list and types. Each
kernel is compared with the body NumPy mode runs (the unfused xp composition) on the cases
where a kernel goes wrong: ties, NaN, masks, a cache with history, a rejection, p == q --
and, where one row's work is spread over several blocks (split-K linears, a large
vocabulary's pick and verification, an attention head's positions), with the blocks run in
order and last to first, since on a device any block may be the one that combines. Then a
whole tiny twin runs its loops with every fused call going through the emulator instead of
its body, and must emit the reference's tokens. With nvcc installed, the source is also
compiled for the H200's architecture (sm_90): what the device's NVRTC will see.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import subprocess

import numpy as np
import pytest

from gpu import sampling, verification
from gpu.device import fused, kernels
from gpu.device.kernels import MAX_ROWS, SOURCE
from gpu.kv_cache import KVCache
from reference.sampling import GREEDY, SamplingParams
from tests.twin.cuda_emulator import compiler

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C++ compiler (g++) on this machine")


def rows(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("R", [1, 6, MAX_ROWS])
@pytest.mark.parametrize(
    "options", ["plain", "bias", "ln+bias+gelu", "bias+resid", "ln, no bias (the output layer)"]
)
def test_fused_linear_matches_its_body(emulator, R, options):
    rng = np.random.default_rng(R)
    C_in, N = 72, 100  # N not a multiple of the block's 32 columns: the edge block is tested
    x, w = rows(rng, R, C_in), rows(rng, C_in, N, scale=0.1)
    kwargs = {}
    if "bias" in options and "no bias" not in options:
        kwargs["bias"] = rows(rng, N)
    if "ln" in options:
        kwargs["ln"] = (rows(rng, C_in), rows(rng, C_in), 1e-5)
    if "gelu" in options:
        kwargs["act"] = "gelu"
    if "resid" in options:
        kwargs["resid"] = rows(rng, R, N)
    plan = fused.linear_plan(x, w, **kwargs)
    emulator.launch(plan)
    np.testing.assert_allclose(plan.result, fused.fused_linear.body(x, w, **kwargs), atol=2e-5)


def test_the_output_layer_reads_its_row_major_copy(emulator):
    rng = np.random.default_rng(1)
    wte, h = rows(rng, 40, 24), rows(rng, 3, 24)
    plan = fused.linear_plan(h, wte.T, w_rows=np.ascontiguousarray(wte.T))
    emulator.launch(plan)
    np.testing.assert_allclose(plan.result, h @ wte.T, atol=1e-5)


def test_layer_norm_and_embedding_match_their_bodies(emulator):
    rng = np.random.default_rng(2)
    x, g, b = rows(rng, 5, 200, scale=3.0), rows(rng, 200), rows(rng, 200)
    plan = fused.layer_norm_plan(x, g, b, 1e-5)
    emulator.launch(plan)
    np.testing.assert_allclose(plan.result, fused.layer_norm(x, g, b, 1e-5), atol=1e-5)
    wte, wpe, tokens = rows(rng, 50, 16), rows(rng, 30, 16), rng.integers(0, 50, 4)
    for positions in (slice(7, 11), rng.integers(0, 30, 4)):  # a sequence's, a tree's
        plan = fused.embed_plan(wte, wpe, tokens, positions)
        emulator.launch(plan)
        np.testing.assert_array_equal(plan.result, fused.embed.body(wte, wpe, tokens, positions))


def filled(cache, lengths):
    # random history in every slot; `lengths` committed slots (an int, or one per batch row)
    rng = np.random.default_rng(3)
    cache.k[:], cache.v[:] = rows(rng, *cache.k.shape), rows(rng, *cache.v.shape)
    cache.length = lengths
    return cache


@pytest.fixture(scope="module")
def tiny_twin():
    # a twin model of 4 heads, 32 wide: the body's config and attend (its weights unused)
    import gpu
    from reference.config import GPTConfig
    from reference.model import init_params

    cfg = GPTConfig(n_vocab=16, n_ctx=32, n_embd=32, n_head=4, n_layer=2)
    return gpu.GPT(cfg, init_params(cfg, np.random.default_rng(0)))


CASES = ["prefill", "one step after history", "a verification pass", "a tree's mask",
         "no cache", "a ragged batch", "a batch of one-token steps"]  # fmt: skip


def attention_case(tiny_twin, case: str, capacity: int = 16, start: int = 5):
    # -> (qkv, at, the body's cache, the kernel's cache, the rows compared) for one case
    from gpu.batch import BatchKVCache
    from reference.batch import batch_placement
    from reference.model import causal_placement

    rng = np.random.default_rng(4)
    C = tiny_twin.config.n_embd
    start = {"prefill": 0, "no cache": 0}.get(case, start)
    T = 1 if case in ("one step after history", "a batch of one-token steps") else 4
    if "batch" in case:  # rows of different histories, one of them with padding, one idle
        length = np.array([5, 0, 9])
        n_new = np.array([T, T - 1, 0]) if T > 1 else np.array([1, 1, 0])
        at = batch_placement(length, n_new, T)
        make = lambda: filled(BatchKVCache(3, 2, 4, 8, capacity), length.copy())  # noqa: E731
    else:
        at = causal_placement(start, T)
        make = lambda: filled(KVCache(2, 4, 8, capacity), start)  # noqa: E731
    if case == "a tree's mask":
        mask = rng.random((T, start + T)) < 0.6
        mask[:, 0] = True  # every node sees the first committed slot
        at = dataclasses.replace(at, mask=mask, positions=start + rng.integers(0, T, T))
    qkv = rows(rng, int(np.prod(at.shape)), 3 * C)
    caches = [None, None] if case == "no cache" else [make(), make()]
    real = slice(None) if "batch" not in case else (np.arange(T)[None, :] < n_new[:, None]).ravel()
    return qkv, at, caches[0], caches[1], real


def check_attention(emulator, tiny_twin, case: str, **shape):
    # the kernel's plan against the body: the outputs (padding discarded) and every cache slot
    qkv, at, body_cache, cache, real = attention_case(tiny_twin, case, **shape)
    want = fused.cached_attention.body(tiny_twin, qkv, 1, body_cache, at)
    plan = fused.attention_plan(tiny_twin, qkv, 1, cache, at)
    emulator.launch(plan)
    np.testing.assert_allclose(plan.result[real], want[real], atol=1e-5)
    if body_cache is not None:
        np.testing.assert_array_equal(cache.k, body_cache.k)
        np.testing.assert_array_equal(cache.v, body_cache.v)
    return plan


@pytest.mark.parametrize("case", CASES)
def test_cached_attention_matches_its_body_and_writes_the_same_slots(emulator, tiny_twin, case):
    plan = check_attention(emulator, tiny_twin, case)
    assert plan.grid[0] == tiny_twin.config.n_head  # a cache of 16 slots: one part a head


# Flash-decoding: a head's positions over P blocks, the last to finish combining the parts.
# Two positions a part at most: a cache of 16 slots gives P = 8, so a span of 6 or 9 leaves
# the last parts without a position (their partial must weigh nothing) and every other part
# has a few, one of them the causal edge or a masked slot.
@pytest.mark.parametrize("order", ["order", "reversed"])
@pytest.mark.parametrize("case", CASES)
def test_cached_attention_split_over_its_positions_matches_its_body(
    emulator, tiny_twin, case, order, monkeypatch
):
    monkeypatch.setattr(fused, "ATTENTION_POSITIONS", 2)
    with blocks_in(emulator, order):
        plan = check_attention(emulator, tiny_twin, case)
    parts = 2 if case == "no cache" else 8  # no cache: the span itself (4) sets P
    assert plan.grid[0] == tiny_twin.config.n_head * parts


@pytest.mark.parametrize("order", ["order", "reversed"])
def test_a_long_cache_splits_each_heads_positions_over_parts_of_at_most_128(
    emulator, tiny_twin, order
):
    # 300 slots: three parts of 128 at most, the span of 254 split 85 + 85 + 84
    with blocks_in(emulator, order):
        plan = check_attention(emulator, tiny_twin, "a verification pass", capacity=300, start=250)
    assert plan.grid == (tiny_twin.config.n_head * 3, 4, 1)


def run_pick(emulator, logits, params, u, on_device: bool):
    R, V = logits.shape
    probs, tokens, finite = (
        np.zeros((R, V), np.float32),
        np.zeros(R, np.int64),
        np.zeros(R, np.int64),
    )
    args = (logits, params, u, probs, tokens, finite)
    emulator.launch(fused.pick_plan(*args)) if on_device else sampling.pick.body(
        logits, params, u, probs=probs, tokens=tokens, finite=finite
    )
    return probs, tokens, finite


@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=0.7), SamplingParams()])
def test_pick_matches_its_body(emulator, params):
    rng = np.random.default_rng(5)
    V = 300  # more ids than the block's threads: chunks of two
    logits = rows(rng, 5, V, scale=3.0)
    logits[1, [40, 7]] = logits[1].max() + 1.0  # a tie: the first id wins, as np.argmax's
    logits[3, 11] = np.nan
    u = rng.random(5)
    got, want = (run_pick(emulator, logits, params, u, on) for on in (True, False))
    np.testing.assert_allclose(got[0], want[0], atol=1e-6)  # NaN rows alike (greedy)
    fine = [0, 1, 2, 4]  # row 3's draw is meaningless (its flag stops the loop)
    np.testing.assert_array_equal(got[1][fine], want[1][fine])
    np.testing.assert_array_equal(got[2], [1, 1, 1, 0, 1])
    if params.greedy:
        assert got[1][1] == 7


def test_pick_packs_the_autoregressive_token_and_flag_with_a_scalar_uniform(emulator):
    rng = np.random.default_rng(6)
    logits = rows(rng, 1, 257)
    for params in (GREEDY, SamplingParams(temperature=1.2)):
        packed = [np.zeros(2, np.int64), np.zeros(2, np.int64)]
        sampling.pick.body(logits, params, 0.4, tokens=packed[0][:1], finite=packed[0][1:])
        emulator.launch(fused.pick_plan(logits, params, 0.4, None, packed[1][:1], packed[1][1:]))
        np.testing.assert_array_equal(packed[1], packed[0])


@pytest.mark.parametrize("case", ["a rejection", "all accepted", "p == q at the rejection", "NaN"])
def test_decide_packed_matches_its_body(emulator, case):
    rng = np.random.default_rng(7)
    k, V = 4, 300
    p = rng.random((k + 1, V)).astype(np.float32)
    q = rng.random((k, V)).astype(np.float32)
    p, q = p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)
    x, u = rng.integers(0, V, k), rng.random(k + 1)
    u[:2] = 0.0  # the first two drafts are accepted whatever their ratio
    if case == "all accepted":
        u[:k] = 0.0
    if case == "p == q at the rejection":  # rejected at 2 with a residual of zero mass:
        q[2] = p[2]  # the row falls back to p_2 itself
        q[2, x[2]] *= np.float32(1.0000005)  # p/q a hair under 1 ...
        u[2] = 0.99999999  # ... and a uniform above it
    if case == "NaN":
        q[1, 3] = np.nan
    want = verification.decide_packed.body(p, q, x, u)
    plan = fused.decide_plan(p, q, x, u)
    emulator.launch(plan)
    np.testing.assert_array_equal(plan.result, want)
    if case == "all accepted":
        assert want[0] == k
    if case == "a rejection":
        assert want[0] < k
    if case == "p == q at the rejection":
        assert want[0] == 2


# ---------------------------------------------------------------- several blocks, one combine
# Where one row's work is spread over several blocks (a linear's input dimension, a large
# vocabulary's pick and verification; an attention head's positions, above), the group's
# last block to finish combines the others' partials. On a device any block may be last:
# each case runs with the blocks in order and last to first (the emulator runs one block at
# a time), and must match the body both ways.


@contextlib.contextmanager
def blocks_in(emulator, order: str):
    # "order": first to last (the default); "reversed": the last block runs first
    emulator.block_order(last_first=order == "reversed")
    try:
        yield
    finally:
        emulator.block_order(last_first=False)


@pytest.mark.parametrize("order", ["order", "reversed"])
@pytest.mark.parametrize("R", [1, 5])
def test_fused_linear_split_over_its_inputs_adds_the_parts_then_applies_the_epilogue_once(
    emulator, R, order
):
    # C_in = 200: six parts of 34 inputs for each of 3 column blocks; bias, GELU and the
    # residual applied to each part's sum instead of the whole would be far off
    rng = np.random.default_rng(20 + R)
    C_in, N = 200, 70
    x, w = rows(rng, R, C_in), rows(rng, C_in, N, scale=0.1)
    kwargs = dict(bias=rows(rng, N), ln=(rows(rng, C_in), rows(rng, C_in), 1e-5), act="gelu",
                  resid=rows(rng, R, N))  # fmt: skip
    plan = fused.linear_plan(x, w, **kwargs)
    assert plan.grid == (3, 6)
    with blocks_in(emulator, order):
        emulator.launch(plan)
    np.testing.assert_allclose(plan.result, fused.fused_linear.body(x, w, **kwargs), atol=2e-5)


@pytest.mark.parametrize("order", ["order", "reversed"])
@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=0.7)])
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # the body's inf - inf, on purpose
def test_pick_over_several_blocks_matches_its_body(emulator, params, order):
    rng = np.random.default_rng(21)
    V = 2500  # three blocks of 1024 ids
    logits = rows(rng, 3, V, scale=3.0)
    logits[0, [2100, 1500, 900]] = logits[0].max() + 1.0  # a tie in each block: 900 wins
    logits[1, 2400] = np.inf  # not finite, in the last block alone
    u = rng.random(3)
    plan = fused.pick_plan(logits, params, u, *(np.zeros(s, d) for s, d in (((3, V), np.float32),
                           (3, np.int64), (3, np.int64))))  # fmt: skip
    assert plan.grid == (3, 3)
    with blocks_in(emulator, order):
        got = run_pick(emulator, logits, params, u, on_device=True)
    want = run_pick(emulator, logits, params, u, on_device=False)
    fine = [0, 2]  # row 1's draw is meaningless (its flag stops the loop)
    np.testing.assert_allclose(got[0][fine], want[0][fine], atol=1e-6)
    np.testing.assert_array_equal(got[1][fine], want[1][fine])
    np.testing.assert_array_equal(got[2], [1, 0, 1])
    if params.greedy:
        assert got[1][0] == 900
        assert np.isnan(got[0][1]).all() and np.isnan(want[0][1]).all()  # as the body: NaN


@pytest.mark.parametrize("order", ["order", "reversed"])
@pytest.mark.parametrize("case", ["a rejection", "all accepted", "p == q at the rejection", "NaN"])
def test_decide_over_several_blocks_matches_its_body(emulator, case, order):
    # V = 2999: 21 blocks scan p and q (3 drafts), and row n is split in parts of 160 ids
    rng = np.random.default_rng(22)
    k, V = 3, 2999
    p = rng.random((k + 1, V)).astype(np.float32) ** 4
    q = rng.random((k, V)).astype(np.float32) ** 4
    p, q = p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)
    x, u = rng.integers(0, V, k), rng.random(k + 1)
    u[0] = 0.0
    if case == "all accepted":
        u[:k] = 0.0
    if case == "p == q at the rejection":  # the residual is all 0: the row falls back to p_1
        q[1] = p[1]
        u[1] = 1.0
    if case == "NaN":
        q[2, V - 1] = np.nan  # the last entry, in the last block's share
    want = verification.decide_packed.body(p, q, x, u)
    plan = fused.decide_plan(p, q, x, u)
    assert plan.grid == (21,)
    with blocks_in(emulator, order):
        emulator.launch(plan)
    np.testing.assert_array_equal(plan.result, want)
    assert want[0] == {"all accepted": k, "p == q at the rejection": 1}.get(case, want[0])


def misaligned(a):  # the same values at an address 4 bytes past a 16-byte boundary
    flat = np.empty(a.size + 4, dtype=a.dtype)
    start = (-flat.ctypes.data // 4) % 4 + 1  # floats to a boundary, plus one
    view = flat[start : start + a.size].reshape(a.shape)
    view[...] = a
    return view


def test_the_verification_reads_four_floats_a_load_only_where_p_and_q_are_aligned(emulator):
    rng = np.random.default_rng(23)
    k, V = 3, 999  # 3 x 999 q entries: three past the last whole float4
    p = rng.random((k + 1, V)).astype(np.float32)
    q = rng.random((k, V)).astype(np.float32)
    p, q = p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)
    q[2, V - 1] = np.inf  # in q's tail, which the float4 loop does not reach
    x, u = rng.integers(0, V, k), rng.random(k + 1)
    want = verification.decide_packed.body(p, q, x, u)
    for p_in, q_in, vec4 in ((p, q, 1), (misaligned(p), q, 0), (p, misaligned(q), 0)):
        plan = fused.decide_plan(p_in, q_in, x, u)
        assert plan.args[6] == vec4
        emulator.launch(plan)
        np.testing.assert_array_equal(plan.result, want)
    assert want[-1] == 0


def test_a_twin_running_the_kernels_emits_the_references_tokens(kernels_in_the_emulator):
    import gpu
    from reference.autoregressive import generate as reference_generate
    from reference.config import GPTConfig
    from reference.drafters import ModelDrafter
    from reference.model import GPT, init_params
    from reference.speculative import speculative_generate as reference_speculative

    def model(n_layer, n_embd, seed):
        cfg = GPTConfig(n_vocab=40, n_ctx=32, n_embd=n_embd, n_head=2, n_layer=n_layer)
        return GPT(cfg, init_params(cfg, np.random.default_rng(seed), std=0.3))

    target, draft = model(2, 32, 0), model(1, 16, 1)
    prompt = np.array([3, 1, 4, 1, 5], dtype=np.int64)
    twin = gpu.GPT(target.config, target.params)
    assert twin.wte_rows() is not None  # the output layer's row-major copy, for the kernel
    want = reference_generate(target, prompt, max_new_tokens=6, rng=np.random.default_rng(0))
    got = gpu.generate(twin, prompt, max_new_tokens=6, rng=np.random.default_rng(0))
    assert got == want
    twin_draft = gpu.ModelDrafter(gpu.GPT(draft.config, draft.params))
    kwargs = dict(k=3, max_new_tokens=8, sampling=GREEDY)
    ours = gpu.speculative_generate(
        twin, twin_draft, prompt, rng=np.random.default_rng(1), **kwargs
    )
    theirs = reference_speculative(
        target, ModelDrafter(draft), prompt, rng=np.random.default_rng(1), **kwargs
    )
    assert list(ours.tokens) == list(theirs.tokens)


def test_an_eagle_twin_running_the_kernels_drafts_the_references_rows(kernels_in_the_emulator):
    """EAGLE's steps through the kernels: the fusion's linear, the one-block model's fused
    block over a sequence (the chain) and over a tree placement of its own cache (EAGLE-2),
    the reduction (EAGLE-3), the output layer and the draws: the reference's tokens, q rows
    and trees."""
    import gpu
    import reference
    from reference.config import GPTConfig
    from reference.eagle import init_eagle_params
    from reference.model import GPT, init_params

    cfg = GPTConfig(n_vocab=40, n_ctx=32, n_embd=32, n_head=2, n_layer=2)
    target = GPT(cfg, init_params(cfg, np.random.default_rng(0), std=0.3))
    twin = gpu.GPT(cfg, target.params)
    prompt = np.array([3, 1, 4, 1, 5], dtype=np.int64)
    for layers in (None, (1, 2)):
        params = init_eagle_params(cfg, np.random.default_rng(2), 0.3, layers)
        kw = dict(k=3, max_new_tokens=8, sampling=GREEDY, trace=True)
        ours = gpu.speculative_generate(
            twin, gpu.EagleDrafter(twin, params, layers), prompt, rng=np.random.default_rng(1), **kw
        )
        theirs = reference.speculative_generate(
            target, reference.EagleDrafter(target, params, layers), prompt,
            rng=np.random.default_rng(1), **kw,
        )  # fmt: skip
        assert list(ours.tokens) == list(theirs.tokens)
        for a, b in zip(ours.trace, theirs.trace, strict=True):
            np.testing.assert_allclose(a.q_rows, b.q_rows, atol=1e-4)

        def tree(core, model, params=params, layers=layers):
            return core.EagleTreeDrafter(core.EagleDrafter(model, params, layers), 8, 3, 3)

        kw = dict(max_new_tokens=8, sampling=GREEDY, trace=True)
        ours = gpu.tree.tree_speculative_generate(
            twin, tree(gpu, twin), prompt, rng=np.random.default_rng(1), **kw
        )
        theirs = reference.tree.tree_speculative_generate(
            target, tree(reference, target), prompt, rng=np.random.default_rng(1), **kw
        )
        assert list(ours.tokens) == list(theirs.tokens)
        assert ours.stats.nodes == theirs.stats.nodes


def test_the_kernel_mode_is_read_at_each_call_not_when_a_model_is_built(kernels_in_the_emulator):
    """Kernels on or off is decided at every fused call: a twin built with them on, then run
    with them off, gives what a twin built with them off gives, and the other way round --
    no half-on state (the output layer's row-major copy is made when a kernel first needs
    it, not at construction)."""
    import gpu
    from reference.config import GPTConfig
    from reference.model import init_params

    cfg = GPTConfig(n_vocab=40, n_ctx=32, n_embd=32, n_head=2, n_layer=2)
    params = init_params(cfg, np.random.default_rng(0), std=0.3)
    built_on = gpu.GPT(cfg, params)
    with kernels.kernels_off("built off"):
        built_off = gpu.GPT(cfg, params)
    prompt, step = np.array([3, 1, 4, 1, 5]), np.array([9])

    def run(model):
        # a pass of 5 rows and a one-token step: fused blocks, the fused output layer
        cache = model.new_cache()
        first = model.forward(prompt, cache)
        cache.commit(len(prompt))
        return np.concatenate([first, model.forward(step, cache)])

    for mode in ("on", "off"):
        with kernels.kernels_off("run off") if mode == "off" else contextlib.nullcontext():
            assert kernels.kernels_on() == (mode == "on")
            np.testing.assert_array_equal(run(built_off), run(built_on), err_msg=mode)
    assert built_on.wte_rows() is not None and built_off.wte_rows() is not None
    with kernels.kernels_off("a test"):
        assert built_on.wte_rows() is None  # nothing for a kernel to read: none runs


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no CUDA compiler (nvcc) on this machine")
def test_the_kernels_compile_for_the_h200(tmp_path):
    defines = [f"-D{n}={getattr(kernels, n)}" for n in ("MAX_ROWS", "MAX_S", "MAX_HS")]
    done = subprocess.run(
        ["nvcc", "-arch=sm_90", "-cubin", *defines, "-o", str(tmp_path / "k.cubin"), str(SOURCE)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr.lower(), done.stderr


def test_the_preflights_kernel_check_passes_on_the_emulator(kernels_in_the_emulator, capsys):
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "gpu_preflight.py"
    spec = importlib.util.spec_from_file_location("preflight", script)
    preflight = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(preflight)
    preflight.fused_kernels()
    assert "ok    fused kernels: compiled in" in capsys.readouterr().out
    assert kernels.kernels_on()  # nothing was turned off


def test_the_bench_times_the_unfused_twin_only_where_the_kernels_run(kernels_in_the_emulator):
    from specdec.measure import gpu_bench
    from specdec.measure.bench import held_out_code_prompts

    prompts = held_out_code_prompts(1)
    rate = gpu_bench.unfused_rate(prompts, 2, 4, "model", None)  # the bodies: nothing emulated
    assert rate is not None and rate > 0
    assert kernels.kernels_on(), "the kernels must be back on after the unfused row"
    with kernels.kernels_off("a test"):
        assert gpu_bench.unfused_rate(prompts, 2, 4, "model", None) is None
        assert kernels.kernel_state() == "off (a test)"


@pytest.mark.parametrize("order", ["order", "reversed"])
@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=0.8)])
@pytest.mark.parametrize("V", [50_257, 128_256])  # GPT-2's ids, Llama 3's: ~1 s each here
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # the body's -inf * 0, on purpose
def test_pick_at_a_real_vocabulary_matches_its_body(emulator, params, order, V):
    """A real vocabulary: 50 blocks a row (GPT-2), 126 (Llama 3's 128,256 ids). At a
    temperature the scan's combine gives the row's max and sum, then the draw writes p and
    finds the token over the same blocks: p to a float's rounding, the tokens exactly."""
    rng = np.random.default_rng(V)
    R = 3
    logits = rows(rng, R, V, scale=4.0)
    logits[1, V - 7] = logits[1].max() + 2.0  # the row's max in the last block alone
    logits[2, : V // 2] = -np.inf  # half a row without mass (not finite: flagged)
    u = np.array([0.3, 0.999, 0.6])
    plan = fused.pick_plan(logits, params, u, *(np.zeros(s, d) for s, d in (((R, V), np.float32),
                           (R, np.int64), (R, np.int64))))  # fmt: skip
    G = -(-V // fused.PART_IDS)
    assert plan.grid == (G, R) and len(plan.chain()) == (1 if params.greedy else 2)
    with blocks_in(emulator, order):
        got = run_pick(emulator, logits, params, u, on_device=True)
    want = run_pick(emulator, logits, params, u, on_device=False)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-9)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], [1, 1, 0])
    assert got[1][1] == V - 7 or not params.greedy

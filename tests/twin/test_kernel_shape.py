"""The kernels are shaped for a GPU (issue 34, item 2), and the emulator runs that shape.

No thread of gpu/device/kernels.cu walks blockDim alone: a block's sum, largest, argmax and
prefix are trees of warp shuffles with one combine through shared memory. The source is read
for it here, so a serial loop cannot come back unseen. The emulator's shuffles are held to
CUDA's semantics on a tiny kernel of their own, and the warp-shaped kernels against their
bodies at sizes where several warps, partial steps and empty warps all occur (the cases of
tests/twin/test_fused_kernels.py, at a larger vocabulary).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpu import verification
from gpu.device import fused
from gpu.device.backend import ON_DEVICE
from gpu.device.kernels import SOURCE, Plan
from reference.sampling import GREEDY, SamplingParams
from tests.twin.cuda_emulator import WARP, Emulator, compiler
from tests.twin.test_fused_kernels import run_pick
from tests.twin.test_kernels_compile import threads_per_block

needs_emulator = pytest.mark.skipif(
    compiler() is None or ON_DEVICE, reason="the emulator needs g++ and NumPy arrays"
)

# ---------------------------------------------------------------- no serial loop over blockDim

FUNCTION = re.compile(r"__(?:global|device)__[^;{]*?\)\s*\{")
DECLARED = re.compile(r"\b(\w+)\s*=\s*([^,;]+)")
FOR = re.compile(r"for\s*\(\s*(?:int|long long|unsigned)?\s*(\w+)\s*=\s*([^;]*);\s*([^;]*);")


def bodies(source: str) -> list[tuple[str, str]]:
    # (signature, body) of every __global__ / __device__ function, by brace matching
    found = []
    for m in FUNCTION.finditer(source):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(source[i], 0)
            i += 1
        found.append((m.group(0), source[m.end() : i - 1]))
    return found


def derived(body: str, roots: tuple[str, ...]) -> set[str]:
    # the names a function computes from any of `roots` (directly or through each other)
    names = set(roots)
    for _ in range(4):  # chains are short: t = threadIdx.x, lane = t % WARP, ...
        for name, value in DECLARED.findall(body):
            if any(re.search(rf"\b{re.escape(n)}\b", value) for n in names):
                names.add(name)
    return names


def serial_block_loops(source: str) -> list[str]:
    """Loops one thread runs over the block: a bound that follows from blockDim, and a start
    that does not depend on which thread runs it (a strided loop starts at the thread's own
    index; a warp's loop at its lane or warp)."""
    found = []
    for signature, body in bodies(source):
        size = derived(body, ("blockDim",))
        who = derived(body, ("threadIdx",)) - {"blockDim"}
        for index, start, condition in FOR.findall(body):
            bound = set(re.findall(r"\w+", condition)) - {index}
            mine = set(re.findall(r"\w+", start))
            if bound & size and not mine & who:
                found.append(f"{signature.split('(')[0]}: for ({index} = {start}; {condition};")
    return found


def test_no_kernel_walks_blockdim_in_one_thread():
    assert serial_block_loops(SOURCE.read_text()) == []


@pytest.mark.parametrize(
    "serial",
    [  # the shapes the kernels had before issue 34 (thread 0 over the block's partials)
        "__device__ float f(float v, float* s) {\n  if (threadIdx.x == 0) {\n"
        "    for (int i = 1; i < (int)blockDim.x; i++) s[0] += s[i];\n  }\n  return s[0];\n}",
        "__global__ void k(int V) {\n  int r = blockIdx.x, t = threadIdx.x, n = blockDim.x;\n"
        "  if (t == 0) { for (int i = 1; i < n; i++) {} }\n}",
        "__global__ void k(int R) {\n  int lanes = blockDim.x / R;\n"
        "  if (threadIdx.x < R) for (int l = 0; l < lanes; l++) {}\n}",
    ],
)
def test_the_check_sees_a_serial_loop(serial):
    assert len(serial_block_loops(serial)) == 1


def test_the_check_lets_strided_and_warp_loops_pass():
    strided = (
        "__global__ void k(int V, int R) {\n  int t = threadIdx.x, n = blockDim.x, lane = t % 32;\n"
        "  int warps = blockDim.x / 32;\n  for (int i = t; i < V; i += n) {}\n"
        "  for (int r = t / 32; r < R; r += warps) {}\n  for (int i = lane; i < V; i += 32) {}\n}"
    )
    assert serial_block_loops(strided) == []


# ---------------------------------------------------------------- the emulator's shuffles

SHUFFLES = r"""
// every lane's value after each shuffle, one row of out per shuffle (grid: blocks of 64)
extern "C" __global__ void shuffles(const float* x, const double* y, long long* width,
                                    float* out, double* out_double, long long* out_int) {
    int g = blockIdx.x * blockDim.x + threadIdx.x, n = gridDim.x * blockDim.x;
    float v = x[g];
    int row = 0;
    for (int m = 1; m < 32; m <<= 1) out[(row++) * n + g] = __shfl_xor_sync(0xffffffffu, v, m);
    for (int d = 1; d < 32; d <<= 1) out[(row++) * n + g] = __shfl_down_sync(0xffffffffu, v, d);
    for (int d = 1; d < 32; d <<= 1) out[(row++) * n + g] = __shfl_up_sync(0xffffffffu, v, d);
    out[(row++) * n + g] = __shfl_sync(0xffffffffu, v, 5);
    float sum = v;  // the tree every kernel uses
    for (int m = 16; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
    out[(row++) * n + g] = sum;
    out_double[g] = __shfl_xor_sync(0xffffffffu, y[g], 3);
    out_int[g] = __shfl_down_sync(0xffffffffu, (int)g, 7);
    if (g == 0) width[0] = warpSize;
}

// thread 0 returns while the others wait for it at a barrier: on a device, a hang
extern "C" __global__ void skips_a_barrier(float* out) {
    if (threadIdx.x == 0) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}
"""


@pytest.fixture(scope="module")
def shuffle_emulator(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shuffles")
    (folder / "shuffles.cu").write_text(SHUFFLES)
    return Emulator(folder, folder / "shuffles.cu")


@needs_emulator
def test_the_emulators_shuffles_are_cudas(shuffle_emulator):
    blocks, threads = 2, 64  # two blocks of two warps: lanes never cross a warp
    n = blocks * threads
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n)
    width = np.zeros(1, np.int64)
    out = np.zeros((5 + 5 + 5 + 1 + 1, n), np.float32)
    out_double, out_int = np.zeros(n), np.zeros(n, np.int64)
    args = (x, y, width, out, out_double, out_int)
    shuffle_emulator.launch(Plan("shuffles", (blocks,), (threads,), args, out))

    g = np.arange(n)
    lane, base = g % WARP, g - g % WARP

    def lanes(src):  # the value of lane src of the same warp; a source outside: one's own
        inside = (src >= 0) & (src < WARP)
        return np.where(inside, base + np.clip(src, 0, WARP - 1), g)

    want = [x[lanes(lane ^ m)] for m in (1, 2, 4, 8, 16)]
    want += [x[lanes(lane + d)] for d in (1, 2, 4, 8, 16)]
    want += [x[lanes(lane - d)] for d in (1, 2, 4, 8, 16)]
    want += [x[base + 5], np.repeat(x.reshape(-1, WARP).sum(1), WARP)]
    np.testing.assert_array_equal(out[:-1], np.array(want[:-1]))
    np.testing.assert_allclose(out[-1], want[-1], rtol=1e-5)  # the tree's order, not NumPy's
    np.testing.assert_array_equal(out_double, y[lanes(lane ^ 3)])
    np.testing.assert_array_equal(out_int, lanes(lane + 7))
    assert width[0] == WARP


@needs_emulator
def test_a_barrier_no_thread_can_pass_fails_the_launch_and_the_next_one_runs(shuffle_emulator):
    out = np.zeros(64, np.float32)
    with pytest.raises(AssertionError, match=r"block 0 \(flat index\) stuck"):
        shuffle_emulator.launch(Plan("skips_a_barrier", (3,), (64,), (out,), out))
    assert not out.any()  # block 0's threads 1-63 wait for thread 0; blocks 1 and 2 never ran
    test_the_emulators_shuffles_are_cudas(shuffle_emulator)  # the fibers made anew


@needs_emulator
def test_the_emulator_refuses_a_block_of_a_partial_warp(shuffle_emulator):
    n = 48
    args = (np.zeros(n, np.float32), np.zeros(n), np.zeros(1, np.int64),
            np.zeros((17, n), np.float32), np.zeros(n), np.zeros(n, np.int64))  # fmt: skip
    with pytest.raises(AssertionError, match="not whole warps"):
        shuffle_emulator.launch(Plan("shuffles", (1,), (n,), args, None))


def test_every_plan_asks_for_whole_warps():
    # the block of each kernel's plan, as gpu/device/fused.py builds it
    blocks = threads_per_block()
    assert all(threads % WARP == 0 for threads in blocks.values()), blocks
    # cached_attention's warps are a compile-time constant (its shared partials are sized so)
    warps = int(re.search(r"#define ATT_WARPS (\d+)", SOURCE.read_text()).group(1))
    assert blocks["cached_attention"] == warps * WARP


# ---------------------------------------------------------------- warp-shaped kernels vs bodies


def pick_both(emulator, logits, params, u):
    # (kernel's probs, tokens, finite), (body's): test_fused_kernels.run_pick both ways
    return [run_pick(emulator, logits, params, u, on_device) for on_device in (True, False)]


@needs_emulator
@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=0.7), SamplingParams()])
def test_pick_at_a_large_vocabulary_matches_its_body(emulator, params):
    """V = 5,003: eight warps' runs of 640 ids (the last one short, in a partial step), many
    uniforms, the argmax's ties split across warps and threads."""
    rng = np.random.default_rng(11)
    R, V = 24, 5003
    logits = (3.0 * rng.standard_normal((R, V))).astype(np.float32)
    top = logits.max() + 1.0
    logits[0, [4999, 1234, 4000]] = top  # ties in different warps' strides: 1234 wins
    logits[1, [300, 44]] = top  # ... and in one thread's (44 and 300 = 44 + 256): 44
    logits[2, V - 1] = top  # the last id, in the last warp's partial step
    u = rng.random(R)
    u[3], u[4] = 0.0, np.nextafter(1.0, 0.0)  # the ends of the draw
    (got_p, got_t, got_f), (want_p, want_t, want_f) = pick_both(emulator, logits, params, u)
    np.testing.assert_allclose(got_p, want_p, atol=1e-6)
    np.testing.assert_array_equal(got_t, want_t)
    np.testing.assert_array_equal(got_f, want_f)
    if params.greedy:
        assert list(got_t[:3]) == [1234, 44, V - 1]


@needs_emulator
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # the body's 0 * inf, on purpose
def test_a_greedy_pick_of_a_broken_row_draws_as_its_body(emulator):
    # NaN, +inf and -inf rows: the body's probabilities are all NaN, its draw 0
    logits = np.zeros((3, 700), np.float32)
    logits[0, 650], logits[1, 3], logits[2, 400] = np.nan, np.inf, -np.inf
    (got_p, got_t, got_f), (want_p, want_t, want_f) = pick_both(
        emulator, logits, GREEDY, np.full(3, 0.5)
    )
    assert np.isnan(got_p).all() and np.isnan(want_p).all()
    np.testing.assert_array_equal(got_t, want_t)
    np.testing.assert_array_equal(got_f, [0, 0, 0])
    np.testing.assert_array_equal(want_f, [0, 0, 0])


@needs_emulator
@pytest.mark.parametrize("seed", range(4))
def test_decide_at_a_large_vocabulary_matches_its_body(emulator, seed):
    rng = np.random.default_rng(100 + seed)
    k, V = 5, 5003
    p = rng.random((k + 1, V)).astype(np.float32) ** 4  # peaked rows: residuals that matter
    q = rng.random((k, V)).astype(np.float32) ** 4
    p, q = p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)
    x, u = rng.integers(0, V, k), rng.random(k + 1)
    u[: seed % k] = 0.0  # the first drafts accepted, so each seed rejects somewhere else
    want = verification.decide_packed.body(p, q, x, u)
    plan = fused.decide_plan(p, q, x, u)
    emulator.launch(plan)
    np.testing.assert_array_equal(plan.result, want)

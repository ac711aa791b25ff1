"""fused_linear_1v (gpu/device/kernels.cu): a one-row linear reading W four floats a load.

Run as written on the CPU (tests/twin/cuda_emulator.py) against the body. The output layer's
copy has its rows padded to a multiple of 4 floats (fused.padded_rows) so that every float4
load is aligned; the kernel must write out the logical V columns only, and the padding must not
reach them. Where W cannot be read so (a row stride not a multiple of 4, a misaligned start, more
than one row), the plan keeps the scalar kernels.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from gpu.device import fused
from tests.twin.cuda_emulator import compiler

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C++ compiler (g++) on this machine")


def rows(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@contextlib.contextmanager
def blocks_in(emulator, order: str):
    # "order": first to last (the default); "reversed": the last block runs first
    emulator.block_order(last_first=order == "reversed")
    try:
        yield
    finally:
        emulator.block_order(last_first=False)


def ldw_of(plan) -> int:
    return int(plan.args[-1])  # every fused_linear kernel's last argument: W's row stride


@pytest.mark.parametrize("V", [50_257, 49_152])  # GPT-2's ids (padded to 50,260); aligned
@pytest.mark.parametrize("with_ln", [False, True])
def test_a_decode_steps_output_layer_reads_its_padded_rows_four_floats_a_load(emulator, V, with_ln):
    """A real vocabulary, one row: 393 (or 384) blocks of 128 columns. The logits match the
    body and the greedy token is the body's. C_in is small to keep the emulator quick; the
    vocabulary's edge block (50,257 = 392 x 128 + 81) is the case that reads the padding."""
    rng = np.random.default_rng(V + with_ln)
    C = 48
    wte, h = rows(rng, V, C, scale=0.2), rows(rng, 1, C)
    h[0, 0] += 3.0  # a clear winner somewhere, so the greedy check means something
    ln = (rows(rng, C), rows(rng, C), 1e-5) if with_ln else None
    padded = fused.padded_rows(wte.T)
    assert padded.shape == (C, -(-V // 4) * 4)
    assert not padded[:, V:].any()  # zeros in the padding
    plan = fused.linear_plan(h, wte.T, ln=ln, w_rows=padded)
    assert plan.name == "fused_linear_1v" and plan.grid == (-(-V // 128), 1)
    assert plan.result.shape == (1, V) and ldw_of(plan) == padded.shape[1]
    emulator.launch(plan)
    want = fused.fused_linear.body(h, wte.T, ln=ln)
    np.testing.assert_allclose(plan.result, want, rtol=1e-5, atol=1e-5)
    assert plan.result.argmax() == want.argmax()


@pytest.mark.parametrize("order", ["order", "reversed"])
def test_split_over_its_inputs_it_adds_the_parts_in_order_and_never_mixes_in_the_padding(
    emulator, order
):
    """N = 203 padded to 204, C_in = 200: 2 column blocks of 128, each split into 6 parts of
    the inputs, the last of each to finish applying bias, GELU and the residual once. The
    padding holds NaN here (it should hold zeros): a column that summed it would be NaN."""
    rng = np.random.default_rng(7)
    C_in, N = 200, 203
    x, w = rows(rng, 1, C_in), rows(rng, C_in, N, scale=0.1)
    padded = np.full((C_in, 204), np.nan, np.float32)
    padded[:, :N] = w
    kwargs = dict(bias=rows(rng, N), ln=(rows(rng, C_in), rows(rng, C_in), 1e-5), act="gelu",
                  resid=rows(rng, 1, N))  # fmt: skip
    plan = fused.linear_plan(x, w, w_rows=padded, **kwargs)
    assert plan.name == "fused_linear_1v" and plan.grid == (2, 6)
    with blocks_in(emulator, order):
        emulator.launch(plan)
    np.testing.assert_allclose(plan.result, fused.fused_linear.body(x, w, **kwargs), atol=2e-5)


def test_the_plan_reads_four_floats_a_load_only_where_every_load_is_aligned():
    rng = np.random.default_rng(3)
    x1, x2, w = rows(rng, 1, 16), rows(rng, 2, 16), rows(rng, 16, 40)
    assert fused.linear_plan(x1, w).name == "fused_linear_1v"
    assert fused.linear_plan(x2, w).name == "fused_linear_8"  # vector loads at one row only
    odd = rows(rng, 16, 41)  # a row of 41 floats: every other row starts off a 16-byte boundary
    assert fused.linear_plan(x1, odd).name == "fused_linear_1"
    buffer = np.zeros(16 * 40 + 1, np.float32)
    shifted = buffer[1:].reshape(16, 40)  # rows of 40 floats, the first 4 bytes off
    shifted[:] = w
    if fused.aligned16(buffer):  # (NumPy aligns its buffers; checked, not assumed)
        assert fused.linear_plan(x1, shifted).name == "fused_linear_1"
    # the columns written out are w's, the stride the copy's
    plan = fused.linear_plan(x1, odd, w_rows=fused.padded_rows(odd))
    assert plan.name == "fused_linear_1v" and plan.result.shape == (1, 41) and ldw_of(plan) == 44


def test_a_copy_that_cannot_hold_the_weight_is_refused():
    rng = np.random.default_rng(4)
    x, w = rows(rng, 1, 16), rows(rng, 16, 40)
    with pytest.raises(ValueError, match=r"cannot hold a \[16, 40\] weight"):
        fused.linear_plan(x, w, w_rows=rows(rng, 16, 36))
    with pytest.raises(ValueError, match=r"cannot hold a \[16, 40\] weight"):
        fused.linear_plan(x, w, w_rows=rows(rng, 12, 40))


@pytest.mark.parametrize("order", ["order", "reversed"])
def test_a_one_row_linear_it_cannot_read_so_runs_the_scalar_kernel_and_matches_too(emulator, order):
    # rows of 41 floats, split over 6 parts of the inputs: fused_linear_1 with ldw = N
    rng = np.random.default_rng(8)
    C_in, N = 200, 41
    x, w = rows(rng, 1, C_in), rows(rng, C_in, N, scale=0.1)
    kwargs = dict(bias=rows(rng, N), ln=(rows(rng, C_in), rows(rng, C_in), 1e-5), act="gelu")
    plan = fused.linear_plan(x, w, **kwargs)
    assert plan.name == "fused_linear_1" and ldw_of(plan) == N and plan.grid[1] > 1
    with blocks_in(emulator, order):
        emulator.launch(plan)
    np.testing.assert_allclose(plan.result, fused.fused_linear.body(x, w, **kwargs), atol=2e-5)

"""The roofline per kernel (gpu/device/roofline.py) follows the twin's launch plans and the
kernels' source, and docs/gpu.md shows what it computes now.

No device: these check the arithmetic and its inputs, not the H200's timing."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

from gpu.device import fused, roofline
from gpu.device.backend import xp
from gpu.device.fused import LINEAR_COLS, SPLIT_INPUTS, decide_plan, linear_plan, pick_plan
from gpu.device.kernels import SOURCE, Plan
from tests.twin.test_launch_budget import BUDGET, K

REGENERATE = ".venv/bin/python -m gpu.device.roofline --write-docs"
SIZES = (roofline.bundled("target"), roofline.GPT2_SMALL)


def every_table_launch():
    # (size, R, launch) of every row of the per-kernel tables
    for size in SIZES:
        for R in roofline.TABLE_ROWS:
            for launch in roofline.table_pass(size, R):
                yield size, R, launch


def test_blocks_and_threads_are_the_plans_grid_and_block():
    for _, _, launch in every_table_launch():
        work = roofline.launch_work(launch.plan)
        assert work.blocks == math.prod(launch.plan.grid), launch.label
        assert work.threads == math.prod(launch.plan.block), launch.label
        assert work.kernel == launch.plan.name


def test_a_linear_of_a_given_shape_gets_the_grid_its_plan_gives():
    # 1000 outputs: ceil(1000 / LINEAR_COLS) column blocks, times the parts the 384 inputs are
    # split into (enough to fill the SMs), whatever the roofline would derive itself
    x, w = xp.empty((3, 384), dtype=np.float32), xp.empty((384, 1000), dtype=np.float32)
    plan = linear_plan(x, w)
    work = roofline.launch_work(plan)
    columns = -(-1000 // LINEAR_COLS)
    assert plan.grid == (columns, -(-roofline.SMS // columns))
    assert work.blocks == math.prod(plan.grid) >= roofline.SMS
    assert work.read >= w.nbytes + x.nbytes and work.written >= 3 * 1000 * 4
    assert work.flops >= 2 * 3 * 384 * 1000


def test_a_fused_linear_reads_at_least_its_weight():
    for size, R, launch in every_table_launch():
        if not launch.plan.name.startswith("fused_linear"):
            continue
        x, out = launch.plan.args[0], launch.plan.result
        weight = x.shape[1] * out.shape[1] * 4  # C_in x N float32
        work = roofline.launch_work(launch.plan)
        assert work.read >= weight, f"{size.name}, R = {R}, {launch.label}"
        assert work.flops >= 2 * R * weight // 4


def test_every_linear_of_both_sizes_fills_the_sms():
    # split-K: a small linear's column blocks alone leave most of the SMs idle (the bundled
    # c_proj: 12 of 132), so its inputs are split until they do -- or until every part has
    # its fewest inputs (the bundled output layer: 9 columns x 12 parts of 32 inputs)
    for size, R, launch in every_table_launch():
        plan = launch.plan
        if plan.name.startswith("fused_linear"):
            C_in, K = int(plan.args[2]), plan.grid[1]
            filled = math.prod(plan.grid) >= roofline.SMS or K == C_in // SPLIT_INPUTS
            assert filled, f"{size.name}, R = {R}, {launch.label}: grid {plan.grid}"


def test_splitting_the_inputs_shortens_the_chain_of_a_wide_linear():
    # one thread walks ceil(C_in / K / LIN_SLICES) rows of W: the split cuts the chain and the
    # serial bound by more than half, the combine's steps included
    for C_in in (768, 1536, 3072):
        plan = linear_plan(xp.empty((1, C_in), np.float32), xp.empty((C_in, 384), np.float32))
        whole = dataclasses.replace(plan, grid=(plan.grid[0], 1))  # the same launch, unsplit
        split, unsplit = roofline.launch_work(plan), roofline.launch_work(whole)
        assert plan.grid[1] > 1 and 2 * split.far < unsplit.far, (C_in, split, unsplit)
        assert roofline.bounds(split).serial < roofline.bounds(unsplit).serial / 2


def test_a_large_vocabulary_is_picked_and_verified_by_many_blocks():
    # GPT-2's 50,257 ids: a pick row over ceil(V / 1024) blocks, the verification's finiteness
    # scan over p and q (15 rows at k = 7) over the most blocks one combine takes; the
    # one-block verification was predicted at ~1 ms, the largest launch of a round
    V, k = roofline.GPT2_SMALL.n_vocab, 7
    f32 = roofline.f32
    pick = pick_plan(f32(8, V), roofline.GREEDY, None, f32(8, V), None, None)
    assert pick.grid == (-(-V // 1024), 8)
    decide = decide_plan(f32(k + 1, V), f32(k, V), roofline.i64(k), xp.empty(k + 1))
    assert decide.grid == (256,)
    for plan in (pick, decide):
        b = roofline.bounds(roofline.launch_work(plan))
        assert b.waves == 1 and b.time() < 2 * b.launch, (plan.name, b)


def test_an_attention_over_a_long_cache_is_split_over_more_blocks_with_a_shorter_chain():
    # flash-decoding: CACHE_POSITIONS slots give each head ceil(S / 128) blocks, each walking
    # its part of the span, so the blocks grow by P and the chain (the combine's steps
    # included) and the serial bound shrink against the same launch in one block a head
    assert roofline.CACHE_POSITIONS > fused.ATTENTION_POSITIONS
    for size in SIZES:
        for R in roofline.TABLE_ROWS:
            start = roofline.CACHE_POSITIONS - R  # the span the tables read: the whole cache
            launches = roofline.block(size, R, start)
            attend = next(x.plan for x in launches if x.label == "attention")
            P = -(-roofline.CACHE_POSITIONS // fused.ATTENTION_POSITIONS)
            assert attend.grid == (size.n_head * P, R, 1), (size.name, R)
            whole = dataclasses.replace(attend, grid=(size.n_head, R, 1))  # one block a head
            split, unsplit = roofline.launch_work(attend), roofline.launch_work(whole)
            assert split.blocks == P * unsplit.blocks
            assert split.far < unsplit.far and split.near < unsplit.near, (split, unsplit)
            assert roofline.bounds(split).serial < roofline.bounds(unsplit).serial


def test_a_launch_costs_its_largest_bound_and_waves_follow_the_sms():
    for _, _, launch in every_table_launch():
        work = roofline.launch_work(launch.plan)
        b = roofline.bounds(work)
        gpu = max(getattr(b, name) for name in roofline.Bounds.NAMES[:-1]) + b.gap
        assert b.time() == max(gpu, b.launch) and b.time(with_launch=False) == gpu
        assert b.gap == roofline.EAGER_GAP_US
        # the host's launch: the call's Python side, measured, and CuPy's launch, assumed
        python = roofline.MEASURED_US[re.sub(r"^fused_linear_.*", "fused_linear", work.kernel)]
        assert b.launch == python + roofline.CUPY_LAUNCH_US
        assert b.bound() == ("launch" if b.launch > gpu else b.gpu_bound())
        resident = roofline.resident_per_sm(work.kernel, work.threads)
        assert b.waves == -(-work.blocks // (roofline.SMS * resident))
        assert b.memory == pytest.approx(
            (work.read + work.written) / roofline.HBM_BYTES_PER_S * 1e6
        )
    # GPT-2's tied output layer, its copy's rows padded to 50,260 floats: a decode step's one
    # row runs fused_linear_1v, 393 blocks of 128 columns at 40 registers, 6 an SM (1 wave);
    # otherwise 1,571 blocks of 32 columns: a pass of 8 rows fused_linear_8 at 72 registers,
    # 3 an SM (4 waves); 16 rows fused_linear at 96, 2 an SM (6 waves)
    cases = ((1, "fused_linear_1v", 6, 393), (8, "fused_linear_8", 3, 1571),
             (16, "fused_linear", 2, 1571))  # fmt: skip
    for R, kernel, per_sm, blocks in cases:
        output = roofline.tied_output(roofline.GPT2_SMALL, R, with_ln=True).plan
        assert output.name == kernel and roofline.resident_per_sm(kernel, 256) == per_sm
        assert output.grid == (blocks, 1)
        assert roofline.bounds(roofline.launch_work(output)).waves == -(-blocks // (132 * per_sm))
    # the padded copy's 3 extra columns are read (W: 768 x 50,260 floats), not written
    work = roofline.launch_work(roofline.tied_output(roofline.GPT2_SMALL, 1, with_ln=False).plan)
    assert work.read == 4 * (768 + 768 * 50_260) and work.written == 4 * 50_257


def test_the_vector_kernel_keeps_four_times_the_weight_bytes_in_flight():
    # Little's law on the kernels' occupancy (docs/gpu.md): 132 SMs x 6 blocks x 256 threads
    # x 4 loads x 16 bytes over the 303 ns far step, against 4-byte loads at 6 and 2 an SM
    rate = roofline.weight_stream_bytes_per_s
    assert rate("fused_linear_1v") == pytest.approx(132 * 6 * 256 * 4 * 16 / 303.03e-9, rel=1e-4)
    assert rate("fused_linear_1v") == pytest.approx(4 * rate("fused_linear_1"))
    assert rate("fused_linear_1v") == pytest.approx(12 * rate("fused_linear"))
    # at a loaded HBM's 1 µs the scalar one-row kernel falls below HBM's rate, the vector not
    hbm = roofline.HBM_BYTES_PER_S
    assert rate("fused_linear_1", far_ns=1000) < hbm < rate("fused_linear_1v", far_ns=1000)
    assert set(roofline.WEIGHT_LOAD_BYTES) == {k for k in roofline.WORK if "linear" in k}


def test_a_round_makes_the_launches_the_stand_in_counts():
    # the round is built from the same calls the loop makes: its count is the launch
    # budget's, counted on the stand-in by tests/twin/test_launch_budget.py
    (key,) = [name for name in BUDGET if name.startswith(f"speculative k={K}, per full round")]
    target, draft = roofline.pairs()[0]
    assert roofline.round_total(target, draft, K).launches == BUDGET[key]
    step = roofline.step_total(target)
    assert step.launches == 34  # docs/gpu.md: a decode step of the target is 34 launches
    assert step.time >= step.host and step.time >= step.gpu  # each launch: the larger of two
    # a slower far step can only make a serial-bound step slower
    times = [roofline.step_total(target, ns).time for ns in (100.0, 300.0, 900.0)]
    assert times == sorted(times) and times[0] < times[-1]


def test_every_kernel_of_the_source_has_a_roofline():
    kernels = set(re.findall(r'extern "C" __global__ void (\w+)', SOURCE.read_text()))
    assert kernels == set(roofline.WORK) == set(roofline.REGISTERS) == set(roofline.SHARED_BYTES)
    assert kernels == set(roofline.LOOPS) == set(roofline.CHAINS)


def test_the_loops_the_chain_formulas_count_are_still_in_kernels_cu():
    missing = roofline.missing_loops()
    assert not missing, (
        "gpu/device/kernels.cu no longer has these loops, which gpu/device/roofline.py counts "
        f"in its serial chains: {missing}. Rewrite that kernel's chain formula (and LOOPS, and "
        f"REGISTERS / SHARED_BYTES from `nvcc --resource-usage`), then run {REGENERATE}"
    )


def test_a_plan_the_roofline_cannot_read_is_refused_with_what_was_wrong():
    with pytest.raises(ValueError, match="no roofline for kernel 'gelu'"):
        roofline.launch_work(Plan("gelu", (1,), (32,), (), None))
    with pytest.raises(ValueError, match="the plan passes 2 arguments, the roofline reads 18"):
        roofline.launch_work(Plan("fused_linear", (1,), (256,), (1, 2), None))
    with pytest.raises(ValueError, match=r"a grid of \(6, 0, 1\) launches nothing"):
        roofline.launch_work(Plan("cached_attention", (6, 0, 1), (128,), (), None))
    empty = linear_plan(xp.empty((0, 384), np.float32), xp.empty((384, 64), np.float32))
    with pytest.raises(ValueError, match="zero rows launches nothing"):
        roofline.launch_work(empty)


def test_the_markdown_has_a_table_per_size_and_rows_and_a_row_per_kernel():
    text = roofline.markdown()
    tables = text.split("\n\n**")
    for size in SIZES:
        for R in roofline.TABLE_ROWS:
            (table,) = [t for t in tables if t.startswith(f"{size.name}** (") and f"R = {R} (" in t]
            kernels = {launch.plan.name for launch in roofline.table_pass(size, R)}
            for kernel in kernels:
                assert f"| `{kernel}` |" in table, f"{size.name}, R = {R}: no row for {kernel}"
            assert "| **the pass** |" in table
    assert {f"`{kernel}`" for kernel in roofline.WORK} <= set(re.findall(r"`\w+`", text))
    for target, _ in roofline.pairs():
        assert f"| {target.name} / " in text
    assert text.count("| | speculative round, k = ") == len(roofline.ROUND_KS) * len(
        roofline.pairs()
    )
    assert "not measured" in text


def test_docs_gpu_md_shows_what_the_roofline_computes_now():
    shown = roofline.docs_section_text(roofline.DOCS.read_text())
    assert shown == roofline.markdown().strip("\n"), (
        "docs/gpu.md's roofline tables are not what gpu/device/roofline.py computes now "
        f"(a kernel, a plan or an assumption changed). Regenerate them: {REGENERATE}"
    )

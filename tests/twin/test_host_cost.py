"""The host's side of a fused call: plans keep what follows from their shapes
(gpu/device/fused.py `by_shape`), and the roofline prices a launch's host time from what
gpu/device/host_cost.py measured."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.device import fused, host_cost, roofline
from gpu.device.backend import xp
from reference.sampling import GREEDY, SamplingParams

HOT = SamplingParams(temperature=0.8)


def arrays(*shapes, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [xp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in shapes]


def test_a_repeated_linear_keeps_its_shapes_part_and_takes_the_calls_own_arrays():
    x1, x2, w, bias, g, b = arrays((2, 64), (2, 64), (64, 96), (96,), (64,), (64,))
    first = fused.linear_plan(x1, w, bias, ln=(g, b, 1e-5), act="gelu")
    kept = len(fused.by_shape)
    second = fused.linear_plan(x2, w, bias, ln=(g, b, 1e-5), act="gelu")
    assert len(fused.by_shape) == kept  # nothing new made for the same shapes
    assert second.args[0] is x2 and second.args[8] is w and second.args[9] is bias
    assert second.result is not first.result and second.args[14] is second.result
    assert second.args[15] is first.args[15] and second.args[16] is first.args[16]  # scratch
    assert (second.name, second.grid, second.block) == (first.name, first.grid, first.block)
    # other flags, the same shapes: their own scalars, not the first call's
    plain = fused.linear_plan(x2, w, resid=x1)
    assert len(fused.by_shape) == kept + 1
    assert [int(plain.args[i]) for i in (7, 10, 11, 13)] == [0, 0, 0, 1]  # ln, bias, gelu, resid
    assert plain.args[12] is x1 and plain.args[9] is x2  # the residual; x where bias is unread
    other_eps = fused.linear_plan(x2, w, bias, ln=(g, b, 1e-3), act="gelu")
    assert np.float32(other_eps.args[6]) == np.float32(1e-3)


def test_a_repeated_pick_keeps_its_stages_per_temperature():
    (logits,) = arrays((1, 50257))
    probs, tokens = xp.zeros((1, 50257), np.float32), xp.zeros(1, np.int64)
    u = xp.asarray(np.array([0.3]))
    hot = [fused.pick_plan(logits, HOT, u, probs, tokens, None) for _ in range(2)]
    greedy = fused.pick_plan(logits, GREEDY, u, probs, tokens, None)
    assert [len(p.chain()) for p in (*hot, greedy)] == [2, 2, 1]  # scan, draw | one launch
    assert [(int(p.args[-4]), int(p.args[-3])) for p in hot[0].chain()] == [(1, 0), (0, 1)]
    assert float(hot[1].args[3]) == 1 / 0.8 and float(greedy.args[3]) == 1.0
    assert hot[1].args[4] is u and hot[1].args[7] is probs and hot[1].then.args[9] is tokens
    # a float u is a scalar of its own call
    picked = xp.zeros(2, np.int64)
    draws = [fused.pick_plan(logits, GREEDY, v, None, picked[:1], picked[1:]) for v in (0.25, 0.75)]
    assert [float(p.args[5]) for p in draws] == [0.25, 0.75]


def test_every_kernel_has_a_measured_host_cost_and_the_measure_runs():
    assert set(host_cost.calls()) == set(host_cost.MEASURED_US)
    for kernel in roofline.WORK:  # a call's Python side, then CuPy's launch
        assert roofline.kernel_host_us(kernel) > roofline.CUPY_LAUNCH_US
        assert roofline.kernel_host_us(kernel, first=False) == roofline.CUPY_LAUNCH_US
    with host_cost.python_side_only():
        for call in host_cost.calls().values():
            assert host_cost.best_us(call, n=3, batches=1) > 0


def test_a_graphed_round_spends_less_host_time_and_a_smaller_gap_per_kernel():
    target, draft = roofline.pairs()[0]
    eager = roofline.round_total(target, draft, 5)
    graphed = roofline.round_total(target, draft, 5, graphed=True)
    assert graphed.host < eager.host / 3 and graphed.launches < eager.launches
    assert graphed.gpu < eager.gpu  # the replayed kernels' gaps are a node's, not a launch's
    assert eager.time >= eager.host and graphed.time >= graphed.gpu
    # the eager host time is what each launch's call costs, plus the other operations
    step = roofline.step_total(target)
    launches = roofline.one_token_step(target, draft=False)
    calls = sum(
        a.count * roofline.plan_host_us(p, i == 0)
        for a in launches
        for i, p in enumerate(a.plan.chain())
    )
    expected = calls + roofline.STEP_OTHER_OPERATIONS * roofline.OTHER_OPERATION_US
    assert step.host == pytest.approx(expected)

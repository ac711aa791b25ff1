"""CUDA graph capture of the draft's steps and the target's pass (gpu/device/graphs.py): what
a replay computes is what the launches one by one compute, and nothing a graph cannot hold
gets in.

Three ways to check a graph without a GPU:
* on the stand-in for a device (counting_launches): the capture refuses anything that is
  not a fused kernel, and a replay gives the tokens and the caches of the steps launched
  one by one (the bundled pair, greedy);
* in the emulator (tests/twin/cuda_emulator.py, kernels.cu run as written on the CPU): the
  capture records the kernels' plans, a replay launches them again after the host wrote the
  new slots into the graph's device array -- as a device replays a graph -- so a kernel
  that kept a slot from the capture instead of reading it writes the wrong cache slots,
  and the caches differ;
* kernel by kernel: embed_rows and cached_attention, planned once with their slot on the
  device, relaunched after the slot changed, against their bodies at the new slot.
(Launches per round with graphs: tests/twin/test_launch_budget.py.)
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import gpu
import gpu.speculative
from gpu.device import counting, fused, kernels
from gpu.device.backend import ON_DEVICE, counting_launches, to_device, to_host, xp
from gpu.device.graphs import graphs_off, graphs_on, slot_from
from gpu.kv_cache import KVCache
from reference.checks import NoClock
from reference.config import GPTConfig
from reference.model import GPT, causal_placement, init_params
from reference.sampling import GREEDY
from reference.speculative import RunSetup, start_run
from tests.twin.cuda_emulator import compiler

TINY_PROMPT = np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=np.int64)  # the tiny pair's 40 ids
CODE_PROMPT = np.frombuffer(  # the bundled pair's bytes: drafts it accepts and rejects
    b"def area(self):\n    return self.w * self.h\n\n    def perimeter(self):\n", np.uint8
).astype(np.int64)


def drafted(target, draft, k: int, max_new_tokens: int, graphs: bool, prompt=TINY_PROMPT):
    # -> (tokens, the target's cache, the draft's cache, the drafter): the twin's loop
    # (gpu.speculative_generate's, kept open to read its caches), graphs on or off
    drafter = gpu.ModelDrafter(draft)
    with contextlib.nullcontext() if graphs else graphs_off():
        kw = dict(rng=np.random.default_rng(1), sampling=GREEDY)
        setup = RunSetup(k=k, max_new_tokens=max_new_tokens, clock=NoClock())
        cache, run = start_run(target, drafter, prompt, setup)
        while not run.finished:
            run.record(
                gpu.speculative.speculative_round(
                    target, cache, drafter, run.context, run.next_k(), **kw
                )
            )
    return run.result().tokens, cache, drafter.cache, drafter


def same_caches(a, b) -> bool:
    # every slot (the rejected drafts' too: a replay writes where the steps wrote) and pointers
    arrays = [to_host(x) for x in (a.k, a.v, b.k, b.v)]
    return (a.length, a.pending) == (b.length, b.pending) and all(
        np.array_equal(x, y) for x, y in zip(arrays[:2], arrays[2:], strict=True)
    )


def test_a_replayed_draft_gives_the_tokens_and_caches_of_the_steps_one_by_one(pair):
    target_ref, draft_ref = pair
    with counting_launches(strict=True) as log:
        target = gpu.GPT(target_ref.config, target_ref.params)
        draft = gpu.GPT(draft_ref.config, draft_ref.params)
        plain = drafted(target, draft, 5, 40, graphs=False, prompt=CODE_PROMPT)
        graphed = drafted(target, draft, 5, 40, graphs=True, prompt=CODE_PROMPT)
    assert log.by_name["graph launch"] >= 16  # two replays a round (the draft's, the target's)
    assert list(graphed[0]) == list(plain[0]) and len(set(plain[0])) > 5  # (not a stuck loop)
    assert same_caches(graphed[1], plain[1]) and same_caches(graphed[2], plain[2])
    assert set(graphed[3]._graphs) >= {(5, GREEDY)}
    assert (5, 1, GREEDY) in gpu.speculative._verification_graphs[graphed[1]]


@pytest.mark.parametrize(
    "operation",
    ["a matmul (cuBLAS)", "an allocation", "a host sync", "a transfer", "a host -> device copy"],
)
def test_the_stand_in_refuses_what_a_capture_cannot_hold(operation):
    with counting_launches():
        x = xp.ones((2, 2), dtype=np.float32)
        run = {
            "a matmul (cuBLAS)": lambda: x @ x,
            "an allocation": lambda: xp.empty(4, dtype=np.float32),
            "a host sync": lambda: int(x[0, 0]),
            "a transfer": lambda: to_host(x),
            "a host -> device copy": lambda: to_device(np.ones(3)),
        }[operation]
        with counting.capturing(), pytest.raises(counting.NotCapturable):
            run()


def test_a_capture_lets_fused_kernels_through_and_counts_nothing():
    with counting_launches():
        x = xp.ones((2, 8), dtype=np.float32)
        g, b = xp.ones(8, dtype=np.float32), xp.zeros(8, dtype=np.float32)
        with counting_launches() as inside, counting.capturing():
            out = fused.layer_norm_rows(x, g, b, 1e-5)  # a fused kernel: recorded
    assert out.shape == (2, 8) and inside.count == 0


def test_graphs_are_off_where_a_step_would_call_cublas():
    # kernels off, no stand-in: a step is xp calls (cuBLAS on a device), which no graph holds
    if ON_DEVICE:
        pytest.skip("NumPy mode only")
    with kernels.kernels_off("a test"):
        assert not graphs_on()
    with counting_launches():
        assert graphs_on()
        with graphs_off():
            assert not graphs_on()


# ---------------------------------------------------------------- in the emulator

needs_emulator = pytest.mark.skipif(
    compiler() is None or ON_DEVICE, reason="no C++ compiler (g++), or on a device"
)


@needs_emulator
@pytest.mark.parametrize("per_part", [128, 8])  # 8: each attention over 4 parts of 32 slots
def test_a_replayed_graph_of_kernels_writes_the_caches_the_launches_write(
    kernels_in_the_emulator, per_part, monkeypatch
):
    monkeypatch.setattr(fused, "ATTENTION_POSITIONS", per_part)

    def model(n_layer, n_embd, seed):
        cfg = GPTConfig(n_vocab=40, n_ctx=32, n_embd=n_embd, n_head=2, n_layer=n_layer)
        return GPT(cfg, init_params(cfg, np.random.default_rng(seed), std=0.3))

    target_ref, draft_ref = model(2, 32, 0), model(1, 16, 1)
    target = gpu.GPT(target_ref.config, target_ref.params)
    draft = gpu.GPT(draft_ref.config, draft_ref.params)
    assert graphs_on()
    plain = drafted(target, draft, 4, 10, graphs=False)
    graphed = drafted(target, draft, 4, 10, graphs=True)
    assert graphed[3]._graphs[4, GREEDY].steps.calls  # the captures recorded the kernels
    passes = gpu.speculative._verification_graphs[graphed[1]].values()
    assert passes and all(g.steps.calls for g in passes)
    assert list(graphed[0]) == list(plain[0])
    assert same_caches(graphed[1], plain[1]) and same_caches(graphed[2], plain[2])


@needs_emulator
@pytest.mark.parametrize("per_part", [128, 2])
def test_the_kernels_read_a_replays_slot_from_the_device(emulator, per_part, monkeypatch):
    """embed_rows and cached_attention planned once with their slot in a device array, then
    launched again with the slot moved on (the plan's arguments untouched, as a replay):
    each time the body's numbers at the slot the array holds, and the cache slots it writes.
    per_part 2: the attention over 8 parts of the 16 slots, fixed at the capture, each
    taking its share of the replay's span (4 or 10 positions: the last parts with none)."""
    monkeypatch.setattr(fused, "ATTENTION_POSITIONS", per_part)
    rng = np.random.default_rng(5)
    cfg = GPTConfig(n_vocab=16, n_ctx=32, n_embd=32, n_head=4, n_layer=2)
    twin = gpu.GPT(cfg, init_params(cfg, np.random.default_rng(0)))
    wte, wpe = rng.standard_normal((50, 16), np.float32), rng.standard_normal((30, 16), np.float32)
    tokens = np.array([7], dtype=np.int64)
    qkv = rng.standard_normal((1, 96), np.float32)
    history = rng.standard_normal((2, 2, 4, 16, 8), np.float32)  # k and v, [L, nh, N, hs]
    slot = np.zeros(1, dtype=np.int64)
    cache, body_cache = KVCache(2, 4, 8, 16), KVCache(2, 4, 8, 16)
    cache.k[:], cache.v[:] = history
    with slot_from(slot):  # the capture: planned with the first slot (3), never re-planned
        slot[0] = 3
        embed = fused.embed_plan(wte, wpe, tokens, slice(3, 4))
        at = causal_placement(3, 1)
        cache.length = 3
        attention = fused.attention_plan(twin, qkv, 1, cache, at)
    assert attention.grid[0] == 4 * (16 // per_part if per_part < 16 else 1)
    for s in (3, 9):  # replays: the host writes the slot, the same plans launch
        slot[0] = s
        emulator.launch(embed)
        emulator.launch(attention)
        np.testing.assert_array_equal(
            embed.result, fused.embed.body(wte, wpe, tokens, slice(s, s + 1))
        )
        body_cache.k[:], body_cache.v[:] = history
        body_cache.length = s
        body_cache.k[:, :, :s], body_cache.v[:, :, :s] = cache.k[:, :, :s], cache.v[:, :, :s]
        want = fused.cached_attention.body(twin, qkv, 1, body_cache, causal_placement(s, 1))
        np.testing.assert_allclose(attention.result, want, atol=1e-5)
        np.testing.assert_array_equal(cache.k[1, :, s], body_cache.k[1, :, s])  # its write


# ---------------------------------------------------------------- a capture that fails


def tiny_pair():
    def model(n_layer, n_embd, seed):
        cfg = GPTConfig(n_vocab=40, n_ctx=32, n_embd=n_embd, n_head=2, n_layer=n_layer)
        return GPT(cfg, init_params(cfg, np.random.default_rng(seed), std=0.3))

    return model(2, 32, 0), model(1, 16, 1)


def test_a_failed_capture_leaves_nothing_behind_and_the_loop_goes_on_one_by_one(monkeypatch):
    """On a device a capture can fail at its end (the driver invalidates it): the stand-in is
    made to fail the draft's first capture so, after running its steps. The round must go on
    with the steps launched one by one (the tokens and caches of graphs off), graphs off with
    the reason, and the graph holding nothing of the attempt."""
    from gpu.device import graphs

    monkeypatch.setattr(graphs.mode, "on", True)  # turned off by the failure: restored after
    monkeypatch.setattr(graphs.mode, "why_off", "")
    steps = gpu.ModelDrafter.graph_steps

    def invalidated(self, graph, k, sampling):
        steps(self, graph, k, sampling)
        raise RuntimeError("operation not permitted when stream is capturing")

    target_ref, draft_ref = tiny_pair()
    with counting_launches(strict=True):
        target = gpu.GPT(target_ref.config, target_ref.params)
        draft = gpu.GPT(draft_ref.config, draft_ref.params)
        plain = drafted(target, draft, 4, 10, graphs=False)
        monkeypatch.setattr(gpu.ModelDrafter, "graph_steps", invalidated)
        failed = drafted(target, draft, 4, 10, graphs=True)
        assert not counting.state.capturing
    assert list(failed[0]) == list(plain[0])
    assert same_caches(failed[1], plain[1]) and same_caches(failed[2], plain[2])
    assert graphs.graph_state().startswith("off (capture failed: RuntimeError: operation not")
    graph = failed[3]._graphs[4, GREEDY].steps
    assert graph.run is None and graph.graph is None and graph.calls == []
    assert not gpu.speculative._verification_graphs.get(failed[1])  # none captured after


@needs_emulator
def test_the_counters_exist_before_a_capture_and_none_is_made_inside(kernels_in_the_emulator):
    """A counter array made while a stream captures is only a recorded memset: never zeroed
    before the graph's first replay, and every multi-block kernel launched meanwhile reads
    garbage tickets. A 16-row output layer of 70,000 ids (2,188 column blocks, more than the
    first array held) first met inside a capture must find its counters made already."""
    from gpu.device.graphs import StepGraph

    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    w = rng.standard_normal((8, 70_000)).astype(np.float32)
    arrays = fused.counter_arrays
    saved = list(arrays)
    arrays.clear()  # as a fresh process: no multi-block kernel launched yet
    made_inside = []

    def run():
        before = len(arrays)
        fused.fused_linear(x, w)
        made_inside.append(len(arrays) - before)

    graph = StepGraph(1)
    try:
        assert graph.capture(run)
        (call,) = graph.calls
        done = call.plan.args[16]  # the counters (the row stride ldw follows)
        assert made_inside == [0] and done is arrays[-1]
        assert done.shape[0] >= 2188 and not done.any()
    finally:
        arrays[:] = saved

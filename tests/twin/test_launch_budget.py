"""The launch budget: device operations per token and per round, counted without a GPU.

At the bundled pair's size a GPU step is priced by the device operations Python queues
(kernel launches and copies, microseconds each), not by its FLOPs, so a change that adds
launches makes the twin slower on every device. `gpu.device.backend.counting_launches()` runs the
twin on a stand-in for a device (gpu/device/counting.py) that counts them, on any machine. This file
is a ratchet: each count must stay within RATCHET of the budget recorded below (measured
with the fused kernels of gpu/device/kernels.cu; docs/gpu.md "The launch budget" has the counts
before them), and a count that falls well below its budget fails too, asking for the budget
to follow it down, so that a gain is kept. The design's targets -- at most 60 launches per
emitted token (greedy, k = 5, batch 1) and 40 per autoregressive token -- are asserted too.
The speculative run is counted twice: every launch made one by one, and with the draft's
steps 2..k and the target's pass each captured as a CUDA graph (gpu/device/graphs.py),
whose round must be exactly the launches the graphs replace smaller, less the replays and
their arguments' copies.
"""

from __future__ import annotations

from collections import Counter
from contextlib import nullcontext

import numpy as np
import pytest

import gpu
import gpu.speculative
from gpu.device import host_cost, roofline
from gpu.device.backend import counting_launches, counting_transfers, to_device, to_host, xp
from gpu.device.graphs import graphs_off
from reference.model import gelu as reference_gelu
from reference.sampling import GREEDY

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # the device's python3 has none (scripts/gpu_preflight.py checks it)
    threadpool_limits = None

PROMPT = np.frombuffer(
    b"class Rectangle:\n    def __init__(self, w, h):\n        self.w = w\n        self.h = h\n\n"
    b"    def area(self):\n        return ",
    np.uint8,
).astype(np.int64)
K = 5

# Measured with this file's runs (bundled pair, greedy, batch 1), with the fused kernels
# (before them: 291.2, 935 and 198.0)
BUDGET = {
    "autoregressive, per token (32 tokens, prefill included)": 35.8,
    "speculative k=5, per full round (5 drafts; the draft catches up 1 or 2 tokens)": 106,
    # depends on how many drafts the target accepts (9 rounds of 5 drafts and one of 3 here),
    # so it gets a wider margin: a change of acceptance is not a change of launches
    "speculative k=5, per emitted token (48 tokens, prefill included)": 24.1,
    # the draft's steps 2..k and the target's pass each one CUDA graph (gpu/device/graphs.py),
    # a replay one launch after its arguments' copy (the round that captures is left out)
    "speculative k=5 with graph capture, per full round": 23,
    "speculative k=5 with graph capture, per emitted token (48 tokens, prefill included)": 7.6,
}
TARGET = {"autoregressive": 40, "speculative k=5": 60}  # launches per token, at most
RATCHET = 0.01  # a count may exceed its budget by 1 %
LOOSE = 0.05  # ... the per-emitted-token count, which moves with acceptance, by 5 %
FOLLOW = 0.90  # below 90 % of its budget, the budget must be lowered to the new count


@pytest.fixture(scope="module", autouse=True)
def one_blas_thread():
    """One BLAS thread: what is tested here does not depend on it, and several threads
    fighting over a busy machine's cores make these small matmuls many times slower."""
    with threadpool_limits(limits=1, user_api="blas") if threadpool_limits else nullcontext():
        yield


def check_budget(name: str, count: float, margin: float = RATCHET) -> None:
    budget = BUDGET[name]
    assert count <= budget * (1 + margin), (
        f"{name}: {count:.1f} launches, over the budget of {budget} (+{margin:.0%}). A change "
        "added device operations to every step; remove them, or fuse them (docs/gpu.md)."
    )
    assert count >= budget * FOLLOW, (
        f"{name}: {count:.1f} launches, far below the budget of {budget}: a gain. Lower "
        f"BUDGET[{name!r}] in {__file__} to {count:.1f} so that it is kept."
    )


ROUND_OPERATIONS: list = []  # (drafted, by_name) of each round launched one by one


def speculative_counted(target, draft, graphs: bool):
    # -> (the run, its log, [(launches, drafted, fused linears, graph launches)] per round),
    # the draft's steps 2..k one captured graph (gpu/device/graphs.py) or launched one by one
    real_round, rounds = gpu.speculative.speculative_round, []

    def counted_round(*args, **kwargs):
        with counting_launches() as log:
            rnd = real_round(*args, **kwargs)
        by_name = log.by_name
        drafted = int(rnd.draft.tokens.shape[0])
        rounds.append((log.count, drafted, by_name["fused fused_linear"], by_name["graph launch"]))
        if not graphs:
            ROUND_OPERATIONS.append((drafted, Counter(by_name)))
        return rnd

    kw = dict(rng=np.random.default_rng(0), sampling=GREEDY)
    with pytest.MonkeyPatch.context() as patch, nullcontext() if graphs else graphs_off():
        patch.setattr(gpu.speculative, "speculative_round", counted_round)
        with counting_launches() as log:
            spec = gpu.speculative_generate(
                target, gpu.ModelDrafter(draft), PROMPT, k=K, max_new_tokens=48, **kw
            )
    return spec, log, rounds


@pytest.fixture(scope="module")
def runs(pair):
    """The twin on the stand-in: an autoregressive run and a speculative one, every device
    operation counted, the speculative round by round (each draft step launched one by
    one), and the same speculative run with the draft's steps captured as a graph."""
    target_ref, draft_ref = pair
    with counting_launches(strict=True):  # strict: no hidden sync may hide in the counts
        target = gpu.GPT(target_ref.config, target_ref.params)
        draft = gpu.GPT(draft_ref.config, draft_ref.params)
        kw = dict(rng=np.random.default_rng(0), sampling=GREEDY)
        with counting_launches() as ar_log:
            ar = gpu.generate(target, PROMPT, max_new_tokens=32, **kw)
        spec, spec_log, rounds = speculative_counted(target, draft, graphs=False)
        graphed = speculative_counted(target, draft, graphs=True)
    return ar, ar_log, spec, spec_log, rounds, graphed


def test_autoregressive_launches_per_token_stay_within_budget(runs, pair):
    ar, log, *_ = runs
    assert len(ar) == 32
    per_token = log.count / len(ar)
    check_budget("autoregressive, per token (32 tokens, prefill included)", per_token)
    assert per_token <= TARGET["autoregressive"]
    # the count sees the model's work: every decode step runs the four linear layers of each
    # block and the output layer, each one fused launch (the prompt's pass: cuBLAS matmuls)
    n_layer = pair[0].config.n_layer
    assert log.by_name["fused fused_linear"] == (4 * n_layer + 1) * (len(ar) - 1)
    assert log.by_name["matmul"] >= 4 * n_layer


def test_speculative_rounds_stay_within_budget(runs, pair):
    *_, spec, log, rounds, _ = runs
    assert not any(graph for *_, graph in rounds)  # every step launched one by one
    full = [count for count, drafted, *_ in rounds if drafted == K]
    assert len(full) >= 5 and len(rounds) == spec.stats.rounds
    name = "speculative k=5, per full round (5 drafts; the draft catches up 1 or 2 tokens)"
    check_budget(name, max(full))
    # a round: K draft forwards of the draft model and one target pass, 4 linears per block
    # and the output layer, each one fused launch
    target_layers, draft_layers = pair[0].config.n_layer, pair[1].config.n_layer
    assert all(
        m == K * (4 * draft_layers + 1) + 4 * target_layers + 1 for _, d, m, _ in rounds if d == K
    )
    name = "speculative k=5, per emitted token (48 tokens, prefill included)"
    per_token = log.count / len(spec.tokens)
    check_budget(name, per_token, LOOSE)
    assert per_token <= TARGET["speculative k=5"]


def test_graph_capture_replaces_the_draft_steps_and_the_target_pass(runs, pair):
    """With the draft's steps 2..k and the target's verification pass each captured as a
    graph, a round launches the draft's first step, and for the rest two graph launches and
    their arguments: the same rounds and tokens, and, round by round, exactly
    * the draft's k - 1 steps (each: the embedding, 5 a block, the output layer, the draw)
      replaced by a graph launch and the copy of their slots;
    * the target's pass (the catch-up tokens' copy, joining them to the drafts, the
      embedding, 5 a block, LN_f, the output layer, the draw) replaced by a graph launch,
      the copy of its slot and catch-up tokens, and the drafts' write into its array."""
    *_, spec, _, eager_rounds, (graphed, log, rounds) = runs
    assert list(graphed.tokens) == list(spec.tokens) and len(rounds) == len(eager_rounds)
    target_layers, draft_layers = pair[0].config.n_layer, pair[1].config.n_layer
    draft_steps = (K - 1) * (5 * draft_layers + 3)
    target_pass = 5 * target_layers + 6
    steady = list(zip(rounds, eager_rounds, strict=True))[1:]  # the first one captures
    full = [(ours, theirs) for ours, theirs in steady if ours[1] == K]
    assert len(full) >= 5
    for (count, _, linears, graphs), (eager, *_) in full:
        assert graphs == 2
        assert count == eager - draft_steps + 2 - target_pass + 3
        assert linears == 4 * draft_layers + 1  # the draft's first step's
    worst = max(count for (count, *_), _ in full)
    check_budget("speculative k=5 with graph capture, per full round", worst)
    name = "speculative k=5 with graph capture, per emitted token (48 tokens, prefill included)"
    check_budget(name, log.count / len(graphed.tokens), LOOSE)


def test_the_stand_in_counts_launches_as_a_device_would_run_them():
    """The counting rules of gpu/device/counting.py on small cases: operations launch, views are
    free, a fused kernel is one launch, and the one sanctioned transfer is counted twice
    over: as a launch (the copy) and as a transfer (the host sync)."""
    with counting_launches() as log:
        a = to_device(np.arange(12, dtype=np.float32))  # 1: host -> device copy
        b = a.reshape(3, 4)[:, 1:].swapaxes(0, 1)  # views: 0
        c = (b * 2.0 + 1.0).sum(axis=0)  # multiply, add, sum: 3
        d = c[to_device(np.array([0, 2]))]  # copy of the index, then a gather: 2
        e = xp.zeros(4, dtype=np.float32)  # an array made on the device: 1
        e[:2] = d  # a write: 1
        gelu = gpu.model.gelu(e)  # a fused kernel: 1, whatever it computes inside
        with counting_transfers() as transfers:
            host = to_host(gelu)  # the copy back: 1
    assert log.count == 10, log.by_name
    assert log.by_name["fused gelu_plain"] == 1 and transfers.count == 1
    plain = (np.arange(12.0).reshape(3, 4)[:, 1:].T * 2.0 + 1.0).sum(axis=0)[[0, 2]]
    np.testing.assert_allclose(host, reference_gelu(np.r_[plain, 0.0, 0.0]), rtol=1e-6)


def test_a_rounds_host_time_priced_from_the_stand_ins_count_is_the_roofline_s(runs):
    """The host-cost model of docs/gpu.md: each device operation the stand-in counts in a full
    round, priced by gpu/device/host_cost.py (a fused call its measured Python side and CuPy's
    launch, anything else an other operation), is the roofline's eager round's host time."""
    assert runs and ROUND_OPERATIONS
    target, draft = roofline.pairs()[0]
    predicted = roofline.round_total(target, draft, K).host
    full = [by_name for drafted, by_name in ROUND_OPERATIONS if drafted == K]
    assert full
    for by_name in full:
        assert host_cost.counted_host_us(by_name) == pytest.approx(predicted), by_name

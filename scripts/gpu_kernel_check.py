"""The device script's first parts: the twin's riskiest device code, checked before the rest.

    python scripts/gpu_kernel_check.py kernels [--dry-run]  # each multi-block kernel, many times
    python scripts/gpu_kernel_check.py one CASE [--dry-run] # one call (compute-sanitizer runs it)
    python scripts/gpu_kernel_check.py replay [--dry-run]   # graphs at T = 0.8 against graphs off
    python scripts/gpu_kernel_check.py timings [--dry-run]  # measured, beside the prediction

scripts/gpu_check.sh runs them in that order (the sanitizer's two checks between `kernels` and
`replay`), before its preflight. What each checks, and why first:

* kernels: every kernel whose blocks meet in a last-block combine (kernels.cu
  `last_block_done`), at a shape that spreads it -- a split-K linear, pick_rows over 50 blocks
  at 50,257 ids (greedy and T = 0.8), decide_packed over 256 blocks, an attention over 8
  parts a head -- called REPEATS times one by one and REPEATS times as a replayed graph, each
  result against its body, and the counters all 0 after each batch: a ticket left behind, a
  stale partial read or a missing fence shows as a wrong row some call, not every call.
* replay: the bundled pair at T = 0.8 for 50 rounds with graphs on and off: the same q and p
  rows and the same tokens (a sampled round reads its uniforms from device arrays the graph
  holds; greedy hides a uniform read from the wrong slot).
* timings: host µs per eager fused call, pick_rows at T = 0.8, the output layer's GB/s and a
  round's wall time with graphs, each beside what gpu/device/roofline.py predicts from code.

Before a part runs it prints its budget from counted work: `BUDGET <part>: N launches,
predicted S s`, N counted on the stand-in for a device (gpu.device.backend.counting_launches:
the launches one iteration makes, times the iterations) and S = STARTUP_S + N x
HOST_US_PER_LAUNCH + the roofline's device time of the kernels. The dry run (NumPy mode, a
few iterations) prints the same budget, for the device's sizes: tests/twin/
test_device_script.py holds it to the part's limit in gpu_check.sh, so no wall second of a
busy CI machine decides it. A part ends with `<PART> OK` or `<PART> FAILED: why` (exit 1).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import gpu  # noqa: E402  (the checkout itself, wherever this runs from)
import gpu.speculative  # noqa: E402
from gpu import sampling, verification  # noqa: E402
from gpu.device import fused, graphs, kernels, roofline  # noqa: E402
from gpu.device.backend import (  # noqa: E402
    ARRAY_MODULE,
    ON_DEVICE,
    counting_launches,
    to_device,
    to_host,
    xp,
)
from gpu.device.graphs import StepGraph, graphs_off  # noqa: E402
from gpu.kv_cache import KVCache  # noqa: E402
from reference.checks import NoClock  # noqa: E402
from reference.config import GPTConfig  # noqa: E402
from reference.model import causal_placement, init_params  # noqa: E402
from reference.sampling import GREEDY, SamplingParams  # noqa: E402
from reference.speculative import RunSetup, start_run  # noqa: E402
from specdec.bundled import load_bundled_pair  # noqa: E402

REPEATS = 1000  # calls of each case one by one, and replays of its graph (the dry run: 3)
# a budget's price of one launch from Python: above the 7.4-14.9 us a fused call costs the
# host by gpu/device/host_cost.py (its Python measured, CuPy's launch assumed)
HOST_US_PER_LAUNCH = 20.0
STARTUP_S = 20.0  # a budget's price of a part's start: CuPy's import, NVRTC, loading the pair
ROUNDS = 50  # the replay check's rounds
HOT = SamplingParams(temperature=0.8)
GPT2_V = 50_257


@dataclass
class Case:
    """One multi-block kernel at a shape that spreads it: call() and body() -> its outputs."""

    key: str  # `one KEY` runs one call of it
    name: str
    call: Callable[[], tuple]
    body: Callable[[], tuple]
    tolerance: float  # 0: exact (ids, packed decisions)


def cases() -> list[Case]:
    # built with the array module in force (the device's, or the stand-in's while counting)
    rng = np.random.default_rng(0)

    def dev(*shape, scale=1.0):
        return to_device((rng.standard_normal(shape) * scale).astype(np.float32))

    made = []
    # a linear of one row, 768 x 768: rows a multiple of 4 floats, so the vector kernel
    # (fused_linear_1v: float4 loads, 128 columns a block, its 768 inputs split over K > 1
    # parts); and 768 x 766, whose rows are not, for the scalar one-row kernel's split-K
    x, w, b, res = dev(1, 768), dev(768, 768, scale=0.05), dev(768), dev(1, 768)
    w_odd, b_odd, res_odd = dev(768, 766, scale=0.05), dev(766), dev(1, 766)
    linear = fused.fused_linear
    made.append(
        Case(
            "linear",
            "fused_linear_1v, 1 x 768 x 768 (K > 1)",
            lambda: (linear(x, w, b, resid=res),),
            lambda: (linear.body(x, w, b, resid=res),),
            1e-4,
        )
    )
    made.append(
        Case(
            "linear",
            "fused_linear_1, 1 x 768 x 766 (rows not a multiple of 4; K > 1)",
            lambda: (linear(x, w_odd, b_odd, resid=res_odd),),
            lambda: (linear.body(x, w_odd, b_odd, resid=res_odd),),
            1e-4,
        )
    )
    # pick_rows: a verification pass's 8 rows of GPT-2's ids, 50 blocks a row
    logits, u = dev(8, GPT2_V, scale=3.0), to_device(rng.random(8))
    for params in (GREEDY, HOT):
        out = [(xp.zeros((8, GPT2_V), np.float32), xp.zeros(8, np.int64)) for _ in range(2)]

        def pick(p=params, o=out[0]):
            sampling.pick(logits, p, u, probs=o[0], tokens=o[1])
            return o

        def pick_body(p=params, o=out[1]):
            sampling.pick.body(logits, p, u, probs=o[0], tokens=o[1])
            return o

        label = "greedy" if params.greedy else "T=0.8"
        made.append(Case(f"pick-{label}", f"pick_rows G=50 {label}", pick, pick_body, 1e-6))
    # decide_packed: k = 7 drafts of GPT-2's ids, 256 blocks
    p = to_device(rng.dirichlet(np.ones(GPT2_V), 8).astype(np.float32))
    q = to_device(rng.dirichlet(np.ones(GPT2_V), 7).astype(np.float32))
    drafts, uniforms = to_device(rng.integers(0, GPT2_V, 7)), to_device(rng.random(8))
    decide, args = verification.decide_packed, (p, q, drafts, uniforms)
    made.append(
        Case(
            "decide",
            "decide_packed G=256",
            lambda: (decide(*args),),
            lambda: (decide.body(*args),),
            0,
        )
    )
    # cached_attention: 8 rows after 500 positions of a 1,024-slot cache, 8 parts a head
    cfg = GPTConfig(n_vocab=64, n_ctx=1024, n_embd=768, n_head=12, n_layer=1)
    model = gpu.GPT(cfg, init_params(cfg, np.random.default_rng(0)))
    caches = [KVCache(1, 12, 64, 1024) for _ in range(2)]
    history = dev(1, 12, 1024, 64)
    for cache in caches:
        cache.k[...], cache.v[...], cache.length = history, history, 500
    qkv, at = dev(8, 3 * 768), causal_placement(500, 8)
    attend = fused.cached_attention
    made.append(
        Case(
            "attention",
            "cached_attention P=8",
            lambda: (attend(model, qkv, 0, caches[0], at),),
            lambda: (attend.body(model, qkv, 0, caches[1], at),),
            1e-5,
        )
    )
    return made


def case_plans() -> list:
    # the launch plans of cases() at the device's sizes (shapes only: the roofline reads no
    # value), for the budget's device time
    f32, i64 = roofline.f32, roofline.i64
    plans = [fused.linear_plan(f32(1, 768), f32(768, 768), f32(768), resid=f32(1, 768))]
    for params in (GREEDY, HOT):
        u = np.zeros(8)
        plans.append(fused.pick_plan(f32(8, GPT2_V), params, u, f32(8, GPT2_V), i64(8), None))
    plans.append(fused.decide_plan(f32(8, GPT2_V), f32(7, GPT2_V), i64(7), np.zeros(8)))
    model = SimpleNamespace(config=SimpleNamespace(n_head=12))  # the plan reads n_head alone
    cache = KVCache(1, 12, 64, 1024)
    cache.length = 500
    at = causal_placement(500, 8)
    plans.append(fused.attention_plan(model, f32(8, 3 * 768), 0, cache, at))
    return plans


def device_us(plans) -> float:
    # the roofline's device time of one call of each plan (its chained launches too), summed
    return sum(
        roofline.bounds(roofline.launch_work(each)).time(with_launch=False)
        for plan in plans
        for each in plan.chain()
    )


# ---------------------------------------------------------------- one iteration of a part


def mismatches(outputs, wanted, tolerance: float):
    # -> a device scalar: how many entries of the outputs are off their body's by more
    total = 0
    for got, want in zip(outputs, wanted, strict=True):
        off = xp.abs(got.astype(np.float64) - want.astype(np.float64)) > tolerance
        total = total + off.sum()
    return total


def captured(case: Case):
    # case.call() captured as a graph -> (the graph, a holder whose [0] is its outputs: the
    # arrays every replay writes)
    holder = [None]
    graph = StepGraph(1)
    if not graph.capture(lambda: holder.__setitem__(0, case.call())):
        raise PartFailed(f"{case.name}: the capture failed ({graphs.graph_state()})")
    return graph, holder


def eager_once(case: Case, wanted, bad):
    return bad + mismatches(case.call(), wanted, case.tolerance)


def replay_once(case: Case, graph, holder, wanted, bad):
    graph.replay([0])
    return bad + mismatches(holder[0], wanted, case.tolerance)


def counters_clear() -> bool:
    # every counter array all 0 (between launches, as kernels.cu's last blocks leave them)
    return all(not to_host(a).any() for a in kernels.Counters.arrays)


# ---------------------------------------------------------------- the parts


class PartFailed(Exception):
    pass


def budget(part: str, launches: int, device_s: float) -> float:
    # prints the part's budget from counted work; -> its predicted seconds
    seconds = STARTUP_S + launches * HOST_US_PER_LAUNCH * 1e-6 + device_s
    print(
        f"BUDGET {part}: {launches} launches, predicted {seconds:.1f} s "
        f"({STARTUP_S:g} s to start, {HOST_US_PER_LAUNCH:g} us a launch, {device_s:.2f} s of "
        "device time)",
        flush=True,
    )
    return seconds


def kernels_budget() -> None:
    # one iteration of each case, eager and replayed, counted on the stand-in; x REPEATS
    device_s = 2 * REPEATS * device_us(case_plans()) * 1e-6
    per_iteration = 0
    with counting_launches():
        for case in cases():
            wanted = case.body()
            graph, holder = captured(case)
            with counting_launches() as one:  # (the log is complete when its block ends)
                eager_once(case, wanted, 0)
                replay_once(case, graph, holder, wanted, 0)
            per_iteration += one.count
    budget("kernels", REPEATS * per_iteration, device_s)


def part_kernels(repeats: int) -> None:
    kernels_budget()
    # the dry run: on the stand-in, where graphs are captured (NumPy mode has none)
    with nullcontext() if repeats == REPEATS else counting_launches():
        for case in cases():
            check_case(case, repeats)


def check_case(case: Case, repeats: int) -> None:
    # case's kernel `repeats` times one by one and as replays of its graph, against its body,
    # and the counters 0 after each batch
    wanted = case.body()
    graph, holder = captured(case)
    start = time.perf_counter()
    for how in ("eager", "replayed"):
        bad = 0
        for _ in range(repeats):
            if how == "eager":
                bad = eager_once(case, wanted, bad)
            else:
                bad = replay_once(case, graph, holder, wanted, bad)
        wrong = int(to_host(xp.asarray(bad)))
        if wrong:
            raise PartFailed(f"{case.name} {how}: {wrong} entries off the body in {repeats} calls")
        if not counters_clear():
            raise PartFailed(f"{case.name} {how}: a counter is not 0 after {repeats} calls")
    took = time.perf_counter() - start
    print(
        f"ok    {case.name}: {repeats} calls and {repeats} replays equal the body, "
        f"counters 0 ({took:.1f} s)",
        flush=True,
    )


def part_one(name: str) -> None:
    # one call of one case (of each, "all"), for compute-sanitizer's racecheck and synccheck
    for case in cases():
        if name in ("all", case.key):
            case.call()
            if ON_DEVICE:
                ARRAY_MODULE.cuda.Device().synchronize()
            print(f"ok    one call of {case.name}", flush=True)


CASE_KEYS = ("linear", "pick-greedy", "pick-T=0.8", "decide", "attention")


def sampled_rounds(rounds: int, graphs_wanted: bool):
    # the bundled pair at T = 0.8, k = 5, `rounds` rounds -> (tokens, [(p, q) of each round])
    target_ref, draft_ref = load_bundled_pair()
    target = gpu.GPT(target_ref.config, target_ref.params)
    drafter = gpu.ModelDrafter(gpu.GPT(draft_ref.config, draft_ref.params))
    prompt = np.frombuffer(b"def area(self):\n    return ", np.uint8).astype(np.int64)
    seen, settle, rng = [], gpu.speculative.settle, np.random.default_rng(0)

    def settle_and_keep(p, draft, rng, verify_fn):  # the round's rows, brought back
        seen.append((to_host(p), to_host(draft.q)))
        return settle(p, draft, rng, verify_fn)

    gpu.speculative.settle = settle_and_keep
    try:
        with nullcontext() if graphs_wanted else graphs_off():
            setup = RunSetup(k=5, max_new_tokens=8 * rounds, clock=NoClock())
            cache, run = start_run(target, drafter, prompt, setup)
            while not run.finished and len(seen) < rounds:
                rnd = gpu.speculative.speculative_round(
                    target, cache, drafter, run.context, run.next_k(), rng=rng, sampling=HOT
                )
                run.record(rnd)
    finally:
        gpu.speculative.settle = settle
    return list(run.result().tokens), seen


def part_replay(rounds: int) -> None:
    with counting_launches() as log:  # the budget: two rounds each way, on the stand-in
        sampled_rounds(2, True)
        sampled_rounds(2, False)
    target, draft = roofline.bundled("target"), roofline.bundled("draft")
    device_s = 2 * ROUNDS * roofline.round_total(target, draft, 5).gpu * 1e-6
    budget("replay", log.count * ROUNDS // 2, device_s)
    if rounds < ROUNDS:  # the dry run: on the stand-in, where graphs are captured
        with counting_launches():
            compare_rounds(rounds)
    else:
        compare_rounds(rounds)


def compare_rounds(rounds: int) -> None:
    plain, plain_rows = sampled_rounds(rounds, False)
    replayed, replayed_rows = sampled_rounds(rounds, True)
    if len(plain_rows) != len(replayed_rows) or plain != replayed:
        raise PartFailed(f"graphs on drew other tokens than graphs off in {rounds} rounds")
    for i, ((p, q), (p2, q2)) in enumerate(zip(plain_rows, replayed_rows, strict=True)):
        if not (np.array_equal(p, p2) and np.array_equal(q, q2)):
            worst = max(np.abs(p - p2).max(), np.abs(q - q2).max())
            raise PartFailed(f"round {i}: the q or p rows differ with graphs on (by {worst:.3g})")
    print(
        f"ok    {len(plain_rows)} rounds at T = 0.8: graphs on and off give the same q and p "
        f"rows and the same {len(plain)} tokens",
        flush=True,
    )


def per_call_us(fn: Callable[[], object], n: int) -> tuple[float, float]:
    # fn() n times -> (host µs a call, before waiting for the device; wall µs a call, after)
    sync = ARRAY_MODULE.cuda.Device().synchronize if ON_DEVICE else (lambda: None)
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    queued = time.perf_counter()
    sync()
    done = time.perf_counter()
    return (queued - start) / n * 1e6, (done - start) / n * 1e6


def timing_predictions() -> dict[str, float]:
    # what the roofline predicts for the timed calls (their plans at the device's sizes)
    f32, i64 = roofline.f32, roofline.i64
    pick = fused.pick_plan(f32(1, GPT2_V), HOT, np.zeros(1), f32(1, GPT2_V), i64(1), None)
    padded = f32(768, 4 * -(-GPT2_V // 4))  # the model's output rows: padded to 4 floats
    output = fused.linear_plan(
        f32(1, 768), f32(768, GPT2_V), ln=(f32(768), f32(768), 1e-5), w_rows=padded
    )
    return {
        "host": roofline.kernel_host_us("layer_norm_rows"),
        "pick": device_us([pick]),
        "output": 768 * GPT2_V * 4 / device_us([output]) / 1e3,
    }


def timing_calls() -> list[tuple[str, str, Callable[[], object]]]:
    # (key, what, one call), built with the array module in force
    rng = np.random.default_rng(1)

    def dev(*shape):
        return to_device(rng.standard_normal(shape, dtype=np.float32))

    x, g, b = dev(1, 768), dev(768), dev(768)
    logits, probs, token = dev(1, GPT2_V), xp.zeros((1, GPT2_V), np.float32), xp.zeros(1, np.int64)
    u = to_device(rng.random(1))
    w_rows = fused.padded_rows(dev(768, GPT2_V))  # as gpu/model.py's wte_rows: padded
    return [
        ("host", "host us per eager fused call (layer_norm_rows, 1 x 768; the Python side "
         "measured on the CI machine + CuPy's launch, assumed)",
         lambda: fused.layer_norm_rows(x, g, b, 1e-5)),
        ("pick", "pick_rows at T = 0.8, 1 x 50,257, p and the token (wall us a call; the "
         "roofline's device us)", lambda: sampling.pick(logits, HOT, u, probs=probs, tokens=token)),
        ("output", "the output layer, 768 x 50,257 (GB/s; the roofline's)",
         lambda: fused.fused_linear(x, w_rows[:, :GPT2_V], ln=(g, b, 1e-5), w_rows=w_rows)),
    ]  # fmt: skip


def part_timings(n: int) -> None:
    predicted = timing_predictions()
    with counting_launches() as log:  # the budget: one call of each, on the stand-in
        for _, _, call in timing_calls():
            call()
    target, draft = roofline.bundled("target"), roofline.bundled("draft")
    a_round = roofline.round_total(target, draft, 5, sampling=HOT, graphed=True)
    device_s = REPEATS * (predicted["pick"] + 768 * GPT2_V * 4 / predicted["output"] / 1e3) * 1e-6
    budget(
        "timings", log.count * REPEATS + 20 * a_round.launches, device_s + 20 * a_round.gpu * 1e-6
    )
    where = "" if ON_DEVICE else "  (NumPy mode: not a device figure)"
    for key, what, call in timing_calls():
        host_us, wall_us = per_call_us(call, n)
        measured = {"host": host_us, "pick": wall_us, "output": 768 * GPT2_V * 4 / wall_us / 1e3}
        print(
            f"time  {what}: {measured[key]:.1f}, predicted {predicted[key]:.1f}{where}", flush=True
        )
    # a round's wall time: 22 rounds less 2 (the pair's loading, the prompt's pass cancel)
    seconds = []
    for rounds in (2, 2 + min(n, 20)):
        start = time.perf_counter()
        done = len(sampled_rounds(rounds, True)[1])
        seconds.append((time.perf_counter() - start, done))
    per_round = (seconds[1][0] - seconds[0][0]) / max(1, seconds[1][1] - seconds[0][1]) * 1e6
    print(
        f"time  a round of the bundled pair, T = 0.8, k = 5, graphs on (us, the host's checks "
        f"included): {per_round:.0f}, predicted {a_round.time:.0f} (the roofline's graphed "
        f"round: each eager launch its measured Python side + {roofline.CUPY_LAUNCH_US:g} us "
        f"of CuPy's, assumed){where}",
        flush=True,
    )


PARTS = ("kernels", "one", "replay", "timings")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_kernel_check.py", description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=PARTS)
    parser.add_argument("case", nargs="?", choices=(*CASE_KEYS, "all"), help="`one`'s case")
    parser.add_argument("--dry-run", action="store_true", help="a few iterations (NumPy mode)")
    args = parser.parse_args(argv)
    print(
        f"{args.part}: kernels {kernels.kernel_state()}, graphs {graphs.graph_state()}", flush=True
    )
    try:
        if args.part == "kernels":
            part_kernels(3 if args.dry_run else REPEATS)
        elif args.part == "one":
            part_one(args.case or "all")
        elif args.part == "replay":
            part_replay(3 if args.dry_run else ROUNDS)
        else:
            part_timings(5 if args.dry_run else REPEATS)
    except PartFailed as error:
        print(f"{args.part.upper()} FAILED: {error}", flush=True)
        return 1
    print(f"{args.part.upper()} OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

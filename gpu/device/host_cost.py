"""What a fused call costs the host, measured: the Python side of each kernel's call, timed on
this machine with the kernels on and a launch that does nothing.

    .venv/bin/python -m gpu.device.host_cost      # each kernel's call: µs, Python side

No reference counterpart: the reference has no device. On a GPU an eager fused call is host
time first -- `FusedOperation.__call__` (gpu/device/kernels.py): the fit check, the plan (or
its template, `PlanCache`), the kernel fetched -- then CuPy's own launch (`RawKernel.__call__`:
the arguments packed, `cuLaunchKernel`). The first part is the twin's Python and runs the
same on any host, so it is measured here: with NumPy arrays, the kernels turned on and a
module whose kernels return at once (the tests' emulator's way in, with nothing to emulate),
the best of several batches of calls, at the shapes the roofline's passes launch (GPT-2
small's). CuPy's part needs CuPy and a device, so it is an assumption (`CUPY_LAUNCH_US`
below), as is the device's own gap between launches (roofline.py). How many calls a round
makes of each kernel is what the stand-in (gpu/device/counting.py) counts, by name:
`counted_host_us` prices a count, and a round's comes out at what the roofline gives its
launches (tests/twin/test_launch_budget.py).

The figures `roofline.py` uses are `MEASURED_US` below, written from this module's output
with the date and the machine: timing is not a test (a shared machine's µs move by 2x), so
rerun it after changing a plan, and update the table by hand.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np

from gpu import sampling, verification
from gpu.device import fused, kernels
from gpu.device.kernels import KernelMode
from gpu.kv_cache import KVCache
from reference.model import causal_placement
from reference.sampling import SamplingParams

HOT = SamplingParams(temperature=0.8)

# µs of host time a fused call, Python side (before CuPy's launch), by kernel: measured by
# `python -m gpu.device.host_cost` on the project's CI machine (NumPy 2, two x86 cores shared
# with a CI run, 2026-12-07), the best batch of 25 runs, with the plans keeping what follows
# from their shapes (fused.py `by_shape`). Building the plan alone went from linear_plan 6.3
# to 3.4 µs, pick_plan 6.8 to 4.2, attention_plan 8.7 to 6.6 (docs/gpu.md, "Host cost per
# fused call").
MEASURED_US = {
    "embed_rows": 4.9,
    "layer_norm_rows": 4.4,
    "fused_linear": 5.8,
    "cached_attention": 11.9,
    "pick_rows": 7.2,
    "decide_packed": 9.2,
}


# What follows a call's Python side on a device is CuPy's, and assumed (no CuPy, no device
# here): `RawKernel.__call__` -- ~20 arguments packed, `cuLaunchKernel` -- 3 µs; an operation
# of a round that is not one of our kernels (a CuPy copy or join, the transfer, a graph's
# launch) keeps the 5 µs every launch was once assumed to cost.
CUPY_LAUNCH_US = 3.0
OTHER_OPERATION_US = 5.0


def counted_host_us(by_name) -> float:
    # the host's µs for the device operations the stand-in counted (a LaunchLog's by_name):
    # each fused call its measured Python side and CuPy's launch, anything else an other
    # operation
    total = 0.0
    for name, n in by_name.items():
        kernel = name.removeprefix("fused ")
        if kernel != name and kernel in MEASURED_US:
            total += n * (MEASURED_US[kernel] + CUPY_LAUNCH_US)
        else:
            total += n * OTHER_OPERATION_US
    return total


class Idle:
    """A compiled module whose kernels do nothing: what is left of a call is its Python."""

    def get_function(self, name: str) -> Callable:
        return lambda grid, block, args: None


IDLE = Idle()


@contextmanager
def python_side_only():
    """The kernels on, launching nothing (as the tests' emulator does, with no emulator)."""
    before = kernels.mode, kernels.compiled_module
    kernels.mode, kernels.compiled_module = KernelMode(True, ""), lambda: IDLE
    try:
        yield
    finally:
        kernels.mode, kernels.compiled_module = before


def calls(C: int = 768, n_head: int = 12, V: int = 50257, S: int = 256) -> dict:
    # kernel -> one call of it as the roofline's passes make it (one token: R = 1)
    rng = np.random.default_rng(0)

    def f(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    x, g, b = f(1, C), f(C), f(C)
    w, bias, wte, wpe = f(C, 3 * C), f(3 * C), f(V, C), f(S, C)
    logits, probs, u = f(1, V), np.zeros((1, V), np.float32), rng.random(1)
    token = np.zeros(1, np.int64)
    cache = KVCache(1, n_head, C // n_head, S)
    cache.length = S - 1
    model = SimpleNamespace(config=SimpleNamespace(n_head=n_head))
    qkv, at = f(1, 3 * C), causal_placement(S - 1, 1)
    k = 5
    p, q = np.full((k + 1, V), 1 / V, np.float32), np.full((k, V), 1 / V, np.float32)
    drafts, uniforms = np.zeros(k, np.int64), rng.random(k + 1)
    tokens = np.zeros(1, np.int64)
    return {
        "embed_rows": lambda: fused.embed(wte, wpe, tokens, slice(S - 1, S)),
        "layer_norm_rows": lambda: fused.layer_norm_rows(x, g, b, 1e-5),
        "fused_linear": lambda: fused.fused_linear(x, w, bias, ln=(g, b, 1e-5), act="gelu"),
        "cached_attention": lambda: fused.cached_attention(model, qkv, 0, cache, at),
        "pick_rows": lambda: sampling.pick(logits, HOT, u, probs=probs, tokens=token),
        "decide_packed": lambda: verification.decide_packed(p, q, drafts, uniforms),
    }


def best_us(call: Callable[[], object], n: int = 2000, batches: int = 7) -> float:
    # the best batch's µs a call (a shared machine's other work only ever adds time)
    call()
    best = float("inf")
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(n):
            call()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def measure(n: int = 2000) -> dict[str, float]:
    # kernel -> µs of host time a call, Python side
    with python_side_only():
        return {name: best_us(call, n) for name, call in calls().items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpu.device.host_cost", description=__doc__.split("\n")[0]
    )
    parser.add_argument("-n", type=int, default=2000, help="calls a batch (default 2000)")
    args = parser.parse_args(argv)
    print("| call | µs a call, Python side | MEASURED_US |\n|---|---|---|")
    for name, us in measure(args.n).items():
        print(f"| {name} | {us:.1f} | {MEASURED_US[name]:g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

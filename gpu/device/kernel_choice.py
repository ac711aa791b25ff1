"""Which half of each fused operation runs on this device, its kernel or its body: measured.

No reference counterpart: the reference has no kernels. A fused kernel (kernels.cu) replaces
a body of several xp calls (cuBLAS's matmul among them) by one launch; whether that is
faster depends on the device, the shape and the row count: at one row a launch saved is
most of the cost, at sixteen rows of a wide linear cuBLAS's tiles may win. So, as the CPU
fast path chooses its tricks by timing them (specdec/fast_cpu/plan.py), the preflight
times each fused call the twin's loops make against its body, shape by shape, and keeps the
faster: `measure_choices` fills `kernels.Choices.body_faster`, which every fused operation
(`kernels.FusedOperation`) reads at every call (a call inside a graph's capture always runs
its kernel: a body's cuBLAS cannot be captured).

The calls to time are those of a real run (the preflight's: the twin's autoregressive and
speculative loops), each (kernel, shapes) -- `kernels.plan_shape`, the shapes of the arrays
it reads and writes -- timed when its first call is made, with that call's own arguments.
Each half is timed `repeats` times, the halves taking turns, and the fastest kept: other
work can only add time. The timer is a parameter, so the choice is tested with made-up
timings on any machine; on a device `device_seconds` waits for the device after the call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gpu.device import kernels
from gpu.device.backend import ARRAY_MODULE, ON_DEVICE
from gpu.device.kernels import FusedCall, plan_shape

__all__ = ["Measured", "describe", "device_seconds", "measure_choices"]

REPEATS = 5

# timer((kernel, shapes), "kernel" or "body", the call) -> seconds one run of it took
Timer = Callable[[str, str, Callable[[], object]], float]


@dataclass
class Measured:
    """One (kernel, shapes): the fastest run of each half, and which one is kept."""

    shape: tuple  # kernels.plan_shape
    kernel_s: float
    body_s: float

    @property
    def choice(self) -> str:  # "kernel" unless the body was faster
        return "body" if self.body_s < self.kernel_s else "kernel"


def device_seconds(shape: tuple, half: str, run: Callable[[], object]) -> float:
    # wall seconds of run() until the device has finished it (launches and the work both)
    if ON_DEVICE:
        ARRAY_MODULE.cuda.Device().synchronize()
    start = time.perf_counter()
    run()
    if ON_DEVICE:
        ARRAY_MODULE.cuda.Device().synchronize()
    return time.perf_counter() - start


class TimedAsMade(list):
    """The list a measuring run records its fused calls into: each (kernel, shapes) is timed
    when its first call is made, while the cache and buffers are as that call found them
    (the halves write the same slots with the same numbers, and move no pointer)."""

    def __init__(self, timer: Timer, repeats: int) -> None:
        super().__init__()
        self.timer, self.repeats = timer, repeats
        self.measured: dict[tuple, Measured] = {}

    def append(self, call: FusedCall) -> None:
        shape = plan_shape(call.plan)
        if shape not in self.measured:
            self.measured[shape] = timed(call, shape, self.timer, self.repeats)
        super().append(call)


def halves(call: FusedCall) -> dict[str, Callable[[], object]]:
    # the two ways to compute a call: its kernel's plan launched, its body run
    p = call.plan

    def kernel():
        kernels.launch_plan(kernels.compiled_module().get_function, p)

    return {"kernel": kernel, "body": lambda: call.body(*call.args, **call.kwargs)}


def timed(call: FusedCall, shape: tuple, timer: Timer, repeats: int) -> Measured:
    # both halves `repeats` times, taking turns; the fastest of each
    runs = halves(call)
    best = {half: float("inf") for half in runs}
    for _ in range(repeats):
        for half, run in runs.items():
            best[half] = min(best[half], timer(shape, half, run))
    return Measured(shape, best["kernel"], best["body"])


def measure_choices(
    run: Callable[[], object], timer: Timer = device_seconds, repeats: int = REPEATS
) -> list[Measured]:
    """run() (the twin's loops, kernels on) with each fused call's kernel and body timed at
    every (kernel, shapes) it makes; the shapes whose body won go into
    kernels.Choices.body_faster (replacing it). -> what was measured, in the order made."""
    calls = TimedAsMade(timer, repeats)
    kernels.Choices.body_faster = set()  # measured from scratch: the kernels run meanwhile
    with kernels.recording(calls):
        run()
    measured = list(calls.measured.values())
    kernels.Choices.body_faster = {m.shape for m in measured if m.choice == "body"}
    return measured


def describe(m: Measured) -> str:
    # one line of the preflight: kernel, shapes, both times, the choice
    name, shapes = m.shape
    sizes = " ".join("x".join(map(str, s)) or "1" for s in shapes)
    return (
        f"{name:<17} {sizes:<48} kernel {m.kernel_s * 1e6:8.1f} us  body "
        f"{m.body_s * 1e6:8.1f} us  -> {m.choice}"
    )

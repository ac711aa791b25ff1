"""CUDA graph capture: a stretch of fused kernel launches recorded once, replayed as one launch.

No reference counterpart: the reference has no device. The draft model's steps after the
first one in a round (k - 1 one-token forwards, each followed by its draw) are 5 launches a
block plus 3 a step, every one a RawModule kernel of kernels.cu, and they are the same from
one round to the next but for where they sit in the cache; so is the target's verification
pass. So each is captured once as a CUDA graph and each round replays it: ONE graph
launch, after ONE host -> device copy of what differs (the cache slot of each step; the
target's catch-up tokens) into a small device array, `StepGraph.args`, which the kernels
read at every replay (embed_rows and cached_attention's `start_at`). The users:
`ModelDrafter.propose_by_graph` (gpu/drafters.py), `replayed_verification`
(gpu/speculative.py).
Everything else a replay reads or writes is where the capture found it: the model's
weights, the cache, the round's buffers (allocated once by the caller), and each kernel's
output, allocated during the capture and kept alive by the graph (`calls`) so that no
other array ever takes its memory.

What may run inside a capture: fused kernels (gpu/device/kernels.py `FusedOperation`), nothing
else -- no cuBLAS (CuPy refuses it in a capture), no allocation outside a kernel's plan, no
host sync, no host -> device copy. Where it runs:

* on a device (CuPy): `stream.begin_capture()` ... `end_capture()` on a stream of its own,
  then `graph.launch()` at each replay;
* on the stand-in for a device (counting_launches): the capture runs the steps once with
  the stand-in refusing anything a capture cannot hold (`counting.NotCapturable`), and
  counting nothing (a capture runs nothing on a device); a replay counts ONE launch,
  "graph launch", and runs the steps again on NumPy, quietly, for the numbers;
* with the kernels on without a device (the tests' emulator): the capture records each
  kernel's plan instead of launching it, a replay launches the recorded plans in order --
  the same pointers, the new arguments read from `args` -- as a device replays a graph.

The host's own bookkeeping (the cache's pointers) is not in a graph: the caller's `run`
leaves it as it found it, and the caller moves it after each replay (it knows how far).
`SPECDEC_GPU_GRAPHS=0` turns graphs off (every step launched one by one).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np

from gpu.device import counting, kernels
from gpu.device.backend import ARRAY_MODULE, ON_DEVICE, copy_into, xp

__all__ = ["StepGraph", "current_slot", "graph_state", "graphs_off", "graphs_on", "slot_from"]


class GraphMode:
    """Whether graphs are wanted (SPECDEC_GPU_GRAPHS, or turned off for a while)."""

    def __init__(self) -> None:
        want = os.environ.get("SPECDEC_GPU_GRAPHS", "1")
        if want not in ("0", "1"):
            raise ValueError(f"SPECDEC_GPU_GRAPHS must be 0 or 1, got {want!r}")
        self.on = want == "1"
        self.why_off = "" if self.on else "SPECDEC_GPU_GRAPHS=0"
        self.slot = None  # the device slot array of the step being captured (slot_from)


mode = GraphMode()


def graphs_on() -> bool:
    # True when a step can be captured now: wanted, and every launch of a fused step is a
    # kernel -- on the stand-in (which counts each fused call as its kernel) or where the
    # kernels run (a device, the emulator). With the kernels off a step is xp calls: cuBLAS
    return mode.on and (counting.state.active or kernels.kernels_on())


def graph_state() -> str:
    # "on", or "off (why)": the preflight prints it
    if not mode.on:
        return f"off ({mode.why_off})"
    return "on" if graphs_on() else "off (the kernels are off: a step's xp calls cannot be held)"


def turn_off(why: str) -> None:
    # no graph is captured from now on (a device refused a capture)
    mode.on, mode.why_off = False, why


@contextmanager
def graphs_off():
    """`with graphs_off():` every step is launched one by one inside (a comparison, a count)."""
    before = mode.on
    mode.on = False
    try:
        yield
    finally:
        mode.on = before


@contextmanager
def slot_from(slot):
    """`with slot_from(args[i : i + 1]):` the sequence passes run inside read the cache slot
    they start at (and their positions, their span) from this device array [1], not from the
    host: what a captured step needs, since a replay cannot change a kernel's arguments."""
    before = mode.slot
    mode.slot = slot
    try:
        yield
    finally:
        mode.slot = before


def current_slot():
    # the device array [1] a sequence pass's kernels read their first slot from, or None
    return mode.slot


class StepGraph:
    """`run()` captured once (`capture`), replayed with new per-step arguments (`replay`).

    args: int64 [n_args] on the device, allocated once here; run() hands slices of it to
    `slot_from`, and `replay(values)` copies the round's values into it (one copy)."""

    def __init__(self, n_args: int) -> None:
        self.args = xp.zeros(n_args, dtype=np.int64)
        self.run: Callable[[], None] | None = None
        self.calls: list[kernels.FusedCall] = []  # the captured launches (outputs kept alive)
        self.graph = None  # the CUDA graph, on a device

    def capture(self, run: Callable[[], None]) -> bool:
        # run() -> recorded, not executed (on the stand-in: executed once, checked, uncounted).
        # -> False when the capture failed (the device refused it, a kernel's plan could not be
        # made there): graphs are then off for the process, the caller runs the steps one by
        # one, and nothing of the attempt is kept -- no recorded call, no graph, no counter
        # array (the counters are made before the stream captures, never inside:
        # kernels.py `reserve_counters`). NotCapturable, the stand-in finding something no
        # graph can hold (a bug of the twin's, to fix, not to hide), is raised after the same
        # clean-up
        if not counting.state.active:  # (the stand-in's fused calls run their bodies)
            kernels.reserve_counters()
        try:
            with kernels.capturing():
                if counting.state.active:
                    with counting.capturing():
                        run()
                elif ON_DEVICE:
                    self.graph = device_graph(run, self.calls)
                else:
                    with kernels.recording(self.calls, launch=False):
                        run()
        except Exception as error:  # CuPy's or the driver's message, kept for graph_state
            self.calls.clear()
            self.graph = None
            if isinstance(error, counting.NotCapturable):
                raise
            turn_off(f"capture failed: {type(error).__name__}: {str(error).strip()[:200]}")
            return False
        self.run = run
        return True

    def replay(self, values) -> None:  # (after a capture that returned True)
        # values [m <= n_args] host ints -> args[:m] (one copy; the rest the caller wrote on
        # the device), then every captured launch (one launch)
        copy_into(self.args[: len(values)], np.asarray(values, dtype=np.int64))
        if counting.state.active:
            counting.state.launch("graph launch")
            counting.state.quiet += 1
            try:
                self.run()  # the numbers, on NumPy; its inner launches are the graph's
            finally:
                counting.state.quiet -= 1
        elif ON_DEVICE:
            self.graph.launch()
        else:
            module = kernels.compiled_module()
            for call in self.calls:
                kernels.launch_plan(module.get_function, call.plan)


def device_graph(run: Callable[[], None], calls: list):
    # run()'s kernel launches captured on a stream of their own -> a CuPy graph; the fused
    # calls recorded into `calls` (their outputs stay allocated as long as the graph lives)
    stream = ARRAY_MODULE.cuda.Stream(non_blocking=True)
    with stream, kernels.recording(calls):
        stream.begin_capture()
        try:
            run()
        finally:
            graph = stream.end_capture()
    return graph

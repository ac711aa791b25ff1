"""How a fused kernel of kernels.cu is run: compiled on a device, counted on the stand-in,
its NumPy body otherwise; and whether the kernels are on.

No reference counterpart: the reference has no kernels. A fused operation is a function
written as its body, with `@fused(plan)` above it (the model's four in fused.py, `pick_rows`
in gpu/sampling.py, `decide_packed` in gpu/verification.py), so a reader finds both halves,
and the kernel, from the name that is called:

* the **body**: the function's own lines, the plain xp composition (what gpu/model.py
  computed before the kernels), run in NumPy mode -- so NumPy-mode results are bit for bit
  those of the unfused twin -- and on the stand-in, where the whole call counts as ONE
  launch (`fused <name>`), which is what the kernel costs on a device;
* the **plan** the decorator names: the CUDA kernel's grid, block and argument list (output
  arrays allocated), launched on a device as the kernels.cu function of the operation's
  name (`cupy.RawModule`, fetched once), and run on the CPU by the tests' emulator
  (tests/twin/cuda_emulator.py) against the body.

Whether the kernels are on is `kernels_on()`, read at every fused call (`FusedOperation`) and by
anything that prepares for a kernel (the model's row-major output weights): never kept, so
turning the kernels off (or on, in the tests' emulator) between two calls of one model
takes effect at the next call, all of it. `SPECDEC_GPU_FUSED=0` turns them off on a device
(the bodies run there, as xp compositions), so that the fused and unfused twins can be
compared on the same device. If NVRTC cannot compile the source, the kernels turn
themselves off the same way and `kernel_state()` says why (the bench and the device
script's preflight print it): a first device run still measures something.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpu.device import counting
from gpu.device.backend import ARRAY_MODULE, ON_DEVICE, xp

SOURCE = Path(__file__).with_name("kernels.cu")
# the kernels' compile-time limits (a call beyond them runs its body: fused.py checks)
MAX_ROWS = 16  # rows of one fused_linear call
MAX_S = 1024  # positions one cached_attention call attends to
MAX_HS = 128  # head size
# what NVRTC is given (CuPy's RawModule adds its own: -arch=sm_XX for the device at hand,
# -ftz=true and include paths; tests/twin/test_kernels_compile.py compiles with all of them)
COMPILE_OPTIONS = (f"-DMAX_ROWS={MAX_ROWS}", f"-DMAX_S={MAX_S}", f"-DMAX_HS={MAX_HS}", "-std=c++17")


@dataclass
class Plan:
    """One kernel launch: its grid and block, its arguments (arrays and NumPy scalars of the
    kernel's C types), and what the call returns (an output array among the arguments).
    `rows`: how many rows the launch computes where its grid does not say (a linear's grid
    runs over its columns); None where the grid says it. `span`: the positions an attention
    reads (a scalar argument, so not in its shapes), which a measured choice is keyed by.
    `then`: a second launch of the same call (pick_rows' draw after its scan), launched right
    after this one wherever this one is (a device, a graph, the emulator)."""

    name: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: tuple
    result: object
    rows: int | None = None
    span: int | None = None
    then: Plan | None = None  # a launch that must follow on the stream (a second stage)

    def chain(self) -> list[Plan]:
        # this launch and those it chains, in the order they run
        return [self] if self.then is None else [self, *self.then.chain()]

    def idle(self) -> bool:
        # nothing to compute (a zero grid dimension, or no rows): such a plan is never
        # launched. CuPy would raise every grid dimension to 1, and that block would read
        # the zero-size inputs, whose device pointer is 0
        return 0 in self.grid or self.rows == 0


class KernelCannot(Exception):
    """Raised by a plan whose kernel cannot take the call's arguments as they are (an output
    it would write in place is strided, or of another dtype): the call runs its body."""


def kernels_wanted() -> bool:
    # SPECDEC_GPU_FUSED = 1 (default) | 0
    want = os.environ.get("SPECDEC_GPU_FUSED", "1")
    if want not in ("0", "1"):
        raise ValueError(f"SPECDEC_GPU_FUSED must be 0 or 1, got {want!r}")
    return want == "1"


@dataclass
class KernelMode:
    """Whether the CUDA kernels run (else the bodies), and if not, why."""

    on: bool
    why_off: str


def initial_mode() -> KernelMode:
    if not ON_DEVICE:
        return KernelMode(False, "NumPy mode")
    return KernelMode(True, "") if kernels_wanted() else KernelMode(False, "SPECDEC_GPU_FUSED=0")


mode = initial_mode()  # the process's kernel mode: read through kernels_on() at each call


def kernels_on() -> bool:
    # True when a fused call launches its CUDA kernel now (else it runs its body)
    return mode.on


def kernel_state() -> str:
    # "on", or "off (why)"
    return "on" if mode.on else f"off ({mode.why_off})"


@functools.cache
def compiled_module():
    # the RawModule of kernels.cu, compiled once per process by NVRTC (every kernel at once:
    # a compile error shows at the first fused call, not in the middle of a run)
    module = ARRAY_MODULE.RawModule(code=SOURCE.read_text(), options=COMPILE_OPTIONS)
    module.get_function("fused_linear")  # compiles the module
    return module


def turn_off(why: str) -> None:
    # the bodies run from the next fused call on (compile failure, or the preflight found
    # wrong numbers)
    mode.on, mode.why_off = False, why


@contextmanager
def kernels_off(why: str):
    """`with kernels_off("...")`: the bodies run inside (the bench times the unfused twin on
    the same device, with the same models), the kernels' state as it was afterwards."""
    before = mode.on, mode.why_off
    turn_off(why)
    try:
        yield
    finally:
        mode.on, mode.why_off = before


@dataclass
class FusedCall:
    """One fused call as a FusedOperation made it: the kernel's plan, and the body with the call's
    arguments (a graph replays the plan; the preflight times the plan against the body)."""

    plan: Plan
    body: Callable
    args: tuple
    kwargs: dict


class Recording:
    """Where the fused calls made now are kept, or None, and whether their kernels launch."""

    calls: list | None = None
    launch: bool = True


@contextmanager
def recording(calls: list, launch: bool = True):
    """`with recording(calls):` each kernel a fused call launches is appended to `calls` as a
    FusedCall (a graph's capture, gpu/device/graphs.py; the preflight's measurement,
    gpu/device/kernel_choice.py). launch=False records without launching: the emulator's
    graph launches the recorded plans at each replay, as a device replays its graph."""
    before = Recording.calls, Recording.launch
    Recording.calls, Recording.launch = calls, launch
    try:
        yield
    finally:
        Recording.calls, Recording.launch = before


def span_bucket(span: int) -> int:
    # the power of two >= span, at least 64: an attention's cost grows with the positions it
    # reads, so a choice measured at 20 is not applied at 900 -- and one measure a bucket
    # (1 .. 64, .. 128, ..., .. 1024) is enough, the span changing at every step
    return max(64, 1 << max(0, span - 1).bit_length())


def launch_plan(fetch: Callable, p: Plan) -> None:
    # p's kernel and the launches it chains, one after another; fetch(name) -> the kernel
    for each in p.chain():
        fetch(each.name)(each.grid, each.block, each.args)


def plan_shape(p: Plan) -> tuple:
    # (kernel, the shapes of the arrays it reads and writes, and an attention's span bucket):
    # what a measured choice is keyed by (a cache slot, changing at every step, is not)
    shapes = tuple(tuple(a.shape) for a in p.args if hasattr(a, "shape"))
    return p.name, shapes if p.span is None else (*shapes, (f"span<={span_bucket(p.span)}",))


class Choices:
    """The (kernel, shapes) whose body the preflight measured faster than the kernel on this
    device (gpu/device/kernel_choice.py); empty until then, so the kernels run everywhere."""

    body_faster: set = set()


@contextmanager
def kernels_everywhere():
    """`with kernels_everywhere():` every fused call inside runs its kernel, whatever the
    preflight measured (its graph check: a replay holds kernels only, so the steps one by one
    it is compared with must run the same kernels, not a body that rounds otherwise)."""
    before = Choices.body_faster
    Choices.body_faster = set()
    try:
        yield
    finally:
        Choices.body_faster = before


# The tickets of the multi-block kernels (kernels.cu `last_block_done`): int32 counters, all 0
# between launches, since each group's last block sets its own back; one array serves every
# launch, a stream running them one after another. A captured graph keeps the pointer of the
# array it was captured with, so no array is ever freed; and none is made while a stream
# captures: there `cupy.zeros` only records its memset, which runs at the first replay, and
# every kernel launched before it would read garbage tickets (wrong numbers, no error). So
# the array is made before any capture (graphs.py `StepGraph.capture` reserves it first), with
# room for COUNTERS groups: the column blocks of a 262,144-id output layer, as many attention
# heads x rows. A plan needing more inside a capture fails the capture (graphs go off).
COUNTERS = 8192


class CountersTooSmall(RuntimeError):
    """A plan inside a capture needs more counters than the array made before it holds."""


class Counters:
    """Every counter array made (the last one is handed out), and whether a stream captures."""

    arrays: list = []
    capturing: bool = False


def reserve_counters(n: int = COUNTERS):
    # -> int32 [>= n] counters, all 0; made now only if the last array is shorter, and never
    # inside a capture (`capturing`)
    arrays = Counters.arrays
    if arrays and arrays[-1].shape[0] >= n:
        return arrays[-1]
    if Counters.capturing:
        raise CountersTooSmall(
            f"a kernel needs {n} counters inside a CUDA graph's capture, the array made before "
            f"it holds {arrays[-1].shape[0] if arrays else 0}: it cannot be made there"
        )
    arrays.append(xp.zeros(max(n, COUNTERS), dtype=np.int32))
    return arrays[-1]


@contextmanager
def capturing():
    """`with capturing():` a stream captures inside (no counter array may be made)."""
    before = Counters.capturing
    Counters.capturing = True
    try:
        yield
    finally:
        Counters.capturing = before


class FusedOperation:
    """A fused operation: `@fused(plan)` on its body makes one (below). Called with the body's
    arguments, it runs the body in NumPy mode (or with the kernels off), one counted launch
    of it on the stand-in (`fused <kernel>`), and on a device the kernel `plan(...)`
    describes -- unless the plan has nothing to compute (`Plan.idle`: its empty outputs, what
    the body returns too, and no launch) or refuses the call's outputs (`KernelCannot`: the
    body, on the device). A call `fits` refuses runs the body, unfused, wherever it is.

    `.body` (also `__wrapped__`) is the body, `.plan` the plan, `.kernel` the name of the
    kernels.cu function, fetched from the compiled module at its first launch and kept."""

    def __init__(self, body: Callable, plan: Callable, kernel: str, fits: Callable | None):
        functools.update_wrapper(self, body)
        self.body, self.plan, self.kernel, self.fits = body, plan, kernel, fits
        self.launches_in: object = None  # the module `functions` were fetched from
        self.functions: dict[str, Callable] = {}

    def __repr__(self) -> str:
        return f"<fused operation {self.__name__}: kernel {self.kernel}>"

    def kernel_function(self, module, name: str | None = None) -> Callable:
        # the kernel `name` (this operation's own by default) of `module`, fetched once (a
        # fresh module, as the tests' emulator makes at each call, is asked again)
        if module is not self.launches_in:
            self.functions, self.launches_in = {}, module
        name = name or self.kernel
        if name not in self.functions:
            self.functions[name] = module.get_function(name)
        return self.functions[name]

    def __call__(self, *args, **kwargs):
        body = self.body
        if self.fits is not None and not self.fits(*args, **kwargs):
            return body(*args, **kwargs)  # beyond the kernel's limits: unfused, op by op
        if counting.state.active:
            counting.state.quiet += 1
            try:
                result = body(*args, **kwargs)
            finally:
                counting.state.quiet -= 1
            if result.size:  # an empty result was computed from nothing: no launch (Plan.idle)
                counting.state.launch(f"fused {self.kernel}")
            return result
        if not kernels_on():
            return body(*args, **kwargs)
        try:
            module = compiled_module()
        except Exception as error:  # NVRTC's message: kept for kernel_state(), bodies from now
            turn_off(f"compile failed: {type(error).__name__}: {str(error).strip()[:300]}")
            return body(*args, **kwargs)
        try:
            p = self.plan(*args, **kwargs)
        except KernelCannot:  # an output the kernel cannot write in place: the body writes it
            return body(*args, **kwargs)
        if p.idle():  # zero rows or positions: the outputs are empty already, nothing to launch
            return p.result
        if Recording.calls is not None:  # a graph's capture (its outputs kept with it), a measure
            Recording.calls.append(FusedCall(p, body, args, kwargs))
            if not Recording.launch:
                return p.result
        elif Choices.body_faster and plan_shape(p) in Choices.body_faster:  # measured: the body
            return body(*args, **kwargs)  # is faster here (never in a capture: no cuBLAS there)
        launch_plan(lambda name: self.kernel_function(module, name), p)
        return p.result


def fused(plan: Callable, kernel: str | None = None, fits: Callable[..., bool] | None = None):
    """`@fused(plan)` over a body `def name(...)`: `name` becomes the fused operation (a
    FusedOperation) whose kernel is kernels.cu's `name` (or `kernel`), launched as
    `plan(...)` describes, with the body's own arguments. `fits(...)` -> False: a call
    beyond the kernel's limits, which runs the body."""

    def operation(body: Callable) -> FusedOperation:
        return FusedOperation(body, plan, kernel or body.__name__, fits)

    return operation

"""Where the twin's arrays live, and every crossing between device and host.

No reference counterpart: the reference has one memory, the twin has two.

* `xp` is CuPy when a CUDA device is usable and NumPy otherwise, so every code path of the
  twin also runs in CI on a machine without a GPU (`SPECDEC_GPU_BACKEND=numpy` forces NumPy
  on a GPU machine, `=cupy` refuses to fall back).
* `to_device` and `to_host` are the only two doors between the memories. `to_host` counts its
  calls (`transfers`), in NumPy mode too, so a test can hold the loop to one device -> host
  transfer per round through the very helper the GPU mode uses. A host copy waits for the
  device to finish what it was asked to do, so on a GPU each transfer is also a host sync.
* `counting_launches()` runs the twin, inside it, on a stand-in for a device
  (gpu/device/counting.py): `xp` then makes arrays that count every device operation (what a
  kernel launch costs is what prices a step of a model this small) and refuse, or count,
  every implicit conversion to a host value (a hidden host sync). It works on any machine,
  with or without CuPy: the count is a property of the code, not of the device.
* `fuse(f)` is one elementwise kernel: `cupy.fuse` on a device, one counted launch on the
  stand-in, the plain function in NumPy mode.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np

from gpu.device import counting
from gpu.device.counting import DeviceArray, LaunchLog


def choose_array_module():
    # -> cupy or numpy, following SPECDEC_GPU_BACKEND = auto (default) | cupy | numpy
    want = os.environ.get("SPECDEC_GPU_BACKEND", "auto")
    if want not in ("auto", "cupy", "numpy"):
        raise ValueError(f"SPECDEC_GPU_BACKEND must be auto, cupy or numpy, got {want!r}")
    if want == "numpy":
        return np
    try:
        import cupy

        usable = cupy.cuda.is_available()
    except Exception:  # not installed, or installed without a driver
        usable = False
    if want == "cupy" and not usable:
        raise RuntimeError("SPECDEC_GPU_BACKEND=cupy, but CuPy has no usable CUDA device here")
    return cupy if usable else np


class ArrayModule:
    """`xp`, the array module the twin computes with: CuPy or NumPy (chosen once, at import),
    or the stand-in for a device inside `counting_launches()`. A name is looked up in the
    module once and kept, so `xp.exp` costs a plain attribute read; a switch forgets them."""

    def __init__(self, module) -> None:
        self.use(module)

    def use(self, module) -> None:
        vars(self).clear()
        vars(self)["module"] = module

    def __getattr__(self, name: str):  # only for names not looked up since the last switch
        value = getattr(self.module, name)
        setattr(self, name, value)
        return value


ARRAY_MODULE = choose_array_module()  # cupy or numpy: what `xp` is outside the stand-in
ON_DEVICE = ARRAY_MODULE is not np
xp = ArrayModule(ARRAY_MODULE)


def backend_name() -> str:
    if not ON_DEVICE:
        return "numpy (no CUDA device: the twin's code paths on the host)"
    props = ARRAY_MODULE.cuda.runtime.getDeviceProperties(ARRAY_MODULE.cuda.Device().id)
    return f"cupy {ARRAY_MODULE.__version__} on {props['name'].decode()}"


class TransferLog:
    """Counts device -> host copies (`to_host` calls)."""

    def __init__(self) -> None:
        self.count = 0


transfers = TransferLog()


def on_device(array) -> bool:
    # True for a device array (CuPy's, or the stand-in's); a host array, a list or an int is not
    return isinstance(array, DeviceArray) or hasattr(array, "__cuda_array_interface__")


def to_device(array, dtype=None):
    # host array-like -> xp array (a copy on a GPU; the same data in NumPy mode)
    return xp.asarray(array, dtype=dtype)


def copy_into(buffer, host) -> None:
    # host array -> into an existing device array of its shape: one host -> device copy and
    # no allocation (a captured graph reads its arguments from such a buffer: graphs.py)
    if isinstance(buffer, DeviceArray):
        counting.state.launch("to_device")
        buffer.data[...] = host
    elif ON_DEVICE and on_device(buffer):
        buffer.set(np.ascontiguousarray(host, dtype=buffer.dtype))
    else:
        buffer[...] = host


def to_host(array) -> np.ndarray:
    # xp array -> numpy array: the one way data comes back, counted (and, on the stand-in,
    # one device operation: the copy back)
    transfers.count += 1
    if isinstance(array, DeviceArray):
        counting.state.launch("to_host")
        return array.to_host_copy()
    if ON_DEVICE:
        return ARRAY_MODULE.asnumpy(array)
    return np.array(array, copy=True)


@contextmanager
def counting_transfers():
    """`with counting_transfers() as log:` ... `log.count` is the transfers made inside."""
    log = TransferLog()
    before = transfers.count
    try:
        yield log
    finally:
        log.count = transfers.count - before


def memory_kind() -> str:
    # where new twin arrays live now: "stand-in" inside counting_launches(), else "device"
    # (a reference model's twin is built once per kind: gpu.model.as_twin_model)
    return "stand-in" if counting.state.active else "device"


@contextmanager
def counting_launches(strict: bool = False):
    """`with counting_launches() as log:` ... the twin runs on the stand-in for a device
    (gpu/device/counting.py); afterwards `log.count` is the device operations made inside,
    `log.by_name` the same by operation, `log.hidden_syncs` the implicit host conversions.

    strict=True refuses every implicit host conversion (counting.HiddenSyncError) instead
    of counting it. Build the twin's arrays -- models, drafters, caches -- inside: to the
    stand-in an array made before is a host array, refused in a device operation as CuPy
    refuses one (a reference model handed to a twin loop gets a stand-in twin of its own).
    Contexts nest: an inner one counts its own part, and is strict if either one is."""
    state = counting.state
    before = (state.active, state.strict)
    if not state.active:
        xp.use(counting.StandInModule())
    state.active, state.strict = True, state.strict or strict
    log, start = LaunchLog(), state.log.snapshot()
    try:
        yield log
    finally:
        end = state.log.snapshot()
        end.since(start)
        log.count, log.by_name, log.hidden_syncs = end.count, end.by_name, end.hidden_syncs
        state.active, state.strict = before
        if not state.active:
            xp.use(ARRAY_MODULE)


def fuse(kernel: Callable) -> Callable:
    """One elementwise kernel for `kernel`: cupy.fuse on a device, one counted launch on the
    stand-in, the plain function in NumPy mode (chosen at each call: the stand-in may be on)."""
    fused_on_device = ARRAY_MODULE.fuse(kernel) if ON_DEVICE else kernel
    counted = counting.fuse(kernel)

    def run(*args):
        return counted(*args) if counting.state.active else fused_on_device(*args)

    return run

"""Where the twin's arrays live, and every crossing between device and host.

No reference counterpart: the reference has one memory, the twin has two.

* `xp` is CuPy when a CUDA device is usable and NumPy otherwise, so every code path of the
  twin also runs in CI on a machine without a GPU (`SPECDEC_GPU_BACKEND=numpy` forces NumPy
  on a GPU machine, `=cupy` refuses to fall back).
* `to_device` and `to_host` are the only two doors between the memories. `to_host` counts its
  calls (`transfers`), in NumPy mode too, so a test can hold the loop to one device -> host
  transfer per round through the very helper the GPU mode uses. A host copy waits for the
  device to finish what it was asked to do, so on a GPU each transfer is also a host sync.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np


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


xp = choose_array_module()
ON_DEVICE = xp is not np


def backend_name() -> str:
    if not ON_DEVICE:
        return "numpy (no CUDA device: the twin's code paths on the host)"
    props = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)
    return f"cupy {xp.__version__} on {props['name'].decode()}"


class TransferLog:
    """Counts device -> host copies (`to_host` calls)."""

    def __init__(self) -> None:
        self.count = 0


transfers = TransferLog()


def on_device(array) -> bool:
    # True for a device array (CuPy's); a host array, a list or an int is not one
    return hasattr(array, "__cuda_array_interface__")


def to_device(array, dtype=None):
    # host array-like -> xp array (a copy on a GPU; the same data in NumPy mode)
    return xp.asarray(array, dtype=dtype)


def to_host(array) -> np.ndarray:
    # xp array -> numpy array: the one way data comes back, counted
    transfers.count += 1
    if ON_DEVICE:
        return xp.asnumpy(array)
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

"""The counting device: a stand-in for a CUDA device in NumPy mode, whose arrays count their
launches and refuse to turn into host values behind the loop's back.

(Named for what it does, counting, and not "standin": specdec/standins.py holds stand-in
MODELS -- untrained GPTs shaped like the bundled pair -- which have nothing to do with this.
The prose still calls it "the stand-in for a device", and `memory_kind()` "stand-in".)

No reference counterpart: the reference has one memory and no device. Two properties decide
the twin's speed on a GPU, and plain NumPy mode shows neither:

* **launches**: at this model size a GPU step is priced by the device operations Python
  queues (kernel launches, host -> device copies: microseconds each), not by its FLOPs;
* **host syncs**: each time Python needs a value that lives on the device -- `int(x)`,
  `if x:`, `np.asarray(x)`, `x.item()`, `x.tolist()`, a `for` over x -- it waits for the
  device to finish and copies the value back. The twin's design allows one such wait per
  round, through `gpu.device.backend.to_host`; `counting_transfers()` counts those, and
  cannot see the implicit ones.

`DeviceArray` wraps a NumPy array the way a CuPy array wraps device memory, and
`StandInModule` is the array module (`xp`) that makes them. Inside
`gpu.device.backend.counting_launches()` the twin computes with these instead of plain NumPy
arrays: the same numbers, with every device operation counted by name, every implicit
conversion to a host value refused (strict) or counted (not strict), and a host array that
meets a device array in an operation refused, as CuPy refuses it.

What counts as one device operation ("launch"), as CuPy would run it:

    an operator or ufunc call (+, *, @, exp, <=, ...), a reduction (sum, max, argmax, all),
    any other array function (where, concatenate, stack, cumsum, sort, take_along_axis),
    astype, fancy indexing (an index array: a gather), any assignment into an array,
    an array made on the device (zeros, full, arange), a copy host -> device (asarray of
    host data; a host index array), a copy device -> host (to_host)
    a fused kernel (`fuse`): one, whatever it computes inside
    a replay of a captured CUDA graph (gpu/device/graphs.py): one, "graph launch"; inside
    its capture (`capturing()`) nothing counts, and anything but a fused kernel -- an
    operation, an allocation, a copy, a host sync -- raises NotCapturable
    free (no launch): views -- basic slicing, reshape / ravel / swapaxes / transpose when
    no copy is needed, .T -- and reading shape, dtype, len

A CuPy call sometimes runs more than one kernel (a sort, take_along_axis); the count is
then a floor, the same for every version of the code, which is what a budget needs.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

__all__ = [
    "DeviceArray",
    "HiddenSyncError",
    "HostArrayError",
    "LaunchLog",
    "NotCapturable",
    "StandInModule",
    "state",
]


class HiddenSyncError(RuntimeError):
    """A device value was turned into a host value outside `to_host`: on a GPU, a host sync.
    (A RuntimeError, not a TypeError, so that no `except TypeError` can swallow it.)"""


class NotCapturable(RuntimeError):
    """Something a CUDA graph cannot hold ran inside a capture (gpu/device/graphs.py): an
    operation that is not a fused kernel (on a device: cuBLAS, which CuPy refuses in a
    capture, or an xp kernel whose output would be allocated anew), an allocation, a copy
    or a host sync."""


class HostArrayError(TypeError):
    """A host (NumPy) array met a device array in a device operation; CuPy refuses it too."""


class LaunchLog:
    """Device operations counted: `count` in all, `by_name` per operation, and `hidden_syncs`
    (implicit conversions to host values that a non-strict stand-in let through), by kind."""

    def __init__(self) -> None:
        self.count = 0
        self.by_name: Counter = Counter()
        self.hidden_syncs: Counter = Counter()

    def snapshot(self) -> LaunchLog:
        copy = LaunchLog()
        copy.count, copy.by_name, copy.hidden_syncs = (
            self.count,
            Counter(self.by_name),
            Counter(self.hidden_syncs),
        )
        return copy

    def since(self, before: LaunchLog) -> None:
        # self := self - before (what happened after `before` was taken)
        self.count -= before.count
        self.by_name = +(self.by_name - before.by_name)
        self.hidden_syncs = +(self.hidden_syncs - before.hidden_syncs)


class StandInState:
    """Whether the stand-in is on, strict, and the running tally of every operation."""

    def __init__(self) -> None:
        self.active = False  # inside counting_launches(): xp is the stand-in
        self.strict = False  # implicit host conversions raise (else they are counted)
        self.quiet = 0  # > 0 inside a fused kernel: its inner operations are not launches
        self.capturing = False  # inside a graph's capture: only fused kernels may run
        self.log = LaunchLog()

    def launch(self, name: str, n: int = 1) -> None:
        if self.active and not self.quiet and n:
            if self.capturing:
                self.captured(name)
                return  # a capture records a kernel, it runs (and costs) nothing yet
            self.log.count += n
            self.log.by_name[name] += n

    def captured(self, name: str) -> None:
        # a device operation inside a capture: a fused kernel is recorded, anything else refused
        if not name.startswith("fused "):
            raise NotCapturable(
                f"`{name}` inside a CUDA graph's capture: only fused kernels may run there "
                "(gpu/device/graphs.py); do it before the capture, or fuse it"
            )

    def allocate(self, name: str) -> None:
        # an array allocated outside a kernel: refused inside a capture (the graph would
        # keep writing memory the pool may hand to someone else)
        if self.active and not self.quiet and self.capturing:
            raise NotCapturable(
                f"`{name}` allocates inside a CUDA graph's capture: allocate the buffers once, "
                "before it (gpu/device/graphs.py)"
            )

    def host_value(self, kind: str) -> None:
        # an implicit device -> host conversion: refused when strict, else counted
        if not self.active:
            return  # outside counting_launches(): a plain array again
        if self.capturing:
            raise NotCapturable(f"a host sync ({kind}) inside a CUDA graph's capture")
        if self.strict:
            raise HiddenSyncError(
                f"implicit conversion of a device array to a host value ({kind}): on a GPU "
                "this waits for the device (a host sync). Bring values back with "
                "gpu.device.backend.to_host, once per round, or keep the computation on the "
                "device."
            )
        self.log.hidden_syncs[kind] += 1


state = StandInState()


# ------------------------------------------------------------------ wrapping and unwrapping


def unwrap(value, where: str, host_ok: bool = False):
    # DeviceArray -> its NumPy array, recursively through lists and tuples; a host array of
    # one or more dimensions is refused (CuPy takes host scalars, not host arrays)
    if isinstance(value, DeviceArray):
        return value.data
    if isinstance(value, (list, tuple)):
        return type(value)(unwrap(v, where, host_ok) for v in value)
    if hasattr(value, "__cuda_array_interface__") and state.active:
        raise HostArrayError(
            f"a CuPy array met the stand-in's arrays in `{where}`: it was made outside "
            "counting_launches(); build the twin (models, caches, drafters) inside it"
        )
    if isinstance(value, np.ndarray) and value.ndim > 0 and not host_ok and state.active:
        raise HostArrayError(
            f"a host (NumPy) array of shape {value.shape} met device arrays in `{where}`; on "
            "a GPU that is an error. Copy it over with gpu.device.backend.to_device first (or "
            "build the twin -- models, caches, drafters -- inside counting_launches())."
        )
    return value


def wrap(value):
    # NumPy results -> device arrays; a scalar (NumPy's, or a Python bool or number that a
    # NumPy function returned) becomes a 0-d device array, as CuPy's reductions, integer
    # indexing and tests (allclose, array_equal) return 0-d arrays, never host values
    if isinstance(value, np.ndarray):
        return DeviceArray(value)
    if isinstance(value, (np.generic, bool, int, float)):
        return DeviceArray(np.asarray(value))
    if isinstance(value, tuple):
        return tuple(wrap(v) for v in value)
    if isinstance(value, list):
        return [wrap(v) for v in value]
    return value


def device_call(name: str, fn: Callable, args, kwargs, launches: int = 1):
    # one device operation: unwrap, count, run on NumPy, wrap
    args, kwargs = unwrap(args, name), {k: unwrap(v, name) for k, v in kwargs.items()}
    state.launch(name, launches)
    return wrap(fn(*args, **kwargs))


def has_array_index(key) -> bool:
    # True when indexing gathers (an array of ids or a list), not just views
    keys = key if isinstance(key, tuple) else (key,)
    return any(isinstance(k, (DeviceArray, np.ndarray, list)) for k in keys)


def has_mask_index(key) -> bool:
    # a boolean index array: the result's shape depends on the data (CuPy counts it: a sync)
    keys = key if isinstance(key, tuple) else (key,)
    return any(
        isinstance(k, (DeviceArray, np.ndarray)) and k.dtype == np.bool_ and k.ndim > 0
        for k in keys
    )


def host_indices(key) -> int:
    # how many host index arrays CuPy would copy to the device first
    keys = key if isinstance(key, tuple) else (key,)
    return sum(isinstance(k, (np.ndarray, list)) for k in keys)


def shares(result: np.ndarray, source: np.ndarray) -> bool:
    return np.may_share_memory(result, source)


# ------------------------------------------------------------------ the device array


class DeviceArray(NDArrayOperatorsMixin):
    """A NumPy array playing a device array: operations count, host conversions are refused."""

    __slots__ = ("data",)
    __array_priority__ = 100  # NumPy defers its operators to ours

    def __init__(self, data: np.ndarray) -> None:
        self.data = data

    # reading the metadata never waits for the device
    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)
    itemsize = property(lambda self: self.data.itemsize)
    nbytes = property(lambda self: self.data.nbytes)

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:  # shape and dtype only: printing values would be a sync
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype})"

    __str__ = __repr__

    # the protocols through which NumPy hands its functions and operators over

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}"
        if "out" in kwargs:
            kwargs["out"] = unwrap(kwargs["out"], name)
        return device_call(name, getattr(ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return standin_function(func.__name__, func)(*args, **kwargs)

    # implicit conversions to host values: each one is a host sync on a GPU

    def __array__(self, dtype=None, copy=None):
        state.host_value("np.asarray / __array__")
        out = self.data if dtype is None else self.data.astype(dtype)
        return out.copy() if copy else out

    def __bool__(self) -> bool:
        state.host_value("bool()")
        return bool(self.data)

    def __int__(self) -> int:
        state.host_value("int()")
        return int(self.data)

    def __float__(self) -> float:
        state.host_value("float()")
        return float(self.data)

    def __complex__(self) -> complex:
        state.host_value("complex()")
        return complex(self.data)

    def __index__(self) -> int:
        state.host_value("__index__ (a device value used as a Python index)")
        return operator.index(self.data)

    def __iter__(self):
        state.host_value("iteration")
        return iter(wrap(list(self.data)))

    def __format__(self, spec: str) -> str:
        if spec:
            state.host_value(f"format spec {spec!r}")
            return format(self.data, spec)
        return repr(self)

    def item(self, *args):
        state.host_value(".item()")
        return self.data.item(*args)

    def tolist(self):
        state.host_value(".tolist()")
        return self.data.tolist()

    __hash__ = None  # like a CuPy array: mutable, not a dict key

    # indexing: views are free, gathers and writes are launches

    def __getitem__(self, key):
        if has_mask_index(key):
            state.host_value("a boolean mask index (the result's size depends on the data)")
        gathers = has_array_index(key)
        if gathers:
            state.launch("to_device (index)", host_indices(key))
        raw = unwrap(key, "getitem", host_ok=True)
        result = self.data[raw]
        state.launch("take", int(gathers))
        return wrap(result)

    def __setitem__(self, key, value) -> None:
        host_value = isinstance(value, np.ndarray) and value.ndim > 0
        state.launch("to_device (index)", host_indices(key) + int(host_value))
        self.data[unwrap(key, "setitem", host_ok=True)] = unwrap(value, "setitem", host_ok=True)
        state.launch("setitem")

    # the methods the twin calls; reductions and copies launch, views do not

    @property
    def T(self) -> DeviceArray:
        return DeviceArray(self.data.T)

    def reshape(self, *shape, **kwargs) -> DeviceArray:
        return self.view_or_copy(self.data.reshape(*shape, **kwargs), "reshape (copy)")

    def ravel(self) -> DeviceArray:
        return self.view_or_copy(self.data.ravel(), "ravel (copy)")

    def swapaxes(self, a: int, b: int) -> DeviceArray:
        return DeviceArray(self.data.swapaxes(a, b))

    def transpose(self, *axes) -> DeviceArray:
        return DeviceArray(self.data.transpose(*axes))

    def view_or_copy(self, result: np.ndarray, name: str) -> DeviceArray:
        state.launch(name, int(not shares(result, self.data)))
        return DeviceArray(result)

    def astype(self, dtype, copy: bool = True) -> DeviceArray:
        if not copy and np.dtype(dtype) == self.dtype:
            return self
        state.launch("astype")
        return DeviceArray(self.data.astype(dtype))

    def copy(self) -> DeviceArray:
        state.launch("copy")
        return DeviceArray(self.data.copy())

    def sum(self, *args, **kwargs):
        return device_call("sum", np.sum, (self, *args), kwargs)

    def max(self, *args, **kwargs):
        return device_call("max", np.max, (self, *args), kwargs)

    def min(self, *args, **kwargs):
        return device_call("min", np.min, (self, *args), kwargs)

    def mean(self, *args, **kwargs):
        return device_call("mean", np.mean, (self, *args), kwargs)

    def argmax(self, *args, **kwargs):
        return device_call("argmax", np.argmax, (self, *args), kwargs)

    def argmin(self, *args, **kwargs):
        return device_call("argmin", np.argmin, (self, *args), kwargs)

    def all(self, *args, **kwargs):
        return device_call("all", np.all, (self, *args), kwargs)

    def any(self, *args, **kwargs):
        return device_call("any", np.any, (self, *args), kwargs)

    def cumsum(self, *args, **kwargs):
        return device_call("cumsum", np.cumsum, (self, *args), kwargs)

    def to_host_copy(self) -> np.ndarray:
        # the sanctioned door (gpu.device.backend.to_host calls it): a host copy, counted there
        return self.data.copy()


# ------------------------------------------------------------------ the array module

# names that read or make metadata, not arrays: passed through, never a launch
METADATA = {
    "can_cast",
    "dtype",
    "finfo",
    "iinfo",
    "iscomplexobj",
    "isrealobj",
    "isscalar",
    "issubdtype",
    "may_share_memory",
    "ndim",
    "promote_types",
    "result_type",
    "shape",
    "shares_memory",
    "size",
}
# functions that return views (free when no copy is needed) or allocate without writing
VIEWS = {
    "atleast_1d",
    "atleast_2d",
    "broadcast_to",
    "expand_dims",
    "moveaxis",
    "squeeze",
    "swapaxes",
    "transpose",
}
ALLOCATE_ONLY = {"empty", "empty_like"}
# functions whose output size depends on the data: CuPy must look at it first (a sync)
SYNCING = {"argwhere", "compress", "extract", "flatnonzero", "nonzero", "unique"}
# CuPy's sorts are stable; the stand-in sorts stably too, so ties come out as on a device
SORTS = {"argsort", "sort"}


def standin_function(name: str, fn: Callable) -> Callable:
    # the stand-in's version of NumPy function `fn`
    if name in METADATA:
        return lambda *args, **kwargs: fn(*unwrap(args, name, True), **kwargs)
    if name in ("asarray", "array", "ascontiguousarray"):
        return lambda *args, **kwargs: to_device_array(name, fn, *args, **kwargs)
    if name in VIEWS:
        return lambda *args, **kwargs: device_call(name, fn, args, kwargs, launches=0)
    if name in ALLOCATE_ONLY:

        def allocating(*args, **kwargs):
            state.allocate(f"xp.{name}")
            return device_call(name, fn, args, kwargs, launches=0)

        return allocating
    if name in SYNCING:

        def syncing(*args, **kwargs):
            state.host_value(f"xp.{name} (its size depends on the data)")
            return device_call(name, fn, args, kwargs)

        return syncing
    if name in SORTS:

        def stable_sort(*args, **kwargs):
            kwargs.setdefault("kind", "stable")
            return device_call(name, fn, args, kwargs)

        return stable_sort
    return lambda *args, **kwargs: device_call(name, fn, args, kwargs)


def to_device_array(name: str, fn: Callable, obj, dtype=None, **kwargs):
    # xp.asarray: a device array as it is (a cast if the dtype differs: one launch); host
    # data is copied over (one launch: the host -> device copy)
    if isinstance(obj, DeviceArray):
        if dtype is None or np.dtype(dtype) == obj.dtype:
            return obj
        return obj.astype(dtype)
    state.launch("to_device")
    return DeviceArray(np.array(fn(unwrap(obj, name, host_ok=True), dtype=dtype, **kwargs)))


@contextmanager
def capturing():
    """`with capturing():` a graph's capture on the stand-in: fused kernels are recorded (not
    counted), anything else a capture cannot hold raises NotCapturable."""
    before = state.capturing
    state.capturing = True
    try:
        yield
    finally:
        state.capturing = before


def fuse(kernel: Callable) -> Callable:
    """The stand-in's `cupy.fuse`: one launch for the whole elementwise function."""

    def fused(*args):
        state.launch(f"fused {kernel.__name__}")
        state.quiet += 1
        try:
            return kernel(*args)
        finally:
            state.quiet -= 1

    return fused


class StandInModule:
    """`xp` inside counting_launches(): NumPy's names, making and taking DeviceArrays.
    Constants and types (inf, float32, ...) are NumPy's own; every function counts."""

    def __getattr__(self, name: str):
        if name == "fuse":
            return fuse
        value = getattr(np, name)
        if isinstance(value, type) or not callable(value):
            return value  # inf, pi, newaxis, float32, int64, bool_ ...
        if isinstance(value, np.ufunc):
            return lambda *args, **kwargs: device_call(name, value, args, kwargs)
        return standin_function(name, value)

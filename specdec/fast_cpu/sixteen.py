"""Weights kept in the 16 bits they were stored in, for the compiled passes of the fast path.

A verification pass of a target larger than the last-level cache is bound by streaming its
weights from memory. The bundled checkpoints are stored as float16, and many published ones as
bfloat16; the reference widens them to float32 on load (it computes in float32 on purpose),
which doubles the bytes every pass reads. The fast path can keep a second copy of the linear
and output-layer weights in 16 bits and hand it to the compiled kernels, which widen each
weight to float32 as they read it (`compiled.widen`): the arithmetic stays float32, and since
every weight was a 16-bit number to begin with, the widened weights are the float32 ones bit
for bit. Only the order of the sums differs, as between any two of the fast path's kernels.

Which format fits is read from the weights themselves, not from the file: a float32 whose low
16 bits are all zero is a bfloat16, and one that survives a float16 round trip is a float16.
A model whose weights fit neither (trained here in float32, say) gets no 16-bit copy, and the
plan never offers the 16-bit configurations ("stepwise16", "fused16"). NumPy has no bfloat16,
so both formats are held as 16-bit integers: int16 for the bits of a float16 (numba has no
float16 on the CPU either), uint16 for a bfloat16's (the float32's top half).

`SPECDEC_FAST_16BIT` chooses what the plan may measure: "measure" (the default: 16-bit and
float32 configurations side by side, the faster kept per pass size), "on" (the compiled
passes only in 16 bits, to measure what they buy), "off" (float32 only).
"""

from __future__ import annotations

import os

import numpy as np

FORMATS = ("bfloat16", "float16")  # in the order they are tried (the bit test is the cheaper)
CHOICES = ("measure", "on", "off")
ENV = "SPECDEC_FAST_16BIT"


def choice() -> str:
    # SPECDEC_FAST_16BIT, checked: a typo must not silently measure something else
    value = os.environ.get(ENV, "measure").strip().lower() or "measure"
    if value not in CHOICES:
        raise ValueError(f"{ENV} must be one of {CHOICES}, got {value!r}")
    return value


def fits(w: np.ndarray, fmt: str) -> bool:
    # whether every value of the float32 array w is exactly a number of the 16-bit format
    if fmt == "bfloat16":
        return not np.any(np.ascontiguousarray(w).view(np.uint32) & np.uint32(0xFFFF))
    if fmt == "float16":
        with np.errstate(over="ignore"):  # a value beyond float16's range just fails the test
            return bool(np.array_equal(w.astype(np.float16).astype(np.float32), w))
    raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")


def format_of(weights) -> str | None:
    # the 16-bit format every array of `weights` fits exactly, None where there is none
    weights = list(weights)
    return next((f for f in FORMATS if all(fits(w, f) for w in weights)), None)


def narrowed(w: np.ndarray, fmt: str) -> np.ndarray | None:
    # float32 w -> its 16-bit bits in C order (int16: a float16's, uint16: a bfloat16's),
    # read-only; None where w is not exactly a number of that format (a replaced weight)
    if w.dtype != np.float32 or not fits(w, fmt):
        return None
    w = np.ascontiguousarray(w)
    if fmt == "bfloat16":
        bits = (w.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    else:
        bits = w.astype(np.float16).view(np.int16)
    bits.flags.writeable = False
    return bits


def widened(bits: np.ndarray) -> np.ndarray:
    # narrowed()'s bits -> the float32 values they stand for (NumPy; for tests and checks)
    if bits.dtype == np.uint16:
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
    if bits.dtype == np.int16:
        return bits.view(np.float16).astype(np.float32)
    raise ValueError(f"16-bit weights are int16 (float16) or uint16 (bfloat16), got {bits.dtype}")


class SixteenBitCopies:
    """A fast model's 16-bit weights by name, in either layout, made on first use and again
    when the float32 array under the name was replaced (an identity test per call, as
    FastGPT.transposed_weight). `fmt` None: the model has none."""

    def __init__(self, fmt: str | None) -> None:
        self.fmt = fmt
        self.made: dict[tuple[str, bool], tuple[np.ndarray, np.ndarray | None]] = {}

    def get(self, w: np.ndarray, name: str, transposed: bool = False) -> np.ndarray | None:
        # params[name] (= w) as 16 bits, [C_out, C_in] where transposed; None where it isn't
        # exactly 16-bit (then the compiled pass leaves the call to the float32 one)
        if self.fmt is None:
            return None
        known = self.made.get((name, transposed))
        if known is None or known[0] is not w:
            known = (w, narrowed(w.T if transposed else w, self.fmt))
            self.made[name, transposed] = known
        return known[1]

    def arrays(self) -> list[np.ndarray]:
        # every copy made so far (what the plan's touch() reads besides the float32 weights)
        return [bits for _, bits in self.made.values() if bits is not None]

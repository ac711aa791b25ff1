"""The Llama block's own computations on the CPU fast path: RMSNorm, SwiGLU's SiLU and RoPE.

`FastLlama` (specdec/fast_cpu/model.py) is FastGPT's plan, layouts and tricks on a
`reference.llama.Llama`; the few-row products, the output layer and attention (keys first,
each key head read once for its group of query heads) are GPT-2's tricks, unchanged or
generalised. What the Llama block has and GPT-2's has not is here:

    rms_norm_rows      reference.llama.rms_norm     one compiled call (numba, optional)
    silu_by_products   reference.llama.silu         five NumPy calls instead of eight
    rotate_by_products reference.llama.rotate       whole rows, four NumPy calls instead of seven

Each gives the plain function's numbers to float32 rounding; which of them run is the plan's
choice (specdec/fast_cpu/plan.py: "compiled_norm", "gelu" for the activation, "attention"
for the rotation that comes with it). Most of a small model's step is NumPy's per-call
overhead (a few microseconds a call), which is what fewer calls buy back.
"""

from __future__ import annotations

import numpy as np

from specdec.fast_cpu import compiled

try:
    import numba
except ImportError:  # the `fast` extra is not installed: the plan never offers compiled_norm
    numba = None

# silu's inputs are floored here, so that exp(-x) <= e^88 ~ 1.65e38 stays a float32 (< 3.4e38)
SILU_FLOOR = np.float32(-88.0)


def silu_by_products(x: np.ndarray) -> np.ndarray:  # [...] -> [...]
    # x sigmoid(x) = x / (1 + exp(-x)), in five NumPy calls (the plain silu's eight). x is
    # floored at -88 first, so that exp(-x) cannot overflow: below it silu(x) = x e^x is under
    # 1e-36 in size, and the floored -88 / (1 + e^88) ~ -5e-37 stands for it. x is left alone.
    t = np.maximum(x, SILU_FLOOR)
    e = np.negative(t)
    np.exp(e, out=e)
    e += np.float32(1.0)
    np.divide(t, e, out=e)
    return e


def whole_width(cos: np.ndarray, sin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # cos/sin [..., hs/2] -> ([cos, cos], [-sin, sin]) [..., hs]: the rotation's tables as wide
    # as a head, so that rotate_by_products multiplies whole rows (made once per model)
    return np.concatenate([cos, cos], axis=-1), np.concatenate([-sin, sin], axis=-1)


def rotate_by_products(x: np.ndarray, cos2: np.ndarray, sin2: np.ndarray) -> np.ndarray:
    # x [..., nh, T, hs], cos2/sin2 [..., 1, T, hs] (whole_width's) -> [..., nh, T, hs]:
    # reference.llama.rotate as x cos2 + [x2, x1] sin2, where x1, x2 are a head's halves:
    #   first half:  x1 cos - x2 sin,   second half:  x2 cos + x1 sin.
    # Four NumPy calls on whole rows instead of seven on half rows (strided halves ran
    # slower than the plain rotation; docs/fast-path.md)
    h = x.shape[-1] // 2
    out = x * cos2
    swapped = np.concatenate([x[..., h:], x[..., :h]], axis=-1)
    swapped *= sin2
    out += swapped
    return out


if numba is not None:

    @numba.njit(fastmath=True, boundscheck=False, error_model="numpy", cache=True)
    def rms_norm_kernel(x, g, eps, out):  # [R, C], [C], float32 -> out [R, C]
        # g x / sqrt(mean(x^2) + eps) per row, as reference.llama.rms_norm: one call instead
        # of the plain norm's six NumPy calls
        R, C = x.shape
        n = np.float32(C)
        for r in range(R):
            total = np.float32(0.0)
            for c in range(C):
                total += x[r, c] * x[r, c]
            scale = np.float32(1.0) / np.sqrt(total / n + eps)
            for c in range(C):
                out[r, c] = g[c] * (x[r, c] * scale)
        return out


def rms_norm_rows(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    # [R, C] -> [R, C]: reference.llama.rms_norm to float32 rounding, one compiled call
    if not compiled.AVAILABLE:
        raise RuntimeError("rms_norm_rows needs numba: pip install specdec-lab[fast]")
    x = np.ascontiguousarray(x, dtype=np.float32)
    return compiled.interruptible(rms_norm_kernel, x, g, np.float32(eps), np.empty_like(x))

"""The twin's layer functions: the reference's GELU, softmax, LayerNorm and attention with `xp`.

What differs from reference/model.py, and why:
* every array function is `xp`'s (CuPy on a GPU, NumPy in CI): NumPy functions cannot take
  device arrays;
* GELU is one fused elementwise kernel on a GPU (`cupy.fuse`: one launch instead of ~8),
  the plain function in NumPy mode; tests/twin checks that both agree;
* the causal mask is built on the device from two `arange`s, so no host array crosses over.
They are the fused kernels' bodies too (fused.py): what a kernel computes in one launch,
written the plain way. (No file of reference/ of their own: there they are functions of
reference/model.py, which the twin's gpu/model.py subclasses; here they are the array
functions both the model and the kernels' bodies call, so they sit below both.)
"""

from __future__ import annotations

import math

import numpy as np

from gpu.device.backend import fuse, xp
from reference.model import merge_heads, split_heads

__all__ = [
    "attention",
    "causal_mask",
    "gelu",
    "layer_norm",
    "merge_heads",
    "softmax",
    "split_heads",
]


def gelu_plain(x):  # [...] -> [...]: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    c = np.float32(math.sqrt(2.0 / math.pi))
    return 0.5 * x * (1.0 + xp.tanh(c * (x + 0.044715 * (x * x * x))))


# one fused kernel on the device (one counted launch on the stand-in); the same function,
# unfused, in NumPy mode
gelu = fuse(gelu_plain)


def softmax(x, axis: int = -1):  # [...] -> [...]
    e = xp.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x, g, b, eps: float):  # [T, C] -> [T, C]
    C = x.shape[-1]
    mean = x.sum(axis=-1, keepdims=True) / C
    centred = x - mean
    var = (centred * centred).sum(axis=-1, keepdims=True) / C
    return g * centred / xp.sqrt(var + eps) + b


def causal_mask(T: int, S: int):  # -> [T, S] bool on the device, True = may attend
    return xp.arange(S)[None, :] <= (S - T + xp.arange(T))[:, None]


def attention(q, k, v, mask=None):
    # q [..., nh, T, hs], k/v [..., nh, S, hs] -> [..., nh, T, hs]; mask None = causal, else
    # a device bool array that broadcasts to the scores (a tree's, a batch's)
    T, S = q.shape[-2], k.shape[-2]
    scores = q @ k.swapaxes(-1, -2) * np.float32(1.0 / math.sqrt(q.shape[-1]))  # [.., T, S]
    if mask is not None:
        scores = xp.where(mask, scores, np.float32(-1e10))
    elif T > 1:  # one new position of a sequence may see every key: nothing to mask
        scores = xp.where(causal_mask(T, S), scores, np.float32(-1e10))
    return softmax(scores) @ v

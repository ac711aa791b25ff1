"""The opt-in CPU fast path: the same GPT, computed in ways OpenBLAS runs faster.

`FastGPT` is a `reference.model.GPT` whose block computations `linear`, `attend` and
`activation` are replaced by versions that give the same numbers to float32 rounding but
suit OpenBLAS and NumPy's call overhead on a CPU. The plain model stays the one to read;
docs/fast-path.md says why each trick exists and what it measured, and
tests/unit/test_fast_cpu.py holds it to the plain model's logits.

It can never go stale: it keeps no copy of any weight. Each linear weight is stored once,
as a transposed contiguous array [C_out, C_in], and `params[name]` is a view of it with the
checkpoint's shape [C_in, C_out]; every call reads `params` afresh. Editing a weight in place
(`params[name] *= 0.5`) edits the only copy, and replacing one (`params[name] = w`) is seen
by the next call (then without the layout, so slower, but right).
"""

from __future__ import annotations

import math

import numpy as np

from reference.config import GPTConfig
from reference.model import GPT, causal_mask, softmax

# From 2 up to this many rows a linear layer takes the blocked path (verification appends
# k+1 <= 9 rows for the k this project sweeps; prefill and one-row decode keep x @ w).
FEW_ROWS = 16

# OpenBLAS multiplies without packing when M * N * K <= 100^3 (its "small matrix" kernels on
# AVX-512 CPUs; other builds take the normal path, which is still correct).
SMALL_PRODUCT = 100**3


def block_size(T: int, C_in: int) -> int:
    # output features per block: as many as keep [B, C_in] @ [C_in, T] a small product,
    # in multiples of 32 (the kernels' vector width), at least 32
    return max(32, SMALL_PRODUCT // (C_in * T) // 32 * 32)


def linear_few_rows(x: np.ndarray, w_t: np.ndarray, b: np.ndarray) -> np.ndarray:
    # [T, C_in], w_t = w.T [C_out, C_in] -> [T, C_out]: the same numbers as x @ w + b.
    # For a handful of rows OpenBLAS first copies ("packs") the whole weight matrix, so a
    # k+1-row verification pass costs several one-row steps; blocks of w_t small enough for
    # its unpacked kernels read every weight once for all T rows. (A product that is small
    # already is one block; computed as w_t @ x_t it reads w_t in its stored order, where
    # x @ w would read a transposed view, which measured slower.)
    x_t = np.ascontiguousarray(x.T)  # [C_in, T]
    B = block_size(x.shape[0], x.shape[1])
    y_t = np.concatenate([w_t[j : j + B] @ x_t for j in range(0, w_t.shape[0], B)])
    return y_t.T + b


def gelu_by_products(x: np.ndarray) -> np.ndarray:  # [...] -> [...]
    # gelu with x * x * x instead of x**3: NumPy's float power is several times slower
    c = np.float32(math.sqrt(2.0 / math.pi))
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * (x * x * x))))


def attention_keys_first(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    # q [nh, T, hs], k/v [nh, S, hs] -> [nh, T, hs]: `attention`, with q k^T computed as
    # (k q^T)^T -- with the long side (S cached keys) as the rows of the product OpenBLAS
    # does not repack k -- and no mask for a single new position (it may see every key)
    T, S = q.shape[1], k.shape[1]
    scores = (k @ q.transpose(0, 2, 1)).transpose(0, 2, 1)  # [nh, T, S]
    scores = scores * np.float32(1.0 / math.sqrt(q.shape[-1]))
    if T > 1:
        scores = np.where(causal_mask(T, S), scores, np.float32(-1e10))
    return softmax(scores) @ v


def is_linear_weight(name: str, w: np.ndarray) -> bool:
    return name.startswith("h.") and w.ndim == 2


class FastGPT(GPT):
    """`GPT` with the CPU fast path; same parameters, same logits to float32 rounding."""

    def __init__(self, config: GPTConfig, params: dict[str, np.ndarray]) -> None:
        super().__init__(config, params)
        for name, w in self.params.items():
            if is_linear_weight(name, w):
                # one copy, laid out [C_out, C_in]; params[name] is its transposed view
                self.params[name] = np.ascontiguousarray(w.T).T

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        w, b = self.params[name + ".weight"], self.params[name + ".bias"]
        T = x.shape[0]
        if 1 < T <= FEW_ROWS:  # w.T: the stored [C_out, C_in] array
            return linear_few_rows(x, w.T, b)
        return x @ w + b  # one row, or a prefill: one product over the whole matrix

    def attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        return attention_keys_first(q, k, v)

    def activation(self, x: np.ndarray) -> np.ndarray:
        return gelu_by_products(x)


def fast(model: GPT) -> FastGPT:
    """The fast-path twin of a plain model (its weights laid out anew, the model untouched)."""
    return FastGPT(model.config, {name: w.copy() for name, w in model.params.items()})

"""Input checks shared by the model, the sampler and `verify`.

Every check raises *before* anything is written, so a rejected call leaves every cache
at its last committed state. Messages name the argument and the allowed range.
"""

from __future__ import annotations

import numpy as np


def as_token_array(tokens, n_vocab: int, name: str = "tokens", allow_empty: bool = False):
    # tokens: [T] ints in 0..V-1 -> np.ndarray[int64] [T]
    if isinstance(tokens, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of int token ids, got {type(tokens).__name__}")
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (a list of token ids), got shape {arr.shape}")
    if arr.size == 0:
        if allow_empty:
            return arr.astype(np.int64)
        raise ValueError(f"{name} must not be empty")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integer token ids, got dtype {arr.dtype}")
    low, high = int(arr.min()), int(arr.max())
    if low < 0 or high >= n_vocab:
        bad = low if low < 0 else high
        raise ValueError(f"{name} contains id {bad}; token ids must be in 0..{n_vocab - 1}")
    return arr.astype(np.int64)


def check_generator(rng, name: str = "rng") -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"{name} must be a numpy.random.Generator (e.g. numpy.random.default_rng(0)), "
            f"got {type(rng).__name__}"
        )


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_finite(x: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or inf; it must be finite")


def check_probability_rows(x, name: str, atol: float) -> np.ndarray:
    # x: [..., V] probability rows -> the same array, checked
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"{name} must be a float32 or float64 array, got dtype {x.dtype}")
    check_finite(x, name)
    if np.any(x < 0):
        raise ValueError(f"{name} has negative entries; probabilities must be >= 0")
    sums = x.sum(axis=-1, dtype=np.float64)
    worst = float(np.max(np.abs(sums - 1.0))) if sums.size else 0.0
    if worst > atol:
        raise ValueError(
            f"{name} rows must each sum to 1 (within {atol:g}); the worst row is off by {worst:.3g}"
        )
    return x

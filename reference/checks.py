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


def check_number(
    value,
    name: str,
    *,
    integer: bool = False,
    optional: bool = False,
    allowed=None,
    where: str = "",
):
    """The one check for numeric arguments: type first, then the allowed range.

    integer   an int (numpy ints too) is required, else any real number (bools never count)
    optional  None is allowed and returned as is
    allowed   a predicate the value must satisfy; `where` says it in words for the message
    Returns the value as a plain int or float.
    """
    if value is None and optional:
        return None
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    if isinstance(value, bool) or not isinstance(value, kinds):
        wanted = ("an int" if integer else "a number") + (" or None" if optional else "")
        raise TypeError(f"{name} must be {wanted}, got {type(value).__name__}")
    number = int(value) if integer else float(value)
    if allowed is not None and not allowed(number):
        raise ValueError(f"{name} must be {where}, got {value}")
    return number


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    return check_number(
        value, name, integer=True, allowed=lambda n: n >= minimum, where=f">= {minimum}"
    )


def check_finite(x: np.ndarray, name: str) -> None:
    if not np.isfinite(x).all():  # the method: half the cost of np.all on a drafter's row
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


class NoClock:
    """What a loop marks its stages on when nobody times it: does nothing."""

    def restart(self) -> None:
        pass

    def mark(self, stage: str) -> None:
        pass


def check_clock(clock):
    # None -> NoClock(); else anything with restart() and mark(stage) (specdec.timing.StageClock)
    if clock is None:
        return NoClock()
    if not (callable(getattr(clock, "mark", None)) and callable(getattr(clock, "restart", None))):
        raise TypeError(
            f"clock must have restart() and mark(stage) methods (e.g. specdec.timing.StageClock) "
            f"or be None, got {type(clock).__name__}"
        )
    return clock

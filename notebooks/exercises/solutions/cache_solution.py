"""A solution to notebooks/exercises/my_cache.py, written from scratch with numpy only.

Grade it like your own:

    .venv/bin/specdec grade notebooks/exercises/solutions/cache_solution.py:SlotCache
"""

from __future__ import annotations

import numpy as np


class SlotCache:
    """One layer's keys and values in preallocated slots, with a commit pointer:

    slots [0, length) are committed, [length, length + pending) temporary, the rest free.
    """

    def __init__(self, capacity: int, n_head: int, head_size: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity!r}")
        self.k = np.zeros((n_head, capacity, head_size))  # [nh, N, hs] float64
        self.v = np.zeros((n_head, capacity, head_size))
        self.length = 0  # committed rows
        self.pending = 0  # temporary rows, written after the committed ones

    def write(self, k: np.ndarray, v: np.ndarray) -> None:
        # k, v [nh, T, hs] -> slots [length + pending, length + pending + T), temporary
        nh, N, hs = self.k.shape
        k, v = np.asarray(k), np.asarray(v)
        if k.shape != v.shape or k.ndim != 3 or (k.shape[0], k.shape[2]) != (nh, hs):
            raise ValueError(
                f"k and v must both be [n_head, T, head_size] = [{nh}, T, {hs}], got "
                f"{list(k.shape)} and {list(v.shape)}"
            )
        start, T = self.length + self.pending, k.shape[1]
        if start + T > N:  # checked before anything moves: a refused write changes nothing
            raise ValueError(
                f"cache full: {self.length} committed + {self.pending} temporary + {T} new "
                f"rows exceed the capacity of {N}"
            )
        self.k[:, start : start + T] = k
        self.v[:, start : start + T] = v
        self.pending += T

    def commit(self, n: int) -> None:
        # the first n temporary rows become committed; the others stay temporary
        if not 0 <= n <= self.pending:
            raise ValueError(f"commit(n) needs 0 <= n <= pending = {self.pending}, got {n!r}")
        self.length += n
        self.pending -= n

    def rollback(self) -> None:
        # forget the temporary rows by moving the pointer: the next write overwrites them
        self.pending = 0

    def committed(self) -> tuple[np.ndarray, np.ndarray]:
        # -> (keys, values), [nh, length, hs] each: views, since committed slots never change
        return self.k[:, : self.length], self.v[:, : self.length]

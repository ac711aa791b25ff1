"""A solution to notebooks/exercises/my_batch.py, written from scratch with numpy only.

Grade it like your own:

    .venv/bin/specdec grade notebooks/exercises/solutions/batch_solution.py:ragged_pass
"""

from __future__ import annotations

import numpy as np


def ragged_pass(start: np.ndarray, n_new: np.ndarray, T: int):
    # start [B], n_new [B], T -> (positions [B, T] int64, mask [B, T, S] bool, writes [B, S] bool)
    start = np.asarray(start, dtype=np.int64)
    n_new = np.asarray(n_new, dtype=np.int64)
    if start.ndim != 1 or n_new.shape != start.shape or len(start) == 0:
        raise ValueError(f"start and n_new must be [B] arrays, got {start.shape}, {n_new.shape}")
    if np.any(start < 0) or np.any(n_new < 0) or np.any(n_new > T):
        raise ValueError(f"need start >= 0 and 0 <= n_new <= T = {T}, got {start}, {n_new}")
    S = int((start + n_new).max())  # the slots any row holds once the pass has written
    s, n = start[:, None, None], n_new[:, None, None]  # [B, 1, 1]: one offset per row
    i = np.arange(T)[None, :, None]  # [1, T, 1]: the columns of the pass
    j = np.arange(S)[None, None, :]  # [1, 1, S]: the key slots
    real = i[:, :, 0] < n[:, :, 0]  # [B, T]: a real token, not padding
    # column i of row b sits at slot start[b] + i; padding reads position 0 (always in range)
    positions = np.where(real, s[:, :, 0] + i[:, :, 0], 0)
    # causal with the row's own offset, and only slots the row holds: its history and its real
    # tokens (a padding column then sees what the row's last real token sees)
    mask = (j <= s + i) & (j < s + n)
    writes = (j[:, 0] >= s[:, 0]) & (j[:, 0] < s[:, 0] + n[:, 0])  # [B, S]: the real tokens'
    return positions.astype(np.int64), mask, writes

"""A solution to notebooks/exercises/my_tree_mask.py, written from scratch with numpy only.

Grade it like your own:

    .venv/bin/specdec grade notebooks/exercises/solutions/tree_mask_solution.py:tree_attention
"""

from __future__ import annotations

import numpy as np


def tree_attention(parents: np.ndarray, length: int, path: list[int]):
    # parents [n], length, path [r - 1] -> (mask [n, length + n] bool, positions [n],
    # kept [r], moved_to [r])
    n = len(parents)
    sees = np.zeros((n, n), dtype=bool)  # sees[i, a]: node a is node i or an ancestor of it
    depth = np.zeros(n, dtype=np.int64)
    for i, parent in enumerate(parents):  # breadth-first: a parent comes before its children
        if parent >= 0:
            sees[i] = sees[parent]  # everything the parent sees: the ancestors, up to the root
            depth[i] = depth[parent] + 1
        sees[i, i] = True  # and itself; never a sibling, which shares only the parent's row
    mask = np.concatenate([np.ones((n, length), dtype=bool), sees], axis=1)
    positions = length + depth  # siblings: one position, whatever their slots
    kept = length + np.array([0, *path], dtype=np.int64)  # the root, then the path, in order
    moved_to = length + np.arange(len(kept), dtype=np.int64)  # gathered after the committed
    return mask, positions, kept, moved_to

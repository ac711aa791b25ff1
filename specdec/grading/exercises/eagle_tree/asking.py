"""The `confidence` callable a submitted `grow_eagle_tree` is handed, and its checks.

`confidence(paths) -> [r, V]` is one block pass of the drafter: it scores r nodes of one
depth, each named by its path of tokens from the root's child down. It runs in the grading
process (the worker's call comes back up the pipe: engine/sandbox.py's callbacks), so every
argument is the submission's to forge: checked here before anything is computed, and refused
with a message that says what a pass may ask. Each call is written down (`passes`), which is
how the checks see one pass per level and the nodes each pass spent.
"""

from __future__ import annotations

import numpy as np

from specdec.grading.exercises.eagle_tree.rule import Path

MOST_ROWS = 4096  # rows one pass may ask (a correct growth asks at most `top`)
MOST_PASSES = 256  # passes one growth may make (a correct one makes at most depth - 1)


class Asked:
    """A drafter's confidence, asked pass by pass; `rows(paths)` is the subclass's."""

    __name__ = "confidence"  # what the worker's stand-in is called (a crash names it)

    def __init__(self, n_vocab: int, depth: int) -> None:
        self.n_vocab, self.depth = n_vocab, depth
        self.passes: list[tuple[Path, ...]] = []  # in the order asked, rows as asked
        self.scored: set[Path] = {()}  # the root's row is handed over, not asked

    def __call__(self, paths) -> np.ndarray:
        paths = self.checked(paths)
        as_tuples = [tuple(int(t) for t in row) for row in paths]
        self.passes.append(tuple(as_tuples))
        rows = self.rows(paths)
        self.scored.update(as_tuples)
        return rows

    def rows(self, paths: np.ndarray) -> np.ndarray:  # [r, d] -> [r, V] float64
        raise NotImplementedError

    def checked(self, paths) -> np.ndarray:
        # the submission's argument -> [r, d] int64, or a ValueError saying what a pass asks
        if len(self.passes) >= MOST_PASSES:
            raise ValueError(
                f"more than {MOST_PASSES} passes in one growth: one pass scores a whole level"
            )
        if isinstance(paths, (list, tuple)) and len(paths) > MOST_ROWS:
            raise ValueError(f"one pass of {len(paths):,} rows: a level has at most `top`")
        try:
            array = np.asarray(paths)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(
                "confidence(paths) takes an int array [r, d]: one row per node, its tokens "
                "from the root's child down"
            ) from None
        if array.dtype.kind not in "iu" or array.ndim != 2:
            raise ValueError(
                f"confidence(paths) takes an int array [r, d] (one row per node, all of depth "
                f"d), got {kind_of(array)}"
            )
        r, d = array.shape
        if r == 0 or r > MOST_ROWS:
            raise ValueError(f"a pass scores 1 to {MOST_ROWS} nodes, not {r}")
        if d == 0:
            raise ValueError(
                "the root's row is handed to you (root_confidence); a pass scores nodes at "
                "depth 1 or more"
            )
        if d >= self.depth:
            raise ValueError(
                f"a pass scored nodes at depth {d}, but nodes at depth {self.depth} = depth "
                f"are leaves and nothing deeper exists: passes score depths 1..depth - 1"
            )
        if array.min() < 0 or array.max() >= self.n_vocab:
            raise ValueError(f"paths hold token ids 0..{self.n_vocab - 1}, got {array.tolist()}")
        for row in array:
            parent = tuple(int(t) for t in row[:-1])
            if parent not in self.scored:
                raise ValueError(
                    f"the node {list(row)} was asked before its parent {list(parent)} was "
                    f"scored: a node's row is read from its parent's output, so a pass scores "
                    f"nodes whose parents earlier passes scored"
                )
        return array.astype(np.int64)


def kind_of(array: np.ndarray) -> str:
    return f"an array of shape {list(array.shape)} and dtype {array.dtype}"


class TableConfidence(Asked):
    """A toy drafter's confidence: row(path) from a table the case holds."""

    def __init__(self, table, n_vocab: int, depth: int) -> None:
        super().__init__(n_vocab, depth)
        self.table = table  # path -> [V] float64

    def rows(self, paths: np.ndarray) -> np.ndarray:
        return np.stack([self.table(tuple(int(t) for t in row)) for row in paths])

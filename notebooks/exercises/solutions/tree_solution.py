"""A solution to notebooks/exercises/my_tree.py, written from scratch with numpy only.

Grade it like your own:

    .venv/bin/specdec grade notebooks/exercises/solutions/tree_solution.py:verify_tree

It returns a plain tuple (path, token), which the contract allows.
"""

from __future__ import annotations

import numpy as np

WITHOUT_REPLACEMENT = "without replacement"  # tree.draws of a sibling drawn without repeats


def sample(weights: np.ndarray, rng: np.random.Generator) -> int:
    # [V] non-negative weights -> one index, drawn in proportion to them
    return int(rng.choice(len(weights), p=weights / weights.sum()))


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    # [V], [V] -> norm(max(0, p - q)): what the next sibling faces after q's refusal.
    # All zero only when p == q, where a refusal has probability 0: keep p then.
    gap = np.maximum(p - q, 0.0)
    return gap / gap.sum() if gap.sum() > 0 else p


def sibling_law(tree, child: int, earlier: list[int]) -> np.ndarray:
    # -> [V] the law tree.tokens[child] was drawn from, given its earlier siblings' tokens:
    # its own row, minus those tokens and renormalised when drawn without replacement
    q = np.asarray(tree.q[child], dtype=np.float64)
    if tree.draws[child] == WITHOUT_REPLACEMENT and earlier:
        q = q.copy()
        q[earlier] = 0.0
        q /= q.sum()
    return q


def verify_tree(p_rows: np.ndarray, tree, rng: np.random.Generator):
    # p_rows [n, V] (row i = target after the path to node i), tree -> (path, token)
    node, path = 0, []
    while True:
        p = np.asarray(p_rows[node], dtype=np.float64)  # the target after the path so far
        earlier: list[int] = []
        for child in tree.children(node):
            x = int(tree.tokens[child])
            q = sibling_law(tree, child, earlier)
            if rng.random() < min(1.0, p[x] / q[x]):  # keep x with min(1, p(x) / q_j(x))
                path.append(child)
                node = child
                break
            p = residual(p, q)
            earlier.append(x)
        else:  # every child refused, or a leaf: one sample of the current p
            return tuple(path), sample(p, rng)

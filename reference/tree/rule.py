"""Exact multi-candidate acceptance: which path of a tree the target keeps, and its law.

At node s with target row p = p(. | path to s), the children x_1, x_2, .. are tried in
order; each faces the residual left by the ones before it. docs/algorithm.md ("Tree drafts")
proves that the emitted tokens follow the target's law for every drawing rule of
reference/tree/shape.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reference.checks import check_generator, check_probability_rows
from reference.sampling import sample_token
from reference.tree.shape import WITHOUT_REPLACEMENT, Tree, check_tree
from reference.verification import ROW_SUM_ATOL, accepts, residual_distribution


@dataclass(frozen=True)
class TreeVerification:
    path: tuple[int, ...]  # accepted node ids from depth 1 down (the root excluded)
    token: int  # the sample after the path: residual after rejections, or from a leaf's row

    def emitted(self, tree: Tree) -> list[int]:
        """The path's tokens + [token]."""
        return tree.path_tokens(self.path) + [int(self.token)]


def without_tokens(q: np.ndarray, tokens: Sequence[int]) -> np.ndarray:
    # [V] -> [V] float64: q with `tokens` removed, renormalised; the law of the next sibling
    # drawn without replacement (zeros if nothing is left)
    r = q.astype(np.float64).copy()
    r[list(tokens)] = 0.0
    total = r.sum()
    return r / total if total > 0 else r


def sibling_rows(tree: Tree, node: int) -> list[tuple[int, np.ndarray]]:
    # -> [(child, q_j [V])]: for each child of `node`, in order, the law it was drawn from
    # GIVEN its earlier siblings: its own row for SAMPLED / POINT (drawn independently of
    # them), its row minus the earlier siblings' tokens for WITHOUT_REPLACEMENT
    out, earlier = [], []
    for child in tree.children(node):
        q = tree.q[child]
        if tree.draws[child] == WITHOUT_REPLACEMENT:
            q = without_tokens(q, earlier)
        out.append((child, q))
        earlier.append(int(tree.tokens[child]))
    return out


def verify_tree(p_rows, tree: Tree, rng: np.random.Generator) -> TreeVerification:
    # p_rows [n, V] (row i = target after the path to node i), tree -> TreeVerification
    check_generator(rng)
    check_tree(tree, np.asarray(p_rows).shape[-1])
    p_rows = check_probability_rows(p_rows, "p_rows", ROW_SUM_ATOL)
    if p_rows.shape != tree.q.shape:
        raise ValueError(
            f"p_rows must have shape {tree.q.shape} (one row per node), got {p_rows.shape}"
        )
    return verify_tree_unchecked(p_rows, tree, rng)


def verify_tree_unchecked(p_rows: np.ndarray, tree: Tree, rng) -> TreeVerification:
    # At node s with target row p = p(. | s): for each child x_j in order, drawn from q_j,
    #   accept x_j with probability min(1, p(x_j) / q_j(x_j))  -> descend into x_j
    #   else                        p <- norm(max(0, p - q_j))  (the next sibling faces it)
    # no child accepted (or a leaf): emit a sample of the current p
    node, path = 0, []
    while True:
        p = p_rows[node].astype(np.float64)
        for child, q in sibling_rows(tree, node):
            x = int(tree.tokens[child])
            if accepts(p[x], q[x], rng):
                path.append(child)
                node = child
                break
            p = residual_distribution(p, q)
        else:
            return TreeVerification(tuple(path), sample_token(p, rng))


def verify_tree_law(p_rows: np.ndarray, tree: Tree) -> dict[tuple[tuple[int, ...], int], float]:
    """Exact law of verify_tree's output for a *given* tree: {(path, token): probability}.

    float64 enumeration of the same decisions (the oracle compares it with the target's
    own law in tests/distribution/test_tree_law.py)."""
    law: dict[tuple[tuple[int, ...], int], float] = {}
    p64 = np.asarray(p_rows, dtype=np.float64)

    def walk(node: int, path: tuple[int, ...], reach: float) -> None:
        p = p64[node]
        for child, q in sibling_rows(tree, node):
            x = int(tree.tokens[child])
            a = min(1.0, p[x] / q[x])
            if reach * a > 0:
                walk(child, path + (child,), reach * a)
            reach *= 1.0 - a
            if reach <= 0:
                return
            p = residual_distribution(p, q)
        for y in np.flatnonzero(p > 0):
            law[(path, int(y))] = law.get((path, int(y)), 0.0) + reach * float(p[y])

    walk(0, (), 1.0)
    return law

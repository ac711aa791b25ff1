"""The tree itself: nodes in breadth-first order, how each was drawn, and its checks.

    node  = (token, parent, depth, q row, how it was drawn)
    depth = number of edges from the root; a node at depth d sits at absolute position
            root_position + d, whatever its index in the tree

Nodes are stored in breadth-first order (parents nondecreasing), so the children of a node
are contiguous, a node's parent comes before it, and cutting a tree at a depth or at a node
count keeps a tree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reference.checks import as_token_array, check_positive_int, check_probability_rows
from reference.verification import ROW_SUM_ATOL

# How a node's token was drawn, given its parent (one rule per group of siblings):
SAMPLED = "sampled"  # from its q row, independently of its siblings (with replacement)
WITHOUT_REPLACEMENT = "without replacement"  # from its q row minus its earlier siblings' tokens
POINT = "point mass"  # chosen deterministically (top-b, heads); its q row is one-hot
ROOT = "root"  # node 0: the last committed token, not a candidate (its q row is all zero)
DRAWS = (SAMPLED, WITHOUT_REPLACEMENT, POINT)


def depths_of(parents: np.ndarray) -> np.ndarray:  # [n] parents (-1 = none) -> [n] depths
    # depth(i) = depth(parent(i)) + 1, and 0 for a node without a parent; parents come first
    depth = np.zeros(len(parents), dtype=np.int64)
    for i, parent in enumerate(parents):
        depth[i] = 0 if parent < 0 else depth[parent] + 1
    return depth


def ancestor_mask(parents: np.ndarray) -> np.ndarray:  # [n] parents -> [n, n] bool
    # mask[i, j] = node j is node i or one of its ancestors: what node i may attend to.
    # Row i is its parent's row plus itself, so siblings never see each other.
    n = len(parents)
    mask = np.zeros((n, n), dtype=bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            mask[i] = mask[parent]
        mask[i, i] = True
    return mask


@dataclass(frozen=True)
class Tree:
    """Candidate continuations of the committed tokens, in breadth-first order."""

    tokens: np.ndarray  # [n] int; tokens[0] is the root (the last committed token)
    parents: np.ndarray  # [n] int; parents[0] = -1, parents[i] < i, nondecreasing
    q: np.ndarray  # [n, V]: row i is the distribution node i was drawn from (root: zeros)
    draws: tuple[str, ...]  # [n]: ROOT for node 0, else SAMPLED / WITHOUT_REPLACEMENT / POINT

    @property
    def n_nodes(self) -> int:  # n, the root included
        return len(self.tokens)

    @property
    def depths(self) -> np.ndarray:  # [n]
        return depths_of(self.parents)

    @property
    def depth(self) -> int:  # the longest path's number of candidates
        return int(self.depths.max())

    def children(self, node: int) -> list[int]:  # contiguous, in the order they are tried
        return [int(c) for c in np.flatnonzero(self.parents == node)]

    def path_tokens(self, path: Sequence[int]) -> list[int]:
        return [int(self.tokens[i]) for i in path]


def check_tree(tree: Tree, n_vocab: int) -> Tree:
    """Raise, saying what is wrong, unless `tree` is a tree that `verify_tree` can judge
    exactly: breadth-first, every q row a distribution that gives its token mass > 0, one
    drawing rule per group of siblings, point masses one-hot, no repeated token among
    siblings drawn without replacement (nor among point masses: a repeat is always rejected
    and only costs a row)."""
    if not isinstance(tree, Tree):
        raise TypeError(f"expected a reference.tree.Tree, got {type(tree).__name__}")
    tokens = as_token_array(tree.tokens, n_vocab, "tree.tokens")
    parents = np.asarray(tree.parents)
    n = len(tokens)
    if parents.shape != (n,) or not np.issubdtype(parents.dtype, np.integer):
        raise ValueError(f"tree.parents must be {n} ints (one per node), got {parents!r}")
    if parents[0] != -1 or np.any(parents[1:] < 0) or np.any(parents[1:] >= np.arange(1, n)):
        raise ValueError(
            f"tree.parents must start with -1 (the root) and give every other node an earlier "
            f"node as parent, got {parents.tolist()}"
        )
    if np.any(np.diff(parents) < 0):
        raise ValueError(
            f"tree nodes must be in breadth-first order (parents nondecreasing, so that the "
            f"children of a node are contiguous), got parents {parents.tolist()}"
        )
    q = check_probability_rows(np.asarray(tree.q), "tree.q", math.inf)
    if q.shape != (n, n_vocab):
        raise ValueError(f"tree.q must have shape {(n, n_vocab)}, got {q.shape}")
    draws = tuple(tree.draws)
    if len(draws) != n or draws[0] != ROOT or any(d not in DRAWS for d in draws[1:]):
        raise ValueError(
            f"tree.draws must be ROOT for node 0 then one of {DRAWS} per node, got {draws}"
        )
    if np.any(q[0] != 0):
        raise ValueError("the root's q row must be all zero: the root is committed, not drawn")
    if n > 1:
        sums = q[1:].sum(axis=-1, dtype=np.float64)
        if np.max(np.abs(sums - 1.0)) > ROW_SUM_ATOL:
            raise ValueError("every candidate's q row must sum to 1")
        if np.any(q[np.arange(1, n), tokens[1:]] <= 0):
            raise ValueError("a candidate has probability 0 under the q row it was drawn from")
    for node in range(n):
        check_siblings(tokens, q, draws, tree.children(node))
    return tree


def check_siblings(tokens: np.ndarray, q: np.ndarray, draws: tuple, children: list[int]) -> None:
    if not children:
        return
    kinds = {draws[c] for c in children}
    if len(kinds) != 1:
        raise ValueError(f"siblings {children} mix drawing rules {sorted(kinds)}; use one")
    kind = kinds.pop()
    picked = tokens[children]
    if kind == POINT and np.any(q[children, picked] != 1.0):
        raise ValueError(f"point-mass candidates {children} need one-hot q rows at their token")
    if kind in (POINT, WITHOUT_REPLACEMENT) and len(set(picked.tolist())) < len(children):
        raise ValueError(f"siblings {children} drawn as {kind!r} repeat a token")
    if kind == WITHOUT_REPLACEMENT and np.any(q[children] != q[children[0]]):
        raise ValueError(
            f"siblings {children} drawn without replacement must share one q row (the "
            f"distribution before any of them was removed)"
        )


@dataclass(frozen=True)
class TreeShape:
    """A tree's topology, without tokens: what a static tree drafter fills in."""

    parents: tuple[int, ...]  # [n]: -1 for the root, then breadth-first as in Tree

    @classmethod
    def of_widths(cls, widths: Sequence[int]) -> TreeShape:
        # (b_1, .., b_D) -> every node at depth d-1 gets b_d children; (2, 2) has 1+2+4 nodes
        parents, level = [-1], [0]
        for b in widths:
            b = check_positive_int(b, "a tree width")
            nxt = []
            for node in level:
                for _ in range(b):
                    parents.append(node)
                    nxt.append(len(parents) - 1)
            level = nxt
        return cls(tuple(parents))

    def __post_init__(self) -> None:
        p = np.asarray(self.parents, dtype=np.int64)
        n = len(p)
        ok = n >= 1 and p[0] == -1 and np.all(p[1:] >= 0) and np.all(p[1:] < np.arange(1, n))
        if not ok or np.any(np.diff(p) < 0):
            raise ValueError(
                f"a TreeShape is a list of parents in breadth-first order: -1 for the root, "
                f"then for each node an earlier node, nondecreasing; got {list(self.parents)}"
            )

    @property
    def depths(self) -> np.ndarray:  # [n]
        return depths_of(np.asarray(self.parents))

    def limited(self, max_depth: int, max_nodes: int) -> TreeShape:
        # the nodes of depth <= max_depth, then the first max_nodes of them (breadth-first
        # order makes both cuts keep a tree)
        keep = int(np.sum(self.depths <= max_depth))
        return TreeShape(self.parents[: max(1, min(keep, max_nodes))])

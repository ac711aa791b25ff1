"""The tree-mask exercise's known mistakes: each rebuilds, from a case, the wrong answer a
usual slip gives (a sibling seen, positions by slot, the root dropped, ...), with the hint
that explains it. checks.py gives the hint of the first mistake that reproduces every wrong
case of a check."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specdec.grading.exercises.tree_mask.cases import Case, depths, expected
from specdec.grading.project import ancestor_mask


def tree_part(case: Case, tree: np.ndarray, committed: bool = True) -> np.ndarray:
    # [n, n] -> [n, length + n] with every committed column True (or False)
    ones = np.full((case.n, case.length), committed, dtype=bool)
    return np.concatenate([ones, tree.astype(bool)], axis=1)


def ancestors(case: Case) -> np.ndarray:  # [n, n] ancestors-or-self
    return ancestor_mask(np.array(case.parents, dtype=np.int64))


def same_parent(case: Case) -> np.ndarray:  # [n, n]: j is i, or shares i's parent
    p = np.array(case.parents)
    return (p[:, None] == p[None, :]) & (p[:, None] >= 0) | np.eye(case.n, dtype=bool)


def parent_or_self(case: Case) -> np.ndarray:  # [n, n]
    m = np.eye(case.n, dtype=bool)
    for i, p in enumerate(case.parents):
        if p >= 0:
            m[i, p] = True
    return m


def shallower(case: Case) -> np.ndarray:  # [n, n]: every node of a smaller depth, and self
    d = depths(case)
    return (d[None, :] < d[:, None]) | np.eye(case.n, dtype=bool)


Mistake = tuple[str, Callable[[Case], np.ndarray], str]

MASK_MISTAKES: list[Mistake] = [
    (
        "no-committed",
        lambda c: ancestors(c),
        "the mask has one column per cache slot: the length committed slots first, then the "
        "tree's n slots, so its shape is [n, length + n]. Every node sees every committed slot "
        "(the prompt and what earlier rounds kept): those columns are all True",
    ),
    (
        "committed-hidden",
        lambda c: tree_part(c, ancestors(c), committed=False),
        "every node sees every committed slot (columns 0..length-1 are all True): a node's "
        "context is the committed text and then its own path; masking the committed slots "
        "out leaves it reading the tree alone",
    ),
    (
        "causal",
        lambda c: tree_part(c, np.tril(np.ones((c.n, c.n), dtype=bool))),
        "this is a causal mask (node i sees every earlier slot). In a tree an earlier slot may "
        "hold a sibling or a cousin: an alternative for the same position, not part of node "
        "i's context. Node i sees only its ancestors and itself: row i = its parent's row, "
        "plus i",
    ),
    (
        "siblings",
        lambda c: tree_part(c, ancestors(c) | same_parent(c)),
        "siblings see each other: siblings are alternatives for the same position (each one a "
        "different guess of the same next token), so none is in the others' context. Node i "
        "sees its ancestors and itself only: row i = its parent's row, plus i",
    ),
    (
        "no-self",
        lambda c: tree_part(c, ancestors(c) & ~np.eye(c.n, dtype=bool)),
        "a node must see itself (the diagonal): as in a causal mask, the query at slot i "
        "attends to its own key too. The mask is ancestors-OR-SELF: row i = its parent's row, "
        "plus i",
    ),
    (
        "parent-only",
        lambda c: tree_part(c, parent_or_self(c)),
        "node i sees its parent but not the ancestors above it: its context is the whole path "
        "from the root down to it. Build row i from its parent's row (which already holds "
        "every ancestor), plus i",
    ),
    (
        "transposed",
        lambda c: tree_part(c, ancestors(c).T),
        "the mask is transposed: row i must list what node i attends to (its ancestors), not "
        "the nodes that attend to it (its descendants)",
    ),
    (
        "levels",
        lambda c: tree_part(c, shallower(c)),
        "node i sees every node of a smaller depth: most of them are not on its path (its "
        "parent's siblings, their children). It sees its ancestors only: row i = its parent's "
        "row, plus i",
    ),
    (
        "everything",
        lambda c: tree_part(c, np.ones((c.n, c.n), dtype=bool)),
        "every node sees every slot: that is no mask. Node i sees the committed slots, its "
        "ancestors and itself",
    ),
]

POSITION_MISTAKES: list[Mistake] = [
    (
        "by-slot",
        lambda c: c.length + np.arange(c.n),
        "positions by slot (length + i): a slot is only where a node is stored. Siblings are "
        "guesses for the same next token, so they share one position: node i sits at "
        "length + depth(i), its depth being the number of edges up to the root",
    ),
    (
        "slot-no-length",
        lambda c: np.arange(c.n),
        "positions by slot index and without the committed length: node i sits at "
        "length + depth(i), its depth being the number of edges up to the root",
    ),
    (
        "no-length",
        lambda c: depths(c),
        "positions are absolute: the root is the token right after the length committed "
        "ones, at position length, so node i sits at length + depth(i), not depth(i)",
    ),
    (
        "one-high",
        lambda c: c.length + 1 + depths(c),
        "one too high: the root (the last committed token, not yet cached) is written by this "
        "pass right after the length cached slots, at position length; node i sits at "
        "length + depth(i)",
    ),
    (
        "one-low",
        lambda c: c.length - 1 + depths(c),
        "one too low: length counts the slots already cached (positions 0..length-1); the "
        "root is not among them, it sits at position length, and node i at length + depth(i)",
    ),
]


def path_slots(c: Case) -> np.ndarray:  # the root, then the path, as nodes
    return np.array([0, *c.path], dtype=np.int64)


KEPT_MISTAKES: list[Mistake] = [
    (
        "root-dropped",
        lambda c: c.length + np.array(c.path, dtype=np.int64),
        "the root is kept too: it is the last committed token, which no cache held before "
        "this pass wrote it at slot length. Keep it first (kept[0] = length), then "
        "length + a for each node a of the path",
    ),
    (
        "relative",
        lambda c: path_slots(c),
        "kept holds cache slots, not node ids: node a was written at slot length + a, so kept "
        "= length + [0, *path]",
    ),
    (
        "reversed",
        lambda c: (c.length + path_slots(c))[::-1],
        "kept is in the wrong order: the i-th kept slot moves to slot length + i, so they must "
        "come in the order of the text: the root, then the path from depth 1 down",
    ),
    (
        "root-last",
        lambda c: c.length + np.array([*c.path, 0], dtype=np.int64),
        "the root comes first: it precedes the path in the text, and the i-th kept slot moves "
        "to length + i",
    ),
    (
        "root-cached",
        lambda c: c.length - 1 + path_slots(c),
        "one slot too low: the root is not in the cache before the pass (length counts the "
        "cached slots, 0..length-1); the pass writes node a at slot length + a",
    ),
    (
        "every-slot-up-to-the-last",
        lambda c: c.length + np.arange(max(c.path, default=0) + 1),
        "kept holds the root and the accepted path only, not every slot up to the last "
        "accepted node: the nodes in between (refused siblings, other branches) are dropped",
    ),
]

MOVED_MISTAKES: list[Mistake] = [
    (
        "not-moved",
        lambda c: expected(c).kept,
        "nothing moves: moved_to repeats kept. The path's slots are scattered over the "
        "tree's slots; compaction gathers them right after the committed ones, the i-th "
        "kept slot to length + i, so that the cache holds them contiguously, as a prefill "
        "of the path would",
    ),
    (
        "from-zero",
        lambda c: np.arange(len(c.path) + 1),
        "moved_to holds absolute cache slots: the committed slots 0..length-1 stay where they "
        "are, and the i-th kept slot goes to length + i",
    ),
    (
        "one-high",
        lambda c: c.length + 1 + np.arange(len(c.path) + 1),
        "the root moves to slot length (it is already there), the next kept slot to "
        "length + 1, and so on: moved_to = length + [0, 1, ..]",
    ),
]


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b))


def fitting(mistakes: list[Mistake], wrong: dict[Case, np.ndarray]) -> str:
    """The hint of the first mistake that gives exactly the submission's answer on every
    wrong case, or ''."""
    for _, rebuild, hint in mistakes:
        if all(same(np.asarray(rebuild(c)), got) for c, got in wrong.items()):
            return hint
    return ""

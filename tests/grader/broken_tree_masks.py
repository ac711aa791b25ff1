"""Broken submissions of the tree-mask exercise (notebooks/exercises/my_tree_mask.py:
tree_attention), each one small, realistic mistake on top of otherwise correct code, to test
that the grader (specdec/grading/exercises/tree_mask/checks.py) rejects them and that its hints
name the mistake."""

from __future__ import annotations

import numpy as np


def ancestors_or_self(parents) -> np.ndarray:  # [n] -> [n, n]: row i = its parent's row, + i
    n = len(parents)
    sees = np.zeros((n, n), dtype=bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            sees[i] = sees[parent]
        sees[i, i] = True
    return sees


def depths(parents) -> np.ndarray:  # [n]
    depth = np.zeros(len(parents), dtype=np.int64)
    for i, parent in enumerate(parents):
        depth[i] = 0 if parent < 0 else depth[parent] + 1
    return depth


def answer(parents, length, path, tree_mask=None, positions=None, kept=None, moved_to=None):
    # the correct answer, with any part replaced
    n = len(parents)
    if tree_mask is None:
        tree_mask = ancestors_or_self(parents)
    mask = np.concatenate([np.ones((n, length), dtype=bool), tree_mask], axis=1)
    if positions is None:
        positions = length + depths(parents)
    if kept is None:
        kept = length + np.array([0, *path], dtype=np.int64)
    if moved_to is None:
        moved_to = length + np.arange(len(path) + 1)
    return mask, positions, kept, moved_to


def correct(parents, length, path):
    return answer(parents, length, path)


# --------------------------------------------------------------------------------------------
# The mask
# --------------------------------------------------------------------------------------------


def sibling_sees_sibling(parents, length, path):
    """Row i = its parent's row plus i, and plus its siblings (every child of its parent)."""
    sees = ancestors_or_self(parents)
    p = np.asarray(parents)
    for i in range(1, len(p)):
        sees[i, p == p[i]] = True
    return answer(parents, length, path, tree_mask=sees)


def node_misses_itself(parents, length, path):
    """Ancestors only: the diagonal forgotten."""
    sees = ancestors_or_self(parents) & ~np.eye(len(parents), dtype=bool)
    return answer(parents, length, path, tree_mask=sees)


def sees_only_its_parent(parents, length, path):
    """Row i = the parent and i, not the ancestors above."""
    sees = np.eye(len(parents), dtype=bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            sees[i, parent] = True
    return answer(parents, length, path, tree_mask=sees)


def causal_mask(parents, length, path):
    """The chain's causal mask, as if the tree's slots were a sequence."""
    n = len(parents)
    return answer(parents, length, path, tree_mask=np.tril(np.ones((n, n), dtype=bool)))


def committed_masked_out(parents, length, path):
    """The committed columns left False."""
    mask, positions, kept, moved_to = correct(parents, length, path)
    mask[:, :length] = False
    return mask, positions, kept, moved_to


def no_committed_columns(parents, length, path):
    """The mask over the tree's slots only: [n, n]."""
    _, positions, kept, moved_to = correct(parents, length, path)
    return ancestors_or_self(parents), positions, kept, moved_to


def root_unseen(parents, length, path):
    """The root left out of every other node's view (it is "committed", so not in the tree?)."""
    sees = ancestors_or_self(parents)
    sees[1:, 0] = False
    return answer(parents, length, path, tree_mask=sees)


def additive_mask(parents, length, path):
    """What attention adds to its scores (0 where allowed, -inf elsewhere), not the bool mask."""
    mask, positions, kept, moved_to = correct(parents, length, path)
    return np.where(mask, 0.0, -np.inf), positions, kept, moved_to


# --------------------------------------------------------------------------------------------
# The positions
# --------------------------------------------------------------------------------------------


def positions_by_slot(parents, length, path):
    """Position = length + slot index, as in a chain."""
    return answer(parents, length, path, positions=length + np.arange(len(parents)))


def positions_one_high(parents, length, path):
    """The root placed at length + 1, as if it were already cached."""
    return answer(parents, length, path, positions=length + 1 + depths(parents))


# --------------------------------------------------------------------------------------------
# The compaction
# --------------------------------------------------------------------------------------------


def root_dropped(parents, length, path):
    """Keeps the accepted nodes only: the root's slot is forgotten."""
    kept = length + np.array(path, dtype=np.int64)
    return answer(parents, length, path, kept=kept, moved_to=length + np.arange(len(path)))


def kept_in_the_wrong_order(parents, length, path):
    """The deepest accepted node first (walking back up from the leaf)."""
    kept = (length + np.array([0, *path], dtype=np.int64))[::-1]
    return answer(parents, length, path, kept=kept)


def kept_as_node_ids(parents, length, path):
    """Node ids instead of cache slots."""
    return answer(parents, length, path, kept=np.array([0, *path], dtype=np.int64))


def nothing_moves(parents, length, path):
    """moved_to = kept: the path left where the pass wrote it."""
    kept = length + np.array([0, *path], dtype=np.int64)
    return answer(parents, length, path, kept=kept, moved_to=kept.copy())


def moved_to_from_zero(parents, length, path):
    """Destinations counted from slot 0, over the committed slots."""
    return answer(parents, length, path, moved_to=np.arange(len(path) + 1))


# --------------------------------------------------------------------------------------------
# A crash
# --------------------------------------------------------------------------------------------


def assumes_a_path(parents, length, path):
    """Checks that the path starts at a child of the root, which an empty path does not have."""
    if parents[path[0]] != 0:
        raise ValueError("the path must start at a child of the root")
    return correct(parents, length, path)

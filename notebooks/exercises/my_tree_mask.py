"""Exercise: where a tree's nodes sit in one pass, and what the accepted path keeps (notebook 11).

Grade your function from the repository root (about a second):

    .venv/bin/specdec grade notebooks/exercises/my_tree_mask.py:tree_attention

When: after notebook 11 §1 (one round of a tree, step by step) and before its §2 and §4,
which lay the pass and the compaction out: they are the place to check your reasoning
afterwards. What you need from before: notebook 02 §4's causal mask after cached slots, and
notebook 06's commit and rollback.

A tree of candidates is verified by ONE target pass: every node is fed at once, each in a slot
of its own, and the mask and the position ids must make each node's row what a plain forward
of its own path would give. After the walk (verify_tree) only the accepted path survives, and
its entries are moved next to the committed ones. You write the bookkeeping of both steps.
The grader answers three questions, each scored on its own (tree-mask, tree-positions,
tree-compaction), on a lone root, a chain, a star, notebook 11's shape and 300 random trees
drawn afresh for each grading.

The contract (`reference.tree` computes the same: shape.ancestor_mask, forward.position_ids
and forward.tree_placement, compaction.kept_slots):

    tree_attention(parents, length, path) -> (mask, positions, kept, moved_to)

    parents  [n] int64: node i's parent. parents[0] = -1: node 0 is the root, the last
             committed token, which no cache holds yet. Nodes are stored breadth-first:
             parents[i] < i and parents never decrease (so a node's children are contiguous)
    length   int >= 0: the committed slots already in the cache (slots 0..length-1, positions
             0..length-1). The pass writes node i at cache slot length + i
    path     list of node ids: the nodes verify_tree accepted, from depth 1 down (the root
             excluded), each a child of the one before; may be empty

    returns a tuple of four numpy arrays:
    mask      [n, length + n] bool: mask[i, j] = node i may attend to cache slot j (the
              committed slots first, then the pass's n slots, node a's at length + a)
    positions [n] int: node i's position id
    kept      [r] int, r = 1 + len(path): the cache slots whose K/V survive, in the order
              they end up
    moved_to  [r] int: the slot kept[t] is copied to

What a right answer keeps (what each family checks):

* tree-mask and tree-positions: node i's output row, in the one pass, equals the last row of
  a plain causal forward over the committed tokens followed by the path from the root down
  to node i — as if the target had read that path alone, at the positions it would have
  there. So a node reads what that forward reads, and nothing of a node off its path;
* tree-compaction: after the copies, `commit(r)` must leave the cache as a prefill of the
  committed tokens, the root and the accepted path would: their K/V in consecutive slots
  from `length` on, in that order (each slot was already computed at the right position,
  seeing the right context: it only has to be moved).

An example: parents [-1, 0, 0, 1], length 2, path [1, 3] (the root has children 1 and 2;
node 3 is node 1's child; 1 and then 3 were accepted):

    mask       node 0  11|1000        positions [2, 3, 3, 4]
               node 1  11|1100        kept      [2, 3, 5]
               node 2  11|1010        moved_to  [2, 3, 4]
               node 3  11|1101

Things to get right (each one is a mistake the grader names):

* siblings are guesses for the same next token: what does one see of the other, and where
  do they sit?
* a node deeper than 1 (what does a plain forward of its path read besides its parent?);
* the committed slots (the mask has length + n columns);
* the root (which pass wrote it to the cache?), and the order of what is kept.

You may use numpy only; do not import `reference.tree` (that would grade the reference).
A worked solution is in solutions/tree_mask_solution.py — try first.
"""

from __future__ import annotations

import numpy as np


def tree_attention(parents: np.ndarray, length: int, path: list[int]):
    # parents [n], length, path [r - 1] -> (mask [n, length + n] bool, positions [n],
    # kept [r], moved_to [r])
    raise NotImplementedError(
        "write tree_attention() in notebooks/exercises/my_tree_mask.py, then grade it with: "
        ".venv/bin/specdec grade notebooks/exercises/my_tree_mask.py:tree_attention"
    )

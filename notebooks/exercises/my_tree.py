"""Exercise: write tree verification yourself (notebook 11), then let the grader check it.

Grade your function from the repository root (most mistakes are rejected faster than a right
walk passes; README.md beside this file gives each exercise's grading time, measured):

    .venv/bin/specdec grade notebooks/exercises/my_tree.py:verify_tree

The grader answers two questions, each on its own. Does your output follow the target's law
(tree-law: one-hot target rows where the target's own path is certain, rows with zeros where
no impossible token may come out, then trees drawn from q with siblings sampled i.i.d.,
drawn without replacement, or the draft's top-2 as point masses; the emitted tokens,
completed by the target's own samples, must follow the target's law, a chi-square test)?
And is the rule the contract's (tree-rule: the greedy walk, and how often the first level
keeps a child, against the rate the contract's rule reaches)? An exact rule that keeps fewer
candidates passes the first and fails the second, and is told so.

The contract (the same as `reference.tree.verify_tree`; notation: p = target, q = draft):

    verify_tree(p_rows, tree, rng) -> (path, token)

    p_rows   [n, V] float64, rows sum to 1: row i is the target's distribution after the
             path from the root to node i (node 0 is the root: the last committed token)
    tree     a reference.tree.Tree of n nodes in breadth-first order; use only
               tree.tokens    [n] ints: node i's token (tokens[0], the root's, is no candidate)
               tree.parents   [n] ints: node i's parent (parents[0] = -1)
               tree.q         [n, V] float64: row i is the law node i's token was drawn from
                              (siblings drawn without replacement share the row before any
                              of them was removed; the root's row is all zero)
               tree.draws     [n] strings: how node i was drawn given its parent:
                              "sampled" (i.i.d. from its row), "without replacement" (from
                              its row minus its earlier siblings' tokens), "point mass" (chosen;
                              its row is one-hot); "root" for node 0
               tree.children(node) -> list of the node's children, in the order to try them
    rng      a numpy.random.Generator: take every random number from it
    returns  path: the accepted nodes from depth 1 down (node ids, the root excluded; each a
             child of the one before), and token: the sample after the path, in 0..V-1.
             A tuple (path, token), or any object with .path and .token.

The rule (docs/algorithm.md, "Tree drafts"): start at the root with p = p_rows[0];

    for each child c_j of the current node, in order, with x_j = tree.tokens[c_j]:
        q_j = tree.q[c_j], and for "without replacement" siblings: q_j with the earlier
              siblings' tokens set to 0, renormalised (the law x_j was drawn from, given them)
        keep x_j with probability min(1, p(x_j) / q_j(x_j))   -> path += [c_j];
              descend: the current node is c_j and p = p_rows[c_j]; start over
        refused: p <- norm(max(0, p - q_j))                    (the next sibling faces it)
    no child kept, or a leaf:  return (path, one sample of the current p)

Why it is exact: one sibling is the chain's step (keep x with min(1, p/q), else the residual);
a refused sibling leaves the residual, and the next sibling, drawn independently of the
coin that refused the first, is one more step of the same argument against that residual.

Things to get right (each one is a mistake the grader names):

* after a refusal, the next sibling faces the residual, not the original p;
* a "without replacement" sibling is judged with q minus the earlier tokens, renormalised;
* descending reads the child's own row p_rows[c] (not the parent's row or its residual);
* the final token is a sample of the target's current p: the residual after refusals, or at a
  leaf the leaf's own row p_rows[leaf] — never a draft row, the root's row or the parent's.

You may use numpy only; do not import `reference.tree` (that would grade the reference).
A worked solution is in solutions/tree_solution.py — try first.
"""

from __future__ import annotations

import numpy as np


def verify_tree(p_rows: np.ndarray, tree, rng: np.random.Generator):
    # p_rows [n, V] (row i = target after the path to node i), tree -> (path, token)
    raise NotImplementedError(
        "write verify_tree() in notebooks/exercises/my_tree.py, then grade it with: "
        ".venv/bin/specdec grade notebooks/exercises/my_tree.py:verify_tree"
    )

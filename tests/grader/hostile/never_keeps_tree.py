"""Hostile: a tree walk that never keeps a child: it returns ((), a sample of p_rows[0]) on
every call. Exact (the emitted token follows the target's law), but no verification at all.

The grader must answer: 0 where the contract's rule is required (the tree-law family fails at
tree/keeps-children, whose trees are drawn fresh for each grading; tree-rule at its greedy
walk and its fresh trees)."""

import numpy as np


def verify_tree(p_rows, tree, rng):
    p = np.asarray(p_rows[0], dtype=np.float64)
    return (), int(rng.choice(len(p), p=p / p.sum()))

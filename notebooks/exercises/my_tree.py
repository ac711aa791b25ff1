"""Exercise: write tree verification yourself (notebook 11), then let the grader check it.

Grade your function from the repository root (most mistakes are rejected faster than a right
walk passes; README.md beside this file gives each exercise's grading time, measured):

    .venv/bin/specdec grade notebooks/exercises/my_tree.py:verify_tree

When: after notebook 11 §2 (the pass: every node's target row at once) and before its §3,
which states the rule: §3 and docs/algorithm.md ("Tree drafts") are the place to check your
reasoning afterwards. What you need from before: notebook 05's chain step and its proof (what
a refused draft leaves for the token that replaces it).

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
               tree.q         [n, V] float64: row i is the draft's row node i's token was
                              drawn from (siblings drawn without replacement share the row
                              before any of them was removed; the root's row is all zero)
               tree.draws     [n] strings: how node i was drawn given its parent:
                              "sampled" (i.i.d. from its row), "without replacement" (from
                              its row, its earlier siblings' tokens excluded), "point mass"
                              (chosen; its row is one-hot); "root" for node 0
               tree.children(node) -> list of the node's children, in the order to try them
    rng      a numpy.random.Generator: take every random number from it
    returns  path: the accepted nodes from depth 1 down (node ids, the root excluded; each a
             child of the one before), and token: the sample after the path, in 0..V-1.
             A tuple (path, token), or any object with .path and .token.

The shape of the walk (the contract's): start at the root; try its children in the order
tree.children gives, one at a time, each kept or refused by one coin; the first child kept
becomes the current node and its own children are tried the same way; when no child is kept
(or the node is a leaf) the walk stops and draws one token from the target's law at that
point. With one child per node it must be notebook 05's chain round, exactly.

What a right answer keeps (what the grader holds you to):

* exactness: whatever the tree and however its siblings were drawn, the tokens the walk
  emits (the path's, then its token) follow the target's law;
* as many candidates kept as the contract's rule keeps: each child is judged the way the
  chain judges a draft, but against the target's law given everything the walk has learnt
  so far (which siblings were refused), and with the law that child was really drawn from
  given its earlier siblings. Working out those two laws is the exercise;
* the final token comes from the target's law at the point where the walk stopped, given
  the refusals there; never from a draft row.

A worked example, to check your walk by hand: V = 3, p_rows[0] = [0.5, 0.3, 0.2]; the root
has two children and no grandchildren, both drawn i.i.d. from q = [0.2, 0.6, 0.2]: node 1
holds token 1, node 2 token 0. The contract's walk returns path (1,) with probability 0.5
and path (2,) with probability 0.5, and never path (): the second child is kept whenever the
first is refused. Its token is then a draw from the kept leaf's own row (p_rows[1] or
p_rows[2]). Why is token 0, which p gives only 0.5, certain once token 1 is refused?

Things to get right (each one is a mistake the grader names):

* after a refusal, what the next sibling is judged against;
* a "without replacement" sibling: the law it was really drawn from;
* descending: which target row the child's children are judged against;
* the final token: from which law, after refusals or at a leaf.

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

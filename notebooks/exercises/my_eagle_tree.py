"""Exercise: EAGLE-2's dynamic draft tree, grown by the drafter's own confidence (notebook 14).

Grade your function from the repository root (a few seconds):

    .venv/bin/specdec grade notebooks/exercises/my_eagle_tree.py:grow_eagle_tree

Every check is exact: the tree you return and the passes you asked for are held node by node
against the contract's, on hand-made toy drafters (the example below, depth 1, tiny budgets,
ties, zero confidences, nodes not worth a pass) and on 150 random ones drawn anew for each
grading (eagle-tree); then your function grows the trees of a real EAGLE drafter in the
reference's tree loop, on prompts drawn for each grading, and every round's tree and the
text must be the reference's (eagle-tree-round). A failure shows the smallest wrong case,
the drafter's rows it read, the tree and passes expected next to yours, and a hint read from
your answers.

The setting. A tree drafter proposes several continuations at once; the target verifies the
whole tree in one pass and keeps the longest accepted path. A static tree spends its nodes on
a fixed shape; EAGLE-2 (Li et al., 2024: docs/references.md#eagle2-2024) spends them where
its drafter is confident, because the drafter's probability of a path is a good stand-in for
the chance the target accepts it. Drafting costs passes of the drafter's block; a pass over a
few rows costs about what a pass over one costs. So the tree grows LEVEL BY LEVEL, each
level's chosen nodes scored by one pass, for a fixed number of levels; only then is the node
budget spent, on the best of everything grown.

The contract:

    grow_eagle_tree(root, root_confidence, confidence, top, depth, max_nodes)
        -> (tokens, parents)

    root             int: the last committed token, the tree's root (node 0)
    root_confidence  [V] float64: the drafter's distribution over the token after the root
    confidence       a function: confidence(paths) -> [r, V] float64. `paths` is an int array
                     [r, d], one row per node at depth d >= 1, the node's tokens from the
                     root's child down; row i of the answer is the drafter's distribution over
                     the token after that node. ONE CALL IS ONE PASS of the drafter's block;
                     every distribution is at temperature 1, whatever the round samples at
    top              int >= 1: the most children a node offers, and the most nodes a level
                     expands
    depth            int >= 1: the levels of candidates (depth 1: the root's children only)
    max_nodes        int >= 1: the most candidates the tree keeps, the root not counted

    returns two 1-D int arrays of the same length n + 1 (n <= max_nodes), the root first:
    tokens[0] = root, parents[0] = -1; for i >= 1, node i's token and its parent's index.

What a correct answer keeps (what the grader checks, in words):

* A node's score is the probability, under the drafter, that the draft follows the path from
  the root to it; the root's is 1. A node offers as children its `top` likeliest tokens,
  best first (equal probabilities: the smaller token first), never a token of probability 0.
* Nodes are numbered in the order they are created: level by level; within a level, by
  parent (in the parents' node numbers), each parent's children best first. Ranking is by
  score,
  larger first; on a tie the node created first wins. The returned tree numbers the kept
  nodes in that same order (so parents[i] < i, and the parents never decrease).
* Level 1 is the root's children. Each level before the last chooses at most `top` of its
  nodes, the best ranked, and ONE call of `confidence` scores them all; their children form
  the next level. A node at depth `depth` is never scored.
* A chosen node is left out of its level's pass when even a child ranked immediately after
  it, among the candidates made so far, would fall outside the max_nodes best (ask yourself
  why a child can never rank higher than that). Take that bound literally: count only the
  candidates ranked above the node itself. (With ties it is a little loose: a child also
  loses to the nodes created before it with the same score, so a row may be spent on a node
  none of whose children can be kept; the grader expects the literal bound.) No call is made
  for a level that has nothing left to score. Growth ends after `depth` levels, or
  earlier when nothing is left to expand.
* At the end, the max_nodes best candidates of ALL those created are the tree. It is closed
  under parents: a kept node's parent is kept, by the way scores and ties work.

A worked example (V = 4, root = 9, top = 2, depth = 3, max_nodes = 4):

    root_confidence            = [0.5, 0, 0.25, 0.25]
    confidence after [0]       = [0, 0.75, 0, 0.25]
    confidence after [2]       = [0, 0.5, 0.5, 0]
    confidence after [0, 1]    = [0.5, 0, 0, 0.5]

    level 1: nodes 1 (token 0, score 0.5) and 2 (token 2, 0.25; token 3 ties it and loses)
    pass 1:  confidence([[0], [2]])
    level 2: nodes 3 (token 1 under node 1, 0.375), 4 (token 3 under 1, 0.125),
             5 (token 1 under 2, 0.125), 6 (token 2 under 2, 0.125)
    pass 2:  confidence([[0, 1]]): nodes 3 and 4 are the level's best two, but three
             candidates (nodes 1, 3, 2) already rank above node 4, so no child of it could
             be among the 4 kept
    level 3: nodes 7 (token 0 under 3, 0.1875) and 8 (token 3 under 3, 0.1875): leaves
    kept:    nodes 1, 3, 2, 7 (the best four; 7 beats 8 on the tie, and a level-3 node
             beats the level-2 nodes 4, 5, 6); in creation order 1, 2, 3, 7 they become
             nodes 1..4 of the answer:
             tokens = [9, 0, 2, 1, 0], parents = [-1, 0, 0, 1, 3]

Things the grader catches (each a mistake it was tested on):

* growing one node at a time, always the best unexpanded one, until max_nodes exist;
* keeping the first max_nodes created instead of the best of all;
* a node's own probability taken as its score;
* expanding every node of a level, or making one pass per node;
* ties to the later node; the root counted in max_nodes; a pass spent on a node that can
  have no kept child; children of probability 0.

You may use numpy only; do not import `reference` (that would grade the reference).
A worked solution is in solutions/eagle_tree_solution.py — try first.
"""

from __future__ import annotations

import numpy as np


def grow_eagle_tree(
    root: int, root_confidence: np.ndarray, confidence, top: int, depth: int, max_nodes: int
):
    # root, root_confidence [V], confidence(paths [r, d]) -> [r, V], top, depth, max_nodes
    # -> (tokens [n + 1], parents [n + 1]), the root first, n <= max_nodes
    raise NotImplementedError(
        "write grow_eagle_tree() in notebooks/exercises/my_eagle_tree.py, then grade it with: "
        ".venv/bin/specdec grade notebooks/exercises/my_eagle_tree.py:grow_eagle_tree"
    )

"""A solution to notebooks/exercises/my_eagle_tree.py, written from scratch with numpy only.

Grade it like your own:

    .venv/bin/specdec grade notebooks/exercises/solutions/eagle_tree_solution.py:grow_eagle_tree
"""

from __future__ import annotations

import numpy as np


def grow_eagle_tree(
    root: int, root_confidence: np.ndarray, confidence, top: int, depth: int, max_nodes: int
):
    # root, root_confidence [V], confidence(paths [r, d]) -> [r, V], top, depth, max_nodes
    # -> (tokens [n + 1], parents [n + 1]), the root first, n <= max_nodes
    tokens, parents, paths = [int(root)], [-1], [()]
    scores = [1.0]  # the path's probability under the drafter: a node is verified only if
    # every node above it is accepted, so its worth is the product along the path
    rows = {0: np.asarray(root_confidence, dtype=np.float64)}  # node -> its children's c

    def rank(i: int) -> tuple:  # larger score first; a tie to the node created first
        return (-scores[i], i)

    def above(i: int) -> int:  # candidates that rank above node i
        return sum(1 for j in range(1, len(scores)) if rank(j) < rank(i))

    chosen = [0]
    for d in range(1, depth + 1):
        level = []
        for node in chosen:  # in creation order, so the tree stays breadth-first
            row = rows[node]
            for t in np.argsort(-row, kind="stable")[:top]:  # best first, ties: smaller id
                if row[t] > 0:  # a token the drafter never draws is never worth a node
                    tokens.append(int(t))
                    parents.append(node)
                    scores.append(scores[node] * float(row[t]))
                    paths.append((*paths[node], int(t)))
                    level.append(len(tokens) - 1)
        if d == depth or not level:  # the last level's nodes are leaves
            break
        best = sorted(level, key=rank)[:top]
        # a child ranks after its parent, so it can be kept only if the parent is among the
        # max_nodes - 1 best: otherwise a row of the pass would be wasted on it
        chosen = sorted(i for i in best if above(i) < max_nodes - 1)
        if not chosen:
            break
        got = confidence(np.array([paths[i] for i in chosen], dtype=np.int64))  # ONE pass
        rows.update(zip(chosen, np.asarray(got, dtype=np.float64), strict=True))
    keep = sorted(sorted(range(1, len(tokens)), key=rank)[:max_nodes])  # re-rank them all
    new_id = {0: 0} | {old: new for new, old in enumerate(keep, 1)}
    return (
        np.array([tokens[0], *(tokens[i] for i in keep)], dtype=np.int64),
        np.array([-1, *(new_id[parents[i]] for i in keep)], dtype=np.int64),
    )

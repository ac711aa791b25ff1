"""The EAGLE-2 growth exercise's contract, written here from its statement, and the usual
slips as switches of the same growth (mistakes.py names them).

The reference (reference/tree/eagle.py, EagleTreeDrafter.grow and propose_tree) grows its
tree inline, around its drafter's cache; tests/grader/test_exercise_eagle_tree.py holds this
rule equal to it, node by node. The statement:

    score(root) = 1, score(child) = score(parent) * c_parent(child's token)
    ranking: larger score first, a tie to the earlier-created node
    level d = 1..depth: every node chosen at level d - 1 offers its `top` likeliest tokens
        of positive confidence (ties: the smaller token), in the chosen nodes' order
    chosen at level d (d < depth): the `top` best nodes of level d, less any none of whose
        children could still be kept (a child ranks after its parent: it can be kept only if
        fewer than max_nodes - 1 candidates rank above the parent); one pass scores them all
    kept: the max_nodes best candidates (the root not counted), in creation order
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Path = tuple[int, ...]  # tokens from the root's child down to a node
Confidence = Callable[[np.ndarray], np.ndarray]  # paths [r, d] -> [r, V]

# the slips the switches below reproduce (mistakes.py gives each its hint)
SLIPS = (
    "best-first",  # one node at a time, the best unexpanded one, until max_nodes are made
    "no-rerank",  # keep the first max_nodes created
    "own-probability",  # a node's score is its own probability, not the path's product
    "whole-level",  # every node of a level expanded, not its `top` best
    "ties-larger",  # ties go to the later node
    "root-counted",  # max_nodes counts the root: one candidate fewer
    "no-pruning",  # a pass spent on nodes none of whose children could be kept
    "zeros-offered",  # tokens of confidence 0 offered as children
    "per-node",  # one pass per expanded node instead of one per level
)


@dataclass(frozen=True)
class Grown:
    tokens: tuple[int, ...]  # [n + 1], the root first
    parents: tuple[int, ...]  # [n + 1], -1 for the root (and, in a slip, for a node whose
    # parent was not kept)
    passes: tuple[frozenset[Path], ...]  # the paths each call of `confidence` scored
    scores: tuple[float, ...] = ()  # the kept nodes' scores, the root's 1 first (stories)


def offered(row: np.ndarray, top: int, zeros: bool = False) -> list[int]:
    # row [V] -> the `top` likeliest tokens, best first, ties to the smaller id; positive only
    order = [int(t) for t in np.argsort(-row, kind="stable")[:top]]
    return order if zeros else [t for t in order if row[t] > 0]


def ranked(scores: list[float], ids, later_first: bool = False) -> list[int]:
    # ids, best first: larger score, ties to the earlier node (the later one, in the slip)
    return sorted(ids, key=lambda i: (-scores[i], -i if later_first else i))


def could_keep_a_child(scores: list[float], node: int, budget: int, later: bool) -> bool:
    # a child of `node` ranks after it (smaller or equal score, created later): it can be
    # among the `budget` kept only if fewer than budget - 1 candidates rank above `node`
    order = ranked(scores, range(1, len(scores)), later)
    return order.index(node) < budget - 1


def grow(
    root: int,
    root_row: np.ndarray,
    confidence: Confidence,
    top: int,
    depth: int,
    max_nodes: int,
    slip: str = "",
) -> Grown:
    """The contract's tree (slip "": no slip), asking `confidence` as the contract does."""
    if slip == "best-first":
        return best_first(root, root_row, confidence, top, depth, max_nodes)
    later = slip == "ties-larger"
    budget = max_nodes - (slip == "root-counted")
    tokens, parents, scores, paths = [root], [-1], [1.0], [()]
    rows = {0: np.asarray(root_row, dtype=np.float64)}
    passes: list[frozenset[Path]] = []
    chosen = [0]
    for d in range(1, depth + 1):
        level = []
        for node in chosen:
            for t in offered(rows[node], top, slip == "zeros-offered"):
                c = float(rows[node][t])
                tokens.append(t)
                parents.append(node)
                scores.append(c if slip == "own-probability" else scores[node] * c)
                paths.append((*paths[node], t))
                level.append(len(tokens) - 1)
        if d == depth or not level:
            break
        best = level if slip == "whole-level" else ranked(scores, level, later)[:top]
        if slip != "no-pruning":
            best = [i for i in best if could_keep_a_child(scores, i, budget, later)]
        chosen = sorted(best)
        if not chosen:
            break
        groups = [[i] for i in chosen] if slip == "per-node" else [chosen]
        for group in groups:
            got = confidence(np.array([paths[i] for i in group], dtype=np.int64))
            passes.append(frozenset(paths[i] for i in group))
            rows.update(zip(group, np.asarray(got, dtype=np.float64), strict=True))
    if slip == "no-rerank":
        keep = list(range(1, min(budget, len(tokens) - 1) + 1))
    else:
        keep = sorted(ranked(scores, range(1, len(tokens)), later)[: max(budget, 0)])
    return renumbered(tokens, parents, scores, keep, passes)


def best_first(root, root_row, confidence, top, depth, max_nodes) -> Grown:
    """The growth the issue calls wrong: expand the best unexpanded candidate, one at a time,
    until max_nodes candidates exist; then keep the max_nodes best."""
    tokens, parents, scores, paths = [root], [-1], [1.0], [()]
    passes: list[frozenset[Path]] = []

    def offer(node: int, row: np.ndarray) -> None:
        for t in offered(row, top):
            tokens.append(t)
            parents.append(node)
            scores.append(scores[node] * float(row[t]))
            paths.append((*paths[node], t))

    offer(0, np.asarray(root_row, dtype=np.float64))
    expanded = {0}
    while len(tokens) - 1 < max_nodes:
        open_ = [i for i in range(1, len(tokens)) if i not in expanded and len(paths[i]) < depth]
        if not open_:
            break
        node = ranked(scores, open_)[0]
        expanded.add(node)
        got = confidence(np.array([paths[node]], dtype=np.int64))
        passes.append(frozenset([paths[node]]))
        offer(node, np.asarray(got, dtype=np.float64)[0])
    keep = sorted(ranked(scores, range(1, len(tokens)))[:max_nodes])
    return renumbered(tokens, parents, scores, keep, passes)


def renumbered(tokens, parents, scores, keep: list[int], passes) -> Grown:
    # the root and the kept ids (creation order) -> the tree, numbered 0..n in that order; a
    # kept node whose parent was dropped (only in a slip) gets -1
    new_id = {0: 0} | {old: new for new, old in enumerate(keep, 1)}
    return Grown(
        (tokens[0], *(tokens[i] for i in keep)),
        (-1, *(new_id.get(parents[i], -1) for i in keep)),
        tuple(passes),
        (1.0, *(scores[i] for i in keep)),
    )


def paths_of(tokens, parents) -> list[Path] | None:
    """The path of every node of a returned tree, or None where it is not one (a parent out of
    range or after its child)."""
    paths: list[Path] = []
    for i, (t, p) in enumerate(zip(tokens, parents, strict=True)):
        if i == 0:
            paths.append(())
        elif not 0 <= p < i:
            return None
        else:
            paths.append((*paths[p], int(t)))
    return paths

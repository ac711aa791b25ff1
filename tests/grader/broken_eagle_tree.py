"""Broken submissions of the EAGLE-2 growth exercise,
`grow_eagle_tree(root, root_confidence, confidence, top, depth, max_nodes) -> (tokens,
parents)` (notebooks/exercises/my_eagle_tree.py), each one small mistake a student makes on
top of a correct function, to test that the grader rejects it and that its hint names it.

The correct growth is written once, `grown`, with a switch per mistake (written apart from
the grader's rule.py); each variant below is that growth with its one mistake."""

from __future__ import annotations

import numpy as np


def grown(
    root,
    root_confidence,
    confidence,
    top,
    depth,
    max_nodes,
    *,
    own_probability=False,
    whole_level=False,
    later_first=False,
    budget_less_root=False,
    no_pruning=False,
    zeros=False,
    per_node=False,
    no_rerank=False,
):
    budget = max_nodes - 1 if budget_less_root else max_nodes
    tokens, parents, scores, paths = [int(root)], [-1], [1.0], [()]
    rows = {0: np.asarray(root_confidence, dtype=np.float64)}

    def rank(i):
        return (-scores[i], -i if later_first else i)

    chosen = [0]
    for d in range(1, depth + 1):
        level = []
        for node in chosen:
            row = rows[node]
            for t in np.argsort(-row, kind="stable")[:top]:
                if row[t] > 0 or zeros:
                    tokens.append(int(t))
                    parents.append(node)
                    scores.append(float(row[t]) if own_probability else scores[node] * row[t])
                    paths.append((*paths[node], int(t)))
                    level.append(len(tokens) - 1)
        if d == depth or not level:
            break
        best = level if whole_level else sorted(level, key=rank)[:top]
        if not no_pruning:
            order = sorted(range(1, len(tokens)), key=rank)
            best = [i for i in best if order.index(i) < budget - 1]
        chosen = sorted(best)
        if not chosen:
            break
        for group in [[i] for i in chosen] if per_node else [chosen]:
            got = confidence(np.array([paths[i] for i in group]))
            rows.update(zip(group, got, strict=True))
    if no_rerank:
        keep = list(range(1, min(budget, len(tokens) - 1) + 1))
    else:
        keep = sorted(sorted(range(1, len(tokens)), key=rank)[:budget])
    new_id = {0: 0} | {old: new for new, old in enumerate(keep, 1)}
    return (
        np.array([tokens[0]] + [tokens[i] for i in keep]),
        np.array([-1] + [new_id.get(parents[i], -1) for i in keep]),
    )


def correct(*args):
    return grown(*args)


def best_first_until_budget(root, root_confidence, confidence, top, depth, max_nodes):
    """EAGLE-2 as it is often summarised: expand the best unexpanded candidate, one node (one
    pass) at a time, until max_nodes candidates exist; then keep the best max_nodes."""
    tokens, parents, scores, paths = [int(root)], [-1], [1.0], [()]

    def offer(node, row):
        for t in np.argsort(-row, kind="stable")[:top]:
            if row[t] > 0:
                tokens.append(int(t))
                parents.append(node)
                scores.append(scores[node] * row[t])
                paths.append((*paths[node], int(t)))

    offer(0, np.asarray(root_confidence))
    done = {0}
    while len(tokens) - 1 < max_nodes:
        left = [i for i in range(1, len(tokens)) if i not in done and len(paths[i]) < depth]
        if not left:
            break
        node = min(left, key=lambda i: (-scores[i], i))
        done.add(node)
        offer(node, confidence(np.array([paths[node]]))[0])
    keep = sorted(sorted(range(1, len(tokens)), key=lambda i: (-scores[i], i))[:max_nodes])
    new_id = {0: 0} | {old: new for new, old in enumerate(keep, 1)}
    return np.array([tokens[0]] + [tokens[i] for i in keep]), np.array(
        [-1] + [new_id.get(parents[i], -1) for i in keep]
    )


def first_created_kept(*args):
    """No re-ranking: the first max_nodes candidates created are the tree."""
    return grown(*args, no_rerank=True)


def own_probability_as_score(*args):
    """A node's score is its own probability, not the product along its path."""
    return grown(*args, own_probability=True)


def whole_level_expanded(*args):
    """Every node of a level expanded, not its `top` best."""
    return grown(*args, whole_level=True)


def ties_to_the_later_node(*args):
    """Equal scores ranked later node first."""
    return grown(*args, later_first=True)


def root_counted_in_budget(*args):
    """max_nodes taken to count the root: one candidate fewer."""
    return grown(*args, budget_less_root=True)


def no_pruning(*args):
    """Every chosen node scored, even one none of whose children could be kept."""
    return grown(*args, no_pruning=True)


def zero_confidence_offered(*args):
    """Children of probability 0 offered when fewer than `top` are positive."""
    return grown(*args, zeros=True)


def one_pass_per_node(*args):
    """The right nodes, but one call of `confidence` for each."""
    return grown(*args, per_node=True)


VARIANTS = {
    name: f
    for name, f in list(globals().items())
    if callable(f) and getattr(f, "__module__", "") == __name__ and name not in ("grown", "correct")
}

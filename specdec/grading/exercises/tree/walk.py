"""The tree verification's rule as the grader states it, and the call of a submitted one.

`Rule` is the contract's walk (reference/tree/rule.py, docs/algorithm.md "Tree drafts") with
switches for the usual mistakes; `rule_law` enumerates the law of (path, token) a rule gives
on a tree, so that a check can hold a submission's outcomes against the contract's law and
against each mistake's. `call_tree` calls the submission and holds it to the contract.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specdec.grading.engine.laws import Context, Law, leftover
from specdec.grading.engine.quoting import shown_value
from specdec.grading.engine.replies import whole_number, whole_numbers
from specdec.grading.engine.submission import (
    Submission,
    SubmissionCrash,
    call_each_safely,
    show_inputs,
)
from specdec.grading.project import Tree

# how a group of siblings was drawn: the strings of reference/tree/shape.py's Tree.draws
ROOT, SAMPLED, WITHOUT_REPLACEMENT, POINT = "root", "sampled", "without replacement", "point mass"


def make_tree(tokens, parents, q: np.ndarray, draws: tuple[str, ...]):
    """The reference's Tree (the type the contract hands over), from plain values."""
    return Tree(
        np.asarray(tokens, dtype=np.int64),
        np.asarray(parents, dtype=np.int64),
        np.asarray(q, dtype=np.float64),
        tuple(draws),
    )


# --------------------------------------------------------------------------------------------
# The rule, written from its statement, and the usual mistakes as switches away from it
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """The walk down the tree; every field at its default is the contract's rule."""

    residual: str = "max"  # what a refused sibling leaves to the next one: "max",
    # norm(max(0, p - q_j)); "none": p itself; "abs": norm(|p - q_j|)
    removed: str = "renormalised"  # without replacement, q_j is q minus the earlier
    # siblings' tokens, "renormalised"; "zeroed": not renormalised; "kept": q itself
    reread: bool = True  # descending into c, the walk reads p_rows[c]
    last: str = "current"  # the final token's law: "current" p; "q": the last sibling's law
    # (a leaf: its own q row); "root": p_rows[0]; "parent": at a leaf, its parent's row
    keep_with_p: bool = False  # keep x with p(x), then p without x (exact, keeps fewer)
    first_only: bool = False  # try the first child only (exact, keeps fewer)


CONTRACT = Rule()


def sibling_law(tree, child: int, earlier: list[int], removed: str = "renormalised"):
    # -> [V] the law child's token was drawn from, given its earlier siblings' tokens
    q = np.asarray(tree.q[child], dtype=np.float64)
    if tree.draws[child] != WITHOUT_REPLACEMENT or not earlier or removed == "kept":
        return q
    rest = q.copy()
    rest[earlier] = 0.0
    return rest if removed == "zeroed" else rest / rest.sum()


def without(p: np.ndarray, x: int) -> np.ndarray:
    # [V] -> p with x removed, renormalised (the law after a refusal under keep-with-p(x))
    rest = p.copy()
    rest[x] = 0.0
    return rest / rest.sum()


def rule_law(P: np.ndarray, tree, rule: Rule = CONTRACT) -> Law:
    """P [n, V], a fixed tree -> {(path, token): probability} of the walk under `rule`,
    enumerated in float64 (P(reach) times each decision's probability)."""
    law: Law = {}

    def walk(node: int, path: tuple, reach: float, p: np.ndarray) -> None:
        q = np.asarray(tree.q[node], dtype=np.float64)
        earlier: list[int] = []
        children = tree.children(node)
        for child in children[:1] if rule.first_only else children:
            x = int(tree.tokens[child])
            q = sibling_law(tree, child, earlier, rule.removed)
            keep = p[x] if rule.keep_with_p else min(1.0, p[x] / q[x])
            if keep > 0:
                walk(child, path + (child,), reach * keep, P[child] if rule.reread else p)
            reach *= 1.0 - keep
            if reach <= 0:
                return
            if rule.keep_with_p:
                p = without(p, x)
            elif rule.residual == "max":
                p = leftover(p, q)
            elif rule.residual == "abs":
                p = np.abs(p - q) / np.abs(p - q).sum()
            earlier.append(x)
        leaf = not children
        row = {
            "current": p,
            "q": q,
            "root": P[0],
            "parent": P[int(tree.parents[node])] if leaf and node > 0 else p,
        }[rule.last]
        row = row / row.sum()
        for y in np.flatnonzero(row > 0):
            law[(path, int(y))] = law.get((path, int(y)), 0.0) + reach * float(row[y])

    walk(0, (), 1.0, np.asarray(P[0], dtype=np.float64))
    return law


# The usual mistakes, each with the words that explain it, in the order they are tried
MISTAKES: tuple[tuple[Rule, str], ...] = (
    (
        Rule(residual="none"),
        "each sibling is judged against the original p: after a refused sibling x_j the next "
        "one must face the residual norm(max(0, p - q_j)), and the final sample (every child "
        "refused) comes from that residual too. Without the update, a token the earlier "
        "siblings already covered gets a second chance and comes out too often",
    ),
    (
        Rule(residual="abs"),
        "after a refused sibling you keep tokens where q_j >= p: the residual is "
        "max(0, p - q_j), normalised, which is 0 wherever q_j covers p (a refused token never "
        "comes back); |p - q_j| gives those tokens mass",
    ),
    (
        Rule(removed="zeroed"),
        "siblings drawn without replacement: sibling j was drawn from q with the earlier "
        "siblings' tokens removed AND renormalised (divide by what is left), and must be "
        "judged with that law. The full row q, or the row with those tokens zeroed but not "
        "renormalised, makes q_j(x_j) too small, so later siblings are kept too often",
    ),
    (
        Rule(reread=False),
        "after accepting child c you keep judging with the row you had (its parent's, or "
        "the parent's residual): descend means p <- p_rows[c], the target's row after the "
        "path to c, for c's children and for the final sample",
    ),
    (
        Rule(last="q"),
        "your final token is drawn from a draft row (q): the token after the walk is a "
        "sample of the target's current p, the residual after refusals or, at a leaf, "
        "p_rows[leaf]",
    ),
    (
        Rule(last="root"),
        "your final token comes from the root's row p_rows[0] whatever the path: it must "
        "come from the row of the node where the walk stopped (its residual if children "
        "were refused, p_rows[leaf] at a leaf)",
    ),
    (
        Rule(last="parent"),
        "after a full path down to a leaf, the token must be sampled from the leaf's own row "
        "p_rows[leaf] (the target after the whole path); yours comes from the row of the "
        "leaf's parent, one row too early",
    ),
)
SLOWER = (  # exact rules that keep fewer candidates: the rule family's business
    (
        Rule(keep_with_p=True),
        "keeping x with p(x) and resampling from p without x (exact for any q, but it keeps "
        "fewer candidates)",
    ),
    (Rule(first_only=True), "trying only the first child of each node (exact, keeps fewer)"),
)


# --------------------------------------------------------------------------------------------
# Calling the submission
# --------------------------------------------------------------------------------------------


def shown_inputs(P: np.ndarray, tree) -> dict:
    return {
        "p_rows": P,
        "tree.tokens": np.asarray(tree.tokens),
        "tree.parents": np.asarray(tree.parents),
        "tree.draws": tuple(tree.draws),
        "tree.q": np.asarray(tree.q),
    }


def describe_call(P: np.ndarray, tree) -> str:
    return (
        f"verify_tree(p_rows [{P.shape[0]}, {P.shape[1]}] float64, tree with parents "
        f"{np.asarray(tree.parents).tolist()}, tokens {np.asarray(tree.tokens).tolist()}, "
        f"draws {sorted(set(tree.draws[1:]))}, rng)"
    )


def breach(message: str, P: np.ndarray, tree) -> SubmissionCrash:
    crash = SubmissionCrash(
        ValueError(message),
        "the value your verify_tree returned",
        show_inputs(**shown_inputs(P, tree)),
    )
    crash.call = describe_call(P, tree)
    return crash


def call_tree(sub: Submission, P: np.ndarray, tree, rng: np.random.Generator) -> tuple[tuple, int]:
    """One call on fresh copies -> (path, token), held to the contract: path lists accepted
    nodes from depth 1 down, each a child of the one before (the root's for the first)."""
    return call_tree_each(sub, [(P, tree)], rng)[0]


def call_tree_each(sub: Submission, calls: list[tuple], rng: np.random.Generator) -> list:
    """calls [(P, tree)], one after the other with the one rng -> their (path, token): the
    calls of len(calls) call_tree, made in one request when verify_tree is in a worker."""
    results = call_each_safely(
        sub,
        calls,
        (rng,),
        lambda i: shown_inputs(*calls[i]),
        "verify_tree",
        lambda i: describe_call(*calls[i]),
        lambda args: (args[0].copy(), copied(args[1])),
    )
    return [
        tree_contract(result, P, tree) for result, (P, tree) in zip(results, calls, strict=True)
    ]


def copied(tree):
    return make_tree(tree.tokens.copy(), tree.parents.copy(), tree.q.copy(), tree.draws)


def tree_contract(result, P: np.ndarray, tree) -> tuple[tuple, int]:
    """What a verify_tree returned -> (path, token), or the contract it broke."""
    if hasattr(result, "path") and hasattr(result, "token"):
        path, token = result.path, result.token
    elif isinstance(result, (tuple, list)) and len(result) == 2:
        path, token = result
    else:
        message = "must return (path, token) or an object with .path and .token; got "
        message += shown_value(result)
        raise breach(message, P, tree)
    try:  # a path is at most as long as the tree is deep: its node count bounds it
        path = tuple(whole_numbers(path, "path", tree.n_nodes))
        token = whole_number(token, "token")
    except ValueError as error:
        got = f"({shown_value(path)}, {shown_value(token)})"
        message = f"path must be node ids and token an int; got {got}: {error}"
        raise breach(message, P, tree) from None
    parent = 0
    for node in path:
        if not 0 < node < tree.n_nodes or int(tree.parents[node]) != parent:
            raise breach(
                f"returned path {list(path)}: a path lists the accepted nodes from depth 1 "
                f"down, the root (node 0) excluded, each a child of the one before it (the "
                f"tree's parents are {np.asarray(tree.parents).tolist()})",
                P,
                tree,
            )
        parent = node
    if not 0 <= token < P.shape[1]:
        raise breach(f"returned token {token}; a token is in 0..V-1 = 0..{P.shape[1] - 1}", P, tree)
    return path, token


def emitted(tree, path: tuple, token: int) -> Context:
    return tuple(int(tree.tokens[i]) for i in path) + (int(token),)

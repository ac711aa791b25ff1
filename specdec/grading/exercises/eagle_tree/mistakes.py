"""The EAGLE-2 growth exercise's known mistakes: each a slip of the contract's growth
(rule.py's switches), with the hint that names it in the student's terms. A mistake is named
only when it gives the submission's tree AND its passes on every wrong case."""

from __future__ import annotations

from specdec.grading.exercises.eagle_tree.cases import Answer, Case, same, slipped
from specdec.grading.exercises.eagle_tree.rule import Grown, paths_of

MISTAKES: list[tuple[str, str]] = [
    (
        "best-first",
        "you grow the tree one node at a time, expanding the best candidate not yet expanded "
        "until max_nodes candidates exist. That is how EAGLE-2 is often summarised, not what "
        "it does: it grows level by level, the `top` best nodes of a level expanded together "
        "in ONE pass of the drafter (a pass of a few rows costs about what a pass of one "
        "costs), for `depth` levels; only then does it rank every candidate and keep the "
        "max_nodes best",
    ),
    (
        "no-rerank",
        "you keep the first max_nodes candidates created. The growth makes more candidates "
        "than the budget on purpose: at the end rank ALL of them by their path's score and "
        "keep the max_nodes best, so a deep node on a confident path can displace a shallow, "
        "unlikely one",
    ),
    (
        "own-probability",
        "your scores are each node's own probability, not its path's: a node is worth "
        "verifying only if every node above it is accepted too, so its score is the product "
        "of the drafter's probabilities along the whole path from the root. With products a "
        "child never outscores its parent, and the kept nodes always form a tree",
    ),
    (
        "whole-level",
        "you expand every node of a level. EAGLE-2 expands only the `top` best nodes of each "
        "level (by path score): the rows of a pass are what the growth spends, and a "
        "level's weaker nodes seldom have descendants good enough to keep",
    ),
    (
        "ties-larger",
        "your ranking gives a tie to the later node; the contract gives it to the node "
        "created first (the smaller id). That also keeps the tree closed: a child of "
        "probability 1 ties its parent and must never be kept without it",
    ),
    (
        "root-counted",
        "you keep max_nodes - 1 candidates: max_nodes counts candidates only. The root (the "
        "last committed token) is always in the tree and is not one of them",
    ),
    (
        "no-pruning",
        "your tree is right, but you spend pass rows on nodes none of whose children could be "
        "kept. A child scores at most its parent and ranks after it: once max_nodes - 1 "
        "candidates or more rank above a node, no descendant of it can be kept, so leave it "
        "out of the pass (and make no pass when no chosen node is left)",
    ),
    (
        "zeros-offered",
        "you offer tokens of confidence 0 as children. Their path score is 0: the drafter "
        "says they never come next. Offer only tokens of positive confidence, even when that "
        "leaves fewer than `top`",
    ),
    (
        "per-node",
        "your tree is right, but you make one pass per expanded node. One pass of the "
        "drafter scores a whole level: call `confidence` once per level, one row per chosen "
        "node",
    ),
]


def rebuilt(case: Case, slip: str) -> Grown | None:
    try:
        return slipped(case, slip)
    except ValueError:  # the slip asks what no pass may ask: it fits no answer
        return None


def fitting(wrong: dict[Case, Answer]) -> str:
    """The hint of the first mistake that gives the submission's answer on every wrong case,
    or ''."""
    for slip, hint in MISTAKES:
        if all((g := rebuilt(c, slip)) is not None and same(a, g) for c, a in wrong.items()):
            return hint
    return ""


def generic_hint(case: Case, got: Answer, want: Grown) -> str:
    """No catalogued mistake fits: what differs first, and what the contract says of it."""
    tokens, parents = got.tokens.tolist(), got.parents.tolist()
    if len(tokens) != len(parents) or not tokens or tokens[0] != case.root or parents[0] != -1:
        return (
            "the tree starts with its root: tokens[0] = root and parents[0] = -1, then one "
            "entry per kept candidate (tokens and parents the same length)"
        )
    if paths_of(tokens, parents) is None:
        return (
            "each parent is an earlier node (0 <= parents[i] < i): the kept candidates are "
            "numbered in the order they were created, level by level, and a kept node's "
            "parent is always kept"
        )
    if got.passes != want.passes:
        if len(got.passes) != len(want.passes):
            return (
                f"{len(want.passes)} pass{'es' * (len(want.passes) != 1)} expected, you made "
                f"{len(got.passes)}: one pass per level that has a node worth expanding, "
                f"none for the last level (its nodes are leaves)"
            )
        first = next(
            i for i, (a, b) in enumerate(zip(got.passes, want.passes, strict=True)) if a != b
        )
        return (
            f"pass {first + 1} scores other nodes than the contract's: the `top` best of its "
            f"level by path score (ties to the node created first), less those none of whose "
            f"children could be kept"
        )
    if len(tokens) != len(want.tokens):
        return (
            f"the tree keeps min(max_nodes, candidates made) = {len(want.tokens) - 1} "
            f"candidates besides the root, you kept {len(tokens) - 1}"
        )
    return (
        "the passes are right, but the kept candidates differ: rank every candidate by the "
        "product of the probabilities along its path (ties to the node created first), keep "
        "the max_nodes best, and number them in the order they were created"
    )

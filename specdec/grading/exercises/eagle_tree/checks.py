"""The checks of a submitted `grow_eagle_tree(root, root_confidence, confidence, top, depth,
max_nodes) -> (tokens, parents)`: EAGLE-2's dynamic tree, grown by a drafter's confidence.

Two families, each scored on its own, every check exact (the answer is a tree of integers
and the passes asked; a correct function never fails):

    eagle-tree        the tree (node by node, in creation order) and the passes (the nodes
                      each call of `confidence` scored) are the contract's (rule.py), on five
                      groups of hand-made toy drafters (the skeleton's example; depth 1 and
                      small budgets; ties; zero confidences; pruning) and on 150 random ones
                      drawn for each grading from its secret
    eagle-tree-round  the function grows the trees of a real EagleTreeDrafter (round.py) in
                      the reference's tree loop, greedy and sampled: every round's tree, the
                      rows of its passes, and the text, the reference drafter's own

A family stops at its first failed check. The failure shows the smallest wrong case of its
group, the tree and passes expected against yours; the hint names the known mistake
(mistakes.py) that reproduces every wrong answer the submission gave on the family's cases
(or, when none does, what differs first).
"""

from __future__ import annotations

import numpy as np

from specdec.grading.engine.answers import every_wrong, group_outcome
from specdec.grading.engine.core import Check, Family, Outcome
from specdec.grading.engine.secret import grading_secret
from specdec.grading.engine.submission import Submission
from specdec.grading.exercises.eagle_tree.cases import (
    GROUPS,
    N_RANDOM,
    Answer,
    Case,
    all_cases,
    answers,
    expected,
    group_cases,
    same,
)
from specdec.grading.exercises.eagle_tree.mistakes import fitting, generic_hint
from specdec.grading.exercises.eagle_tree.round import round_checks
from specdec.grading.exercises.eagle_tree.rule import Grown, paths_of


def wrong_answers(seen: dict[Case, Answer]) -> dict[Case, Answer]:
    return {c: a for c, a in seen.items() if not same(a, expected(c))}


def tree_hint(sub: Submission, case: Case, wrong: dict[Case, Answer]) -> str:
    # every case of every group the submission gets wrong: a mistake must explain all
    every = every_wrong(wrong, lambda: wrong_answers(answers(sub, all_cases(grading_secret()))))
    return fitting(every) or generic_hint(case, wrong[case], expected(case))


def tree_lines(tokens, parents, scores=()) -> list[str]:
    """'node 1: token 2 <- 0 (0.5)': one line per node but the root, with its score if known."""
    lines = []
    for i in range(1, len(tokens)):
        score = f" ({scores[i]:.4g})" if i < len(scores) else ""
        lines.append(f"    node {i}: token {tokens[i]} <- node {parents[i]}{score}")
    return lines or ["    (the root alone)"]


def passes_text(passes) -> str:
    if not passes:
        return "none"
    return "; ".join("{" + ", ".join(str(list(p)) for p in sorted(one)) + "}" for one in passes)


def rows_read(case: Case, want: Grown) -> list[str]:
    # the confidence rows the contract's growth read: the root's and each pass's
    paths = [(), *sorted({p for one in want.passes for p in one}, key=lambda p: (len(p), p))]
    with np.printoptions(precision=4, suppress=True):
        return [
            f"    confidence after {list(p) if p else 'the root'}: {case.row(p)}"
            for p in paths[:12]
        ]


def tree_story(case: Case, got: Answer) -> list[str]:
    want = expected(case)
    lines = [f"  ({case.about})"] if case.about else []
    lines += ["  the drafter's rows (temperature 1):", *rows_read(case, want)]
    lines += [
        "expected tree (creation order, path score):",
        *tree_lines(want.tokens, want.parents, want.scores),
    ]
    tokens, parents = got.tokens.tolist(), got.parents.tolist()
    if len(tokens) == len(parents) and tokens:
        yours = tree_lines(tokens, parents) if paths_of(tokens, parents) else [f"    {parents}"]
        lines += ["your tree:", *yours]
    else:
        lines.append(f"your tree: tokens {tokens}, parents {parents}")
    lines += [
        f"expected passes: {passes_text(want.passes)}",
        f"your passes:     {passes_text(got.passes)}",
    ]
    return lines


def tree_check(group: str, what: str) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        seen = answers(sub, group_cases(group, grading_secret()))
        return group_outcome(
            seen,
            wrong_answers(seen),
            "the contract's trees and passes on {cases}",
            tree_story,
            lambda case, wrong: tree_hint(sub, case, wrong),
        )

    return Check(f"eagle-tree/{group}", what, False, run)


def eagle_tree_families(policy: str = "shrink") -> list[Family]:
    """The two families (`policy` is a loop's; the rounds here run the reference loop)."""
    groups = {name: what for name, (what, _) in GROUPS.items()}
    groups["random"] = f"{N_RANDOM} random toy drafters, drawn for this grading"
    return [
        Family(
            "eagle-tree",
            "your tree is EAGLE-2's: grown level by level, `top` nodes a pass, re-ranked, "
            "max_nodes kept",
            [tree_check(g, what) for g, what in groups.items()],
        ),
        Family(
            "eagle-tree-round",
            "inside a real EAGLE-2 drafter, your growth makes the reference's trees and text, "
            "round after round",
            round_checks(),
        ),
    ]

"""The checks of a submitted `tree_attention(parents, length, path) -> (mask, positions, kept,
moved_to)`: where a tree's nodes sit in one verification pass, and what survives it.

Three families, each scored on its own, every check exact (the answers are integers and
booleans: one wrong entry is proof). The expected answers are the reference's own, through
project.py: the mask is what `reference.tree.forward.tree_placement` builds (every committed
slot, then `ancestor_mask`), the positions are `position_ids`, the kept slots are
`kept_slots` with one catch-up token (the root), shifted to absolute cache slots.

    tree-mask         mask [n, length + n]: node i sees every committed slot, itself and its
                      ancestors; never a sibling, a cousin or a descendant
    tree-positions    positions [n]: length + depth(i), whatever slot node i is stored in
    tree-compaction   kept [r]: length, then length + a for each node a of the path;
                      moved_to [r]: length, length + 1, ..: the path gathered after the
                      committed slots

Each family runs the same five groups of cases: a lone root, a chain, a star, the notebook's
shape (widths 3, 2, 1) and a few hundred random trees (chains, stars, deep and wide ones
mixed) with random accepted paths, drawn afresh for each grading from its secret
(engine/secret.py), so that a table of the shown cases fails them: one check per group. A
family stops at its first failed check (exact, so decisive). The failure shows the smallest
wrong case of its group, and its hint names the known mistake that reproduces every wrong case
of the group (or, when none does, the first wrong entry and why it is wrong).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specdec.grading.engine.answers import group_outcome
from specdec.grading.engine.core import Check, Family, Outcome
from specdec.grading.engine.submission import Submission
from specdec.grading.exercises.tree_mask.cases import (
    GROUPS,
    N_RANDOM,
    Answer,
    Case,
    answers,
    depths,
    expected,
    group_cases,
)
from specdec.grading.exercises.tree_mask.mistakes import (
    KEPT_MISTAKES,
    MASK_MISTAKES,
    MOVED_MISTAKES,
    POSITION_MISTAKES,
    ancestors,
    fitting,
    same,
)

# --------------------------------------------------------------------------------------------
# The three parts: what each compares, its story and its hint
# --------------------------------------------------------------------------------------------


def as_mask(got: np.ndarray) -> np.ndarray | None:
    # a bool mask, or numbers that are all 0 or 1; None for anything else
    if got.dtype == bool:
        return got
    if got.size and np.all((got == 0) | (got == 1)):
        return got.astype(bool)
    return None if got.size else got.astype(bool)


def relation(case: Case, i: int, a: int) -> str:
    """What node a is to node i, in words."""
    anc = ancestors(case)
    if a == i:
        return "itself"
    if anc[i, a]:
        return "its parent" if case.parents[i] == a else "an ancestor"
    if anc[a, i]:
        return "its child" if case.parents[a] == i else "a descendant"
    if case.parents[a] == case.parents[i]:
        return "a sibling"
    return "a cousin (a node of another branch)"


def path_to(case: Case, i: int) -> list[int]:
    chain = [i]
    while case.parents[chain[-1]] >= 0:
        chain.append(case.parents[chain[-1]])
    return chain[::-1]


def mask_generic(case: Case, got: np.ndarray | None) -> str:
    want = expected(case).mask
    if got is None:
        return ADDITIVE_HINT
    if got.shape != want.shape:
        return (
            f"the mask has one row per node and one column per cache slot (the {case.length} "
            f"committed ones, then the tree's {case.n}): shape [n, length + n] = "
            f"{list(want.shape)}, not {list(got.shape)}"
        )
    i, j = (int(x) for x in np.argwhere(got != want)[0])
    if j < case.length:
        return (
            f"node {i} must see committed slot {j}: every node sees every committed slot "
            f"(columns 0..length-1 all True)"
        )
    a = j - case.length
    what = relation(case, i, a)
    route = " -> ".join(str(x) for x in path_to(case, i))
    if want[i, j]:
        return (
            f"node {i} must see slot {j}, which holds node {a}, {what}: its context is the "
            f"committed slots and its path from the root ({route})"
        )
    return (
        f"node {i} must not see slot {j}, which holds node {a}, {what}: node {a} is not on "
        f"node {i}'s path from the root ({route}), so it is no part of what node {i} follows"
    )


def show_mask(mask: np.ndarray, length: int) -> list[str]:
    if mask.ndim != 2:
        return [f"    {mask!r}"]
    lines = []
    for i, row in enumerate(mask.astype(int)):
        cells = "".join(str(int(v)) for v in row)
        lines.append(f"    node {i:2d}  {cells[:length]}|{cells[length:]}")
    return lines


@dataclass(frozen=True)
class Part:
    family: str
    what: str  # the family's verdict when it passes
    summary: str  # the check's passing line, of n cases
    wrong: Callable[[Case, Answer], np.ndarray | None]  # the submission's answer if wrong
    story: Callable[[Case, Answer], list[str]]
    hint: Callable[[Case, Answer, dict], str]  # (smallest case, its answer, every wrong
    # case's answer): the mistake that explains them all, else what is wrong on the first


def mask_wrong(case: Case, got: Answer) -> np.ndarray | None:
    mask = as_mask(got.mask)
    if mask is not None and same(mask, expected(case).mask):
        return None
    return got.mask if mask is None else mask


def mask_story(case: Case, got: Answer) -> list[str]:
    mask = as_mask(got.mask)
    lines = [
        f"expected mask, shape {list(expected(case).mask.shape)} (rows: nodes; columns: the "
        f"{case.length} committed slots | the tree's slots {case.length}.."
        f"{case.length + case.n - 1}; 1 = may attend):",
        *show_mask(expected(case).mask, case.length),
        f"yours, shape {list(got.mask.shape)}:",
    ]
    return lines + (show_mask(mask, case.length) if mask is not None else [f"    {got.mask!r}"])


ADDITIVE_HINT = (
    "the mask is boolean: True (or 1) where node i may attend to slot j, False (0) elsewhere. "
    "An additive mask (0 where allowed, -inf elsewhere) is what attention adds to its scores, "
    "built from this one: return the boolean mask"
)


def additive(mask: np.ndarray) -> bool:
    # numbers that are 0 where attention is allowed and negative (-inf) elsewhere
    return mask.dtype != bool and mask.size > 0 and bool(np.all((mask == 0) | (mask < 0)))


def mask_hint(case: Case, got: Answer, wrong: dict[Case, Answer]) -> str:
    if any(additive(a.mask) and np.any(a.mask < 0) for a in wrong.values()):
        return ADDITIVE_HINT
    masks = {c: mask_wrong(c, a) for c, a in wrong.items()}
    hint = fitting(MASK_MISTAKES, masks)
    if hint:
        return hint
    if all(additive(a.mask) for a in wrong.values()):  # all 0: no -inf seen (a lone root)
        return (
            "your mask is 0 everywhere: node i would see nothing, not even itself. If it is an "
            "additive mask (0 where allowed, -inf elsewhere: what attention adds to its "
            "scores), return the boolean one instead: True (or 1) where node i may attend"
        )
    return mask_generic(case, as_mask(got.mask))


def positions_wrong(case: Case, got: Answer) -> np.ndarray | None:
    return None if same(got.positions, expected(case).positions) else got.positions


def positions_story(case: Case, got: Answer) -> list[str]:
    return [
        f"depths    {depths(case).tolist()}",
        f"expected positions {expected(case).positions.tolist()}",
        f"yours              {np.asarray(got.positions).tolist()}",
    ]


def positions_hint(case: Case, got: Answer, wrong: dict[Case, Answer]) -> str:
    hint = fitting(POSITION_MISTAKES, {c: a.positions for c, a in wrong.items()})
    if hint:
        return hint
    want = expected(case).positions
    if got.positions.shape != want.shape:
        return f"positions has one entry per node: shape [n] = [{case.n}]"
    i = int(np.flatnonzero(got.positions != want)[0])
    route = " -> ".join(str(x) for x in path_to(case, i))
    return (
        f"node {i} is at depth {depths(case)[i]} (its path from the root: {route}), so its "
        f"position is length + depth = {case.length} + {depths(case)[i]} = {want[i]}, not "
        f"{got.positions[i]}"
    )


def compaction_wrong(case: Case, got: Answer) -> np.ndarray | None:
    want = expected(case)
    if same(got.kept, want.kept) and same(got.moved_to, want.moved_to):
        return None
    return got.moved_to if same(got.kept, want.kept) else got.kept


def compaction_story(case: Case, got: Answer) -> list[str]:
    want = expected(case)
    return [
        f"the root is node 0 at slot {case.length}; node a was written at slot {case.length} + a",
        f"expected kept     {want.kept.tolist()}",
        f"yours             {np.asarray(got.kept).tolist()}",
        f"expected moved_to {want.moved_to.tolist()}",
        f"yours             {np.asarray(got.moved_to).tolist()}",
    ]


def compaction_hint(case: Case, got: Answer, wrong: dict[Case, Answer]) -> str:
    kept_wrong = {c: a.kept for c, a in wrong.items() if not same(a.kept, expected(c).kept)}
    if kept_wrong:
        return fitting(KEPT_MISTAKES, kept_wrong) or (
            f"kept lists the cache slots that survive, in the order they end up: the root's "
            f"(slot length = {case.length}), then length + a for each node a of the path: "
            f"{expected(case).kept.tolist()} here"
        )
    moved = {c: a.moved_to for c, a in wrong.items()}
    return fitting(MOVED_MISTAKES, moved) or (
        f"moved_to[i] is where kept[i] is copied: slot length + i, right after the committed "
        f"ones: {expected(case).moved_to.tolist()} here"
    )


PARTS = {
    "tree-mask": Part(
        "tree-mask",
        "your mask lets each node see the committed slots, itself and its ancestors only",
        "the reference's mask",
        mask_wrong,
        mask_story,
        mask_hint,
    ),
    "tree-positions": Part(
        "tree-positions",
        "your positions are length + depth, as the reference's",
        "the reference's positions",
        positions_wrong,
        positions_story,
        positions_hint,
    ),
    "tree-compaction": Part(
        "tree-compaction",
        "your compaction keeps the root and the path, gathered after the committed slots",
        "the reference's kept slots and moves",
        compaction_wrong,
        compaction_story,
        compaction_hint,
    ),
}


# --------------------------------------------------------------------------------------------
# The checks and the families
# --------------------------------------------------------------------------------------------


def part_check(part: Part, group: str, what: str) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        seen = answers(sub, group_cases(group))
        return group_outcome(
            seen,
            {c: a for c, a in seen.items() if part.wrong(c, a) is not None},
            part.summary + " on {cases}",
            part.story,
            lambda case, wrong: part.hint(case, wrong[case], wrong),
        )

    return Check(f"{part.family}/{group}", what, False, run)


def tree_mask_families(policy: str = "shrink") -> list[Family]:
    """The three families (`policy` is a loop's; unused here)."""
    groups = {name: what for name, (what, _) in GROUPS.items()}
    groups["random"] = f"{N_RANDOM} random trees and paths, drawn afresh for each grading"
    return [
        Family(name, part.what, [part_check(part, g, what) for g, what in groups.items()])
        for name, part in PARTS.items()
    ]

"""The tree-mask exercise's cases, their expected answers (the reference's, through
project.py), and the call of a submitted `tree_attention` on them, each case asked once per
submission and its answer read as four arrays (checks.py judges them). The hand-made groups
are the same in every grading; the random trees are drawn afresh for each grading from its
secret (engine/secret.py)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from specdec.grading.engine.answers import AskedOnce, ask_cases, give_hint
from specdec.grading.engine.quoting import shown_value
from specdec.grading.engine.secret import grader_rng, grading_secret
from specdec.grading.engine.submission import (
    Submission,
    SubmissionCrash,
    show_inputs,
)
from specdec.grading.project import ancestor_mask, kept_slots, position_ids

COMMAND = "tree_attention"


@dataclass(frozen=True)
class Case:
    parents: tuple[int, ...]  # [n]: -1, then breadth-first (nondecreasing, parents[i] < i)
    length: int  # committed slots already in the cache
    path: tuple[int, ...]  # the accepted nodes from depth 1 down (the root excluded)

    @property
    def n(self) -> int:
        return len(self.parents)

    def arguments(self) -> tuple:
        # what the submission receives: a fresh [n] int64 array, an int, a list of ints
        return np.array(self.parents, dtype=np.int64), self.length, list(self.path)

    def describe(self) -> str:
        return (
            f"{COMMAND}(parents={list(self.parents)}, length={self.length}, path={list(self.path)})"
        )

    def size(self) -> tuple:  # the smallest case shows a mistake best
        return self.n, self.length, len(self.path), self.parents, self.path


@dataclass(frozen=True)
class Answer:
    mask: np.ndarray  # as returned (a bool mask, or the numbers it holds)
    positions: np.ndarray
    kept: np.ndarray
    moved_to: np.ndarray


def depths(case: Case) -> np.ndarray:  # [n]: the positions of a tree after 0 committed slots
    return position_ids(np.array(case.parents, dtype=np.int64), 0)


def expected(case: Case) -> Answer:
    """The reference's answer: tree_placement's mask and positions; kept_slots with one
    catch-up token (the root), in absolute slots; the i-th kept slot moves to length + i."""
    parents = np.array(case.parents, dtype=np.int64)
    committed = np.ones((case.n, case.length), dtype=bool)
    mask = np.concatenate([committed, ancestor_mask(parents)], axis=1)
    kept = case.length + kept_slots(1, case.path)
    moved_to = case.length + np.arange(len(kept), dtype=np.int64)
    return Answer(mask, position_ids(parents, case.length), kept, moved_to)


# --------------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------------

CHAIN = (-1, 0, 1, 2, 3)
STAR = (-1, 0, 0, 0, 0)
WIDTHS_3_2_1 = (-1, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 5, 6, 7, 8, 9)  # notebook 11's shape
GROUPS: dict[str, tuple[str, tuple[Case, ...]]] = {
    "lone-root": (
        "a lone root (n = 1, path empty)",
        (Case((-1,), 0, ()), Case((-1,), 4, ())),
    ),
    "chain": (
        "a chain of 5 nodes, length 3",
        tuple(Case(CHAIN, 3, p) for p in ((), (1,), (1, 2), (1, 2, 3, 4))),
    ),
    "star": (
        "a star: 4 siblings under the root, length 2",
        tuple(Case(STAR, 2, p) for p in ((), (1,), (3,), (4,))),
    ),
    "widths-3-2-1": (
        "notebook 11's shape (3, 2, 1): 16 nodes, length 6",
        tuple(Case(WIDTHS_3_2_1, 6, p) for p in ((), (2,), (3, 8), (2, 7, 13), (1, 5, 11))),
    ),
}
N_RANDOM = 300
RANDOM_SEED = 1104  # the grader's stream (from the grading's secret) of the random trees


def random_parents(rng: np.random.Generator, n: int, style: str) -> tuple[int, ...]:
    # breadth-first parents: nondecreasing and each before its node
    parents = [-1]
    for i in range(1, n):
        low = max(parents[-1], 0)
        if style == "chain":
            parent = i - 1
        elif style == "star":
            parent = 0
        elif style == "deep":  # mostly the last node, sometimes a sibling of it
            parent = i - 1 if rng.random() < 0.7 else low
        elif style == "wide":  # mostly a sibling of the last node
            parent = low if rng.random() < 0.8 else int(rng.integers(low, i))
        else:
            parent = int(rng.integers(low, i))
        parents.append(parent)
    return tuple(parents)


def random_path(rng: np.random.Generator, parents: tuple[int, ...]) -> tuple[int, ...]:
    # a walk down from the root: at each node, a random child, or stop there
    path, node = [], 0
    while True:
        children = [c for c, p in enumerate(parents) if p == node]
        if not children or rng.random() < 0.25:
            return tuple(path)
        node = int(rng.choice(children))
        path.append(node)


@lru_cache(maxsize=4)
def random_cases(secret: int, n: int = N_RANDOM) -> tuple[Case, ...]:
    """n trees of one grading, from its secret: 1 to 24 nodes (chains, stars, deep, wide and
    any breadth-first tree), 0 to 16 committed slots, and a random accepted path in each."""
    rng = grader_rng(RANDOM_SEED, secret)
    styles = ("chain", "star", "deep", "wide", "any", "any")
    cases: dict[Case, None] = {}  # n distinct cases (small trees repeat)
    while len(cases) < n:
        style = styles[int(rng.integers(len(styles)))]
        parents = random_parents(rng, int(rng.integers(1, 25)), style)
        cases[Case(parents, int(rng.integers(0, 17)), random_path(rng, parents))] = None
    return tuple(cases)


def group_cases(group: str) -> tuple[Case, ...]:
    return random_cases(grading_secret()) if group == "random" else GROUPS[group][1]


def all_cases() -> tuple[Case, ...]:
    return tuple(c for g in [*GROUPS, "random"] for c in group_cases(g))


# --------------------------------------------------------------------------------------------
# Calling the submission and reading its answer
# --------------------------------------------------------------------------------------------


def shown_of(case: Case) -> dict:
    parents, length, path = case.arguments()
    return {"parents": parents, "length": length, "path": np.array(path, dtype=np.int64)}


def breach(message: str, case: Case) -> SubmissionCrash:
    crash = SubmissionCrash(
        ValueError(message), f"the value your {COMMAND} returned", show_inputs(**shown_of(case))
    )
    crash.call = case.describe()
    crash.hint = (
        "return a tuple (mask, positions, kept, moved_to): a [n, length + n] bool array and "
        "three 1-D int arrays (see the skeleton's docstring)"
    )
    return crash


def read_answer(result, case: Case) -> Answer:
    """What the submission returned -> four arrays, or the contract it broke. Shapes and
    values are left to the checks (a wrong shape is a mistake they can name), within
    bounds: at most ANSWER_MOST entries and 2 dimensions each (the stories print them)."""
    if not isinstance(result, (tuple, list)) or len(result) != 4:
        said = shown_value(result)
        raise breach(f"must return (mask, positions, kept, moved_to); it returned {said}", case)
    arrays = []
    for name, value in zip(("mask", "positions", "kept", "moved_to"), result, strict=True):
        if isinstance(value, (list, tuple)) and len(value) > ANSWER_MOST:  # before converting
            raise breach(f"{name} has {len(value):,} entries; the contract's has {case.n}", case)
        try:
            array = np.asarray(value)
        except (TypeError, ValueError, OverflowError):
            raise breach(f"{name} is not an array: {shown_value(value)}", case) from None
        if array.dtype.kind not in "biuf":  # (not object, str, complex)
            raise breach(f"{name} must hold numbers (or booleans), got {shown_value(value)}", case)
        if array.size > ANSWER_MOST or array.ndim > 2:
            raise breach(
                f"{name} has shape {list(array.shape)}; the contract's arrays are 1-D ([n] "
                f"or [m]) and the mask 2-D ([n, length + n])",
                case,
            )
        arrays.append(array)
    return Answer(*arrays)


ANSWER_MOST = 4096  # entries of one returned array: the largest case's mask is far smaller


def crash_hint(case: Case) -> str:
    if case.n == 1:
        return (
            "a lone root: n = 1 and the path is empty (the tree had no candidate). The mask "
            "is then [1, length + 1] (every committed slot and the root itself), positions "
            "[length], kept [length], moved_to [length]"
        )
    if not case.path:
        return (
            "the path may be empty (every child of the root refused): kept is then the root "
            "alone, [length], and moved_to [length]"
        )
    if case.length == 0:
        return "length may be 0 (nothing cached yet): the mask then has no committed column"
    return ""


def copied(args: tuple) -> tuple:
    parents, length, path = args
    return parents.copy(), length, list(path)


def call_masks(sub: Submission, cases: list[Case]) -> list[Answer]:
    """The submission's answers on cases, in one request when it runs in a worker; a raise
    names the case that raised, with a hint."""
    try:
        results = ask_cases(sub, cases, shown_of, COMMAND, copied)
    except SubmissionCrash as crash:
        give_hint(crash, cases, Case.describe, lambda case, error: crash_hint(case))
        raise
    return [read_answer(result, case) for case, result in zip(cases, results, strict=True)]


# the submission's answer on each case {case: Answer}, asked once per submission and grading
# (the three families judge the same answers)
answers = AskedOnce(call_masks, grading_secret)

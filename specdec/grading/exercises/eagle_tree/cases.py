"""The EAGLE-2 growth exercise's cases and the call of a submitted
`grow_eagle_tree(root, root_confidence, confidence, top, depth, max_nodes) -> (tokens,
parents)` on them: each case a toy drafter (a table of confidence rows, one per path), asked
once per submission; its answer read as two arrays beside the passes it asked for.

Rows come in two styles: "grid", sixteenths (a sum of such products is exact in any order,
so the many ties a grid makes are ties whatever order a submission multiplies in), and
"smooth", Dirichlet rows with some entries set to 0. The shown cases are fixed; the scored
random ones are drawn for each grading from its secret (engine/secret.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from specdec.grading.engine.answers import AskedOnce, give_hint
from specdec.grading.engine.quoting import shown_value
from specdec.grading.engine.secret import grader_rng
from specdec.grading.engine.submission import (
    Submission,
    SubmissionCrash,
    call_each_safely,
    show_inputs,
)
from specdec.grading.exercises.eagle_tree.asking import TableConfidence
from specdec.grading.exercises.eagle_tree.rule import Grown, Path, grow

COMMAND = "grow_eagle_tree"
RANDOM_SEED = 61  # the grader's stream (from the secret) of the random cases
N_RANDOM = 150


@dataclass(frozen=True)
class Case:
    root: int  # the tree's root token (the last committed one)
    V: int
    top: int
    depth: int
    max_nodes: int
    seed: int  # the rows' generator
    style: str = "grid"  # "grid" (sixteenths) or "smooth"
    fixed: tuple[tuple[Path, tuple[float, ...]], ...] = ()  # rows set by hand: (path, row)
    about: str = field(default="", compare=False)

    def row(self, path: Path) -> np.ndarray:
        """[V] float64: the toy drafter's distribution after `path`, the same on every call."""
        for where, values in self.fixed:
            if where == path:
                return np.array(values, dtype=np.float64)
        rng = np.random.default_rng([self.seed, 1 + len(path), *path])
        if self.style == "grid":
            return rng.multinomial(16, rng.dirichlet(np.full(self.V, 0.7))) / 16.0
        p = rng.dirichlet(np.full(self.V, 0.6))
        dropped = rng.random(self.V) < 0.25
        dropped[int(np.argmax(p))] = False
        p = np.where(dropped, 0.0, p)
        return p / p.sum()

    def confidence(self) -> TableConfidence:
        return TableConfidence(self.row, self.V, self.depth)

    def arguments(self) -> tuple:
        # what the submission receives: root, root_confidence [V], confidence, top, depth,
        # max_nodes
        return self.root, self.row(()), self.confidence(), self.top, self.depth, self.max_nodes

    def expected(self) -> Grown:
        return expected(self)

    def describe(self) -> str:
        return (
            f"{COMMAND}(root={self.root}, root_confidence [V = {self.V}], confidence, "
            f"top={self.top}, depth={self.depth}, max_nodes={self.max_nodes})"
        )

    def size(self) -> tuple:  # the smallest case shows a mistake best
        return self.depth, self.max_nodes, self.top, self.V, self.seed


@lru_cache(maxsize=1024)
def expected(case: Case) -> Grown:
    return grow(case.root, case.row(()), case.confidence(), case.top, case.depth, case.max_nodes)


def slipped(case: Case, slip: str) -> Grown:
    return grow(
        case.root, case.row(()), case.confidence(), case.top, case.depth, case.max_nodes, slip
    )


# --------------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------------

# the skeleton's worked example: V = 4, top = 2, depth = 3, max_nodes = 4
EXAMPLE = (
    ((), (0.5, 0.0, 0.25, 0.25)),
    ((0,), (0.0, 0.75, 0.0, 0.25)),
    ((2,), (0.0, 0.5, 0.5, 0.0)),
    ((0, 1), (0.5, 0.0, 0.0, 0.5)),
)
FLAT = tuple((p, (0.25, 0.25, 0.25, 0.25)) for p in [(), *((t,) for t in range(4))])

GROUPS: dict[str, tuple[str, tuple[Case, ...]]] = {
    "example": (
        "the skeleton's worked example",
        (Case(9, 4, 2, 3, 4, 0, fixed=EXAMPLE, about="the skeleton's worked example"),),
    ),
    "shallow": (
        "depth 1, and budgets smaller than a level",
        (
            Case(1, 5, 3, 1, 2, 11, about="depth 1: the root's children only, no pass"),
            Case(2, 6, 4, 1, 9, 12, "smooth", about="depth 1, a budget larger than the level"),
            Case(3, 5, 3, 3, 2, 13, about="a budget of 2, smaller than a level"),
            Case(4, 6, 4, 3, 1, 14, "smooth", about="a budget of 1"),
        ),
    ),
    "ties": (
        "ties: flat rows, equal scores across levels",
        (
            Case(0, 4, 2, 3, 5, 21, fixed=FLAT, about="every row flat: ties everywhere"),
            Case(5, 4, 3, 3, 4, 22, fixed=FLAT, about="every row flat, three per level"),
            Case(6, 5, 2, 4, 6, 23, about="sixteenths: many equal products"),
        ),
    ),
    "zeros": (
        "tokens of confidence 0, and nothing left to expand",
        (
            Case(
                7,
                5,
                4,
                3,
                8,
                31,
                fixed=(((), (0.5, 0.0, 0.5, 0.0, 0.0)), ((0,), (0.0, 0.0, 0.0, 1.0, 0.0))),
                about="fewer tokens of positive confidence than top",
            ),
            Case(
                8,
                3,
                3,
                4,
                6,
                32,
                fixed=(((), (1.0, 0.0, 0.0)), ((0,), (0.0, 1.0, 0.0)), ((0, 1), (0.0, 0.0, 1.0))),
                about="a drafter sure of every token: a chain",
            ),
        ),
    ),
    "pruning": (
        "levels where a chosen node can have no kept child",
        (
            Case(
                2,
                4,
                2,
                3,
                2,
                41,
                fixed=(((), (0.5, 0.5, 0.0, 0.0)), ((0,), (0.5, 0.5, 0.0, 0.0))),
                about="max_nodes = 2: only the first child can be expanded usefully",
            ),
            Case(3, 6, 3, 4, 4, 42, "smooth", about="a small budget, a deep tree"),
            Case(1, 6, 4, 4, 12, 43, about="a larger tree"),
        ),
    ),
}


@lru_cache(maxsize=4)
def random_cases(secret: int, count: int = N_RANDOM) -> tuple[Case, ...]:
    """Drawn from the grading's secret: V 2..6, top 1..4, depth 1..4, max_nodes 1..12, rows
    of either style."""
    rng = grader_rng(RANDOM_SEED, secret)
    cases: dict[Case, None] = {}
    while len(cases) < count:
        V = int(rng.integers(2, 7))
        case = Case(
            int(rng.integers(V)),
            V,
            int(rng.integers(1, 5)),
            int(rng.integers(1, 5)),
            int(rng.integers(1, 13)),
            int(rng.integers(2**31)),
            "grid" if rng.random() < 0.5 else "smooth",
        )
        cases[case] = None
    return tuple(cases)


def group_cases(group: str, secret: int) -> tuple[Case, ...]:
    return random_cases(secret) if group == "random" else GROUPS[group][1]


def all_cases(secret: int) -> tuple[Case, ...]:
    return tuple(c for g in [*GROUPS, "random"] for c in group_cases(g, secret))


# --------------------------------------------------------------------------------------------
# Calling the submission and reading its answer
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    tokens: np.ndarray  # as returned, read as arrays
    parents: np.ndarray
    passes: tuple[frozenset[Path], ...]  # what it asked `confidence`, pass by pass


def same(got: Answer, want: Grown) -> bool:
    return (
        got.tokens.shape == got.parents.shape == (len(want.tokens),)
        and got.tokens.tolist() == list(want.tokens)
        and got.parents.tolist() == list(want.parents)
        and got.passes == want.passes
    )


def shown_of(call: tuple) -> dict:
    root, row, _, top, depth, max_nodes = call
    return {
        "root": root,
        "root_confidence": row,
        "top": top,
        "depth": depth,
        "max_nodes": max_nodes,
    }


def describe_call(call: tuple) -> str:
    root, row, _, top, depth, max_nodes = call
    return (
        f"{COMMAND}(root={root}, root_confidence [V = {len(row)}], confidence, top={top}, "
        f"depth={depth}, max_nodes={max_nodes})"
    )


def breach(message: str, call: tuple) -> SubmissionCrash:
    crash = SubmissionCrash(
        ValueError(message), f"the value your {COMMAND} returned", show_inputs(**shown_of(call))
    )
    crash.call = describe_call(call)
    crash.hint = (
        "return a tuple (tokens, parents) of two 1-D int arrays, the root first: tokens[0] = "
        "root, parents[0] = -1 (see the skeleton's docstring)"
    )
    return crash


ANSWER_MOST = 4096  # entries of one returned array: a correct tree has max_nodes + 1


def read_answer(result, call: tuple) -> tuple[np.ndarray, np.ndarray]:
    """What the submission returned -> two 1-D int arrays, or the contract it broke. Their
    values are left to the checks (a wrong tree is a mistake they can name)."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise breach(f"must return (tokens, parents); it returned {shown_value(result)}", call)
    arrays = []
    for name, value in zip(("tokens", "parents"), result, strict=True):
        if isinstance(value, (list, tuple)) and len(value) > ANSWER_MOST:  # before converting
            raise breach(f"{name} has {len(value):,} entries, one per node", call)
        try:
            array = np.asarray(value)
        except (TypeError, ValueError, OverflowError):
            raise breach(f"{name} is not an array: {shown_value(value)}", call) from None
        if array.ndim != 1 or array.size > ANSWER_MOST:
            raise breach(f"{name} has shape {list(array.shape)}; it is 1-D, one per node", call)
        if array.dtype.kind not in "iu" and not (
            array.dtype.kind == "f" and np.all(np.isfinite(array)) and np.all(array == array // 1)
        ):
            raise breach(f"{name} must hold whole numbers, got {shown_value(value)}", call)
        arrays.append(array.astype(np.int64))
    return arrays[0], arrays[1]


def crash_hint(call: tuple, error: BaseException) -> str:
    """Why a correct idea may crash on this call."""
    text = str(error)
    if "are leaves" in text:
        return (
            "the tree has `depth` levels of candidates; the last level's nodes are offered as "
            "children but never expanded, so no pass scores them"
        )
    if "before its parent" in text:
        return "expand a level only after the pass that scored its parents"
    if isinstance(error, KeyError):
        return (
            "a kept node whose parent is not kept? With scores multiplied along the path, a "
            "child never outranks its parent, so the kept nodes always form a tree"
        )
    return ""


def call_growth(sub: Submission, calls: list[tuple]) -> list[Answer]:
    """The submission's answers to calls [arguments], in one request when it runs in a
    worker; a raise names the call that raised, with a hint."""
    try:
        results = call_each_safely(
            sub,
            calls,
            (),
            lambda i: shown_of(calls[i]),
            COMMAND,
            lambda i: describe_call(calls[i]),
            lambda args: (args[0], args[1].copy(), *args[2:]),
        )
    except SubmissionCrash as crash:
        give_hint(crash, calls, describe_call, crash_hint)
        raise
    return [
        Answer(*read_answer(r, c), tuple(frozenset(p) for p in c[2].passes))
        for r, c in zip(results, calls, strict=True)
    ]


# the submission's answer on each case {case: Answer}, asked once per submission
answers = AskedOnce(lambda sub, cases: call_growth(sub, [c.arguments() for c in cases]))

"""The checks of a submitted `eagle_block_forward(tokens, features, params, n_head) -> [T, C]`:
EAGLE's draft block, the token and the feature of each position fused and run through one
GPT-2 block, causal, from an empty cache.

Two families, each scored on its own, every check deterministic (a correct float32 forward is
within ~4e-7 of the grader's float64 one; the tolerance, rule.TOL, is 2e-3, and every
catalogued slip is at least ten times that away on the case that shows it):

    eagle-block        the rows against rule.py's forward on four groups of hand-made cases,
                       shown on failure (one position; several positions, one head; several
                       heads; rows of a small spread, where LayerNorm's epsilon counts) and on
                       40 cases drawn from the grading's secret
    eagle-block-round  inside a real EagleDrafter run through the reference loop (greedy and
                       sampled, drawn from the secret): at every step its block runs, the
                       rows the submission gives over the drafter's whole history of pairs
                       are the block's, from its cache (round.py)

A family stops at its first failed check. The failure shows the smallest wrong case of its
group, the expected rows against yours; the hint names the known mistake (mistakes.py) whose
forward gives every wrong answer the submission gave, on every case of the family (or, when
none does, where the first wrong answer differs).
"""

from __future__ import annotations

import numpy as np

from specdec.grading.engine.answers import every_wrong, group_outcome
from specdec.grading.engine.core import Check, Family, Outcome
from specdec.grading.engine.submission import Submission
from specdec.grading.exercises.eagle_block.cases import (
    FRESH_N,
    GROUPS,
    Case,
    all_cases,
    answers,
    expected,
    group_cases,
)
from specdec.grading.exercises.eagle_block.mistakes import fitting, generic_hint
from specdec.grading.exercises.eagle_block.round import round_checks
from specdec.grading.exercises.eagle_block.rule import TOL, gap


def wrong_answers(seen: dict[Case, np.ndarray]) -> dict[Case, np.ndarray]:
    return {c: a for c, a in seen.items() if gap(a, expected(c)) > TOL}


def rows_hint(sub: Submission, case: Case, wrong: dict[Case, np.ndarray]) -> str:
    # every case, of all the groups', the submission gets wrong: a mistake must explain all of
    # them (one case alone may fit several)
    every = every_wrong(wrong, lambda: wrong_answers(answers(sub, all_cases())))
    hint = fitting([(c.arguments(), a) for c, a in every.items()])
    return hint or generic_hint(case.arguments(), wrong[case])


def rows_text(rows: np.ndarray) -> list[str]:
    with np.printoptions(precision=4, suppress=True, linewidth=88):
        return ["    " + line for line in repr(np.asarray(rows)).splitlines()]


def rows_story(case: Case, got: np.ndarray) -> list[str]:
    want = expected(case)
    tokens, features, params, n_head = case.arguments()
    lines = [f"  ({case.about})"] if case.about else []
    small = want.size <= SHOWN_WHOLE
    if small:
        lines += ["  tokens and features:", *rows_text(tokens), *rows_text(features)]
    if got.shape != want.shape:
        return [*lines, f"expected shape {list(want.shape)}, yours {list(got.shape)}"]
    lines.append(f"expected rows (gap {gap(got, want):.2e}, more than {TOL:g}):")
    if small:
        return [*lines, *rows_text(want), "yours:", *rows_text(got)]
    t = next(t for t in range(len(want)) if gap(got[t : t + 1], want[t : t + 1]) > TOL)
    return [
        *lines,
        f"  the first wrong row, {t} (tokens[{t}] = {tokens[t]}):",
        *rows_text(want[t]),
        "yours:",
        *rows_text(got[t]),
    ]


SHOWN_WHOLE = 48  # entries of the rows shown whole; beyond, the first wrong row alone


def rows_check(group: str, what: str) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        seen = answers(sub, group_cases(group))
        return group_outcome(
            seen,
            wrong_answers(seen),
            "the block's rows on {cases}",
            rows_story,
            lambda case, wrong: rows_hint(sub, case, wrong),
        )

    return Check(f"eagle-block/{group}", what, False, run)


def eagle_block_families(policy: str = "shrink") -> list[Family]:
    """The two families (`policy` is a loop's; the rounds here run the reference loop)."""
    groups = {name: what for name, (what, _) in GROUPS.items()}
    groups["fresh"] = f"{FRESH_N} cases drawn for this grading: widths, heads, lengths, scales"
    return [
        Family(
            "eagle-block",
            "your block's rows are the fused token and feature run through one causal GPT-2 "
            "block, to float32 rounding",
            [rows_check(g, what) for g, what in groups.items()],
        ),
        Family(
            "eagle-block-round",
            "inside a real EAGLE drafter, your block gives its rows at every step, round "
            "after round",
            round_checks(),
        ),
    ]

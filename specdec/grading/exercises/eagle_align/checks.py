"""The checks of a submitted `catch_up_pairs(context, features, cached) -> (tokens, feats)`:
which (token, feature) pairs an EAGLE drafter feeds its block at the start of a round.

Two families, each scored on its own, every check exact (the answer is a selection of the
inputs: one wrong token id or one feature row that differs in any bit is proof, and a correct
function never fails):

    eagle-pairs   tokens [r] = x(t + 1), feats [r, C] = f(t), for t = cached .. min(n-1, m)-1,
                  in order (cases.py writes the rule), on five groups of cases: nothing to feed
                  (one token; every pair cached), a one-pair catch-up (no draft kept), a
                  catch-up after a full acceptance (k + 1 pairs), a prefill (m = n: one
                  feature more than the tokens pair), and 300 random ones, drawn afresh
                  for each grading from its secret (engine/secret.py)
    eagle-round   the function drives a real EagleDrafter (round.py) through the reference
                  loop, greedy and sampled, on prompts drawn for each grading: every
                  proposal's drafts and q rows, and the drafter's cache after every round,
                  bit for bit the reference drafter's

A family stops at its first failed check. The failure shows the smallest wrong case of its
group, the pairs expected against yours (named x(j) and f(t)); the hint names the known
mistake (mistakes.py) that reproduces every wrong answer the submission gave, on every case
of the family (or, when none does, the first wrong row and why).
"""

from __future__ import annotations

from specdec.grading.engine.answers import every_wrong, group_outcome
from specdec.grading.engine.core import Check, Family, Outcome
from specdec.grading.engine.submission import Submission
from specdec.grading.exercises.eagle_align.cases import (
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
from specdec.grading.exercises.eagle_align.mistakes import fitting, generic_hint, pairs_text
from specdec.grading.exercises.eagle_align.round import round_checks


def wrong_answers(seen: dict[Case, Answer]) -> dict[Case, Answer]:
    return {c: a for c, a in seen.items() if not same(a, expected(c))}


def pairs_hint(sub: Submission, case: Case, wrong: dict[Case, Answer]) -> str:
    # every case, of all the groups', the submission gets wrong: a mistake must explain all of
    # them (a one-pair case alone fits several)
    every = every_wrong(wrong, lambda: wrong_answers(answers(sub, all_cases())))
    found = fitting([(c.arguments(), a) for c, a in every.items()])
    return found or generic_hint(case.arguments(), wrong[case])


def pairs_story(case: Case, got: Answer) -> list[str]:
    call = case.arguments()
    first, last = case.cached, case.ready - 1
    span = f"t = {first}..{last}" if last >= first else "no position"
    lines = [f"  ({case.about})"] if case.about else []
    want = expected(case)
    lines += [
        f"expected ({span}): {pairs_text(call, want)}",
        f"yours:{' ' * (len(span) + 9)} {pairs_text(call, got)}",
    ]
    if (got.tokens.shape, got.feats.shape) != (want.tokens.shape, want.feats.shape):
        lines.append(
            f"shapes: expected tokens {list(want.tokens.shape)}, feats "
            f"{list(want.feats.shape)}; yours tokens {list(got.tokens.shape)}, feats "
            f"{list(got.feats.shape)}"
        )
    return lines


def pairs_check(group: str, what: str) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        seen = answers(sub, group_cases(group))
        return group_outcome(
            seen,
            wrong_answers(seen),
            "the contract's pairs on {cases}",
            pairs_story,
            lambda case, wrong: pairs_hint(sub, case, wrong),
        )

    return Check(f"eagle-pairs/{group}", what, False, run)


def eagle_align_families(policy: str = "shrink") -> list[Family]:
    """The two families (`policy` is a loop's; the rounds here run the reference loop)."""
    groups = {name: what for name, (what, _) in GROUPS.items()}
    groups["random"] = (
        f"{N_RANDOM} random contexts, after a round or at prefill, drawn afresh for each grading"
    )
    return [
        Family(
            "eagle-pairs",
            "your pairs are (x(t + 1), f(t)) for every position not yet cached, in order",
            [pairs_check(g, what) for g, what in groups.items()],
        ),
        Family(
            "eagle-round",
            "inside a real EAGLE drafter, your pairs build the reference drafter's cache and "
            "drafts, round after round",
            round_checks(),
        ),
    ]

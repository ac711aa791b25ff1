"""The checks of a submitted `training_time_test_step(params, frozen, tokens, features,
target_logp, steps) -> {"sources", "fed", "loss", "grads"}`: one EAGLE-3 training-time-test step
of a tiny position-wise drafter, unrolled `steps` times on its own outputs.

Three families, each scored on its own, on the same replies (one call per case): four shown
cases (the skeleton's worked example, s = 1, s = N - 1, a wider one) and twelve drawn for each
grading from its secret (cases.py). Every check is deterministic, compared to a tolerance that
a float32 computation meets and every catalogued slip misses by far (model.py):

    ttt-inputs     sources [s, N-1] exactly (-1 no row, 0 the true feature, j - 1 the
                   drafter's own step j - 1) and the fed features [s, N-1, C]
    ttt-loss       the mean over steps of each step's mean KL(p(t + 1) || q_j(t)), to 1e-5
                   relative
    ttt-gradients  d loss / d W, b, A, B with the gradient flowing through the fed-back
                   outputs, each to 1e-4 of its largest entry

A family stops at its first failed check. The failure shows the smallest wrong case; the hint
names the known mistake (mistakes.py) that reproduces the family's part on every case the
submission gets wrong, or else says what differs.
"""

from __future__ import annotations

import numpy as np

from specdec.grading.engine.answers import every_wrong, group_outcome
from specdec.grading.engine.core import Check, Family, Outcome
from specdec.grading.engine.submission import Submission
from specdec.grading.exercises.eagle_ttt.cases import (
    N_FRESH,
    SHOWN,
    Case,
    Reply,
    all_cases,
    group_cases,
    part_of,
    replies,
)
from specdec.grading.exercises.eagle_ttt.mistakes import GENERIC, SAME, fitting, row_name
from specdec.grading.exercises.eagle_ttt.model import PARAMS, Answer, grad_error, rule

PART = {"ttt-inputs": ("sources", "fed"), "ttt-loss": ("loss",), "ttt-gradients": ("grads",)}


def judged(family: str, case: Case, reply: Reply) -> Answer:
    # the family's parts of the reply (a breach of the contract raises, failing the check)
    for part in PART[family]:
        part_of(reply, part, case)
    return reply.answer()


def wrong_ones(family: str, seen: dict[Case, Reply]) -> dict[Case, Answer]:
    out = {}
    for case, reply in seen.items():
        got = judged(family, case, reply)
        if not SAME[family](got, rule(case)):
            out[case] = got
    return out


def hint(family: str, sub: Submission, case: Case, wrong: dict[Case, Answer]) -> str:
    # every case, shown and fresh, the submission gets wrong in this family: a mistake must
    # explain all of them (one case alone fits several)
    every = every_wrong(wrong, lambda: wrong_ones(family, replies(sub, all_cases())))
    return fitting(family, list(every.items())) or GENERIC[family](case, wrong[case])


def table(a: np.ndarray) -> list[str]:
    return ["    " + " ".join(f"{int(v):3d}" for v in row) for row in a]


def story(family: str, case: Case, got: Answer) -> list[str]:
    want = rule(case)
    lines = []
    if family == "ttt-inputs":
        if not np.array_equal(got.sources, want.sources):
            lines += ["sources expected (row j - 1 = step j, column t = position):"]
            lines += table(want.sources) + ["yours:"] + table(got.sources)
        else:
            err = np.abs(got.fed - want.fed).max(axis=2)
            j, t = (int(v) for v in np.argwhere(err == err.max())[0])
            with np.printoptions(precision=4, suppress=True):
                lines += [
                    "sources: right",
                    f"fed[{j}, {t}] (step {j + 1}, position {t}): expected {want.fed[j, t]} "
                    f"({row_name(case, want, want.fed[j, t])}), yours {got.fed[j, t]} "
                    f"({row_name(case, want, got.fed[j, t])})",
                ]
    elif family == "ttt-loss":
        lines.append(f"loss: expected {want.loss:.8g}, yours {got.loss:.8g}")
    else:
        for n in PARAMS:
            e = grad_error(got.grads[n], want.grads[n])
            verdict = "right" if e <= 1e-4 else "WRONG"
            lines.append(
                f"grads[{n!r}] {list(want.grads[n].shape)}: largest error {e:.2e} of its "
                f"largest entry ({verdict})"
            )
    return lines


def family_check(family: str, group: str, what: str) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        seen = replies(sub, group_cases(group))
        return group_outcome(
            seen,
            wrong_ones(family, seen),
            "all {cases} agree",
            lambda case, got: story(family, case, got),
            lambda case, wrong: hint(family, sub, case, wrong),
        )

    shown = f"{len(SHOWN)} shown cases" if group == "shown" else f"{N_FRESH} fresh cases"
    return Check(f"{family}/{group}", f"{what}, {shown}", False, run)


def eagle_ttt_families(policy: str = "shrink") -> list[Family]:
    """The three families (`policy` is a loop's; nothing here runs a loop)."""
    return [
        Family(
            "ttt-inputs",
            "which feature each unrolled step reads, the true one or the drafter's own, row by row",
            [family_check("ttt-inputs", g, "sources and fed features") for g in GROUPS],
        ),
        Family(
            "ttt-loss",
            "the loss is the mean over steps of the mean KL(p || q) of each step's rows",
            [family_check("ttt-loss", g, "loss") for g in GROUPS],
        ),
        Family(
            "ttt-gradients",
            "the gradients of every trained parameter, through the fed-back outputs",
            [family_check("ttt-gradients", g, "gradients") for g in GROUPS],
        ),
    ]


GROUPS = ("shown", "fresh")

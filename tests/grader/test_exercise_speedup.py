"""The speedup exercise's grader (specdec/grading/exercises/speedup/checks.py): the worked solution
and the project's own formulas (specdec/costs.py) pass, the skeleton fails on its
NotImplementedError, each broken plan_k is rejected with the hint its mistake calls for, and the
contract's cost model is the one specdec/choose_k.py chooses k with."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specdec.grading import grade
from specdec.grading.engine.core import run_families
from specdec.grading.engine.submission import Submission, load_submission
from specdec.grading.exercises import exercise
from specdec.grading.exercises.speedup.checks import CASES, MEASURED_V, expected, speedup_families

BROKEN = "tests/grader/broken_exercises_basic.py"
SPEEDUP = exercise("speedup")


def first_failure(name: str):
    sub = load_submission(f"{BROKEN}:{name}", "speedup")
    result = run_families(sub, speedup_families())
    failed = [r for r in result.results if r.status == "fail"]
    assert not result.passed and failed, f"{name} was not rejected"
    return result, failed[0]


def test_the_solution_passes_and_is_recognised_by_its_name():
    result = grade(SPEEDUP.spec(solution=True))
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]
    assert result.submission.kind == "speedup" and "its name" in result.submission.kind_reason
    assert {r.status for r in result.results} == {"pass"}
    assert not any(r.check.sampled for r in result.results)
    assert result.seconds < 10


def reference_plan_k(alpha, c, v, k_max):
    # specdec/costs.py's formulas behind the exercise's signature, over k = 0 .. k_max
    from specdec.costs import expected_tokens_per_round, predicted_speedup

    costs = np.broadcast_to(np.asarray(v, dtype=np.float64), (k_max + 1,))
    tokens = [expected_tokens_per_round(alpha, k) for k in range(k_max + 1)]
    speedups = [predicted_speedup(alpha, k, c, costs[k]) for k in range(k_max + 1)]
    return int(np.argmax(speedups)), np.array(tokens), np.array(speedups)


def test_the_reference_formulas_pass():
    sub = Submission("specdec.costs", reference_plan_k, "speedup", "test", None)
    result = run_families(sub, speedup_families())
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]


def test_the_skeleton_fails_on_its_not_implemented_error():
    result = grade(SPEEDUP.spec())
    assert not result.passed
    assert isinstance(result.crash.error, NotImplementedError)
    assert f"specdec grade {SPEEDUP.spec()}" in str(result.crash.error)
    assert "my_speedup.py, line" in result.crash.where


def test_the_skeleton_leaves_the_formulas_to_derive():
    # the contract says what a round emits and costs; E and the round's cost are the student's
    skeleton = (Path(__file__).parents[2] / SPEEDUP.spec().split(":")[0]).read_text()
    for formula in ("alpha^", "alpha **", "(1 - alpha", "k c +", "k + 1 positions", "v(k+1)"):
        assert formula not in skeleton, f"the skeleton hands out {formula!r}"
    for term in ("accepted with probability alpha", "bonus", "correction", "v[j] = v(j + 1)"):
        assert term in skeleton, f"the skeleton's contract lost {term!r}"


HINTS = {
    "exponent_off_by_one": ("speedup/alpha-0.8", "off by one in the exponent"),
    "forgets_bonus_token": ("speedup/alpha-0.8", "bonus"),
    "ignores_v": ("speedup/alpha-0", "not 1"),
    "alpha_one_nan": ("speedup/alpha-1", "alpha = 1 divides by zero"),
    "best_of_tokens": ("speedup/alpha-0.8", "maximise the speedup"),
    "ties_to_largest_k": ("speedup/ties", "the smallest k"),
    "skips_k_zero": ("speedup/alpha-0", "k = 0 (plain decoding"),
    # the three slips of deriving E and the cost from the contract alone: the target's token
    # forgotten, a closed form with alpha^k, the pass priced for k positions (v(k), not v(k+1))
    "bonus_only_when_all_kept": ("speedup/alpha-0.8", "only when all k drafts are kept"),
    "verify_pass_over_k_positions": ("speedup/measured-v", "covers k + 1 positions"),
}
CRASH_HINTS = {  # rejected by a crash, whose hint names the mistake
    "alpha_one_zero_division": ("speedup/alpha-1", "alpha = 1 divides by zero"),
    "v_read_at_k_plus_1": ("speedup/measured-v", "v[k] is v(k+1)"),
}


@pytest.mark.parametrize("name", sorted(HINTS))
def test_a_broken_plan_is_rejected_with_its_hint(name):
    result, failure = first_failure(name)
    check, words = HINTS[name]
    assert failure.check.name == check
    assert result.crash is None
    assert words in failure.outcome.hint, failure.outcome.hint
    assert "best_k," in "\n".join(failure.outcome.story)
    assert result.seconds < 10


@pytest.mark.parametrize("name", sorted(CRASH_HINTS))
def test_a_crashing_plan_is_shown_at_its_line_with_a_hint(name):
    result, failure = first_failure(name)
    check, words = CRASH_HINTS[name]
    assert failure.check.name == check and failure.crash is result.crash
    assert "broken_exercises_basic.py, line" in failure.crash.where
    assert words in failure.crash.hint, failure.crash.hint


def test_the_known_cases_have_the_best_k_they_claim():
    best = {name: [expected(case).best_k for case in cases] for name, (_, cases) in CASES.items()}
    assert best["alpha-0.8"] == [6]  # inside 0..8: the drafts' cost catches up with E
    assert best["alpha-0"] == [0, 0]  # nothing is ever kept: do not draft
    assert best["alpha-1"] == [6]  # everything is kept: k_max
    assert best["measured-v"][0] == 2  # v(4) jumps: k = 3 no longer pays
    assert best["ties"] == [0, 0]  # all speedups equal 1; k_max = 0


def test_the_contract_chooses_k_as_lab_choose_k_does():
    # specdec.choose_k.best_k looks at k = 1..k_max with v(k+1) = CostProfile.verify_cost(k + 1):
    # the contract's v[k] is the same figure, so over k >= 1 both choose the same k
    from specdec.choose_k import best_k
    from specdec.costs import CostProfile

    solution = load_submission(SPEEDUP.spec(solution=True)).function
    k_max, c = len(MEASURED_V) - 1, 0.05
    profile = CostProfile(1.0, c, {T: MEASURED_V[T - 1] for T in range(1, k_max + 2)})
    for alpha in (0.3, 0.7, 0.9):
        _, _, speedups = solution(alpha, c, np.array(MEASURED_V), k_max)
        assert best_k(alpha, profile, k_max).k == 1 + int(np.argmax(speedups[1:]))

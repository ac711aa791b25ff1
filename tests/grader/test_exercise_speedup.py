"""The speedup exercise's grader (specdec/grading/exercises/speedup/checks.py): the worked solution
and the project's own formulas (specdec/costs.py, one rate) pass, the skeleton fails on its
NotImplementedError, each broken plan_k is rejected with the hint its mistake calls for, the
random cases are drawn afresh from each grading's secret, plain decoding costs 1, and the
contract's cost model is the one specdec/measure/choose_k.py chooses k with."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specdec.costs import CostProfile, expected_tokens_per_round, predicted_speedup
from specdec.grading import grade
from specdec.grading.engine.secret import secret_held
from specdec.grading.engine.submission import Submission, load_submission
from specdec.grading.exercises import exercise
from specdec.grading.exercises.speedup.checks import (
    CASES,
    MEASURED_V,
    Case,
    expected,
    random_cases,
    speedup_families,
)
from specdec.measure.choose_k import best_k

from .exercise_tests import rejected_under, the_solution_passes

BROKEN = "tests/grader/broken_exercises_basic.py"
SPEEDUP = exercise("speedup")


def first_failure(name: str):
    """(the grading, its first failure) of the broken `name`, under one pinned secret."""
    ((result, failure),) = rejected_under(f"{BROKEN}:{name}", "speedup", speedup_families, (1,))
    return result, failure


def test_the_solution_passes_and_is_recognised_by_its_name():
    assert the_solution_passes("speedup").seconds < 10


def project_plan_k(alpha, c, v, k_max):
    # specdec/costs.py's formulas behind the exercise's signature, for one rate; a pass over
    # one position (k = 0) is the unit, 1
    k = np.arange(k_max + 1)
    costs = np.where(k == 0, 1.0, v) if np.ndim(v) == 0 else np.asarray(v, dtype=np.float64)
    tokens = [expected_tokens_per_round(alpha, j) for j in k]
    speedups = [predicted_speedup(alpha, j, c, costs[j]) for j in k]
    return int(np.argmax(speedups)), np.array(tokens), np.array(speedups)


def test_the_project_formulas_agree_on_every_case_of_one_rate():
    solution = load_submission(SPEEDUP.spec(solution=True)).function
    cases = [case for _, shown in CASES.values() for case in shown] + list(random_cases(7))
    one_rate = [case for case in cases if case.one_rate]
    assert len(one_rate) > 50
    for case in one_rate:
        ours = project_plan_k(case.alpha, case.c, case.v, case.k_max)
        theirs = solution(*case.arguments().values())
        want = expected(case)
        assert ours[0] == theirs[0] == want.best_k
        for a, b in zip(ours[1:], (want.tokens, want.speedups), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12)


def test_plain_decoding_costs_one_and_a_constant_rate_is_the_special_case():
    for v in (0.8, 1.0, 2.5, MEASURED_V[:4]):
        plan = expected(Case(0.7, 0.3, v, 3))
        assert plan.tokens[0] == 1.0 and plan.speedups[0] == 1.0  # k = 0: one token, cost 1
    one, each = expected(Case(0.7, 0.2, 1.3, 5)), expected(Case((0.7,) * 5, 0.2, 1.3, 5))
    np.testing.assert_allclose(one.tokens, each.tokens, rtol=1e-12)
    np.testing.assert_allclose(one.tokens, (1 - 0.7 ** np.arange(1.0, 7.0)) / 0.3, rtol=1e-12)
    assert one.best_k == each.best_k
    # notebook 08's example: alpha = [1, 0.5] yields 2.5 tokens at k = 2, one pooled rate 2.31
    assert np.allclose(expected(Case((1.0, 0.5), 0.0, 1.0, 2)).tokens, [1.0, 2.0, 2.5])


def test_the_random_cases_come_from_the_grading_secret():
    a, b = random_cases(1), random_cases(2)
    assert a == random_cases(1) and a != b
    assert any(not case.one_rate for case in a) and any(case.one_rate for case in a)
    assert any(not case.one_pass for case in a) and any(case.one_pass for case in a)
    with secret_held(11) as secret:  # a grading's check draws its cases from its secret
        check = speedup_families()[0].checks[-1]
        sub = Submission("table", lambda *args: (0, [], []), "speedup", "test", None)
        outcome = check.run(sub, 0.0, 0)
        assert random_cases(secret)[0].describe() in outcome.story[0]


def test_the_skeleton_fails_on_its_not_implemented_error():
    result = grade(SPEEDUP.spec())
    assert not result.passed
    assert isinstance(result.crash.error, NotImplementedError)
    assert f"specdec grade {SPEEDUP.spec()}" in str(result.crash.error)
    assert "my_speedup.py, line" in result.crash.where


def test_the_skeletons_contract_keeps_what_a_round_emits_and_costs():
    # the formulas are the student's (tests/notebooks/test_skeletons_hold_no_answer.py); the
    # contract must still say what a round emits and costs, and the unit
    skeleton = (Path(__file__).parents[2] / SPEEDUP.spec().split(":")[0]).read_text()
    for term in ("given that", "bonus", "correction", "v[j] = v(j + 1)", "costs exactly 1"):
        assert term in skeleton, f"the skeleton's contract lost {term!r}"


HINTS = {
    "exponent_off_by_one": ("speedup/one-rate", "one term short"),
    "forgets_bonus_token": ("speedup/one-rate", "one token short"),
    "ignores_v": ("speedup/one-rate", "every verification pass at 1"),
    "prices_plain_decoding_at_v": ("speedup/one-rate", "plain decoding at v"),
    "adds_the_rates": ("speedup/one-rate", "adds the rates"),
    "pools_the_rates": ("speedup/by-position", "the mean of alpha"),
    "alpha_one_nan": ("speedup/alpha-1", "alpha = 1 divides by zero"),
    "best_of_tokens": ("speedup/one-rate", "maximise the speedup"),
    "ties_to_largest_k": ("speedup/ties", "the smallest k"),
    "skips_k_zero": ("speedup/alpha-0", "k = 0 (plain decoding"),
    "bonus_only_when_all_kept": ("speedup/one-rate", "only when all k drafts are kept"),
    "verify_pass_over_k_positions": ("speedup/one-rate", "covers k + 1 positions"),
}
CRASH_HINTS = {  # rejected by a crash, whose hint names the mistake
    "alpha_one_zero_division": ("speedup/alpha-1", "alpha = 1 divides by zero"),
    "v_read_at_k_plus_1": ("speedup/measured-v", "v[j] is v(j + 1)"),
    "reads_rates_one_late": ("speedup/alpha-0", "alpha[0] is the first draft's rate"),
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
    assert best["one-rate"] == [6]  # inside 0..8: the drafts' cost catches up with E
    assert best["alpha-0"] == [0, 0]  # nothing is ever kept: do not draft
    assert best["alpha-1"] == [6]  # everything is kept: k_max
    assert best["by-position"][0] == 5  # falling rates: the sixth draft no longer pays
    assert best["measured-v"][0] == 2  # v(4) jumps: k = 3 no longer pays
    assert best["ties"] == [0, 0]  # all speedups equal 1; k_max = 0


def test_the_contract_chooses_k_as_lab_choose_k_does():
    # specdec.measure.choose_k.best_k looks at k = 1..k_max with v(k+1) = CostProfile.verify_cost(k
    # + 1): the contract's v[k] is the same figure, so over k >= 1 both choose the same k
    solution = load_submission(SPEEDUP.spec(solution=True)).function
    k_max, c = len(MEASURED_V) - 1, 0.05
    profile = CostProfile(1.0, c, {T: MEASURED_V[T - 1] for T in range(1, k_max + 2)})
    for alpha in (0.3, 0.7, 0.9):
        _, _, speedups = solution(alpha, c, np.array(MEASURED_V), k_max)
        assert best_k(alpha, profile, k_max).k == 1 + int(np.argmax(speedups[1:]))

"""The sampling exercise's grader (specdec/grading/exercises/sampling/checks.py): the worked
solution and the project's own `probabilities` pass, the skeleton fails on its NotImplementedError,
each broken sampling_distribution is rejected, under two secrets, with the hint its mistake calls
for, the fixed cases hold the conventions the contract states (ties, the top-p boundary, the
order), and the random cases are drawn afresh from each grading's secret (a pinned one draws
them again)."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.grading import grade
from specdec.grading.engine.core import run_families
from specdec.grading.engine.secret import SECRET_ENV, secret_held
from specdec.grading.engine.submission import Submission
from specdec.grading.exercises import exercise
from specdec.grading.exercises.sampling.checks import (
    CASES,
    N_RANDOM,
    expected,
    mistaken_rows,
    random_cases,
    sampling_families,
)

from .exercise_tests import rejected_under, the_solution_passes

BROKEN = "tests/grader/broken_exercises_basic.py"
SAMPLING = exercise("sampling")
SECRETS = (1, 2)  # the random cases of two gradings


def first_failures(name: str, secrets: tuple[int, ...] = SECRETS[:1]) -> list:
    """(the grading, its first failure) of the broken `name` under each secret."""
    return rejected_under(f"{BROKEN}:{name}", "sampling", sampling_families, secrets)


def test_the_solution_passes_and_is_recognised_by_its_name():
    assert the_solution_passes("sampling").seconds < 10


def reference_sampling_distribution(logits, temperature, top_k=None, top_p=None):
    # the project's transform behind the exercise's signature (0 and None mean off)
    from reference.sampling import SamplingParams, probabilities

    top_p = 1.0 if top_p is None else top_p
    return probabilities(np.asarray(logits), SamplingParams(temperature, top_k or None, top_p))


def test_the_reference_probabilities_pass():
    sub = Submission("reference", reference_sampling_distribution, "sampling", "test", None)
    result = run_families(sub, sampling_families())
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]


def test_the_skeleton_fails_on_its_not_implemented_error():
    result = grade(SAMPLING.spec())
    assert not result.passed
    assert isinstance(result.crash.error, NotImplementedError)
    assert f"specdec grade {SAMPLING.spec()}" in str(result.crash.error)
    assert "my_sampling.py, line" in result.crash.where


HINTS = {
    "temperature_after_softmax": ("sampling/temperature", "applied after the softmax"),
    "top_p_cuts_crossing_token": ("sampling/top-p", "cut the token that crosses top_p"),
    "filters_without_renormalising": ("sampling/top-k", "does not sum to 1"),
    "top_p_before_top_k": ("sampling/top-k-and-top-p", "top-p ran before top-k"),
    "no_max_subtraction": ("sampling/large-logits", "Subtract the largest logit"),
    "top_k_exactly_k": ("sampling/top-k-ties", "all of them survive"),
    "greedy_ties_to_last": ("sampling/greedy-ties", "lowest index"),
    "greedy_by_tiny_temperature": ("sampling/greedy-ties", "even when logits tie"),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # no_max_subtraction overflows
@pytest.mark.parametrize("name", sorted(HINTS))
def test_a_broken_sampling_is_rejected_with_its_hint(name):
    check, words = HINTS[name]
    for result, failure in first_failures(name, SECRETS):  # two gradings, the same verdict
        assert failure.check.name == check
        assert result.crash is None
        assert words in failure.outcome.hint, failure.outcome.hint
        story = "\n".join(failure.outcome.story)
        assert "expected [" in story and "yours    [" in story
        assert result.seconds < 10


def rows(name: str) -> list[np.ndarray]:
    return [expected(case) for case in CASES[name][1]]


def test_the_cases_hold_the_stated_conventions():
    (ties,) = rows("top-k-ties")  # logits (3, 1, 2, 2, 0), k = 2: both 2s survive
    assert np.flatnonzero(ties).tolist() == [0, 2, 3]
    (greedy,) = rows("greedy-ties")  # the maximum at 1, 2 and 4: the lowest index
    assert greedy.tolist() == [0, 1, 0, 0, 0]
    boundary, wider = rows("top-p")  # p = (.15, .5, .05, .3): 0.7 keeps .5 and .3 (crossing)
    assert np.flatnonzero(boundary).tolist() == [1, 3]
    assert np.flatnonzero(wider).tolist() == [0, 1, 3]
    (alone,) = rows("top-p-one-token")  # 0.6 alone reaches 0.5
    assert alone.tolist() == [0.0, 1.0, 0.0]
    # the order case: top-p after top-k gives one token, before it two
    case = CASES["top-k-and-top-p"][1][0]
    assert np.count_nonzero(expected(case)) == 1
    wrong = [row for row, hint in mistaken_rows(case) if "before top-k" in hint]
    assert len(wrong) == 1 and np.count_nonzero(wrong[0]) == 2
    for row in rows("large-logits"):
        assert np.all(np.isfinite(row)) and row.sum() == pytest.approx(1.0)


def test_the_random_cases_mix_every_option():
    for cases in map(random_cases, SECRETS):
        assert len(cases) == N_RANDOM and all(2 <= len(c.logits) <= 40 for c in cases)
        assert sum(c.temperature == 0 for c in cases) >= 10
        assert sum(c.k_on and c.p_on and c.temperature > 0 for c in cases) >= 10
        assert sum(c.top_k == 0 for c in cases) >= 10 and sum(c.top_p == 1.0 for c in cases) >= 10
        assert any(c.top_k and c.top_k > len(c.logits) for c in cases)  # k > V: all kept


def rows_handed(secret: int | None) -> list[tuple]:
    """Every (logits, temperature, top_k, top_p) a grading hands a correct function, in order
    (`secret` None: SPECDEC_GRADING_SECRET's, as `specdec grade` would)."""
    seen = []

    def sampling_distribution(logits, temperature, top_k=None, top_p=None):
        seen.append((tuple(float(z) for z in logits), temperature, top_k, top_p))
        return reference_sampling_distribution(logits, temperature, top_k, top_p)

    sub = Submission("recording", sampling_distribution, "sampling", "test", None)
    with secret_held(secret):
        result = run_families(sub, sampling_families())
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]
    return seen


def test_the_random_cases_are_drawn_afresh_for_each_grading(monkeypatch):
    first, other = rows_handed(SECRETS[0]), rows_handed(SECRETS[1])
    monkeypatch.setenv(SECRET_ENV, str(SECRETS[0]))
    assert rows_handed(None) == first  # the secret pinned: the same cases, in order
    shown = len(first) - N_RANDOM  # the shown cases come first, the same in every grading
    assert first[:shown] == other[:shown]
    assert not set(first[shown:]) & set(other[shown:])  # not one random case in common
    drawn = [(c.logits, c.temperature, c.top_k, c.top_p) for c in random_cases(SECRETS[0])]
    assert first[shown:] == drawn

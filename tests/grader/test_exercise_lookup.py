"""The lookup exercise's grader (specdec/grading/exercises/lookup/checks.py): the worked solution
and the project's own lookup pass, the skeleton fails naming NotImplementedError, the random
contexts are drawn afresh from each grading's secret (a pinned one draws them again), and each
broken variant is rejected, under two secrets, with the hint that names its mistake (matched by
a few words)."""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import numpy as np
import pytest

from specdec.grading import grade
from specdec.grading.engine.core import run_families
from specdec.grading.engine.secret import SECRET_ENV, secret_held
from specdec.grading.engine.submission import Submission
from specdec.grading.exercises import exercise
from specdec.grading.exercises.lookup.checks import (
    CONTRACT,
    FIXED,
    NO_MATCH,
    RANDOM_COUNT,
    RANDOM_V,
    lookup_families,
    random_cases,
)

from . import broken_exercises_drafting as broken

REPO = Path(__file__).resolve().parents[2]
SOLUTION = "notebooks/exercises/solutions/lookup_solution.py:propose_lookup"
SKELETON = "notebooks/exercises/my_lookup.py:propose_lookup"
SECRETS = (1, 2)  # the random contexts of two gradings


def reference_lookup(context, k, n_vocab, max_ngram=3):
    """The project's LookupDrafter rule (min_ngram = 1, prefer = "recent") in the exercise's
    signature."""
    from reference.lookup import lookup_continuation, point_mass_rows

    tokens = lookup_continuation(np.asarray(context), k, max_ngram, 1, "recent")
    return tokens, point_mass_rows(tokens, n_vocab).astype(np.float64)


def graded(function, name: str = "", secret: int | None = SECRETS[0]):
    """`function` graded in this process, its random contexts drawn from `secret` (None:
    SPECDEC_GRADING_SECRET's, as `specdec grade` would)."""
    source = inspect.getsourcefile(function)
    submission = Submission(name or function.__name__, function, "lookup", "test", source)
    with secret_held(secret):
        return run_families(submission, lookup_families())


def test_the_solution_passes_in_about_a_second(monkeypatch):
    monkeypatch.chdir(REPO)
    start = time.perf_counter()
    result = grade(SOLUTION)
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]
    assert result.submission.kind == "lookup"
    assert tuple(dict.fromkeys(r.family for r in result.results)) == exercise("lookup").families
    assert len(result.results) == 6
    assert time.perf_counter() - start < 10  # ~0.2 s measured; generous for a loaded machine


def test_the_projects_own_lookup_passes():
    result = graded(reference_lookup)
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]


def test_the_graders_rule_is_the_references():
    # the grader writes the rule on its own: on every random context it agrees with
    # reference/lookup.py (and the in-loop check shows drafts being kept, so the loop uses them)
    for case in random_cases(SECRETS[0]) + random_cases(SECRETS[1]):
        tokens, _ = reference_lookup(case.context, case.k, case.n_vocab, case.max_ngram)
        assert CONTRACT.propose(case.context, case.k, case.max_ngram) == tuple(tokens), case


def contexts_handed(secret: int | None) -> list[tuple]:
    """Every (context, k, max_ngram) a grading hands a correct lookup, in order."""
    seen = []

    def propose_lookup(context, k, n_vocab, max_ngram=3):
        seen.append((tuple(int(t) for t in context), k, max_ngram))
        return reference_lookup(context, k, n_vocab, max_ngram)

    result = graded(propose_lookup, secret=secret)
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]
    return seen


def test_the_random_contexts_are_drawn_afresh_for_each_grading(monkeypatch):
    first, other = contexts_handed(SECRETS[0]), contexts_handed(SECRETS[1])
    monkeypatch.setenv(SECRET_ENV, str(SECRETS[0]))
    assert contexts_handed(None) == first  # the secret pinned: the same contexts, in order
    drawn = [[(c.context, c.k, c.max_ngram) for c in random_cases(s)] for s in SECRETS]
    assert set(drawn[0]) <= set(first) and set(drawn[1]) <= set(other)
    assert not set(drawn[1]) <= set(first)  # another secret: contexts the first never saw
    shown = {(c.context, c.k, c.max_ngram) for c in FIXED + NO_MATCH}
    assert shown <= set(first) & set(other)  # the shown examples stay
    # the same draw as before the secret: RANDOM_COUNT distinct cases, T 1..12 over V = 3,
    # k 0..4, max_ngram 1..4
    for cases in map(random_cases, SECRETS):
        assert len(set(cases)) == RANDOM_COUNT and {c.n_vocab for c in cases} == {RANDOM_V}
        assert {len(c.context) for c in cases} == set(range(1, 13))
        assert {c.k for c in cases} == set(range(5))
        assert {c.max_ngram for c in cases} == {1, 2, 3, 4}


def test_a_table_of_the_shown_contexts_fails_the_random_ones():
    def propose_lookup(context, k, n_vocab, max_ngram=3):
        table = {(c.context, c.k, c.max_ngram) for c in FIXED + NO_MATCH}
        if (tuple(int(t) for t in context), k, max_ngram) in table:
            return reference_lookup(context, k, n_vocab, max_ngram)
        return np.zeros(0, dtype=np.int64), np.zeros((0, n_vocab))

    for secret in SECRETS:
        result = graded(propose_lookup, secret=secret)
        failed = [r for r in result.results if r.status == "fail"]
        assert failed[0].check.name == "lookup/random"
        random = failed[0].outcome.story[0]  # the shortest context is one of this grading's
        assert any(f"context={list(c.context)}, k={c.k}," in random for c in random_cases(secret))


def test_the_skeleton_fails_naming_not_implemented(monkeypatch):
    monkeypatch.chdir(REPO)
    result = grade(SKELETON)
    assert not result.passed
    assert isinstance(result.crash.error, NotImplementedError)
    assert SKELETON in str(result.crash.error)  # its message names the grade command
    assert result.crash.call.startswith("propose_lookup(context=")
    assert "rng" not in result.crash.call  # the lookup's own call, not a verify's


LOOKUP_HINTS = {
    "matches_itself": ("lookup/fixed", "finds the last n tokens themselves"),
    "oldest_occurrence": ("lookup/fixed", "oldest occurrence"),
    "uniform_q": ("lookup/q-rows", "point mass one-hot(x)"),
    "smoothed_q": ("lookup/q-rows", "min(1, p(x)/q(x)) > p(x)"),
    "longer_than_k": ("lookup/length", "k + 1 tokens"),
    "copies_the_ngram": ("lookup/fixed", "the matched n tokens themselves"),
    "shortest_ngram_first": ("lookup/fixed", "longest n first"),
}


def test_every_lookup_variant_has_an_expected_hint():
    assert set(LOOKUP_HINTS) == set(broken.LOOKUP_VARIANTS)


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("name", sorted(LOOKUP_HINTS))
def test_a_broken_lookup_is_rejected_with_its_hint(name, secret):
    result = graded(broken.LOOKUP_VARIANTS[name], name, secret)
    failed = [r for r in result.results if r.status == "fail"]
    assert not result.passed and result.crash is None
    check, words = LOOKUP_HINTS[name]
    assert failed[0].check.name == check
    assert words in failed[0].outcome.hint, failed[0].outcome.hint
    assert failed[0].outcome.story  # the smallest context that shows it
    assert result.seconds < 10  # ~0.05 s measured


def test_a_proposal_in_another_shape_is_a_clear_contract_breach():
    def tokens_only(context, k, n_vocab, max_ngram=3):
        return np.asarray(context[-k:] if k else [], dtype=np.int64)

    result = graded(tokens_only)
    assert "must return (draft_tokens, q_rows)" in str(result.crash.error)
    assert result.crash.where == "the value your propose_lookup returned"


def test_a_crash_is_shown_at_the_students_line():
    def crashes_on_one_token(context, k, n_vocab, max_ngram=3):
        if len(context) == 1:
            raise IndexError("no earlier token")
        return reference_lookup(context, k, n_vocab, max_ngram)

    result = graded(crashes_on_one_token)
    line = inspect.getsourcelines(crashes_on_one_token)[1] + 2
    assert f"test_exercise_lookup.py, line {line}" in result.crash.where
    assert "context=[3]" in result.crash.call

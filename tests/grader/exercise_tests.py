"""What the tests of the exercises' graders share (tests/grader/test_exercise_*.py): a function
graded in this process as a submission of a kind, what did not pass named for an assertion's
message, a rejection's failed checks and the hint and story of the first, and the two checks
every exercise makes of its own notebook files: the worked solution passes, recognised by its
function's name, and the untouched skeleton fails on its NotImplementedError."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import pytest

from specdec.grading import grade
from specdec.grading.engine.core import Family, Grade, Outcome, Revise, run_families
from specdec.grading.engine.secret import secret_held
from specdec.grading.engine.submission import Submission, load_submission
from specdec.grading.exercises import exercise

REPO = Path(__file__).resolve().parents[2]


def grader_for(
    kind: str, families: Callable[[], list[Family]], revise: Revise | None = None
) -> Callable[..., Grade]:
    """`graded(function, name="", secret=None)`: the function graded as a submission of `kind`
    (under `name`, its own by default), the families (made afresh for each grading) run here,
    not in a worker; its inputs drawn from `secret` (None: SPECDEC_GRADING_SECRET's if set,
    else this process's, engine/secret.py)."""

    def graded(function: Callable, name: str = "", secret: int | None = None) -> Grade:
        source = inspect.getsourcefile(function)
        submission = Submission(name or function.__name__, function, kind, "test", source)
        if secret is None:
            return run_families(submission, families(), revise)
        with secret_held(secret):
            return run_families(submission, families(), revise)

    return graded


def rejected_under(
    spec: str, kind: str, families: Callable[[], list[Family]], secrets: tuple[int, ...]
) -> list[tuple]:
    """[(the grading, its first failed check's result)] of the submission `spec` under each
    secret, all graded in one worker (loaded once: a worker's start is most of a grading)."""
    sub = load_submission(spec, kind)
    try:
        found = []
        for secret in secrets:
            with secret_held(secret):
                result = run_families(sub, families())
            failed = [r for r in result.results if r.status == "fail"]
            assert not result.passed and failed, f"{spec} was not rejected under {secret}"
            found.append((result, failed[0]))
        return found
    finally:
        sub.close()


def not_passed(result: Grade) -> list[str]:
    """'check: summary' for every check that did not pass (an assertion's message)."""
    return [
        f"{r.check.name}: {r.outcome and r.outcome.summary}"
        for r in result.results
        if r.status != "pass"
    ]


def rejected(result: Grade) -> list:
    """The failed checks' results, in order, of a grading that rejects without a crash."""
    assert not result.passed and result.crash is None
    return [r for r in result.results if r.status == "fail"]


def shows_its_mistake(outcome: Outcome, words: str, function: str) -> None:
    """A failure's hint holds `words`, and its story opens on the smallest wrong call."""
    assert words in outcome.hint, outcome.hint
    assert outcome.story[0].startswith(f"the smallest wrong case: {function}("), outcome.story


def graded_from_the_repo(spec: str) -> Grade:
    """`specdec grade SPEC` run from the repository's root, where the specs' paths start."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)
        return grade(spec)


def the_solution_passes(kind: str) -> Grade:
    """The worked solution of `kind`, graded: every check of every family passes, the families
    come in the registry's order, the kind is known by the function's name, and no check
    samples (so no verdict is left to chance)."""
    spec = exercise(kind).spec(solution=True)
    result = graded_from_the_repo(spec)
    assert result.passed, not_passed(result)
    assert result.submission.kind == kind and "its name" in result.submission.kind_reason
    assert tuple(dict.fromkeys(r.family for r in result.results)) == exercise(kind).families
    assert {r.status for r in result.results} == {"pass"}
    assert not any(r.check.sampled for r in result.results)
    return result


def the_skeleton_fails(kind: str) -> Grade:
    """The untouched skeleton of `kind`, graded: it fails on its NotImplementedError, whose
    message names the command that grades it, raised at a line of the skeleton; no hint (no
    mistake to guess at: nothing is written yet), and every family fails."""
    spec = exercise(kind).spec()
    result = graded_from_the_repo(spec)
    assert not result.passed
    assert isinstance(result.crash.error, NotImplementedError)
    assert f"specdec grade {spec}" in str(result.crash.error)
    assert f"{exercise(kind).skeleton}, line" in result.crash.where
    assert not result.crash.hint
    assert {result.family_status(f) for f in exercise(kind).families} == {"fail"}
    return result

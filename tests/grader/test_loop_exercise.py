"""The loop exercise (notebooks/exercises/my_loop.py): its worked solution passes the loop
family, each broken loop of broken_loops_exercise.py is rejected with a hint that names its
mistake (matched by a few words), the generator the runs are handed is fresh for each grading
(a pinned secret hands the same one again), and the skeleton's helper checks tell a written
helper from a missing or a wrong one.

The sampled cases run with fewer runs than `specdec grade` uses (CI time); the full grade of
the solution is `specdec grade notebooks/exercises/solutions/loop_solution.py:...`. Every
grading here is pinned to a secret (SECRETS[0] unless SPECDEC_GRADING_SECRET is set), so that
the sampled verdicts are reproducible; the broken loops whose rejection is exact (greedy) are
graded under a second secret too, the sampled ones under one (CI time: ~3 s each).
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys

import numpy as np
import pytest

from reference.kv_cache import KVCache
from reference.verification import verify
from specdec.grading import grade
from specdec.grading.engine.core import run_families
from specdec.grading.engine.secret import SECRET_ENV, secret_held
from specdec.grading.engine.submission import Submission, load_submission
from specdec.grading.exercises.loop.checks import (
    SAMPLED,
    case_runs,
    loop_crash_hint,
    loop_families,
)
from specdec.grading.project import speculative_generate

from . import broken_loops_exercise as broken

SKELETON = broken.SOLUTION.parents[1] / "my_loop.py"
SPEC = f"{broken.SOLUTION}:speculative_generate"
SECRETS = (1, 2)  # two gradings: the generators their runs are handed


@pytest.fixture(autouse=True)
def pinned_secret(monkeypatch):
    monkeypatch.setenv(SECRET_ENV, os.environ.get(SECRET_ENV) or str(SECRETS[0]))


def test_the_solution_passes_the_loop_family():
    submission = load_submission(SPEC)
    assert submission.kind == "loop"
    result = run_families(submission, loop_families(runs=600))
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]
    names = {r.check.name for r in result.results}
    assert {"loop/greedy-catch-up", "loop/greedy-correction", "loop/t1-k2:round2"} <= names


HINTS = {  # variant -> (the check that rejects it, words of its hint)
    "no_target_rollback": ("loop/greedy-correction", "roll back the rest"),
    "target_commits_k": ("loop/greedy-correction", "(accepted + 1 slots)"),  # a crash
    "no_draft_catch_up": ("loop/t1-k2:round2", "catch up"),
    "drafts_k_to_the_end": ("loop/t1-k2:round2", "none when one token is left"),
    "ignores_eos": ("loop/topk-k3-eos:tokens", "after EOS"),
}


def test_every_variant_has_an_expected_hint():
    assert set(HINTS) == {fn.__name__ for fn in broken.VARIANTS}


GRADINGS = [  # (variant, secret): the exact (greedy) rejections under both secrets
    pytest.param(fn, secret, id=f"{fn.__name__}-{secret}")
    for fn in broken.VARIANTS
    for secret in (SECRETS if HINTS[fn.__name__][0].startswith("loop/greedy") else (None,))
]


@pytest.mark.parametrize("variant, secret", GRADINGS)
def test_a_broken_loop_is_rejected_with_its_hint(variant, secret):
    check, words = HINTS[variant.__name__]
    source = inspect.getsourcefile(variant)
    submission = Submission(variant.__name__, variant, "loop", "test", source)
    with secret_held(secret):  # None: the pinned one
        result = run_families(submission, loop_families(runs=2_500))
    failed = [r for r in result.results if r.status == "fail"]
    assert not result.passed and failed[0].check.name == check
    if failed[0].crash is not None:  # the cache's own check trips: the crash carries the hint
        assert "broken_loops_exercise.py" in failed[0].crash.where
        assert words in failed[0].crash.hint, failed[0].crash.hint
    else:
        assert words in failed[0].outcome.hint, failed[0].outcome.hint


def test_the_target_hint_names_the_round_after_a_rejection():
    # no rollback: the first wrong greedy token opens round 2, after round 1 rejected a draft
    submission = Submission("v", broken.no_target_rollback, "loop", "test", None)
    result = run_families(submission, loop_families(runs=2_500))
    hint = next(r for r in result.results if r.status == "fail").outcome.hint
    assert "first of round 2, and round 1 rejected a draft" in hint


def runs_handed(secret: int | None, n: int = 30) -> list[tuple]:
    """The first n outcomes (tokens, drafts kept per round) of the reference loop on the first
    sampled case, on the generator a grading under `secret` hands it (None: the pinned one)."""
    loop = Submission("reference loop", speculative_generate, "loop", "test", None)
    with secret_held(secret):
        outcomes = case_runs(SAMPLED[0])(loop)
        return [next(outcomes) for _ in range(n)]


def test_the_runs_generator_is_fresh_for_each_grading(monkeypatch):
    monkeypatch.setenv(SECRET_ENV, str(SECRETS[0]))
    first = runs_handed(SECRETS[0])
    assert runs_handed(None) == first  # the secret pinned: the same generator, the same runs
    assert runs_handed(SECRETS[1]) != first  # another grading: other draws


def library_error(call) -> ValueError:
    with pytest.raises(ValueError) as caught:
        call()
    return caught.value


def test_crash_hints_read_the_library_messages():
    # the hints key on the messages of the library's own checks: hold them to the real ones
    cache = KVCache(n_layer=1, n_head=1, head_size=2, capacity=4)
    commit = library_error(lambda: cache.commit(1))  # nothing was written this round
    assert "x_k is never fed" in loop_crash_hint(commit)
    cache.mark_written(4)
    full = library_error(lambda: cache.check_room(1))
    assert "roll back the rest" in loop_crash_hint(full)
    rows = np.full((2, 5), 0.2)  # p with 2 rows scores k = 1 draft; q has 2
    shapes = library_error(lambda: verify(rows, rows, [0, 1], np.random.default_rng(0)))
    assert "(accepted + 1 slots)" in loop_crash_hint(shapes)
    assert loop_crash_hint(ZeroDivisionError("division by zero")) == ""


def load_skeleton():
    name = "_my_loop_skeleton"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SKELETON)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def test_the_skeleton_names_the_grade_command():
    result = grade(f"{SKELETON}:speculative_generate")
    assert not result.passed and result.crash is not None
    assert "specdec grade notebooks/exercises/my_loop.py:speculative_generate" in str(
        result.crash.error
    )


def test_the_helper_checks_tell_missing_right_and_wrong_helpers():
    skeleton, solution = load_skeleton(), broken.sol
    assert set(skeleton.check_helpers().values()) == {"not written yet"}
    assert set(skeleton.check_helpers(solution).values()) == {"ok"}

    class NoRollback:  # the solution's helpers, but end_round forgets the rollback
        def __getattr__(self, name):
            return getattr(solution, name)

        @staticmethod
        def end_round(cache, keep):
            cache.commit(keep)

    report = skeleton.check_helpers(NoRollback())
    assert report["end_round"].startswith("AssertionError") and "0 temp" in report["end_round"]
    assert report["prefill"] == "ok"

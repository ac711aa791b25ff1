"""The grader (`specdec grade`, specdec/grading/) run on real-world samplers through adapters
(tests/interop/samplers.py): transformers' `_speculative_sampling` and a gpt-fast-style torch
verify must pass; transformers' ensemble-weight option, lossy by design, must be rejected,
with its distance from the target's law reported.

Torch costs about a millisecond a call, so these tests run the exact cases, the A/B example
and the k = 3 joint law (the grader's own checks, thresholds and seeds); the full grade of
both adapters (every law, the loop included) is recorded in docs/oracle.md.
"""

from __future__ import annotations

import pytest

from specdec.grading.engine.core import Family, run_families
from specdec.grading.engine.submission import Submission
from specdec.grading.exercises.verify.checks import verify_families
from specdec.grading.exercises.verify.exact import exact_checks
from specdec.grading.exercises.verify.joint import ab_checks, fixed_check

from .samplers import gpt_fast_verify, transformers_ensemble_verify, transformers_verify


def graded(function, checks):
    family = Family("verify", "adapter", checks)
    return run_families(Submission(function.__name__, function, "verify", "", None), [family])


@pytest.mark.parametrize(
    "function", [transformers_verify, gpt_fast_verify], ids=lambda f: f.__name__
)
def test_a_lossless_sampler_passes(function):
    result = graded(function, exact_checks() + ab_checks() + [fixed_check()])
    assert result.crash is None
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]


def test_the_ensemble_option_is_rejected_with_its_distance():
    lossy = transformers_ensemble_verify(0.5)
    full = run_families(Submission("ensemble", lossy, "verify", "", None), verify_families())
    first = next(r for r in full.results if r.status == "fail")
    assert first.check.name == "verify/greedy-mismatch"  # draft 2 has p(x) = 0, kept ~half
    assert "positive where p(x) = 0" in first.outcome.hint
    # on the A/B example the law moves from (0.6, 0.4) to (0.7, 0.3): v = (0.7, 0.3) keeps A
    # with 0.7 / 0.8, and a rejected A still becomes B, so P(A) = 0.8 * 0.875 = 0.7, TV = 0.1
    ab = graded(lossy, ab_checks())
    failed = [r for r in ab.results if r.status == "fail"]
    assert failed and failed[0].check.name == "verify/ab-output"
    story = "\n".join(failed[0].outcome.story)
    observed = float(story.split("observed ")[1].split(" ")[0])
    assert observed == pytest.approx(0.7, abs=0.02)
    assert "total variation" in story

"""`specdec grade` (lab/grading/): it accepts correct code, rejects every broken variant of
the oracle's catalogue and of more_broken.py with the hint its pattern points to, reports a
crash once at the student's line, and speaks JSON and Gradescope.

The hints are matched by a few words each, so that rewording a hint is cheap but a hint
that names the wrong mistake fails.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from distribution.broken import VARIANTS

from lab.grading import grade
from lab.grading.core import ALPHA, Family, run_families
from lab.grading.loop_checks import loop_families
from lab.grading.submission import Submission, load_submission
from lab.grading.verify_checks import verify_families

from . import more_broken
from .alternatives import always_drafts_k

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "notebooks/exercises/solutions/verify_solution.py"


def first_failure(function, kind: str, families: list[Family], name: str = ""):
    submission = Submission(name or function.__name__, function, kind, "test", None)
    grade_ = run_families(submission, families)
    failed = [r for r in grade_.results if r.status == "fail"]
    assert not grade_.passed and failed, f"{function.__name__} was not rejected"
    return grade_, failed[0]


# --------------------------------------------------------------------------------------------
# Correct code passes
# --------------------------------------------------------------------------------------------


def test_a_correct_verify_passes():
    # (the solution file is graded through the command line, below)
    result = grade("reference.verification:verify")
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]
    assert result.submission.kind == "verify"
    assert {r.family for r in result.results} == {"verify", "in-loop"}
    sampled = [r for r in result.results if r.check.sampled]
    assert sampled and all(r.outcome.p_value >= r.threshold for r in sampled)


def test_the_reference_loop_passes():
    result = grade("reference.speculative:speculative_generate")
    assert result.submission.kind == "loop"
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]
    names = [r.check.name for r in result.results]
    assert "loop/greedy-correction" in names and "loop/t1-k2:round2" in names


def test_the_false_alarm_rate_is_split_over_the_family():
    # each sampled check looks twice at alpha / (2 m): the family's union bound is alpha
    for family in verify_families() + loop_families():
        m = sum(c.sampled for c in family.checks)
        assert family.threshold * 2 * m == pytest.approx(ALPHA)


# --------------------------------------------------------------------------------------------
# Broken `verify`s: rejected, with the hint their pattern points to
# --------------------------------------------------------------------------------------------

VERIFY_HINTS = {
    # the oracle's catalogue (tests/distribution/broken.py)
    "swapped_ratio": ("verify/greedy-mismatch", "upside down"),
    "unnormalised_residual": ("verify/fixed-k3", "Normalise it"),
    "abs_residual": ("verify/greedy-mismatch", "|p - q|"),
    "residual_from_wrong_row": ("verify/greedy-mismatch", "row i + 1"),
    "bonus_from_wrong_row": ("verify/greedy-match", "bonus"),
    "one_uniform_reused": ("verify/fixed-k3", "fresh uniform"),
    # new ones (more_broken.py)
    "residual_is_p": ("verify/impossible-draft", "not from p itself"),
    "accept_with_p": ("verify/p-equals-q", "min(1, p(x)/q(x)) (not p(x)"),
    "counts_the_rejected_draft": ("verify/greedy-mismatch", "*before* the first rejection"),
    "correction_is_the_draft": ("verify/greedy-mismatch", "the rejected draft itself"),
    "bonus_from_draft_row": ("verify/greedy-match", "p_target[k]"),
    "later_rows_shifted": ("verify/greedy-match", "row i of p and of q"),
}

NEW_VERIFIES = {
    name: fn
    for name, fn in inspect.getmembers(more_broken, inspect.isfunction)
    if name in VERIFY_HINTS
}
CATALOGUE_VERIFIES = {n: v.implementation for n, v in VARIANTS.items() if v.kind == "verify"}


def test_every_new_variant_has_an_expected_hint():
    assert len(NEW_VERIFIES) == 6
    assert set(VERIFY_HINTS) >= set(NEW_VERIFIES)


@pytest.mark.parametrize("name", sorted(CATALOGUE_VERIFIES | NEW_VERIFIES))
def test_a_broken_verify_is_rejected_with_its_hint(name):
    function = (CATALOGUE_VERIFIES | NEW_VERIFIES)[name]
    grade_, failure = first_failure(function, "verify", verify_families())
    assert grade_.crash is None
    assert grade_.seconds < 60  # generous; the measured figures are in docs/oracle.md
    if name not in VERIFY_HINTS:  # appended to the catalogue later: rejected, with some hint
        assert failure.outcome.hint
        return
    check, words = VERIFY_HINTS[name]
    assert failure.check.name == check
    assert words in failure.outcome.hint, failure.outcome.hint
    # the family stopped there, and the loop family did not run on a wrong verify
    after = grade_.results[grade_.results.index(failure) + 1 :]
    assert after and all(r.status == "not run" for r in after)


# The sampled joint law alone (no exact case before it): the diagnosis must still name the
# mistake, from which positions and which tokens deviate.
FIXED_ROWS_HINTS = {
    "swapped_ratio": "upside down",
    "counts_the_rejected_draft": "counted in `accepted`",
    "unnormalised_residual": "Normalise it",
    "abs_residual": "where p <= q",
    "residual_is_p": "where p <= q",
    "correction_is_the_draft": "where p <= q",
    "residual_from_wrong_row": "follows row 1 of p instead of row 0",
    "bonus_from_wrong_row": "(yours follows row k-1)",
    "bonus_from_draft_row": "all k drafts were accepted is off",
    "one_uniform_reused": "fresh uniform",
    "later_rows_shifted": "decided correctly but draft 2",
    "accept_with_p": "p(x) = 0.300 alone",
}


@pytest.mark.parametrize("name", sorted(FIXED_ROWS_HINTS))
def test_the_joint_law_diagnosis_reads_the_pattern(name):
    from lab.grading.verify_checks import fixed_check

    function = (CATALOGUE_VERIFIES | NEW_VERIFIES)[name]
    _, failure = first_failure(function, "verify", [Family("fixed", "", [fixed_check()])])
    assert FIXED_ROWS_HINTS[name] in failure.outcome.hint, failure.outcome.hint
    assert failure.outcome.n < 20_000  # rejected at the quick look


def test_a_sampled_failure_explains_position_by_position():
    one_uniform = VARIANTS["one_uniform_reused"].implementation
    _, failure = first_failure(one_uniform, "verify", verify_families())
    story = "\n".join(failure.outcome.story)
    assert "draft 1 (token" in story and "<- off" in story
    assert failure.outcome.p_value < failure.threshold


# --------------------------------------------------------------------------------------------
# Broken loops (the catalogue's loop variants that use a draft model)
# --------------------------------------------------------------------------------------------

LOOP_HINTS = {
    "temperature_on_draft_side_only": ("loop/greedy-catch-up", "both sides"),
    "top_k_on_draft_side_only": ("loop/topk-k3-eos:tokens", "target's rows too"),
    "draft_q_without_temperature": ("loop/topk-k3-eos:tokens", "law the drafts were drawn"),
    "argmax_draft_soft_q": ("loop/t1-k2:tokens", "law the drafts were drawn"),
    "tokens_after_eos_kept": ("loop/topk-k3-eos:tokens", "after EOS"),
    "target_cache_commits_one_more": ("loop/greedy-correction", None),  # crashes
    "target_cache_keeps_rejected_slot": ("loop/greedy-correction", "target's cache"),
    "draft_cache_commits_one_more": ("loop/greedy-correction", None),  # crashes
    "draft_cache_keeps_rejected_slot": ("loop/t1-k2:round2", "drop the rejected ones"),
    "draft_skips_catch_up": ("loop/t1-k2:round2", "catch up"),
}


def test_every_model_drafter_loop_variant_is_covered():
    model_loops = {n for n, v in VARIANTS.items() if v.kind == "loop" and "lookup" not in n}
    assert set(LOOP_HINTS) <= model_loops


@pytest.mark.parametrize("name", sorted(LOOP_HINTS))
def test_a_broken_loop_is_rejected_with_its_hint(name):
    variant = VARIANTS[name]
    grade_, failure = first_failure(variant.implementation, "loop", loop_families(), name)
    check, words = LOOP_HINTS[name]
    assert failure.check.name == check
    if words is None:
        assert grade_.crash is not None and "line" in grade_.crash.where
    else:
        assert grade_.crash is None
        assert words in failure.outcome.hint, failure.outcome.hint


def test_another_round_policy_is_told_to_declare_it():
    # always drafting k is exact (its token law is the target's: test_laws.py shows it for
    # both policies, and docs/oracle.md records a full grade with --policy full passing), but
    # its accepted counts differ from the default policy's: the hint must say so, not blame
    # a cache
    _, failure = first_failure(always_drafts_k, "loop", loop_families("shrink"))
    assert failure.check.name.endswith(":round2")
    assert "--policy full" in failure.outcome.hint


# --------------------------------------------------------------------------------------------
# Crashes, loading, the kind
# --------------------------------------------------------------------------------------------


def test_a_crash_is_reported_once_at_the_students_line():
    fn = more_broken.uniforms_for_two_drafts
    source = inspect.getsourcefile(fn)
    result = run_families(Submission("x", fn, "verify", "t", source), verify_families())
    line = inspect.getsourcelines(fn)[1] + 4  # the `if u[i] >= ...` line
    assert f"more_broken.py, line {line}" in result.crash.where
    assert "draft_tokens = array([1, 3, 0])" in result.crash.inputs
    assert sum(r.status == "fail" for r in result.results) == 1
    assert all(r.status == "not run" for r in result.results[4:])


def test_the_kind_is_read_from_the_signature(tmp_path):
    assert load_submission("reference.verification:verify").kind == "verify"
    assert load_submission("reference.speculative:speculative_generate").kind == "loop"
    (tmp_path / "odd.py").write_text("def f(a, b):\n    return 0, 0\n")
    with pytest.raises(ValueError, match="--kind verify or --kind loop"):
        load_submission(f"{tmp_path / 'odd.py'}:f")
    assert load_submission(f"{tmp_path / 'odd.py'}:f", kind="verify").kind == "verify"
    assert load_submission(str(SOLUTION)).function.__name__ == "verify"  # a bare file


@pytest.mark.parametrize(
    "spec, message",
    [
        ("missing/my_verify.py:verify", "no such file"),
        ("reference.verification:verfy", "has no function 'verfy'"),
        ("no_such_module_xyz:verify", "cannot import module"),
    ],
)
def test_a_bad_spec_says_what_is_wrong(spec, message):
    with pytest.raises(ValueError, match=message):
        load_submission(spec)


def test_the_exact_cases_are_certain():
    # every exact case's expected outcome is the only one the rule allows: checked against the
    # hand-written law, so a wrong expectation cannot make a correct verify fail
    from lab.grading.laws import verify_joint_law
    from lab.grading.verify_checks import exact_checks

    assert len(exact_checks()) == 4
    P = np.array([[0.0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    assert verify_joint_law(P, np.array([[0.5, 0.5, 0.0]]), (0,)) == {(0, 2): 1.0}


# --------------------------------------------------------------------------------------------
# The command line: exit codes, --json, --gradescope
# --------------------------------------------------------------------------------------------

WRONG_VERIFY = textwrap.dedent(
    """
    import numpy as np

    def verify(p_target, q_draft, draft_tokens, rng):
        print("debugging output, which must not spoil --json")
        for i, x in enumerate(draft_tokens):
            if rng.random() >= min(1.0, p_target[i, x] / q_draft[i, x]):
                r = np.abs(p_target[i] - q_draft[i])
                return i, int(rng.choice(len(r), p=r / r.sum()))
        return len(draft_tokens), int(rng.choice(p_target.shape[1], p=p_target[-1]))
    """
)


def specdec(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lab.cli", "grade", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_command_line_rejects_with_exit_1_and_json(tmp_path):
    (tmp_path / "my_verify.py").write_text(WRONG_VERIFY)
    done = specdec("my_verify.py:verify", "--json", "--gradescope", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)  # the submission's prints went to stderr
    assert "debugging output" in done.stderr
    assert report["passed"] is False and report["kind"] == "verify"
    failed = [law for law in report["laws"] if law["status"] == "fail"]
    assert failed[0]["hint"] and failed[0]["explanation"]
    results = json.loads((tmp_path / "results.json").read_text())
    assert len(results["tests"]) == len(report["laws"])
    assert {"name", "score", "max_score", "output"} <= set(results["tests"][0])
    assert results["score"] < sum(t["max_score"] for t in results["tests"])


def test_command_line_accepts_the_solution_with_exit_0(tmp_path):
    out = tmp_path / "gs" / "results.json"
    done = specdec(f"{SOLUTION}:verify", "--gradescope", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "RESULT: PASS" in done.stdout and "PASS  verify/ab-output" in done.stdout
    results = json.loads(out.read_text())
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) > 0


def test_command_line_bad_spec_exits_2(tmp_path):
    done = specdec("nothing_here.py:verify", cwd=tmp_path)
    assert done.returncode == 2 and "no such file" in done.stderr

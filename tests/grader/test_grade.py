"""`specdec grade` (specdec/grading/): it accepts correct code, rejects every broken variant of
the oracle's catalogue and of more_broken.py with the hint its pattern points to, scores law
and rule apart (an exact rule with lower acceptance is reported as exact), runs every family
whatever another found, reports a crash once at the student's line, and speaks JSON and
Gradescope.

The hints are matched by a few words each, so that rewording a hint is cheap but a hint
that names the wrong mistake fails.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from specdec.grading import grade
from specdec.grading.engine.config import GradingConfig
from specdec.grading.engine.core import ALPHA, Family, run_families
from specdec.grading.engine.report import text_report
from specdec.grading.engine.secret import SECRET_ENV
from specdec.grading.engine.submission import Submission, load_submission
from specdec.grading.exercises.loop.checks import loop_families
from specdec.grading.exercises.verify.checks import revise_verify_hints, verify_families
from specdec.oracle.broken import VARIANTS

from . import alternatives, more_broken
from .alternatives import always_drafts_k

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "notebooks/exercises/solutions/verify_solution.py"


@pytest.fixture(autouse=True)
def pinned_secret(monkeypatch):
    # every grading here draws the same fresh inputs (engine/secret.py), so that the verdicts
    # and hints held below are reproducible; set SPECDEC_GRADING_SECRET to run them on others
    # (tests/grader/test_fresh_inputs.py varies it)
    monkeypatch.setenv(SECRET_ENV, os.environ.get(SECRET_ENV) or "45")


def first_failure(function, kind: str, families: list[Family], name: str = ""):
    submission = Submission(name or function.__name__, function, kind, "test", None)
    revise = revise_verify_hints if kind == "verify" else None
    grade_ = run_families(submission, families, revise)
    failed = [r for r in grade_.results if r.status == "fail"]
    assert not grade_.passed and failed, f"{function.__name__} was not rejected"
    return grade_, failed[0]


# --------------------------------------------------------------------------------------------
# Correct code passes
# --------------------------------------------------------------------------------------------


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
        if m:  # (the randomness family's checks are exact)
            assert family.threshold * 2 * m == pytest.approx(ALPHA)


# --------------------------------------------------------------------------------------------
# Broken `verify`s: rejected, with the hint their pattern points to
# --------------------------------------------------------------------------------------------

VERIFY_HINTS = {
    # the oracle's catalogue (specdec/oracle/broken.py)
    "swapped_ratio": ("verify/greedy-mismatch", "upside down"),
    "unnormalised_residual": ("verify/tables-k3", "Normalise it"),
    "abs_residual": ("verify/greedy-mismatch", "|p - q|"),
    "residual_from_wrong_row": ("verify/greedy-mismatch", "row i + 1"),
    "bonus_from_wrong_row": ("verify/greedy-match", "bonus"),
    "one_uniform_reused": ("verify/tables-k3", "fresh uniform for each position"),
    # new ones (more_broken.py)
    "residual_is_p": ("verify/ab-output", "not |p - q| and not p"),
    "accept_with_p": ("verify/ab-output", "that is p(A) = 0.6 alone"),
    "counts_the_rejected_draft": ("verify/greedy-mismatch", "*before* the first rejection"),
    "correction_is_the_draft": ("verify/greedy-mismatch", "the rejected draft itself"),
    "bonus_from_draft_row": ("verify/greedy-match", "p_target[k]"),
    "later_rows_shifted": ("verify/greedy-match", "row i of p and of q"),
    # a constant uniform is not told "the ratio is upside down": the exact cases that an
    # upside-down ratio fails passed, and rng/fresh-draws saw every call decide alike
    "reseeded_uniform": ("verify/ab-output", "its uniform is the same number every time"),
    "softmax_residual": ("verify/greedy-mismatch", "not with a softmax"),
    "uniform_reused_for_residual": ("verify/tables-k3", "same uniform that rejected the draft"),
    "ignores_rng": ("rng/same-seed", "a source other than `rng`"),
}

NOT_BROKEN_VERIFIES = {"pick", "leftover", "uniforms_for_two_drafts", "vectorised_without_k0"}
NEW_VERIFIES = {
    name: fn
    for name, fn in inspect.getmembers(more_broken, inspect.isfunction)
    if name not in NOT_BROKEN_VERIFIES
}
CATALOGUE_VERIFIES = {n: v.implementation for n, v in VARIANTS.items() if v.kind == "verify"}


def test_every_new_variant_has_an_expected_hint():
    assert len(NEW_VERIFIES) == 10
    assert set(VERIFY_HINTS) >= set(NEW_VERIFIES)


@pytest.mark.parametrize("name", sorted(CATALOGUE_VERIFIES | NEW_VERIFIES))
def test_a_broken_verify_is_rejected_with_its_hint(name):
    function = (CATALOGUE_VERIFIES | NEW_VERIFIES)[name]
    np.random.seed(0)  # noqa: NPY002 (ignores_rng draws from the global state: one verdict)
    grade_, failure = first_failure(function, "verify", verify_families())
    assert grade_.crash is None
    assert grade_.seconds < 60  # generous; the measured figures are in docs/oracle.md
    if name not in VERIFY_HINTS:  # appended to the catalogue later: rejected, with some hint
        assert failure.outcome.hint
        return
    check, words = VERIFY_HINTS[name]
    assert failure.check.name == check
    assert words in failure.outcome.hint, failure.outcome.hint
    # the failing family stopped there; law and rule ran whatever the other found (the
    # randomness and in-loop families confirm the law family: they run only after it passed)
    family = [r for r in grade_.results if r.family == failure.family]
    after = family[family.index(failure) + 1 :]
    assert all(r.status == "not run" for r in after)
    for name_ in ("law", "rule"):
        assert grade_.family_status(name_) != "not run"
    law_failed = grade_.family_status("law") == "fail"
    assert (grade_.family_status("randomness") == "not run") == law_failed
    in_loop = grade_.family_status("in-loop")
    assert in_loop == ("not run" if law_failed else "pass")


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
    "softmax_residual": "not with a softmax",
    "uniform_reused_for_residual": "same uniform that rejected the draft",
}


@pytest.mark.parametrize("name", sorted(FIXED_ROWS_HINTS))
def test_the_joint_law_diagnosis_reads_the_pattern(name):
    from specdec.grading.exercises.verify.joint import fixed_check

    function = (CATALOGUE_VERIFIES | NEW_VERIFIES)[name]
    _, failure = first_failure(function, "verify", [Family("fixed", "", [fixed_check()])])
    assert FIXED_ROWS_HINTS[name] in failure.outcome.hint, failure.outcome.hint
    assert failure.outcome.n < 20_000  # rejected at the quick look


def test_a_sampled_failure_explains_position_by_position():
    one_uniform = VARIANTS["one_uniform_reused"].implementation
    grade_, _ = first_failure(one_uniform, "verify", verify_families())
    failure = next(r for r in grade_.results if r.check.name == "verify/fixed-k3")
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
    # it crashes whenever k = 3: in the law family (tables-k3) and in the rule family
    # (p-equals-q); both fail, the crash is reported once (the randomness family, which
    # confirms the law family, does not run)
    fn = more_broken.uniforms_for_two_drafts
    source = inspect.getsourcefile(fn)
    result = run_families(Submission("x", fn, "verify", "t", source), verify_families())
    line = inspect.getsourcelines(fn)[1] + 4  # the `if u[i] >= ...` line
    assert len(result.crashes) == 1
    assert f"more_broken.py, line {line}" in result.crash.where
    call = "verify(p_target [4, 4] float64, q_draft [3, 4] float64, draft_tokens [3] int64, rng)"
    assert result.crash.call == call + ", k = 3"
    failed = [r for r in result.results if r.status == "fail"]
    assert [r.check.name for r in failed] == ["verify/tables-k3", "verify/p-equals-q"]
    assert all(r.crash.key() == result.crash.key() for r in failed)
    assert result.family_status("randomness") == "not run"
    report = text_report(result)
    assert report.count("Your code crashed") == 1 and "submission.py" not in report


def test_a_crash_at_zero_drafts_is_shown_at_the_students_line_with_the_k0_contract():
    fn = more_broken.vectorised_without_k0
    source = inspect.getsourcefile(fn)
    result = run_families(Submission("x", fn, "verify", "t", source), verify_families())
    crash = result.crash
    assert [r.check.name for r in result.results if r.status == "fail"] == ["verify/zero-drafts"]
    line = next(i for i, text in enumerate(open(source), 1) if "np.argmax(rejected)" in text)
    assert crash.where.startswith(f"more_broken.py, line {line}")
    assert "draft_tokens [0] int64, rng), k = 0" in crash.call and "q_draft [0, 4]" in crash.call
    assert "verify returns (0, a sample of p_target[0])" in crash.hint


CRASHES_IN_THE_LOOP = textwrap.dedent(
    """
    import numpy as np

    def verify(p_target, q_draft, draft_tokens, rng):
        k = len(draft_tokens)
        for i in range(k):
            x = int(draft_tokens[i])
            if rng.random() >= min(1.0, p_target[i, x] / q_draft[i, x]):
                r = np.maximum(p_target[i] - q_draft[i], 0.0)
                r = r if r.sum() > 0 else p_target[i]
                return i, int(rng.choice(len(r), p=r / r.sum()))
        if k == 0 and p_target.shape[1] == 5:  # only the loop's last call looks like this
            raise RuntimeError("no drafts in a V = 5 row")
        return k, int(rng.choice(p_target.shape[1], p=p_target[k]))
    """
)


def test_a_crash_inside_the_reference_loop_is_not_blamed_on_the_grader(tmp_path):
    # the student's verify raises inside the grader's loop: reported once, at the student's
    # line, with the verify call (k = 0), not wrapped again as a crash of the loop
    (tmp_path / "v.py").write_text(CRASHES_IN_THE_LOOP)
    result = grade(f"{tmp_path / 'v.py'}:verify")
    assert result.family_status("law") == "pass" and result.family_status("in-loop") == "fail"
    text = result.crash.describe()
    assert "v.py, line 13, in verify" in text and "submission.py" not in text
    assert "draft_tokens [0] int64" in result.crash.call and "p_target [1, 5]" in result.crash.call


def test_the_rows_handed_over_are_float64_and_sum_to_one():
    # the loop's rows are float32 (sums off by ~1e-8, which rng.choice refuses): verify gets
    # float64 rows normalised to sum 1, so rng.choice(V, p=row) works on every row
    from specdec.grading.engine.submission import call_verify

    seen = []

    def records(p_target, q_draft, draft_tokens, rng):
        seen.append((p_target.dtype, q_draft.dtype, p_target.sum(axis=1), q_draft.sum(axis=1)))
        return len(draft_tokens), int(rng.choice(p_target.shape[1], p=p_target[-1]))

    rows = np.random.default_rng(0).dirichlet(np.ones(7), size=3).astype(np.float32)
    rows[:, 0] += 3e-7  # off by more than rng.choice's tolerance
    sub = Submission("r", records, "verify", "t", None)
    call_verify(sub, rows, rows[:2], (1, 2), np.random.default_rng(1))
    p_dtype, q_dtype, p_sums, q_sums = seen[0]
    assert p_dtype == q_dtype == np.float64
    assert np.abs(p_sums - 1).max() < 1e-15 and np.abs(q_sums - 1).max() < 1e-15


def test_rng_choice_on_an_unnormalised_residual_gets_its_own_hint():
    def choice_without_normalising(p_target, q_draft, draft_tokens, rng):
        for i, x in enumerate(draft_tokens):
            if rng.random() >= min(1.0, p_target[i, x] / q_draft[i, x]):
                r = np.maximum(p_target[i] - q_draft[i], 0.0)
                return i, int(rng.choice(len(r), p=r))
        return len(draft_tokens), int(rng.choice(p_target.shape[1], p=p_target[-1]))

    result = run_families(
        Submission("c", choice_without_normalising, "verify", "t", None), verify_families()
    )
    assert "do not sum to 1" in str(result.crash.error)
    assert "divide it by its sum before rng.choice" in result.crash.hint


# --------------------------------------------------------------------------------------------
# Law and rule, scored apart; every family on its own
# --------------------------------------------------------------------------------------------


def test_an_exact_rule_with_lower_acceptance_is_reported_as_exact():
    # keep x with p(x), resample from p without x (EAGLE, transformers 4.36): exact for any
    # q, so every law passes; only the rule family fails, and it says so, with the acceptance
    # against the optimum: on the A/B example 0.8 * 0.6 + 0.2 * 0.4 = 0.56 vs 0.8
    spec = f"{Path(alternatives.__file__)}:keep_with_p_resample_without_x"
    required = grade(spec, isolated=False)  # a module of the tests' (it imports the reference)
    assert required.family_status("law") == required.family_status("randomness") == "pass"
    assert required.family_status("rule") == "fail" and not required.passed
    # inside the loop too it keeps fewer drafts than min(1, p/q) on the same rows: where the
    # rule is required, the in-loop family holds the verify to it there as well
    in_loop = next(r for r in required.results if r.check.name == "in-loop/t1-k2:accepted")
    assert in_loop.status == "fail" and "keeps fewer drafts" in in_loop.outcome.hint
    assert required.verdicts["in-loop"].startswith("inside the reference loop your verify keeps")
    verdict = required.verdicts["rule"]
    assert verdict.startswith("exact, but not the contract's rule")
    alpha = float(verdict.split("acceptance ")[1].split(" ")[0])
    failed = next(r for r in required.results if r.status == "fail")
    # a rate sampled from the A/B example's runs: within 6 sd of the law's 0.56
    sd = (0.56 * 0.44 / failed.outcome.n) ** 0.5
    assert alpha == pytest.approx(0.56, abs=6 * sd) and f"({alpha / 0.8:.0%} of it)" in verdict
    assert "EAGLE" in failed.outcome.hint and "biased" not in failed.outcome.hint
    report = text_report(required)
    assert report.index("PASS  law") < report.index("FAIL  rule: exact, but not")
    # the instructor's choice: with the rule not required, the rule family is reported for
    # information and the in-loop family checks the tokens alone: the same verify passes
    relaxed = GradingConfig(require_rule=False)
    optional = grade(spec, config=relaxed, isolated=False)
    assert optional.passed and optional.family_status("rule") == "fail"
    assert [r.check.name for r in optional.results if r.family == "in-loop"] == [
        "in-loop/t1-k2:tokens"
    ]
    assert "(for information)" in text_report(optional)


def test_grade_scores_with_the_config_it_is_given():
    relaxed = GradingConfig(require_rule=False)
    broken = Path(__file__).parents[2] / "specdec" / "oracle" / "broken.py"
    # the oracle's own module (it imports the project): graded in this process
    graded = grade(f"{broken}:swapped_ratio", config=relaxed, isolated=False)
    assert graded.counted == relaxed.counted() and "rule" not in graded.counted


@pytest.mark.parametrize("name", ["swapped_ratio", "reseeded_uniform", "one_uniform_reused"])
def test_a_score_does_not_depend_on_the_order_of_the_checks(name):
    function = (CATALOGUE_VERIFIES | NEW_VERIFIES)[name]
    sub = Submission(name, function, "verify", "t", None)
    forward = run_families(sub, verify_families(), revise_verify_hints)
    backward_families = verify_families()
    for family in backward_families:
        family.checks.reverse()
    backward = run_families(sub, backward_families, revise_verify_hints)
    for family in ("law", "rule", "randomness", "in-loop"):
        assert forward.family_status(family) == backward.family_status(family), family


def test_the_torch_threads_are_held_like_blas_and_restored():
    torch = pytest.importorskip("torch")
    from specdec.grading import torch_threads

    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_the_kind_is_read_from_the_name_or_the_signature(tmp_path):
    assert load_submission("reference.verification:verify").kind == "verify"
    assert load_submission("reference.speculative:speculative_generate").kind == "loop"
    # another name: a verify's four arguments, or a loop's drafter / max_new_tokens
    (tmp_path / "mine.py").write_text(
        "def check(p, q, drafts, rng):\n    return 0, 0\n"
        "def run(target, drafter, prompt):\n    return None\n"
    )
    assert load_submission(f"{tmp_path / 'mine.py'}:check").kind == "verify"
    assert load_submission(f"{tmp_path / 'mine.py'}:run").kind == "loop"
    (tmp_path / "odd.py").write_text("def f(a, b):\n    return 0, 0\n")
    with pytest.raises(ValueError, match=r"--kind \(cache, sampling, loop"):
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
    from specdec.grading.engine.laws import verify_joint_law
    from specdec.grading.exercises.verify.exact import exact_checks

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
        [sys.executable, "-m", "specdec.cli", "grade", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_command_line_rejects_with_exit_1_and_json(tmp_path):
    (tmp_path / "my_verify.py").write_text(WRONG_VERIFY)
    done = specdec("my_verify.py:verify", "--json", "--gradescope", "results.json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)  # the submission's prints went to stderr
    assert "debugging output" in done.stderr
    assert report["passed"] is False and report["kind"] == "verify"
    failed = [law for law in report["laws"] if law["status"] == "fail"]
    assert failed[0]["hint"] and failed[0]["explanation"]
    results = json.loads((tmp_path / "results.json").read_text())
    assert [t["name"].split(":")[0] for t in results["tests"]] == list(report["families"])
    assert {"name", "score", "max_score", "output", "visibility"} <= set(results["tests"][0])
    assert results["score"] < sum(t["max_score"] for t in results["tests"])


def test_a_correct_verify_passes_on_the_command_line_with_exit_0(tmp_path):
    # the project's own verify, graded once, end to end (the worked solution is graded the
    # same way by `make oracle-light`, and its law checked in tests/notebooks/)
    out = tmp_path / "gs" / "results.json"
    spec = "reference.verification:verify"
    done = specdec(spec, "--json", "--gradescope", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] and report["kind"] == "verify"
    assert list(report["families"]) == ["law", "rule", "randomness", "in-loop"]
    rule = report["families"]["rule"]["verdict"]  # a rate of 20 000 runs: 0.8 within 6 sd
    assert float(rule.split("acceptance ")[1].split(" ")[0]) == pytest.approx(0.8, abs=0.017)
    sampled = [law for law in report["laws"] if not law["exact"]]
    assert sampled and all(law["p_value"] >= law["threshold"] for law in sampled)
    assert {law["status"] for law in report["laws"]} == {"pass"}
    results = json.loads(out.read_text())
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) > 0


def test_command_line_bad_spec_exits_2(tmp_path):
    done = specdec("nothing_here.py:verify", cwd=tmp_path)
    assert done.returncode == 2 and "no such file" in done.stderr


@pytest.mark.parametrize(
    "text, spec, reason, options",
    [
        ("def verify(p, q, x, rng)\n    return 0, 0\n", "my_verify.py:verify", "SyntaxError", ()),
        (None, "my_verify.py:verify", "no such file", ()),
        ("def plan(alpha):\n    return 1\n", "my_speedup.py:plan_k", "no function 'plan_k'", ()),
        (
            "def verfy():\n    pass\n",
            "my_verify.py:verify",
            "no function 'verify'",
            ("--timeout", "60"),
        ),
    ],
    ids=["syntax-error", "missing-file", "no-such-function", "no-such-function-in-a-child"],
)
def test_code_that_does_not_load_still_gets_a_gradescope_0_with_the_reason(
    text, spec, reason, options, tmp_path, monkeypatch, capsys
):
    # as the zip does: Gradescope reads results.json whatever happened
    from specdec.grading import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the command sets it for its own process
    if text is not None:
        (tmp_path / spec.partition(":")[0]).write_text(text)
    try:
        code = main([spec, "--gradescope", "out/results.json", *options])
    except SystemExit as stopped:  # the error line, in this process
        code = stopped.code
    assert code == 2 and reason in capsys.readouterr().err
    results = json.loads((tmp_path / "out/results.json").read_text())
    assert results["score"] == 0 and "your code could not be loaded:" in results["output"]
    assert reason in results["output"]
    families = ["speedup"] if "speedup" in spec else ["law", "rule", "randomness", "in-loop"]
    assert [t["name"] for t in results["tests"]] == families and results["tests"][0]["max_score"]


TORCH_VERIFY = textwrap.dedent(
    """
    import torch

    def verify(p_target, q_draft, draft_tokens, rng):
        g = torch.Generator().manual_seed(int(rng.integers(2**63)))  # docs/oracle.md's recipe
        p, q = torch.from_numpy(p_target), torch.from_numpy(q_draft)
        k = len(draft_tokens)
        u = torch.rand(k, generator=g, dtype=torch.float64)
        for i in range(k):
            x = int(draft_tokens[i])
            if u[i] < min(1.0, float(p[i, x] / q[i, x])):
                continue
            r = torch.clamp(p[i] - q[i], min=0.0)
            r = r if float(r.sum()) > 0 else p[i]
            return i, int(torch.multinomial(r / r.sum(), 1, generator=g))
        return k, int(torch.multinomial(p[k], 1, generator=g))
    """
)


def test_torchs_global_generator_is_caught_and_the_seeding_recipe_passes(tmp_path):
    pytest.importorskip("torch")
    from specdec.grading.exercises.verify.checks import randomness_checks

    (tmp_path / "seeded.py").write_text(TORCH_VERIFY)
    (tmp_path / "global_.py").write_text(
        TORCH_VERIFY.replace("generator=g, ", "").replace(", generator=g", "")
    )
    verdicts = {}
    for name in ("seeded", "global_"):
        sub = load_submission(f"{tmp_path / name}.py:verify")
        family = Family("randomness", "", randomness_checks())
        verdicts[name] = run_families(sub, [family], revise_verify_hints)
    assert verdicts["seeded"].passed
    failure = next(r for r in verdicts["global_"].results if r.status == "fail")
    assert failure.check.name == "rng/same-seed" and "torch's global generator" in (
        failure.outcome.hint
    )

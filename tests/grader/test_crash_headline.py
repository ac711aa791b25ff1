"""A submission that raised is headed as crashed, at the student's file and line, wherever the
grader summarises a grade: each family's verdict in the text report, the JSON report, the
Gradescope results and a class's table. A wrong submission that runs keeps its family's
verdict (FAIL: ... biased) and its hint.

The untouched skeletons raise NotImplementedError: before this, my_tree.py was headed "the
walk is biased" and only the detail further down said that it had crashed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specdec.grading import grade
from specdec.grading.delivery.classroom import row_of
from specdec.grading.engine.core import run_families
from specdec.grading.engine.report import gradescope_results, json_report, text_report
from specdec.grading.engine.submission import Submission
from specdec.grading.exercises.verify.checks import revise_verify_hints, verify_families

from . import more_broken

REPO = Path(__file__).resolve().parents[2]
SKELETONS = {  # exercise function -> its untouched skeleton
    "verify": "notebooks/exercises/my_verify.py",
    "verify_tree": "notebooks/exercises/my_tree.py",
}


def raising_line(path: str) -> int:
    # the skeleton's `raise NotImplementedError(` line
    lines = (REPO / path).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if "raise NotImplementedError" in line)


@pytest.fixture(scope="module", params=sorted(SKELETONS))
def skeleton(request):
    path = SKELETONS[request.param]
    here = Path.cwd()
    try:
        os.chdir(REPO)  # the skeleton's message names the command from the repository
        result = grade(f"{path}:{request.param}")
    finally:
        os.chdir(here)
    where = f"{Path(path).name}, line {raising_line(path)}, in {request.param}"
    return result, where


def test_each_family_of_an_untouched_skeleton_is_headed_crashed_at_its_line(skeleton):
    result, where = skeleton
    headline = f"crashed: your code raised NotImplementedError at {where}"
    verdicts = [line for line in text_report(result).splitlines() if line.startswith("FAIL  ")]
    failed = [f.name for f in result.families if result.family_status(f.name) == "fail"]
    assert failed
    for name in failed:
        line = next(v for v in verdicts if v.startswith(f"FAIL  {name}: "))
        assert headline in line, line
        assert "biased" not in line and "not the contract" not in line, line


def test_the_json_and_gradescope_reports_say_crashed_with_the_line(skeleton):
    result, where = skeleton
    report = json.loads(json_report(result))
    failed = {n: f for n, f in report["families"].items() if f["status"] == "fail"}
    assert failed and all(f["crashed"] and where in f["verdict"] for f in failed.values())
    crashed_laws = [law for law in report["laws"] if law["crashed"]]
    assert crashed_laws and all(where in law["crash"] for law in crashed_laws)
    results = gradescope_results(result)
    for test in results["tests"]:
        if test["status"] == "failed" and test["output"].startswith("FAIL"):
            assert where in test["output"].splitlines()[0], test["output"]
    assert where in results["output"]


def test_the_class_table_names_the_line(skeleton):
    result, where = skeleton
    report = json.loads(json_report(result))
    row = row_of("ann", gradescope_results(result), report, None, 1.0, True)
    assert not row.passed and "crashed" in row.failure and where in row.failure, row.failure


def test_a_wrong_submission_that_runs_is_still_headed_by_its_law_with_its_hint():
    fn = more_broken.residual_is_p
    submission = Submission(fn.__name__, fn, "verify", "test", None)
    result = run_families(submission, verify_families(), revise_verify_hints)
    assert result.crash is None and not result.passed
    text = text_report(result)
    law = next(line for line in text.splitlines() if line.startswith("FAIL  law: "))
    assert "does NOT follow the target's law" in law and "crashed" not in law
    assert "hint: " in text
    report = json.loads(json_report(result))
    assert report["families"]["law"]["crashed"] is False
    assert not any(law["crash"] for law in report["laws"])


def test_a_broken_return_value_is_headed_as_a_breach_not_a_crash():
    def returns_nothing(p_target, q_draft, draft_tokens, rng):
        return None

    submission = Submission("returns_nothing", returns_nothing, "verify", "test", None)
    result = run_families(submission, verify_families(), revise_verify_hints)
    text = text_report(result)
    law = next(line for line in text.splitlines() if line.startswith("FAIL  law: "))
    assert "the value your verify returned broke the contract: verify must return" in law, law

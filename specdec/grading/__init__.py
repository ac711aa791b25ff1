"""`specdec grade PATH.py:function`: the oracle as a grader, fast and in plain words.

It runs only the checks that exercise the submitted code (a `verify` or a whole loop, the
contract of `pytest -m distribution --verify / --speculative`), cheapest and most telling
first, in families scored on their own (a verify's law, rule, randomness, and in-loop); a
family stops at its first decisive failure, and each failure is explained on the smallest
case that shows it, with a hint chosen from the whole pattern of passed and failed checks.
`specdec/grading/grading.toml` holds what an instructor may set (is the contract's rule
required; points and visibility per family); `python -m specdec.grading.delivery.gradescope
build` makes the Gradescope autograder. The exhaustive mode stays `pytest -m distribution
--verify=...`.

    from specdec.grading import grade
    result = grade("my_verify.py:verify")   # -> Grade; result.passed

Pure Python + NumPy + SciPy: no pytest, no torch, no matplotlib at run time.

The layers (tests/grader/test_layers.py holds them to this):

    project.py      the one door to the rest of the project (reference, specdec.costs,
                    specdec.standins): what the exercises' checks use from outside the grader
    engine/         what grades any exercise, knowing none of them
        core.py         checks, families, their looks and the grade (run_families)
        laws.py         the expected laws, derived apart from the reference
        submission.py   loading a submission and calling it safely; grade.py: grade()
        replies.py      every reply of a worker checked; answers.py: a deterministic
                        exercise's cases asked once, judged group by group, with their hints
        sandbox.py      the worker a submitted file runs in; worker_setup.py: what it is given
        quoting.py      a submission's text and numbers, cut and quoted before anyone reads them
        secret.py       the grading's secret, from which every scored check draws its inputs
        worker/         worker.py, wire.py, confinement.py: copied alone into the worker's
                        scratch folder (they import only each other, the stdlib and NumPy)
        config.py       the instructor's settings (grading.toml); report.py: text and JSON
        closure.py      what grading imports, for the Gradescope zip
    exercises/      __init__.py: the registry (stdlib only); then one folder per exercise,
                    holding its checks, cases and hints: cache/ sampling/ loop/ speedup/
                    verify/ lookup/ tree/ tree_mask/ callables/ batch/ eagle_align/
                    eagle_block/ eagle_ttt/ eagle_tree/
    delivery/       how a grade reaches people: cli.py (`specdec grade`), classroom.py
                    (`specdec grade-class`), gradescope.py (the autograder zip and its run)

Imports run one way: delivery/ uses the engine and the registry; an exercise's folder uses
the engine and project.py (and, sideways, another exercise's helpers); the engine uses only
the registry, which finds an exercise's checks by their "module:function" names, and never
project.py (so the cache's zip ships no model code). This file only re-exports the public
names below.
"""

from __future__ import annotations

from specdec.grading.delivery.cli import (
    GRADESCOPE_RESULTS,
    add_class_parser,
    add_grade_parser,
    main,
)
from specdec.grading.engine.core import Grade
from specdec.grading.engine.grade import POLICIES, grade, torch_threads
from specdec.grading.engine.report import json_report, text_report

__all__ = [
    "GRADESCOPE_RESULTS",
    "POLICIES",
    "Grade",
    "add_class_parser",
    "add_grade_parser",
    "grade",
    "json_report",
    "main",
    "text_report",
    "torch_threads",
]

"""`specdec grade PATH.py:function`: the oracle as a grader, fast and in plain words.

It runs only the checks that exercise the submitted code (a `verify` or a whole loop, the
contract of `pytest -m distribution --verify / --speculative`), cheapest and most telling
first, stops a family at its first decisive failure, and explains each failure on the
smallest case that shows it. The exhaustive mode stays `pytest -m distribution --verify=...`.

    from lab.grading import grade
    result = grade("my_verify.py:verify")   # -> Grade; result.passed

Pure Python + NumPy + SciPy: no pytest, no torch, no matplotlib at run time.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from lab.grading.core import Grade, run_families
from lab.grading.submission import load_submission

POLICIES = ("shrink", "full")


def grade(spec: str, kind: str = "auto", policy: str = "shrink") -> Grade:
    """Load the function named by `spec` and run its families of checks."""
    if policy not in POLICIES:
        raise ValueError(f"--policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    submission = load_submission(spec, kind)
    if submission.kind == "verify":
        from lab.grading.verify_checks import verify_families

        families = verify_families()
    else:
        from lab.grading.loop_checks import loop_families

        families = loop_families(policy)
    return run_families(submission, families)


def add_grade_parser(sub) -> None:
    """Add the `grade` subcommand to the `specdec` parser's subparsers."""
    parser = sub.add_parser(
        "grade",
        help="grade your verify (or loop) in seconds, with plain-words hints",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument(
        "spec",
        metavar="PATH.py:FUNCTION",
        help="the function to grade: path/to/file.py:verify, path/to/file.py (its verify or "
        "speculative_generate) or package.module:function",
    )
    parser.add_argument(
        "--kind",
        choices=["auto", "verify", "loop"],
        default="auto",
        help="what the function is (default: read from its signature)",
    )
    parser.add_argument(
        "--policy",
        choices=POLICIES,
        default="shrink",
        help="a loop's round policy, for the accepted-count laws: shrink = draft "
        "min(k, remaining - 1) like the reference (default); full = always draft k and cut",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--gradescope",
        nargs="?",
        const="results.json",
        default=None,
        metavar="PATH",
        help="also write Gradescope's results.json (default path: ./results.json)",
    )
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    parser.set_defaults(func=cmd_grade)


def cmd_grade(args) -> int:
    from lab.grading.report import json_report, text_report, write_gradescope

    # whatever the submission prints goes to stderr, so that stdout holds only the report
    # (and --json stays parseable)
    with contextlib.redirect_stdout(sys.stderr):
        result = grade(args.spec, args.kind, args.policy)
    print(json_report(result) if args.json else text_report(result))
    if args.gradescope:
        write_gradescope(result, Path(args.gradescope))
        print(f"written: {args.gradescope}", file=sys.stderr)
    return 0 if result.passed else 1


def main(argv: list[str] | None = None) -> int:
    """`python -m lab.grading PATH.py:function`: the same command without the `specdec` CLI."""
    parser = argparse.ArgumentParser(prog="specdec")
    add_grade_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["grade", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except ValueError as err:
        parser.exit(2, f"specdec grade: error: {err}\n")

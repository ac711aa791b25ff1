"""`specdec grade PATH.py:function`: the oracle as a grader, fast and in plain words.

It runs only the checks that exercise the submitted code (a `verify` or a whole loop, the
contract of `pytest -m distribution --verify / --speculative`), cheapest and most telling
first, in families scored on their own (a verify's law, rule, randomness, and in-loop); a
family stops at its first decisive failure, and each failure is explained on the smallest
case that shows it, with a hint chosen from the whole pattern of passed and failed checks.
`specdec/grading/grading.toml` holds what an instructor may set (is the contract's rule
required; points and visibility per family); `python -m specdec.grading.gradescope build` makes
the Gradescope autograder. The exhaustive mode stays `pytest -m distribution --verify=...`.

    from specdec.grading import grade
    result = grade("my_verify.py:verify")   # -> Grade; result.passed

Pure Python + NumPy + SciPy: no pytest, no torch, no matplotlib at run time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from specdec.grading.config import GradingConfig, load_config
from specdec.grading.core import Grade, run_families
from specdec.grading.exercises import KINDS, families_of, kind_of_name, listing, revise_of
from specdec.grading.submission import load_submission

POLICIES = ("shrink", "full")


def grade(
    spec: str,
    kind: str = "auto",
    policy: str = "shrink",
    config: GradingConfig | None = None,
    threads: int = 1,
    isolated: bool = True,
) -> Grade:
    """Load the function named by `spec` and run its families of checks.

    A file runs in a worker process (sandbox.py); `isolated=False` imports it here, for
    trusted code only. BLAS and torch are held to `threads` threads while the submission is
    loaded and graded: with as many threads as cores, any other busy process makes them wait
    for each other.
    """
    if policy not in POLICIES:
        raise ValueError(f"--policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    config = config or GradingConfig()
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=threads, user_api="blas"):
        submission = load_submission(spec, kind, threads, isolated)
        try:
            with torch_threads(threads):  # a module loaded here may have imported torch
                families = families_of(submission.kind, policy)
                result = run_families(submission, families, revise_of(submission.kind))
        finally:
            submission.close()
            show_output(submission)
    result.counted = config.counted()
    return result


def show_output(submission) -> None:
    """What a submitted file printed in its worker, on stderr, marked as its own: never
    mixed with the report (a printed "PASS" is the student's text, not a verdict)."""
    printed = submission.sandbox.output() if submission.sandbox is not None else ""
    if printed.strip():
        lines = printed.rstrip("\n").splitlines()
        print(f"what {Path(submission.source or '').name} printed while graded:", file=sys.stderr)
        print("\n".join(f"  | {line}" for line in lines), file=sys.stderr)


@contextlib.contextmanager
def torch_threads(threads: int):
    """Hold torch (if the submission imported it) to `threads` intra-op threads, then restore."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def add_grade_parser(sub) -> None:
    """Add the `grade` subcommand to the `specdec` parser's subparsers."""
    parser = sub.add_parser(
        "grade",
        help="grade your verify (or loop) in seconds, with plain-words hints",
        description=__doc__.split("\n\n")[0],
        epilog=GRADE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "spec",
        metavar="PATH.py:FUNCTION",
        nargs="?",
        help="the function to grade: path/to/file.py:verify, path/to/file.py (its verify or "
        "speculative_generate) or package.module:function",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the exercises and their skeletons, and stop"
    )
    parser.add_argument(
        "--kind",
        choices=["auto", *KINDS],
        default="auto",
        help="which exercise the function solves (default: read from its name, else from its "
        "signature)",
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
        const=GRADESCOPE_RESULTS,
        default=None,
        metavar="PATH",
        help=f"also write Gradescope's results.json (default path: {GRADESCOPE_RESULTS})",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE.toml",
        help="the instructor's settings: whether the contract's rule is required, points and "
        "visibility per family (default: specdec/grading/grading.toml's values)",
    )
    parser.add_argument("--threads", type=int, default=1, help="BLAS and torch threads (default 1)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="stop the whole grading after S seconds (a function that never returns): it then "
        "runs in a child process and a timeout fails with exit code 1 (default: no limit, in "
        "this process)",
    )
    parser.set_defaults(func=cmd_grade)


GRADE_EPILOG = """\
a whole class at once (a folder of submissions -> a CSV and a markdown table):
  specdec grade-class SUBMISSIONS/ [--exercise KIND] --out GRADES/
the Gradescope autograder zip, to upload:
  python -m specdec.grading.gradescope build autograder.zip [--exercise KIND]
      [--config my_grading.toml]"""


def add_class_parser(sub) -> None:
    """Add the `grade-class` subcommand (specdec/grading/classroom.py: a folder of submissions
    graded at once) to the `specdec` parser's subparsers."""
    from specdec.grading.classroom import add_class_parser as add

    add(sub)


GRADESCOPE_RESULTS = "/autograder/results/results.json"  # where Gradescope reads it


def cmd_grade(args) -> int:
    from specdec.grading.report import (
        json_report,
        text_report,
        write_gradescope,
        write_json,
        zero_results,
    )

    if args.list:
        print(listing())
        return 0
    if not args.spec:
        raise ValueError("give the function to grade, PATH.py:FUNCTION (or --list)")
    config = load_config(args.config)
    if args.timeout is not None:
        return grade_in_child(args, config)
    # torch reads this when it is first imported, even by the submission's first call
    # (grade() also sets the count of a torch imported when the file is loaded)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(args.threads, 1)))
    # whatever the submission prints goes to stderr, so that stdout holds only the report
    # (and --json stays parseable)
    with contextlib.redirect_stdout(sys.stderr):
        try:
            result = grade(args.spec, args.kind, args.policy, config, max(args.threads, 1))
        except ValueError as error:  # not loaded (a syntax error, no such function or file)
            if args.gradescope:  # Gradescope still needs its results.json: 0, and why
                reason = f"your code could not be loaded: {error}"
                write_json(zero_results(reason, config, kind_asked(args)), args.gradescope)
                print(f"written: {args.gradescope}", file=sys.stderr)
            raise
    print(json_report(result) if args.json else text_report(result))
    if args.gradescope:
        write_gradescope(result, Path(args.gradescope), config)
        print(f"written: {args.gradescope}", file=sys.stderr)
    return 0 if result.passed else 1


def kind_asked(args) -> str:
    """The exercise a command asks to grade, for the families of a 0 (auto: the one the
    function's name says, when one does)."""
    if args.kind != "auto":
        return args.kind
    return kind_of_name(args.spec.rpartition(":")[2]) or args.kind


def grade_in_child(args, config: GradingConfig) -> int:
    """`specdec grade --timeout S`: the same grading in a child process, stopped after S s.

    The child is `python -m specdec.grading` without --timeout (specdec/grading/gradescope.py's
    runner, the one Gradescope's runs use); its report and what the submission printed are
    passed on as they are."""
    from specdec.grading.gradescope import failure_reason, results_of, run_grader
    from specdec.grading.report import write_json

    if args.timeout <= 0:
        raise ValueError(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    extra = ("--json",) if args.json else ()
    child = run_grader(
        args.spec,
        args.kind,
        args.policy,
        Path(args.config).resolve() if args.config else None,
        args.timeout,
        extra,
        cwd=Path.cwd(),
        threads=max(args.threads, 1),
    )
    print(child.stderr, end="", file=sys.stderr)
    reason = failure_reason(child)
    if reason is None:
        print(child.stdout, end="")
    elif child.timed_out:
        stopped = {"spec": args.spec, "passed": False, "timed_out": True, "reason": reason}
        print(json.dumps(stopped, indent=2) if args.json else f"{reason}\nRESULT: FAIL")
    if args.gradescope:  # a grade, or 0 and why, as the zip writes
        write_json(results_of(child, replace(config, kind=kind_asked(args))), args.gradescope)
        print(f"written: {args.gradescope}", file=sys.stderr)
    if reason is not None and not child.timed_out and child.returncode != 2:
        # its traceback is above (exit code 2: its own error line is)
        print(reason.splitlines()[0], file=sys.stderr)
    return 1 if child.timed_out or child.returncode < 0 else child.returncode


def main(argv: list[str] | None = None) -> int:
    """`python -m specdec.grading PATH.py:function`: the same command without the `specdec` CLI."""
    parser = argparse.ArgumentParser(prog="specdec")
    add_grade_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["grade", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except ValueError as err:
        parser.exit(2, f"specdec grade: error: {err}\n")

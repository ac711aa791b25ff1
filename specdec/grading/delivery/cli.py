"""`specdec grade PATH.py:function`: the oracle as a grader, fast and in plain words.

The command line of the grader: `specdec grade` (and `python -m specdec.grading`, the same
without the rest of the CLI), its options, and `--timeout`, which grades in a child process as
the Gradescope run does (delivery/gradescope.py). The grading itself is engine/grade.py's
`grade()`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
from dataclasses import replace
from pathlib import Path

from specdec.grading.engine.config import GradingConfig, load_config
from specdec.grading.engine.grade import POLICIES, grade
from specdec.grading.engine.quoting import one_line, without_paths
from specdec.grading.engine.report import (
    gradescope_results,
    json_report,
    text_report,
    write_json,
    zero_results,
)
from specdec.grading.engine.submission import LoadError
from specdec.grading.exercises import KINDS, kind_of_name, listing

# classroom.py and gradescope.py are imported where they are used, not here: each also runs
# as `python -m specdec.grading.delivery.<module>`, and that imports the package first, whose
# __init__.py imports this file; imported here, the module would then run a second time as
# __main__ beside its first copy (runpy warns of it on stderr, and gradescope.RUNNING, the
# children to stop on Ctrl-C, would be two sets)


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
  python -m specdec.grading.delivery.gradescope build autograder.zip [--exercise KIND]
      [--config my_grading.toml]"""


def add_class_parser(sub) -> None:
    """Add the `grade-class` subcommand (delivery/classroom.py: a folder of submissions graded
    at once) to the `specdec` parser's subparsers."""
    from specdec.grading.delivery.classroom import add_class_parser as add  # runs as -m: above

    add(sub)


GRADESCOPE_RESULTS = "/autograder/results/results.json"  # where Gradescope reads it


def cmd_grade(args) -> int:
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
            report = json_report(result) if args.json else text_report(result)
            results = gradescope_results(result, config) if args.gradescope else None
        except LoadError as error:  # not loaded (a syntax error, no such function or file)
            if args.gradescope:  # Gradescope still needs its results.json: 0, and why
                reason = f"your code could not be loaded: {error}"
                write_json(zero_results(reason, config, kind_asked(args)), args.gradescope)
                print(f"written: {args.gradescope}", file=sys.stderr)
            raise
        except Exception as error:  # the grader's own failure: neither a load error nor a
            # crash of the submission's (those are caught where it is called, and graded 0)
            return grader_failed(error, args, config)
    print(report)
    if results is not None:
        write_json(results, Path(args.gradescope))
        print(f"written: {args.gradescope}", file=sys.stderr)
    return 0 if result.passed else 1


GRADER_FAILED = "specdec grade: the grader failed"  # starts the last line of its stderr
GRADER_FAILED_EXIT = 3  # 0 passed, 1 failed, 2 not loaded (or a bad option), 3 this


def grader_failed(error: Exception, args, config: GradingConfig) -> int:
    """The grader itself failed: its traceback on stderr for whoever reports it, then one line
    that says so (the zip's runner reads it: gradescope.failure_reason), and with --gradescope
    a 0 whose reason names the error without the grader's paths."""
    traceback.print_exc(file=sys.stderr)
    reason = grader_failure(error)
    if args.gradescope:
        write_json(zero_results(reason, config, kind_asked(args)), args.gradescope)
        print(f"written: {args.gradescope}", file=sys.stderr)
    print(f"{GRADER_FAILED}{reason.removeprefix('the grader failed')}", file=sys.stderr)
    return GRADER_FAILED_EXIT


def grader_failure(error: BaseException) -> str:
    """'the grader failed (OverflowError: ...); please report it', in one line: what was
    raised, its absolute paths cut to their last part (the grader's folders are not the
    student's to see), its message cut."""
    said = without_paths(one_line(str(error), 300))
    return (
        f"the grader failed ({type(error).__name__}: {said}) while grading your code: it is "
        f"the grader's mistake, not yours; please report it"
    )


def kind_asked(args) -> str:
    """The exercise a command asks to grade, for the families of a 0 (auto: the one the
    function's name says, when one does)."""
    if args.kind != "auto":
        return args.kind
    return kind_of_name(args.spec.rpartition(":")[2]) or args.kind


def grade_in_child(args, config: GradingConfig) -> int:
    """`specdec grade --timeout S`: the same grading in a child process, stopped after S s.

    The child is `python -m specdec.grading` without --timeout (delivery/gradescope.py's
    runner, the one Gradescope's runs use); its report and what the submission printed are
    passed on as they are."""
    from specdec.grading.delivery.gradescope import (  # runs as -m: see the imports above
        failure_reason,
        results_of,
        run_grader,
    )

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

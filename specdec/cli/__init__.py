"""The `specdec` command. All printing and timing lives here, at the edge."""

# (the docstring above is `specdec --help`'s description.) One module per command:
#
#     demo.py     specdec demo: one run, round by round
#     bench.py    specdec bench: the sweep over k and T (--backend gpu: the twin's benchmark)
#     methods.py  specdec bench with several drafters: the method table
#     course.py   specdec course DIR: the notebooks and exercises, unpacked
#     options.py  the options several commands share, and their checks
#     inputs.py   what the options name: the model pair, the core that runs it, the prompts
#
# `specdec grade` and `specdec grade-class` come from the grader (specdec/grading/).

from __future__ import annotations

import argparse

from specdec.cli import bench, course, demo
from specdec.grading import add_class_parser, add_grade_parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo.add_parser(sub)
    bench.add_parser(sub)
    course.add_parser(sub)
    add_grade_parser(sub)  # `specdec grade PATH.py:function` (specdec/grading/)
    add_class_parser(sub)  # `specdec grade-class FOLDER`: a whole class at once
    return parser


def main(argv: list[str] | None = None) -> int:
    from threadpoolctl import threadpool_limits

    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "threads", 1) < 1:
        parser.exit(2, f"specdec: error: --threads must be >= 1, got {args.threads}\n")
    try:
        # BLAS threads: with as many threads as cores, any other busy process makes the
        # threads of a small matrix product wait for each other (docs/benchmarks.md measured
        # how much). One thread is steady; --threads changes it.
        with threadpool_limits(limits=args.threads, user_api="blas"):
            return args.func(args)
    except ValueError as err:  # bad input: one clear line, no traceback
        parser.exit(2, f"specdec: error: {err}\n")
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's usual code, 128 + SIGINT
        parser.exit(130, "specdec: interrupted\n")

"""`specdec course DIR`: the notebooks and exercises, unpacked to open with `jupyter lab`."""

from __future__ import annotations

from specdec.cli.options import HelpWithDefaults
from specdec.course import unpack_course


def add_parser(sub) -> None:
    course = sub.add_parser(
        "course",
        help="unpack the notebooks and exercises into a folder, to open with `jupyter lab DIR`",
        formatter_class=HelpWithDefaults,
    )
    course.add_argument("folder", metavar="DIR", help="where to put them (created if missing)")
    course.add_argument(
        "--solutions",
        action="store_true",
        help="also copy the exercises' worked solutions (left out by default)",
    )
    course.set_defaults(func=cmd_course, threads=1)


def cmd_course(args) -> int:
    written = unpack_course(args.folder, solutions=args.solutions)
    notebooks = sum(1 for path in written if path.suffix == ".ipynb")
    exercises = sum(1 for path in written if path.name.startswith("my_"))
    solutions = sum(1 for path in written if path.parent.name == "solutions")
    print(
        f"wrote {len(written)} files to {args.folder}: {notebooks} notebooks (with their "
        f"jupytext sources), {exercises} exercises"
        + (f", {solutions} solutions" if solutions else " (no solutions: --solutions adds them)")
    )
    print(f"open them with: jupyter lab {args.folder}")
    print("grade an exercise from there: specdec grade exercises/my_verify.py:verify")
    return 0

"""`specdec course DIR`: the notebooks and exercises, unpacked to open with `jupyter lab`;
`--instructor BUNDLE`: the solutions and the check-yourself answers, in a folder apart."""

from __future__ import annotations

from pathlib import Path

from specdec.cli.options import HelpWithDefaults
from specdec.course import ANSWERS, unpack_course


def add_parser(sub) -> None:
    course = sub.add_parser(
        "course",
        help="unpack the notebooks and exercises into a folder, to open with `jupyter lab DIR`",
        formatter_class=HelpWithDefaults,
    )
    course.add_argument(
        "folder",
        metavar="DIR",
        nargs="?",
        help="where to put the students' copy (created if missing)",
    )
    course.add_argument(
        "--solutions",
        action="store_true",
        help="also copy the exercises' worked solutions and the check-yourself answers "
        "(left out by default)",
    )
    course.add_argument(
        "--instructor",
        metavar="BUNDLE",
        help="also write the instructors' bundle into BUNDLE, a folder apart from DIR: the "
        "worked solutions and the answers to the notebooks' check-yourself questions",
    )
    course.set_defaults(func=cmd_course, threads=1)


def cmd_course(args) -> int:
    if args.folder is None and args.instructor is None:
        raise ValueError("give DIR (the students' copy), --instructor BUNDLE, or both")
    written = unpack_course(args.folder, solutions=args.solutions, instructor=args.instructor)
    if args.instructor is not None:
        bundle = Path(args.instructor)
        mine = [path for path in written if path.is_relative_to(bundle)]
        written = [path for path in written if not path.is_relative_to(bundle)]
        solved = sum(1 for path in mine if path.suffix == ".py")
        print(
            f"wrote the instructors' bundle to {bundle}: {solved} worked solutions and the "
            f"check-yourself answers ({ANSWERS}); keep it apart from the students' copy"
        )
        if args.folder is None:
            return 0
    notebooks = sum(1 for path in written if path.suffix == ".ipynb")
    exercises = sum(1 for path in written if path.name.startswith("my_"))
    solutions = sum(1 for p in written if p.parent.name == "solutions" and p.suffix == ".py")
    print(
        f"wrote {len(written)} files to {args.folder}: {notebooks} notebooks (with their "
        f"jupytext sources), {exercises} exercises"
        + (f", {solutions} solutions" if solutions else " (no solutions: --solutions adds them)")
    )
    print(f"open them with: jupyter lab {args.folder}")
    print("grade an exercise from there: specdec grade exercises/my_verify.py:verify")
    return 0

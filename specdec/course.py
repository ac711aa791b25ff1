"""The course unpacked for a student: `specdec course DIR`.

The notebooks and exercises ship in the wheel as the package data of `specdec.notebooks` (the
checkout's notebooks/ folder, mapped by pyproject.toml), so an installed package can hand a
student their own copy to open with `jupyter lab DIR`: the rendered notebooks (outputs
included), their jupytext sources, and the exercise skeletons. The worked solutions are left
out unless asked for: a teacher hands out a copy without them. The instructors' bundle
(`specdec course DIR --instructor BUNDLE`) holds what the student copy leaves out, in a folder
of its own: the worked solutions and the answers to each notebook's "check yourself"
questions (notebooks/exercises/solutions/check_yourself.md), with a README that says how to
grade (docs/teaching.md).

Nothing already in DIR is ever overwritten: if any file the course would write is there, the
call refuses and writes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath

NOTEBOOK = re.compile(r"^\d\d_\w+\.(ipynb|py)$")  # NN_name.ipynb and its source NN_name.py

README = """\
# Speculative decoding, the course (specdec-lab {version})

Unpacked by `specdec course`. Open the notebooks with

    jupyter lab {folder}

Each `NN_name.ipynb` is rendered with its outputs; `NN_name.py` is the same notebook as
plain text (jupytext), which JupyterLab opens as a notebook too (right-click > Open With >
Jupytext Notebook, with the `jupytext` package installed). They import the installed
package (`reference`, `specdec`), so they run wherever `pip install specdec-lab[lab]` ran.

The exercises are in `exercises/` (one per idea, in the notebooks' order: see
exercises/README.md). Write the function in the skeleton, then grade it from this folder:

    specdec grade exercises/my_verify.py:verify
    specdec grade --list          # every exercise and its function
{solutions}"""

WITH_SOLUTIONS = "\nWorked solutions are in `exercises/solutions/`: try first.\n"
WITHOUT_SOLUTIONS = (
    "\nThe worked solutions are not in this copy (`specdec course DIR --solutions` adds them).\n"
)


INSTRUCTOR_README = """\
# Speculative decoding, the instructors' bundle (specdec-lab {version})

Written by `specdec course --instructor`. Keep it apart from the students' copy: it holds
what that copy leaves out.

- `solutions/`: the worked solution of every exercise. Each passes its grader:

      specdec grade solutions/verify_solution.py:verify
      specdec grade --list          # every exercise, its function and its notebook

- `solutions/{answers}`: the answers to the "check yourself" questions that end each
  notebook.

A whole class at once: `specdec grade-class FOLDER --exercise KIND` (a table and a CSV of
scores); a Gradescope autograder per exercise: `python -m specdec.grading.delivery.gradescope
build autograder.zip --exercise KIND`. The schedule, each notebook's objectives and study
time, and how grading works: docs/teaching.md of the project.
"""

ANSWERS = "check_yourself.md"  # in notebooks/exercises/solutions/: instructors only


@dataclass(frozen=True)
class CourseFile:
    """One file of the course: where it lies in the package and where it goes in DIR."""

    source: Traversable
    relative: PurePosixPath  # its path inside DIR


def course_root() -> Traversable:
    # the packaged notebooks/ folder, wherever the package was installed
    return files("specdec.notebooks")


def course_files(solutions: bool = False, root: Traversable | None = None) -> list[CourseFile]:
    """The notebooks (rendered and source), the exercises (skeletons and READMEs), and the
    solutions if asked, in a fixed order."""
    root = course_root() if root is None else root
    chosen = [
        CourseFile(item, PurePosixPath(item.name))
        for item in root.iterdir()
        if item.is_file() and NOTEBOOK.match(item.name)
    ]
    exercises = root / "exercises"
    chosen += [
        CourseFile(item, PurePosixPath("exercises", item.name))
        for item in exercises.iterdir()
        if item.is_file() and item.name.endswith((".py", ".md"))
    ]
    if solutions:
        chosen += [
            CourseFile(item, PurePosixPath("exercises", "solutions", item.name))
            for item in (exercises / "solutions").iterdir()
            if item.is_file() and (item.name.endswith(".py") or item.name == ANSWERS)
        ]
    if not any(f.relative.suffix == ".ipynb" for f in chosen):
        raise FileNotFoundError(
            f"no notebooks in {root}: this install of specdec-lab does not carry the course "
            "(reinstall it from a wheel or a checkout)"
        )
    return sorted(chosen, key=lambda f: (len(f.relative.parts), str(f.relative)))


def installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specdec-lab")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "from a checkout"


def instructor_files(root: Traversable | None = None) -> list[CourseFile]:
    """The instructors' bundle: every worked solution and the check-yourself answers, under
    solutions/ (the README is written apart)."""
    chosen = [
        CourseFile(f.source, PurePosixPath(*f.relative.parts[1:]))
        for f in course_files(solutions=True, root=root)
        if f.relative.parts[:2] == ("exercises", "solutions")
    ]
    if not any(f.relative.name == ANSWERS for f in chosen):
        raise FileNotFoundError(
            f"no {ANSWERS} among the solutions: this install of specdec-lab does not carry the "
            "instructors' answers (reinstall it from a wheel or a checkout)"
        )
    return chosen


def readme_text(folder: Path, solutions: bool) -> str:
    installed = installed_version()
    return README.format(
        version=installed,
        folder=folder,
        solutions=WITH_SOLUTIONS if solutions else WITHOUT_SOLUTIONS,
    )


def unpack_course(
    folder: str | Path | None, solutions: bool = False, instructor: str | Path | None = None
) -> list[Path]:
    """Copy the course into `folder` (created if missing) and, given `instructor`, the
    instructors' bundle into that folder; return the files written.

    Refuses, writing nothing, if any of those files exists already, or if the bundle would
    lie inside the students' copy or hold it (ValueError)."""
    plan: list[tuple[Path, CourseFile | str]] = []  # (target, its source or its text)
    if folder is not None:
        folder = Path(folder)
        check_folder(folder, "the course")
        plan += [(folder / f.relative, f) for f in course_files(solutions)]
        plan.append((folder / "README.md", readme_text(folder, solutions)))
    if instructor is not None:
        bundle = Path(instructor)
        check_folder(bundle, "the instructors' bundle")
        if folder is not None:
            a, b = folder.resolve(), bundle.resolve()
            if a == b or a.is_relative_to(b) or b.is_relative_to(a):
                raise ValueError(
                    f"the instructors' bundle {bundle} and the students' copy {folder} must be "
                    "two separate folders (neither inside the other): the copy you hand out "
                    "must not carry the solutions or the answers"
                )
        plan += [(bundle / f.relative, f) for f in instructor_files()]
        text = INSTRUCTOR_README.format(version=installed_version(), answers=ANSWERS)
        plan.append((bundle / "README.md", text))
    if not plan:
        raise ValueError(
            "nothing to write: give the course's folder DIR, --instructor BUNDLE, or both"
        )
    present = [t for t, _ in plan if t.exists()]
    if present:
        shown = ", ".join(str(t) for t in present[:5])
        more = f" and {len(present) - 5} more" if len(present) > 5 else ""
        raise ValueError(
            f"{shown}{more} already there: nothing was written (the course never "
            "overwrites a file; choose an empty folder, or move those files away)"
        )
    for target, source in plan:
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, str):
            target.write_text(source)
        else:
            target.write_bytes(source.source.read_bytes())
    return [t for t, _ in plan]


def check_folder(folder: Path, what: str) -> None:
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder: choose a folder for {what}")

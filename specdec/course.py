"""The course unpacked for a student: `specdec course DIR`.

The notebooks and exercises ship in the wheel as the package data of `specdec.notebooks` (the
checkout's notebooks/ folder, mapped by pyproject.toml), so an installed package can hand a
student their own copy to open with `jupyter lab DIR`: the rendered notebooks (outputs
included), their jupytext sources, and the exercise skeletons. The worked solutions are left
out unless asked for: a teacher hands out a copy without them.

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
    "\nThe worked solutions are not in this copy "
    "(`specdec course DIR --solutions` adds them).\n"
)


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
            if item.is_file() and item.name.endswith(".py")
        ]
    if not any(f.relative.suffix == ".ipynb" for f in chosen):
        raise FileNotFoundError(
            f"no notebooks in {root}: this install of specdec-lab does not carry the course "
            "(reinstall it from a wheel or a checkout)"
        )
    return sorted(chosen, key=lambda f: (len(f.relative.parts), str(f.relative)))


def readme_text(folder: Path, solutions: bool) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("specdec-lab")
    except PackageNotFoundError:  # run from a checkout that was never installed
        installed = "from a checkout"
    return README.format(
        version=installed,
        folder=folder,
        solutions=WITH_SOLUTIONS if solutions else WITHOUT_SOLUTIONS,
    )


def unpack_course(folder: str | Path, solutions: bool = False) -> list[Path]:
    """Copy the course into `folder` (created if missing) and return the files written.

    Refuses, writing nothing, if any of those files exists already (ValueError)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder: choose a folder for the course")
    chosen = course_files(solutions)
    targets = [folder / f.relative for f in chosen] + [folder / "README.md"]
    present = [t for t in targets if t.exists()]
    if present:
        shown = ", ".join(str(t.relative_to(folder)) for t in present[:5])
        more = f" and {len(present) - 5} more" if len(present) > 5 else ""
        raise ValueError(
            f"{folder} already holds {shown}{more}: nothing was written (the course never "
            "overwrites a file; choose an empty folder, or move those files away)"
        )
    for course_file, target in zip(chosen, targets, strict=False):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(course_file.source.read_bytes())
    targets[-1].write_text(readme_text(folder, solutions))
    return targets

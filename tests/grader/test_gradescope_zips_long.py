"""The verify and loop exercises' Gradescope zips, run as Gradescope runs them, in a clean venv
outside the repository (tests/grader/zips.py). Their solutions take ~25 s and ~35 s to grade:
a file of their own, which xdist's loadfile can give the other worker than
test_gradescope_zips.py's."""

from __future__ import annotations

import pytest

from .zips import build_zip, check_full_marks_and_zero, requirements_of


@pytest.mark.parametrize("kind", ["verify", "loop"])
def test_the_zip_gives_the_solution_full_marks_and_the_skeleton_0(kind, zip_python, tmp_path):
    zipped = build_zip(tmp_path / "build", kind)
    python = zip_python(requirements_of(zipped))
    check_full_marks_and_zero(kind, zipped, python, tmp_path)

"""The package as a student or an engineer installs it: a wheel in a fresh venv, used from an
empty folder with no checkout on the path.

The wheel is built from this checkout and installed with the extras the README names into a
fresh venv outside the repository (conftest.py). Every command runs outside the checkout
with PYTHONPATH cleared, so nothing can be imported from here: what works here works from
`pip install`.
"""

from __future__ import annotations

import os
import re
import subprocess
import zipfile

from .conftest import ROOT, run


def test_the_wheel_carries_the_models_and_the_course(installed):
    """Package data: the bundled weights and the notebooks with their exercises; and no
    top-level package with a generic name that a course's own folder could shadow."""
    names = zipfile.ZipFile(installed.wheel).namelist()
    for needed in (
        "specdec/models/target/model.safetensors",
        "specdec/models/draft/model.safetensors",
        "specdec/models/self_draft/heads.safetensors",
        "specdec/notebooks/05_acceptance_rejection.ipynb",
        "specdec/notebooks/05_acceptance_rejection.py",
        "specdec/notebooks/exercises/my_verify.py",
        "specdec/notebooks/exercises/solutions/verify_solution.py",
        "specdec/grading/grading.toml",
        "gpu/device/kernels.cu",
    ):
        assert needed in names, f"the wheel lacks {needed}"
    top = {name.split("/")[0] for name in names if "dist-info" not in name}
    assert top == {"reference", "gpu", "specdec"}, f"top-level names in the wheel: {top}"


def test_nothing_comes_from_the_checkout(installed, empty):
    """The venv imports our packages from its site-packages, and `lab` (a course's usual
    name for its own folder) is not ours."""
    code = (
        "import importlib.util, reference, specdec, specdec.models; "
        "assert importlib.util.find_spec('lab') is None, 'lab is importable'; "
        "assert importlib.util.find_spec('training') is None, 'training is importable'; "
        "print(reference.__file__, specdec.__file__, specdec.models.__file__)"
    )
    printed = run([installed.python, "-c", code], cwd=empty).stdout
    for path in printed.split():
        assert "site-packages" in path and str(ROOT) not in path, printed


def test_the_demo_runs_on_the_bundled_pair(installed, empty):
    done = run(
        [installed.bin("specdec"), "demo", "--max-new-tokens", "16", "-k", "3"],
        cwd=empty,
    )
    # the pair it names lies in the venv; its rounds and statistics follow
    assert f"models: {installed.venv}" in done.stdout, done.stdout
    assert "site-packages/specdec/models/target" in done.stdout, done.stdout
    assert re.search(r"^round +1 ", done.stdout, re.M), f"no round printed:\n{done.stdout}"
    for line in ("alpha (accepted/examined)", "measured speedup"):
        assert line in done.stdout, f"no {line!r} in the demo's output:\n{done.stdout}"


def test_a_course_copy_grades_as_a_student_works(installed):
    """From the folder `specdec course DIR --solutions` made: a solution passes `specdec
    grade`, and the untouched skeleton fails it with the reason (the notebooks run in
    test_course_notebooks.py)."""
    specdec = installed.bin("specdec")
    graded = run(
        [specdec, "grade", "exercises/solutions/sampling_solution.py:sampling_distribution"],
        cwd=installed.course,
    )
    assert "RESULT: PASS" in graded.stdout, graded.stdout
    skeleton = subprocess.run(
        [specdec, "grade", "exercises/my_sampling.py:sampling_distribution"],
        cwd=installed.course,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert skeleton.returncode == 1, skeleton.stdout + skeleton.stderr
    assert "NotImplementedError" in skeleton.stdout, skeleton.stdout

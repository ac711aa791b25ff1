"""The package as a student or an engineer installs it: a wheel in a fresh venv, used from an
empty folder with no checkout on the path.

The wheel is built from this checkout and installed with the `lab` extra (what the course
notebooks need) into a venv made for this module, outside the repository. Every command runs
in a folder of its own with PYTHONPATH cleared, so nothing can be imported from the checkout:
what works here works from `pip install`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNEL = "specdec-wheel"  # the venv's own Jupyter kernel, so the notebook runs in that venv
# uv (the dev extra) builds the wheel in an isolated environment as pip would, and fills the
# venv from its cache: 6 s here where pip, whose downloads this machine does not cache, took 95
UV = [sys.executable, "-m", "uv"]


def run(command: list[str], cwd: Path, timeout: float = 600, **env: str):
    # one command of the installed package; a failure shows everything it printed
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        command,
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, command))} exited {done.returncode}\n"
        f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    )
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    run(UV + ["build", "--quiet", "--wheel", "--out-dir", str(out), str(ROOT)], cwd=out)
    (built,) = out.glob("specdec_lab-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("venv") / "venv"
    run(UV + ["venv", "--quiet", "--python", sys.executable, str(folder)], cwd=folder.parent)
    python = folder / "bin" / "python"
    run(
        UV + ["pip", "install", "--quiet", "--python", str(python), f"{wheel}[lab]"],
        cwd=folder.parent,
    )
    run(
        [str(python), "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL],
        cwd=folder.parent,
    )
    return folder


@pytest.fixture
def empty(tmp_path) -> Path:
    folder = tmp_path / "empty"
    folder.mkdir()
    return folder


def test_the_wheel_carries_the_models_and_the_course(wheel):
    """Package data: the bundled weights and the notebooks with their exercises; and no
    top-level package with a generic name that a course's own folder could shadow."""
    names = zipfile.ZipFile(wheel).namelist()
    for needed in (
        "specdec/models/target/model.safetensors",
        "specdec/models/draft/model.safetensors",
        "specdec/models/self_draft/heads.safetensors",
        "specdec/notebooks/05_acceptance_rejection.ipynb",
        "specdec/notebooks/05_acceptance_rejection.py",
        "specdec/notebooks/exercises/my_verify.py",
        "specdec/notebooks/exercises/solutions/verify_solution.py",
        "specdec/grading/grading.toml",
        "gpu/kernels.cu",
    ):
        assert needed in names, f"the wheel lacks {needed}"
    top = {name.split("/")[0] for name in names if "dist-info" not in name}
    assert top == {"reference", "gpu", "specdec"}, f"top-level names in the wheel: {top}"


def test_nothing_comes_from_the_checkout(venv, empty):
    """The venv imports our packages from its site-packages, and `lab` (a course's usual
    name for its own folder) is not ours."""
    code = (
        "import importlib.util, reference, specdec, specdec.models; "
        "assert importlib.util.find_spec('lab') is None, 'lab is importable'; "
        "assert importlib.util.find_spec('training') is None, 'training is importable'; "
        "print(reference.__file__, specdec.__file__, specdec.models.__file__)"
    )
    printed = run([str(venv / "bin" / "python"), "-c", code], cwd=empty).stdout
    for path in printed.split():
        assert "site-packages" in path and str(ROOT) not in path, printed


def test_the_demo_runs_on_the_bundled_pair(venv, empty):
    done = run(
        [str(venv / "bin" / "specdec"), "demo", "--max-new-tokens", "16", "-k", "3"],
        cwd=empty,
    )
    # the pair it names lies in the venv; its rounds and statistics follow
    assert f"models: {venv}" in done.stdout and "site-packages/specdec/models" in done.stdout
    assert re.search(r"^round +1 ", done.stdout, re.M), f"no round printed:\n{done.stdout}"
    for line in ("alpha (accepted/examined)", "measured speedup"):
        assert line in done.stdout, f"no {line!r} in the demo's output:\n{done.stdout}"


def test_a_course_copy_grades_and_runs_a_notebook(venv, empty):
    """`specdec course DIR --solutions`, then, from DIR as a student works: a solution graded
    by `specdec grade`, the untouched skeleton failing it, and notebook 05 executed top to
    bottom in the venv's kernel."""
    specdec = str(venv / "bin" / "specdec")
    run([specdec, "course", "course", "--solutions"], cwd=empty)
    course = empty / "course"
    graded = run(
        [specdec, "grade", "exercises/solutions/sampling_solution.py:sampling_distribution"],
        cwd=course,
    )
    assert "PASS" in graded.stdout, graded.stdout
    skeleton = subprocess.run(
        [specdec, "grade", "exercises/my_sampling.py:sampling_distribution"],
        cwd=course,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert skeleton.returncode != 0, skeleton.stdout

    execute = (
        "import sys, nbformat; from nbclient import NotebookClient; "
        "nb = nbformat.read(sys.argv[1], as_version=4); "
        "[c.outputs.clear() for c in nb.cells if c.cell_type == 'code']; "
        f"NotebookClient(nb, timeout=600, kernel_name='{KERNEL}').execute(); "
        "errors = [o for c in nb.cells for o in c.get('outputs', []) "
        "if o.output_type == 'error']; "
        "assert not errors, errors; print('executed', len(nb.cells), 'cells')"
    )
    done = run(
        [str(venv / "bin" / "python"), "-c", execute, "05_acceptance_rejection.ipynb"],
        cwd=course,
        MPLBACKEND="Agg",
        SPECDEC_FIGURES=str(empty),
        OPENBLAS_NUM_THREADS="1",
    )
    assert "executed" in done.stdout, done.stdout

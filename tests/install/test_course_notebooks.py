"""Every notebook runs where students run it: from a course unpacked by the installed
`specdec course`, in a kernel of the venv that holds the wheel and the extras the README names
(conftest.py), never in the dev venv that holds everything.

The notebooks print the speeds they measure and assert none, so `make portable` runs this
file under its second BLAS configuration (Makefile); the first stage of `make test` skips it.
"""

from __future__ import annotations

import os
import time

import pytest

from .conftest import KERNEL, ROOT

# the notebooks measure speed and print it (they assert none)
pytestmark = pytest.mark.timing

jupytext = pytest.importorskip("jupytext", reason="the notebook tests need the dev extras")
nbclient = pytest.importorskip("nbclient", reason="the notebook tests need the dev extras")

NAMES = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
CELL_TIMEOUT_S = 120  # generous: a notebook is meant to run in well under 30 s in total
NOTEBOOK_BUDGET_S = 90  # fail loudly if one notebook becomes much slower than intended


def test_the_course_copy_holds_every_notebook(installed):
    assert len(NAMES) == 15
    for name in NAMES:
        assert (installed.course / f"{name}.ipynb").is_file(), f"the course lacks {name}.ipynb"
        assert (installed.course / f"{name}.py").is_file(), f"the course lacks {name}.py"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes(name, installed, tmp_path, monkeypatch):
    """The jupytext source of the course copy, top to bottom, in the venv's kernel, with the
    course folder as its working directory (as `jupyter lab DIR` runs it)."""
    nb = jupytext.read(installed.course / f"{name}.py")
    monkeypatch.delenv("PYTHONPATH", raising=False)  # the kernel inherits the environment
    monkeypatch.setenv("JUPYTER_PATH", str(installed.kernels))  # where KERNEL is found
    monkeypatch.setenv("SPECDEC_FIGURES", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        # one BLAS thread, as notebooks/render.py: a multi-threaded BLAS on a busy machine
        # (another job, pytest -n) spins on its threads and turns seconds into minutes
        monkeypatch.setenv(variable, os.environ.get(variable, "1"))
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name=KERNEL,
        resources={"metadata": {"path": str(installed.course)}},
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the cell and traceback, on failure
    seconds = time.perf_counter() - start
    assert seconds < NOTEBOOK_BUDGET_S, f"{name} took {seconds:.0f} s"
    if "display(Image" in (installed.course / f"{name}.py").read_text():
        assert list(tmp_path.glob("*.png")), f"{name} displays figures but wrote none"


def test_the_kernel_is_the_installed_venv(installed, monkeypatch):
    """The check above proves something only if its kernel imports from the wheel's venv."""
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setenv("JUPYTER_PATH", str(installed.kernels))
    nb = nbclient.NotebookClient(
        jupytext.reads("import sys, specdec\nprint(sys.executable, specdec.__file__)\n",
                       fmt="py:percent"),
        kernel_name=KERNEL,
        resources={"metadata": {"path": str(installed.course)}},
    ).execute()
    printed = nb.cells[0].outputs[0]["text"]
    assert printed.startswith(str(installed.venv)) and str(ROOT) not in printed, printed

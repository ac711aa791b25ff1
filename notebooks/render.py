"""Render the course notebooks: jupytext source (`NN_name.py`) -> executed `NN_name.ipynb`.

    .venv/bin/python notebooks/render.py           # every notebook
    .venv/bin/python notebooks/render.py 05 07     # only those whose name starts so
    .venv/bin/python notebooks/render.py --text 05 # prose only: markdown cells refreshed,
                                                   # code cells and their outputs kept

The `.py` files are the source of truth (they diff cleanly); the `.ipynb` files are
generated, executed top to bottom in a fresh kernel with outputs kept, so that they read on
a code-hosting site. The figures the notebooks draw are written to docs/figures/ as well.
Each notebook chooses its BLAS threads in its first cell (`specdec.machine.use_blas_threads`:
one, unless $SPECDEC_BLAS_THREADS says otherwise) and prints the machine it ran on, so the
rendered timings say where they came from; the kernel also starts with one BLAS thread (see
`single_blas_thread`).
`tests/notebooks` checks that the two stay in sync; `tests/install/test_course_notebooks.py`
executes the sources from a course copy, in a venv that holds the installed wheel.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent
ROOT = NOTEBOOKS.parent
FIGURES = ROOT / "docs" / "figures"
TIMEOUT_S = 120  # per cell; the whole notebook is meant to run in well under 30 s


def sources() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))


def read_source(path: Path) -> nbformat.NotebookNode:
    nb = jupytext.read(path)
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"  # stable ids: a re-render must not churn the diff
    return nb


BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def single_blas_thread() -> None:
    """One BLAS thread in the kernel (unless the caller chose otherwise). On a machine that is
    busy with something else, a multi-threaded BLAS spins and waits for its threads and a
    one-second notebook can take minutes; one thread keeps runtimes and timings steady."""
    for name in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")


def execute(nb: nbformat.NotebookNode, figures: Path) -> float:
    """Run every cell in a fresh kernel, in notebooks/, figures to `figures`; seconds taken."""
    os.environ["SPECDEC_FIGURES"] = str(figures)  # the kernel inherits the environment
    os.environ.setdefault("MPLBACKEND", "Agg")
    single_blas_thread()
    client = NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
        record_timing=False,  # no timestamps in the committed files: they would churn diffs
    )
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def with_new_text(path: Path) -> nbformat.NotebookNode:
    """The rendered notebook with the source's markdown cells, its code cells and outputs
    kept: for a change of prose only (nothing is executed, so nothing measured changes).
    Raises ValueError when a code cell differs: then the notebook must be executed again."""
    source = read_source(path)
    rendered = nbformat.read(path.with_suffix(".ipynb"), as_version=4)
    code = [c for c in rendered.cells if c.cell_type == "code"]
    wanted = [c for c in source.cells if c.cell_type == "code"]
    if [c.source.strip() for c in code] != [c.source.strip() for c in wanted]:
        raise ValueError(f"{path.name}: its code changed; render it without --text")
    kept = iter(code)
    source.cells = [next(kept) if c.cell_type == "code" else c for c in source.cells]
    source.metadata = rendered.metadata
    for i, cell in enumerate(source.cells):
        cell.id = f"cell-{i:02d}"
    return source


def main(argv: list[str]) -> int:
    text_only = "--text" in argv
    argv = [a for a in argv if a != "--text"]
    chosen = [p for p in sources() if not argv or any(p.name.startswith(a) for a in argv)]
    if not chosen:
        print(f"no notebook matches {argv}", file=sys.stderr)
        return 2
    if text_only:
        for path in chosen:
            out = path.with_suffix(".ipynb")
            jupytext.write(with_new_text(path), out, fmt="ipynb")
            print(f"{out.relative_to(ROOT)}: prose refreshed, code and outputs kept")
        return 0
    FIGURES.mkdir(parents=True, exist_ok=True)
    for path in chosen:
        nb = read_source(path)
        seconds = execute(nb, FIGURES)
        out = path.with_suffix(".ipynb")
        jupytext.write(nb, out, fmt="ipynb")
        print(f"{out.relative_to(ROOT)}: executed in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The course notebooks: they run, their rendered copies match their sources, and the
committed outputs hold no error.

`notebooks/NN_name.py` (jupytext, py:percent) is the source; `NN_name.ipynb` is rendered from
it with outputs by `notebooks/render.py`. Here each committed `.ipynb` is compared with its
source cell by cell. The sources are executed where students run them, from a course copy in
a venv that holds the installed wheel: tests/install/test_course_notebooks.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext", reason="the notebook tests need the dev extras")
nbformat = pytest.importorskip("nbformat", reason="the notebook tests need the dev extras")
nbclient = pytest.importorskip("nbclient", reason="the notebook tests need the dev extras")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SOURCES = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))
EXPECTED = [
    "01_why_decoding_is_slow",
    "02_transformer_and_kv_cache",
    "03_drafting",
    "04_one_pass_verification",
    "05_acceptance_rejection",
    "06_kv_cache_through_rounds",
    "07_full_run",
    "08_speedup_and_acceptance",
    "09_the_oracle",
    "10_drafting_without_a_second_model",
    "11_tree_drafts",
    "12_the_gpu_twin",
    "13_ragged_batches",
    "14_drafting_from_features",
    "15_gpt2_to_llama",
]


def ids(paths):
    return [p.stem for p in paths]


def cells(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def test_the_course_is_complete():
    assert [p.stem for p in SOURCES] == EXPECTED
    for source in SOURCES:
        assert source.with_suffix(".ipynb").is_file(), (
            f"{source.name} has no rendered notebook: run .venv/bin/python notebooks/render.py"
        )


@pytest.mark.parametrize("source", SOURCES, ids=ids(SOURCES))
def test_every_notebook_chooses_its_blas_threads_and_names_its_machine(source):
    """JupyterLab's "Run All", `make lab` and render.py must measure the same thing: the first
    code cell sets the BLAS threads (specdec.machine.use_blas_threads) and prints the machine."""
    nb = jupytext.read(source)
    first = next(c.source for c in nb.cells if c.cell_type == "code")
    assert "use_blas_threads()" in first, f"{source.name}: its first code cell sets no threads"
    assert "describe_machine()" in first, f"{source.name}: its first code cell names no machine"


@pytest.mark.parametrize("source", SOURCES, ids=ids(SOURCES))
def test_every_assert_in_a_notebook_says_what_it_expected(source):
    """An assert without a message fails a student's run with an empty AssertionError."""
    import ast

    bare = [
        node.lineno
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Assert) and node.msg is None
    ]
    assert not bare, f"{source.name}: asserts without a message at lines {bare}"


@pytest.mark.parametrize("source", SOURCES, ids=ids(SOURCES))
def test_rendered_notebook_matches_its_source(source):
    rendered = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    expected = jupytext.read(source)
    assert cells(rendered) == cells(expected), (
        f"{source.with_suffix('.ipynb').name} is out of date with {source.name}: "
        f"run .venv/bin/python notebooks/render.py {source.name[:2]}"
    )


@pytest.mark.parametrize("source", SOURCES, ids=ids(SOURCES))
def test_committed_outputs_have_no_error(source):
    rendered = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    code = [c for c in rendered.cells if c.cell_type == "code"]
    assert code, f"{source.stem} has no code cell"
    for n, cell in enumerate(code, start=1):
        assert cell.execution_count is not None, (
            f"{source.stem}: code cell {n} was never executed in the committed notebook"
        )
        for output in cell.outputs:
            assert output.output_type != "error", (
                f"{source.stem}: code cell {n} raised {output.get('ename')}: {output.get('evalue')}"
            )
            text = output.get("text", "")
            assert "Traceback" not in text, f"{source.stem}: code cell {n} printed a traceback"
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), (
        f"{source.stem}: cells were not run once, top to bottom (execution counts {counts})"
    )


def test_figures_named_in_the_docs_exist():
    docs = NOTEBOOKS.parent / "docs"
    named = set(re.findall(r"\(figures/([\w-]+\.png)\)", (docs / "index.md").read_text()))
    assert named, "docs/index.md names no figure"
    missing = sorted(n for n in named if not (docs / "figures" / n).is_file())
    assert not missing, f"docs/figures lacks {missing}: run .venv/bin/python notebooks/render.py"

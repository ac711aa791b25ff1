"""Every exercise's Gradescope zip, run as Gradescope runs it, in a clean venv outside the
repository (tests/grader/zips.py): the solution scores full marks, the untouched skeleton 0
with the reason, and code that cannot be graded 0 with a clear reason.

The exercises graded in seconds are here; verify and loop (~25 s and ~35 s for their
solutions) in test_gradescope_zips_long.py, which the other xdist worker can take."""

from __future__ import annotations

import textwrap

import pytest

from .zips import autograde, build_zip, check_full_marks_and_zero, requirements_of

QUICK = (
    "cache",
    "sampling",
    "speedup",
    "lookup",
    "callables",
    "tree",
    "tree_mask",
    "batch",
    "eagle_align",
    "eagle_block",
    "eagle_ttt",
    "eagle_tree",
)


@pytest.mark.parametrize("kind", QUICK)
def test_the_zip_gives_the_solution_full_marks_and_the_skeleton_0(kind, zip_python, tmp_path):
    zipped = build_zip(tmp_path / "build", kind)
    python = zip_python(requirements_of(zipped))
    check_full_marks_and_zero(kind, zipped, python, tmp_path)


# what cannot be graded, on the sampling zip (graded in about a second; needs no scipy)
ENDLESS = textwrap.dedent(
    """
    def sampling_distribution(logits, temperature=1.0, top_k=None, top_p=None):
        while True:  # never returns
            pass
    """
)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("def sampling_distribution(logits\n    return logits\n", "SyntaxError"),
        (
            "def sampling_distributon(logits, temperature=1.0, top_k=None, top_p=None):\n"
            "    return logits\n",
            "has no function 'sampling_distribution' (it defines: sampling_distributon)",
        ),
        (ENDLESS, "grading was stopped after 3 s: your sampling_distribution did not return"),
    ],
    ids=["syntax-error", "missing-function", "endless-loop"],
)
def test_code_that_cannot_be_graded_scores_0_with_the_reason(text, reason, zip_python, tmp_path):
    zipped = build_zip(tmp_path / "build", "sampling", "timeout_s = 3\n")
    python = zip_python(requirements_of(zipped))
    results = autograde(zipped, python, tmp_path, {"my_sampling.py": text})
    assert results["score"] == 0 and reason in results["output"], results["output"]
    assert [t["name"] for t in results["tests"]] == ["sampling"]
    assert results["tests"][0]["score"] == 0 and results["tests"][0]["max_score"] == 10

"""The exercise of notebook 09: the skeleton says what to do, the solution is exact.

The grading is `specdec grade <file>:verify` (tests/grader/ tests it on this solution), or
exhaustively `pytest -m distribution --verify=<file>:verify`; this file only checks, quickly,
that the skeleton fails with instructions and that the shipped solution's output law matches
`reference.verification.verify_law`.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from reference.verification import verify_law

EXERCISES = Path(__file__).resolve().parents[2] / "notebooks" / "exercises"


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"exercise_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.verify


def test_skeleton_raises_with_the_grading_command():
    verify = load(EXERCISES / "my_verify.py")
    P, Q = np.array([[0.6, 0.4], [0.5, 0.5]]), np.array([[0.8, 0.2]])
    with pytest.raises(NotImplementedError, match="specdec grade notebooks/exercises/my_verify"):
        verify(P, Q, [0], np.random.default_rng(0))


def test_solution_uses_numpy_only():
    text = (EXERCISES / "solutions" / "verify_solution.py").read_text()
    assert "import reference" not in text and "from reference" not in text


def rows(seed: int, k: int, V: int):
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.ones(V), size=k + 1)
    Q = rng.dirichlet(np.ones(V), size=k)
    Q[0] = P[0]  # one position with p == q: the residual is empty there
    drafts = [int(np.argmax(Q[i])) for i in range(k)]
    return P, Q, drafts


@pytest.mark.parametrize("seed", [0, 1])
def test_solution_follows_the_exact_law(seed):
    verify = load(EXERCISES / "solutions" / "verify_solution.py")
    P, Q, drafts = rows(seed, k=3, V=4)
    law = {o: w for o, w in verify_law(P, Q, drafts).items() if w > 0}
    n = 6000
    rng = np.random.default_rng(100 + seed)
    counts = Counter()
    for _ in range(n):
        accepted, token = verify(P, Q, np.asarray(drafts), rng)
        counts[(int(accepted), int(token))] += 1
    assert set(counts) <= set(law), f"impossible outcomes: {set(counts) - set(law)}"
    # pool the outcomes expected fewer than 5 times into one cell
    small = [o for o in law if n * law[o] < 5]
    big = [o for o in law if n * law[o] >= 5]
    observed = [counts[o] for o in big] + ([sum(counts[o] for o in small)] if small else [])
    expected = [n * law[o] for o in big] + ([n * sum(law[o] for o in small)] if small else [])
    p_value = stats.chisquare(observed, expected).pvalue
    assert p_value > 1e-6, f"the solution's law is off: chi-square p = {p_value:.2g}"

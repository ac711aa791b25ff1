"""specdec/measure/typical.py: the trade-off measurement runs end to end on tiny models, its TV
numbers are the ones the core defines, and the figure is written."""

from __future__ import annotations

import numpy as np
import pytest

from reference.speculative import RoundTrace
from reference.tree import POINT, ModelTreeDrafter
from reference.typical import TypicalThreshold
from specdec.measure import typical as lab_typical
from tests.plots.test_plot_functions import check_png
from tests.unit.helpers import TARGET_CFG, make_model


def test_round_tvs_reads_the_trace_rows_of_the_accepted_path():
    p = np.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]])
    rt = RoundTrace(
        3, np.array([0, 1]), np.zeros((2, 2)), p, 2, 0, "bonus", [0, 1, 0], (0, 0, 0), None
    )
    rounds, firsts = lab_typical.round_tvs([rt])
    assert rounds == [pytest.approx(1 - 0.7 * 0.8)]
    assert firsts == [pytest.approx(0.3)]
    none = RoundTrace(
        3, np.array([1]), np.zeros((1, 2)), p[:2], 0, 0, "correction", [0], (0, 0, 0), None
    )
    assert lab_typical.round_tvs([none]) == ([0.0], [0.0])


def test_the_small_exact_cases_separate_exact_from_typical():
    assert lab_typical.small_case_tv(None, seeds=range(4)) < 1e-12
    assert lab_typical.small_case_tv(TypicalThreshold(0.09), seeds=range(4)) > 0.05
    never = TypicalThreshold(1.0, delta=3.0)  # V = 3: the bar is 1, nothing passes
    assert lab_typical.small_case_tv(never, seeds=range(4)) < 1e-12


def test_the_tradeoff_runs_and_draws(tmp_path):
    target, draft = make_model(TARGET_CFG, seed=3), make_model(TARGET_CFG, seed=4)
    drafter = ModelTreeDrafter(draft, (2, 1), POINT)
    prompts = [np.array([2, 7, 1]), np.array([5, 3])]
    report = lab_typical.run_tradeoff(
        target, drafter, prompts, epsilons=(0.0, 0.09), max_new_tokens=12, repeats=2
    )
    labels = [pt.label for pt in report.points]
    assert labels == ["exact", "typical eps=0", "typical eps=0.09"]
    exact = report.points[0]
    assert exact.round_tv == exact.first_token_tv == 0.0  # by the theorem, not measured
    assert exact.small_tv < 1e-12  # computed by enumeration
    for pt in report.points:
        assert len(pt.speedups) == 2 and all(s > 0 for s in pt.speedups)
        assert 1.0 <= pt.tokens_per_round <= 3.0
        assert 0.0 <= pt.first_token_tv <= pt.round_tv <= 1.0
    assert "typical, ε = 0.09" in lab_typical.markdown_table(report)
    check_png(lab_typical.plot_tradeoff(report, tmp_path / "tradeoff.png"))

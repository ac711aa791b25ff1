"""run_bench's bookkeeping: every reported figure is the arithmetic of what was timed."""

from __future__ import annotations

import numpy as np
import pytest

from lab.bench import markdown_report, run_bench
from lab.costs import CostProfile, expected_tokens_per_round, predicted_speedup

KS = [1, 3]


@pytest.fixture(scope="module")
def report(target, draft):
    costs = CostProfile(
        target_step=1e-3, draft_step=2e-4, target_append={T: 1e-3 * T for T in range(1, 5)}
    )
    prompts = [np.array([1, 2, 3]), np.array([4, 5, 6, 7])]
    return run_bench(target, draft, prompts, KS, [0.0, 1.0], 12, repeats=2, costs=costs)


def test_one_point_per_temperature_and_k(report):
    assert [(p.temperature, p.k) for p in report.points] == [(t, k) for t in (0.0, 1.0) for k in KS]
    assert (report.repeats, report.n_prompts, report.max_new_tokens) == (2, 2, 12)


def test_speedups_are_per_repeat_ratios_and_the_headline_is_their_median(report):
    for p in report.points:
        assert len(p.speedups) == len(p.speedups_end_to_end) == 2
        assert p.speedup == pytest.approx(float(np.median(p.speedups)))
        assert all(s > 0 for s in p.speedups + p.speedups_end_to_end)


def test_predictions_follow_the_formula_from_the_reported_terms(report):
    c = report.costs
    for p in report.points:
        assert 0 <= p.alpha <= 1
        assert p.predicted_tokens_per_round == pytest.approx(
            expected_tokens_per_round(p.alpha, p.k)
        )
        assert p.predicted == pytest.approx(predicted_speedup(p.alpha, p.k, c.c))
        assert p.predicted_corrected == pytest.approx(
            predicted_speedup(p.alpha, p.k, c.c, c.verify_cost(p.k + 1))
        )
        assert p.predicted_loop == pytest.approx(
            predicted_speedup(p.alpha, p.k, p.c_loop, p.v_loop)
        )
        assert p.c_loop > 0 and p.v_loop > 0 and p.overhead_loop > 0


def test_greedy_histograms_count_full_rounds_only(report):
    for p in report.points:
        assert len(p.histogram) == p.k + 1
        # 12 tokens per run, 2 prompts x 2 repeats: at most 4 * 12 rounds in all
        assert 0 < p.histogram.sum() <= 4 * 12


def test_markdown_report_has_one_row_per_point_in_both_tables(report):
    text = markdown_report(report, "test machine", "specdec bench --test")
    rows = [line for line in text.splitlines() if line.startswith("| 0 |")]
    assert len(rows) == 2 * len(KS)
    assert "test machine" in text and "specdec bench --test" in text

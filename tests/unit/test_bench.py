"""run_bench's bookkeeping: every reported figure is the arithmetic of what was timed."""

from __future__ import annotations

import numpy as np
import pytest

from reference import ModelDrafter, SpeculativeStats, speculative_generate
from reference.sampling import GREEDY
from specdec.costs import CostProfile, expected_tokens_per_round, predicted_speedup
from specdec.measure.bench import Tally, bench_point, markdown_report, run_bench
from specdec.timing import StageClock

KS = [1, 3]


PROMPTS = [np.array([1, 2, 3]), np.array([4, 5, 6, 7])]
COSTS = CostProfile(
    target_step=1e-3, draft_step=2e-4, target_append={T: 1e-3 * T for T in range(1, 5)}
)


@pytest.fixture(scope="module")
def report(target, draft):
    return run_bench(target, draft, PROMPTS, KS, [0.0, 1.0], 12, repeats=2, costs=COSTS)


def test_one_point_per_temperature_and_k(report):
    assert [(p.temperature, p.k) for p in report.points] == [(t, k) for t in (0.0, 1.0) for k in KS]
    assert (report.repeats, report.n_prompts, report.max_new_tokens) == (2, 2, 12)


def test_speedups_are_per_repeat_ratios_and_the_headline_is_their_median(report):
    for p in report.points:
        assert len(p.speedups) == len(p.speedups_end_to_end) == 2
        assert p.speedup == pytest.approx(float(np.median(p.speedups)))
        assert all(s > 0 for s in p.speedups + p.speedups_end_to_end)


def tallies(rows) -> list[Tally]:
    out = []
    for seconds, decode_seconds, tokens in rows:
        t = Tally()
        t.add(seconds, decode_seconds, tokens)
        out.append(t)
    return out


def test_a_speedup_is_the_ratio_of_rates_within_each_repeat():
    """Three repeats with known times. Per repeat, speedup = (spec tokens / spec decode time)
    / (AR tokens / AR decode time); the headline is the median of those ratios, which here
    differs from the ratio of the median rates (a drift that hits both methods of a repeat
    cancels in its own ratio)."""
    # (end-to-end seconds, decode seconds, tokens): AR decodes at 100, 50, 20 tokens/s
    ar = tallies([(1.2, 1.0, 100), (2.2, 2.0, 100), (5.2, 5.0, 100)])
    # speculative at 150, 150, 40 tokens/s: ratios 1.5, 3.0, 2.0
    spec = tallies([(0.8, 0.6, 90), (0.8, 0.6, 90), (2.45, 2.25, 90)])
    stats = SpeculativeStats(k=2)
    stats.record(2, 1)
    stats.emitted = 2
    ar_clock, spec_clock = StageClock(), StageClock()
    ar_clock.seconds.update(sample=1.0, target=7.0)  # 300 AR tokens: a step is 8/300 s
    spec_clock.seconds.update(draft=1.0, target=2.0, verify=0.5, other=0.5)
    p = bench_point(0.0, 2, ar, spec, [stats], ar_clock, spec_clock, COSTS)
    np.testing.assert_allclose(p.speedups, [1.5, 3.0, 2.0])
    assert p.speedup == pytest.approx(2.0)
    assert p.speedup != pytest.approx(np.median([150, 150, 40]) / np.median([100, 50, 20]))
    np.testing.assert_allclose(
        p.speedups_end_to_end,
        [(90 / 0.8) / (100 / 1.2), (90 / 0.8) / (100 / 2.2), (90 / 2.45) / (100 / 5.2)],
    )
    assert (p.ar_tps, p.spec_tps) == (pytest.approx(50.0), pytest.approx(150.0))
    step = 8.0 / 300  # one autoregressive decode step
    assert p.c_loop == pytest.approx(1.0 / 2 / step)  # drafting seconds per drafted token
    assert p.v_loop == pytest.approx(2.0 / 1 / step)  # target seconds per round
    assert p.overhead_loop == pytest.approx(1.0 / 1 / step)


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


def test_greedy_histograms_count_full_rounds_only(report, target, draft):
    """Greedy runs are deterministic, so the same runs can be replayed with a trace: the
    histogram must count, by drafts accepted, exactly the rounds that drafted all k tokens,
    and leave out the short rounds at the length limit (there are some here)."""
    for p in (p for p in report.points if p.temperature == 0.0):
        full, short = [], 0
        for prompt in PROMPTS:
            res = speculative_generate(
                target,
                ModelDrafter(draft),
                prompt,
                k=p.k,
                max_new_tokens=12,
                rng=np.random.default_rng(0),
                sampling=GREEDY,
                trace=True,
            )
            for r in res.trace:
                if len(r.draft_tokens) == p.k:
                    full.append(r.accepted)
                else:
                    short += 1
        assert short > 0, "no short round: this test would not see them left out"
        expected = np.bincount(full, minlength=p.k + 1) * report.repeats
        np.testing.assert_array_equal(p.histogram, expected)


def test_markdown_report_has_one_row_per_point_in_both_tables(report):
    text = markdown_report(report, "test machine", "specdec bench --test")
    rows = [line for line in text.splitlines() if line.startswith("| 0 |")]
    assert len(rows) == 2 * len(KS)
    assert "test machine" in text and "specdec bench --test" in text


def test_each_cell_is_handed_over_as_soon_as_it_is_finished(target, draft):
    """By cell (the CLI's order), on_point gets every (T, k) point in order, each one before
    the next cell's first run: what an interrupt then keeps is every finished cell."""
    seen, runs = [], []

    class Progress:
        def update(self, n):
            runs.append(len(seen))  # how many cells were handed over when this run ended

    report = run_bench(
        target,
        draft,
        PROMPTS,
        KS,
        [0.0, 1.0],
        6,
        repeats=2,
        costs=COSTS,
        progress=Progress(),
        on_point=seen.append,
    )
    assert seen == report.points and len(seen) == 4
    per_cell = 2 * len(PROMPTS)  # repeats x prompts speculative runs per cell
    assert runs == [n // per_cell for n in range(len(runs))], runs


def test_a_shared_baseline_hands_over_cells_at_the_end_of_their_temperature(target, draft):
    seen = []
    report = run_bench(
        target,
        draft,
        PROMPTS,
        KS,
        [0.0],
        6,
        repeats=1,
        costs=COSTS,
        on_point=seen.append,
        shared_baseline=True,
    )
    assert seen == report.points and len({p.ar_tps for p in seen}) == 1

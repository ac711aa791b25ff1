"""specdec/costs.py: Leviathan's formulas against numbers worked out by hand, and the cost profile
measured on stub models whose costs are set by a fake clock."""

from __future__ import annotations

import numpy as np
import pytest

from specdec import costs
from specdec.costs import expected_tokens_per_round, measure_costs, predicted_speedup

# ---------------------------------------------------------------- the formulas

# E(alpha, k) = 1 + alpha + ... + alpha^k, summed by hand (fractions written out)
HAND_E = [
    (0.0, 1, 1.0),  # every draft rejected: the round still emits its correction
    (0.0, 8, 1.0),
    (0.5, 1, 1.5),
    (0.5, 3, 1 + 1 / 2 + 1 / 4 + 1 / 8),  # 1.875
    (0.8, 4, 1 + 0.8 + 0.64 + 0.512 + 0.4096),  # 3.3616
    (0.9, 2, 1 + 0.9 + 0.81),  # 2.71
    (1.0, 5, 6.0),  # every draft accepted: k drafts + the bonus token
]


@pytest.mark.parametrize("alpha, k, expected", HAND_E)
def test_expected_tokens_per_round_by_hand(alpha, k, expected):
    assert expected_tokens_per_round(alpha, k) == pytest.approx(expected, rel=1e-12)


# Leviathan et al. (2023) plot E(alpha, gamma) against alpha for several gammas (their figure of
# expected tokens per run of the algorithm). The paper could not be consulted from this machine,
# so these are points of that curve summed separately (1 + a + ... + a^g), to four places.
PAPER_CURVE = {
    # alpha:   gamma=1   gamma=3   gamma=5   gamma=7
    0.6: (1.6000, 2.1760, 2.3834, 2.4580),
    0.7: (1.7000, 2.5330, 2.9412, 3.1412),
    0.8: (1.8000, 2.9520, 3.6893, 4.1611),
    0.9: (1.9000, 3.4390, 4.6856, 5.6953),
}


@pytest.mark.parametrize("alpha", sorted(PAPER_CURVE))
def test_expected_tokens_per_round_matches_the_papers_curve(alpha):
    got = [expected_tokens_per_round(alpha, g) for g in (1, 3, 5, 7)]
    np.testing.assert_allclose(got, PAPER_CURVE[alpha], atol=5e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.75, 0.99])
@pytest.mark.parametrize("k", [1, 2, 7])
def test_expected_tokens_is_the_mean_of_the_round_law(alpha, k):
    """Another road to E: a round accepts exactly j < k drafts with probability
    alpha^j (1 - alpha), all k with alpha^k, and emits accepted + 1 tokens."""
    law = [alpha**j * (1 - alpha) for j in range(k)] + [alpha**k]
    assert sum(law) == pytest.approx(1.0)
    mean = sum((j + 1) * pj for j, pj in enumerate(law))
    assert expected_tokens_per_round(alpha, k) == pytest.approx(mean, rel=1e-12)


# speedup = E / (k c + v), by hand
HAND_SPEEDUP = [
    # alpha, k, c, v, speedup
    (0.8, 4, 0.1, 1.0, 3.3616 / 1.4),  # Leviathan's "+1": 2.4011...
    (0.8, 4, 0.1, 2.0, 3.3616 / 2.4),  # a verify pass costing two single-token steps
    (0.5, 3, 0.0, 1.0, 1.875),  # a free draft: the speedup is E itself
    (0.0, 3, 0.2, 1.0, 1 / 1.6),  # all rejected: slower than autoregressive
    (1.0, 5, 0.05, 1.0, 6 / 1.25),  # 4.8
]


@pytest.mark.parametrize("alpha, k, c, v, expected", HAND_SPEEDUP)
def test_predicted_speedup_by_hand(alpha, k, c, v, expected):
    assert predicted_speedup(alpha, k, c, verify_cost=v) == pytest.approx(expected, rel=1e-12)


def test_leviathans_speedup_is_the_default():
    assert predicted_speedup(0.8, 4, 0.1) == pytest.approx(3.3616 / 1.4, rel=1e-12)


# ---------------------------------------------------------------- the cost profile


class FakeClock:
    """Stands in for time.perf_counter: time moves only when a stub model computes."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class StubCache:
    def __init__(self) -> None:
        self.length = 0  # committed
        self.pending = 0  # written but not committed

    def commit(self, n: int) -> None:
        assert n == self.pending
        self.length, self.pending = self.length + n, 0

    def rollback(self) -> None:
        self.pending = 0


class StubModel:
    """A model whose forward over T new positions costs `fixed + per_row * T` seconds, except
    that every `outlier_every`-th pass also costs `outlier` (a slow repeat the median drops)."""

    def __init__(self, clock, fixed, per_row, outlier=0.0, outlier_every=0):
        self.clock, self.fixed, self.per_row = clock, fixed, per_row
        self.outlier, self.outlier_every = outlier, outlier_every
        self.calls: list[tuple[int, int, int]] = []  # (T, committed, pending) at each call

    def new_cache(self) -> StubCache:
        return StubCache()

    def forward(self, tokens, cache):
        T = len(tokens)
        self.calls.append((T, cache.length, cache.pending))
        self.clock.now += self.fixed + self.per_row * T
        if self.outlier_every and len(self.calls) % self.outlier_every == 0:
            self.clock.now += self.outlier
        cache.pending += T
        return np.zeros((T, 4), np.float32)


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(costs.time, "perf_counter", fake)
    return fake


def test_the_profile_recovers_known_costs(clock):
    """target: 4 ms + 1 ms a row; draft: 0.5 ms a pass. So a target step is 5 ms,
    c = 0.5 / 5 = 0.1 and v(T) = (4 + T) / 5."""
    target = StubModel(clock, fixed=4e-3, per_row=1e-3, outlier=1.0, outlier_every=7)
    draft = StubModel(clock, fixed=0.5e-3, per_row=0.0)
    profile = measure_costs(target, draft, np.arange(12), max_T=5, repeats=9)
    assert profile.target_step == pytest.approx(5e-3)
    assert profile.draft_step == pytest.approx(0.5e-3)
    assert profile.c == pytest.approx(0.1)
    for T in range(1, 6):
        assert profile.target_append[T] == pytest.approx((4 + T) * 1e-3)
        assert profile.verify_cost(T) == pytest.approx((4 + T) / 5)


def test_every_timed_pass_sees_the_same_cache(clock):
    """time_append rolls back after each pass: each repeat appends T rows after exactly the
    committed context, as a verification pass does."""
    model = StubModel(clock, fixed=1e-3, per_row=0.0)
    costs.time_append(model, np.arange(10), T=3, repeats=5)
    prefill, *timed = model.calls
    assert prefill == (10, 0, 0)
    assert timed == [(3, 10, 0)] * 5

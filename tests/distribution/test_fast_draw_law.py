"""The fast path's compiled draft draw (specdec/fast_cpu_draw.py) samples q = softmax(z / T).

`FastModelDrafter.draw` replaces the reference's dozen NumPy calls with one compiled loop; the
law it must keep is the reference's, derived here in float64 with nothing from the package:
q(x) = exp(z_x / T) / sum_y exp(z_y / T). Each check draws n tokens from one row and holds
their counts to that law (Pearson's chi-square, cells merged as the oracle merges them, at the
oracle's false-alarm rate); the same check at the same n rejects a draw that ignores the
temperature, and one that inverts the cumulative mass without scaling u by the total.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from reference.sampling import SamplingParams
from specdec import fast_cpu_compiled, fast_cpu_draw
from specdec.oracle.laws import ALPHA, chi_square_test

pytestmark = [
    pytest.mark.distribution,
    pytest.mark.skipif(not fast_cpu_compiled.AVAILABLE, reason="numba (the `fast` extra)"),
]

N = 20_000  # draws per check: a 0.01 shift of one id's mass is caught (see the broken rows)
LOGITS = np.array([2.0, 1.2, 0.9, 0.0, -0.5, -3.0], dtype=np.float32)


def softmax_law(z: np.ndarray, temperature: float) -> dict[int, float]:
    # the law written out in float64, independently of reference.sampling
    weights = [math.exp(float(v) / temperature) for v in z]
    total = math.fsum(weights)
    return {x: w / total for x, w in enumerate(weights)}


def counts_of(draw, temperature: float, seed: int) -> Counter:
    rng = np.random.default_rng(seed)
    out = np.empty(len(LOGITS), np.float32)
    return Counter(draw(LOGITS, temperature, rng, out) for _ in range(N))


def compiled(z, temperature, rng, out, u=None):  # FastModelDrafter.draw's computation
    u = rng.random() if u is None else u
    return int(fast_cpu_draw.sampled_draw(z, np.float64(temperature), u, out))


def ignores_temperature(z, temperature, rng, out):  # broken: q at T = 1
    return compiled(z, 1.0, rng, out)


def unscaled_threshold(z, temperature, rng, out):  # broken: u * mass taken as u * 0.9
    compiled(z, temperature, rng, out, u=0.0)  # only its row, out
    cdf = np.cumsum(out, dtype=np.float64)
    return min(int(cdf.searchsorted(rng.random() * 0.9, side="right")), len(z) - 1)


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_the_compiled_draw_samples_the_softmax_at_its_temperature(temperature):
    law = softmax_law(LOGITS, temperature)
    params = SamplingParams(temperature=temperature)
    # draw reads no model state: a drafter without a model is enough
    model_free = fast_cpu_draw.FastModelDrafter.__new__(fast_cpu_draw.FastModelDrafter)
    rng = np.random.default_rng(11)
    out = np.empty(len(LOGITS), np.float32)
    counts = Counter(model_free.draw(LOGITS, params, rng, out) for _ in range(N))
    np.testing.assert_allclose(out, [law[x] for x in range(len(LOGITS))], rtol=1e-5)
    result = chi_square_test(counts, law, f"compiled draw at T = {temperature}")
    assert result.p_value > ALPHA, result.describe()


@pytest.mark.parametrize("broken", [ignores_temperature, unscaled_threshold])
def test_the_same_check_rejects_a_broken_draw(broken):
    law = softmax_law(LOGITS, 0.7)
    result = chi_square_test(counts_of(broken, 0.7, 11), law, broken.__name__)
    assert result.p_value < ALPHA, result.describe()

"""The grader's stated false-alarm rate, simulated: under the null hypothesis (counts drawn
from the exact law itself) the chi-square p-value of every sampled check, at both of its
looks, must not fall below a level more often than that level says. An anti-conservative
test (merged cells too small for the chi-square tail) would fail here.

The t1-k2 token law (3125 outcomes) is left out for time; it is the oracle's `t1_k2:tokens`
law, with the same merging rule, which tests/distribution/test_statistics.py simulates.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from specdec.grading.engine.laws import compare, target_joint_law, verify_joint_law
from specdec.grading.exercises.loop.checks import QUICK_LOOK, SAMPLED, case_laws
from specdec.grading.exercises.verify.exact import ZERO_N, ZERO_P
from specdec.grading.exercises.verify.joint import fixed_rows
from specdec.grading.exercises.verify.tables import RandomTable

REPLICATES = 2000


def null_laws() -> dict[str, tuple[dict, int, int]]:
    # {name: (exact law, full sample size, quick look's size)} of the sampled checks
    laws = {
        "verify/ab-output": ({0: 0.6, 1: 0.4}, 20_000),
        "verify/fixed-k3": (verify_joint_law(*fixed_rows()), 20_000),
        "verify/zero-drafts": (dict(enumerate(ZERO_P[0])), ZERO_N),
        "verify/tables-k3": (target_joint_law(RandomTable(4, seed=301), (), 4), 20_000),
        "verify/point-mass-k3": (
            target_joint_law(RandomTable(5, seed=401, one_hot=0.0), (), 4),
            10_000,
        ),
    }
    laws = {name: (law, n, n // 5) for name, (law, n) in laws.items()}  # Runs' default look
    topk = next(c for c in SAMPLED if c.name == "topk-k3-eos")
    quick = int(topk.n * QUICK_LOOK)
    for law_name in ("tokens", "round1", "round2"):
        laws[f"loop/topk-k3-eos:{law_name}"] = (case_laws(topk, "shrink")[law_name], topk.n, quick)
    t1 = next(c for c in SAMPLED if c.name == "t1-k2")
    for law_name in ("round1", "round2"):
        laws[f"loop/t1-k2:{law_name}"] = (case_laws(t1, "shrink")[law_name], t1.n, quick)
    return laws


@pytest.mark.parametrize("look", ["quick", "full"])
def test_the_chi_square_is_not_anti_conservative(look):
    rng = np.random.default_rng(2024)
    for name, (law, n_full, n_quick) in null_laws().items():
        n = n_quick if look == "quick" else n_full
        outcomes = list(law)
        probs = np.array([law[o] for o in outcomes])
        probs /= probs.sum()
        p_values = []
        for draws in rng.multinomial(n, probs, size=REPLICATES):
            counts = Counter({outcomes[i]: int(c) for i, c in enumerate(draws) if c})
            p_values.append(compare(counts, law).p_value)
        p_values = np.array(p_values)
        for level in (0.01, 0.05):
            rate = float(np.mean(p_values < level))
            slack = 4 * math.sqrt(level * (1 - level) / REPLICATES)
            assert rate <= level + slack, f"{name} ({look}, n = {n}): {rate} at level {level}"

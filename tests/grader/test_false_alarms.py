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


# --------------------------------------------------------------------------------------------
# The checks on fresh inputs: one chi-square over a grading's cases (the sum of their
# statistics), under the null, over the secrets gradings draw
# --------------------------------------------------------------------------------------------

FRESH_REPLICATES = 1000  # each a grading of its own: a new secret, new cases, new counts


def fresh_laws(kind: str, secret: int) -> list[dict]:
    # the laws each fresh check of `kind` holds its cases to, for this secret
    from specdec.grading.exercises.tree.fresh import fresh_trees
    from specdec.grading.exercises.verify.fresh import fresh_cases

    if kind.startswith("verify"):
        cases = fresh_cases(secret)
        return [c.accepted if kind == "verify/fresh-accepted" else c.law for c in cases]
    trees = fresh_trees(secret)
    return [t.paths if kind == "tree-rule/fresh-paths" else t.law for t in trees]


@pytest.mark.parametrize(
    "kind",
    [
        "verify/fresh-accepted",
        "verify/fresh-joint",
        "tree-rule/fresh-paths",
        "tree-rule/fresh-walk",
    ],
)
@pytest.mark.parametrize("look", ["quick", "full"])
def test_the_fresh_cases_pooled_chi_square_is_not_anti_conservative(kind, look):
    from specdec.grading.engine.laws import compare_cases
    from specdec.grading.exercises.tree.fresh import FRESH_N as TREE_N
    from specdec.grading.exercises.verify.fresh import FRESH_N as VERIFY_N

    n_all = VERIFY_N if kind.startswith("verify") else TREE_N
    rng = np.random.default_rng(45)
    p_values = []
    for secret in range(FRESH_REPLICATES):
        laws = fresh_laws(kind, 10_000 + secret)
        n = (n_all // 5 if look == "quick" else n_all) // len(laws)  # per case, as Runs reads
        samples = []
        for law in laws:
            outcomes = list(law)
            probs = np.array([law[o] for o in outcomes])
            draws = rng.multinomial(n, probs / probs.sum())
            samples.append((Counter({outcomes[i]: int(c) for i, c in enumerate(draws) if c}), law))
        p_values.append(compare_cases(samples)[0])
    p_values = np.array(p_values)
    for level in (0.01, 0.05):
        rate = float(np.mean(p_values < level))
        slack = 4 * math.sqrt(level * (1 - level) / FRESH_REPLICATES)
        assert rate <= level + slack, f"{kind} ({look}): {rate} at level {level}"


def test_the_in_loop_accepted_counts_z_is_not_anti_conservative():
    # the in-loop family's rule part: (kept - E) / sqrt(sum of variances) over every call,
    # against the normal; simulated on the rows of real runs of the loop (the reference
    # verify's), the drafts kept drawn from the contract's law of each call
    from scipy import stats

    from reference.speculative import speculative_generate
    from reference.verification import verify
    from specdec.grading.engine.submission import Submission, verify_inputs
    from specdec.grading.exercises.loop.checks import IN_LOOP, run_loops, tiny_pair
    from specdec.grading.project import ModelDrafter

    keeps: list[np.ndarray] = []  # each call's min(1, p/q) at its drafts

    def recording(p_target, q_draft, draft_tokens, rng):
        rows = verify_inputs(p_target, q_draft, tuple(int(t) for t in draft_tokens))
        P, Q, x = rows.values()
        keeps.append(np.minimum(1.0, P[np.arange(len(x)), x] / Q[np.arange(len(x)), x]))
        return verify(p_target, q_draft, draft_tokens, rng)

    loop = Submission("reference loop", speculative_generate, "loop", "", None)
    drafter, rng = ModelDrafter(tiny_pair()[1]), np.random.default_rng(7)
    runs = IN_LOOP.n // 5  # the quick look's runs: the fewer calls, the worse the normal
    for _ in range(runs):
        run_loops(loop, IN_LOOP, rng, drafter, recording, 1)
    k = max(len(c) for c in keeps)
    keep = np.ones((len(keeps), k))
    for i, c in enumerate(keeps):
        keep[i, : len(c)] = c
        keep[i, len(c) :] = 0.0  # no draft there: never kept
    reach = np.cumprod(keep, axis=1)  # P(accepted >= i)
    mean = reach.sum(axis=1)
    var = (reach * (2 * np.arange(1, k + 1) - 1)).sum(axis=1) - mean**2
    sim = np.random.default_rng(46)
    p_values = []
    for _ in range(2000):
        kept = (np.cumprod(sim.random(keep.shape) < keep, axis=1)).sum(axis=1)
        z = (kept.sum() - mean.sum()) / math.sqrt(var.sum())
        p_values.append(2 * stats.norm.sf(abs(z)))
    p_values = np.array(p_values)
    for level in (0.01, 0.05):
        rate = float(np.mean(p_values < level))
        assert rate <= level + 4 * math.sqrt(level * (1 - level) / 2000), (level, rate)

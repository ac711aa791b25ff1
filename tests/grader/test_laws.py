"""The grader's expected laws (specdec/grading/engine/laws.py) are written apart from the reference;
these exact (float64) tests hold them against the reference's helpers and against the theorem they
must satisfy, so that neither side can drift alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reference.sampling import SamplingParams, probabilities
from reference.verification import verify_law
from specdec.grading.engine.laws import (
    ModelRows,
    generation_law,
    loop_joint_law,
    marginal,
    target_joint_law,
    transformed,
    verify_joint_law,
)
from specdec.grading.exercises.loop.checks import SAMPLED, case_laws, tiny_pair
from specdec.grading.exercises.verify.joint import AB_P, AB_Q, fixed_rows
from specdec.grading.exercises.verify.tables import RandomTable


def close(a: dict, b: dict, atol: float = 1e-12) -> bool:
    return all(abs(a.get(o, 0.0) - b.get(o, 0.0)) <= atol for o in set(a) | set(b))


def test_the_ab_law_is_the_hand_derived_one():
    law = verify_joint_law(AB_P, AB_Q, (0,))  # draft A: kept 0.75, else B
    assert law == pytest.approx({(1, 0): 0.75 * 0.3, (1, 1): 0.75 * 0.7, (0, 1): 0.25})


def test_the_joint_law_agrees_with_the_reference_helper():
    rng = np.random.default_rng(5)
    P, Q, drafts = fixed_rows()
    cases = [(P, Q, drafts)]
    for _ in range(20):
        k, V = int(rng.integers(0, 4)), int(rng.integers(2, 6))
        P = rng.dirichlet(np.ones(V), size=k + 1) * (rng.random((k + 1, V)) > 0.3)
        P[:, 0] += 1e-3  # keep every row non-empty
        P /= P.sum(axis=1, keepdims=True)
        Q = rng.dirichlet(np.ones(V), size=k)
        drafts = tuple(int(rng.choice(V, p=row)) for row in Q)
        cases.append((P, Q, drafts))
    for P, Q, drafts in cases:
        ours = verify_joint_law(P, Q, drafts)
        assert math.isclose(sum(ours.values()), 1.0)
        assert close(ours, {o: w for o, w in verify_law(P, Q, drafts).items() if w > 0})


def test_the_fixed_rows_exercise_every_position_and_the_last_token_trap():
    P, Q, drafts = fixed_rows()
    law = verify_joint_law(P, Q, drafts)
    accepted = marginal(law, lambda o: o[0])
    assert min(accepted.values()) > 0.05  # each residual row and the bonus row are seen often
    assert all(P[i, 4] <= Q[i, 4] for i in range(3))  # the last id is never a residual token
    assert all(t != 4 for (a, t) in law if a < 3)


@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    [
        (0.0, None, 1.0),
        (1.0, None, 1.0),
        (0.7, 3, 1.0),
        (1.4, 2, 1.0),
        (1.2, None, 0.9),
        (1.4, 4, 0.6),
    ],
)
def test_rows_match_the_reference_transform(temperature, top_k, top_p):
    logits = np.random.default_rng(3).normal(size=(20, 7)) * 2
    for z in logits:
        ref = probabilities(z, SamplingParams(temperature, top_k, top_p))
        assert np.allclose(transformed(z, temperature, top_k, top_p), ref, atol=1e-12)


CASES = [(case, "shrink") for case in SAMPLED] + [(SAMPLED[1], "full")]


@pytest.mark.parametrize("case, policy", CASES, ids=lambda x: getattr(x, "name", x))
def test_the_loop_law_emits_the_targets_law(case, policy):
    # case_laws is what the grader uses (and caches); the token law is enumerated apart
    laws = case_laws(case, policy)
    tokens = marginal(laws["joint"], lambda o: o[0])
    kw = dict(max_new_tokens=case.max_new_tokens, eos_id=case.eos_id)
    assert close(tokens, generation_law(laws["p_rows"], case.prompt, **kw), atol=1e-10)
    assert close(tokens, laws["tokens"], atol=1e-10)
    assert min(laws["round1"].values()) > 0.02  # every accepted count of round 1 is seen
    assert len(laws["round2"]) >= 3  # round 2 happens, with several accepted counts


def test_the_policies_differ_only_where_a_round_would_overshoot():
    # max_new_tokens = 2 < k + 1: "shrink" drafts 1 token, "full" drafts 3 and cuts
    target, draft = tiny_pair()
    p_rows, q_rows = ModelRows(target, 1.0), ModelRows(draft, 1.0)
    kw = dict(k=3, max_new_tokens=2, eos_id=None)
    shrink = loop_joint_law(p_rows, q_rows, (3, 0), policy="shrink", **kw)
    full = loop_joint_law(p_rows, q_rows, (3, 0), policy="full", **kw)
    first_round = {
        name: marginal(law, lambda o: o[1][0]) for name, law in (("shrink", shrink), ("full", full))
    }
    assert max(first_round["shrink"]) == 1 and max(first_round["full"]) == 3
    assert close(marginal(shrink, lambda o: o[0]), marginal(full, lambda o: o[0]), 1e-10)


def test_drafts_completed_by_the_target_follow_the_targets_law():
    # the identity behind the tables checks, exactly: sum over drafts and verify outcomes of
    # the emitted tokens completed by the target equals the target's own law of k + 1 tokens
    p_rows = RandomTable(3, seed=11)
    q_rows = RandomTable(3, seed=12, copy=p_rows, copy_frac=0.3)
    k = 2
    completed: dict = {}
    from specdec.grading.engine.laws import drafts_with_weight

    for drafts, w in drafts_with_weight(q_rows, (), k):
        P = np.stack([p_rows(drafts[:i]) for i in range(k + 1)])
        Q = np.stack([q_rows(drafts[:i]) for i in range(k)])
        for (a, t), v in verify_joint_law(P, Q, drafts).items():
            for rest, u in target_joint_law(p_rows, drafts[:a] + (t,), k - a).items():
                seq = drafts[:a] + (t,) + rest
                completed[seq] = completed.get(seq, 0.0) + w * v * u
    assert close(completed, target_joint_law(p_rows, (), k + 1))


def test_the_fresh_cases_laws_are_the_references_on_the_rows_as_handed():
    # the fresh rule checks' expectation (verify/fresh.py) is the contract's law on the rows
    # exactly as the verify receives them: the reference's helper agrees on every case
    from specdec.grading.exercises.verify.fresh import fresh_cases

    for secret in (1, 2, 3):
        for case in fresh_cases(secret):
            reference = verify_law(case.P, case.Q, np.asarray(case.drafts))
            assert close(case.law, dict(reference)), case
            assert close(case.accepted, marginal(case.law, lambda o: o[0]))


def test_the_pooled_chi_square_sums_the_statistics_and_their_degrees_of_freedom():
    from collections import Counter

    from scipy import stats

    from specdec.grading.engine.laws import compare, compare_cases, pearson

    law = {0: 0.5, 1: 0.3, 2: 0.2}
    one, two = Counter({0: 60, 1: 25, 2: 15}), Counter({0: 40, 1: 35, 2: 25})
    p, each = compare_cases([(one, law)])
    assert p == pytest.approx(compare(one, law).p_value) and len(each) == 1
    (_, s1, d1), (_, s2, d2) = pearson(one, law), pearson(two, law)
    p, _ = compare_cases([(one, law), (two, law)])
    assert p == pytest.approx(stats.chi2.sf(s1 + s2, d1 + d2))
    assert compare_cases([(one, law), (Counter({3: 1}), law)])[0] == 0.0  # impossible outcome

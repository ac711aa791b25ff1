"""Exact laws by enumeration: zero variance, float64 (and exact rationals), tolerance 1e-12.

What is proved here, for the given tables and tiny models (V = 3..5, k = 0..3):

* verify's law, `reference.verification.verify_law`, agrees with an independent formulation in
  exact rational arithmetic, and both satisfy the theorem: with drafts x_i ~ q rows, the first
  emitted token has law p row 0, P(accept x_1) = sum min(p, q), and the emitted sequence,
  completed by the target, has the target's joint law;
* the whole speculative procedure (rounds chained by the real `round_draft_length`,
  `emitted_tokens`, EOS and the length limit; rows from the real `probabilities` applied to
  tiny GPTs' uncached forwards) generates exactly the target's autoregressive law, for greedy,
  temperature, top-k, top-p and a combination, draft models and a point-mass drafter.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from reference.sampling import SamplingParams
from reference.verification import residual_distribution, verify_law
from specdec.oracle.cases import LOOP_SETUPS
from specdec.oracle.laws import (
    EXACT_ATOL,
    LoopSetup,
    ModelRows,
    PointMassRows,
    TableRows,
    loop_laws,
    marginal,
    max_abs_difference,
    round_law,
    speculative_law,
    target_law,
    tiny_gpt,
)

pytestmark = pytest.mark.distribution


# --------------------------------------------------------------------------------------------
# verify's law: an independent formulation in exact rationals
# --------------------------------------------------------------------------------------------


def rational_rows(rng: np.random.Generator, n_rows: int, V: int) -> list[list[Fraction]]:
    """Random probability rows as exact fractions: small integer weights, some of them 0."""
    rows = []
    for _ in range(n_rows):
        w = rng.integers(0, 5, size=V) * (rng.random(V) > 0.25)
        if w.sum() == 0:
            w[rng.integers(V)] = 1
        rows.append([Fraction(int(a), int(w.sum())) for a in w])
    return rows


def rational_verify_law(P, Q, drafts) -> dict:
    """P(accepted = n, token = y) from the algorithm's decision tree, in exact arithmetic.

    The n first drafts are accepted (each with probability min(1, p_i(x_i) / q_i(x_i))), then
    either draft n is rejected and y comes from the residual max(0, p_n - q_n) / its total, or
    n = k and y comes from the bonus row p_k.
    """
    k = len(drafts)
    law: dict = {}
    for n in range(k + 1):
        accepts = (min(Fraction(1), P[i][drafts[i]] / Q[i][drafts[i]]) for i in range(n))
        reach = math.prod(accepts, start=Fraction(1))
        if n == k:
            weights, total, leave = P[k], Fraction(1), reach
        else:
            leave = reach * (1 - min(Fraction(1), P[n][drafts[n]] / Q[n][drafts[n]]))
            weights = [max(Fraction(0), p - q) for p, q in zip(P[n], Q[n], strict=True)]
            total = sum(weights)
        for y, w in enumerate(weights):
            if leave and w:
                law[(n, y)] = leave * w / total
    return law


def as_float(rows) -> np.ndarray:
    return np.array([[float(v) for v in row] for row in rows], dtype=np.float64).reshape(
        len(rows), -1
    )


RATIONAL_CASES = [(k, V, seed) for k in range(4) for V in (2, 3, 5) for seed in range(3)]


@pytest.mark.parametrize("k,V,seed", RATIONAL_CASES)
def test_verify_law_matches_exact_rational_formulation(k, V, seed):
    rng = np.random.default_rng([k, V, seed])
    P = rational_rows(rng, k + 1, V)
    Q = rational_rows(rng, k, V)
    if k and seed == 0:
        Q[0] = list(P[0])  # p == q: a rejection has probability 0 there
    for drafts in itertools.product(range(V), repeat=k):
        if any(Q[i][x] == 0 for i, x in enumerate(drafts)):
            continue
        exact = rational_verify_law(P, Q, drafts)
        assert sum(exact.values()) == 1
        law = verify_law(as_float(P), as_float(Q) if k else np.zeros((0, V)), drafts)
        assert math.fsum(law.values()) == pytest.approx(1.0, abs=EXACT_ATOL)
        diff = max_abs_difference(law, {o: float(w) for o, w in exact.items()})
        assert diff <= EXACT_ATOL, f"drafts {drafts}: verify_law is off by {diff:.3g}"


@pytest.mark.parametrize("k,V,seed", [c for c in RATIONAL_CASES if c[0] >= 1])
def test_first_token_law_is_p_row_0_exactly(k, V, seed):
    """Marginalising drafts x_i ~ q_i: P(first emitted token = y) = p_0(y), as fractions."""
    rng = np.random.default_rng([k, V, seed, 1])
    P = rational_rows(rng, k + 1, V)
    Q = rational_rows(rng, k, V)
    first = [Fraction(0)] * V
    accept_first = Fraction(0)
    for drafts in itertools.product(range(V), repeat=k):
        w = math.prod((Q[i][x] for i, x in enumerate(drafts)), start=Fraction(1))
        if w == 0:
            continue
        for (n, y), pv in rational_verify_law(P, Q, drafts).items():
            first[drafts[0] if n >= 1 else y] += w * pv
            accept_first += w * pv * (n >= 1)
    assert first == P[0]
    assert accept_first == sum(min(p, q) for p, q in zip(P[0], Q[0], strict=True))


# --------------------------------------------------------------------------------------------
# One round on context-dependent table models (float64, verify_law)
# --------------------------------------------------------------------------------------------


def completed_law(round_outcomes: dict, p_rows, length: int) -> dict:
    """Continue each emitted sequence with the target until `length` tokens: the law of the
    completed sequence. Speculative sampling is exact iff this is the target's joint law."""
    law: dict = {}
    for emitted, w in round_outcomes.items():
        for tail, pv in target_law(p_rows, emitted, max_new_tokens=length - len(emitted)).items():
            law[emitted + tail] = law.get(emitted + tail, 0.0) + w * pv
    return law


TABLE_CASES = [(k, V, seed) for k in (1, 2, 3) for V in (3, 4, 5) for seed in (0, 1)]


@pytest.mark.parametrize("k,V,seed", TABLE_CASES)
def test_one_round_on_table_models_keeps_the_target_law(k, V, seed):
    p_rows = TableRows(V, seed=1000 + seed)
    q_rows = TableRows(V, seed=2000 + seed, copy=p_rows, copy_frac=0.2)
    context = (0,)
    outcomes = round_law(p_rows, q_rows, context, k)
    assert math.fsum(outcomes.values()) == pytest.approx(1.0, abs=EXACT_ATOL)
    emitted = marginal(outcomes, lambda o: context + o[1])
    # the first emitted token has law p(. | context) ...
    first = marginal(emitted, lambda e: e[len(context)])
    p0 = p_rows(context)
    assert max(abs(first.get(y, 0.0) - p0[y]) for y in range(V)) <= EXACT_ATOL
    # ... the first draft is accepted with probability sum min(p, q) ...
    accept = math.fsum(w for (n, _), w in outcomes.items() if n >= 1)
    assert accept == pytest.approx(np.minimum(p0, q_rows(context)).sum(), abs=EXACT_ATOL)
    # ... and the emitted sequence, completed by the target, has the target's joint law
    completed = completed_law(emitted, p_rows, len(context) + k + 1)
    target = {context + t: w for t, w in target_law(p_rows, context, max_new_tokens=k + 1).items()}
    diff = max_abs_difference(completed, target)
    assert diff <= EXACT_ATOL, f"completed round law differs from the target's by {diff:.3g}"


# --------------------------------------------------------------------------------------------
# The whole procedure on tiny GPTs: joint law of the generated tokens
# --------------------------------------------------------------------------------------------

V4_TARGET = (16, 1, 2, 0.9, 31)  # (n_embd, n_layer, n_head, std, seed)
V4_DRAFT = (0.4, 32)  # target + noise
V4_SMALL_DRAFT = (8, 1, 2, 0.7, 33)  # an independent, smaller model


def exact_setup(
    name,
    sampling,
    k,
    max_new_tokens,
    eos_id=None,
    draft=V4_DRAFT,
    prompt=(1, 2),
    target=V4_TARGET,
    family="gpt2",
):
    # an enumerated setup (n = 0) over V = 4; test_llama_laws.py gives its Llama-family
    # target and drafts
    return LoopSetup(
        name,
        4,
        target,
        draft,
        prompt,
        k=k,
        max_new_tokens=max_new_tokens,
        sampling=sampling,
        eos_id=eos_id,
        n=0,
        seed=0,
        family=family,
    )


EXACT_SETUPS = [
    exact_setup("greedy_k2", SamplingParams(0.0), k=2, max_new_tokens=4),
    exact_setup(
        "greedy_k3_eos", SamplingParams(0.0), k=3, max_new_tokens=5, eos_id=0, prompt=(3, 3)
    ),
    exact_setup("t1_k1", SamplingParams(1.0), k=1, max_new_tokens=3),
    exact_setup("t1_k2_len4", SamplingParams(1.0), k=2, max_new_tokens=4),  # 4: not 3's multiple
    exact_setup("t07_k3_len3_eos", SamplingParams(0.7), k=3, max_new_tokens=3, eos_id=2),
    exact_setup("t13_k3_len5_eos", SamplingParams(1.3), k=3, max_new_tokens=5, eos_id=3),
    exact_setup("topk2_k2_eos", SamplingParams(1.0, top_k=2), k=2, max_new_tokens=4, eos_id=0),
    exact_setup("topp07_k3", SamplingParams(1.0, top_p=0.7), k=3, max_new_tokens=5),
    exact_setup(
        "mixed_k2_eos", SamplingParams(1.3, top_k=3, top_p=0.85), k=2, max_new_tokens=5, eos_id=1
    ),
    exact_setup(
        "small_draft_k3_eos",
        SamplingParams(0.9),
        k=3,
        max_new_tokens=4,
        eos_id=0,
        draft=V4_SMALL_DRAFT,
    ),
]


@pytest.mark.parametrize("setup", EXACT_SETUPS, ids=lambda s: s.name)
def test_speculative_joint_law_equals_target_law(setup):
    laws = loop_laws(setup)
    spec = marginal(laws.joint, lambda o: o[0])
    assert math.fsum(spec.values()) == pytest.approx(1.0, abs=EXACT_ATOL)
    assert math.fsum(laws.tokens.values()) == pytest.approx(1.0, abs=EXACT_ATOL)
    diff = max_abs_difference(spec, laws.tokens)
    assert diff <= EXACT_ATOL, f"{setup.name}: speculative law is off by {diff:.3g}"
    # every sequence stops at EOS or at the length limit, never earlier
    for tokens in spec:
        assert len(tokens) == setup.max_new_tokens or tokens[-1] == setup.eos_id
        if setup.eos_id is not None:
            assert setup.eos_id not in tokens[:-1]


@pytest.mark.parametrize("setup", EXACT_SETUPS[2:5], ids=lambda s: s.name)
def test_first_round_acceptance_is_the_overlap(setup):
    """P(round 1 accepts x_1) = sum_x min(p(x | prompt), q(x | prompt))."""
    laws = loop_laws(setup)
    p = ModelRows(setup.target_model(), setup.sampling)(setup.prompt)
    q = ModelRows(setup.draft_model(), setup.sampling)(setup.prompt)
    accept = math.fsum(w for a, w in laws.round1.items() if a >= 1)
    assert accept == pytest.approx(np.minimum(p, q).sum(), abs=EXACT_ATOL)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_point_mass_drafter_keeps_the_target_law(k):
    """An n-gram / prompt-lookup style drafter: one-hot q rows, the same verify."""
    target = tiny_gpt(4, 16, *V4_TARGET)
    p_rows = ModelRows(target, SamplingParams(1.1, top_k=3))
    q_rows = PointMassRows(4, seed=7)
    kw = dict(max_new_tokens=5, eos_id=0)
    spec = marginal(speculative_law(p_rows, q_rows, (2, 1), k=k, **kw), lambda o: o[0])
    assert max_abs_difference(spec, target_law(p_rows, (2, 1), **kw)) <= EXACT_ATOL


@pytest.mark.parametrize("k", [1, 2, 3])
def test_table_models_keep_the_target_law(k):
    """Rows with zeros, one-hot rows and q == p rows, over several rounds with EOS."""
    p_rows = TableRows(3, seed=41)
    q_rows = TableRows(3, seed=42, copy=p_rows, copy_frac=0.25)
    kw = dict(max_new_tokens=5, eos_id=2)
    spec = marginal(speculative_law(p_rows, q_rows, (0,), k=k, **kw), lambda o: o[0])
    assert max_abs_difference(spec, target_law(p_rows, (0,), **kw)) <= EXACT_ATOL


@pytest.mark.parametrize("setup", LOOP_SETUPS.values(), ids=lambda s: s.name)
def test_sampled_loop_setups_are_exact_and_well_conditioned(setup):
    """The sampled loop checks compare the real code with these laws: they must agree with
    each other, and every discrete choice (argmax, top-k / top-p cut) must be far from a tie,
    so that the real code's float32 rows cannot choose differently from these float64 ones."""
    laws = loop_laws(setup)
    spec = marginal(laws.joint, lambda o: o[0])
    assert max_abs_difference(spec, laws.tokens) <= EXACT_ATOL
    assert laws.margin > 1e-3, f"{setup.name}: a discrete choice is {laws.margin:.2g} from a tie"


def law_with(accept=None, residual=None, bonus_row=None):
    """verify_law's recursion with one ingredient replaced (for the exact power test)."""
    accept = accept or (lambda p, q: min(1.0, p / q))
    residual = residual or residual_distribution
    bonus_row = bonus_row or (lambda k: k)

    def law_fn(P, Q, drafts) -> dict:
        law: dict = {}
        reach = 1.0
        for i, x in enumerate(drafts):
            a = accept(P[i, x], Q[i, x])
            for y, r in enumerate(residual(P[i], Q[i])):
                law[(i, y)] = law.get((i, y), 0.0) + reach * (1.0 - a) * r
            reach *= a
        for y, r in enumerate(P[bonus_row(len(drafts))]):
            law[(len(drafts), y)] = law.get((len(drafts), y), 0.0) + reach * r
        return law

    return law_fn


def no_eos_cut(verification, draft, eos_id, remaining):
    return verification.emitted(draft.tokens)[:remaining]


WRONG_RULES = {
    "swapped_ratio": law_with(accept=lambda p, q: min(1.0, q / p) if p > 0 else 1.0),
    "abs_residual": law_with(residual=lambda p, q: np.abs(p - q) / max(abs(p - q).sum(), 1e-300)),
    "bonus_from_row_k_minus_1": law_with(bonus_row=lambda k: max(k - 1, 0)),
    "tokens_after_eos_kept": None,  # the rule is right; emission forgets to cut after EOS
}


@pytest.mark.parametrize("wrong", WRONG_RULES)
def test_exact_check_rejects_a_wrong_rule(wrong, monkeypatch):
    """The comparison above is not vacuous: each of these mistakes moves the law by > 0.1
    (the check fails at 1e-12); the sampled checks and test_power.py do the same on real code."""
    from specdec.oracle import laws as oracle

    setup = EXACT_SETUPS[-1]  # small independent draft, T = 0.9, k = 3, EOS
    if WRONG_RULES[wrong] is None:
        monkeypatch.setattr(oracle, "emitted_tokens", no_eos_cut)
    law_fn = WRONG_RULES[wrong] or verify_law
    p_rows = ModelRows(setup.target_model(), setup.sampling)
    q_rows = ModelRows(setup.draft_model(), setup.sampling)
    kw = dict(max_new_tokens=setup.max_new_tokens, eos_id=setup.eos_id)
    wrong_law = speculative_law(p_rows, q_rows, setup.prompt, k=setup.k, law_fn=law_fn, **kw)
    diff = max_abs_difference(marginal(wrong_law, lambda o: o[0]), loop_laws(setup).tokens)
    assert diff > 0.1

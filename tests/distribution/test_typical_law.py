"""Typical acceptance (Medusa) is LOSSY: the oracle must reject it, and says by how much.

Exact laws (float64, enumeration). The same small cases as tests/distribution/
test_tree_law.py: random target and draft tables on V = 3 (oracle.TableRows), every tree the
drafter can build on a shape enumerated with its probability (test_tree_law.drafted_trees,
which takes nothing from reference/tree.py's drafters); each tree's outcomes now come from
reference.typical.typical_verify_tree_law, extended with the target's own rows to depth + 1
tokens. That law is held against the target's autoregressive law (oracle.target_law):

* the exact rule (reference.tree.verify_tree_law) on the very same trees gives a total
  variation (TV) below 1e-12 -- the control: the machinery can see equality;
* typical acceptance gives a TV of at least REJECT_MARGIN at every threshold listed, for
  every shape and drawing rule: rejected, by a margin nobody can mistake for float error;
* with one-hot target rows (greedy) its TV is 0: the only case where it is exact.

The TV at each threshold is computed by `tv_table` and printed (pytest -s shows it); a
hand-derived case (p = 0.6 / 0.4, a draft that always proposes the second token: TV = 0.6)
pins the number to arithmetic done outside the code. The lab's per-round TV formula
(reference.typical.round_total_variation: 1 - the target's probability of the accepted path,
for a deterministic tree) is checked against the enumeration.

Sampled (one small family, ALPHA = 1e-3): typical_verify_tree's outcomes follow its own
exact law (chi-square), and the same counts reject the exact rule's law (p < POWER_P).

The loop: the tree loop under test (`--tree`, default the reference's; `make oracle-gpu`
grades the GPU twin's) run with the typical rule as its `verify_fn` -- what
typical_tree_speculative_generate does -- is rejected by test_tree_law.py's loop check,
which the same loop passes with the exact rule: the loop plugs the rule in. Everything
else here checks the reference's pure functions.
"""

from __future__ import annotations

import functools
import math
from collections import Counter

import numpy as np
import pytest

from reference.tree import POINT, SAMPLED, WITHOUT_REPLACEMENT, TreeShape, verify_tree_law
from reference.typical import (
    TypicalThreshold,
    round_total_variation,
    total_variation,
    typical_rule,
    typical_verify_tree,
    typical_verify_tree_law,
)
from specdec.oracle.laws import (
    ALPHA,
    EXACT_ATOL,
    POWER_P,
    TableRows,
    chi_square_test,
    holm,
    target_law,
)

from .test_tree_law import PROMPT, V, drafted_trees, loop_check, loop_setups, tables

pytestmark = pytest.mark.distribution

# epsilon (delta = sqrt(epsilon), Medusa's recommended pairing); 0.09 is Medusa's default
EPSILONS = [0.0, 0.03, 0.09, 0.3]
REJECT_MARGIN = 0.02  # smallest TV that counts as "rejected": 1e10 times the exact tolerance
CASES = [  # (widths, draw, seed): one case per shape/rule, every one of them moved
    ((2,), SAMPLED, 12),
    ((2, 1), SAMPLED, 13),
    ((3, 1), WITHOUT_REPLACEMENT, 17),
    ((2, 2), POINT, 25),
    ((1, 1, 1), POINT, 13),
]
# A single case can show TV = 0: one-hot target rows along the way (greedy, see below), or
# a deterministic tree whose candidates never pass the bar (shape (1, 1, 1), POINT, seed 14,
# at every epsilon here). An oracle rejects a rule when ANY case moves; the cases above were
# picked so that each one moves, which is the stronger statement tested.


def round_law(p_rows, q_rows, widths, draw, judge, prompt=PROMPT) -> dict:
    """Law of the first depth + 1 tokens: one round judged by `judge(p, tree)` -> {(path,
    token): probability}, then the target's own rows."""
    shape = TreeShape.of_widths(widths)
    depth = len(widths)
    law: dict = {}

    def extend(out: tuple, w: float) -> None:
        if len(out) == depth + 1:
            law[out] = law.get(out, 0.0) + w
            return
        row = p_rows(prompt + out)
        for y in np.flatnonzero(row > 0):
            extend(out + (int(y),), w * float(row[y]))

    trees, path_to = drafted_trees(shape, draw, q_rows, prompt)
    for tree, w in trees:
        p = np.stack([p_rows(prompt + path_to(tree.tokens, i)) for i in range(tree.n_nodes)])
        for (path, token), m in judge(p, tree).items():
            extend(tuple(tree.path_tokens(path)) + (token,), w * m)
    return law


def typical_judge(threshold: TypicalThreshold):
    return lambda p, tree: typical_verify_tree_law(p, tree, threshold)


def tv_from_target(widths, draw, seed, judge) -> float:
    p_rows, q_rows = tables(seed, draw)
    got = round_law(p_rows, q_rows, widths, draw, judge)
    return total_variation(got, target_law(p_rows, PROMPT, max_new_tokens=len(widths) + 1))


def tv_table() -> dict[str, list[float]]:
    # "exact" and one row per epsilon -> the TV of each case in CASES, in order
    rows = {"exact (verify_tree)": [tv_from_target(*c, verify_tree_law) for c in CASES]}
    for eps in EPSILONS:
        judge = typical_judge(TypicalThreshold(eps))
        rows[f"typical eps={eps:g}"] = [tv_from_target(*c, judge) for c in CASES]
    return rows


@pytest.fixture(scope="module")
def table():
    return tv_table()


# ---------------------------------------------------------------- exact laws


def test_the_exact_rule_is_accepted_on_the_same_cases(table):
    """The control: with the same trees and the same extension, verify_tree's law IS the
    target's, so a large TV below comes from the rule, not from the machinery."""
    assert max(table["exact (verify_tree)"]) < EXACT_ATOL


@pytest.mark.parametrize("eps", EPSILONS)
def test_typical_acceptance_is_rejected_at_every_threshold(table, eps):
    tvs = table[f"typical eps={eps:g}"]
    assert min(tvs) > REJECT_MARGIN, f"TV per case at epsilon {eps}: {tvs}"


def test_the_tv_is_reported_for_each_threshold(table):
    """The numbers docs/algorithm.md quotes: mean TV over the cases, per threshold, each a
    distance in (0, 1]. The bar is not monotone in its effect: a lower bar lets more
    children pass and the likeliest of them wins, which can move the law less."""
    means = {name: float(np.mean(tvs)) for name, tvs in table.items()}
    print("\nTV from the target's law of depth + 1 tokens (mean over", len(CASES), "cases):")
    for name, tvs in table.items():
        print(f"  {name:22s} mean {means[name]:.4f}   per case {np.round(tvs, 4).tolist()}")
    assert set(means) == {"exact (verify_tree)"} | {f"typical eps={e:g}" for e in EPSILONS}
    assert all(REJECT_MARGIN < means[f"typical eps={e:g}"] <= 1.0 for e in EPSILONS)


def test_a_bar_of_one_accepts_nothing_and_is_exact():
    """epsilon = 1 and delta >= V: the bar is 1 (exp(-H) >= 1/V), no candidate passes, every
    round emits one sample of p -- plain autoregressive decoding, TV = 0. The other end of
    the trade-off: exact, and no faster than the target alone."""
    judge = typical_judge(TypicalThreshold(1.0, delta=float(V)))
    assert max(tv_from_target(*case, judge) for case in CASES) < EXACT_ATOL


def test_greedy_rows_make_typical_acceptance_exact():
    """One-hot target rows: only p(x) = 1 passes any bar below 1, so the walk is the greedy
    walk and the TV is 0 -- typical acceptance is lossy only when sampling."""
    p_rows = TableRows(V, 5, one_hot_frac=1.0)
    _, q_rows = tables(6, SAMPLED)
    for eps in EPSILONS[1:]:
        got = round_law(p_rows, q_rows, (2, 2), SAMPLED, typical_judge(TypicalThreshold(eps)))
        assert total_variation(got, target_law(p_rows, PROMPT, max_new_tokens=3)) < EXACT_ATOL


class HandRows:
    # p(. | anything) = (0.6, 0.4): the article's A/B target, context-free
    n_vocab = 2

    def __call__(self, context):
        return np.array([0.6, 0.4])


class AlwaysB(HandRows):
    def __call__(self, context):
        return np.array([0.0, 1.0])


def test_the_hand_derived_counterexample():
    """p = (0.6, 0.4), the draft always proposes B (token 1), one candidate: 0.4 > 0.09, so
    typical acceptance emits B first every time, the target 40 % of the time. Law of two
    tokens: (B, A) 0.6, (B, B) 0.4 against p x p; TV = 1 - 0.4 = 0.6 by hand."""
    judge = typical_judge(TypicalThreshold())
    got = round_law(HandRows(), AlwaysB(), (1,), SAMPLED, judge, prompt=(0, 1))
    assert got == pytest.approx({(1, 0): 0.6, (1, 1): 0.4})
    expected = {(a, b): [0.6, 0.4][a] * [0.6, 0.4][b] for a in (0, 1) for b in (0, 1)}
    assert total_variation(got, expected) == pytest.approx(0.6, abs=1e-12)
    exact = round_law(HandRows(), AlwaysB(), (1,), SAMPLED, verify_tree_law, prompt=(0, 1))
    assert total_variation(exact, expected) < EXACT_ATOL


@pytest.mark.parametrize("eps", EPSILONS)
def test_the_labs_round_formula_matches_the_enumeration(eps):
    """specdec/measure/typical.py measures the TV of one round on the real model as 1 - prod p(path)
    (valid for a deterministic tree). On POINT trees it must equal the enumeration."""
    p_rows, q_rows = tables(25, POINT)
    widths = (2, 2)
    trees, path_to = drafted_trees(TreeShape.of_widths(widths), POINT, q_rows, PROMPT)
    ((tree, w),) = trees  # one deterministic tree
    assert w == 1.0
    p = np.stack([p_rows(PROMPT + path_to(tree.tokens, i)) for i in range(tree.n_nodes)])
    law = typical_verify_tree_law(p, tree, TypicalThreshold(eps))
    (path,) = {path for path, _ in law}
    p_path = [p[int(tree.parents[n])][int(tree.tokens[n])] for n in path]
    by_formula = round_total_variation(p_path)
    by_enumeration = tv_from_target(widths, POINT, 25, typical_judge(TypicalThreshold(eps)))
    assert by_formula == pytest.approx(by_enumeration, abs=1e-12)


# ---------------------------------------------------------------- sampled

N_SAMPLES = 10_000


def fixed_case(eps: float):
    # one likely drafted tree (shape (3, 1), sampled) with its target rows
    p_rows, q_rows = tables(31, SAMPLED)
    trees, path_to = drafted_trees(TreeShape.of_widths((3, 1)), SAMPLED, q_rows, PROMPT)
    tree, _ = max(trees, key=lambda tw: (tw[1], tw[0].tokens.tolist()))
    p = np.stack([p_rows(PROMPT + path_to(tree.tokens, i)) for i in range(tree.n_nodes)])
    return p, tree, TypicalThreshold(eps)


def sampled_counts(p, tree, threshold, seed) -> Counter:
    rng = np.random.default_rng(seed)
    counts = Counter()
    for _ in range(N_SAMPLES):
        r = typical_verify_tree(p, tree, threshold, rng)
        counts[(r.path, r.token)] += 1
    return counts


def test_the_sampler_follows_its_law_and_the_oracle_rejects_it():
    """One family: the typical sampler against its own exact law (must pass, Holm at
    ALPHA); the same counts against the exact rule's law on that tree (must fail hard)."""
    results, wrong = {}, {}
    for i, eps in enumerate([0.03, 0.09]):
        p, tree, threshold = fixed_case(eps)
        counts = sampled_counts(p, tree, threshold, seed=300 + i)
        name = f"typical eps={eps}"
        results[name] = chi_square_test(counts, typical_verify_tree_law(p, tree, threshold), name)
        wrong[name] = chi_square_test(counts, verify_tree_law(p, tree), name + " vs exact")
    adjusted = holm({name: r.p_value for name, r in results.items()})
    for name, r in results.items():
        assert adjusted[name] >= ALPHA, r.describe()
    for r in wrong.values():
        assert r.p_value < POWER_P, r.describe()
    assert math.isfinite(sum(r.statistic for r in results.values()))


# ---------------------------------------------------------------- the loop with the lossy rule

# 500 runs reject the lossy loop at p ~ 1e-130 (sampled tree) and 1e-240 (heads tree), far
# below POWER_P; the exact loop passes the same check with 4000 (test_tree_law.py)
TYPICAL_LOOP_RUNS = 500


@pytest.mark.parametrize("setup", ["sampled (2, 2), T=1", "heads (3, 2), T=1"])
def test_the_tree_loop_plugs_in_the_lossy_rule_and_is_rejected(setup, tree_impl):
    """The tree loop under test with typical acceptance as its verify_fn: its law of 4
    tokens moves off the target's, and the loop check rejects it. A loop that dropped
    verify_fn (or judged with the exact rule anyway) would pass this check, and fail here."""
    target, setups = loop_setups()
    make, temperature = setups[setup]
    lossy = functools.partial(tree_impl, verify_fn=typical_rule(TypicalThreshold()))
    result = loop_check(
        f"typical {setup}", target, make, temperature, 9, lossy, runs=TYPICAL_LOOP_RUNS
    )
    assert result.p_value < POWER_P, result.describe()

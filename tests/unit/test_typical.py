"""Typical acceptance (reference/typical.py), the lossy contrast: the bar, the walk, the
chain form, the loop, and bad input. Whether its law is the target's is the oracle's
question (tests/distribution/test_typical_law.py); here, the rule does what it says."""

from __future__ import annotations

import math

import numpy as np
import pytest

import reference.typical as typ
from reference import SamplingParams, generate, speculative_generate
from reference.drafters import ModelDrafter
from reference.tree import POINT, ROOT, SAMPLED, ModelTreeDrafter, Tree, verify_tree_law
from reference.typical import (
    TypicalThreshold,
    entropy,
    round_total_variation,
    total_variation,
    typical_bar,
    typical_tree_speculative_generate,
    typical_verify,
    typical_verify_fn,
    typical_verify_law,
    typical_verify_tree,
    typical_verify_tree_law,
    typically_accepted,
)

from .helpers import GREEDY, TARGET_CFG, make_model

V = 4
V_MODEL = TARGET_CFG.n_vocab


def one_hot(token: int, n: int = V) -> np.ndarray:
    row = np.zeros(n)
    row[token] = 1.0
    return row


def point_tree(tokens, parents, n_vocab: int = V) -> Tree:
    rows = [np.zeros(n_vocab)] + [one_hot(t, n_vocab) for t in tokens[1:]]
    return Tree(
        np.asarray(tokens, np.int64),
        np.asarray(parents, np.int64),
        np.stack(rows),
        (ROOT,) + (POINT,) * (len(tokens) - 1),
    )


# ------------------------------------------------------------------ the threshold


def test_defaults_are_medusas_and_delta_follows_epsilon():
    t = TypicalThreshold()
    assert (t.epsilon, t.delta) == (0.09, pytest.approx(0.3))
    assert TypicalThreshold(0.04).delta == pytest.approx(0.2)
    assert TypicalThreshold(0.04, delta=0.5).delta == 0.5


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"epsilon": -0.1}, ValueError, "epsilon must be in [0, 1]"),
        ({"epsilon": 1.5}, ValueError, "epsilon must be in [0, 1]"),
        ({"epsilon": "0.1"}, TypeError, "epsilon must be a number"),
        ({"epsilon": 0.1, "delta": -1.0}, ValueError, "delta must be >= 0"),
        ({"epsilon": True}, TypeError, "epsilon must be a number"),
    ],
)
def test_bad_thresholds_are_refused_clearly(kwargs, error, words):
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        TypicalThreshold(**kwargs)


def test_entropy_in_nats_with_zero_log_zero():
    assert entropy(np.array([1.0, 0.0, 0.0])) == 0.0
    assert entropy(np.full(4, 0.25)) == pytest.approx(math.log(4))
    assert entropy(np.array([0.5, 0.5, 0.0])) == pytest.approx(math.log(2))


def test_the_bar_is_the_smaller_of_epsilon_and_the_entropy_term():
    t = TypicalThreshold(0.09, 0.3)
    peaked = np.array([0.97, 0.01, 0.01, 0.01])  # H small: the bar is epsilon
    assert typical_bar(peaked, t) == pytest.approx(0.09)
    flat = np.full(4, 0.25)  # H = log 4: 0.3 / 4 = 0.075 < 0.09
    assert typical_bar(flat, t) == pytest.approx(0.075)
    # strictly above the bar: 0.075 does not pass a bar of 0.075
    assert typically_accepted(flat, 0, t) == (0.25 > 0.075)
    assert not typically_accepted(np.array([0.075, 0.925, 0, 0]), 0, TypicalThreshold(0.075, 1))


def test_epsilon_zero_accepts_any_possible_token_and_epsilon_one_none():
    p = np.array([0.7, 0.3, 0.0, 0.0])
    assert typically_accepted(p, 1, TypicalThreshold(0.0))
    assert not typically_accepted(p, 2, TypicalThreshold(0.0))  # p(x) = 0 never passes
    never = TypicalThreshold(1.0, delta=float(V))  # exp(-H) >= 1/V, so the bar is 1
    assert not any(typically_accepted(one_hot(t), t, never) for t in range(V))
    assert not typically_accepted(np.array([0.99, 0.01, 0, 0]), 0, never)
    # delta = 1 is not enough: exp(-H) <= max p, so a peaked row's mode still passes
    assert typically_accepted(np.array([0.99, 0.01, 0, 0]), 0, TypicalThreshold(1.0))


# ------------------------------------------------------------------ trees


ROWS = np.array(
    [
        [0.5, 0.3, 0.15, 0.05],  # root: children 1 (x=1), 2 (x=2), 3 (x=3)
        [0.1, 0.1, 0.1, 0.7],  # node 1 (x=1): child 4 (x=3)
        [0.25, 0.25, 0.25, 0.25],  # node 2 (x=2): a leaf
        [0.4, 0.6, 0.0, 0.0],  # node 3 (x=3): a leaf
        [0.0, 0.0, 1.0, 0.0],  # node 4: a leaf
    ]
)
TREE = point_tree([0, 1, 2, 3, 3], [-1, 0, 0, 0, 1])


def test_the_walk_takes_the_likeliest_accepted_child_then_samples_the_end_row():
    """At the root, x=1 (0.3) and x=2 (0.15) pass the bar 0.09, x=3 (0.05) does not: the
    walk takes x=1, then its child x=3 (0.7), then samples node 4's row (always 2)."""
    law = typical_verify_tree_law(ROWS, TREE, TypicalThreshold())
    assert law == {((1, 4), 2): 1.0}
    for seed in range(5):
        v = typical_verify_tree(ROWS, TREE, TypicalThreshold(), np.random.default_rng(seed))
        assert v.path == (1, 4) and v.token == 2


def test_a_stricter_bar_stops_earlier_and_the_token_follows_that_row():
    # epsilon = 0.35: nothing passes at the root; the token is a sample of the root's row
    law = typical_verify_tree_law(ROWS, TREE, TypicalThreshold(0.35, 1.0))
    assert set(law) == {((), y) for y in range(V)}
    assert [law[((), y)] for y in range(V)] == pytest.approx(ROWS[0].tolist())


def test_the_likeliest_passes_even_when_tried_last():
    rows = np.array([[0.1, 0.2, 0.7, 0.0], one_hot(0), one_hot(0), one_hot(1)])
    tree = point_tree([0, 0, 1, 2], [-1, 0, 0, 0])
    assert typical_verify_tree_law(rows, tree, TypicalThreshold())[((3,), 1)] == 1.0


def test_ties_go_to_the_child_tried_first():
    rows = np.array([[0.4, 0.4, 0.2, 0.0], one_hot(2), one_hot(3)])
    tree = point_tree([0, 1, 0], [-1, 0, 0])
    assert typical_verify_tree_law(rows, tree, TypicalThreshold()) == {((1,), 2): 1.0}


def test_one_hot_rows_make_it_the_greedy_walk_exactly_as_verify_tree():
    """Greedy rows: only p(x) = 1 passes, so the law is verify_tree's (exact) law."""
    rows = np.stack([one_hot(1), one_hot(3), one_hot(0), one_hot(2), one_hot(2)])
    exact = verify_tree_law(rows, TREE)
    assert typical_verify_tree_law(rows, TREE, TypicalThreshold()) == exact


def test_the_sampler_matches_its_law_on_a_stochastic_end_row():
    rows = ROWS.copy()
    rows[4] = [0.2, 0.0, 0.5, 0.3]
    law = typical_verify_tree_law(rows, TREE, TypicalThreshold())
    rng = np.random.default_rng(0)
    n = 4000
    counts = np.zeros(V)
    for _ in range(n):
        v = typical_verify_tree(rows, TREE, TypicalThreshold(), rng)
        assert v.path == (1, 4)
        counts[v.token] += 1
    expected = np.array([law.get(((1, 4), y), 0.0) for y in range(V)])
    assert np.all(np.abs(counts / n - expected) < 0.03)
    assert counts[1] == 0


def test_tree_inputs_are_checked():
    t = TypicalThreshold()
    with pytest.raises(TypeError, match="TypicalThreshold"):
        typical_verify_tree(ROWS, TREE, 0.09, np.random.default_rng(0))
    with pytest.raises(TypeError, match="Generator"):
        typical_verify_tree(ROWS, TREE, t, 0)
    with pytest.raises(ValueError, match="one row per node"):
        typical_verify_tree(ROWS[:4], TREE, t, np.random.default_rng(0))
    with pytest.raises(ValueError, match="sum to 1"):
        typical_verify_tree(ROWS * 2, TREE, t, np.random.default_rng(0))
    with pytest.raises(TypeError, match="Tree"):
        typical_verify_tree_law(ROWS, "tree", t)


# ------------------------------------------------------------------ chains


def test_the_chain_rule_accepts_a_prefix_and_samples_the_next_row():
    p = np.array([[0.6, 0.4, 0, 0], [0.05, 0.05, 0.9, 0], [0.5, 0.5, 0, 0]])
    q = np.full((2, V), 0.25)
    assert typical_verify_law(p, [1, 0], TypicalThreshold()) == {
        (1, 0): 0.05,
        (1, 1): 0.05,
        (1, 2): 0.9,
    }
    v = typical_verify(p, q, [1, 2], np.random.default_rng(0), TypicalThreshold())
    assert v.accepted == 2 and v.token in (0, 1)


def test_the_one_line_counterexample():
    """p = (0.6, 0.4), a draft that always proposes 1: typical acceptance emits 1 every
    time, the target only 40 % of the time; exact verification keeps 0.6 / 0.4."""
    p = np.array([[0.6, 0.4], [0.5, 0.5]])
    law = typical_verify_law(p, [1], TypicalThreshold())
    assert {n for n, _ in law} == {1}  # the draft 1 is always accepted: first token is 1
    first = {1: math.fsum(law.values())}
    assert total_variation(first, {0: 0.6, 1: 0.4}) == pytest.approx(0.6)


def test_chain_inputs_are_checked():
    p = np.full((3, V), 0.25)
    q = np.full((2, V), 0.25)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="k\\+1 = 3 rows"):
        typical_verify(p[:2], q, [1, 2], rng)
    with pytest.raises(ValueError, match="draft_tokens"):
        typical_verify(p, q, [1, V], rng)
    with pytest.raises(TypeError, match="TypicalThreshold"):
        typical_verify_fn(0.09)


def test_total_variation_and_the_round_formula():
    assert total_variation({"a": 1.0}, {"a": 1.0}) == 0.0
    assert total_variation({"a": 1.0}, {"b": 1.0}) == 1.0
    assert round_total_variation([]) == 0.0
    assert round_total_variation([0.5, 0.4]) == pytest.approx(0.8)


# ------------------------------------------------------------------ the loops


@pytest.fixture(scope="module")
def models():
    return make_model(TARGET_CFG, seed=3), make_model(TARGET_CFG, seed=4)


def test_greedy_typical_tree_decoding_is_generate(models):
    """At temperature 0 typical acceptance is exact: the loop emits generate's tokens."""
    target, draft = models
    prompt = [2, 7, 1]
    expected = generate(
        target, prompt, max_new_tokens=16, rng=np.random.default_rng(0), sampling=GREEDY
    )
    got = typical_tree_speculative_generate(
        target,
        ModelTreeDrafter(draft, (2, 1), POINT),
        prompt,
        max_new_tokens=16,
        rng=np.random.default_rng(1),
        threshold=TypicalThreshold(),
        sampling=GREEDY,
    )
    assert got.tokens == expected


def test_the_sampled_loop_runs_and_accepts_more_with_a_lower_bar(models):
    target, draft = models
    sampling = SamplingParams(temperature=1.0)

    def mean_path(eps):
        out = typical_tree_speculative_generate(
            target,
            ModelTreeDrafter(draft, (3, 2), SAMPLED),
            [2, 7, 1],
            max_new_tokens=30,
            rng=np.random.default_rng(5),
            threshold=TypicalThreshold(eps, delta=None if eps < 1 else float(V_MODEL)),
            sampling=sampling,
        )
        assert len(out.tokens) == 30
        return out.stats.emitted / out.stats.rounds

    # epsilon = 1 and delta >= V: the bar is 1 (exp(-H) >= 1/V), nothing passes
    assert mean_path(0.0) > mean_path(1.0) == 1.0


def test_the_chain_form_plugs_into_the_chain_loop(models):
    target, draft = models
    out = speculative_generate(
        target,
        ModelDrafter(draft),
        [2, 7, 1],
        k=3,
        max_new_tokens=12,
        rng=np.random.default_rng(0),
        sampling=SamplingParams(temperature=1.0),
        verify_fn=typical_verify_fn(TypicalThreshold(0.0)),
    )
    assert len(out.tokens) == 12


def test_the_typical_round_takes_its_rule_not_a_verify_fn(models):
    """The typical round's rule is its threshold: it has no verify_fn to accept or refuse."""
    import inspect

    target, draft = models
    assert "verify_fn" not in inspect.signature(typ.typical_tree_round).parameters
    rnd = typ.typical_tree_round(
        target,
        target.new_cache(),
        ModelTreeDrafter(draft, (2,)),
        np.array([1, 2]),
        1,
        SamplingParams(),
        np.random.default_rng(0),
        threshold=TypicalThreshold(),
    )
    assert len(rnd.verification.emitted(rnd.draft.tokens)) >= 1

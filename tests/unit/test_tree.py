"""Tree drafts (reference/tree.py): the tree type, one masked pass, acceptance, compaction, loop.

The laws (exactness for every way of drawing siblings, and the broken variants the oracle must
reject) are in tests/distribution/test_tree_law.py; here: shapes, the forward pass against the
plain model, hand-derived acceptance cases, the KV invariant, and greedy = generate.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference.tree as tree_mod
import reference.tree.forward as tree_forward_mod
from reference import SamplingParams, SpeculativeStats, generate
from reference.tree import (
    POINT,
    ROOT,
    SAMPLED,
    WITHOUT_REPLACEMENT,
    ModelTreeDrafter,
    Tree,
    TreeRound,
    TreeShape,
    TreeVerification,
    ancestor_mask,
    chain_parents,
    check_tree,
    compact,
    kept_slots,
    tree_forward,
    tree_round,
    tree_speculative_generate,
    tree_verification_pass,
    verify_tree,
    verify_tree_law,
)

from .helpers import (
    GREEDY,
    TARGET_CFG,
    assert_cache_is_prefill,
    assert_close_scaled,
    make_model,
    prefill_cache,
)

V = TARGET_CFG.n_vocab


@pytest.fixture(scope="module")
def model():
    return make_model(TARGET_CFG, seed=3)


@pytest.fixture(scope="module")
def draft_model():
    return make_model(TARGET_CFG, seed=4)


def one_hot(token: int, n: int = V) -> np.ndarray:
    row = np.zeros(n, dtype=np.float32)
    row[token] = 1.0
    return row


def point_tree(tokens, parents, n_vocab: int = V) -> Tree:
    # a tree whose candidates are all point masses (one-hot q rows)
    rows = [np.zeros(n_vocab, np.float32)] + [one_hot(t, n_vocab) for t in tokens[1:]]
    return Tree(
        np.asarray(tokens, np.int64),
        np.asarray(parents, np.int64),
        np.stack(rows),
        (ROOT,) + (POINT,) * (len(tokens) - 1),
    )


def random_tree(widths, rng, n_vocab: int = V) -> Tree:
    # random tokens on a full shape, every candidate SAMPLED from one random q row
    parents = np.asarray(TreeShape.of_widths(widths).parents, np.int64)
    n = len(parents)
    q = rng.dirichlet(np.ones(n_vocab), size=n).astype(np.float32)
    q = q / q.sum(axis=-1, keepdims=True)
    tokens = np.array([rng.integers(n_vocab)] + [rng.choice(n_vocab, p=row) for row in q[1:]])
    q[0] = 0
    return Tree(tokens.astype(np.int64), parents, q, (ROOT,) + (SAMPLED,) * (n - 1))


# ------------------------------------------------------------------ 1. the tree type


def test_shapes_from_widths_are_breadth_first_and_cut_into_trees():
    """(2, 1): two children of the root, one child each; a depth or node cut is still a tree."""
    shape = TreeShape.of_widths((2, 1))
    assert shape.parents == (-1, 0, 0, 1, 2)
    assert shape.depths.tolist() == [0, 1, 1, 2, 2]
    assert shape.limited(max_depth=1, max_nodes=99).parents == (-1, 0, 0)
    assert shape.limited(max_depth=5, max_nodes=4).parents == (-1, 0, 0, 1)
    assert len(TreeShape.of_widths((3, 3, 3)).parents) == 1 + 3 + 9 + 27
    with pytest.raises(ValueError, match="breadth-first"):
        TreeShape((-1, 0, 1, 0))  # node 3 is a child of 0 after a grandchild
    with pytest.raises(ValueError, match="breadth-first"):
        TreeShape((0, 0))


def test_ancestor_mask_lets_a_node_see_its_path_only():
    """Node 3 (child of 1) sees 0, 1, 3; never its uncle 2 nor its sibling 4."""
    mask = ancestor_mask(np.array([-1, 0, 0, 1, 1]))
    assert np.flatnonzero(mask[3]).tolist() == [0, 1, 3]
    assert np.flatnonzero(mask[4]).tolist() == [0, 1, 4]
    assert np.flatnonzero(mask[2]).tolist() == [0, 2]


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(parents=np.array([-1, 0, 1, 0])), "breadth-first"),
        (dict(parents=np.array([0, 0, 1, 1])), "start with -1"),
        (dict(draws=(ROOT, POINT, SAMPLED, POINT)), "mix drawing rules"),
        (dict(tokens=np.array([1, 2, 3, 3])), "probability 0"),
        (dict(q=np.concatenate([np.zeros((1, V)), np.full((3, V), 1 / V)])), "one-hot"),
        (dict(q=np.zeros((4, V), np.float32)), "sum to 1"),
        (dict(draws=(ROOT, POINT, POINT, "guessed")), "tree.draws"),
    ],
)
def test_check_tree_says_what_is_wrong(change, message):
    good = point_tree([1, 2, 3, 4], [-1, 0, 1, 1])
    check_tree(good, V)
    fields = dict(tokens=good.tokens, parents=good.parents, q=good.q, draws=good.draws)
    with pytest.raises(ValueError, match=message):
        check_tree(Tree(**(fields | change)), V)


def test_check_tree_refuses_repeats_without_replacement_and_zero_mass_candidates():
    q = np.full((3, 4), 0.25, np.float32)
    q[0] = 0
    rep = Tree(np.array([0, 2, 2]), np.array([-1, 0, 0]), q, (ROOT,) + (WITHOUT_REPLACEMENT,) * 2)
    with pytest.raises(ValueError, match="repeat a token"):
        check_tree(rep, 4)
    q2 = q.copy()
    q2[1] = [0.5, 0.5, 0.0, 0.0]
    zero = Tree(np.array([0, 2, 1]), np.array([-1, 0, 0]), q2, (ROOT, SAMPLED, SAMPLED))
    with pytest.raises(ValueError, match="probability 0"):
        check_tree(zero, 4)
    same = Tree(np.array([0, 2, 2]), np.array([-1, 0, 0]), q, (ROOT, SAMPLED, SAMPLED))
    check_tree(same, 4)  # i.i.d. siblings may repeat: verification handles it exactly


# ------------------------------------------------------------------ 2. one pass over the tree


def test_a_chain_is_the_plain_forward(model):
    """parents -1, 0, 1, ..: tree_forward is GPT.forward, with and without a cache."""
    tokens = np.array([3, 1, 4, 1, 5, 9])
    assert_close_scaled(tree_forward(model, tokens, chain_parents(6)), model.forward(tokens))
    cache = prefill_cache(model, [2, 7])
    ref_cache = prefill_cache(model, [2, 7])
    got = tree_forward(model, tokens, chain_parents(6), cache)
    assert_close_scaled(got, model.forward(tokens, ref_cache), "cached chain")
    assert_close_scaled(cache.k[:, :, :8], ref_cache.k[:, :, :8], "chain K")


def node_rows_match_plain_forward(model, context, tree: Tree, what: str = "") -> None:
    """Every node's row of one verification pass equals the last row of the plain,
    uncached forward of context + the path from the root to that node."""
    cache = prefill_cache(model, context[:-2])  # two catch-up tokens: context[-2], the root
    logits = tree_forward(
        model,
        np.concatenate([context[-2:-1], tree.tokens]),
        np.concatenate([chain_parents(2), tree.parents[1:] + 1]),
        cache,
    )[1:]
    for node in range(tree.n_nodes):
        path, i = [], node
        while i > 0:
            path.append(int(tree.tokens[i]))
            i = int(tree.parents[i])
        plain = model.forward(np.concatenate([context, path[::-1]]).astype(np.int64))[-1]
        assert_close_scaled(logits[node], plain, f"{what} node {node}")


@pytest.mark.parametrize("widths", [(1,), (3,), (2, 2), (3, 2, 1), (1, 3, 2)])
def test_every_node_row_equals_the_plain_sequence_to_it(model, widths):
    rng = np.random.default_rng(len(widths) * 10 + widths[0])
    context = np.array([5, 3, 8, 2, 11])
    tree = random_tree(widths, rng)
    tree = Tree(np.concatenate([[context[-1]], tree.tokens[1:]]), tree.parents, tree.q, tree.draws)
    node_rows_match_plain_forward(model, context, tree, str(widths))


@pytest.mark.parametrize("layers", [None, (2,), (1, 2)])
def test_the_pass_features_of_the_kept_slots_are_the_plain_forwards(model, layers):
    """tree_pass_features (what the tree loop hands an EAGLE drafter): row m-1+a is node a's
    feature, the catch-up rows come first, so x[kept_slots(m, path)] is the plain uncached
    forward's features of the committed tokens and the path, every layer asked for; its
    top columns are what tree_pass_rows norms."""
    context = np.array([5, 3, 8, 2, 11])
    tree = random_tree((2, 2), np.random.default_rng(4))
    tree = Tree(np.concatenate([[11], tree.tokens[1:]]), tree.parents, tree.q, tree.draws)
    cache = prefill_cache(model, context[:-3])  # three catch-up tokens, the root the last
    x, m = tree_mod.tree_pass_features(model, cache, context, tree, layers)
    F = 16 * (1 if layers is None else len(layers))
    assert m == 3 and x.shape == (m - 1 + tree.n_nodes, F)
    for leaf in (3, 6):
        path = [int(tree.parents[leaf]), leaf]
        want = model.layer_features(
            np.concatenate([context, tree.path_tokens(path)]), layers=layers
        )[len(context) - m :]
        assert_close_scaled(x[kept_slots(m, path)], want, f"path {path}")
    h, _ = tree_mod.tree_pass_rows(model, prefill_cache(model, context[:-3]), context, tree)
    assert_close_scaled(h, model.norm(x[m - 1 :, -16:], "ln_f"), "the rows scored")


def test_the_check_catches_a_sibling_visible_mask_and_index_positions(model, monkeypatch):
    """The comparison above fails on the two classic mistakes: a mask that lets a node see
    its earlier siblings, and position ids taken from the node's index instead of depth."""
    context = np.array([5, 3, 8, 2, 11])
    tree = random_tree((3, 2), np.random.default_rng(0))
    tree = Tree(np.concatenate([[11], tree.tokens[1:]]), tree.parents, tree.q, tree.draws)
    real_mask, real_positions = tree_forward_mod.ancestor_mask, tree_forward_mod.position_ids

    def sees_siblings(parents):
        mask = real_mask(parents)
        for i, parent in enumerate(parents):
            mask[i, : i + 1] |= np.asarray(parents[: i + 1]) == parent
        return mask

    monkeypatch.setattr(tree_forward_mod, "ancestor_mask", sees_siblings)
    with pytest.raises(AssertionError):
        node_rows_match_plain_forward(model, context, tree)
    monkeypatch.setattr(tree_forward_mod, "ancestor_mask", real_mask)
    monkeypatch.setattr(tree_forward_mod, "position_ids", lambda p, n: n + np.arange(len(p)))
    with pytest.raises(AssertionError):
        node_rows_match_plain_forward(model, context, tree)
    monkeypatch.setattr(tree_forward_mod, "position_ids", real_positions)
    node_rows_match_plain_forward(model, context, tree)


def test_level_by_level_feeding_sees_pending_ancestors(model):
    """Nodes fed in a later call attend to their ancestors' temporary slots (the drafter
    grows its tree this way): the rows equal one pass over the whole tree."""
    tree = random_tree((2, 2), np.random.default_rng(5))
    whole = tree_forward(model, tree.tokens, tree.parents, prefill_cache(model, [1, 2]))
    cache = prefill_cache(model, [1, 2])
    first = tree_forward(model, tree.tokens[:3], tree.parents[:3], cache)
    second = tree_forward(model, tree.tokens[3:], tree.parents, cache)
    assert_close_scaled(np.concatenate([first, second]), whole, "two calls")


def test_tree_forward_refuses_bad_parents_before_writing(model):
    cache = prefill_cache(model, [1, 2])
    before = cache.k.copy()
    with pytest.raises(ValueError, match="earlier"):
        tree_forward(model, [1, 2], [-1, 1], cache)
    with pytest.raises(ValueError, match="one int per temporary slot"):
        tree_forward(model, [1, 2], [-1], cache)
    assert (cache.length, cache.pending) == (2, 0) and np.array_equal(cache.k, before)


# ------------------------------------------------------------------ 3. acceptance


def test_a_hand_derived_tree_law():
    """Root with point-mass children a=0, b=1 and p = (0.5, 0.3, 0.2): accept a with 0.5;
    else p' = (0, 0.6, 0.4): accept b with 0.6 (total 0.3); else p'' = (0, 0, 1): 0.2.
    a and b are leaves, so after each comes a sample of its own row."""
    tree = point_tree([2, 0, 1], [-1, 0, 0], n_vocab=3)
    p = np.array([[0.5, 0.3, 0.2], [0.1, 0.0, 0.9], [0.0, 1.0, 0.0]])
    law = verify_tree_law(p, tree)
    expected = {
        ((1,), 0): 0.05,
        ((1,), 2): 0.45,
        ((2,), 1): 0.3,
        ((), 2): 0.2,
    }
    assert set(law) == set(expected)
    for key, value in expected.items():
        assert law[key] == pytest.approx(value, abs=1e-15)


def test_greedy_rows_follow_the_targets_argmax_through_the_tree():
    """One-hot p: the path follows the target's argmax as far as the tree has it, then the
    argmax is emitted; whatever the generator."""
    tree = point_tree([0, 3, 5, 7, 2, 5], [-1, 0, 0, 1, 2, 2])
    argmax = {0: 5, 1: 1, 2: 2, 3: 4, 4: 6, 5: 8}  # node -> the target's choice after it
    p = np.stack([one_hot(argmax[i]) for i in range(6)])
    for seed in range(5):
        out = verify_tree(p, tree, np.random.default_rng(seed))
        assert out.path == (2, 4) and out.token == 6
        assert out.emitted(tree) == [5, 2, 6]


def test_verify_tree_refuses_rows_of_the_wrong_shape():
    tree = point_tree([0, 3], [-1, 0])
    with pytest.raises(ValueError, match="one row per node"):
        verify_tree(np.full((3, V), 1 / V), tree, np.random.default_rng(0))
    with pytest.raises(TypeError, match="Generator"):
        verify_tree(np.full((2, V), 1 / V), tree, 0)


# ------------------------------------------------------------------ 4. compaction


@settings(max_examples=25, deadline=None)
@given(
    widths=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    seed=st.integers(0, 10**6),
    n_catch_up=st.integers(1, 3),
    walk=st.lists(st.integers(0, 2), max_size=3),
)
def test_compacting_any_path_leaves_a_prefill_cache(model, widths, seed, n_catch_up, walk):
    """For a random tree, any root-to-node path and 1..3 catch-up tokens: after the pass,
    compact(path) + commit + rollback leave exactly a fresh prefill of the committed tokens."""
    rng = np.random.default_rng(seed)
    tree = random_tree(tuple(widths), rng)
    path, node = [], 0
    for choice in walk:  # descend by the chosen child index, while there are children
        kids = tree.children(node)
        if not kids:
            break
        node = kids[choice % len(kids)]
        path.append(node)
    context = rng.integers(V, size=4 + n_catch_up)
    context[-1] = tree.tokens[0]
    cache = prefill_cache(model, context[:-n_catch_up])
    _, m, _ = tree_verification_pass(model, cache, context, tree, SamplingParams())
    keep = kept_slots(m, path)
    compact(cache, keep)
    cache.commit(len(keep))
    cache.rollback()
    assert_cache_is_prefill(model, cache, np.concatenate([context, tree.path_tokens(path)]))


def test_committing_without_compaction_breaks_the_invariant(model):
    """The property above can fail: taking the path's slots where they lie (no gather) keeps
    a sibling's K/V instead of the accepted node's."""
    tree = point_tree([4, 1, 2, 3], [-1, 0, 0, 2])  # accept 2 then 3: slots 2, 3 hold 2, 3
    context = np.array([7, 9, 4])
    cache = prefill_cache(model, context[:-1])
    _, m, _ = tree_verification_pass(model, cache, context, tree, SamplingParams())
    cache.commit(m + 2)  # slots of nodes 1 and 2, not 2 and 3
    with pytest.raises(AssertionError):
        assert_cache_is_prefill(model, cache, [7, 9, 4, 2, 3])


@settings(max_examples=12, deadline=None)
@given(
    widths=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    draw=st.sampled_from([SAMPLED, WITHOUT_REPLACEMENT, POINT]),
    seed=st.integers(0, 10**6),
)
def test_both_caches_stay_prefills_round_after_round(model, draft_model, widths, draw, seed):
    """The cache invariant (docs/kv-cache.md, 'The invariant') through whole tree rounds:
    after every round, the target's committed cache is a prefill of the committed tokens but
    the last, and the drafter's a prefill of a prefix of them (it catches up the rest next
    round)."""
    rng = np.random.default_rng(seed)
    drafter = ModelTreeDrafter(draft_model, tuple(widths), draw)
    context = np.array([3, 1, 4])
    cache = model.new_cache()
    drafter.reset()
    model.forward(context[:-1], cache)
    cache.commit(len(context) - 1)
    drafter.prefill(context[:-1])
    for _ in range(4):
        rnd = tree_round(model, cache, drafter, context, len(widths), SamplingParams(), rng)
        context = np.concatenate([context, rnd.result.emitted(rnd.tree)])
        assert_cache_is_prefill(model, cache, context[:-1], "target")
        n = drafter.cache.length
        assert n >= len(context) - 1 - len(widths)
        assert_cache_is_prefill(draft_model, drafter.cache, context[:n], "drafter")


# ------------------------------------------------------------------ 5. the loop


@pytest.mark.parametrize("draw", [SAMPLED, WITHOUT_REPLACEMENT, POINT])
@pytest.mark.parametrize("widths", [(1,), (2, 2, 1), (3, 1)])
def test_greedy_tree_decoding_is_generate(model, draft_model, draw, widths):
    """At temperature 0 every row is one-hot: the tree loop emits generate's tokens."""
    prompt = [2, 7, 1]
    expected = generate(
        model, prompt, max_new_tokens=20, rng=np.random.default_rng(0), sampling=GREEDY
    )
    drafter = ModelTreeDrafter(draft_model, widths, draw)
    got = tree_speculative_generate(
        model, drafter, prompt, max_new_tokens=20, rng=np.random.default_rng(1), sampling=GREEDY
    )
    assert got.tokens == expected
    assert got.stats.emitted == 20 and got.stats.stop_reason == "length"


def test_self_drafting_greedy_accepts_every_path_and_eos_stops(model):
    """The target drafting for itself at greedy: each round accepts a full-depth path; EOS
    truncates the output as in the chain loop; the trace shows each round's path."""
    prompt = [2, 7, 1]
    plain = generate(
        model, prompt, max_new_tokens=12, rng=np.random.default_rng(0), sampling=GREEDY
    )
    drafter = ModelTreeDrafter(model, (2, 1, 1), POINT)
    out = tree_speculative_generate(
        model,
        drafter,
        prompt,
        max_new_tokens=12,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
        trace=True,
    )
    assert out.tokens == plain
    assert out.stats.accepted_per_round[:2] == [3, 3]
    assert [t.accepted for t in out.trace] == out.stats.accepted_per_round
    eos = plain[5]
    cut = tree_speculative_generate(
        model,
        ModelTreeDrafter(model, (2, 1, 1), POINT),
        prompt,
        max_new_tokens=12,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
        eos_id=eos,
    )
    assert cut.tokens == plain[: plain.index(eos) + 1] and cut.stats.stop_reason == "eos"


def test_a_tree_round_runs_the_tree_rule_it_is_given(model, draft_model):
    """verify_fn replaces the exact rule (reference/typical.py's lossy one uses this): a
    rule that rejects every child and emits token 3 makes the round emit exactly that."""
    drafter = ModelTreeDrafter(draft_model, (2,))
    context = np.array([1, 2])
    cache = model.new_cache()
    model.forward(context[:-1], cache)
    cache.commit(1)
    calls = []

    def rule(p, tree, rng):
        calls.append(p.shape)
        return TreeVerification((), 3)

    rnd = tree_round(
        model, cache, drafter, context, 1, SamplingParams(1.0), np.random.default_rng(0), rule
    )
    assert calls == [(3, model.n_vocab)]  # one call, one row per node (root + 2 children)
    assert rnd.verification.accepted == 0 and rnd.verification.token == 3
    assert cache.length == 2  # only the root was committed


# ------------------------------------------------------------------ heads drafting a tree


def test_heads_candidates_keep_the_likeliest_paths_closed_under_parents():
    """Head 0 says (.6, .3, .1), head 1 says (.5, .4, .1), widths (2, 2): path probabilities
    .6 .3 | .30 .24 .15 .12; a budget of 4 keeps .6, .3, .30 and .24, renumbered
    breadth-first; the tie .3 (node) vs .30 (grandchild) goes to the shallower node."""
    probs = np.array([[0.6, 0.3, 0.1], [0.5, 0.4, 0.1]])
    tokens, parents = tree_mod.heads_candidates(probs, (2, 2), budget=4)
    assert tokens == [0, 1, 0, 1] and parents == [0, 0, 1, 1]
    tokens, parents = tree_mod.heads_candidates(probs, (2, 2), budget=5)
    assert tokens == [0, 1, 0, 1, 0] and parents == [0, 0, 1, 1, 2]
    assert tree_mod.heads_candidates(probs, (2, 2), budget=0) == ([], [])


@pytest.fixture(scope="module")
def heads_target():
    from reference.config import GPTConfig
    from reference.model import GPT, init_params

    cfg = GPTConfig(n_vocab=16, n_ctx=64, n_embd=32, n_head=2, n_layer=2)
    return GPT(cfg, init_params(cfg, np.random.default_rng(0), std=0.3))


def heads_tree_drafter(target, widths, max_nodes=None, seed=1):
    from reference.heads import HeadsDrafter
    from specdec.standins import random_heads

    heads = HeadsDrafter(target, random_heads(target.config.n_embd, len(widths), seed=seed))
    return tree_mod.HeadsTreeDrafter(heads, widths, max_nodes)


@pytest.mark.parametrize("widths, max_nodes", [((2,), None), ((3, 2), 6), ((2, 2, 2), 10)])
def test_greedy_heads_trees_equal_generate(heads_target, widths, max_nodes):
    prompt = [4, 4, 2, 9, 1]
    expected = generate(
        heads_target, prompt, max_new_tokens=20, rng=np.random.default_rng(0), sampling=GREEDY
    )
    drafter = heads_tree_drafter(heads_target, widths, max_nodes)
    out = tree_speculative_generate(
        heads_target,
        drafter,
        prompt,
        max_new_tokens=20,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
        trace=True,
    )
    assert out.tokens == expected
    assert all(t.q_rows.max(initial=1) == 1 for t in out.trace)  # point masses only


def test_heads_trees_read_the_row_that_scored_the_last_token(heads_target):
    """After prefill and every tree round, the heads hold the target's final hidden state
    at the position before the context's last token; a one-token prompt drafts nothing."""
    drafter = heads_tree_drafter(heads_target, (3, 2), max_nodes=7)
    context = np.array([1, 2, 3])
    cache = heads_target.new_cache()
    drafter.reset()
    heads_target.forward(context[:-1], cache)
    cache.commit(2)
    drafter.observe(heads_target.norm(heads_target.residual(context[:-1]), "ln_f")[-1])
    rng = np.random.default_rng(2)
    for _ in range(8):
        want = heads_target.norm(heads_target.residual(context[:-1]), "ln_f")[-1]
        np.testing.assert_allclose(drafter.heads.h, want, atol=1e-5)
        rnd = tree_round(heads_target, cache, drafter, context, 2, SamplingParams(), rng)
        assert rnd.tree.n_nodes <= 8
        context = np.concatenate([context, rnd.result.emitted(rnd.tree)])
    drafter.reset()
    tree = drafter.propose_tree(np.array([7]), 2, 10, SamplingParams(), rng)
    assert tree.n_nodes == 1


def test_the_trace_and_stats_count_depths_and_show_the_rejected_child(model, draft_model):
    """Each traced round is the accepted path, plus the first child of the node where the
    walk stopped when it had children (a correction token); stats count depths as positions,
    and the nodes verified apart."""
    drafter = ModelTreeDrafter(draft_model, (3, 2), SAMPLED)
    out = tree_speculative_generate(
        model, drafter, [1, 2, 3], max_new_tokens=30, rng=np.random.default_rng(4), trace=True
    )
    assert sum(len(t.emitted) for t in out.trace) == len(out.tokens) == 30
    for t in out.trace:
        fates = t.draft_fates
        assert fates[: t.accepted] == ["accepted"] * t.accepted
        if t.token_kind == "correction":
            assert fates[t.accepted :] == ["rejected"]
        else:
            assert len(fates) == t.accepted  # a leaf: the token came from its own row
    # the depth drafted: 2, then 1 and 0 when only 2 or 1 tokens are left to emit
    assert set(out.stats.drafted_per_round) <= {0, 1, 2}
    assert out.stats.drafted == sum(out.stats.drafted_per_round)
    assert out.stats.nodes == sum(out.stats.nodes_per_round) > out.stats.drafted
    kinds = {t.token_kind for t in out.trace}
    assert kinds == {"correction", "bonus"}


# ------------------------------------------------------------------ what a tree run reports


def test_tree_statistics_count_nodes_depths_and_paths_as_counted_by_hand():
    """Tree: root -> a (-> c), b, a leaf at depth 1. Four rounds, by hand:

        path    walk                       examined  accepted  rejection
        (b)     a refused, b kept: a leaf  1         1         no
        ()      a and b refused            1         0         yes
        (a)     a kept, c refused          2         1         yes
        (a, c)  a kept, c kept: a leaf     2         2         no

    alpha = 4 accepted / 6 examined depths, 3 nodes verified per round, depth 2. Counting
    every path shorter than the depth as a rejection (a chain's rule) would give 4 / 7."""
    tree = point_tree([0, 1, 2, 3], [-1, 0, 0, 1])
    rows = np.full((4, V), 1.0 / V, np.float32)
    stats = SpeculativeStats(k=2)
    for path, examined in [((2,), 1), ((), 1), ((1,), 2), ((1, 3), 2)]:
        rnd = TreeRound(tree, rows, TreeVerification(path, 4), 1, 2, None, None)
        assert (rnd.k, rnd.nodes, rnd.examined) == (2, 3, examined), path
        stats.record(rnd.k, rnd.verification.accepted, rnd.examined, rnd.nodes)
    assert stats.accepted_per_round == [1, 0, 1, 2]  # the accepted path lengths
    assert stats.nodes_per_round == [3, 3, 3, 3] and stats.nodes == 12
    assert stats.drafted == 8 and stats.rejections == 2
    assert stats.alpha == pytest.approx(4 / 6)
    assert stats.mean_accepted_per_round == 1.0 and stats.mean_nodes_per_round == 3.0
    # depth 1 examined in all 4 rounds (kept in 3), depth 2 in the 2 that kept a
    np.testing.assert_allclose(stats.per_position_acceptance, [3 / 4, 1 / 2])


def test_a_tree_run_counts_every_candidate_and_never_a_depth_it_lacks(model, draft_model):
    """Widths (2, 2, 1) with top-b point masses: 2 + 4 + 4 = 10 candidates in every round of
    full depth 3. Asking for a deeper k changes nothing: the statistics' k is the depth."""
    drafter = ModelTreeDrafter(draft_model, (2, 2, 1), POINT)
    out = tree_speculative_generate(
        model, drafter, [1, 2, 3], max_new_tokens=40, rng=np.random.default_rng(5), k=6
    )
    s = out.stats
    assert s.k == 3 and len(s.per_position_acceptance) == 3
    full = [n for n, d in zip(s.nodes_per_round, s.drafted_per_round, strict=True) if d == 3]
    assert full and set(full) == {10}, s.nodes_per_round
    assert s.nodes == sum(s.nodes_per_round) and max(s.nodes_per_round) == 10
    assert s.accepted_histogram.sum() == len(full)  # the histogram counts those rounds
    assert s.emitted == 40 and s.accepted + s.rounds >= 40  # path + one token per round

"""EAGLE-2's dynamic tree (reference/tree/eagle.py): its trees, its cache, the features the
tree loop hands over, greedy = generate, and the exact law of the emitted tokens."""

from __future__ import annotations

import numpy as np
import pytest

from reference import EagleDrafter, EagleTreeDrafter, generate
from reference.config import GPTConfig
from reference.eagle import init_eagle_params
from reference.model import GPT, causal_placement, init_params, softmax
from reference.sampling import SamplingParams, probabilities
from reference.speculative import prefill
from reference.tree import (
    POINT,
    ROOT,
    ModelTreeDrafter,
    TreeShape,
    check_tree,
    tree_round,
    tree_speculative_generate,
    tree_verification_pass,
    verify_tree_law,
)

GREEDY = SamplingParams(temperature=0.0)
LAYERS3 = (1, 2)


@pytest.fixture(scope="module")
def target() -> GPT:
    cfg = GPTConfig(n_vocab=16, n_ctx=64, n_embd=16, n_head=2, n_layer=2)
    return GPT(cfg, init_params(cfg, np.random.default_rng(0), std=0.3))


@pytest.fixture(scope="module")
def params(target) -> dict:
    return init_eagle_params(target.config, np.random.default_rng(1), std=0.3)


@pytest.fixture(scope="module")
def params3(target) -> dict:
    return init_eagle_params(
        target.config, np.random.default_rng(2), std=0.3, feature_layers=LAYERS3
    )


def make(target, params, eagle3: bool, **kw) -> EagleTreeDrafter:
    layers = LAYERS3 if eagle3 else None
    return EagleTreeDrafter(EagleDrafter(target, params, layers), **kw)


def pick(params, params3, eagle3: bool) -> dict:
    return params3 if eagle3 else params


def start(target, drafter, context):
    cache = target.new_cache()
    prefill(target, cache, drafter, np.asarray(context))
    return cache


def reduced(params, x: np.ndarray) -> np.ndarray:  # [m, F] -> [m, C], as the drafter keeps it
    return x @ params["reduce.weight"] + params["reduce.bias"] if "reduce.weight" in params else x


class Recording(EagleTreeDrafter):
    """An EagleTreeDrafter that keeps every feature row the loop hands to it."""

    def reset(self) -> None:
        super().reset()
        self.seen = []

    def observe_features(self, x) -> None:
        super().observe_features(x)
        self.seen.append(np.array(x))


# ------------------------------------------------------------------------------ inputs


def test_it_wraps_an_eagle_drafter_and_checks_its_budget(target, params):
    eagle = EagleDrafter(target, params)
    with pytest.raises(TypeError, match="grows an EagleDrafter's tree"):
        EagleTreeDrafter(object())
    for name in ("max_nodes", "depth", "top"):
        with pytest.raises(ValueError, match=name):
            EagleTreeDrafter(eagle, **{name: 0})
    d = EagleTreeDrafter(eagle)
    assert (d.max_nodes, d.depth, d.top) == (16, 6, 4)
    assert d.cache is eagle.cache and d.feature_layers == (2,)
    assert (d.n_vocab, d.n_ctx) == (16, 64)


# ------------------------------------------------------------------------------ its trees


def hand_confidence(target, params, context, drafts) -> np.ndarray:
    # the drafter's T = 1 distribution after context + drafts, from the definition, uncached
    wte, W, b = target.params["wte.weight"], params["fc.weight"], params["fc.bias"]
    block = EagleDrafter(target, params).block_model
    f = target.residual(np.asarray(context[:-1]))
    g = [np.concatenate([wte[context[t + 1]], f[t]]) @ W + b for t in range(len(context) - 1)]
    for d in [*drafts, None]:
        G = np.stack(g)
        f_hat = block.blocks(G, None, causal_placement(0, len(G)), 0, 1)[-1]
        if d is not None:
            g.append(np.concatenate([wte[d], f_hat]) @ W + b)
    return softmax(target.logits(target.norm(f_hat[None], "ln_f"))[0])


def test_the_tree_holds_the_likeliest_paths_as_computed_by_hand(target, params):
    """depth 2, top 2, 3 nodes: the root's two likeliest tokens a, b; each offers its two
    likeliest; of those 6 candidates the 3 of largest path confidence, breadth first."""
    context = np.array([1, 5, 2, 5, 3])
    drafter = EagleTreeDrafter(EagleDrafter(target, params), max_nodes=3, depth=2, top=2)
    start(target, drafter, context)
    tree = drafter.propose_tree(context, 2, 99, SamplingParams(1.0), np.random.default_rng(0))
    c0 = hand_confidence(target, params, context, [])
    cands = []  # (score, creation id, token, parent creation id)
    for a in np.argsort(-c0, kind="stable")[:2]:
        cands.append((float(c0[a]), len(cands) + 1, int(a), 0))
    for _, i, a, _ in list(cands):
        c1 = hand_confidence(target, params, context, [a])
        for t in np.argsort(-c1, kind="stable")[:2]:
            cands.append((float(c0[a] * c1[t]), len(cands) + 1, int(t), i))
    kept = sorted(sorted(cands, key=lambda c: (-c[0], c[1]))[:3], key=lambda c: c[1])
    new_id = {0: 0} | {c[1]: j + 1 for j, c in enumerate(kept)}
    assert tree.tokens.tolist() == [3, *(c[2] for c in kept)]
    assert tree.parents.tolist() == [-1, *(new_id[c[3]] for c in kept)]


@pytest.mark.parametrize("max_nodes, depth, top", [(16, 6, 4), (5, 3, 2), (1, 4, 3), (12, 2, 8)])
def test_trees_are_point_masses_within_the_budget(target, params3, max_nodes, depth, top):
    """Round after round: a valid tree (check_tree) of one-hot candidates, at most max_nodes
    of them (and at most the room the loop offers), depth <= depth, <= top children a node,
    siblings in decreasing confidence (the kept ones a prefix of what their parent offered)."""
    drafter = EagleTreeDrafter(
        EagleDrafter(target, params3, LAYERS3), max_nodes=max_nodes, depth=depth, top=top
    )
    rng = np.random.default_rng(7)
    s = SamplingParams(1.0)
    context = np.array([1, 5, 2, 5, 3])
    cache = start(target, drafter, context)
    for r in range(8):
        room = 3 if r == 2 else 99  # once, the loop has room for the root and 2 nodes only
        tree = drafter.propose_tree(context, depth, room, s, rng)
        check_tree(tree, 16)
        assert tree.draws == (ROOT,) + (POINT,) * (tree.n_nodes - 1)
        assert tree.n_nodes - 1 <= min(max_nodes, room - 1) and tree.depth <= depth
        for node in range(tree.n_nodes):
            assert len(tree.children(node)) <= top
        drafter.rollback()
        assert drafter.cache.pending == 0
        rnd = tree_round(target, cache, drafter, context, depth, s, rng)
        context = np.concatenate([context, rnd.result.emitted(rnd.tree)])


def test_no_feature_yet_means_only_the_root(target, params):
    drafter = make(target, params, False)
    start(target, drafter, [4])
    tree = drafter.propose_tree(np.array([4]), 3, 99, GREEDY, np.random.default_rng(0))
    assert tree.n_nodes == 1 and tree.tokens.tolist() == [4]


# ------------------------------------------------------------------------------ the loop


@pytest.mark.parametrize("eagle3", [False, True])
@pytest.mark.parametrize("max_nodes, depth, top", [(16, 6, 4), (3, 2, 2), (1, 1, 1), (8, 4, 3)])
def test_greedy_dynamic_trees_equal_generate(
    target, params, params3, eagle3, max_nodes, depth, top
):
    for prompt in (np.array([4, 4, 2, 9, 1]), np.array([3])):
        ar = generate(
            target, prompt, max_new_tokens=16, rng=np.random.default_rng(0), sampling=GREEDY
        )
        drafter = make(
            target, pick(params, params3, eagle3), eagle3, max_nodes=max_nodes, depth=depth, top=top
        )
        out = tree_speculative_generate(
            target,
            drafter,
            prompt,
            max_new_tokens=16,
            rng=np.random.default_rng(0),
            sampling=GREEDY,
        )
        assert out.tokens == list(ar)
        assert max(out.stats.nodes_per_round) <= max_nodes


@pytest.mark.parametrize("eagle3", [False, True])
@pytest.mark.parametrize("sampling", [SamplingParams(1.0), GREEDY])
def test_after_every_round_the_cache_and_features_are_a_fresh_prefills(
    target, params, params3, eagle3, sampling
):
    """The KV invariant: the drafter's committed slots equal those of a new drafter given the
    same history (the target's features of context[:-1] by a plain forward, then prefill);
    every feature handed over is the target's, for the catch-up and the accepted path in
    order (gathered out of the tree pass's order), every layer the drafter reads."""
    p = pick(params, params3, eagle3)
    layers = LAYERS3 if eagle3 else None
    drafter = Recording(EagleDrafter(target, p, layers), max_nodes=10, depth=4, top=3)
    rng = np.random.default_rng(11)
    context = np.array([1, 5, 2, 5, 3])
    cache = start(target, drafter, context)
    longest, off_first = 0, False
    for _ in range(20):
        rnd = tree_round(target, cache, drafter, context, 4, sampling, rng)
        path = rnd.result.path
        longest = max(longest, len(path))
        off_first |= any(rnd.tree.children(int(rnd.tree.parents[a]))[0] != a for a in path)
        context = np.concatenate([context, rnd.result.emitted(rnd.tree)])
        true = target.layer_features(context[:-1], layers=layers)  # plain, uncached
        np.testing.assert_allclose(np.concatenate(drafter.seen), true, atol=1e-4)
        eagle = drafter.eagle
        assert eagle.n_known == cache.length == len(context) - 1
        np.testing.assert_allclose(eagle.features[: eagle.n_known], reduced(p, true), atol=1e-4)
        fresh = EagleDrafter(target, p, layers)
        fresh.observe_features(true)
        fresh.prefill(context[:-1])
        dc = eagle.cache
        assert dc.pending == 0 and 0 < dc.length <= fresh.cache.length
        assert rnd.draft_cache.after == dc.length
        for got, want in zip(dc.committed(), fresh.cache.committed(), strict=True):
            np.testing.assert_allclose(got, want[:, :, : dc.length], atol=1e-5)
    if not sampling.greedy:  # the walk left the first child at least once (a kept node
        assert off_first  # whose row is not where a chain would have it); deeper for EAGLE-1
        assert longest >= (1 if eagle3 else 2)


def test_a_tree_drafter_that_reads_no_features_is_handed_none(target):
    """Rounds gather (and compute) features only for a drafter that declares feature_layers;
    the prefill hands its plain pass's features to every drafter, as the chain's does."""

    class Counting(ModelTreeDrafter):
        calls = 0

        def observe_features(self, x) -> None:
            Counting.calls += 1

    prompt = np.array([4, 4, 2, 9, 1])
    ar = generate(target, prompt, max_new_tokens=8, rng=np.random.default_rng(0), sampling=GREEDY)
    out = tree_speculative_generate(
        target,
        Counting(target, TreeShape.of_widths((2, 2))),
        prompt,
        max_new_tokens=8,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
    )
    assert out.tokens == list(ar) and out.stats.rounds > 1
    assert Counting.calls == 1  # the prefill's


# ------------------------------------------------------------------------------ the law


def target_law(target, prompt, n, sampling) -> dict:
    # {tokens: probability} of n tokens of the target's own autoregressive law, float64
    law = {}

    def extend(out, w):
        if len(out) == n:
            law[out] = law.get(out, 0.0) + w
            return
        logits = target.forward(np.array(list(prompt) + list(out)))[-1].astype(np.float64)
        row = probabilities(logits, sampling)
        for y in np.flatnonzero(row > 0):
            extend(out + (int(y),), w * float(row[y]))

    extend((), 1.0)
    return law


def tree_loop_law(target, params, layers, prompt, n, sampling, **kw) -> dict:
    # {tokens: probability} of tree_speculative_generate's first n tokens, exactly: every
    # round's tree is a function of the committed tokens (point masses, chosen by
    # confidence), verify_tree_law gives each round's outcomes, and the state at every
    # context is a fresh prefill's (the KV invariant tested above)
    law = {}

    def extend(context, out, w):
        remaining = n - len(out)
        if remaining == 0:
            law[out] = law.get(out, 0.0) + w
            return
        drafter = EagleTreeDrafter(EagleDrafter(target, params, layers), **kw)
        cache = start(target, drafter, context)
        depth = min(drafter.depth, remaining - 1)
        tree = drafter.propose_tree(context, depth, 99, sampling, np.random.default_rng(0))
        p, _, _ = tree_verification_pass(target, cache, context, tree, sampling)
        for (path, token), prob in verify_tree_law(p, tree).items():
            emitted = (*tree.path_tokens(path), token)[:remaining]
            extend(np.concatenate([context, emitted]), out + emitted, w * prob)

    extend(np.asarray(prompt), (), 1.0)
    return law


@pytest.mark.parametrize("sampling", [SamplingParams(1.0), SamplingParams(0.7, top_k=3)])
def test_the_emitted_tokens_follow_the_targets_law_exactly(sampling):
    """On a 5-token vocabulary, 3 tokens: the law of the dynamic-tree loop (EAGLE-3 features)
    equals the target's own autoregressive law, outcome by outcome."""
    cfg = GPTConfig(n_vocab=5, n_ctx=16, n_embd=8, n_head=2, n_layer=2)
    tgt = GPT(cfg, init_params(cfg, np.random.default_rng(3), std=0.8))
    eagle = init_eagle_params(cfg, np.random.default_rng(4), std=0.8, feature_layers=LAYERS3)
    prompt = [1, 3, 2]
    got = tree_loop_law(tgt, eagle, LAYERS3, prompt, 3, sampling, max_nodes=4, depth=2, top=2)
    want = target_law(tgt, prompt, 3, sampling)
    assert abs(sum(got.values()) - 1) < 1e-6  # float32 rows
    assert set(got) <= set(want)
    for tokens, prob in want.items():
        assert abs(got.get(tokens, 0.0) - prob) < 1e-5, tokens

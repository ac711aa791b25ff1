"""The EAGLE drafter (reference/eagle.py): its inputs, its alignment, its cache, its output.
The exact law is in tests/distribution/test_self_drafting_law.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from reference import EagleDrafter, ModelDrafter, generate, speculative_generate
from reference.batch import speculative_generate_batch
from reference.config import GPTConfig
from reference.eagle import eagle_param_shapes, init_eagle_params
from reference.lookup import HybridDrafter, LookupDrafter
from reference.model import GPT, causal_placement, init_params
from reference.sampling import SamplingParams, probabilities
from reference.speculative import prefill, speculative_round
from reference.weights import CheckpointError, load_eagle, load_gpt2, write_safetensors

GREEDY = SamplingParams(temperature=0.0)
SAMPLINGS = [
    SamplingParams(1.0),
    SamplingParams(0.7, top_k=3),
    SamplingParams(1.3, top_p=0.8),
    SamplingParams(0.9, top_k=5, top_p=0.9),
]


@pytest.fixture(scope="module")
def target() -> GPT:
    cfg = GPTConfig(n_vocab=16, n_ctx=64, n_embd=16, n_head=2, n_layer=2)
    return GPT(cfg, init_params(cfg, np.random.default_rng(0), std=0.3))


@pytest.fixture(scope="module")
def params(target) -> dict:
    return init_eagle_params(target.config, np.random.default_rng(1), std=0.3)


def start(target, drafter, prompt):
    cache = target.new_cache()
    prefill(target, cache, drafter, np.asarray(prompt))
    return cache


def by_hand(target, params, context, drafts, sampling) -> np.ndarray:
    """q rows from the definition, without the drafter's cache or bookkeeping:
    g(t) = [e(x(t+1)); f(t)] W + b over the committed positions (f: the target's features of
    context[:-1], uncached), then one row per draft with the block's own previous output."""
    wte, W, b = target.params["wte.weight"], params["fc.weight"], params["fc.bias"]
    block = EagleDrafter(target, params).block_model  # the block's weights, used uncached
    f = target.residual(np.asarray(context[:-1]))  # [n-1, C]: f(0..n-2)
    g = [np.concatenate([wte[context[t + 1]], f[t]]) @ W + b for t in range(len(context) - 1)]
    rows = []
    for i in range(len(drafts) + 1):
        G = np.stack(g)
        f_hat = block.blocks(G, None, causal_placement(0, len(G)), 0, 1)[-1]  # f^(n-1+i)
        h = target.norm(f_hat[None], "ln_f")
        rows.append(probabilities(target.logits(h)[0], sampling))
        if i < len(drafts):
            g.append(np.concatenate([wte[drafts[i]], f_hat]) @ W + b)
    return np.stack(rows)


# ------------------------------------------------------------------------------ inputs


def test_random_params_have_the_documented_shapes(target):
    C = target.config.n_embd
    p = init_eagle_params(target.config, np.random.default_rng(0))
    assert p["fc.weight"].shape == (2 * C, C) and p["fc.bias"].shape == (C,)
    assert p["h.0.attn.c_attn.weight"].shape == (C, 3 * C)
    assert set(p) == set(eagle_param_shapes(target.config))
    assert all(v.dtype == np.float32 for v in p.values())


@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda p: p.pop("fc.bias"), ValueError, "missing \\['fc.bias'\\]"),
        (lambda p: p.update({"h.1.ln_1.weight": p["h.0.ln_1.weight"]}), ValueError, "unknown"),
        (lambda p: p.update({"fc.weight": p["fc.weight"][:-1]}), ValueError, "needs \\(32, 16\\)"),
        (lambda p: p["h.0.ln_2.bias"].__setitem__(0, np.nan), ValueError, "non-finite"),
    ],
)
def test_malformed_params_are_refused(target, params, change, error, message):
    bad = {name: value.copy() for name, value in params.items()}
    change(bad)
    with pytest.raises(error, match=message):
        EagleDrafter(target, bad)


def test_params_that_are_not_a_dict_are_refused(target, params):
    with pytest.raises(TypeError, match="dict of arrays"):
        EagleDrafter(target, list(params.values()))


def test_features_of_the_wrong_width_or_count_are_refused(target, params):
    drafter = EagleDrafter(target, params)
    with pytest.raises(ValueError, match="shape \\[m, 16\\]"):
        drafter.observe_features(np.zeros((2, 8)))
    with pytest.raises(ValueError, match="exceed n_ctx"):
        drafter.observe_features(np.zeros((65, 16)))
    drafter.observe_features(np.zeros((2, 16)))  # features of 2 positions: a context of 3
    with pytest.raises(ValueError, match="features of 2 positions.*context of 5 tokens"):
        drafter.propose(np.arange(5), 2, GREEDY, np.random.default_rng(0))


# ------------------------------------------------------------------------------ alignment


def test_the_drafters_q_rows_are_those_of_the_definition_round_after_round(target, params):
    """At prefill and after rounds that reject and rounds that accept everything, the fused
    input at position t pairs e(x(t+1)) with f(t), and draft steps feed the drafter's own
    features: every q row equals the hand-built one, for every sampling transform."""
    for sampling in SAMPLINGS:
        drafter = EagleDrafter(target, params)
        rng = np.random.default_rng(3)
        context = np.array([1, 5, 2, 5, 3])
        cache = start(target, drafter, context)
        for _ in range(6):
            rnd = speculative_round(target, cache, drafter, context, 3, sampling, rng)
            want = by_hand(target, params, context, rnd.draft.tokens[:-1], sampling)
            np.testing.assert_allclose(rnd.draft.q, want, atol=1e-5)
            context = np.concatenate([context, rnd.verification.emitted(rnd.draft.tokens)])


def test_the_fused_input_pairs_the_next_token_with_this_positions_feature(target, params):
    """The alignment on a two-token prompt, written out: one fused row g(0) =
    [e(x1); f(0)] W + b, whose block output is f^(1), whose row is q_1."""
    drafter = EagleDrafter(target, params)
    x0, x1 = 7, 2
    start(target, drafter, [x0, x1])
    f0 = target.residual(np.array([x0]))[0]
    g0 = np.concatenate([target.params["wte.weight"][x1], f0]) @ params["fc.weight"]
    g0 = g0 + params["fc.bias"]
    f1 = drafter.block_model.blocks(g0[None], None, causal_placement(0, 1), 0, 1)[0]
    q1 = probabilities(target.logits(target.norm(f1[None], "ln_f"))[0], SamplingParams(1.0))
    draft = drafter.propose(np.array([x0, x1]), 1, SamplingParams(1.0), np.random.default_rng(0))
    np.testing.assert_allclose(draft.q[0], q1, atol=1e-6)
    # the swapped pairing (e(x0) with f(0)) is a different row: the test can tell
    g_wrong = np.concatenate([target.params["wte.weight"][x0], f0]) @ params["fc.weight"]
    f_wrong = drafter.block_model.blocks(
        (g_wrong + params["fc.bias"])[None], None, causal_placement(0, 1), 0, 1
    )[0]
    q_wrong = probabilities(target.logits(target.norm(f_wrong[None], "ln_f"))[0], SamplingParams())
    assert np.abs(q_wrong - q1).max() > 1e-3


def test_q_rows_are_distributions_that_respect_the_sampling_transform(target, params):
    drafter = EagleDrafter(target, params)
    context = np.array([3, 1, 4, 1, 5])
    for sampling in [*SAMPLINGS, GREEDY]:
        drafter.reset()
        start(target, drafter, context)
        draft = drafter.propose(context, 4, sampling, np.random.default_rng(1))
        assert draft.q.shape == (4, 16) and draft.q.dtype == np.float32
        np.testing.assert_allclose(draft.q.sum(axis=1), 1.0, atol=1e-5)
        assert np.all(draft.q >= 0)
        assert np.all(draft.q[np.arange(4), draft.tokens] > 0)
        support = (draft.q > 0).sum(axis=1)
        if sampling.greedy:
            assert np.all(support == 1)
            assert np.array_equal(draft.tokens, draft.q.argmax(axis=1))
        if sampling.top_k is not None:
            assert np.all(support <= sampling.top_k)
        if sampling.top_p is not None:  # the fewest most likely tokens reaching top_p
            plain = SamplingParams(sampling.temperature, top_k=sampling.top_k)
            before = by_hand(target, params, context, draft.tokens[:-1], plain).astype(np.float64)
            for row, q in zip(before, draft.q, strict=True):
                order = np.argsort(-row)
                n_kept = int((q > 0).sum())
                assert set(np.flatnonzero(q > 0)) == set(order[:n_kept])
                top = np.cumsum(row[order] / row.sum())
                assert (n_kept == 1 or top[n_kept - 2] < sampling.top_p) and (
                    top[n_kept - 1] >= sampling.top_p - 1e-6
                )


def test_nothing_is_drafted_before_a_feature_is_known(target, params):
    drafter = EagleDrafter(target, params)
    start(target, drafter, [4])  # a one-token prompt: no target row yet
    draft = drafter.propose(np.array([4]), 3, SamplingParams(1.0), np.random.default_rng(0))
    assert draft.tokens.shape == (0,) and draft.q.shape == (0, 16)


# ------------------------------------------------------------------------------ the loop


@pytest.mark.parametrize("k", [1, 2, 4])
def test_greedy_eagle_equals_autoregressive(target, params, k):
    prompt = np.array([4, 4, 2, 9, 1])
    ar = generate(target, prompt, max_new_tokens=20, rng=np.random.default_rng(0), sampling=GREEDY)
    out = speculative_generate(
        target,
        EagleDrafter(target, params),
        prompt,
        k=k,
        max_new_tokens=20,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
    )
    assert out.tokens == list(ar)


def test_greedy_eagle_in_a_batch_equals_autoregressive(target, params):
    """The batched loop hands every row's features over too (ragged prompts, one token long
    included)."""
    prompts = [np.array([4, 4, 2, 9, 1]), np.array([3]), np.array([7, 7])]
    drafters = [EagleDrafter(target, params) for _ in prompts]
    out = speculative_generate_batch(
        target,
        drafters,
        prompts,
        k=3,
        max_new_tokens=12,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
    )
    for prompt, result in zip(prompts, out, strict=True):
        ar = generate(
            target, prompt, max_new_tokens=12, rng=np.random.default_rng(0), sampling=GREEDY
        )
        assert result.tokens == list(ar)


def test_greedy_lookup_with_an_eagle_fallback_equals_autoregressive(target, params):
    """Lookup rounds leave the EAGLE cache alone; the features still arrive (the hybrid passes
    them on), and the next EAGLE round catches up over every position it missed."""

    prompt = np.array([1, 2, 3, 1, 2, 3, 1, 2])
    ar = generate(target, prompt, max_new_tokens=20, rng=np.random.default_rng(0), sampling=GREEDY)
    drafter = HybridDrafter(LookupDrafter(16, 64, 3, 1), EagleDrafter(target, params))
    out = speculative_generate(
        target,
        drafter,
        prompt,
        k=3,
        max_new_tokens=20,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
    )
    assert out.tokens == list(ar)


def fresh_prefill(target, params, context) -> EagleDrafter:
    # a new drafter given the same history as the loop gives it: the target's features of
    # context[:-1], then prefill(context[:-1])
    drafter = EagleDrafter(target, params)
    drafter.observe_features(target.residual(np.asarray(context[:-1])))
    drafter.prefill(np.asarray(context[:-1]))
    return drafter


def test_after_every_round_the_drafters_cache_equals_a_fresh_prefill(target, params):
    """The KV invariant, through rounds that reject and rounds that accept everything: the
    committed slots hold exactly the catch-up rows of true features, never a draft row."""
    drafter = EagleDrafter(target, params)
    rng = np.random.default_rng(5)
    s = SamplingParams(temperature=0.9)
    context = np.array([1, 5, 2, 5, 3])
    cache = start(target, drafter, context)
    seen_full = seen_reject = False
    for _ in range(25):
        rnd = speculative_round(target, cache, drafter, context, 3, s, rng)
        v = rnd.verification
        seen_full |= v.accepted == rnd.k
        seen_reject |= v.accepted < rnd.k
        context = np.concatenate([context, v.emitted(rnd.draft.tokens)])
        # the features handed over are the target's, one per committed target slot
        assert drafter.n_known == cache.length == len(context) - 1
        np.testing.assert_allclose(
            drafter.features[: drafter.n_known], target.residual(context[:-1]), atol=1e-4
        )
        dc = drafter.cache
        assert dc.pending == 0 and dc.length == rnd.draft_cache.after
        fresh = fresh_prefill(target, params, context).cache
        assert fresh.length >= dc.length
        for got, want in zip(dc.committed(), fresh.committed(), strict=True):
            np.testing.assert_allclose(got, want[:, :, : dc.length], atol=1e-5)
    assert seen_full and seen_reject


def test_a_refused_proposal_leaves_the_cache_as_it_was(target, params):
    drafter = EagleDrafter(target, params)
    context = np.array([1, 5, 2, 5, 3])
    start(target, drafter, context)
    before = drafter.cache.length, drafter.n_known
    with pytest.raises(ValueError, match="slots"):
        drafter.propose(context, 70, GREEDY, np.random.default_rng(0))
    assert (drafter.cache.length, drafter.n_known, drafter.cache.pending) == (*before, 0)


# ------------------------------------------------------------------------------ EAGLE-3


LAYERS3 = (1, 2)  # the target's residual stream after block 1 and after block 2 (the top)


@pytest.fixture(scope="module")
def params3(target) -> dict:
    return init_eagle_params(
        target.config, np.random.default_rng(2), std=0.3, feature_layers=LAYERS3
    )


def reduced(params, x: np.ndarray) -> np.ndarray:
    # x [m, len(layers) C] -> g_true [m, C] (the identity for EAGLE-1)
    if "reduce.weight" not in params:
        return x
    return x @ params["reduce.weight"] + params["reduce.bias"]


def by_hand3(target, params, layers, context, drafts, sampling) -> np.ndarray:
    """by_hand for any feature layers: the features of context[:-1] from an uncached
    forward that reads each block's output, reduced to C, then the same rows."""
    wte, W, b = target.params["wte.weight"], params["fc.weight"], params["fc.bias"]
    block = EagleDrafter(target, params, layers).block_model
    x = target.params["wte.weight"][context[:-1]] + target.params["wpe.weight"][: len(context) - 1]
    spans, first = [], 0
    for stop in layers:  # blocks written out one by one, no layer_features
        for i in range(first, stop):
            x = target.block(x, i, None, causal_placement(0, len(x)))
        spans.append(x)
        first = stop
    f = reduced(params, np.concatenate(spans, axis=1))  # [n-1, C]
    g = [np.concatenate([wte[context[t + 1]], f[t]]) @ W + b for t in range(len(context) - 1)]
    rows = []
    for i in range(len(drafts) + 1):
        G = np.stack(g)
        f_hat = block.blocks(G, None, causal_placement(0, len(G)), 0, 1)[-1]
        rows.append(probabilities(target.logits(target.norm(f_hat[None], "ln_f"))[0], sampling))
        if i < len(drafts):
            g.append(np.concatenate([wte[drafts[i]], f_hat]) @ W + b)
    return np.stack(rows)


@pytest.mark.parametrize(
    "layers, message",
    [
        ((), "non-empty sequence"),
        (2, "non-empty sequence"),
        ("2", "non-empty sequence"),
        ((0, 2), "feature layer 0 is not a block count.*1..2"),
        ((1, 3), "feature layer 3 is not a block count"),
        ((2, 2), "strictly increasing"),
        ((1,), "last feature layer must be the top, 2"),
        ((1.0, 2), "must be ints"),
        ((True, 2), "must be ints"),
    ],
)
def test_bad_feature_layers_are_refused_saying_why(target, params, layers, message):
    with pytest.raises(ValueError, match=message):
        EagleDrafter(target, params, layers)
    with pytest.raises(ValueError, match=message):
        target.layer_features(np.array([1, 2]), layers=layers)
    with pytest.raises(ValueError, match=message):
        eagle_param_shapes(target.config, layers)


def test_the_reduction_is_checked_against_the_feature_layers(target, params, params3):
    C = target.config.n_embd
    assert params3["reduce.weight"].shape == (2 * C, C) and params3["reduce.bias"].shape == (C,)
    assert "reduce.weight" not in params  # EAGLE-1 has none
    with pytest.raises(ValueError, match="missing \\['reduce.bias', 'reduce.weight'\\].*needs"):
        EagleDrafter(target, params, LAYERS3)
    with pytest.raises(ValueError, match="unknown \\['reduce.bias', 'reduce.weight'\\].*EAGLE-3"):
        EagleDrafter(target, params3)
    bad = dict(params3, **{"reduce.weight": params3["reduce.weight"][:C]})
    with pytest.raises(ValueError, match="'reduce.weight' has shape \\(16, 16\\).*\\(32, 16\\)"):
        EagleDrafter(target, bad, LAYERS3)
    three = init_eagle_params(
        GPTConfig(n_vocab=16, n_ctx=64, n_embd=16, n_head=2, n_layer=3),
        np.random.default_rng(0),
        feature_layers=(1, 2, 3),
    )
    assert three["reduce.weight"].shape == (3 * C, C)


def test_layer_features_are_each_blocks_output_side_by_side(target):
    """GPT.layer_features: the default is `residual`; (1, 2) is block 0's output then the
    top; with a cache it writes exactly what a plain forward writes."""
    tokens = np.array([3, 1, 4, 1, 5])
    top = target.residual(tokens)
    np.testing.assert_array_equal(target.layer_features(tokens), top)
    np.testing.assert_array_equal(target.layer_features(tokens, layers=(2,)), top)
    x = target.params["wte.weight"][tokens] + target.params["wpe.weight"][:5]
    low = target.block(x, 0, None, causal_placement(0, 5))
    both = target.layer_features(tokens, layers=(1, 2))
    assert both.shape == (5, 32)
    np.testing.assert_allclose(both[:, :16], low, atol=1e-6)
    np.testing.assert_allclose(both[:, 16:], top, atol=1e-5)
    # through a cache: two calls, the second after the first's slots, as a round feeds them
    cache, plain = target.new_cache(), target.new_cache()
    a = target.layer_features(tokens[:3], cache, layers=(1, 2))
    b = target.layer_features(tokens[3:], cache, layers=(1, 2))
    target.forward(tokens, plain)
    np.testing.assert_allclose(np.concatenate([a, b]), both, atol=1e-5)
    assert cache.pending == plain.pending == 5
    np.testing.assert_allclose(cache.k, plain.k, atol=1e-6)
    np.testing.assert_allclose(cache.v, plain.v, atol=1e-6)


def test_eagle3_features_of_the_wrong_width_are_refused(target, params3):
    drafter = EagleDrafter(target, params3, LAYERS3)
    assert drafter.feature_layers == LAYERS3
    with pytest.raises(ValueError, match="shape \\[m, 32\\] \\(2 feature layer\\(s\\) \\(1, 2\\)"):
        drafter.observe_features(np.zeros((2, 16)))
    before = drafter.features.copy()
    with pytest.raises(ValueError):
        drafter.observe_features(np.zeros((70, 32)))
    assert drafter.n_known == 0 and np.array_equal(drafter.features, before)


def test_eagle3_q_rows_are_those_of_the_definition_round_after_round(target, params3):
    """The reduced features stand where f(t) stood: every q row equals the hand-built one,
    whose features come from the blocks written out one by one."""
    for sampling in SAMPLINGS[:2]:
        drafter = EagleDrafter(target, params3, LAYERS3)
        rng = np.random.default_rng(3)
        context = np.array([1, 5, 2, 5, 3])
        cache = start(target, drafter, context)
        for _ in range(5):
            rnd = speculative_round(target, cache, drafter, context, 3, sampling, rng)
            want = by_hand3(target, params3, LAYERS3, context, rnd.draft.tokens[:-1], sampling)
            np.testing.assert_allclose(rnd.draft.q, want, atol=1e-5)
            context = np.concatenate([context, rnd.verification.emitted(rnd.draft.tokens)])


@pytest.mark.parametrize("k", [1, 3])
def test_greedy_eagle3_equals_autoregressive(target, params3, k):
    prompt = np.array([4, 4, 2, 9, 1])
    ar = generate(target, prompt, max_new_tokens=20, rng=np.random.default_rng(0), sampling=GREEDY)
    out = speculative_generate(
        target,
        EagleDrafter(target, params3, LAYERS3),
        prompt,
        k=k,
        max_new_tokens=20,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
    )
    assert out.tokens == list(ar)


class Recording(EagleDrafter):
    """An EagleDrafter that keeps every feature row handed to it (full width)."""

    def reset(self) -> None:
        super().reset()
        self.seen = []

    def observe_features(self, x) -> None:
        super().observe_features(x)
        self.seen.append(np.array(x))


def test_a_mixed_batch_hands_each_drafter_its_own_layers(target, params, params3):
    """EAGLE-3, EAGLE-1 and a draft model in one batch: one pass computes the union of the
    layers; each drafter gets exactly the features a plain forward of its committed tokens
    gives for its own layers, and each row's tokens are generate's."""

    prompts = [np.array([4, 4, 2, 9, 1]), np.array([3, 8]), np.array([7, 7, 1])]
    drafters = [
        Recording(target, params3, LAYERS3),
        Recording(target, params),
        ModelDrafter(target),
    ]
    out = speculative_generate_batch(
        target,
        drafters,
        prompts,
        k=3,
        max_new_tokens=10,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
    )
    for prompt, result, drafter in zip(prompts, out, drafters, strict=True):
        ar = generate(
            target, prompt, max_new_tokens=10, rng=np.random.default_rng(0), sampling=GREEDY
        )
        assert result.tokens == list(ar)
        if isinstance(drafter, Recording):
            context = np.concatenate([prompt, result.tokens])
            want = target.layer_features(context[:-1], layers=drafter.feature_layers)
            np.testing.assert_allclose(np.concatenate(drafter.seen), want, atol=1e-4)


def test_greedy_lookup_with_an_eagle3_fallback_equals_autoregressive(target, params3):

    drafter = HybridDrafter(LookupDrafter(16, 64, 3, 1), EagleDrafter(target, params3, LAYERS3))
    assert drafter.feature_layers == LAYERS3
    # a fallback that reads no features: the hybrid declares none, the loops compute none
    plain = HybridDrafter(LookupDrafter(16, 64, 3, 1), ModelDrafter(target))
    assert plain.feature_layers is None
    prompt = np.array([1, 2, 3, 1, 2, 3, 1, 2])
    ar = generate(target, prompt, max_new_tokens=20, rng=np.random.default_rng(0), sampling=GREEDY)
    out = speculative_generate(
        target,
        drafter,
        prompt,
        k=3,
        max_new_tokens=20,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
    )
    assert out.tokens == list(ar)


@pytest.mark.parametrize("eagle3", [False, True])
def test_after_every_round_the_cache_equals_a_fresh_prefill_eagle3_too(
    target, params, params3, eagle3
):
    """The KV invariant for both variants: the committed slots equal those of a new drafter
    given the same history (the target's features of context[:-1], read by a plain forward,
    then prefill), and the features it holds are those features, reduced."""
    p, layers = (params3, LAYERS3) if eagle3 else (params, None)
    drafter = EagleDrafter(target, p, layers)
    rng = np.random.default_rng(5)
    s = SamplingParams(temperature=0.9)
    context = np.array([1, 5, 2, 5, 3])
    cache = start(target, drafter, context)
    for _ in range(15):
        rnd = speculative_round(target, cache, drafter, context, 3, s, rng)
        context = np.concatenate([context, rnd.verification.emitted(rnd.draft.tokens)])
        true = target.layer_features(context[:-1], layers=layers)  # plain, uncached
        np.testing.assert_allclose(drafter.features[: drafter.n_known], reduced(p, true), atol=1e-4)
        fresh = EagleDrafter(target, p, layers)
        fresh.observe_features(true)
        fresh.prefill(context[:-1])
        dc = drafter.cache
        assert dc.pending == 0 and 0 < dc.length <= fresh.cache.length
        for got, want in zip(dc.committed(), fresh.cache.committed(), strict=True):
            np.testing.assert_allclose(got, want[:, :, : dc.length], atol=1e-5)


# ------------------------------------------------------------------------------ loading


def write_eagle(folder, params, layers, dtype=np.float16, **meta) -> None:
    # the two files load_eagle reads, as specdec.training.train_eagle writes them

    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / "eagle.safetensors", {n: v.astype(dtype) for n, v in params.items()})
    info = {"feature_layers": list(layers), "variant": "eagle-3" if len(layers) > 1 else "eagle-1"}
    (folder / "metadata.json").write_text(json.dumps(info | meta))


@pytest.mark.parametrize("eagle3", [False, True])
def test_load_eagle_round_trips_float16_files(target, params, params3, eagle3, tmp_path):

    p, layers = (params3, LAYERS3) if eagle3 else (params, (2,))
    write_eagle(tmp_path / "eagle", p, layers, target="target")
    drafter = load_eagle(tmp_path / "eagle", target)
    assert drafter.feature_layers == layers and drafter.w.dtype == np.float32
    halved = {n: v.astype(np.float16).astype(np.float32) for n, v in p.items()}
    np.testing.assert_array_equal(drafter.w, halved["fc.weight"])
    if eagle3:
        np.testing.assert_array_equal(drafter.reduce[0], halved["reduce.weight"])
    prompt = np.array([4, 4, 2, 9, 1])
    ar = generate(target, prompt, max_new_tokens=12, rng=np.random.default_rng(0), sampling=GREEDY)
    out = speculative_generate(
        target,
        drafter,
        prompt,
        k=3,
        max_new_tokens=12,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
    )
    assert out.tokens == list(ar)
    # the same q rows as a drafter built from the float16-rounded weights
    a, b = EagleDrafter(target, halved, layers), load_eagle(tmp_path / "eagle", target)
    for d in (a, b):
        start(target, d, prompt)
    qa = a.propose(prompt, 3, SamplingParams(1.0), np.random.default_rng(1)).q
    qb = b.propose(prompt, 3, SamplingParams(1.0), np.random.default_rng(1)).q
    np.testing.assert_array_equal(qa, qb)


def test_load_eagle_says_what_is_missing_or_wrong(target, params, params3, tmp_path):

    with pytest.raises(FileNotFoundError, match="eagle.safetensors is missing.*train_eagle"):
        load_eagle(tmp_path / "nothing", target)
    write_eagle(tmp_path / "a", params, (2,))
    (tmp_path / "a" / "metadata.json").unlink()
    with pytest.raises(FileNotFoundError, match="metadata.json is missing.*train_eagle"):
        load_eagle(tmp_path / "a", target)
    write_eagle(tmp_path / "b", params, (2,))
    (tmp_path / "b" / "metadata.json").write_text(json.dumps({"variant": "eagle-1"}))
    with pytest.raises(CheckpointError, match="feature_layers"):
        load_eagle(tmp_path / "b", target)
    write_eagle(tmp_path / "c", params, LAYERS3)  # says EAGLE-3, holds no reduction
    with pytest.raises(CheckpointError, match="does not hold an EAGLE drafter.*reduce"):
        load_eagle(tmp_path / "c", target)
    write_eagle(tmp_path / "d", params3, (1, 5))
    with pytest.raises(CheckpointError, match="feature layer 5"):
        load_eagle(tmp_path / "d", target)


def test_the_shipped_drafter_loads_and_drafts_for_the_bundled_target():
    """models/eagle/ (when trained): it fits the bundled target and greedy equals generate."""

    root = Path(__file__).resolve().parents[2] / "models"
    if not (root / "eagle" / "eagle.safetensors").is_file():
        pytest.skip("models/eagle/ not trained yet (python -m specdec.training.train_eagle)")
    target = load_gpt2(root / "target")
    drafter = load_eagle(root / "eagle", target)
    meta = json.loads((root / "eagle" / "metadata.json").read_text())
    assert list(drafter.feature_layers) == meta["feature_layers"]
    prompt = np.array([100, 101, 102, 32, 61, 32])
    ar = generate(target, prompt, max_new_tokens=8, rng=np.random.default_rng(0), sampling=GREEDY)
    out = speculative_generate(
        target,
        drafter,
        prompt,
        k=3,
        max_new_tokens=8,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
    )
    assert out.tokens == list(ar)

"""The EAGLE drafter (reference/eagle.py): its inputs, its alignment, its cache, its output.
The exact law is in tests/distribution/test_self_drafting_law.py."""

from __future__ import annotations

import numpy as np
import pytest

from reference import EagleDrafter, generate, speculative_generate
from reference.batch import speculative_generate_batch
from reference.config import GPTConfig
from reference.eagle import eagle_param_shapes, init_eagle_params
from reference.model import GPT, causal_placement, init_params
from reference.sampling import SamplingParams, probabilities
from reference.speculative import prefill, speculative_round

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
    from reference.lookup import HybridDrafter, LookupDrafter

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

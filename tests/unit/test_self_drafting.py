"""Drafting with the target itself: early exit (reference/early_exit.py) and extra heads
(reference/heads.py). The laws are in tests/distribution/test_self_drafting_law.py."""

from __future__ import annotations

import numpy as np
import pytest

from reference import generate, speculative_generate
from reference.config import GPTConfig
from reference.early_exit import EarlyExitDrafter, lower_layers
from reference.heads import HeadsDrafter
from reference.model import GPT, init_params
from reference.sampling import SamplingParams
from reference.speculative import prefill, speculative_round, verification_pass
from specdec.standins import random_exit_head as exit_head
from specdec.standins import random_heads

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def target() -> GPT:
    cfg = GPTConfig(n_vocab=16, n_ctx=64, n_embd=32, n_head=2, n_layer=4)
    return GPT(cfg, init_params(cfg, np.random.default_rng(0), std=0.3))


def fresh_cache_of(model: GPT, tokens) -> tuple[np.ndarray, np.ndarray]:
    cache = model.new_cache()
    model.forward(np.asarray(tokens), cache)
    cache.commit(len(tokens))
    return cache.committed()


# ------------------------------------------------------------------------------ early exit


def test_the_lower_model_is_the_targets_own_arrays(target):
    lower = lower_layers(target, 2)
    assert lower.config.n_layer == 2
    assert not any(name.startswith(("h.2.", "h.3.")) for name in lower.params)
    for name, w in lower.params.items():
        assert np.shares_memory(w, target.params[name]), name


def test_an_in_place_edit_of_the_target_reaches_the_drafter(target):
    cfg = target.config
    model = GPT(cfg, {n: w.copy() for n, w in target.params.items()})
    drafter = EarlyExitDrafter(model, 2)
    prompt = np.array([3, 1, 4, 1, 5])
    before = drafter.step(prompt)
    model.params["h.0.mlp.c_fc.weight"] *= -1.0
    drafter.reset()
    after = drafter.step(prompt)
    assert not np.allclose(before, after)


@pytest.mark.parametrize("n_layer", [1, 2, 3])
@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("trained", [False, True])
def test_greedy_early_exit_equals_autoregressive(target, n_layer, k, trained):
    head = exit_head(target.config.n_embd, seed=n_layer) if trained else None
    prompt = np.array([1, 2, 3, 4, 5])
    ar = generate(target, prompt, max_new_tokens=25, rng=np.random.default_rng(0), sampling=GREEDY)
    drafter = EarlyExitDrafter(target, n_layer, head)
    out = speculative_generate(
        target,
        drafter,
        prompt,
        k=k,
        max_new_tokens=25,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
    )
    assert out.tokens == list(ar)


def start_of_run(target, drafter, prompt):
    cache = target.new_cache()
    prefill(target, cache, drafter, np.asarray(prompt))
    return cache


def test_reusing_the_drafters_rows_gives_the_logits_of_recomputation(target):
    """The verification pass that starts the drafted rows at layer L' equals the plain one:
    same p rows, same hidden rows, same K/V written into the target cache (all layers)."""
    drafter = EarlyExitDrafter(target, 2, exit_head(target.config.n_embd, 7))
    context = np.array([2, 7, 1, 8, 2, 8])
    s = SamplingParams(temperature=1.0)
    for k in (1, 2, 5):
        shared_cache = start_of_run(target, drafter, context)
        plain_cache = start_of_run(target, EarlyExitDrafter(target, 2), context)
        draft = drafter.propose(context, k, s, np.random.default_rng(k))
        assert draft.shared is not None and len(draft.shared.hidden) == k  # catch-up + k-1
        p1, n1, h1 = verification_pass(target, shared_cache, context, draft.tokens, s, draft.shared)
        p0, n0, h0 = verification_pass(target, plain_cache, context, draft.tokens, s)
        assert n1 == n0 == 1
        np.testing.assert_allclose(p1, p0, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(h1, h0, rtol=1e-4, atol=1e-5)
        end = plain_cache.end
        assert shared_cache.end == end
        np.testing.assert_allclose(shared_cache.k[:, :, :end], plain_cache.k[:, :, :end], atol=1e-5)
        np.testing.assert_allclose(shared_cache.v[:, :, :end], plain_cache.v[:, :, :end], atol=1e-5)


def test_the_verification_pass_really_skips_the_lower_layers(target, monkeypatch):
    """With k drafts, blocks 0..L'-1 run on ONE row (x_k, never fed to the drafter); blocks
    L'..L-1 on all k+1 rows. Without sharing, every block runs on k+1 rows."""
    L1, k = 2, 4
    drafter = EarlyExitDrafter(target, L1)
    context = np.array([3, 1, 4, 1, 5, 9])
    cache = start_of_run(target, drafter, context)
    draft = drafter.propose(context, k, GREEDY, np.random.default_rng(0))
    seen: list[tuple[int, int]] = []
    block = type(target).block

    def spy(self, x, i, cache, start):
        if self is target:
            seen.append((i, x.shape[0]))
        return block(self, x, i, cache, start)

    monkeypatch.setattr(type(target), "block", spy)
    verification_pass(target, cache, context, draft.tokens, GREEDY, draft.shared)
    assert seen == [(0, 1), (1, 1), (2, k + 1), (3, k + 1)]


def test_after_every_round_both_caches_equal_a_fresh_prefill(target):
    """The invariant, through rounds that reject and rounds that accept everything (then the
    drafter is one token behind the target and the shared rows start earlier)."""
    drafter = EarlyExitDrafter(target, 2, exit_head(target.config.n_embd, 3))
    rng = np.random.default_rng(5)
    s = SamplingParams(temperature=0.9)
    context = np.array([1, 5, 2, 5, 3])
    cache = start_of_run(target, drafter, context)
    seen_full, seen_reject = False, False
    for _ in range(25):
        rnd = speculative_round(target, cache, drafter, context, 3, s, rng)
        v = rnd.verification
        seen_full |= v.accepted == rnd.k
        seen_reject |= v.accepted < rnd.k
        context = np.concatenate([context, v.emitted(rnd.draft.tokens)])
        committed = context[: cache.length]
        assert cache.length == len(context) - 1
        for got, want in zip(cache.committed(), fresh_cache_of(target, committed), strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)
        lower = drafter.model
        dc = drafter.cache
        for got, want in zip(
            dc.committed(), fresh_cache_of(lower, context[: dc.length]), strict=True
        ):
            np.testing.assert_allclose(got, want, atol=1e-5)
    assert seen_full and seen_reject


@pytest.mark.parametrize(
    "n_layer, message", [(0, "n_layer"), (4, "below the target's 4 blocks"), (9, "below")]
)
def test_an_exit_layer_out_of_range_is_refused(target, n_layer, message):
    with pytest.raises(ValueError, match=message):
        EarlyExitDrafter(target, n_layer)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda h: h.pop("exit.ln.bias"), "needs both"),
        (lambda h: h.update({"exit.other": np.zeros(3)}), "unknown exit-head parameter"),
        (lambda h: h.update({"exit.proj.weight": np.zeros((3, 3))}), "has shape"),
        (lambda h: h["exit.ln.weight"].__setitem__(0, np.nan), "non-finite"),
    ],
)
def test_a_malformed_exit_head_is_refused(target, change, message):
    head = exit_head(target.config.n_embd, 0)
    change(head)
    with pytest.raises(ValueError, match=message):
        EarlyExitDrafter(target, 2, head)


def test_rows_shared_by_another_model_are_refused(target):
    """A drafter built on one target cannot lend its rows to another's verification."""
    twin = GPT(target.config, {n: w.copy() for n, w in target.params.items()})
    drafter = EarlyExitDrafter(twin, 2)
    with pytest.raises(ValueError, match="built from the very target"):
        speculative_generate(
            target, drafter, [1, 2, 3], k=2, max_new_tokens=4, rng=np.random.default_rng(0)
        )


# ---------------------------------------------------------------------------- extra heads


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_greedy_heads_equal_autoregressive(target, k):
    prompt = np.array([4, 4, 2, 9, 1])
    ar = generate(target, prompt, max_new_tokens=25, rng=np.random.default_rng(0), sampling=GREEDY)
    drafter = HeadsDrafter(target, random_heads(target.config.n_embd, 3, seed=k))
    out = speculative_generate(
        target,
        drafter,
        prompt,
        k=k,
        max_new_tokens=25,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
    )
    assert out.tokens == list(ar)
    assert max(out.stats.drafted_per_round) == min(k, 3)  # never more drafts than heads


def test_heads_draft_from_the_row_that_scored_the_last_token(target):
    """After prefill and after every round, the drafter holds the target's final hidden state
    at the position before the context's last token: a fresh forward of context[:-1]."""
    drafter = HeadsDrafter(target, random_heads(target.config.n_embd, 2, seed=1))
    rng = np.random.default_rng(2)
    s = SamplingParams(temperature=1.0)
    context = np.array([1, 2, 3])
    cache = start_of_run(target, drafter, context)
    for _ in range(12):
        want = target.norm(target.residual(context[:-1]), "ln_f")[-1]
        np.testing.assert_allclose(drafter.h, want, atol=1e-5)
        rnd = speculative_round(target, cache, drafter, context, 2, s, rng)
        context = np.concatenate([context, rnd.verification.emitted(rnd.draft.tokens)])


def test_heads_draft_nothing_before_they_have_a_state(target):
    """A one-token prompt has no target row yet: round 1 is a plain target step."""
    drafter = HeadsDrafter(target, random_heads(target.config.n_embd, 2, seed=1))
    out = speculative_generate(
        target, drafter, [7], k=2, max_new_tokens=6, rng=np.random.default_rng(0), trace=True
    )
    assert out.stats.drafted_per_round[0] == 0 and out.stats.drafted_per_round[1] > 0


def test_the_heads_q_is_what_the_heads_compute(target):
    """q row i = softmax((h + SiLU(h W_i + b_i)) @ wte^T), written out here."""
    heads = random_heads(target.config.n_embd, 3, seed=4)
    drafter = HeadsDrafter(target, heads)
    h = target.norm(target.residual(np.array([5, 6, 7])), "ln_f")[-1]
    drafter.observe(h)
    draft = drafter.propose(
        np.array([5, 6, 7, 8]), 3, SamplingParams(1.0), np.random.default_rng(0)
    )
    for i in range(3):
        a = h @ heads[f"heads.{i}.weight"] + heads[f"heads.{i}.bias"]
        z = h + a / (1 + np.exp(-a))
        logits = z @ target.params["wte.weight"].T
        want = np.exp(logits - logits.max())
        np.testing.assert_allclose(draft.q[i], want / want.sum(), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize(
    "heads, message",
    [
        ({}, "non-empty"),
        ({"heads.0.weight": np.zeros((32, 32))}, "no gap"),
        ({"heads.1.weight": np.zeros((32, 32)), "heads.1.bias": np.zeros(32)}, "no gap"),
        ({"heads.0.weight": np.zeros((8, 8)), "heads.0.bias": np.zeros(8)}, "target's width"),
        ({"heads.0.weight": np.full((32, 32), np.inf), "heads.0.bias": np.zeros(32)}, "non-finite"),
    ],
)
def test_malformed_heads_are_refused(target, heads, message):
    with pytest.raises(ValueError, match=message):
        HeadsDrafter(target, heads)


def test_a_huge_k_allocates_nothing_huge(target):
    """k = 10**12 drafts what the length allows; the statistics are sized by the run."""
    drafter = EarlyExitDrafter(target, 2)
    out = speculative_generate(
        target, drafter, [1, 2, 3], k=10**12, max_new_tokens=6, rng=np.random.default_rng(0)
    )
    assert len(out.tokens) == 6 and out.stats.k == 10**12
    assert out.stats.reached.shape == (6,) and out.stats.accepted_histogram.shape == (7,)


@pytest.mark.parametrize("min_confidence", [0.3, 0.6, 0.9])
def test_early_exit_with_rounds_that_stop_early(target, min_confidence):
    """A round that stops early fed every draft it proposed: the shared rows then cover
    every row of the verification pass, and blocks 0..L'-1 run on none."""
    drafter = EarlyExitDrafter(target, 2, exit_head(target.config.n_embd, 1), min_confidence)
    prompt = [1, 2, 3]
    want = generate(
        target, prompt, max_new_tokens=30, rng=np.random.default_rng(0), sampling=GREEDY
    )
    out = speculative_generate(
        target,
        drafter,
        prompt,
        k=5,
        max_new_tokens=30,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
    )
    assert out.tokens == list(want)
    assert min(out.stats.drafted_per_round[:-1]) < 5  # some rounds did stop early

"""Bad input: the right exception type, a message that names the argument, and no damage.

Every check must run before anything is written, so a refused call leaves each cache at
its last state: same pointers, same committed slots, same temporary slots.
"""

from __future__ import annotations

import numpy as np
import pytest

from reference import (
    GPTConfig,
    ModelDrafter,
    SamplingParams,
    generate,
    init_params,
    probabilities,
    sample_token,
    speculative_generate,
    verify,
)

from .helpers import assert_unchanged, snapshot

RNG = np.random.default_rng  # every call below gets a fresh, explicit generator

BAD_TOKENS = [
    pytest.param([3, -1], ValueError, "contains id -1", id="negative"),
    pytest.param([3, 16], ValueError, "contains id 16", id="equal-V"),
    pytest.param([3, 99], ValueError, "contains id 99", id="above-V"),
    pytest.param([1.0, 2.0], TypeError, "integer token ids", id="float-list"),
    pytest.param(np.array([1.5]), TypeError, "integer token ids", id="float-array"),
    pytest.param([True, False], TypeError, "integer token ids", id="bool"),
    pytest.param(["a", "b"], TypeError, "integer token ids", id="str-list"),
    pytest.param("ab", TypeError, "sequence of int token ids", id="str"),
    pytest.param([[1, 2], [3, 4]], ValueError, "must be 1-D", id="2-D"),
    pytest.param(np.int64(3), ValueError, "must be 1-D", id="scalar"),
    pytest.param([], ValueError, "must not be empty", id="empty"),
]

BAD_RNGS = [
    pytest.param(0, id="int-seed"),
    pytest.param(np.random.RandomState(0), id="RandomState"),
    pytest.param(None, id="None"),
]

RNG_MESSAGE = r"rng must be a numpy\.random\.Generator"


@pytest.fixture
def drafter(draft):
    """A drafter mid-way through a run: committed slots and temporary slots both present."""
    d = ModelDrafter(draft)
    sp = SamplingParams()
    first = d.propose(np.array([1, 2, 3]), 3, sp, RNG(0))
    d.commit(1)
    context = np.array([1, 2, 3, int(first.tokens[0]), 4])
    d.propose(context, 3, sp, RNG(1))
    assert d.cache.length == 4 and d.cache.pending == 3  # fed [token 4, d1, d2]
    return d


@pytest.fixture
def cache(target):
    """A target cache with 5 committed and 2 temporary slots."""
    c = target.new_cache()
    target.forward([1, 2, 3, 4, 5], c)
    c.commit(5)
    target.forward([6, 7], c)
    return c


def spec(target, drafter, **overrides):
    kwargs = dict(prompt=[1, 2, 3], k=3, max_new_tokens=8, rng=RNG(0))
    kwargs.update(overrides)
    prompt = kwargs.pop("prompt")
    return speculative_generate(target, drafter, prompt, **kwargs)


def gen(target, **overrides):
    kwargs = dict(prompt=[1, 2, 3], max_new_tokens=8, rng=RNG(0))
    kwargs.update(overrides)
    prompt = kwargs.pop("prompt")
    return generate(target, prompt, **kwargs)


# ---------------------------------------------------------------- tokens


@pytest.mark.parametrize("tokens, exc, message", BAD_TOKENS)
def test_forward_refuses_bad_tokens_and_leaves_the_cache(target, cache, tokens, exc, message):
    """model.forward names `tokens`; the cache keeps its committed and temporary slots."""
    snap = snapshot(cache)
    with pytest.raises(exc, match=message) as info:
        target.forward(tokens, cache)
    assert str(info.value).startswith("tokens ")
    assert_unchanged(cache, snap)
    with pytest.raises(exc, match=message):
        target.forward(tokens)  # and without a cache


@pytest.mark.parametrize("tokens, exc, message", BAD_TOKENS)
def test_speculative_generate_refuses_a_bad_prompt(target, drafter, tokens, exc, message):
    """The prompt is checked before any cache is touched, the drafter's included."""
    snap = snapshot(drafter.cache)
    with pytest.raises(exc, match=message) as info:
        spec(target, drafter, prompt=tokens)
    assert str(info.value).startswith("prompt ")
    assert_unchanged(drafter.cache, snap)


@pytest.mark.parametrize("tokens, exc, message", BAD_TOKENS)
def test_generate_refuses_a_bad_prompt(target, tokens, exc, message):
    """Same checks, same words, for the autoregressive baseline."""
    with pytest.raises(exc, match=message) as info:
        gen(target, prompt=tokens)
    assert str(info.value).startswith("prompt ")


@pytest.mark.parametrize("tokens, exc, message", BAD_TOKENS)
def test_drafter_refuses_a_bad_context_and_leaves_its_cache(drafter, tokens, exc, message):
    """ModelDrafter.propose names `context` and writes nothing (not even a rollback)."""
    snap = snapshot(drafter.cache)
    with pytest.raises(exc, match=message) as info:
        drafter.propose(tokens, 2, SamplingParams(), RNG(0))
    assert str(info.value).startswith("context ")
    assert_unchanged(drafter.cache, snap)


# ---------------------------------------------------------------- k, max_new_tokens, lengths


@pytest.mark.parametrize(
    "k, exc, message",
    [
        (0, ValueError, "k must be >= 1, got 0"),
        (-2, ValueError, "k must be >= 1, got -2"),
        (2.0, TypeError, "k must be an int, got float"),
        ("3", TypeError, "k must be an int, got str"),
        (True, TypeError, "k must be an int, got bool"),
        (None, TypeError, "k must be an int, got NoneType"),
    ],
)
def test_speculative_generate_refuses_a_bad_k(target, drafter, k, exc, message):
    """k is a positive int; the drafter's cache is left alone."""
    snap = snapshot(drafter.cache)
    with pytest.raises(exc, match=message):
        spec(target, drafter, k=k)
    assert_unchanged(drafter.cache, snap)


@pytest.mark.parametrize(
    "k, exc, message",
    [(-1, ValueError, "k must be >= 0, got -1"), (2.5, TypeError, "k must be an int")],
)
def test_drafter_refuses_a_bad_k_and_leaves_its_cache(drafter, k, exc, message):
    """propose(k) takes 0 (the bonus-only round) and up; nothing else."""
    snap = snapshot(drafter.cache)
    with pytest.raises(exc, match=message):
        drafter.propose(np.array([1, 2, 3, 4, 5, 6]), k, SamplingParams(), RNG(0))
    assert_unchanged(drafter.cache, snap)


@pytest.mark.parametrize(
    "n, exc, message",
    [
        (0, ValueError, "max_new_tokens must be >= 1, got 0"),
        (-5, ValueError, "max_new_tokens must be >= 1, got -5"),
        (4.0, TypeError, "max_new_tokens must be an int"),
    ],
)
def test_max_new_tokens_must_be_a_positive_int(target, drafter, n, exc, message):
    """Both loops refuse it; the drafter's cache is untouched."""
    snap = snapshot(drafter.cache)
    with pytest.raises(exc, match=message):
        spec(target, drafter, max_new_tokens=n)
    assert_unchanged(drafter.cache, snap)
    with pytest.raises(exc, match=message):
        gen(target, max_new_tokens=n)


def test_prompt_plus_budget_beyond_the_targets_context(target, drafter):
    """60 + 5 > n_ctx = 64: refused up front with both numbers and what to change."""
    snap = snapshot(drafter.cache)
    prompt = list(np.arange(60) % 16)
    message = r"prompt \(60 tokens\) \+ max_new_tokens \(5\) exceeds the target's context of 64"
    with pytest.raises(ValueError, match=message):
        spec(target, drafter, prompt=prompt, max_new_tokens=5)
    assert_unchanged(drafter.cache, snap)
    with pytest.raises(ValueError, match=r"max_new_tokens \(5\) exceeds the model's context"):
        gen(target, prompt=prompt, max_new_tokens=5)
    assert len(spec(target, drafter, prompt=prompt, max_new_tokens=4).tokens) == 4  # 64 fits


def test_prompt_plus_budget_beyond_the_drafters_context(target, short_model):
    """The drafter (n_ctx 24) is checked too, before anything runs."""
    drafter = ModelDrafter(short_model)
    snap = snapshot(drafter.cache)
    message = r"prompt \(20 tokens\) \+ max_new_tokens \(5\) exceeds the drafter's context of 24"
    with pytest.raises(ValueError, match=message):
        spec(target, drafter, prompt=list(range(16)) + [0, 1, 2, 3], max_new_tokens=5)
    assert_unchanged(drafter.cache, snap)


def test_drafter_refuses_a_proposal_that_would_overflow_its_cache(short_model):
    """22 context tokens + 3 more drafts fed (k = 4) > 24 slots: refused before writing."""
    drafter = ModelDrafter(short_model)
    snap = snapshot(drafter.cache)
    with pytest.raises(
        ValueError, match="drafting k=4 tokens after a context of 22 tokens needs 25"
    ):
        drafter.propose(np.arange(22) % 16, 4, SamplingParams(), RNG(0))
    assert_unchanged(drafter.cache, snap)
    drafter.propose(np.arange(22) % 16, 3, SamplingParams(), RNG(0))  # 22 + 2 = 24 fits


def test_drafter_refuses_a_context_it_has_already_consumed(drafter):
    """The context must extend past the drafter's committed tokens (a new prompt: reset)."""
    snap = snapshot(drafter.cache)
    with pytest.raises(ValueError, match="context"):
        drafter.propose(np.array([1, 2, 3]), 2, SamplingParams(), RNG(0))
    assert_unchanged(drafter.cache, snap)


def test_forward_that_would_overflow_the_cache_is_refused(target, cache):
    """Past the capacity of a small cache, and past n_ctx: refused before any write."""
    snap = snapshot(cache)
    with pytest.raises(ValueError, match="n_ctx=64"):
        target.forward(np.arange(58) % 16, cache)  # 7 written + 58 > 64
    assert_unchanged(cache, snap)
    small = target.new_cache(capacity=6)
    target.forward([1, 2, 3, 4], small)
    small.commit(3)
    small.rollback()
    target.forward([5], small)
    snap = snapshot(small)
    with pytest.raises(ValueError, match="KV cache full: 3 committed \\+ 1 temporary \\+ 3 new"):
        target.forward([5, 6, 7], small)
    assert_unchanged(small, snap)


def test_forward_refuses_a_cache_made_for_another_model(target, small_model, cache):
    """A foreign cache is refused and left as it was."""
    snap = snapshot(cache)
    with pytest.raises(ValueError, match="cache was made for another model"):
        small_model.forward([1, 2], cache)
    assert_unchanged(cache, snap)


@pytest.mark.parametrize("n", [3, 100, -1])
def test_commit_beyond_pending_is_refused(cache, n):
    """commit(n) only keeps temporary slots that exist."""
    snap = snapshot(cache)
    with pytest.raises(ValueError, match=r"commit\(n\): n must be in 0\.\.2"):
        cache.commit(n)
    assert_unchanged(cache, snap)


# ---------------------------------------------------------------- rng, eos, sampling, pairing


@pytest.mark.parametrize("rng", BAD_RNGS)
def test_every_entry_point_wants_a_numpy_generator(target, drafter, rng):
    """No global seeding: an int seed or a legacy RandomState is a TypeError naming rng."""
    snap = snapshot(drafter.cache)
    with pytest.raises(TypeError, match=RNG_MESSAGE):
        spec(target, drafter, rng=rng)
    with pytest.raises(TypeError, match=RNG_MESSAGE):
        drafter.propose(np.array([1, 2, 3, 4, 5, 6]), 2, SamplingParams(), rng)
    assert_unchanged(drafter.cache, snap)
    with pytest.raises(TypeError, match=RNG_MESSAGE):
        gen(target, rng=rng)
    p, q = np.eye(4)[[1, 2]], np.eye(4)[[1]]
    with pytest.raises(TypeError, match=RNG_MESSAGE):
        verify(p, q, [1], rng)
    with pytest.raises(TypeError, match=RNG_MESSAGE):
        sample_token(np.array([0.5, 0.5]), rng)
    with pytest.raises(TypeError, match=RNG_MESSAGE):
        init_params(target.config, rng)


@pytest.mark.parametrize(
    "eos_id, exc, message",
    [
        (-1, ValueError, r"eos_id must be in 0\.\.15 or None, got -1"),
        (16, ValueError, r"eos_id must be in 0\.\.15 or None, got 16"),
        (2.0, TypeError, "eos_id must be an int or None, got float"),
        ("3", TypeError, "eos_id must be an int or None, got str"),
    ],
)
def test_eos_id_must_be_a_token_id(target, drafter, eos_id, exc, message):
    """EOS is an id of the shared vocabulary, or None."""
    snap = snapshot(drafter.cache)
    with pytest.raises(exc, match=message):
        spec(target, drafter, eos_id=eos_id)
    assert_unchanged(drafter.cache, snap)
    with pytest.raises(exc, match=message):
        gen(target, eos_id=eos_id)


def test_sampling_must_be_sampling_params(target, drafter):
    """A dict or a string instead of SamplingParams is a TypeError naming sampling."""
    snap = snapshot(drafter.cache)
    for bad in ("greedy", {"temperature": 0}):
        with pytest.raises(TypeError, match="sampling must be a SamplingParams"):
            spec(target, drafter, sampling=bad)
        with pytest.raises(TypeError, match="sampling must be a SamplingParams"):
            drafter.propose(np.array([1, 2, 3, 4, 5, 6]), 2, bad, RNG(0))
        with pytest.raises(TypeError, match="sampling must be a SamplingParams"):
            gen(target, sampling=bad)
    assert_unchanged(drafter.cache, snap)


def test_draft_and_target_must_share_a_vocabulary(target, other_vocab_model):
    """V = 16 target, V = 12 drafter: refused, naming both sizes."""
    drafter = ModelDrafter(other_vocab_model)
    snap = snapshot(drafter.cache)
    with pytest.raises(ValueError, match="one vocabulary: target has 16 ids, drafter has 12"):
        spec(target, drafter)
    assert_unchanged(drafter.cache, snap)


# ---------------------------------------------------------------- SamplingParams, logits


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        (dict(temperature=-0.5), ValueError, "temperature must be a finite number >= 0"),
        (dict(temperature=float("nan")), ValueError, "temperature must be a finite number"),
        (dict(temperature=float("inf")), ValueError, "temperature must be a finite number"),
        (dict(temperature="1.0"), TypeError, "temperature must be a number, got str"),
        (dict(temperature=None), TypeError, "temperature must be a number, got NoneType"),
        (dict(temperature=True), TypeError, "temperature must be a number, got bool"),
        (dict(top_k=0), ValueError, "top_k must be >= 1"),
        (dict(top_k=-3), ValueError, "top_k must be >= 1"),
        (dict(top_k=2.5), TypeError, "top_k must be an int or None, got float"),
        (dict(top_k="5"), TypeError, "top_k must be an int or None, got str"),
        (dict(top_k=True), TypeError, "top_k must be an int or None, got bool"),
        (dict(top_p=0), ValueError, r"top_p must be in \(0, 1\], got 0"),
        (dict(top_p=-0.1), ValueError, r"top_p must be in \(0, 1\], got -0.1"),
        (dict(top_p=1.5), ValueError, r"top_p must be in \(0, 1\], got 1.5"),
        (dict(top_p=float("nan")), ValueError, r"top_p must be in \(0, 1\], got nan"),
        (dict(top_p="0.9"), TypeError, "top_p must be a number, got str"),
        (dict(top_p=None), TypeError, "top_p must be a number, got NoneType"),
    ],
)
def test_sampling_params_are_checked_when_built(kwargs, exc, message):
    """A bad transform never reaches a model: SamplingParams itself refuses it."""
    with pytest.raises(exc, match=message):
        SamplingParams(**kwargs)


def test_sampling_params_accept_numpy_scalars_and_the_boundaries():
    """np.float32 / np.int64 values and top_p = 1, temperature = 0 are valid."""
    SamplingParams(temperature=np.float32(0.5), top_k=np.int64(3), top_p=np.float64(1.0))
    SamplingParams(temperature=0, top_p=1)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize(
    "params",
    [SamplingParams(), SamplingParams(temperature=0), SamplingParams(top_k=2)],
    ids=["T=1", "greedy", "top-k"],
)
def test_logits_must_be_finite(bad, params):
    """NaN or +-inf logits (a broken model) are refused, naming `logits`."""
    z = np.array([[0.1, 0.2, 0.3], [1.0, bad, 0.0]], dtype=np.float32)
    with pytest.raises(ValueError, match="logits contains NaN or inf"):
        probabilities(z, params)


def test_a_model_with_nan_weights_is_caught_at_the_logits(target):
    """A broken checkpoint surfaces as a named error in generate, not as garbage tokens."""
    params = dict(target.params)
    params["h.0.mlp.c_fc.bias"] = np.full_like(params["h.0.mlp.c_fc.bias"], np.nan)
    broken = type(target)(target.config, params)
    with pytest.raises(ValueError, match="logits contains NaN"):
        gen(broken)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n_vocab=0), "n_vocab must be a positive int"),
        (dict(n_ctx=-1), "n_ctx must be a positive int"),
        (dict(n_layer=1.5), "n_layer must be a positive int"),
        (dict(n_head=3), r"n_embd \(16\) must be divisible by n_head \(3\)"),
    ],
)
def test_config_refuses_impossible_shapes(kwargs, message):
    """GPTConfig fields are positive ints and heads divide the width."""
    base = dict(n_vocab=16, n_ctx=8, n_embd=16, n_head=2, n_layer=1)
    with pytest.raises(ValueError, match=message):
        GPTConfig(**(base | kwargs))


# ---------------------------------------------------------------- verify

V = 4


def good():
    """k = 2, V = 4: valid p [3, 4], q [2, 4], drafts [2]."""
    p = np.full((3, V), 0.25)
    q = np.array([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]])
    return p, q, np.array([2, 0])


def test_the_good_verify_inputs_are_good():
    """Guard: the baseline of the bad-input cases below is accepted."""
    p, q, t = good()
    verify(p, q, t, RNG(0))


@pytest.mark.parametrize(
    "which, value, exc, message",
    [
        ("p", lambda p, q, t: p * 1.01, ValueError, "p_target rows must each sum to 1"),
        ("q", lambda p, q, t: q * 0.9, ValueError, "q_draft rows must each sum to 1"),
        ("p", lambda p, q, t: p + [[0.5, -0.5, 0, 0]] * 3, ValueError, "p_target has negative"),
        ("q", lambda p, q, t: q + [[0.3, -0.3, 0, 0]] * 2, ValueError, "q_draft has negative"),
        (
            "p",
            lambda p, q, t: np.where(p == p.max(), np.nan, p),
            ValueError,
            "p_target contains NaN or inf",
        ),
        (
            "q",
            lambda p, q, t: q + [[np.inf, 0, 0, 0]] * 2,
            ValueError,
            "q_draft contains NaN or inf",
        ),
        ("p", lambda p, q, t: p.astype(np.int64), TypeError, "p_target must be a float32 or"),
        ("q", lambda p, q, t: (q > 0.25).astype(np.int32), TypeError, "q_draft must be a float"),
        ("p", lambda p, q, t: p.tolist(), TypeError, "p_target must be a numpy.ndarray"),
        ("q", lambda p, q, t: q.tolist(), TypeError, "q_draft must be a numpy.ndarray"),
        ("p", lambda p, q, t: p[0], ValueError, r"p_target must be 2-D \[k\+1, V\]"),
        ("p", lambda p, q, t: p[None], ValueError, r"p_target must be 2-D \[k\+1, V\]"),
        ("p", lambda p, q, t: p[:0], ValueError, r"p_target must .*at least one row"),
        ("q", lambda p, q, t: q[0], ValueError, r"q_draft must be 2-D \[k, V\]"),
        ("q", lambda p, q, t: q[:1], ValueError, r"q_draft must have shape \[k, V\] = \(2, 4\)"),
        (
            "q",
            lambda p, q, t: np.full((2, 5), 0.2),
            ValueError,
            r"q_draft must have shape \[k, V\] = \(2, 4\)",
        ),
        (
            "p",
            lambda p, q, t: np.full((2, V), 0.25),
            ValueError,
            r"q_draft must have shape \[k, V\] = \(1, 4\)",
        ),
        ("t", lambda p, q, t: t[:1], ValueError, "draft_tokens must have length k = 2, got 1"),
        ("t", lambda p, q, t: np.array([2, 0, 1]), ValueError, "draft_tokens must have length"),
        ("t", lambda p, q, t: t[None], ValueError, "draft_tokens must be 1-D"),
        (
            "t",
            lambda p, q, t: t.astype(np.float64),
            TypeError,
            "draft_tokens must hold integer token ids",
        ),
        ("t", lambda p, q, t: [2.0, 0.0], TypeError, "draft_tokens must hold integer"),
        ("t", lambda p, q, t: [2, 4], ValueError, r"draft_tokens contains id 4.*0\.\.3"),
        ("t", lambda p, q, t: [-1, 0], ValueError, "draft_tokens contains id -1"),
    ],
)
def test_verify_refuses_a_broken_contract(which, value, exc, message):
    """Shapes [k+1, V] / [k, V] / [k], float rows summing to 1, ints in range: else a
    named error, before any random number is drawn."""
    p, q, t = good()
    args = {"p": p, "q": q, "t": t}
    args[which] = value(p, q, t)
    rng = RNG(0)
    state = rng.bit_generator.state
    with pytest.raises(exc, match=message):
        verify(args["p"], args["q"], args["t"], rng)
    assert rng.bit_generator.state == state  # no draw was consumed


def test_verify_refuses_a_draft_token_its_q_could_not_have_produced():
    """q(x) = 0 for a draft x means q is not the law x came from: min(1, p/q) is undefined."""
    p, q, _ = good()
    q = np.array([[0.1, 0.2, 0.3, 0.4], [0.0, 0.5, 0.5, 0.0]])
    with pytest.raises(ValueError, match=r"draft_tokens\[1\] = 0 has q_draft probability 0"):
        verify(p, q, [2, 0], RNG(0))


def test_verify_tolerates_float32_rounding_in_row_sums():
    """Rows straight out of a float32 softmax are accepted (within 1e-4), not refused."""
    z = np.random.default_rng(0).normal(0, 5, (3, 1000)).astype(np.float32)
    p = probabilities(z, SamplingParams())
    q = probabilities(z[:2] * 0.5, SamplingParams())
    verify(p, q, np.argmax(q, axis=-1), RNG(0))

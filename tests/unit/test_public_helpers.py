"""The public helpers and the plug-in point refuse what they cannot mean: `sample_token`
on anything but one distribution, `acceptance_probability` with q = 0, cache writes outside
the free slots, and a plugged-in verify whose answer is out of range (named in the error,
with both caches left at their last committed state). The same for the GPU twin."""

from __future__ import annotations

import numpy as np
import pytest

import gpu
import reference
from reference import (
    KVCache,
    ModelDrafter,
    SamplingParams,
    Verification,
    acceptance_probability,
    speculative_generate,
)
from reference.speculative import speculative_round

from .helpers import assert_unchanged, snapshot

RNG = np.random.default_rng


# ---------------------------------------------------------------- sample_token


@pytest.mark.parametrize("core", [reference, gpu], ids=["reference", "twin"])
def test_sample_token_refuses_a_2d_array(core):
    """Today's bug: cumsum flattened [k, V] and returned an id outside the row."""
    with pytest.raises(ValueError, match=r"one distribution over ids, shape \[V\]; got shape"):
        core.sample_token(np.full((3, 4), 1 / 4), RNG(0))


@pytest.mark.parametrize("core", [reference, gpu], ids=["reference", "twin"])
@pytest.mark.parametrize("row", [np.zeros(5), np.full(5, np.nan), np.array([])])
def test_sample_token_refuses_a_row_with_no_mass(core, row):
    """An all-zero row returned id 4 (the last one) instead of failing."""
    with pytest.raises(ValueError, match="sample_token"):
        core.sample_token(row, RNG(0))


@pytest.mark.parametrize("core", [reference, gpu], ids=["reference", "twin"])
def test_sample_token_still_samples_a_list_and_an_unnormalised_row(core):
    assert core.sample_token([0.0, 0.0, 2.0], RNG(0)) == 2
    assert core.sample_token(np.array([0, 3.0, 0], dtype=np.float32), RNG(1)) == 1


# ---------------------------------------------------------------- acceptance_probability


@pytest.mark.parametrize("q", [0.0, -0.1, float("nan")])
def test_acceptance_probability_with_q_zero_says_why(q):
    with pytest.raises(ValueError, match=r"q\(x\) = .*a drafted token has q\(x\) > 0"):
        acceptance_probability(0.5, q)
    assert gpu.acceptance_probability is acceptance_probability  # the twin reuses it


def test_acceptance_probability_values():
    assert acceptance_probability(0.6, 0.8) == pytest.approx(0.75)
    assert acceptance_probability(0.9, 0.3) == 1.0


# ---------------------------------------------------------------- KVCache slots


def cache_mid_round():
    # 3 committed + 2 temporary slots of 8; layer data random so that damage shows
    cache = KVCache(n_layer=2, n_head=2, head_size=4, capacity=8)
    cache.k[:] = RNG(0).normal(size=cache.k.shape)
    cache.v[:] = RNG(1).normal(size=cache.v.shape)
    cache.mark_written(5)
    cache.commit(3)
    return cache


def kv(T: int, nh: int = 2, hs: int = 4):
    return np.ones((nh, T, hs), np.float32), np.ones((nh, T, hs), np.float32)


@pytest.mark.parametrize(
    ("layer", "start", "T", "words"),
    [
        (0, 7, 2, "start must be an int in 3..6"),  # falls off the end
        (0, 2, 1, "start must be an int in 3..7"),  # overwrites a committed slot
        (0, -1, 1, "start must be"),
        (2, 5, 1, "layer must be an int in 0..1"),
        (-1, 5, 1, "layer must be"),
        (0, 5.0, 1, "start must be an int"),
    ],
)
def test_kv_write_refuses_slots_outside_the_free_range(layer, start, T, words):
    cache = cache_mid_round()
    snap = snapshot(cache)
    with pytest.raises(ValueError, match=words):
        cache.write(layer, start, *kv(T))
    assert_unchanged(cache, snap)


def test_kv_write_refuses_a_wrong_shape():
    cache = cache_mid_round()
    snap = snapshot(cache)
    k, _ = kv(1)
    with pytest.raises(ValueError, match=r"shape \[nh, T, hs\] = \[2, T, 4\]"):
        cache.write(0, 5, k, np.ones((2, 1, 3), np.float32))
    assert_unchanged(cache, snap)


@pytest.mark.parametrize("n_new", [-1, 4, 2.0])
def test_mark_written_refuses_more_than_the_free_slots(n_new):
    cache = cache_mid_round()
    snap = snapshot(cache)
    with pytest.raises((ValueError, TypeError), match="mark_written"):
        cache.mark_written(n_new)
    assert_unchanged(cache, snap)


def test_the_twins_cache_has_the_same_checks():
    cache = gpu.KVCache(n_layer=1, n_head=2, head_size=4, capacity=4)
    with pytest.raises(ValueError, match="start must be"):
        cache.write(0, 3, *kv(2))
    with pytest.raises(ValueError, match="mark_written"):
        cache.mark_written(5)


# ---------------------------------------------------------------- plugged-in verify


def lying_verify(accepted, token):
    def my_verify(p, q, tokens, rng):
        return Verification(accepted, token)

    return my_verify


@pytest.mark.parametrize(
    ("accepted", "token", "words"),
    [
        (-1, 0, r"returned accepted=-1; it must be in 0\.\.3"),
        (4, 0, r"returned accepted=4; it must be in 0\.\.3"),
        (1, 16, r"returned token=16; it must be in 0\.\.15"),
        (1, -2, r"returned token=-2"),
    ],
)
def test_a_plugged_in_verify_out_of_range_is_named_and_the_caches_stay(
    target, draft, accepted, token, words
):
    """Today accepted = -1 made the loop emit drafts that were never verified."""
    drafter = ModelDrafter(draft)
    cache = target.new_cache()
    context = np.array([1, 2, 3, 4])
    target.forward(context[:-1], cache)
    cache.commit(3)
    drafter.prefill(context[:-1])
    t_snap, d_snap = snapshot(cache), (drafter.cache.length,)
    plugin = lying_verify(accepted, token)
    with pytest.raises(ValueError, match=words) as info:
        speculative_round(target, cache, drafter, context, 3, SamplingParams(), RNG(0), plugin)
    assert "lying_verify.<locals>.my_verify" in str(info.value)
    assert cache.length == t_snap[0] and drafter.cache.length == d_snap[0]


@pytest.mark.parametrize("answer", [(1, 2), None, Verification(True, 1)])
def test_a_plugged_in_verify_that_returns_no_verification(target, draft, answer):
    with pytest.raises(TypeError, match="must return a Verification"):
        speculative_generate(
            target,
            ModelDrafter(draft),
            [1, 2],
            k=2,
            max_new_tokens=4,
            rng=RNG(0),
            verify_fn=lambda p, q, t, rng: answer,
        )


@pytest.mark.parametrize("core", [reference, gpu], ids=["reference", "twin"])
def test_both_loops_check_the_plug_in(core, target, draft):
    t = target if core is reference else gpu.GPT(target.config, target.params)
    d = draft if core is reference else gpu.GPT(draft.config, draft.params)
    with pytest.raises(ValueError, match="accepted=-1"):
        core.speculative_generate(
            t,
            core.ModelDrafter(d),
            [1, 2],
            k=2,
            max_new_tokens=6,
            rng=RNG(0),
            verify_fn=lying_verify(-1, 0),
        )


def test_a_correct_plug_in_is_untouched(target, draft):
    """The reference's own verify plugged in gives the same run as no plug-in."""
    args = dict(k=3, max_new_tokens=12, sampling=SamplingParams(temperature=1.0))
    plain = speculative_generate(target, ModelDrafter(draft), [1, 2], rng=RNG(5), **args)
    plugged = speculative_generate(
        target, ModelDrafter(draft), [1, 2], rng=RNG(5), verify_fn=reference.verify, **args
    )
    assert plain.tokens == plugged.tokens

"""Greedy speculative decoding emits exactly the target's greedy autoregressive tokens.

With temperature 0 both p and q are one-hot, so `verify` is deterministic: a draft is kept
iff it is the target's argmax, and a rejection emits the target's argmax. Any drafter, good
or bad, must then reproduce `generate` token for token; only the number of rounds changes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from reference import ModelDrafter, generate

from .helpers import GREEDY, ConstantDrafter, speculative_run

MAX_NEW = 13  # 13 % (k + 1) != 0 for every k in 1..6: the last round is a short one
EOS_AT = 5  # with EOS: use the 6th greedy token as EOS, so generation stops mid-way


def prompts(n: int = 24) -> list[list[int]]:
    rng = np.random.default_rng(1234)
    return [list(rng.integers(0, 16, 1 + i % 8)) for i in range(n)]


def greedy(target, prompt, max_new_tokens, eos_id=None) -> list[int]:
    return generate(
        target,
        prompt,
        max_new_tokens=max_new_tokens,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
        eos_id=eos_id,
    )


def spec(target, drafter, prompt, k, max_new_tokens, eos_id=None, seed=0, trace=False):
    return speculative_run(
        target,
        drafter,
        prompt,
        k=k,
        max_new_tokens=max_new_tokens,
        seed=seed,
        eos_id=eos_id,
        trace=trace,
    )


def test_max_new_is_never_a_multiple_of_k_plus_1():
    """Guard on the test's own premise: every k in 1..6 ends on a partial round."""
    assert all(MAX_NEW % (k + 1) for k in range(1, 7))


@pytest.mark.parametrize("k", range(1, 7))
def test_greedy_speculative_equals_greedy_autoregressive(target, draft, k):
    """24 prompts, with and without EOS: identical tokens, whatever the acceptance."""
    drafter = ModelDrafter(draft)
    accepted = rejected = 0
    for i, prompt in enumerate(prompts()):
        expected = greedy(target, prompt, MAX_NEW)
        result = spec(target, drafter, prompt, k, MAX_NEW, seed=i)
        assert result.tokens == expected, f"prompt {prompt}"
        assert result.stats.stop_reason == "length"
        accepted += result.stats.accepted
        rejected += result.stats.rejections

        eos = expected[EOS_AT]
        expected_eos = greedy(target, prompt, MAX_NEW, eos_id=eos)
        assert expected_eos == expected[: expected.index(eos) + 1]
        result = spec(target, drafter, prompt, k, MAX_NEW, eos_id=eos, seed=i)
        assert result.tokens == expected_eos, f"prompt {prompt}, eos {eos}"
        assert result.stats.stop_reason == "eos"
    assert accepted > 0 and rejected > 0  # both verify paths were exercised


@pytest.mark.parametrize("max_new_tokens", range(1, 12))
def test_greedy_equality_for_every_length_budget(target, draft, max_new_tokens):
    """Short budgets exercise the k_round = remaining - 1 cut, down to a bonus-only round."""
    for k in (2, 4):
        for prompt in prompts(6):
            expected = greedy(target, prompt, max_new_tokens)
            result = spec(target, ModelDrafter(draft), prompt, k, max_new_tokens)
            assert result.tokens == expected
            assert len(result.tokens) == max_new_tokens


@pytest.mark.parametrize("k", range(1, 7))
def test_self_drafting_accepts_everything(target, k):
    """Drafting with the target itself: acceptance 1.0 and k+1 tokens per round except the
    last (short) round; the output is still the greedy one."""
    for prompt in prompts(8):
        result = spec(target, ModelDrafter(target), prompt, k, MAX_NEW, trace=True)
        assert result.tokens == greedy(target, prompt, MAX_NEW)
        stats = result.stats
        assert stats.acceptance_rate == 1.0 and stats.alpha == 1.0
        assert stats.rejections == 0
        assert stats.rounds == math.ceil(MAX_NEW / (k + 1))
        per_round = [len(r.emitted) for r in result.trace]
        assert per_round[:-1] == [k + 1] * (stats.rounds - 1)
        assert per_round[-1] == MAX_NEW % (k + 1)
        assert all(r.token_kind == "bonus" for r in result.trace)
        assert stats.mean_tokens_per_round == MAX_NEW / stats.rounds


@pytest.mark.parametrize("k", [1, 3, 6])
def test_bad_drafters_change_the_cost_not_the_output(target, small_model, k):
    """A constant point-mass drafter and an unrelated model: same greedy tokens, mostly
    rejected drafts, at most one more round per token."""
    for token in (0, 7):
        for i, prompt in enumerate(prompts(10)):
            expected = greedy(target, prompt, MAX_NEW)
            bad = ConstantDrafter(token, n_vocab=16, n_ctx=64)
            result = spec(target, bad, prompt, k, MAX_NEW, seed=i)
            assert result.tokens == expected
            # a constant draft is accepted exactly where the target's choice is that token
            assert result.stats.accepted <= expected.count(token)
            assert result.stats.rounds <= MAX_NEW
    for prompt in prompts(10):
        result = spec(target, ModelDrafter(small_model), prompt, k, MAX_NEW)
        assert result.tokens == greedy(target, prompt, MAX_NEW)


def test_greedy_output_does_not_depend_on_the_generator(target, draft):
    """Greedy decisions are deterministic: any seed gives the same tokens."""
    prompt = prompts(1)[0]
    outs = {
        tuple(spec(target, ModelDrafter(draft), prompt, 3, MAX_NEW, seed=s).tokens)
        for s in range(5)
    }
    assert len(outs) == 1

"""Prompt lookup (reference/lookup.py): the matching rules, point-mass q rows, reading only
committed tokens, greedy equality with `generate`, and the hybrid's fallback cache."""

from __future__ import annotations

import numpy as np
import pytest

from reference import HybridDrafter, LookupDrafter, ModelDrafter, SamplingParams, generate
from reference.kv_cache import KVCache
from reference.speculative import prefill, speculative_round
from reference.tokenizer import encode
from specdec.bundled import bundled_pair_available, load_bundled_pair

from .helpers import GREEDY, assert_cache_is_prefill, speculative_run

V = 16
RNG = np.random.default_rng(0)  # propose takes a generator; the lookup never draws from it


def lookup(context, k, **kwargs) -> list[int]:
    drafter = LookupDrafter(V, 64, **kwargs)
    return drafter.propose(np.asarray(context), k, GREEDY, RNG).tokens.tolist()


def brute_force_lookup(context, k, max_ngram=3, min_ngram=1, prefer="recent") -> list[int]:
    """The rule, written independently: every earlier occurrence of the last n tokens that
    ends before the last token, for n = max_ngram .. min_ngram; the first n found wins."""
    context = list(context)
    T = len(context)
    for n in range(max_ngram, min_ngram - 1, -1):
        if k == 0 or n > T - 1:
            continue
        starts = [i for i in range(T - n) if context[i : i + n] == context[T - n :]]
        if starts:
            if prefer == "recent":
                i = max(starts)
            else:  # the longest continuation (capped at k); a tie goes to the more recent
                i = max(starts, key=lambda i: (min(k, T - n - i), i))
            return context[i + n : i + n + k]
    return []


# --------------------------------------------------------------------------------------------
# Matching rules
# --------------------------------------------------------------------------------------------


def test_recent_copies_after_the_last_earlier_occurrence():
    #          0  1  2  3  4  5  6  7  8  9      "1 2" occurs at 0 and 6; "2 1 2" nowhere before
    context = [1, 2, 7, 8, 9, 5, 1, 2, 1, 2]
    assert lookup(context, 3, prefer="recent") == [1, 2]  # after positions 6-7: only 2 left


def test_longest_copies_after_the_occurrence_with_the_longest_continuation():
    context = [1, 2, 7, 8, 9, 5, 1, 2, 1, 2]
    assert lookup(context, 3, prefer="longest") == [7, 8, 9]  # after positions 0-1
    # capped at k: both occurrences offer k tokens, so the more recent one wins
    assert lookup([1, 2, 3, 4, 5, 1, 2, 6, 7, 8, 1, 2], 2, prefer="longest") == [6, 7]
    assert lookup([1, 2, 3, 4, 5, 1, 2, 6, 7, 8, 1, 2], 4, prefer="longest") == [6, 7, 8, 1]
    # k = 6: the recent one offers only 5, the older one 6
    assert lookup([1, 2, 3, 4, 5, 1, 2, 6, 7, 8, 1, 2], 6, prefer="longest") == [3, 4, 5, 1, 2, 6]


def test_the_longest_n_that_matches_wins():
    # last 3 = "4 5 6" occurs once before (followed by 9); last 1 = "6" also occurs later
    # (followed by 3), but n = 3 is tried first
    context = [4, 5, 6, 9, 6, 3, 4, 5, 6]
    assert lookup(context, 1, max_ngram=3) == [9]
    assert lookup(context, 2, max_ngram=1) == [3, 4]  # n = 1 only: the recent "6"
    # with min_ngram = 2, a context whose last two tokens never occurred before gets nothing
    assert lookup([1, 2, 3, 1, 4], 3, max_ngram=3, min_ngram=2) == []
    assert lookup([1, 2, 3, 1, 4], 3, max_ngram=3, min_ngram=1) == []  # "4" is new too
    assert lookup([1, 2, 3, 4, 1], 3, max_ngram=3, min_ngram=1) == [2, 3, 4]


def test_no_match_proposes_nothing_with_an_empty_q():
    drafter = LookupDrafter(V, 64)
    for context in ([5], [1, 2, 3], [0, 1, 2, 3, 4, 5]):
        draft = drafter.propose(np.asarray(context), 4, GREEDY, RNG)
        assert draft.tokens.shape == (0,) and draft.q.shape == (0, V)


def test_the_continuation_may_be_shorter_than_k_and_k_zero_proposes_nothing():
    assert lookup([3, 1, 3], 5) == [1, 3]  # only two tokens follow the earlier "3"
    assert lookup([3, 3], 5) == [3]  # an occurrence may overlap the suffix itself
    assert lookup([1, 2, 1, 2], 0) == []


def test_q_rows_are_one_hot_point_masses_of_the_drafts():
    draft = LookupDrafter(V, 64).propose(np.array([1, 2, 3, 1, 2]), 3, SamplingParams(0.7), RNG)
    assert draft.tokens.tolist() == [3, 1, 2]
    assert draft.q.dtype == np.float32 and draft.q.shape == (3, V)
    np.testing.assert_array_equal(draft.q, np.eye(V, dtype=np.float32)[draft.tokens])


@pytest.mark.parametrize("prefer", ["recent", "longest"])
@pytest.mark.parametrize("max_ngram,min_ngram", [(3, 1), (2, 2), (4, 2), (1, 1)])
def test_matches_an_independent_brute_force_rule(prefer, max_ngram, min_ngram):
    """Random contexts over few ids (so matches of every length happen), k = 0..5."""
    rng = np.random.default_rng([max_ngram, min_ngram, len(prefer)])
    drafter = LookupDrafter(V, 64, max_ngram, min_ngram, prefer)
    for _ in range(300):
        context = rng.integers(0, 3, size=int(rng.integers(1, 25)))
        k = int(rng.integers(0, 6))
        got = drafter.propose(context, k, GREEDY, RNG).tokens.tolist()
        assert got == brute_force_lookup(context, k, max_ngram, min_ngram, prefer), (context, k)


def test_the_drafter_keeps_no_state():
    """Nothing is copied: proposals, commit and rollback leave the drafter as it was."""
    drafter = LookupDrafter(V, 64)
    before = dict(vars(drafter))
    drafter.prefill(np.array([1, 2, 3]))
    first = drafter.propose(np.array([1, 2, 3, 1]), 3, GREEDY, RNG)
    drafter.commit(1)
    drafter.rollback()
    again = drafter.propose(np.array([1, 2, 3, 1]), 3, GREEDY, RNG)
    np.testing.assert_array_equal(first.tokens, again.tokens)
    assert vars(drafter) == before


# --------------------------------------------------------------------------------------------
# Only committed tokens are read
# --------------------------------------------------------------------------------------------


def committed_contexts(prompt, result):
    """The committed context at the start of each round, rebuilt from the trace."""
    context = list(prompt)
    for rnd in result.trace:
        assert rnd.context_len == len(context)
        yield list(context)
        context += rnd.emitted


@pytest.mark.parametrize("sampling", [GREEDY, SamplingParams(1.0), SamplingParams(0.8, top_k=4)])
def test_every_draft_is_copied_from_the_committed_context(target, sampling):
    """Through real rounds with rejections: each round's draft is exactly the rule applied to
    the committed context (never to drafts that were rejected), copied from inside it."""
    drafter = LookupDrafter(V, 64, max_ngram=2)
    for seed in range(6):
        prompt = np.random.default_rng(seed).integers(0, 4, size=8).tolist()
        result = speculative_run(
            target,
            drafter,
            prompt,
            k=3,
            max_new_tokens=20,
            seed=seed,
            sampling=sampling,
            trace=True,
        )
        for context, rnd in zip(committed_contexts(prompt, result), result.trace, strict=True):
            k_round = min(3, 20 - (len(context) - len(prompt)) - 1)
            expected = brute_force_lookup(context, k_round, max_ngram=2)
            assert rnd.draft_tokens.tolist() == expected
            np.testing.assert_array_equal(rnd.q_rows, np.eye(V)[rnd.draft_tokens])


# --------------------------------------------------------------------------------------------
# Greedy speculative == greedy autoregressive
# --------------------------------------------------------------------------------------------


def repetitive_prompts() -> list[list[int]]:
    rng = np.random.default_rng(77)
    prompts = []
    for i in range(12):
        line = rng.integers(0, V, size=2 + i % 4).tolist()
        prompts.append(line * (2 + i % 3) + line[: i % 3])  # a line repeated, then its start
    return prompts + [rng.integers(0, V, size=1 + i).tolist() for i in range(6)]


def greedy(target, prompt, max_new_tokens, eos_id=None) -> list[int]:
    rng = np.random.default_rng(0)
    return generate(
        target, prompt, max_new_tokens=max_new_tokens, rng=rng, sampling=GREEDY, eos_id=eos_id
    )


@pytest.mark.parametrize("kind", ["lookup", "lookup-longest", "hybrid"])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_speculative_with_lookup_equals_greedy_autoregressive(target, draft, kind, k):
    drafters = {
        "lookup": LookupDrafter(V, 64),
        "lookup-longest": LookupDrafter(V, 64, max_ngram=4, min_ngram=2, prefer="longest"),
        "hybrid": HybridDrafter(LookupDrafter(V, 64, min_ngram=2), ModelDrafter(draft)),
    }
    drafter = drafters[kind]
    accepted = 0
    for i, prompt in enumerate(repetitive_prompts()):
        expected = greedy(target, prompt, 13)
        result = speculative_run(target, drafter, prompt, k=k, max_new_tokens=13, seed=i)
        assert result.tokens == expected, f"prompt {prompt}"
        accepted += result.stats.accepted
        eos = expected[6]
        result = speculative_run(target, drafter, prompt, k=k, max_new_tokens=13, eos_id=eos)
        assert result.tokens == expected[: expected.index(eos) + 1], f"prompt {prompt}, eos"
    assert accepted > 0  # some copied drafts were right


@pytest.fixture(scope="module")
def bundled():
    if not bundled_pair_available():
        pytest.skip("the bundled pair is not in models/")
    return load_bundled_pair()


COPY_PROMPT = (
    "def area(width, height):\n    return width * height\n\n"
    "def area(width, height):\n    return width * height\n\n"
    "def area(width,"
)


@pytest.mark.parametrize("kind", ["lookup", "hybrid"])
def test_copy_heavy_prompt_on_the_bundled_pair(bundled, kind):
    """A prompt that repeats a function: greedy output equals `generate`, and copying pays
    (more than 2 tokens per target pass on average)."""
    target, draft = bundled
    lookup_drafter = LookupDrafter(target.n_vocab, target.config.n_ctx)
    drafter = (
        lookup_drafter if kind == "lookup" else HybridDrafter(lookup_drafter, ModelDrafter(draft))
    )
    prompt = encode(COPY_PROMPT).tolist()
    expected = greedy(target, prompt, 40)
    result = speculative_run(target, drafter, prompt, k=6, max_new_tokens=40)
    assert result.tokens == expected
    assert result.stats.mean_tokens_per_round > 2.0, result.stats.accepted_per_round


# --------------------------------------------------------------------------------------------
# The hybrid: the fallback's cache after every round
# --------------------------------------------------------------------------------------------


class CallLog(ModelDrafter):
    """A ModelDrafter that records which of its methods the hybrid called, in order."""

    def __init__(self, model) -> None:
        super().__init__(model)
        self.calls: list[str] = []

    def propose(self, context, k, sampling, rng):
        self.calls.append("propose")
        return super().propose(context, k, sampling, rng)

    def commit(self, n_accepted: int) -> None:
        self.calls.append("commit")
        super().commit(n_accepted)

    def rollback(self) -> None:
        self.calls.append("rollback")
        super().rollback()


@pytest.mark.parametrize("sampling", [GREEDY, SamplingParams(1.0), SamplingParams(0.8, top_p=0.9)])
@pytest.mark.parametrize("k", [1, 3])
def test_hybrid_fallback_cache_is_a_prefill_of_committed_tokens_after_every_round(
    target, draft, sampling, k
):
    """Rounds mixing lookup and fallback drafts: after each, the fallback's committed cache
    equals a fresh prefill of the committed tokens it holds, with nothing temporary; it was
    called (propose, commit, rollback) in its own rounds and not at all in lookup rounds;
    and a fallback round catches up on every token accepted in the lookup rounds before it."""
    fallback = CallLog(draft)
    hybrid = HybridDrafter(LookupDrafter(V, 64, max_ngram=3, min_ngram=2), fallback)
    rounds = {"lookup": 0, "fallback": 0}
    for seed in range(4):
        rng = np.random.default_rng(seed)
        prompt = np.array([1, 2, 3, 1, 2, 9, 9, 4, 5, 6][seed % 3 :], dtype=np.int64)
        cache = target.new_cache()
        prefill(target, cache, hybrid, prompt)
        context = prompt.copy()
        while len(context) < len(prompt) + 30:
            fallback.calls.clear()
            rnd = speculative_round(target, cache, hybrid, context, k, sampling, rng)
            context = np.concatenate([context, rnd.verification.emitted(rnd.draft.tokens)])
            d_cache: KVCache = fallback.cache
            assert d_cache.pending == 0
            assert d_cache.length <= len(context) - 1  # the last token is never cached
            assert_cache_is_prefill(draft, d_cache, context[: d_cache.length], "fallback")
            if fallback.calls:
                assert fallback.calls == ["propose", "commit", "rollback"]
                assert d_cache.length >= len(context) - 2  # caught up (all but 1 or 2)
                rounds["fallback"] += 1
            else:
                assert rnd.k > 0  # a lookup round (the lookup matched)
                rounds["lookup"] += 1
            assert rnd.draft_cache.after == d_cache.length  # the loop sees the fallback's spans
    assert rounds["lookup"] > 5 and rounds["fallback"] > 5, rounds


def test_hybrid_commit_after_rollback_touches_nothing(draft):
    fallback = CallLog(draft)
    hybrid = HybridDrafter(LookupDrafter(V, 64), fallback)
    hybrid.commit(1)
    hybrid.rollback()
    assert fallback.calls == []


# --------------------------------------------------------------------------------------------
# Bad arguments
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(n_vocab=0), ValueError, "n_vocab must be >= 1"),
        (dict(n_vocab=16.0), TypeError, "n_vocab must be an int"),
        (dict(n_ctx=-1), ValueError, "n_ctx must be >= 1"),
        (dict(max_ngram=0), ValueError, "max_ngram must be >= 1"),
        (dict(max_ngram=True), TypeError, "max_ngram must be an int"),
        (dict(min_ngram=0), ValueError, "min_ngram must be an int in 1..max_ngram"),
        (dict(max_ngram=2, min_ngram=3), ValueError, "1..max_ngram = 1..2"),
        (dict(min_ngram="1"), TypeError, "min_ngram must be an int"),
        (dict(prefer="oldest"), ValueError, "prefer must be 'recent'"),
        (dict(prefer=None), TypeError, "prefer must be a str"),
    ],
)
def test_bad_constructor_arguments_say_what_is_wrong(kwargs, error, words):
    args = dict(n_vocab=V, n_ctx=64) | kwargs
    with pytest.raises(error, match=words.replace("(", r"\(").replace(".", r"\.")):
        LookupDrafter(**args)


def test_bad_proposals_and_mismatched_vocabularies_are_refused(draft, other_vocab_model):
    drafter = LookupDrafter(V, 64)
    with pytest.raises(ValueError, match="k must be >= 0"):
        drafter.propose(np.array([1, 2]), -1, GREEDY, RNG)
    with pytest.raises(ValueError, match="token ids must be in 0..15"):
        drafter.propose(np.array([1, 16]), 2, GREEDY, RNG)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        drafter.propose(np.array([1, 2]), 2, GREEDY, 0)
    with pytest.raises(ValueError, match="share one vocabulary"):
        HybridDrafter(drafter, ModelDrafter(other_vocab_model))

"""KV cache: pointer moves, no copies, and the invariant under any history (docs/kv-cache.md,
'The invariant')."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference import KVCache, ModelDrafter, SamplingParams, speculative_generate, verify

from .helpers import (
    GREEDY,
    RecordingGPT,
    assert_cache_is_prefill,
    assert_close_scaled,
    assert_unchanged,
    prefill_cache,
    snapshot,
)


def assert_written_is_prefill(model, cache: KVCache, tokens, what: str = "cache") -> None:
    """Committed + temporary slots hold exactly what a prefill of those tokens writes."""
    assert cache.end == len(tokens), f"{what}: end {cache.end} != {len(tokens)} tokens"
    ref = prefill_cache(model, tokens)
    assert_close_scaled(cache.k[:, :, : cache.end], ref.k[:, :, : len(tokens)], what + " keys")
    assert_close_scaled(cache.v[:, :, : cache.end], ref.v[:, :, : len(tokens)], what + " values")


# ---------------------------------------------------------------- pointer discipline


def test_forward_writes_temporary_slots_and_commit_moves_the_pointer(target):
    """forward marks T slots pending; commit(n) moves n of them to the committed part, and
    rollback() drops the rest."""
    cache = target.new_cache()
    target.forward([1, 2, 3], cache)
    assert (cache.length, cache.pending, cache.end) == (0, 3, 3)
    cache.commit(2)
    assert (cache.length, cache.pending, cache.end) == (2, 1, 3)  # slot 2 still temporary
    cache.rollback()
    assert (cache.length, cache.pending, cache.end) == (2, 0, 2)
    target.forward([4, 5], cache)
    assert (cache.length, cache.pending, cache.end) == (2, 2, 4)
    cache.commit(np.int64(2))  # numpy ints are fine: the accepted count often is one
    assert (cache.length, cache.pending) == (4, 0)
    assert_cache_is_prefill(target, cache, [1, 2, 4, 5])


def test_commit_and_rollback_never_copy_the_buffers(target):
    """Commit and rollback move pointers only: the same arrays, the same memory."""
    cache = target.new_cache()
    k_obj, v_obj = cache.k, cache.v
    view = cache.keys(0, 8)  # a view into slot memory taken before any step
    assert np.shares_memory(view, cache.k)
    target.forward([3, 1, 4, 1], cache)
    cache.commit(3)
    target.forward([5, 9], cache)
    cache.rollback()
    cache.reset()
    assert cache.k is k_obj and cache.v is v_obj
    assert np.shares_memory(cache.keys(1, 4), k_obj)
    assert np.shares_memory(cache.values(1, 4), v_obj)
    np.testing.assert_array_equal(view[:, :4], cache.k[0, :, :4])  # the view saw the writes


def test_rolled_back_slots_keep_their_data_until_overwritten(target):
    """rollback zeroes nothing; the next forward overwrites the same slots."""
    cache = target.new_cache()
    target.forward([7, 7, 2], cache)
    cache.commit(1)
    cache.rollback()
    stale_k = cache.k[:, :, 1:3].copy()
    target.forward([5, 6], cache)  # slots 1, 2 now hold candidates [5, 6]
    candidate_k = cache.k[:, :, 1:3].copy()
    assert not np.allclose(candidate_k, stale_k)
    cache.rollback()
    assert (cache.length, cache.pending) == (1, 0)
    np.testing.assert_array_equal(cache.k[:, :, 1:3], candidate_k)  # still there
    target.forward([0, 8], cache)  # writes the same slots again
    assert not np.allclose(cache.k[:, :, 1:3], candidate_k)
    cache.commit(2)
    assert_cache_is_prefill(target, cache, [7, 0, 8])


def test_commit_zero_and_commit_all_pending_are_the_bounds(target):
    """n = 0 keeps none (rollback then drops them all); n = pending keeps them all."""
    cache = target.new_cache()
    target.forward([1, 2], cache)
    cache.commit(0)
    assert (cache.length, cache.pending) == (0, 2)
    cache.rollback()
    assert (cache.length, cache.pending) == (0, 0)
    target.forward([3, 4, 5], cache)
    cache.commit(3)
    assert (cache.length, cache.pending) == (3, 0)
    assert_cache_is_prefill(target, cache, [3, 4, 5])


@pytest.mark.parametrize("n", [4, 7, -1])
def test_commit_outside_0_to_pending_is_refused_and_changes_nothing(target, n):
    """commit(n) with n > pending or n < 0 raises ValueError naming n; the cache is untouched."""
    cache = target.new_cache()
    target.forward([1, 2], cache)
    cache.commit(2)
    target.forward([3, 4, 5], cache)
    snap = snapshot(cache)
    with pytest.raises(ValueError, match=r"commit\(n\): n must be in 0\.\.3"):
        cache.commit(n)
    assert_unchanged(cache, snap)


@pytest.mark.parametrize("n", [1.0, True, "1", None])
def test_commit_of_a_non_int_is_refused_and_changes_nothing(target, n):
    """commit(n) needs an int count; a float or bool is a TypeError naming n."""
    cache = target.new_cache()
    target.forward([1, 2, 3], cache)
    snap = snapshot(cache)
    with pytest.raises(TypeError, match=r"commit\(n\): n must be an int"):
        cache.commit(n)
    assert_unchanged(cache, snap)


def test_reset_forgets_everything_in_constant_time(target):
    """reset moves both pointers to 0; the next prefill starts at slot 0."""
    cache = target.new_cache()
    target.forward([1, 2, 3], cache)
    cache.commit(2)
    target.forward([4], cache)
    cache.reset()
    assert (cache.length, cache.pending, cache.end) == (0, 0, 0)
    target.forward([9, 9], cache)
    cache.commit(2)
    assert_cache_is_prefill(target, cache, [9, 9])


def test_check_room_counts_committed_and_temporary_slots():
    """The next write starts at length + pending, so both count against the capacity."""
    cache = KVCache(n_layer=1, n_head=1, head_size=2, capacity=5)
    cache.length, cache.pending = 2, 2
    cache.check_room(1)
    with pytest.raises(ValueError, match="capacity of 5"):
        cache.check_room(2)


def test_cache_capacity_must_be_positive():
    """A cache with no slot is a configuration error."""
    with pytest.raises(ValueError, match="capacity"):
        KVCache(n_layer=1, n_head=1, head_size=2, capacity=0)


def test_committed_returns_copies(target):
    """committed() is for comparisons: mutating it must not touch the cache."""
    cache = prefill_cache(target, [1, 2, 3])
    k, v = cache.committed()
    assert k.shape == (2, 2, 3, 8) and v.shape == k.shape
    k[...] = 0.0
    assert not np.all(cache.k[:, :, :3] == 0.0)


# ---------------------------------------------------------------- invariant, property-based

append_op = st.tuples(st.just("append"), st.lists(st.integers(0, 15), min_size=1, max_size=4))
commit_op = st.tuples(st.just("commit"), st.floats(0.0, 1.0))
rollback_op = st.tuples(st.just("rollback"), st.none())


@settings(deadline=None, max_examples=40, derandomize=True)  # fixed examples
@given(ops=st.lists(st.one_of(append_op, append_op, commit_op, rollback_op), max_size=30))
def test_any_history_keeps_committed_slots_equal_to_a_fresh_prefill(target, ops):
    """Random appends of 1..4 tokens, commits of n <= pending, rollbacks, and overflowing
    appends (refused, cache untouched): after each step the committed part equals a fresh
    prefill of the committed tokens, and every written slot equals a prefill of all written."""
    cache = target.new_cache(capacity=40)  # small, so that overflow attempts happen
    committed: list[int] = []
    pending: list[int] = []
    for op, arg in ops:
        if op == "append":
            if len(committed) + len(pending) + len(arg) > cache.capacity:
                snap = snapshot(cache)
                with pytest.raises(ValueError, match="KV cache full"):
                    target.forward(arg, cache)
                assert_unchanged(cache, snap)
                continue
            logits = target.forward(arg, cache)
            full = target.forward(committed + pending + arg)
            assert_close_scaled(logits, full[-len(arg) :], "append logits")
            pending += arg
        elif op == "commit":
            n = int(round(arg * len(pending)))
            cache.commit(n)
            committed += pending[:n]
            pending = pending[n:]  # still temporary, until a rollback
        else:
            cache.rollback()
            pending = []
        assert (cache.length, cache.pending) == (len(committed), len(pending))
        assert_cache_is_prefill(target, cache, committed)
        assert_written_is_prefill(target, cache, committed + pending)


# ---------------------------------------------------------------- invariant, speculative rounds


class CheckingDrafter(ModelDrafter):
    """A ModelDrafter that checks both caches against fresh prefills at every round."""

    def __init__(self, model, recording: RecordingGPT, target) -> None:
        super().__init__(model)
        self.recording = recording  # handed to speculative_generate: exposes its cache
        self.target = target  # the same weights, for reference prefills
        self.rounds = 0
        self.t_cache = None
        self.context = None
        self.draft = None

    def propose(self, context, k, sampling, rng):
        first = self.rounds == 0
        if first:  # speculative_generate made its cache just before the first proposal
            self.t_cache = self.recording.caches[-1]
        t_cache = self.t_cache
        # between rounds: everything committed, nothing temporary, prefixes of the context
        assert t_cache.pending == 0
        # the prefill cached the prompt minus its last token: from round 1 on, the target
        # lacks exactly the context's last token
        assert t_cache.length == len(context) - 1
        assert_cache_is_prefill(self.target, t_cache, context[: t_cache.length], "target")
        # the draft lags by one token, or by two after a round that accepted all k drafts
        assert self.cache.length in (
            (len(context) - 1,) if first else (len(context) - 1, len(context) - 2)
        )
        assert_cache_is_prefill(self.model, self.cache, context[: self.cache.length], "draft")
        draft = super().propose(context, k, sampling, rng)
        # during the round: the drafter fed the context and d_1 .. d_{k-1}, all temporary
        if k > 0:
            written = list(context) + list(draft.tokens[: k - 1])
            assert_written_is_prefill(self.model, self.cache, written, "draft written")
        else:
            assert self.cache.pending == 0
        self.rounds += 1
        self.context, self.draft = list(context), draft
        return draft


def checking_verify(drafter: CheckingDrafter):
    def verify_fn(p, q, tokens, rng):
        # the target's one pass wrote the uncached context and all k drafts, as temporaries
        t_cache = drafter.t_cache
        written = drafter.context + list(tokens)
        assert_written_is_prefill(drafter.target, t_cache, written, "target written")
        return verify(p, q, tokens, rng)

    return verify_fn


SAMPLINGS = {
    "greedy": GREEDY,
    "T=1": SamplingParams(),
    "T=0.8,top-k=5,top-p=0.9": SamplingParams(temperature=0.8, top_k=5, top_p=0.9),
}


@pytest.mark.parametrize("sampling", list(SAMPLINGS.values()), ids=list(SAMPLINGS))
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("eos_id", [None, 6])
@pytest.mark.parametrize("self_draft", [False, True], ids=["draft-model", "self-draft"])
def test_both_caches_equal_a_fresh_prefill_after_every_round(
    target, draft, sampling, k, eos_id, self_draft
):
    """The invariant through real speculative rounds, for the target and the draft caches,
    including catch-up after all-accepted rounds and the k = 0 last round."""
    recording = RecordingGPT(target)
    drafter = CheckingDrafter(target if self_draft else draft, recording, target)
    for seed, prompt in enumerate([[3], [1, 4, 1, 5], [9, 2, 6, 5, 3, 5, 8]]):
        result = speculative_generate(
            recording,
            drafter,
            prompt,
            k=k,
            max_new_tokens=17,
            rng=np.random.default_rng(seed),
            sampling=sampling,
            eos_id=eos_id,
            verify_fn=checking_verify(drafter),
        )
        assert drafter.rounds == result.stats.rounds  # every round was checked
        # after the last round: the target committed the context and the accepted drafts
        n = result.stats.accepted_per_round[-1]
        final = drafter.context + list(drafter.draft.tokens[:n])
        assert_cache_is_prefill(target, drafter.t_cache, final, "final target")
        d_len = drafter.cache.length
        assert_cache_is_prefill(drafter.model, drafter.cache, final[:d_len], "final draft")
        drafter.rounds = 0
    if self_draft and sampling is GREEDY:
        assert result.stats.acceptance_rate == 1.0  # so catch-up rounds did happen

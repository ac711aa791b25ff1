"""Ragged batches (reference/batch.py): B sequences with different prompts, different accepted
counts per round and different finish times, verified by ONE target pass per round.

Everything is held against the single-sequence reference: each row's logits against
`GPT.forward`, each row's cache slots against a fresh prefill (docs/kv-cache.md,
'The invariant'), each sequence's
greedy tokens against `generate` and `speculative_generate`.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference import (
    BatchKVCache,
    ModelDrafter,
    SamplingParams,
    batched_forward,
    batched_round,
    generate,
    new_batch_cache,
    probabilities,
    speculative_generate,
    speculative_generate_batch,
)
from reference.batch import batched_prefill, pad_right
from reference.drafters import Drafter

from .helpers import (
    GREEDY,
    assert_cache_is_prefill,
    assert_close_scaled,
    prefill_cache,
)

SOFT = SamplingParams(temperature=1.0)
RNG = np.random.default_rng
# prompts of different lengths, one of a single token (its prefill feeds nothing)
PROMPTS = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10, 11, 12], [13, 14]]
MAX_NEW = 13  # 13 % (k + 1) != 0 for k in 1..5: every sequence ends on a short round


def batch_snapshot(cache: BatchKVCache):
    return cache.length.copy(), cache.pending.copy(), cache.k.copy(), cache.v.copy()


def assert_batch_unchanged(cache: BatchKVCache, snap) -> None:
    """Pointers and every slot of every row exactly as before."""
    length, pending, k, v = snap
    np.testing.assert_array_equal(cache.length, length)
    np.testing.assert_array_equal(cache.pending, pending)
    np.testing.assert_array_equal(cache.k, k)
    np.testing.assert_array_equal(cache.v, v)


def assert_row_written_is_prefill(model, cache: BatchKVCache, b: int, tokens) -> None:
    """Row b's committed + temporary slots hold what a prefill of those tokens writes."""
    assert cache.end[b] == len(tokens), f"row {b}: end {cache.end[b]} != {len(tokens)} tokens"
    ref = prefill_cache(model, tokens)
    n = len(tokens)
    assert_close_scaled(cache.k[b, :, :, :n], ref.k[:, :, :n], f"row {b} written keys")
    assert_close_scaled(cache.v[b, :, :, :n], ref.v[:, :, :n], f"row {b} written values")


def feed(model, cache, rows):
    """batched_forward over ragged token lists; returns the logits [B, T, V]."""
    tokens, n_new = pad_right([np.asarray(r, dtype=np.int64) for r in rows])
    return batched_forward(model, tokens, n_new, cache)


def assert_rows_match_single(model, logits, histories, rows) -> None:
    """Row b's real logits equal the single-sequence forward of its whole history."""
    for b, (history, new) in enumerate(zip(histories, rows, strict=True)):
        if new:
            full = model.forward(list(history) + list(new))
            assert_close_scaled(logits[b, : len(new)], full[-len(new) :], f"row {b} logits")
        assert np.all(np.isnan(logits[b, len(new) :])), f"row {b}: padding logits not NaN"


# ---------------------------------------------------------------- the cache, row by row


def test_pointers_move_per_row(target):
    """A ragged write marks n_new[b] temporary slots in row b; commit(n) keeps n[b] of them
    in row b (the rest stay temporary); rollback() drops every row's temporary slots."""
    cache = new_batch_cache(target, 3)
    feed(target, cache, [[1, 2, 3], [4], []])
    np.testing.assert_array_equal(cache.length, [0, 0, 0])
    np.testing.assert_array_equal(cache.pending, [3, 1, 0])
    cache.commit([2, 0, 0])
    np.testing.assert_array_equal(cache.length, [2, 0, 0])
    np.testing.assert_array_equal(cache.pending, [1, 1, 0])  # still temporary
    cache.rollback()
    np.testing.assert_array_equal(cache.end, [2, 0, 0])
    feed(target, cache, [[5], [6, 7], [8, 9, 10]])
    cache.commit(np.array([1, 2, 3]))
    np.testing.assert_array_equal(cache.length, [3, 2, 3])
    for b, tokens in enumerate([[1, 2, 5], [6, 7], [8, 9, 10]]):
        assert_cache_is_prefill(target, cache.row(b), tokens, f"row {b}")


def test_row_is_a_view_of_the_slots_with_copied_pointers(target):
    """row(b) reads row b's slots without copying them and reports its pointers."""
    cache = new_batch_cache(target, 2)
    feed(target, cache, [[1, 2], [3, 4, 5]])
    cache.commit([1, 3])
    row = cache.row(1)
    assert (row.length, row.pending, row.capacity) == (3, 0, cache.capacity)
    assert np.shares_memory(row.k, cache.k) and np.shares_memory(row.v, cache.v)
    assert (cache.row(0).length, cache.row(0).pending) == (1, 1)


def test_commit_and_rollback_never_copy_the_buffers(target):
    """As in a single cache, only pointers move."""
    cache = new_batch_cache(target, 2)
    k_obj, v_obj = cache.k, cache.v
    feed(target, cache, [[1, 2, 3], [4]])
    cache.commit([1, 1])
    cache.rollback()
    cache.reset()
    assert cache.k is k_obj and cache.v is v_obj
    np.testing.assert_array_equal(cache.end, [0, 0])


BAD_COUNTS = [
    pytest.param([4, 0, 0], ValueError, r"n\[0\] must be in 0\.\.3", id="above-pending"),
    pytest.param([0, 2, 0], ValueError, r"n\[1\] must be in 0\.\.1", id="above-pending-row1"),
    pytest.param([0, 0, -1], ValueError, r"n\[2\] must be in 0\.\.0", id="negative"),
    pytest.param([1, 1], ValueError, r"shape \(3,\)", id="too-few"),
    pytest.param(2, ValueError, r"shape \(3,\)", id="scalar"),
    pytest.param([1.0, 0.0, 0.0], TypeError, "one int per sequence", id="floats"),
    pytest.param([True, False, False], TypeError, "one int per sequence", id="bools"),
]


@pytest.mark.parametrize("n, error, message", BAD_COUNTS)
def test_commit_refuses_bad_counts_and_changes_nothing(target, n, error, message):
    """commit(n) needs one int per row in 0..pending[b]; the error names the row."""
    cache = new_batch_cache(target, 3)
    feed(target, cache, [[1, 2, 3], [4], []])
    snap = batch_snapshot(cache)
    with pytest.raises(error, match=message):
        cache.commit(n)
    assert_batch_unchanged(cache, snap)


def test_cache_sizes_are_checked():
    """No sequence or no slot is a configuration error; so is a cache beyond n_ctx."""
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        BatchKVCache(0, 1, 1, 2, 4)
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        BatchKVCache(2, 1, 1, 2, 0)


def test_a_cache_beyond_the_context_is_refused(target):
    with pytest.raises(ValueError, match="exceeds the model's n_ctx"):
        new_batch_cache(target, 2, capacity=target.config.n_ctx + 1)


# ---------------------------------------------------------------- batched_forward


def test_ragged_prefill_decode_and_appends_match_single_sequences(target):
    """Prefill of different lengths (one empty), a one-token decode in every row, then
    appends of 0..4 tokens: row b always equals the single-sequence forward of its tokens."""
    cache = new_batch_cache(target, 3)
    histories: list[list[int]] = [[], [], []]
    for rows in (
        [[1, 2, 3, 4, 5], [6], []],  # prefill, ragged, one row empty
        [[7], [8], [9]],  # decode
        [[10, 11], [], [12, 13, 14, 15]],  # appends of different lengths
        [[0], [1, 2, 3, 4], [5]],
    ):
        logits = feed(target, cache, rows)
        assert logits.shape == (3, max(map(len, rows)), target.n_vocab)
        assert_rows_match_single(target, logits, histories, rows)
        cache.commit([len(r) for r in rows])
        histories = [h + r for h, r in zip(histories, rows, strict=True)]
    for b, tokens in enumerate(histories):
        assert_cache_is_prefill(target, cache.row(b), tokens, f"row {b}")


def test_padding_writes_nothing_and_is_not_read(target):
    """Padding may be any int (even out of the vocabulary): its slots stay untouched, its
    logits are NaN, and the real rows do not depend on it."""
    cache = new_batch_cache(target, 2)
    tokens = np.array([[1, 2, -7, 999], [3, 4, 5, 6]])
    logits = batched_forward(target, tokens, [2, 4], cache)
    assert np.all(cache.k[0, :, :, 2:] == 0) and np.all(cache.v[0, :, :, 2:] == 0)
    assert np.all(np.isnan(logits[0, 2:])) and not np.any(np.isnan(logits[1]))
    other = new_batch_cache(target, 2)
    again = batched_forward(target, np.array([[1, 2, 0, 0], [3, 4, 5, 6]]), [2, 4], other)
    np.testing.assert_array_equal(logits[0, :2], again[0, :2])


def test_a_batch_with_nothing_new_changes_nothing(target):
    """n_new = 0 everywhere (every sequence finished): NaN rows, no write, no pointer move."""
    cache = new_batch_cache(target, 2)
    logits = batched_forward(target, np.zeros((2, 3), dtype=np.int64), [0, 0], cache)
    assert logits.shape == (2, 3, target.n_vocab) and np.all(np.isnan(logits))
    np.testing.assert_array_equal(cache.end, [0, 0])
    assert not cache.k.any()


# the property test drives 3 rows at once: appends of 0..4 tokens per row, joint commits
# of n[b] <= pending[b], joint rollbacks, and appends that overflow some row's capacity
ROWS = 3
append_op = st.tuples(
    st.just("append"),
    st.lists(st.lists(st.integers(0, 15), max_size=4), min_size=ROWS, max_size=ROWS),
)
commit_op = st.tuples(st.just("commit"), st.lists(st.floats(0, 1), min_size=ROWS, max_size=ROWS))
rollback_op = st.tuples(st.just("rollback"), st.none())


@settings(deadline=None, max_examples=30, derandomize=True)  # fixed examples
@given(
    ops=st.lists(st.one_of(append_op, append_op, commit_op, rollback_op), min_size=10, max_size=25)
)
def test_any_ragged_history_keeps_every_row_equal_to_a_fresh_prefill(target, ops):
    """After each step of any history, row b's committed slots equal a fresh prefill of its
    committed tokens, its written slots a prefill of everything it wrote, and each append's
    real logits the single-sequence forward; an overflowing append changes nothing."""
    cache = new_batch_cache(target, ROWS, capacity=12)  # small: overflows happen
    committed: list[list[int]] = [[] for _ in range(ROWS)]
    pending: list[list[int]] = [[] for _ in range(ROWS)]
    for op, arg in ops:
        if op == "append":
            sizes = [
                len(c) + len(p) + len(a) for c, p, a in zip(committed, pending, arg, strict=True)
            ]
            if max(sizes) > cache.capacity:
                snap = batch_snapshot(cache)
                with pytest.raises(ValueError, match="KV cache row . full"):
                    feed(target, cache, arg)
                assert_batch_unchanged(cache, snap)
                continue
            logits = feed(target, cache, arg)
            histories = [c + p for c, p in zip(committed, pending, strict=True)]
            assert_rows_match_single(target, logits, histories, arg)
            pending = [p + a for p, a in zip(pending, arg, strict=True)]
        elif op == "commit":
            n = [int(round(f * len(p))) for f, p in zip(arg, pending, strict=True)]
            cache.commit(n)
            committed = [c + p[:m] for c, p, m in zip(committed, pending, n, strict=True)]
            pending = [p[m:] for p, m in zip(pending, n, strict=True)]
        else:
            cache.rollback()
            pending = [[] for _ in range(ROWS)]
        for b in range(ROWS):
            assert (cache.length[b], cache.pending[b]) == (len(committed[b]), len(pending[b]))
            assert_cache_is_prefill(target, cache.row(b), committed[b], f"row {b}")
            assert_row_written_is_prefill(target, cache, b, committed[b] + pending[b])


BAD_FORWARD = [
    pytest.param(np.array([1, 2, 3]), [1, 1], ValueError, "must be 2-D", id="1-D"),
    pytest.param(
        np.ones((3, 2), dtype=int),
        [1, 1, 1],
        ValueError,
        "3 rows but the cache holds 2",
        id="wrong-B",
    ),
    pytest.param(np.ones((2, 2)), [1, 1], TypeError, "integer token ids", id="float-tokens"),
    pytest.param(
        np.ones((2, 2), dtype=int),
        [1, 3],
        ValueError,
        r"n_new\[1\] must be in 0\.\.2",
        id="n_new-above-T",
    ),
    pytest.param(
        np.ones((2, 2), dtype=int),
        [-1, 1],
        ValueError,
        r"n_new\[0\] must be in",
        id="n_new-negative",
    ),
    pytest.param(np.ones((2, 2), dtype=int), [1], ValueError, r"shape \(2,\)", id="n_new-short"),
    pytest.param(
        np.array([[1, 2], [3, 16]]),
        [2, 2],
        ValueError,
        r"tokens\[1\] contains id 16",
        id="real-token-out-of-vocab",
    ),
    pytest.param(np.ones((2, 30), dtype=int), [30, 1], ValueError, "row 0 full", id="row-overflow"),
]


@pytest.mark.parametrize("tokens, n_new, error, message", BAD_FORWARD)
def test_bad_forward_input_is_refused_before_anything_is_written(
    target, tokens, n_new, error, message
):
    """Each bad input names what is wrong; both rows keep their pointers and slots."""
    cache = new_batch_cache(target, 2, capacity=32)
    feed(target, cache, [[1, 2, 3], [4]])
    cache.commit([2, 1])
    snap = batch_snapshot(cache)
    with pytest.raises(error, match=message):
        batched_forward(target, tokens, n_new, cache)
    assert_batch_unchanged(cache, snap)


def test_forward_refuses_a_cache_of_another_kind_or_model(target, small_model):
    """A single-sequence KVCache, or a batch cache made for another model, is refused."""
    with pytest.raises(TypeError, match="cache must be a BatchKVCache"):
        batched_forward(target, np.ones((1, 1), dtype=int), [1], target.new_cache())
    with pytest.raises(ValueError, match="made for another model"):
        batched_forward(target, np.ones((1, 1), dtype=int), [1], new_batch_cache(small_model, 1))


def test_forward_refuses_positions_beyond_the_context(target):
    """A row whose positions would pass n_ctx is named (the cache could hold them)."""
    n_ctx = target.config.n_ctx
    cache = BatchKVCache(2, 2, 2, 8, n_ctx + 8)  # more slots than the model has positions
    with pytest.raises(ValueError, match=f"sequence 1 too long: 0 cached \\+ {n_ctx + 1} new"):
        batched_forward(target, np.ones((2, n_ctx + 1), dtype=int), [1, n_ctx + 1], cache)


# ---------------------------------------------------------------- rounds


def start_batch(target, draft, prompts):
    cache = new_batch_cache(target, len(prompts))
    drafters = [ModelDrafter(draft) for _ in prompts]
    prompts = [np.asarray(p, dtype=np.int64) for p in prompts]
    batched_prefill(target, cache, drafters, prompts)
    return cache, drafters, prompts


def assert_batch_invariant(target, draft, cache, drafters, contexts) -> None:
    """Target row b holds every committed token but the last; drafter b's cache holds a
    prefix of the committed tokens (one or two behind, more after rounds that drafted
    nothing: its catch-up reads them next time); both equal a fresh prefill."""
    for b, (drafter, context) in enumerate(zip(drafters, contexts, strict=True)):
        assert cache.pending[b] == 0 and drafter.cache.pending == 0
        assert_cache_is_prefill(target, cache.row(b), context[:-1], f"target row {b}")
        n = drafter.cache.length
        assert n <= len(context) - 1, f"drafter {b} holds {n} of {len(context)} tokens"
        assert_cache_is_prefill(draft, drafter.cache, context[:n], f"drafter {b}")


@pytest.mark.parametrize("k", [1, 3, 5])
def test_every_round_leaves_every_row_equal_to_a_fresh_prefill(target, draft, k):
    """Sampled rounds with ragged draft lengths (k, fewer, 0) and sequences that finish at
    different rounds: after each round every sequence's caches hold exactly its committed
    tokens, and a finished sequence's row does not move at all."""
    cache, drafters, contexts = start_batch(target, draft, PROMPTS)
    rng = RNG(k)
    finish_after = [3, 1, 8, 5]  # rounds each sequence runs
    seen_all_accepted = seen_rejection = False
    for r in range(8):
        k_rounds = [None if r >= f else int(rng.integers(0, k + 1)) for f in finish_after]
        before = cache.length.copy()
        rounds = batched_round(target, cache, drafters, contexts, k_rounds, SOFT, rng)
        for b, rnd in enumerate(rounds):
            if rnd is None:
                assert k_rounds[b] is None and cache.length[b] == before[b]
                continue
            v = rnd.verification
            assert rnd.k == k_rounds[b]
            assert rnd.target_cache.before == before[b]
            assert rnd.target_cache.written == before[b] + rnd.n_catch_up + rnd.k
            assert rnd.target_cache.after == before[b] + rnd.n_catch_up + v.accepted
            seen_all_accepted |= rnd.k > 0 and v.accepted == rnd.k
            seen_rejection |= v.accepted < rnd.k
            emitted = np.asarray(v.emitted(rnd.draft.tokens), dtype=np.int64)
            contexts[b] = np.concatenate([contexts[b], emitted])
        assert_batch_invariant(target, draft, cache, drafters, contexts)
    assert seen_all_accepted and seen_rejection  # both verify paths, and the catch-up


def test_one_round_feeds_each_row_its_catch_up_and_its_drafts(target, draft):
    """The verification pass of row b is [catch-up of b, drafts of b]: its p rows equal the
    target's single-sequence rows after context_b, context_b + x_1, ..."""
    cache, drafters, contexts = start_batch(target, draft, PROMPTS)
    rounds = batched_round(target, cache, drafters, contexts, [2, 0, 3, 1], SOFT, RNG(0))
    for b, rnd in enumerate(rounds):
        assert rnd.n_catch_up == 1
        x = list(rnd.draft.tokens)
        full = target.forward(list(contexts[b]) + x)  # rows after context, + x_1, ...
        expected = probabilities(full[len(contexts[b]) - 1 :], SOFT)
        assert_close_scaled(rnd.p, expected, f"row {b} p")


# ---------------------------------------------------------------- the loop, greedy


def greedy_tokens(target, prompt, eos_id=None) -> list[int]:
    return generate(
        target, prompt, max_new_tokens=MAX_NEW, rng=RNG(0), sampling=GREEDY, eos_id=eos_id
    )


def batch_run(target, draft, prompts, k, sampling=GREEDY, seed=0, eos_id=None, max_new=MAX_NEW):
    return speculative_generate_batch(
        target,
        [ModelDrafter(draft) for _ in prompts],
        prompts,
        k=k,
        max_new_tokens=max_new,
        rng=RNG(seed),
        sampling=sampling,
        eos_id=eos_id,
    )


GREEDY_PROMPTS = [list(RNG(7).integers(0, 16, n)) for n in (1, 4, 2, 8, 5, 3)]


@pytest.mark.parametrize("k", range(1, 6))
def test_greedy_batch_equals_each_sequence_alone(target, draft, k):
    """Greedy: every sequence of the batch emits the target's greedy tokens, and its rounds
    accept exactly what the single-sequence loop accepts (the drafts are argmaxes too)."""
    results = batch_run(target, draft, GREEDY_PROMPTS, k)
    assert len(results) == len(GREEDY_PROMPTS)
    accepted = rejected = 0
    for prompt, result in zip(GREEDY_PROMPTS, results, strict=True):
        alone = speculative_generate(
            target,
            ModelDrafter(draft),
            prompt,
            k=k,
            max_new_tokens=MAX_NEW,
            rng=RNG(0),
            sampling=GREEDY,
        )
        assert result.tokens == greedy_tokens(target, prompt) == alone.tokens
        assert result.stats.accepted_per_round == alone.stats.accepted_per_round
        assert result.stats.drafted_per_round == alone.stats.drafted_per_round
        assert result.stats.stop_reason == "length" and result.stats.emitted == MAX_NEW
        accepted += result.stats.accepted
        rejected += result.stats.rejections
    assert accepted > 0 and rejected > 0
    # ragged: the sequences did not all take the same number of rounds
    assert len({r.stats.rounds for r in results}) > 1 or k == 1


def eos_some_sequences_hit(target) -> int:
    """A token that ends some greedy sequences early and never appears in the others."""
    outputs = [greedy_tokens(target, p) for p in GREEDY_PROMPTS]
    for token in range(16):
        hits = [token in out[:-1] for out in outputs]  # stops strictly before the limit
        misses = [token not in out for out in outputs]
        if sum(hits) >= 2 and sum(misses) >= 2:
            return token
    raise AssertionError("no EOS id splits these prompts; pick other prompts")


@pytest.mark.parametrize("k", [1, 2, 4])
def test_greedy_batch_with_eos_ends_sequences_at_different_times(target, draft, k):
    """With an EOS id some sequences emit, those stop early ("eos") while the others run to
    the limit ("length"); every sequence still equals `generate` with that EOS."""
    eos = eos_some_sequences_hit(target)
    results = batch_run(target, draft, GREEDY_PROMPTS, k, eos_id=eos)
    reasons = [r.stats.stop_reason for r in results]
    assert "eos" in reasons and "length" in reasons
    for prompt, result in zip(GREEDY_PROMPTS, results, strict=True):
        assert result.tokens == greedy_tokens(target, prompt, eos_id=eos)
        assert result.stats.emitted == len(result.tokens)
        assert (result.tokens[-1] == eos) == (result.stats.stop_reason == "eos")


@pytest.mark.parametrize("max_new", [1, 2, 5])
def test_short_budgets(target, draft, max_new):
    """max_new_tokens below k + 1: rounds draft min(k, remaining - 1), down to 0 drafts."""
    results = batch_run(target, draft, GREEDY_PROMPTS[:3], k=4, max_new=max_new)
    for prompt, result in zip(GREEDY_PROMPTS[:3], results, strict=True):
        assert result.tokens == greedy_tokens(target, prompt)[:max_new]
        assert max(result.stats.drafted_per_round) <= max_new - 1


# ---------------------------------------------------------------- the loop, sampled


@pytest.mark.parametrize(
    "sampling",
    [SOFT, SamplingParams(0.8, top_k=5), SamplingParams(1.3, top_p=0.9)],
    ids=lambda s: s.describe(),
)
def test_a_batch_of_one_reproduces_speculative_generate(target, draft, sampling):
    """With B = 1 the generator is read in `speculative_generate`'s order (draft, then
    verify), so the same seed gives the same tokens and the same accepted counts."""
    for seed in range(4):
        (batch,) = batch_run(target, draft, [PROMPTS[2]], k=3, sampling=sampling, seed=seed)
        alone = speculative_generate(
            target,
            ModelDrafter(draft),
            PROMPTS[2],
            k=3,
            max_new_tokens=MAX_NEW,
            rng=RNG(seed),
            sampling=sampling,
        )
        assert batch.tokens == alone.tokens
        assert batch.stats.accepted_per_round == alone.stats.accepted_per_round


def test_a_sampled_batch_is_reproducible_and_its_stats_add_up(target, draft):
    """The same seed gives the same batch; each sequence's statistics describe its run."""
    first = batch_run(target, draft, PROMPTS, k=3, sampling=SOFT, seed=5, eos_id=3)
    again = batch_run(target, draft, PROMPTS, k=3, sampling=SOFT, seed=5, eos_id=3)
    assert [r.tokens for r in first] == [r.tokens for r in again]
    for r in first:
        s = r.stats
        assert s.emitted == len(r.tokens) <= MAX_NEW
        assert s.rounds == len(s.accepted_per_round) and s.accepted == sum(s.accepted_per_round)
        assert s.stop_reason in ("eos", "length")
        assert (s.stop_reason == "eos") == (r.tokens[-1] == 3)
        assert 3 not in r.tokens[:-1]


# ---------------------------------------------------------------- bad input to the loop


class NoVocab(Drafter):
    """A drafter over another vocabulary (the protocol's stubs: nothing else is reached)."""

    n_vocab, n_ctx = 12, 64


@pytest.fixture
def busy_drafters(draft):
    """Two drafters mid-way through a run: a refused call must leave their caches alone."""
    drafters = [ModelDrafter(draft), ModelDrafter(draft)]
    for d in drafters:
        d.propose(np.array([1, 2, 3]), 3, SOFT, RNG(0))
        d.commit(1)
    return drafters


BAD_LOOP = [
    pytest.param(dict(prompts=[]), ValueError, "at least one prompt", id="no-prompts"),
    pytest.param(dict(prompts="ab"), TypeError, "list of token lists", id="str-prompts"),
    pytest.param(
        dict(prompts=[[1], []]), ValueError, r"prompts\[1\] must not be empty", id="empty-prompt"
    ),
    pytest.param(
        dict(prompts=[[1], [16]]), ValueError, r"prompts\[1\] contains id 16", id="bad-id"
    ),
    pytest.param(
        dict(prompts=[[1], [2], [3]]),
        ValueError,
        "got 2 drafters for 3 prompts",
        id="too-few-drafters",
    ),
    pytest.param(
        dict(drafters="same"), ValueError, r"drafters\[1\] is the same object", id="shared-drafter"
    ),
    pytest.param(dict(drafters="vocab"), ValueError, r"drafters\[1\] has 12", id="vocab"),
    pytest.param(
        dict(prompts=[[1], [2] * 60]), ValueError, r"target \(prompts\[1\]\)", id="too-long"
    ),
    pytest.param(dict(k=0), ValueError, "k must be >= 1", id="k-0"),
    pytest.param(dict(max_new_tokens=0), ValueError, "max_new_tokens must be >= 1", id="max-0"),
    pytest.param(dict(rng=0), TypeError, r"rng must be a numpy\.random\.Generator", id="rng"),
    pytest.param(dict(sampling=0.5), TypeError, "sampling must be a SamplingParams", id="sampling"),
    pytest.param(dict(eos_id=16), ValueError, r"eos_id must be in 0\.\.15", id="eos"),
]


@pytest.mark.parametrize("change, error, message", BAD_LOOP)
def test_bad_loop_input_is_refused_before_any_cache_moves(
    target, busy_drafters, change, error, message
):
    """Every check runs before any drafter is reset: their caches stay as they were."""
    kwargs = dict(
        prompts=[[1, 2], [3]], k=2, max_new_tokens=6, rng=RNG(0), sampling=SOFT, eos_id=None
    )
    drafters = busy_drafters
    if change.get("drafters") == "same":
        drafters = [busy_drafters[0], busy_drafters[0]]
    elif change.get("drafters") == "vocab":
        drafters = [busy_drafters[0], NoVocab()]
    kwargs |= {name: value for name, value in change.items() if name != "drafters"}
    snaps = [(d.cache.length, d.cache.pending, d.cache.k.copy()) for d in busy_drafters]
    with pytest.raises(error, match=message):
        speculative_generate_batch(target, drafters, **kwargs)
    for d, (length, pending, k) in zip(busy_drafters, snaps, strict=True):
        assert (d.cache.length, d.cache.pending) == (length, pending)
        np.testing.assert_array_equal(d.cache.k, k)


def test_a_drafter_with_a_short_context_is_named(target, short_model):
    """The length budget is checked against every drafter's own context."""
    drafters = [ModelDrafter(short_model), ModelDrafter(short_model)]
    with pytest.raises(ValueError, match=r"drafters\[0\]'s context of 24"):
        speculative_generate_batch(
            target, drafters, [[1] * 20, [2]], k=2, max_new_tokens=6, rng=RNG(0)
        )


@pytest.mark.parametrize("sampling", [GREEDY, SOFT], ids=lambda s: s.describe())
def test_a_batch_hands_every_drafter_the_targets_state(target, sampling):
    """Extra heads draft from the target's last hidden state, which the batched loop hands
    each row after its prefill and after every round (`observe`), as the single loop does: a
    batch of one reproduces speculative_generate with heads, drafts included."""
    from reference import HeadsDrafter
    from specdec.standins import random_heads

    heads = random_heads(target.config.n_embd, 3, seed=4)
    for seed in range(3):
        (batch,) = speculative_generate_batch(
            target,
            [HeadsDrafter(target, heads)],
            [PROMPTS[1]],
            k=3,
            max_new_tokens=MAX_NEW,
            rng=RNG(seed),
            sampling=sampling,
        )
        alone = speculative_generate(
            target,
            HeadsDrafter(target, heads),
            PROMPTS[1],
            k=3,
            max_new_tokens=MAX_NEW,
            rng=RNG(seed),
            sampling=sampling,
        )
        assert batch.stats.drafted > 0, "the heads never saw the target's state"
        assert batch.tokens == alone.tokens
        assert batch.stats.accepted_per_round == alone.stats.accepted_per_round

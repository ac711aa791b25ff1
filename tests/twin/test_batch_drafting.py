"""Batched drafting in the twin's ragged batch (gpu/device/batch_drafting.py, gpu/batch.py):
every row's draft model steps in one pass, host proposals in one copy, and the same results
as each row drafting with its own drafter."""

from __future__ import annotations

import numpy as np
import pytest

import gpu
import reference
from gpu import batch as twin_batch
from gpu.batch import batch_drafting
from gpu.device.backend import counting_launches, to_host, xp
from gpu.device.batch_drafting import BatchModelDrafter
from gpu.verification import decide, decide_rows
from reference.batch import record_rounds
from reference.lookup import LookupDrafter
from reference.sampling import GREEDY, SamplingParams
from reference.speculative import Run

PROMPTS = [  # ragged: 1 to 60 tokens
    b"def area(self):\n    return self.w",
    b"x",
    b"    for i, line in enumerate(lines):\n        if line.startswith('#'):\n            ",
    b"import os\n",
    b"class A:\n    def __init__(self):\n        self.",
]


def ids(text: bytes) -> np.ndarray:
    return np.frombuffer(text, dtype=np.uint8).astype(np.int64)


def run(target, drafters, prompts, drafting, *, k, max_new_tokens, seed, sampling, eos_id=None):
    # the twin's batched loop with a given drafting -> (results, every round of every row)
    rng, prompts = np.random.default_rng(seed), [ids(p) for p in prompts]
    cache = twin_batch.new_batch_cache(target, len(prompts))
    twin_batch.batched_prefill(target, cache, drafters, prompts, drafting=drafting)
    runs = [Run(prompt, k, max_new_tokens, eos_id, trace=False) for prompt in prompts]
    rounds = []
    while not all(r.finished for r in runs):
        k_rounds = [None if r.finished else r.next_k() for r in runs]
        contexts = [r.context for r in runs]
        rounds.append(
            twin_batch.drafted_round(
                drafting, target, cache, drafters, contexts, k_rounds, sampling, rng
            )
        )
        record_rounds(runs, rounds[-1])
    return [r.result() for r in runs], rounds


def batched(drafters) -> BatchModelDrafter:
    # the rows' drafters drafting together, in a batch cache of their draft model
    model = drafters[0].model
    return BatchModelDrafter(drafters, twin_batch.new_batch_cache(model, len(drafters)))


def both_ways(pair, prompts=PROMPTS, **kw):
    # (batched drafting, row by row) over the same prompts and seed
    target, draft = gpu.GPT(pair[0].config, pair[0].params), pair[1]
    together = [gpu.ModelDrafter(draft) for _ in prompts]
    alone = [gpu.ModelDrafter(draft) for _ in prompts]
    ours = run(target, together, prompts, batched(together), **kw)
    theirs = run(target, alone, prompts, twin_batch.RowDrafting(alone), **kw)
    return ours, theirs


def assert_same_rounds(ours, theirs) -> None:
    assert len(ours) == len(theirs)
    for mine, others in zip(ours, theirs, strict=True):
        for a, b in zip(mine, others, strict=True):
            assert (a is None) == (b is None)
            if a is None:
                continue
            np.testing.assert_array_equal(a.draft.tokens, b.draft.tokens)
            assert (a.verification, a.n_catch_up) == (b.verification, b.n_catch_up)
            assert (a.target_cache, a.draft_cache) == (b.target_cache, b.draft_cache)
            # the draft's q rows to float32 rounding (a padded pass sums more zeros), p exactly
            np.testing.assert_allclose(to_host(a.draft.q), to_host(b.draft.q), rtol=1e-4, atol=1e-6)
            np.testing.assert_array_equal(to_host(a.p), to_host(b.p))


def test_greedy_batched_drafting_equals_the_reference(pair):
    """Ragged prompts (one of a single token), rows that stop at EOS or the length limit at
    different rounds: the reference batch's tokens and accepted counts, round for round."""
    target, draft = pair
    kw = dict(k=4, max_new_tokens=12, sampling=GREEDY, eos_id=10)
    twin = gpu.GPT(target.config, target.params)
    drafters = [gpu.ModelDrafter(draft) for _ in PROMPTS]
    ours, rounds = run(twin, drafters, PROMPTS, batched(drafters), seed=0, **kw)
    theirs = reference.speculative_generate_batch(
        target,
        [reference.ModelDrafter(draft) for _ in PROMPTS],
        [ids(p) for p in PROMPTS],
        rng=np.random.default_rng(0),
        **kw,
    )
    assert [r.tokens for r in ours] == [r.tokens for r in theirs]
    assert [r.stats.accepted_per_round for r in ours] == [
        r.stats.accepted_per_round for r in theirs
    ]
    assert any(rnd is None for rnd in rounds[-1]), "no row finished before the others"


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(temperature=0.8),
        SamplingParams(temperature=1.0, top_k=20),
        SamplingParams(temperature=0.7, top_p=0.9),
    ],
    ids=["temperature", "top-k", "top-p"],
)
def test_sampled_batched_drafting_equals_row_by_row(pair, sampling):
    """Same seed, same uniforms in the same order: the same tokens, drafts, verifications
    and cache spans (target and draft) in every round of every row."""
    (ours, our_rounds), (theirs, their_rounds) = both_ways(
        pair, k=4, max_new_tokens=10, seed=1, sampling=sampling, eos_id=10
    )
    assert [r.tokens for r in ours] == [r.tokens for r in theirs]
    assert_same_rounds(our_rounds, their_rounds)


def test_draft_lengths_that_differ_near_the_length_limit(pair):
    """k_b = min(k, remaining - 1) differs between rows near the limit (0 included: a row
    that drafts nothing feeds nothing); rows finish at different rounds."""
    (ours, our_rounds), (theirs, their_rounds) = both_ways(
        pair, k=5, max_new_tokens=7, seed=3, sampling=SamplingParams(temperature=0.9)
    )
    assert [r.tokens for r in ours] == [r.tokens for r in theirs]
    assert_same_rounds(our_rounds, their_rounds)
    lengths = [{len(r.draft.tokens) for r in rnd if r is not None} for rnd in our_rounds]
    assert any(len(ks) > 1 for ks in lengths), lengths
    assert any(0 in ks for ks in lengths), lengths
    assert any(rnd is None for rnds in our_rounds for rnd in rnds)


def test_who_drafts():
    """Batched only for the twin's ModelDrafters of one draft model, without min_confidence,
    with enough rows; any other mix keeps each row's own drafter."""
    cfg = gpu.GPTConfig(n_vocab=16, n_ctx=16, n_embd=8, n_head=2, n_layer=1)
    model = gpu.GPT(cfg, gpu.init_params(cfg, np.random.default_rng(0)))
    other = gpu.GPT(cfg, gpu.init_params(cfg, np.random.default_rng(1)))

    class Subclass(gpu.ModelDrafter):
        pass

    same = [gpu.ModelDrafter(model) for _ in range(3)]
    assert isinstance(batch_drafting(same, from_rows=2), BatchModelDrafter)
    assert isinstance(batch_drafting(same, from_rows=4), twin_batch.RowDrafting)
    for odd in (
        gpu.ModelDrafter(other),
        gpu.ModelDrafter(model, min_confidence=0.5),
        Subclass(model),
        LookupDrafter(16, 16),
    ):
        assert isinstance(batch_drafting(same + [odd], from_rows=2), twin_batch.RowDrafting)


def test_decide_rows_is_decide_on_every_row():
    """Ragged rows (k_b = 0..K) padded to K: each row's (n, token) is `decide`'s on that row
    alone, unpadded (test_twin_loop.py holds `decide` to the reference's walk)."""
    rng = np.random.default_rng(7)
    B, K, V = 6, 4, 9
    p = rng.dirichlet(np.ones(V) * 0.5, size=(B, K + 1)).astype(np.float32)
    q = rng.dirichlet(np.ones(V) * 0.5, size=(B, K)).astype(np.float32)
    tokens = np.array(
        [[rng.choice(V, p=q[b, i] / q[b, i].sum()) for i in range(K)] for b in range(B)]
    )
    u = rng.random((B, K + 1))
    k = np.array([0, 1, 2, 3, 4, 4])
    u[np.arange(B), k] = rng.random(B)  # row b's last uniform sits at k_b
    rows = to_host(decide_rows_on_device(p, q, tokens, u, k))
    for b in range(B):
        kb = k[b]
        one = decide(
            xp.asarray(p[b, : kb + 1]),
            xp.asarray(q[b, :kb]),
            xp.asarray(tokens[b, :kb]),
            xp.asarray(u[b, : kb + 1]),
        )
        np.testing.assert_array_equal(rows[b], to_host(one))


def decide_rows_on_device(p, q, tokens, u, k):
    return decide_rows(*(xp.asarray(a) for a in (p, q, tokens, u, k)))


def per_round(B: int, pair, strict: bool = False) -> float:
    # device operations per batched round, B rows of short prompts, greedy, k = 5
    with counting_launches(strict=strict):
        target = gpu.GPT(pair[0].config, pair[0].params)
        draft = gpu.GPT(pair[1].config, pair[1].params)
        prompts = [ids(PROMPTS[b % 2 * 3])[:8] for b in range(B)]  # 8 tokens each
        with counting_launches() as log:
            results = gpu.speculative_generate_batch(
                target,
                [gpu.ModelDrafter(draft) for _ in prompts],
                prompts,
                k=5,
                max_new_tokens=8,
                rng=np.random.default_rng(0),
                sampling=GREEDY,
            )
    return log.count / max(r.stats.rounds for r in results)


def test_a_round_of_64_rows_costs_at_most_3x_a_round_of_one(pair):
    """The draft model steps once for all rows, the cache writes are one scatter, every row
    is verified at once: a batched round's device operations barely grow with B."""
    one, many = per_round(1, pair), per_round(64, pair)
    assert many <= 3 * one, (one, many)


def test_lookup_drafts_of_a_batch_go_over_in_one_copy(pair):
    """Host drafters (prompt lookup): every row's proposal is found on the host, then all
    of them are copied over together -- one copy for the tokens, one for the q rows."""
    V, N = pair[0].n_vocab, pair[0].config.n_ctx
    contexts = [ids(p) for p in PROMPTS] * 2  # 10 rows; most find an earlier match
    with counting_launches() as log:
        drafting = twin_batch.RowDrafting([LookupDrafter(V, N) for _ in contexts])
        drafts = drafting.propose(contexts, [3] * 10, GREEDY, np.random.default_rng(0), V)
    assert (drafts.k > 0).sum() > 1
    assert log.by_name["to_device"] == 2 and log.count == 2, log.by_name


def test_lookup_batch_equals_the_reference_and_copies_once_per_round(pair):
    """End to end: the reference's tokens, and the round's host -> device copies do not
    grow with the number of rows."""
    target, _ = pair
    V, N = target.n_vocab, target.config.n_ctx
    prompts = [ids(p) for p in PROMPTS]
    kw = dict(k=3, max_new_tokens=8, sampling=GREEDY, eos_id=10)

    def copies_per_round(rows):
        with counting_launches(strict=True):
            twin = gpu.GPT(target.config, target.params)
            with counting_launches() as log:
                results = gpu.speculative_generate_batch(
                    twin,
                    [LookupDrafter(V, N) for _ in rows],
                    rows,
                    rng=np.random.default_rng(0),
                    **kw,
                )
        return results, log.by_name["to_device"] / max(r.stats.rounds for r in results)

    ours, many = copies_per_round(prompts)
    theirs = reference.speculative_generate_batch(
        target, [LookupDrafter(V, N) for _ in prompts], prompts, rng=np.random.default_rng(0), **kw
    )
    assert [r.tokens for r in ours] == [r.tokens for r in theirs]
    _, one = copies_per_round(prompts[:1])
    assert many <= one + 1, (one, many)


def test_batched_drafting_makes_no_hidden_sync(pair):
    """Strict stand-in: the batched drafter, sampled with top-k and top-p, never turns a
    device value into a host value behind the loop's back."""
    with counting_launches(strict=True):
        target = gpu.GPT(pair[0].config, pair[0].params)
        draft = gpu.GPT(pair[1].config, pair[1].params)
        drafters = [gpu.ModelDrafter(draft) for _ in PROMPTS]
        run(
            target,
            drafters,
            PROMPTS,
            batched(drafters),
            k=3,
            max_new_tokens=6,
            seed=0,
            sampling=SamplingParams(temperature=0.9, top_k=30, top_p=0.95),
            eos_id=10,
        )

"""SpeculativeStats bookkeeping, RoundTrace fields, stop reasons, length and EOS cuts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reference import ModelDrafter, SamplingParams, SpeculativeStats, speculative_generate
from reference.speculative import ACCEPTED, REJECTED

from .helpers import GREEDY, speculative_run

SOFT = SamplingParams(temperature=1.0)


def run(target, draft, prompt, *, k, max_new_tokens, seed, sampling=SOFT, eos_id=None, trace=True):
    return speculative_run(
        target,
        ModelDrafter(draft),
        prompt,
        k=k,
        max_new_tokens=max_new_tokens,
        seed=seed,
        sampling=sampling,
        eos_id=eos_id,
        trace=trace,
    )


# ---------------------------------------------------------------- SpeculativeStats alone


def test_record_counts_rounds_drafts_and_acceptances():
    """Three hand-made rounds with k = 3: every counter and derived rate, exactly."""
    s = SpeculativeStats(k=3)
    s.record(3, 1)  # x1 accepted, x2 rejected, x3 never examined
    s.record(3, 3)  # all accepted (bonus)
    s.record(2, 0)  # a short last round: x1 rejected
    s.emitted = 2 + 4 + 1
    assert (s.rounds, s.drafted, s.accepted, s.rejections) == (3, 8, 4, 2)
    assert s.accepted_per_round == [1, 3, 0]
    np.testing.assert_array_equal(s.reached, [3, 2, 1])
    np.testing.assert_array_equal(s.accepted_at, [2, 1, 1])
    np.testing.assert_allclose(s.per_position_acceptance, [2 / 3, 1 / 2, 1.0])
    np.testing.assert_array_equal(s.accepted_histogram, [0, 1, 0, 1])  # full rounds only
    assert s.drafted_per_round == [3, 3, 2]
    assert s.acceptance_rate == 4 / 8
    assert s.alpha == 4 / (4 + 2)  # examined positions: accepted ones + the rejected ones
    assert s.mean_tokens_per_round == 7 / 3


def test_bonus_only_round_counts_a_round_but_no_draft():
    """k_round = 0 (one token left): a target pass, nothing drafted, nothing examined."""
    s = SpeculativeStats(k=2)
    s.record(0, 0)
    assert (s.rounds, s.drafted, s.accepted, s.rejections) == (1, 0, 0, 0)
    np.testing.assert_array_equal(s.reached, [0, 0])
    assert math.isnan(s.acceptance_rate) and math.isnan(s.alpha)
    assert np.all(np.isnan(s.per_position_acceptance))


def test_empty_stats_are_nan_not_zero_division():
    """Before any round the rates are undefined (NaN), not an exception."""
    s = SpeculativeStats(k=4)
    assert math.isnan(s.acceptance_rate) and math.isnan(s.alpha)
    assert math.isnan(s.mean_tokens_per_round)
    assert s.reached.shape == (4,) and s.accepted_histogram.shape == (5,)


# ---------------------------------------------------------------- stats of real runs


@pytest.mark.parametrize("k", [1, 2, 4, 6])
def test_stats_agree_with_the_trace(target, draft, k):
    """Every statistic recomputed from the per-round trace gives the same number."""
    for seed in range(6):
        res = run(target, draft, [seed, 3, 1], k=k, max_new_tokens=20, seed=seed)
        s, tr = res.stats, res.trace
        k_rounds = [len(r.draft_tokens) for r in tr]
        acc = [r.accepted for r in tr]
        assert s.k == k and s.rounds == len(tr)
        assert s.drafted == sum(k_rounds) and s.accepted == sum(acc)
        assert s.accepted_per_round == acc
        assert s.rejections == sum(a < kr for a, kr in zip(acc, k_rounds, strict=True))
        assert s.emitted == len(res.tokens) == sum(len(r.emitted) for r in tr)
        assert res.tokens == [t for r in tr for t in r.emitted]
        # per position, from the fate each draft got in the trace (not from the counters'
        # own formula): examined = accepted or rejected, never-examined drafts left out
        reached, acc_at = np.zeros(k, int), np.zeros(k, int)
        for r in tr:
            for i, fate in enumerate(r.draft_fates):
                reached[i] += fate in (ACCEPTED, REJECTED)
                acc_at[i] += fate == ACCEPTED
        np.testing.assert_array_equal(s.reached, reached)
        np.testing.assert_array_equal(s.accepted_at, acc_at)
        full = [a for a, kr in zip(acc, k_rounds, strict=True) if kr == k]
        np.testing.assert_array_equal(s.accepted_histogram, np.bincount(full, minlength=k + 1))
        assert s.acceptance_rate == s.accepted / s.drafted
        assert s.mean_tokens_per_round == s.emitted / s.rounds


@pytest.mark.parametrize("k", [2, 4])
def test_per_position_acceptance_from_the_targets_choices(target, draft, k):
    """Greedy decoding accepts draft i exactly when the target's most likely token at that
    position is the draft, and judges it only when every draft before it was accepted. So
    the rate per position follows from the trace's p rows and draft tokens alone, without
    the accepted counts the statistics are kept from."""
    reached, accepted = np.zeros(k, int), np.zeros(k, int)
    stats = []
    for seed in range(8):
        res = run(target, draft, [seed, 5, 2], k=k, max_new_tokens=24, seed=seed, sampling=GREEDY)
        stats.append(res.stats)
        for r in res.trace:
            for i, tok in enumerate(r.draft_tokens):
                reached[i] += 1
                if int(np.argmax(r.p_rows[i])) != int(tok):
                    break
                accepted[i] += 1
    assert reached[-1] > 0 and 0 < accepted.sum() < reached.sum()  # both fates occur
    np.testing.assert_allclose(
        SpeculativeStats.pooled(stats).per_position_acceptance, accepted / reached
    )


def test_soft_sampling_runs_see_both_accepts_and_rejections(target, draft):
    """The fixtures give a mixed regime, so the tests above check both branches."""
    res = run(target, draft, [1, 2], k=4, max_new_tokens=40, seed=0)
    assert 0 < res.stats.accepted < res.stats.drafted
    assert 0 < res.stats.alpha < 1
    assert {r.token_kind for r in res.trace} == {"bonus", "correction"}


def test_self_drafting_with_sampling_accepts_everything(target):
    """Drafting with the target itself under T = 1: p and q agree to float32 rounding, so
    min(1, p/q) is 1 up to ~1e-6 and every draft is accepted."""
    for seed in range(4):
        res = run(target, target, [seed, 7], k=4, max_new_tokens=23, seed=seed)
        for r in res.trace:
            np.testing.assert_allclose(r.q_rows, r.p_rows[:-1], atol=1e-5)
            assert np.all(r.acceptance_probabilities > 1 - 1e-5)
        assert res.stats.acceptance_rate == 1.0
        assert [len(r.emitted) for r in res.trace] == [5, 5, 5, 5, 3]


def test_trace_rows_and_token_kinds(target, draft):
    """Each round: q [k_r, V], p [k_r+1, V], the emitted prefix, and the token's kind."""
    res = run(target, draft, [4, 4, 2], k=3, max_new_tokens=30, seed=1)
    V = target.n_vocab
    for r in res.trace:
        kr = len(r.draft_tokens)
        assert r.q_rows.shape == (kr, V) and r.p_rows.shape == (kr + 1, V)
        np.testing.assert_allclose(r.p_rows.sum(axis=-1), 1.0, atol=1e-5)
        assert r.emitted == [int(t) for t in r.draft_tokens[: r.accepted]] + [r.token]
        assert r.token_kind == ("bonus" if r.accepted == kr else "correction")
        assert np.all(r.q_of_drafts > 0)
        np.testing.assert_allclose(
            r.acceptance_probabilities, np.minimum(1.0, r.p_of_drafts / r.q_of_drafts)
        )
        if r.token_kind == "correction":  # a residual sample lies where p exceeds q, so
            p, q = r.p_rows[r.accepted], r.q_rows[r.accepted]  # never the rejected draft
            assert p[r.token] > q[r.token]
            assert r.token != r.draft_tokens[r.accepted]


def test_trace_cache_spans_follow_the_round_structure(target, draft):
    """Target (before, written end, after) = (context-1, context+k_r, context+accepted), from
    the first round on (the prefill cached the prompt minus its last token);
    the draft lags by one token, or two after an all-accepted round (catch-up)."""
    for seed in range(4):
        res = run(target, draft, [5, 1, 2, 7], k=4, max_new_tokens=25, seed=seed)
        prev_draft_after = 3  # the prefill cached the prompt minus its last token
        for r in res.trace:
            kr, n = len(r.draft_tokens), r.accepted
            assert r.target_cache == (r.context_len - 1, r.context_len + kr, r.context_len + n)
            d_before, d_end, d_after = r.draft_cache
            assert d_before == prev_draft_after
            assert d_end == (r.context_len + kr - 1 if kr else d_before)
            assert d_after == (r.context_len + min(n, kr - 1) if kr else d_before)
            prev_draft_after = d_after
        contexts = [r.context_len for r in res.trace]
        sizes = [len(r.emitted) for r in res.trace]
        assert contexts == list(np.cumsum([4] + sizes[:-1]))


def test_no_trace_unless_asked(target, draft):
    """trace=False keeps memory flat: result.trace is None."""
    assert run(target, draft, [1], k=2, max_new_tokens=5, seed=0, trace=False).trace is None


# ---------------------------------------------------------------- length, EOS, stop reason


@pytest.mark.parametrize("sampling", [SOFT, GREEDY], ids=["soft", "greedy"])
def test_never_more_than_max_new_tokens(target, draft, sampling):
    """Without EOS: exactly max_new_tokens, stop_reason 'length', for every budget and k."""
    for max_new in range(1, 16):
        for k in (1, 3, 5):
            res = run(
                target, draft, [2, 9], k=k, max_new_tokens=max_new, seed=max_new, sampling=sampling
            )
            assert len(res.tokens) == max_new
            assert res.stats.stop_reason == "length"
            assert all(len(r.draft_tokens) <= max_new - 1 for r in res.trace)


def test_single_token_budget_is_one_bonus_round(target, draft):
    """max_new_tokens = 1: nothing is drafted, the target's row is the bonus row."""
    res = run(target, draft, [3, 3], k=4, max_new_tokens=1, seed=0)
    assert res.stats.rounds == 1 and res.stats.drafted == 0
    assert res.trace[0].token_kind == "bonus" and len(res.tokens) == 1


def test_nothing_after_eos(target, draft):
    """With EOS: output ends at the first EOS (stop 'eos') or runs to the budget ('length')."""
    stops = []
    for eos_id in (0, 5, 11):
        for seed in range(12):
            res = run(target, draft, [seed % 16], k=3, max_new_tokens=30, seed=seed, eos_id=eos_id)
            toks = res.tokens
            assert len(toks) <= 30
            if eos_id in toks:
                assert toks.index(eos_id) == len(toks) - 1
                assert res.stats.stop_reason == "eos"
            else:
                assert len(toks) == 30 and res.stats.stop_reason == "length"
            assert res.stats.emitted == len(toks)
            stops.append(res.stats.stop_reason)
    assert set(stops) == {"eos", "length"}  # both outcomes were exercised


def test_eos_inside_the_accepted_drafts_cuts_the_round(target):
    """An EOS accepted mid-round truncates that round's emission right after it."""
    drafter = ModelDrafter(target)  # self-drafting: every draft is accepted
    prompt = [1, 2, 3]
    full = speculative_generate(
        target,
        drafter,
        prompt,
        k=6,
        max_new_tokens=14,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
    ).tokens
    eos = full[2]  # emitted inside the first round, as an accepted draft
    res = speculative_generate(
        target,
        drafter,
        prompt,
        k=6,
        max_new_tokens=14,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
        eos_id=eos,
        trace=True,
    )
    assert res.tokens == full[: full.index(eos) + 1]
    assert res.stats.rounds == 1 and res.stats.stop_reason == "eos"
    assert res.trace[0].accepted == 6 and res.trace[0].emitted == res.tokens

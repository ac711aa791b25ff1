"""Sampled laws of a ragged batch (reference/batch.py): one Holm family.

Three sequences with prompts of lengths 1, 2 and 3 are sampled together by
`speculative_generate_batch`: one target pass verifies all of them each round, their caches
hold different lengths, their rounds accept different counts and EOS ends them at different
rounds (each ends early with probability 0.2 to 0.65, so most batches run some rounds with a
finished row that feeds nothing). Each sequence must still follow the target's own law for
its prompt, and the sequences must be independent of each other:

  seq<b>:tokens    the law of sequence b's tokens vs the target's autoregressive law
  seq<b>:round1    the law of drafts accepted in sequence b's round 1
  seq<b>:round2    the same for its round 2 (None: it ended in round 1)
  joint01:tokens   the joint law of (tokens of sequence 0, tokens of sequence 1) vs the
                   product of the two target laws: the rows do not leak into each other
  joint012:first   the joint law of the three first tokens vs the product of their laws

The expected laws come from the oracle's evaluator (uncached forwards, enumeration), never
from the batch code. The accepted-count laws grade each row's draft cache and round policy,
which the token laws cannot see. False alarms: Holm at ALPHA = 1e-3 over the 11 members.
Sample size: 2 500 batches, about 7 s on one core.
Power, tried while writing it: one row's positions shifted by one, or each row's second new
position kept from attending to its own slot, gave p < 1e-13 on the rows concerned (most
below 1e-40); a row committing one slot too many crashes the run (its next catch-up is empty).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from reference import ModelDrafter, SamplingParams
from specdec.oracle.cases import (
    BATCH_SPREAD_SETUPS,
    DRAFT,
    SPREAD_MEMBERS,
    TARGET,
    spread_checks,
)
from specdec.oracle.laws import ALPHA, LoopSetup, chi_square_test, holm, loop_laws, marginal

pytestmark = pytest.mark.distribution

PROMPTS = [(2,), (2, 4), (2, 2, 0)]  # lengths 1, 2, 3: ragged from the prefill on
K, MAX_NEW, EOS = 2, 4, 0
SAMPLING = SamplingParams(1.0)  # no top-k / top-p / argmax: no decision can sit near a tie
RUNS, SEED = 2_500, 901

# one oracle setup per sequence: the same tiny pair as the loop family, this sequence's prompt
SETUPS = [
    LoopSetup(
        f"seq{b}",
        5,
        TARGET,
        DRAFT,
        prompt,
        k=K,
        max_new_tokens=MAX_NEW,
        sampling=SAMPLING,
        eos_id=EOS,
        n=RUNS,
        seed=SEED,
    )
    for b, prompt in enumerate(PROMPTS)
]
MEMBERS = [f"seq{b}:{law}" for b in range(3) for law in ("tokens", "round1", "round2")] + [
    "joint01:tokens",
    "joint012:first",
]


def product(*laws: dict) -> dict:
    """The law of independent outcomes: {(o_1, o_2, ...): prod_i law_i[o_i]}."""
    out = {(): 1.0}
    for law in laws:
        out = {key + (o,): w * law[o] for key, w in out.items() for o in law}
    return out


def sample_batches(generate_batch, n: int, seed: int) -> list[tuple]:
    # -> n samples of ((tokens_0, accepted per round_0), (tokens_1, ...), (tokens_2, ...))
    rng = np.random.default_rng(seed)
    target = SETUPS[0].target_model()
    drafters = [ModelDrafter(SETUPS[0].draft_model()) for _ in PROMPTS]  # reset each run
    samples = []
    for _ in range(n):
        results = generate_batch(
            target,
            drafters,
            [list(p) for p in PROMPTS],
            k=K,
            max_new_tokens=MAX_NEW,
            rng=rng,
            sampling=SAMPLING,
            eos_id=EOS,
        )
        samples.append(tuple((tuple(r.tokens), tuple(r.stats.accepted_per_round)) for r in results))
    return samples


@pytest.fixture(scope="module")
def batch_results(batch_impl):
    samples = sample_batches(batch_impl, RUNS, SEED)
    laws = [loop_laws(setup) for setup in SETUPS]
    results = {}
    for b, law in enumerate(laws):
        counts = {
            "tokens": Counter(s[b][0] for s in samples),
            "round1": Counter(s[b][1][0] for s in samples),
            "round2": Counter(s[b][1][1] if len(s[b][1]) > 1 else None for s in samples),
        }
        for name, observed in counts.items():
            member = f"seq{b}:{name}"
            results[member] = chi_square_test(observed, getattr(law, name), member)
    joint = Counter((s[0][0], s[1][0]) for s in samples)
    results["joint01:tokens"] = chi_square_test(
        joint, product(laws[0].tokens, laws[1].tokens), "joint01:tokens"
    )
    first_laws = [marginal(law.tokens, lambda o: o[0]) for law in laws]
    first = Counter(tuple(s[b][0][0] for b in range(3)) for s in samples)
    results["joint012:first"] = chi_square_test(first, product(*first_laws), "joint012:first")
    return results, holm({name: r.p_value for name, r in results.items()}), samples


def test_family_is_complete(batch_results):
    assert sorted(batch_results[0]) == sorted(MEMBERS)


@pytest.mark.parametrize("member", MEMBERS)
def test_batch_law(member, batch_results):
    results, adjusted, _ = batch_results
    assert adjusted[member] >= ALPHA, (
        f"Holm-adjusted p = {adjusted[member]:.3g} < alpha = {ALPHA} in the batch family of "
        f"{len(results)}: {results[member].describe()}"
    )


def test_the_batches_really_were_ragged(batch_results):
    """The premise: sequences ended at different rounds, by EOS and by length, so rows with
    nothing to feed rode along in many batches."""
    samples = batch_results[2]
    rounds = Counter(len({len(seq[1]) for seq in s}) > 1 for s in samples)
    assert rounds[True] > RUNS // 4, dict(rounds)
    ends = Counter(len(seq[0]) < MAX_NEW for s in samples for seq in s)
    assert ends[True] > RUNS // 4 and ends[False] > RUNS // 4, dict(ends)


# --------------------------------------------------------------------------------------------
# A second family: rows that are spread out, for the independence of the rows
# --------------------------------------------------------------------------------------------
# The setups above have rows close to point masses (their prompts make the target and the
# draft nearly sure, acceptance near 1), where coupling the rows' randomness changes almost
# nothing one can see: a twin whose rows shared their drafting uniforms passed every law
# above. Here SPREAD_ROWS rows share ONE prompt at T = 1.5 (specdec/oracle/cases.py,
# BATCH_SPREAD_SETUPS): each row's law is spread (first token (0.09, 0.12, 0.15, 0.64)) and
# drafts are kept with probability 0.68, so rows coupled on the draft side (the same drafts)
# or on the acceptance side (accepting together) have a joint law far from the product:
#
#   spread:seq<b>:tokens   row b's 3 tokens vs the target's law for the prompt
#   spread:first<a><b>     the joint law of rows a and b's first tokens vs the product of
#                          the two first-token laws (every pair of rows)
#   spread:accepted01      the joint law of rows 0 and 1's round-1 accepted counts vs the
#                          product of their exact laws
#
# False alarms: Holm at ALPHA = 1e-3 over the 7 members. 2 000 batches (about 5 s on one
# core): the first tokens' joint law moves by w = 0.45 - 0.56 with shared drafting uniforms,
# by w = 0.22 - 0.27 with shared acceptance uniforms (computed exactly when choosing the
# setup), against the w = 0.15 - 0.17 detected with power 0.9 at alpha / 7 (df 11 - 15).


@pytest.fixture(scope="module")
def spread_results(batch_impl):
    results = spread_checks(batch_impl)
    return results, holm({name: r.p_value for name, r in results.items()})


def test_spread_family_is_complete(spread_results):
    assert sorted(spread_results[0]) == sorted(SPREAD_MEMBERS)


@pytest.mark.parametrize("member", SPREAD_MEMBERS)
def test_spread_batch_law(member, spread_results):
    results, adjusted = spread_results
    assert adjusted[member] >= ALPHA, (
        f"Holm-adjusted p = {adjusted[member]:.3g} < alpha = {ALPHA} in the spread batch family "
        f"of {len(results)}: {results[member].describe()}"
    )


def test_the_spread_rows_are_far_from_point_masses():
    """The premise: no first token has probability above 0.7, and round 1 keeps 0, 1 or 2
    drafts each with probability above 0.05 (0.32, 0.07, 0.62)."""
    setup = BATCH_SPREAD_SETUPS["spread"]
    laws = loop_laws(setup)
    first = marginal(laws.tokens, lambda o: o[0])
    assert max(first.values()) < 0.7, first
    assert min(laws.round1.values()) > 0.05, laws.round1

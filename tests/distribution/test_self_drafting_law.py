"""Early exit and extra heads keep the target's law: exact laws, and one sampled Holm family.

Exact laws (zero variance): what an early-exit, a heads or an EAGLE drafter can propose at
each context is enumerated from the definitions written in self_drafting.py (not from the
drafters' code; for EAGLE, a test checks the real drafter's rows are those enumerated),
verify's outcomes from the real verify_law, and the loop's rules (EOS, length) are the
real ones: the output law must be the target's autoregressive law to
1e-12, at greedy, temperature, top-k and top-p, with EOS and the length limit.

Sampled laws of the real loop (`--speculative`, or the reference loop with `--verify`): the
real drafters, sharing the target's layers (early exit: the verification pass reuses the
drafter's rows), reading its hidden state (heads: handed over by the round) or its features
(EAGLE: handed over after prefill and every round, observe_features), on the setups of
self_drafting.SELF_DRAFT_SETUPS; three laws each (tokens, accepted count in rounds 1 and 2),
Holm at ALPHA = 1e-3 over the family's 18 members. test_power.py shows the broken variants
of these drafters rejected.
"""

from __future__ import annotations

import math

import pytest

from reference.sampling import SamplingParams
from specdec.oracle.cases import run_loop_setup
from specdec.oracle.laws import (
    ALPHA,
    EXACT_ATOL,
    as_reference_verify,
    holm,
    loop_laws,
    marginal,
    max_abs_difference,
)
from specdec.oracle.self_drafting import (
    SELF_DRAFT_MEMBERS,
    SELF_DRAFT_SETUPS,
    eagle_row_deviation,
    self_setup,
)

pytestmark = pytest.mark.distribution

S = SamplingParams
EXACT_SETUPS = [
    self_setup("exit_greedy_k2", S(0.0), 2, 6, (0, 1), exit_layer=1, part_seed=2),
    self_setup("exit_t1_k2", S(1.0), 2, 5, (3, 0), exit_layer=1, part_seed=2),
    self_setup("exit_t1_k3_len3", S(1.0), 3, 3, (1, 3), exit_layer=1, part_seed=3),
    self_setup("exit_topk_k3_eos", S(0.7, top_k=3), 3, 4, (4, 1), exit_layer=1, eos_id=4),
    self_setup(
        "exit_topp_mixed_eos", S(1.3, top_k=3, top_p=0.85), 2, 5, (4, 2), exit_layer=1, eos_id=4
    ),
    self_setup("heads_greedy_k2", S(0.0), 2, 6, (0, 1), n_heads=2),
    self_setup("heads_t1_k3", S(1.0), 3, 5, (1, 3), n_heads=3),
    self_setup("heads_k3_two_heads", S(1.0), 3, 5, (1, 3), n_heads=2),  # k > heads
    self_setup("heads_topp_k2_eos", S(0.7, top_p=0.9), 2, 5, (1, 3), n_heads=2, eos_id=2),
    self_setup(
        "heads_topk_eos_mixed", S(1.3, top_k=3, top_p=0.85), 2, 5, (1, 3), n_heads=2, eos_id=0
    ),
    self_setup("heads_one_token_prompt", S(1.0), 2, 4, (3,), n_heads=2),  # round 1 drafts nothing
    self_setup("eagle_greedy_k2", S(0.0), 2, 6, (0, 1), eagle=True, part_seed=3),
    self_setup("eagle_t1_k2", S(1.0), 2, 4, (3, 0), eagle=True, part_seed=3),
    self_setup(
        "eagle_topk_k3_eos", S(0.7, top_k=3), 3, 4, (4, 1), eagle=True, eos_id=4, part_seed=3
    ),
    self_setup(
        "eagle_topp_mixed_eos", S(1.3, top_k=3, top_p=0.85), 2, 5, (4, 2), eagle=True, eos_id=4
    ),
    self_setup("eagle_one_token_prompt", S(1.0), 2, 4, (3,), eagle=True, part_seed=3),
]


@pytest.mark.parametrize("setup", EXACT_SETUPS, ids=lambda s: s.name)
def test_self_drafting_loop_law_equals_target_law(setup):
    laws = loop_laws(setup)
    spec = marginal(laws.joint, lambda o: o[0])
    assert math.fsum(spec.values()) == pytest.approx(1.0, abs=EXACT_ATOL)
    diff = max_abs_difference(spec, laws.tokens)
    assert diff <= EXACT_ATOL, f"{setup.name}: the loop's law is off by {diff:.3g}"
    if not setup.sampling.greedy:  # not vacuous: drafts are accepted with real probability
        accepted = math.fsum(w for (_, accepts), w in laws.joint.items() if sum(accepts) > 0)
        assert accepted > 0.05, f"{setup.name}: drafts are (almost) never accepted"


def test_eagle_rows_of_the_real_drafter_are_the_oracles():
    """The EAGLE drafter the loop runs drafts from the rows the exact law enumerates: after
    prefill and after real rounds (catch-up of true features, own features while drafting),
    on the exact setups and on the sampled family's."""
    setups = [*EXACT_SETUPS, *SELF_DRAFT_SETUPS.values()]
    for setup in setups:
        if setup.eagle and not setup.sampling.greedy:
            for seed in (7, 8):
                deviation = eagle_row_deviation(setup, setup.make_drafter(), seed=seed)
                assert deviation <= 1e-5, (setup.name, seed, deviation)


class HeadsSwapped:
    """What the heads drafter would be with q rows handed over in the wrong order."""

    def __init__(self, proposals) -> None:
        self.proposals, self.n_vocab, self.margin = proposals, proposals.n_vocab, math.inf

    def outcomes(self, context, k):
        for drafts, Q, w in self.proposals.outcomes(context, k):
            yield drafts, Q[::-1].copy(), w


def test_exact_check_rejects_heads_judged_with_each_others_q():
    """The comparison is not vacuous: judging head 0's token with head 1's row moves the law."""
    from specdec.oracle.laws import ModelRows, speculative_law, target_law

    setup = EXACT_SETUPS[7]
    p_rows = ModelRows(setup.target_model(), setup.sampling)
    kw = dict(max_new_tokens=setup.max_new_tokens, eos_id=setup.eos_id)
    wrong = speculative_law(
        p_rows, HeadsSwapped(setup.draft_law(setup.sampling)), setup.prompt, k=setup.k, **kw
    )
    assert (
        max_abs_difference(marginal(wrong, lambda o: o[0]), target_law(p_rows, setup.prompt, **kw))
        > 0.01
    )


# --------------------------------------------------------------------------------------------
# Sampled laws of the real loop
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("setup", SELF_DRAFT_SETUPS.values(), ids=lambda s: s.name)
def test_self_drafting_setups_are_exact_and_well_conditioned(setup):
    laws = loop_laws(setup)
    assert max_abs_difference(marginal(laws.joint, lambda o: o[0]), laws.tokens) <= EXACT_ATOL
    assert laws.margin > 3e-3, f"{setup.name}: a discrete choice is {laws.margin:.2g} from a tie"
    assert min(laws.round1.values()) > 0.004, f"{setup.name}: an accepted count is too rare"


@pytest.fixture(scope="module")
def self_drafting_results(oracle_plugins, speculative_impl, verify_impl):
    verify_fn = None
    if "speculative" not in oracle_plugins and "verify" in oracle_plugins:
        verify_fn = as_reference_verify(verify_impl)
    results = {}
    for setup in SELF_DRAFT_SETUPS.values():  # a loop that cannot run a drafter fails here
        results |= run_loop_setup(speculative_impl, setup, verify_fn=verify_fn)
    return results, holm({name: r.p_value for name, r in results.items()})


def test_family_is_complete(self_drafting_results):
    results, _ = self_drafting_results
    assert sorted(results) == sorted(SELF_DRAFT_MEMBERS)


@pytest.mark.parametrize("member", SELF_DRAFT_MEMBERS)
def test_self_drafting_loop_law(member, self_drafting_results):
    results, adjusted = self_drafting_results
    assert adjusted[member] >= ALPHA, (
        f"Holm-adjusted p = {adjusted[member]:.3g} < alpha = {ALPHA} in the self-drafting family "
        f"of {len(results)}: {results[member].describe()}"
    )

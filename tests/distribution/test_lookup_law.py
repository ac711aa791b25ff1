"""Prompt lookup and the hybrid keep the target's law: exact laws, and one sampled Holm family.

Exact laws (zero variance). A lookup drafter's draft is a function of the committed context,
so the evaluator takes ONE draft per context, with probability 1, judged with one-hot q rows
(oracle.LookupProposals, whose rule is written in the oracle, not imported from
reference/lookup.py); the hybrid enumerates the draft model's drafts where the lookup finds
nothing (oracle.HybridProposals). Rounds draft 0..k tokens, the loop's rules (EOS, length)
are the real ones, and the output law must equal the target's autoregressive law to 1e-12,
for both preferences, several n-gram ranges, greedy, temperature, top-k and top-p.

Sampled laws of the real loop (`--speculative`, or the reference loop with `--verify`): the
setups of cases.LOOKUP_SETUPS, each checked three times as in the loop family: the token
law, and the laws of the accepted count in rounds 1 and 2 (which depend on what the drafter
proposed, so they catch a lookup that reads the wrong text). Holm at ALPHA = 1e-3 over the
family's 9 members. test_power.py shows the two lookup bugs of broken.py rejected.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from reference.sampling import SamplingParams
from specdec.oracle.cases import LOOKUP_MEMBERS, LOOKUP_SETUPS, lookup_family
from specdec.oracle.laws import (
    ALPHA,
    EXACT_ATOL,
    HybridProposals,
    LookupProposals,
    LoopSetup,
    ModelRows,
    as_reference_verify,
    holm,
    lookup_draft,
    loop_laws,
    marginal,
    max_abs_difference,
    speculative_law,
    target_law,
)

pytestmark = pytest.mark.distribution

V4_TARGET = (16, 1, 2, 0.9, 31)  # the exact-law target of test_exact_laws.py
V4_DRAFT = (0.4, 32)


def lookup_setup(name, sampling, k, max_new_tokens, lookup, prompt, eos_id=None, hybrid=False):
    return LoopSetup(
        name,
        4,
        V4_TARGET,
        V4_DRAFT,
        prompt,
        k=k,
        max_new_tokens=max_new_tokens,
        sampling=sampling,
        eos_id=eos_id,
        n=0,
        seed=0,
        lookup=lookup,
        hybrid=hybrid,
    )


EXACT_SETUPS = [
    lookup_setup("greedy_k3", SamplingParams(0.0), 3, 6, (3, 1, "recent"), (3, 2, 3, 1, 1)),
    lookup_setup("t1_k2_longest", SamplingParams(1.0), 2, 4, (2, 1, "longest"), (2, 3, 0, 3)),
    lookup_setup("t07_k3_eos", SamplingParams(0.7), 3, 5, (3, 1, "recent"), (3, 1, 2, 2, 1), 0),
    lookup_setup(
        "topk3_k2_eos", SamplingParams(1.3, top_k=3), 2, 5, (2, 2, "recent"), (2, 1, 1, 1), 0
    ),
    lookup_setup("topp09_k3", SamplingParams(1.5, top_p=0.9), 3, 5, (4, 1, "longest"), (3, 2, 2)),
    lookup_setup(
        "mixed_k1_eos",
        SamplingParams(1.3, top_k=3, top_p=0.85),
        1,
        5,
        (2, 1, "recent"),
        (2, 0, 3, 0, 3),
        eos_id=1,
    ),
    lookup_setup(
        "hybrid_t1_k2", SamplingParams(1.0), 2, 4, (2, 2, "longest"), (2, 3, 2, 2, 2), hybrid=True
    ),
    lookup_setup(
        "hybrid_topk_k3_eos",
        SamplingParams(0.8, top_k=3),
        3,
        4,
        (3, 2, "recent"),
        (3, 3, 1, 3, 3),
        eos_id=0,
        hybrid=True,
    ),
    lookup_setup(
        "hybrid_greedy_k2",
        SamplingParams(0.0),
        2,
        6,
        (2, 2, "recent"),
        (3, 1, 2, 2, 2),
        hybrid=True,
    ),
]


class CountingHybrid(HybridProposals):
    """HybridProposals that counts the contexts where each drafter drafted."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.used = {"lookup": 0, "fallback": 0}

    def outcomes(self, context, k):
        self.used["lookup" if self.lookup.draft(context, k) else "fallback"] += k > 0
        yield from super().outcomes(context, k)


@pytest.mark.parametrize("setup", EXACT_SETUPS, ids=lambda s: s.name)
def test_lookup_loop_law_equals_target_law(setup):
    laws = loop_laws(setup)
    spec = marginal(laws.joint, lambda o: o[0])
    assert math.fsum(spec.values()) == pytest.approx(1.0, abs=EXACT_ATOL)
    diff = max_abs_difference(spec, laws.tokens)
    assert diff <= EXACT_ATOL, f"{setup.name}: the lookup loop's law is off by {diff:.3g}"
    # not vacuous: some round accepts a copied draft with real probability
    accepted = math.fsum(w for (_, accepts), w in laws.joint.items() if sum(accepts) > 0)
    assert accepted > 0.05, f"{setup.name}: copied drafts are (almost) never accepted"


@pytest.mark.parametrize("setup", [s for s in EXACT_SETUPS if s.hybrid], ids=lambda s: s.name)
def test_hybrid_law_covers_both_drafters(setup):
    """The hybrid's exact law went through lookup rounds and draft-model rounds."""
    p_rows = ModelRows(setup.target_model(), setup.sampling)
    draft_rows = ModelRows(setup.draft_model(), setup.sampling)
    q = CountingHybrid(LookupProposals(4, *setup.lookup), draft_rows)
    kw = dict(max_new_tokens=setup.max_new_tokens, eos_id=setup.eos_id)
    spec = marginal(speculative_law(p_rows, q, setup.prompt, k=setup.k, **kw), lambda o: o[0])
    assert max_abs_difference(spec, target_law(p_rows, setup.prompt, **kw)) <= EXACT_ATOL
    assert q.used["lookup"] > 0 and q.used["fallback"] > 0, q.used


class PointMassWithSoftQ(LookupProposals):
    """The lookup's one draft, judged with the draft model's soft rows (the wrong q)."""

    def __init__(self, rule, soft) -> None:
        super().__init__(4, *rule)
        self.soft = soft

    def outcomes(self, context, k):
        drafts = self.draft(context, k)
        rows = [self.soft(context + drafts[:i]) for i in range(len(drafts))]
        yield drafts, np.stack(rows) if rows else np.zeros((0, self.n_vocab)), 1.0


def test_exact_check_rejects_a_point_mass_judged_with_soft_q():
    """The comparison is not vacuous: judging the copied token with the draft model's soft q
    moves the law by more than 0.05."""
    setup = EXACT_SETUPS[1]
    p_rows = ModelRows(setup.target_model(), setup.sampling)
    q = PointMassWithSoftQ(setup.lookup, ModelRows(setup.draft_model(), setup.sampling))
    kw = dict(max_new_tokens=setup.max_new_tokens, eos_id=setup.eos_id)
    wrong = marginal(speculative_law(p_rows, q, setup.prompt, k=setup.k, **kw), lambda o: o[0])
    assert max_abs_difference(wrong, target_law(p_rows, setup.prompt, **kw)) > 0.05


# --------------------------------------------------------------------------------------------
# Sampled laws of the real loop
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("setup", LOOKUP_SETUPS.values(), ids=lambda s: s.name)
def test_lookup_setups_are_exact_and_well_conditioned(setup):
    """As for the loop family: the evaluator's law is the target's, every discrete choice
    is far from a tie, round 1 copies a draft, and (hybrid) round 2 sometimes does not."""
    laws = loop_laws(setup)
    assert max_abs_difference(marginal(laws.joint, lambda o: o[0]), laws.tokens) <= EXACT_ATOL
    assert laws.margin > 1e-3, f"{setup.name}: a discrete choice is {laws.margin:.2g} from a tie"
    assert lookup_draft(setup.prompt, setup.k, *setup.lookup), "round 1 must be a lookup round"
    if setup.hybrid:  # P(round 2 falls back to the draft model, which must catch up)
        fallback = math.fsum(
            w
            for (tokens, accepts), w in laws.joint.items()
            if len(accepts) > 1
            and not lookup_draft(setup.prompt + tokens[: accepts[0] + 1], setup.k, *setup.lookup)
        )
        assert fallback > 0.5


@pytest.fixture(scope="module")
def lookup_results(oracle_plugins, speculative_impl, verify_impl):
    verify_fn = None
    if "speculative" not in oracle_plugins and "verify" in oracle_plugins:
        verify_fn = as_reference_verify(verify_impl)
    results = lookup_family(speculative_impl, verify_fn)
    return results, holm({name: r.p_value for name, r in results.items()})


def test_family_is_complete(lookup_results):
    results, _ = lookup_results
    assert sorted(results) == sorted(LOOKUP_MEMBERS)


@pytest.mark.parametrize("member", LOOKUP_MEMBERS)
def test_lookup_loop_law(member, lookup_results):
    results, adjusted = lookup_results
    assert adjusted[member] >= ALPHA, (
        f"Holm-adjusted p = {adjusted[member]:.3g} < alpha = {ALPHA} in the lookup family of "
        f"{len(results)}: {results[member].describe()}"
    )

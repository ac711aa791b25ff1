"""Every shipped drafter's own proposals against the law of its proposals: one Holm family
per backend (the reference's drafters, the twin's).

What a drafter hands the verifier -- a chain's tokens and q rows; a tree's tokens, parents,
q rows and the label of each node (SAMPLED, WITHOUT_REPLACEMENT, POINT) -- must be true:
verification is exact for the claims it is given, not for the draws the drafter made. The
loop laws see a false claim only through the output law or the acceptance, and only for the
drafters their setups run; EAGLE-2's tree drafter, for one, was run by none. Here each
drafter (specdec/oracle/proposals.py, PROPOSAL_SETUPS: the draft model, the compiled draw,
lookup, hybrid, early exit, heads, EAGLE, static trees of each rule, the heads' tree,
EAGLE-2, and a batch's drafting step -- three rows from one context, the reference's rows
in turn or the twin's BatchModelDrafter, whose law is the product of the rows' laws)
proposes from a fixed context after the loop's own prefill:

  <setup>:T>0, <setup>:T=0   n proposals, a chi-square of their keys against the law of
                proposals computed from the model's rows (uncached forwards, a transform
                written in the oracle; the point-mass rules written again); a proposal whose
                rows or labels are not the law's is an impossible outcome (p = 0). n = 2 000
                where the law at T > 0 is spread and the draw is the drafter's own; 50 for
                a point-mass law (T = 0, a deterministic drafter) and for the hybrid's
                fallback, whose draws are ModelDrafter's (held at 2 000 in `model`)

and, exactly (no false alarm), over real rounds of the backend's own loop: each round's
proposal must be the law's at its own context (a drafter right after prefill but off after
a round that kept or rejected its drafts -- a cache, a catch-up -- fails there).

False alarms: Holm at ALPHA = 1e-3 over each backend's family (28 members for the
reference, 26 for the twin). Power: at n = 2 000 and alpha / 28, a departure of Cohen's w =
0.145 - 0.184 (after merging, 8 - 39 cells) is detected with power 0.9; a drafter that draws
at T = 1 what it reports at T = 1.3 moves these laws by w = 0.18 - 0.41, and rows of a batch
that share their drafting uniforms move the batch's by far more (p = 1e-68 at n = 300).
"""

from __future__ import annotations

import pytest

from reference.drafters import ModelDrafter
from reference.sampling import SamplingParams, probabilities
from specdec.fast_cpu import compiled as fast_compiled
from specdec.oracle.broken import DraftQWithoutTemperature
from specdec.oracle.laws import ALPHA, EXACT_ATOL, POWER_P, holm, merge_cells
from specdec.oracle.proposals import (
    PROPOSAL_SETUPS,
    greedy,
    proposal_check,
    proposal_law,
    proposals_along_rounds,
)

pytestmark = pytest.mark.distribution

BACKENDS = ("reference", "gpu")


def not_run(setup, backend: str) -> str | None:
    # why a setup does not run on a backend (None: it runs)
    if setup.drafter == "fast-model" and not fast_compiled.AVAILABLE:
        return "no numba (the `fast` extra): FastModelDrafter draws as ModelDrafter does"
    if backend != "reference" and not setup.twin:
        return f"the twin has no {setup.drafter} drafter (the compiled draw is the reference's)"
    return None


def runs_on(setup, backend: str) -> bool:
    return not_run(setup, backend) is None


def members(backend: str) -> list[str]:
    return [
        f"{name}:{temperature}"
        for name, setup in PROPOSAL_SETUPS.items()
        if runs_on(setup, backend)
        for temperature in ("T>0", "T=0")
    ]


@pytest.mark.parametrize("name", PROPOSAL_SETUPS)
def test_proposal_laws_are_laws_and_well_conditioned(name):
    """Each law sums to 1; a rule's choices (top-b logits, the heads' and EAGLE-2's
    rankings) sit far above float32 rounding from a tie, so the real drafter's float32
    rows cannot choose otherwise; each sampled check's law is spread over several cells."""
    setup = PROPOSAL_SETUPS[name]
    for s in (setup, greedy(setup)):
        law, rows, law_obj = proposal_law(s)
        assert abs(sum(law.values()) - 1.0) < EXACT_ATOL, name
        assert set(law) == set(rows)
        assert getattr(law_obj, "margin", 1.0) > 1e-4, (name, law_obj.margin)
    law, _, _ = proposal_law(setup)
    if setup.n >= 1_000:  # a sampled check: its law is spread over several cells
        assert len(merge_cells(law, setup.n)) >= 8, name


def family(backend: str) -> dict:
    results = {}
    for name, setup in PROPOSAL_SETUPS.items():
        if runs_on(setup, backend):
            results[f"{name}:T>0"] = proposal_check(setup, backend)
            results[f"{name}:T=0"] = proposal_check(greedy(setup), backend)
    return results


@pytest.fixture(scope="module", params=BACKENDS)
def proposal_results(request):
    results = family(request.param)
    return request.param, results, holm({name: r.p_value for name, r in results.items()})


def test_family_is_complete(proposal_results):
    backend, results, _ = proposal_results
    assert sorted(results) == sorted(members(backend))


@pytest.mark.parametrize("member", members("reference"))
def test_proposal_law(member, proposal_results):
    backend, results, adjusted = proposal_results
    if member not in results:
        pytest.skip(not_run(PROPOSAL_SETUPS[member.split(":")[0]], backend))
    assert adjusted[member] >= ALPHA, (
        f"Holm-adjusted p = {adjusted[member]:.3g} < alpha = {ALPHA} in the {backend} proposal "
        f"family of {len(results)}: {results[member].describe()}"
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", PROPOSAL_SETUPS)
def test_proposals_along_real_rounds(name, backend):
    """Three real rounds, twice, at T > 0 and at T = 0: every proposal is the law's at its
    own context (exact; rows to 1e-5)."""
    setup = PROPOSAL_SETUPS[name]
    if not runs_on(setup, backend):
        pytest.skip(not_run(setup, backend))
    if setup.drafter == "batch-model":
        pytest.skip("a batch's rounds are test_batch_law.py's (the spread family)")
    for s in (setup, greedy(setup)):
        wrong = proposals_along_rounds(s, backend)
        assert not wrong, f"{name} on {backend} at {s.sampling.describe()}: {wrong[:2]}"


class DrawsAtOne(ModelDrafter):
    """Draws each token from its row at T = 1 but hands over the row at the round's T: the
    rows are the law's, the draws are not."""

    def draw(self, logits, sampling, rng, out) -> int:
        token = super().draw(logits, SamplingParams(1.0), rng, out)
        out[:] = probabilities(logits, sampling)
        return token


def test_the_law_of_the_draws_is_checked_not_only_the_rows():
    setup = PROPOSAL_SETUPS["model"]  # T = 1.3
    draft = setup.parts[1]().model
    result = proposal_check(setup, "reference", n=1_000, drafter=DrawsAtOne(draft))
    assert result.p_value < POWER_P, result.describe()


def test_rows_that_are_not_the_draws_are_impossible():
    """The catalogue's draft_q_without_temperature: tokens drawn at T, rows reported at 1."""
    setup = PROPOSAL_SETUPS["model"]
    draft = setup.parts[1]().model
    result = proposal_check(setup, "reference", n=20, drafter=DraftQWithoutTemperature(draft))
    assert result.p_value == 0.0 and "q rows off" in result.detail, result.describe()

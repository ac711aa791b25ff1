"""Sampled laws of `verify` (the --verify plug-in, or the reference): one Holm family.

Members (cases.VERIFY_SETUPS): the article's A/B example (output law 0.6 / 0.4 by chi-square,
acceptance rate 0.8 by an exact binomial test); the joint law of (accepted, token) for fixed
k = 3 drafts (every position's residual law and the bonus row); the law of the emitted
sequence with drafts drawn from context-dependent table models, from a point-mass drafter,
and with a greedy (one-hot) target. The exact laws come from enumeration (oracle.py).

False alarms: the family's p-values are Holm-adjusted, and a member fails when its adjusted
p-value is below ALPHA = 1e-3, so a correct implementation fails any member of this family
with probability at most 1e-3 (with the seeds fixed, the reference's outcome is reproducible).
"""

from __future__ import annotations

import pytest

from specdec.oracle.cases import VERIFY_MEMBERS, verify_family
from specdec.oracle.laws import ALPHA, holm

pytestmark = pytest.mark.distribution


@pytest.fixture(scope="module")
def verify_results(verify_impl):
    results = verify_family(verify_impl)
    return results, holm({name: r.p_value for name, r in results.items()})


def test_family_is_complete(verify_results):
    results, _ = verify_results
    assert sorted(results) == sorted(VERIFY_MEMBERS)


@pytest.mark.parametrize("member", VERIFY_MEMBERS)
def test_verify_law(member, verify_results):
    results, adjusted = verify_results
    assert adjusted[member] >= ALPHA, (
        f"Holm-adjusted p = {adjusted[member]:.3g} < alpha = {ALPHA} in the verify family of "
        f"{len(results)}: {results[member].describe()}"
    )

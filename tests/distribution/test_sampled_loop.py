"""Sampled laws of the whole loop (the --speculative plug-in, or the reference): one Holm family.

For each setup of cases.LOOP_SETUPS (tiny context-dependent GPT pairs, k = 2 and 3; plain,
temperature + top-k, top-p, all three, greedy; EOS in three of them; length limits that are
not multiples of k + 1, one below k + 1) one set of runs is checked three times:

  <setup>:tokens   the joint law of the generated tokens vs the target's own law
  <setup>:round1   the law of the number of drafts accepted in round 1
  <setup>:round2   the same for round 2 (None: the run ended in round 1)

The accepted-count laws come from the analytic evaluator (oracle.speculative_law) with
uncached forwards; they catch draft-cache bugs, which leave the output law intact. They also
grade the loop's round policy: a round drafts min(k, remaining - 1) tokens.

When only --verify is given, the reference loop runs with that verify (its verify_fn keyword),
so the loop family grades the plug-in verify too. With --speculative, the plug-in loop runs
with its own verify.

False alarms: Holm at ALPHA = 1e-3 over the family's 15 members.
"""

from __future__ import annotations

import pytest

from specdec.oracle.cases import LOOP_MEMBERS, loop_family
from specdec.oracle.laws import ALPHA, as_reference_verify, holm

pytestmark = pytest.mark.distribution


@pytest.fixture(scope="module")
def loop_results(oracle_plugins, speculative_impl, verify_impl):
    verify_fn = None
    if "speculative" not in oracle_plugins and "verify" in oracle_plugins:
        verify_fn = as_reference_verify(verify_impl)
    results = loop_family(speculative_impl, verify_fn)
    return results, holm({name: r.p_value for name, r in results.items()})


def test_family_is_complete(loop_results):
    results, _ = loop_results
    assert sorted(results) == sorted(LOOP_MEMBERS)


@pytest.mark.parametrize("member", LOOP_MEMBERS)
def test_loop_law(member, loop_results):
    results, adjusted = loop_results
    assert adjusted[member] >= ALPHA, (
        f"Holm-adjusted p = {adjusted[member]:.3g} < alpha = {ALPHA} in the loop family of "
        f"{len(results)}: {results[member].describe()}"
    )

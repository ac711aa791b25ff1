"""The oracle's expectations held against an independent derivation, and greedy rounds in
which the draft and the target disagree (issue 11, point 4).

oracle.py builds several expected laws with the package's own helpers (`verify_law`,
`probabilities`, `emitted_tokens`, `round_draft_length`), so a bug in one of them would move
the expectation along with the code under test. specdec/grading/engine/laws.py derives the
same laws with none of them: its own statement of the rule, its own sampling transform, its
own emission and round policy. Every draft-model setup of the loop family, and the verify
family's fixed k = 3 rows, must agree both ways to float64 precision.

The loop family's greedy setup keeps every draft, so the correction token at greedy was graded
by no sampled check; the two greedy setups below reject drafts (one of them right after a
round that needed the draft's catch-up), and grade the plug-in loop (or the reference loop
with the plug-in verify) exactly: at greedy the law is a point mass.
"""

from __future__ import annotations

import numpy as np
import pytest

from reference.sampling import SamplingParams
from specdec.grading.engine.laws import ModelRows, loop_joint_law, verify_joint_law
from specdec.oracle.cases import DRAFT, LOOP_SETUPS, TARGET, fixed_k3_rows
from specdec.oracle.laws import LoopSetup, as_reference_verify, loop_laws, sample_loop

pytestmark = pytest.mark.distribution

MODEL_SETUPS = [s for s in LOOP_SETUPS.values() if s.lookup is None and len(s.draft) in (2, 5)]


def independent_rows(setup: LoopSetup, model) -> ModelRows:
    sampling = setup.sampling
    temperature = 0.0 if sampling.greedy else sampling.temperature
    return ModelRows(model, temperature, sampling.top_k, sampling.top_p)


@pytest.mark.parametrize("setup", MODEL_SETUPS, ids=lambda s: s.name)
def test_the_loop_laws_agree_with_an_independent_derivation(setup):
    expected = loop_laws(setup).joint
    independent = loop_joint_law(
        independent_rows(setup, setup.target_model()),
        independent_rows(setup, setup.draft_model()),
        setup.prompt,
        k=setup.k,
        max_new_tokens=setup.max_new_tokens,
        eos_id=setup.eos_id,
    )
    outcomes = set(expected) | set(independent)
    gap = max(abs(expected.get(o, 0.0) - independent.get(o, 0.0)) for o in outcomes)
    assert gap < 1e-10, f"{setup.name}: the oracle's law and the independent one differ by {gap}"


def test_the_fixed_rows_law_agrees_with_an_independent_derivation():
    from reference.verification import verify_law

    P, Q, drafts = fixed_k3_rows()
    ours = {o: w for o, w in verify_law(P, Q, drafts).items() if w > 0}
    theirs = verify_joint_law(P, Q, drafts)
    assert set(ours) == set(theirs)
    assert max(abs(ours[o] - theirs[o]) for o in ours) < 1e-12


GREEDY_DISAGREEMENT = [
    # round 1 keeps 1 of 2 drafts, round 2 none, round 3 both: corrections at greedy
    LoopSetup("greedy_reject_k2", 5, TARGET, DRAFT, (0, 2), k=2, max_new_tokens=6,
              sampling=SamplingParams(0.0), eos_id=None, n=5, seed=301),
    # round 1 keeps all 3 (round 2 runs on the draft's catch-up), round 2 rejects its third
    LoopSetup("greedy_catch_up_then_reject_k3", 5, TARGET, DRAFT, (4, 2), k=3,
              max_new_tokens=8, sampling=SamplingParams(0.0), eos_id=None, n=5, seed=302),
]  # fmt: skip


@pytest.mark.parametrize("setup", GREEDY_DISAGREEMENT, ids=lambda s: s.name)
def test_greedy_rounds_where_draft_and_target_disagree(
    setup, oracle_plugins, speculative_impl, verify_impl
):
    laws = loop_laws(setup)
    assert laws.margin > 1e-3  # every argmax is far from a tie, in float32 as in float64
    ((expected, mass),) = laws.joint.items()  # greedy: one outcome, with probability 1
    tokens, accepts = expected
    assert any(a < setup.k for a in accepts[:-1]), "the setup must reject some draft"
    verify_fn = None
    if "speculative" not in oracle_plugins and "verify" in oracle_plugins:
        verify_fn = as_reference_verify(verify_impl)
    seen = sample_loop(speculative_impl, setup, setup.n, setup.seed, verify_fn=verify_fn)
    assert set(seen) == {expected}, (
        f"{setup.name}: expected tokens {list(tokens)} with drafts kept per round "
        f"{list(accepts)} (the target's argmax path), got {dict(seen)}"
    )


def test_greedy_verify_replaces_a_rejected_draft_with_the_targets_choice(verify_impl):
    # one-hot rows: the target agrees with draft 1, not with draft 2 (its choice is 3)
    P = np.eye(4)[[1, 3, 0]]
    Q = np.eye(4)[[1, 2]]
    rng = np.random.default_rng(0)
    for _ in range(25):
        result = verify_impl(P, Q, np.array([1, 2]), rng)
        accepted, token = (result.accepted, result.token) if hasattr(result, "token") else result
        assert (int(accepted), int(token)) == (1, 3)

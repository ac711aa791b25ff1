"""Adaptive draft length keeps the target's law.

`ModelDrafter(model, min_confidence=tau)` stops a round's drafting early when the draft's own
top probability for the next position falls below tau. The stopping decision reads only the
draft's state, so every emitted token is still verified exactly: the joint law of the output
must be the target's. One Holm family over the loop setups of cases.LOOP_SETUPS (plain
sampling, top-k with EOS, top-p with EOS, greedy), with tau chosen so that short and full
rounds both occur. The accepted-count laws of those setups describe the fixed-k policy, so
only the token law is checked here; a second check proves the runs really were adaptive.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from reference import ModelDrafter, speculative_generate
from specdec.oracle.cases import LOOP_SETUPS
from specdec.oracle.laws import ALPHA, chi_square_test, holm, loop_laws

pytestmark = pytest.mark.distribution

# tau per setup: high enough that some rounds stop after one draft, low enough that others
# draft all k (checked below); the greedy pair's drafts are confident, so it needs more
TAU = {"t1_k2": 0.5, "topk_k3_eos": 0.5, "topp_k2_eos": 0.5, "greedy_k2": 0.9}
MEMBERS = list(TAU)
RUNS = 6_000


def sample_adaptive(setup, n: int, seed: int) -> tuple[Counter, Counter]:
    # -> (Counter{tokens: count}, Counter{drafts proposed in a round: count})
    rng = np.random.default_rng(seed)
    target, drafter = setup.target_model(), ModelDrafter(setup.draft_model(), TAU[setup.name])
    tokens, lengths = Counter(), Counter()
    for _ in range(min(n, setup.n)):
        res = speculative_generate(
            target,
            drafter,
            list(setup.prompt),
            k=setup.k,
            max_new_tokens=setup.max_new_tokens,
            rng=rng,
            sampling=setup.sampling,
            eos_id=setup.eos_id,
        )
        tokens[tuple(int(t) for t in res.tokens)] += 1
        lengths.update(res.stats.drafted_per_round)
    return tokens, lengths


@pytest.fixture(scope="module")
def adaptive_results():
    results, lengths = {}, {}
    for name in MEMBERS:
        setup = LOOP_SETUPS[name]
        tokens, lengths[name] = sample_adaptive(setup, RUNS, seed=setup.seed + 500)
        results[name] = chi_square_test(tokens, loop_laws(setup).tokens, f"adaptive {name}")
    return results, holm({n: r.p_value for n, r in results.items()}), lengths


@pytest.mark.parametrize("name", MEMBERS)
def test_adaptive_drafting_keeps_the_target_law(adaptive_results, name):
    results, adjusted, _ = adaptive_results
    assert adjusted[name] >= ALPHA, results[name].describe()


@pytest.mark.parametrize("name", MEMBERS)
def test_the_runs_really_were_adaptive(adaptive_results, name):
    """Both a one-draft round and a full-k round occur, so the law check saw both paths."""
    lengths = adaptive_results[2][name]
    k = LOOP_SETUPS[name].k
    assert lengths[1] > 0 and lengths[k] > 0, dict(lengths)

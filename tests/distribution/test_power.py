"""Power, shown: every broken variant of broken.py must be rejected by the oracle.

Each test runs the variant through the same setup, the same sampling code, the same statistic
and the same seed as the real check named in the catalogue, with fewer samples, and asserts
a raw p-value below POWER_P = 1e-6. That is below alpha / m for every family (1e-3 / 28), so
the real check, with its larger n, rejects the variant whatever its family's other members
say. A variant that crashes counts its runs as "raised <error>", an outcome of probability 0
(the real check fails on the exception itself).

The last three variants break what only the newer laws see: an EAGLE-2 tree labelling
its chosen nodes as sampled (the proposal law of `eagle-tree`; and, exactly, the output law
it gives), a compiled draw skipping the tail (the fat-tail law of the bundled draft's rows),
the twin's batched drafting sharing its uniforms across rows (the spread batch's
independence laws). Their checks' families have m <= 28, so POWER_P is below alpha / m
there too.

The broken EAGLE drafters are also held, row by row, against the oracle's exact rows (the
feature-alignment check, self_drafting.eagle_row_deviation): the two that keep the output
law (a feature one position off, predicted features kept in the cache) are invisible to
every token law, and these tests show them seen exactly, as well as in the acceptance.
"""

from __future__ import annotations

import numpy as np
import pytest

from reference.sampling import SamplingParams
from specdec.fast_cpu import compiled as fast_compiled
from specdec.oracle.broken import EAGLE_DRAFTERS, VARIANTS, Variant, eagle_like
from specdec.oracle.cases import (
    ALL_LOOP_SETUPS,
    BATCH_SPREAD_SETUPS,
    VERIFY_SETUPS,
    run_loop_setup,
    spread_checks,
)
from specdec.oracle.fat_tails import tail_check, tail_rows
from specdec.oracle.laws import EXACT_ATOL, POWER_P, ModelRows, max_abs_difference, target_law
from specdec.oracle.proposals import (
    PROPOSAL_SETUPS,
    greedy,
    proposal_check,
    started,
    tree_output_law,
)
from specdec.oracle.self_drafting import eagle_row_deviation

pytestmark = pytest.mark.distribution


def full_size(variant: Variant) -> int:
    # the sample size of the real check that must reject the variant
    if variant.kind == "proposal":
        return PROPOSAL_SETUPS[variant.setup].n
    if variant.kind == "draw":
        return tail_rows()[variant.setup].n
    if variant.kind == "batch":
        return BATCH_SPREAD_SETUPS[variant.setup].n
    return (VERIFY_SETUPS.get(variant.setup) or ALL_LOOP_SETUPS[variant.setup]).n


def test_catalogue():
    assert len(VARIANTS) >= 10
    for variant in VARIANTS.values():
        assert variant.doc and variant.doc.strip(), f"{variant.name} needs a description"
        if variant.kind == "draw" and variant.setup not in tail_rows():
            continue  # the bundled pair is not installed: test_oracle_rejects skips it
        # caught on at most half its family's runs: `make test` grades the twin at half size
        full = full_size(variant)
        assert variant.n <= full // 2, (variant.name, variant.n, full)


def rejected_by(variant: Variant):
    # the variant through its real check (same setup, statistic and seed), at its own n
    if variant.kind == "verify":
        results = VERIFY_SETUPS[variant.setup].run(variant.implementation, n=variant.n)
    elif variant.kind == "proposal":
        setup = PROPOSAL_SETUPS[variant.setup]
        setup = greedy(setup) if variant.check.endswith("T=0") else setup
        broken = variant.implementation(setup.parts[1]())
        return proposal_check(setup, "reference", n=variant.n, drafter=broken)
    elif variant.kind == "draw":
        if not fast_compiled.AVAILABLE or variant.setup not in tail_rows():
            pytest.skip("the compiled draw needs numba (the `fast` extra) and the bundled pair")
        return tail_check(variant.implementation, variant.setup, n=variant.n)
    elif variant.kind == "batch":
        results = spread_checks(variant.implementation, n=variant.n)
    else:
        setup = ALL_LOOP_SETUPS[variant.setup]
        results = run_loop_setup(variant.implementation, setup, n=variant.n, record_errors=True)
    return results[variant.check]


@pytest.mark.parametrize("name", VARIANTS)
def test_oracle_rejects(name):
    variant = VARIANTS[name]
    result = rejected_by(variant)
    assert result.p_value < POWER_P, (
        f"the oracle does not reject {name} ({variant.doc.strip()}): {result.describe()}"
    )


@pytest.mark.parametrize("temperature", [0.8, 1.3])
def test_eagle_tree_labelled_sampled_moves_the_output_law(temperature):
    """The mislabelled EAGLE-2 tree is not a harmless relabelling: at T > 0, handed to the
    verifier, its tree gives an output law off the target's (exactly, by verify_tree_law on
    the tree it proposes), while the drafter's own tree keeps the target's law to 1e-12.
    (At T = 0 it does no harm: p one-hot accepts or rejects a node whatever its q says, and
    the residual of a one-hot p is its argmax.)"""
    variant = VARIANTS["eagle_tree_labels_chosen_nodes_sampled"]
    setup = PROPOSAL_SETUPS["eagle-tree"]
    sampling = SamplingParams(temperature)
    target = setup.parts[0]
    p_rows = ModelRows(target, sampling)
    prompt, length = tuple(setup.prompt), setup.k + 1
    expected = target_law(p_rows, prompt, max_new_tokens=length)
    gaps = []
    for drafter in (setup.parts[1](), variant.implementation(setup.parts[1]())):
        _, _, ready = started(setup, "reference", drafter)
        rng = np.random.default_rng(0)
        tree = ready.propose_tree(np.asarray(prompt), setup.k, 16, sampling, rng)
        gaps.append(max_abs_difference(tree_output_law(p_rows, prompt, tree, length), expected))
    assert gaps[0] < EXACT_ATOL and gaps[1] > 1e-3, gaps


@pytest.mark.parametrize("name", EAGLE_DRAFTERS)
def test_eagle_row_check_rejects(name):
    setup = ALL_LOOP_SETUPS[VARIANTS[name].setup]
    broken = eagle_like(EAGLE_DRAFTERS[name], setup.make_drafter())
    deviation = max(eagle_row_deviation(setup, broken, seed=seed) for seed in (7, 8))
    assert deviation > 0.01, f"the row check does not see {name}: |q - q_oracle| <= {deviation}"


@pytest.mark.parametrize("name", ["eagle_feature_one_position_off", "eagle_keeps_draft_features"])
def test_law_keeping_eagle_bugs_run_silently(name):
    """They must be caught by what they change (q, and so the acceptance), not by a crash:
    without record_errors, a run that raises fails this test, naming the run."""
    variant = VARIANTS[name]
    run_loop_setup(variant.implementation, ALL_LOOP_SETUPS[variant.setup], n=100)

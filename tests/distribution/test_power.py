"""Power, shown: every broken variant of broken.py must be rejected by the oracle.

Each test runs the variant through the same setup, the same sampling code, the same statistic
and the same seed as the real check named in the catalogue, with fewer samples, and asserts
a raw p-value below POWER_P = 1e-6. That is below alpha / m for every family (1e-3 / 15), so
the real check, with its larger n, rejects the variant whatever its family's other members
say. A variant that crashes counts its runs as "raised <error>", an outcome of probability 0
(the real check fails on the exception itself).

The broken EAGLE drafters are also held, row by row, against the oracle's exact rows (the
feature-alignment check, self_drafting.eagle_row_deviation): the two that keep the output
law (a feature one position off, predicted features kept in the cache) are invisible to
every token law, and these tests show them seen exactly, as well as in the acceptance.
"""

from __future__ import annotations

import pytest

from specdec.oracle.broken import EAGLE_DRAFTERS, VARIANTS, eagle_like
from specdec.oracle.cases import ALL_LOOP_SETUPS, VERIFY_SETUPS, run_loop_setup
from specdec.oracle.laws import POWER_P
from specdec.oracle.self_drafting import eagle_row_deviation

pytestmark = pytest.mark.distribution


def test_catalogue():
    assert len(VARIANTS) >= 10
    for variant in VARIANTS.values():
        assert variant.doc and variant.doc.strip(), f"{variant.name} needs a description"
        # caught on at most half its family's runs: `make test` grades the twin at half size
        full = (VERIFY_SETUPS.get(variant.setup) or ALL_LOOP_SETUPS[variant.setup]).n
        assert variant.n <= full // 2, (variant.name, variant.n, full)


@pytest.mark.parametrize("name", VARIANTS)
def test_oracle_rejects(name):
    variant = VARIANTS[name]
    if variant.kind == "verify":
        results = VERIFY_SETUPS[variant.setup].run(variant.implementation, n=variant.n)
    else:
        setup = ALL_LOOP_SETUPS[variant.setup]
        results = run_loop_setup(variant.implementation, setup, n=variant.n, record_errors=True)
    result = results[variant.check]
    assert result.p_value < POWER_P, (
        f"the oracle does not reject {name} ({variant.doc.strip()}): {result.describe()}"
    )


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

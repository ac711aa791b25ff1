"""Power, shown: every broken variant of broken.py must be rejected by the oracle.

Each test runs the variant through the same setup, the same sampling code, the same statistic
and the same seed as the real check named in the catalogue, with fewer samples, and asserts
a raw p-value below POWER_P = 1e-6. That is below alpha / m for every family (1e-3 / 15), so
the real check, with its larger n, rejects the variant whatever its family's other members
say. A variant that crashes counts its runs as "raised <error>", an outcome of probability 0
(the real check fails on the exception itself).
"""

from __future__ import annotations

import pytest

from specdec.oracle.broken import VARIANTS
from specdec.oracle.cases import ALL_LOOP_SETUPS, VERIFY_SETUPS, run_loop_setup
from specdec.oracle.laws import POWER_P

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

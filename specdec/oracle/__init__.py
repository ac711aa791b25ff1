"""The statistical oracle's machinery, shipped with the package (docs/oracle.md).

    laws.py           statistics (chi-square with merged cells, binomial, Holm), exact laws by
                      enumeration, and the samplers that run an implementation n times
    cases.py          every sampled check's set-up, sample size and seed
    self_drafting.py  the exact laws and set-ups of early exit and extra heads
    proposals.py      each shipped drafter's law of proposals (what it hands the verifier)
    fat_tails.py      the compiled draw's rows with fat tails, their cells and power
    broken.py         the catalogue of broken samplers the oracle must reject

`pytest -m distribution` (tests/distribution/) runs the checks; notebook 09 shows them from
an installed package, where tests/ does not exist.
"""

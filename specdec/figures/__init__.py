"""Figures drawn from real runs (timings, traces, statistics, benchmark reports, laws).

matplotlib with the Agg backend: no display needed; every plot_* function writes a PNG and
returns its path. Kept apart from the core so that `reference` itself needs only NumPy.

    style.py      shared named styles: colours of temperatures, fates and cache slots,
                  token labels, boxes, legends, `save`
    mechanics.py  mechanics and costs: matmul times, forward costs, the roofline, causal mask,
                  speedup theory
    rounds.py     rounds and pipeline: draft rows, verification, pipeline, token fates
    cache.py      the KV caches through rounds
    laws.py       laws and the oracle: acceptance example, law comparison, oracle power
    trees.py      tree drafts: one round's tree with each node's fate, the tree attention mask
    bench.py      benchmark figures: speedup and acceptance against k, measured vs predicted,
                  accepted histogram, per-position acceptance
"""

import matplotlib

# before any submodule imports pyplot: figures are written to files, never shown
matplotlib.use("Agg")

from specdec.figures.batch import plot_batch_acceptance, plot_batch_pass  # noqa: E402
from specdec.figures.bench import (  # noqa: E402
    plot_acceptance_vs_k,
    plot_accepted_histogram,
    plot_measured_vs_predicted,
    plot_per_position_acceptance,
    plot_speedup_vs_k,
)
from specdec.figures.cache import plot_cache_rounds  # noqa: E402
from specdec.figures.laws import (  # noqa: E402
    plot_acceptance_example,
    plot_law_comparison,
    plot_oracle_power,
)
from specdec.figures.mechanics import (  # noqa: E402
    plot_causal_mask,
    plot_forward_costs,
    plot_matmul_times,
    plot_roofline,
    plot_speedup_theory,
)
from specdec.figures.rounds import (  # noqa: E402
    plot_draft_rows,
    plot_pipeline,
    plot_token_fates,
    plot_verification,
)
from specdec.figures.trees import plot_tree, plot_tree_mask  # noqa: E402

__all__ = [
    "plot_accepted_histogram",
    "plot_acceptance_example",
    "plot_acceptance_vs_k",
    "plot_batch_acceptance",
    "plot_batch_pass",
    "plot_cache_rounds",
    "plot_causal_mask",
    "plot_draft_rows",
    "plot_forward_costs",
    "plot_law_comparison",
    "plot_matmul_times",
    "plot_measured_vs_predicted",
    "plot_oracle_power",
    "plot_per_position_acceptance",
    "plot_pipeline",
    "plot_roofline",
    "plot_speedup_theory",
    "plot_speedup_vs_k",
    "plot_token_fates",
    "plot_tree",
    "plot_tree_mask",
    "plot_verification",
]

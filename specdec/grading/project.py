"""What the grader takes from the rest of the project: every name, in this one file.

The grader derives what it expects on its own (engine/laws.py writes every law apart from the
reference), so it needs the project only for what a check hands a submission, runs around
one, or reads an expected answer from. Every other grading module imports these names from
here, never from `reference` or `specdec` itself (tests/grader/test_layers.py checks it).

Only the exercises' folders import this file: not the engine, nor the cache exercise, so
the cache's Gradescope zip ships without the model code (delivery/gradescope.py ships what
grading an exercise imports: engine/closure.py).
"""

from __future__ import annotations

# the loop exercise's tiny pair: a one-layer GPT of the reference (its config, its weights)
from reference.config import GPTConfig

# handed to a submitted loop: the reference's drafter around the draft model; a prompt-lookup
# submission is wrapped as a Drafter of its own, which proposes a Draft
from reference.drafters import Draft, Drafter, ModelDrafter

# the eagle_align exercise's real drafter: the reference's, whose catch-up the submission's
# pairs replace (exercises/eagle_align/round.py), and its random weights; the names and
# shapes of what a drafter holds, for the eagle_block exercise's inputs
from reference.eagle import EagleDrafter, eagle_param_shapes, init_eagle_params
from reference.model import GPT, expected_param_shapes, init_params

# the sampling exercise's expected rows, and the SamplingParams a loop is handed
from reference.sampling import SamplingParams, probabilities

# the reference loop, run around a submitted verify (verify's in-loop family) or drafter
# (the lookup exercise's greedy runs)
from reference.speculative import speculative_generate

# the tree_mask exercise's expected answers, as the reference's pass and compaction compute
# them: the slots a node sees (ancestor_mask, below), its position, the slots a path keeps
from reference.tree.compaction import kept_slots

# the eagle_tree exercise's real EAGLE-2 drafter, whose growth the submission's replaces
# (exercises/eagle_tree/round.py): its block's tree pass (chain_parents, tree_forward_rows),
# and the reference's tree loop; position_ids is the tree_mask exercise's (above)
from reference.tree.eagle import EagleTreeDrafter
from reference.tree.forward import chain_parents, position_ids, tree_forward_rows
from reference.tree.loop import tree_speculative_generate

# handed to a submitted verify_tree: the reference's own Tree, the contract's type (and the
# draws of its nodes, for the trees the eagle_tree exercise builds)
from reference.tree.shape import POINT, ROOT, Tree, ancestor_mask

# what a submitted verify's answer becomes inside the reference loop
from reference.verification import Verification

# the speedup exercise's expected answers: E[tokens per round] and Leviathan's speedup, as the
# notebooks compute them
from specdec.costs import expected_tokens_per_round, predicted_speedup

# the tiny pair's draft: the target plus noise, the oracle's own stand-in
from specdec.standins import noisy_copy

__all__ = [
    "GPT",
    "Draft",
    "Drafter",
    "EagleDrafter",
    "EagleTreeDrafter",
    "GPTConfig",
    "ModelDrafter",
    "POINT",
    "ROOT",
    "SamplingParams",
    "Tree",
    "Verification",
    "ancestor_mask",
    "eagle_param_shapes",
    "chain_parents",
    "expected_param_shapes",
    "expected_tokens_per_round",
    "init_eagle_params",
    "init_params",
    "kept_slots",
    "noisy_copy",
    "position_ids",
    "predicted_speedup",
    "probabilities",
    "speculative_generate",
    "tree_forward_rows",
    "tree_speculative_generate",
]

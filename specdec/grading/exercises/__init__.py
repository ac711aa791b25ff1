"""The course's exercises, one per idea, in the order of the notebooks, and what grades each.

Each exercise is a skeleton in notebooks/exercises/ (the contract in its docstring), a worked
solution in notebooks/exercises/solutions/, and a kind of submission `specdec grade` knows:
the function's name (or `--kind`) says which families of checks run. This table is the one
place that names them; `specdec grade --list` prints it. What grades an exercise lives in the
folder of its kind, beside this file (cache/, sampling/, loop/, ..., each with its checks.py),
loaded by the "module:function" names below only when a grade needs it.

Light on purpose: it imports nothing heavier than the standard library, so the config and the
command line can read it without loading a grader.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

EXERCISE_DIR = "notebooks/exercises"


@dataclass(frozen=True)
class Exercise:
    kind: str  # what `--kind` calls it
    idea: str  # the idea it practises, in a few words
    function: str  # the name the skeleton defines (a function, or a class for the cache)
    skeleton: str  # file in notebooks/exercises/
    solution: str  # file in notebooks/exercises/solutions/
    notebook: str  # the notebook that teaches the idea (its file stem)
    families: tuple[str, ...]  # the families of checks, in report order
    checks: str  # "module:function": (policy) -> list[Family]
    revise: str = ""  # "module:function": (results by check name) -> verdict lines
    rule_aware: bool = False  # `checks` also takes require_rule= (the config's): some of its
    # checks are the contract's rule, scored only where the rule is required
    # what the worker that runs a submitted file may import (specdec/grading/engine/sandbox.py):
    # installed distributions (with what they require; scipy, and torch when it is installed:
    # a verify or a loop written in torch), modules of `reference`, and what grading.toml's
    # `libraries` adds
    libraries: tuple[str, ...] = ("numpy", "scipy", "torch")
    pieces: tuple[str, ...] = ()

    @property
    def skeleton_path(self) -> str:
        return f"{EXERCISE_DIR}/{self.skeleton}"

    @property
    def solution_path(self) -> str:
        return f"{EXERCISE_DIR}/solutions/{self.solution}"

    def spec(self, solution: bool = False) -> str:
        """'notebooks/exercises/my_x.py:function', what `specdec grade` takes."""
        return f"{self.solution_path if solution else self.skeleton_path}:{self.function}"


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        "cache",
        "the KV cache: temporary writes, commit, rollback",
        "SlotCache",
        "my_cache.py",
        "cache_solution.py",
        "02_transformer_and_kv_cache",
        ("cache",),
        "specdec.grading.exercises.cache.checks:cache_families",
    ),
    Exercise(
        "sampling",
        "temperature, top-k and top-p turn logits into the distribution",
        "sampling_distribution",
        "my_sampling.py",
        "sampling_solution.py",
        "05_acceptance_rejection",
        ("sampling",),
        "specdec.grading.exercises.sampling.checks:sampling_families",
    ),
    Exercise(
        "loop",
        "the round and the loop: draft, verify, commit, roll back",
        "speculative_generate",
        "my_loop.py",
        "loop_solution.py",
        "07_full_run",
        ("loop",),
        "specdec.grading.exercises.loop.checks:loop_families",
        # the pieces the skeleton lists (model, cache, probabilities, sample_token, verify)
        # and what they import; not the loop itself (speculative.py), nor the drafters
        pieces=("checks", "config", "kv_cache", "model", "sampling", "verification"),
    ),
    Exercise(
        "speedup",
        "the speedup with a rate per draft position: E[tokens per round], the speedups "
        "(plain decoding = 1) and the best k",
        "plan_k",
        "my_speedup.py",
        "speedup_solution.py",
        "07_full_run",
        ("speedup",),
        "specdec.grading.exercises.speedup.checks:speedup_families",
    ),
    Exercise(
        "verify",
        "acceptance-rejection: min(1, p/q), the residual, the bonus token",
        "verify",
        "my_verify.py",
        "verify_solution.py",
        "05_acceptance_rejection",
        ("law", "rule", "randomness", "in-loop"),
        "specdec.grading.exercises.verify.checks:verify_families",
        "specdec.grading.exercises.verify.checks:revise_verify_hints",
        rule_aware=True,  # the in-loop family's accepted counts
    ),
    Exercise(
        "lookup",
        "a prompt-lookup drafter and its point-mass q",
        "propose_lookup",
        "my_lookup.py",
        "lookup_solution.py",
        "10_drafting_without_a_second_model",
        ("lookup",),
        "specdec.grading.exercises.lookup.checks:lookup_families",
    ),
    Exercise(
        "tree",
        "tree verification: several candidates per position, one pass",
        "verify_tree",
        "my_tree.py",
        "tree_solution.py",
        "11_tree_drafts",
        ("tree-law", "tree-rule"),
        "specdec.grading.exercises.tree.checks:tree_families",
        "specdec.grading.exercises.tree.checks:revise_tree_hints",
    ),
    Exercise(
        "tree_mask",
        "a tree's attention mask, its positions, and the slots the accepted path keeps",
        "tree_attention",
        "my_tree_mask.py",
        "tree_mask_solution.py",
        "11_tree_drafts",
        ("tree-mask", "tree-positions", "tree-compaction"),
        "specdec.grading.exercises.tree_mask.checks:tree_mask_families",
    ),
    Exercise(
        "callables",
        "a loop written against another library, graded through two next-token callables",
        "speculative_sample",
        "my_callables_loop.py",
        "callables_loop_solution.py",
        "07_full_run",
        ("loop-callables",),
        "specdec.grading.exercises.callables.checks:callables_families",
    ),
    Exercise(
        "batch",
        "a ragged batched pass: per-row positions, the mask with padding, the slots written",
        "ragged_pass",
        "my_batch.py",
        "batch_solution.py",
        "13_ragged_batches",
        ("batch-positions", "batch-mask", "batch-writes"),
        "specdec.grading.exercises.batch.checks:batch_families",
    ),
    Exercise(
        "eagle_align",
        "an EAGLE drafter's catch-up: which token goes with which feature, and what is cached",
        "catch_up_pairs",
        "my_eagle_align.py",
        "eagle_align_solution.py",
        "14_drafting_from_features",
        ("eagle-pairs", "eagle-round"),
        "specdec.grading.exercises.eagle_align.checks:eagle_align_families",
    ),
    Exercise(
        "eagle_block",
        "EAGLE's fused draft block: a token and a feature in, the next hidden state out",
        "eagle_block_forward",
        "my_eagle_block.py",
        "eagle_block_solution.py",
        "14_drafting_from_features",
        ("eagle-block", "eagle-block-round"),
        "specdec.grading.exercises.eagle_block.checks:eagle_block_families",
    ),
    Exercise(
        "eagle_ttt",
        "EAGLE-3's training-time test: the drafter unrolled on its own outputs, loss and gradients",
        "training_time_test_step",
        "my_eagle_ttt.py",
        "eagle_ttt_solution.py",
        "14_drafting_from_features",
        ("ttt-inputs", "ttt-loss", "ttt-gradients"),
        "specdec.grading.exercises.eagle_ttt.checks:eagle_ttt_families",
    ),
    Exercise(
        "eagle_tree",
        "EAGLE-2's dynamic tree: expand per level by confidence, re-rank, keep a budget",
        "grow_eagle_tree",
        "my_eagle_tree.py",
        "eagle_tree_solution.py",
        "14_drafting_from_features",
        ("eagle-tree", "eagle-tree-round"),
        "specdec.grading.exercises.eagle_tree.checks:eagle_tree_families",
    ),
)

BY_KIND = {e.kind: e for e in EXERCISES}
KINDS = tuple(BY_KIND)


def exercise(kind: str) -> Exercise:
    """The exercise of `kind`; ValueError naming the known kinds."""
    if kind not in BY_KIND:
        raise ValueError(f"no exercise of kind {kind!r} (known: {', '.join(KINDS)})")
    return BY_KIND[kind]


def kind_of_name(name: str) -> str | None:
    """The kind whose skeleton defines `name` (None: no exercise names it)."""
    return next((e.kind for e in EXERCISES if e.function == name), None)


def load(target: str) -> Callable:
    """'module:function' -> the function (imported only when a grade needs it)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def families_of(kind: str, policy: str = "shrink", require_rule: bool = True) -> list:
    """The families of checks that grade a submission of `kind` (list[Family]); `require_rule`
    is the config's (is the contract's rule scored?)."""
    chosen = exercise(kind)
    if chosen.rule_aware:
        return load(chosen.checks)(policy, require_rule=require_rule)
    return load(chosen.checks)(policy)


def revise_of(kind: str) -> Callable | None:
    target = exercise(kind).revise
    return load(target) if target else None


def listing() -> str:
    """What `specdec grade --list` prints: every exercise, its skeleton and its command."""
    lines = ["The exercises, in the order of the notebooks (grade one: specdec grade SPEC):", ""]
    w = max(len(e.kind) for e in EXERCISES)
    for e in EXERCISES:
        lines += [
            f"  {e.kind:<{w}} {e.idea}",
            f"  {'':<{w}} skeleton {e.spec()}  (notebook {e.notebook})",
            f"  {'':<{w}} families {', '.join(e.families)}",
        ]
    return "\n".join(lines)

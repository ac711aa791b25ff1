"""The drafters the CLI and the bench can run, by name.

model    an independent draft model (ModelDrafter), the article's §10.1
lookup   prompt lookup / n-gram drafts from the committed text (LookupDrafter), §10.2
hybrid   lookup when the text has a match, the draft model otherwise (HybridDrafter)
early-exit   the target's first blocks + a trained exit head (EarlyExitDrafter), §10.3;
         its verification pass starts the drafted rows at the exit layer
heads    extra heads on the target's last hidden state (HeadsDrafter), §10.3
lookup+heads lookup when the text has a match, the heads otherwise (no second model at all)
tree, tree-wide  the draft model's top-b tree (ModelTreeDrafter), one target pass per round
tree-heads   the extra heads' tree (HeadsTreeDrafter)
eagle    one block that extrapolates the target's own features (EagleDrafter, EAGLE)
eagle-tree   the same drafter growing a dynamic tree by its confidence (EagleTreeDrafter,
         EAGLE-2); its k is its node budget, so it verifies as many nodes as `eagle` at k

Every drafter runs on both backends: `core` is the `reference` module or the GPU twin
`gpu`, and the tree drafters and loop come from its `tree` module (reference.tree, gpu.tree).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np

from reference.eagle import TRAIN_COMMAND as TRAIN_EAGLE
from reference.eagle import init_eagle_params
from reference.llama import Llama
from reference.tree import POINT
from specdec.bundled import MODELS_DIR, SELF_DRAFT_DIR, load_exit_head, load_heads
from specdec.fast_cpu import FastGPT, FastLlama
from specdec.fast_cpu.draw import FastModelDrafter

DRAFTERS = (
    "model", "lookup", "hybrid", "early-exit", "heads", "lookup+heads", "tree", "tree-wide",
    "tree-heads", "eagle", "eagle-tree",
)  # fmt: skip
# Tree shapes by name (widths per depth). Top-b point masses: exact at any temperature, and
# at greedy the only rule whose siblings differ (sampling a one-hot q repeats one token).
TREE_WIDTHS = {"tree": (2, 1, 1, 1), "tree-wide": (3, 1, 1), "tree-heads": (3, 2, 2, 1)}
TREE_DRAFTERS = tuple(TREE_WIDTHS)  # their k is the tree's depth, len(widths)
HEADS_TREE_NODES = 10

# EAGLE (reference/eagle.py) and its dynamic tree (reference/tree/eagle.py, EAGLE-2). The
# tree's k is its node budget and its depth limit at once: at k it verifies at most k
# candidates, as the chain at k verifies k, so the method table sets them side by side at
# equal nodes (and the tree may come out a chain of k when the drafter is sure).
EAGLE_DRAFTERS = ("eagle", "eagle-tree")
DYNAMIC_TREE_DRAFTERS = ("eagle-tree",)
EAGLE_TREE_TOP = 4  # children offered per expanded node (EAGLE-2's top-k)
RANDOM_EAGLE = "random"  # eagle_dir for untrained EAGLE weights (the CLI's --random)
# the EAGLE weights trained on the bundled target (specdec/training/train_eagle.py)
EAGLE_DIR = MODELS_DIR / "eagle"

# The exit layer of `early-exit`: after 2 of the bundled target's 6 blocks. Its trained exit
# head agrees with the target's argmax on 75 % of held-out positions (80 % after 3 blocks),
# and drafting costs a third of a target step instead of a half (docs/benchmarks.md).
EXIT_LAYER = 2


def make_drafter(
    name: str,
    core,
    target,
    draft,
    min_confidence: float | None = None,
    self_draft_dir=SELF_DRAFT_DIR,
    exit_layer: int = EXIT_LAYER,
    tree_widths: tuple[int, ...] | None = None,
    eagle_dir: Path | str | None = EAGLE_DIR,
    tree_nodes: int | None = None,
    eagle_seed: int = 0,
):
    # -> a Drafter of `core` (the `reference` or `gpu` module) for the pair (target, draft);
    # `self_draft_dir` holds the exit heads and extra heads trained on this target;
    # `tree_widths` replaces a tree drafter's shape (children per node at each depth);
    # `eagle_dir` holds the EAGLE weights trained on it (RANDOM_EAGLE: untrained ones, drawn
    # with `eagle_seed`); `tree_nodes` is eagle-tree's node budget and depth limit (its k)
    if name not in DRAFTERS:
        raise ValueError(f"drafter must be one of {', '.join(DRAFTERS)}, got {name!r}")
    if name == "eagle":
        return eagle_drafter(core, target, eagle_dir, eagle_seed)
    if name == "eagle-tree":
        return eagle_tree_drafter(
            core, eagle_drafter(core, target, eagle_dir, eagle_seed), tree_nodes
        )
    if name == "model":
        return model_drafter(core, draft, min_confidence)
    if name == "early-exit":  # no trained exit head: the target's own final LayerNorm
        head = None if self_draft_dir is None else load_exit_head(exit_layer, self_draft_dir)
        return core.EarlyExitDrafter(target, exit_layer, head, min_confidence)
    if name == "heads":
        return core.HeadsDrafter(target, trained_heads(self_draft_dir, target))
    if name in ("tree", "tree-wide"):
        widths = tree_widths or TREE_WIDTHS[name]
        return tree_module(core).ModelTreeDrafter(draft, widths, POINT)
    if name == "tree-heads":
        heads = core.HeadsDrafter(target, trained_heads(self_draft_dir, target))
        widths = tree_widths or TREE_WIDTHS[name]
        return tree_module(core).HeadsTreeDrafter(heads, widths, HEADS_TREE_NODES)
    # "longest": copy from the occurrence followed by the most tokens; it beat "recent" on
    # copy-heavy prompts and tied on held-out code (docs/benchmarks.md, "Drafting without a
    # second model", like the choices below)
    if name == "lookup":
        return core.LookupDrafter(target.n_vocab, target.config.n_ctx, prefer="longest")
    # In a hybrid, a match of one or two bytes is weak evidence and hides the draft model
    # (at byte level almost every token has occurred before): only matches of 3-4 tokens
    # take over.
    lookup = core.LookupDrafter(
        target.n_vocab, target.config.n_ctx, max_ngram=4, min_ngram=3, prefer="longest"
    )
    if name == "lookup+heads":
        return core.HybridDrafter(
            lookup, core.HeadsDrafter(target, trained_heads(self_draft_dir, target))
        )
    return core.HybridDrafter(lookup, model_drafter(core, draft, min_confidence))


# the drafters made of parts trained on one target (an exit head, extra heads, EAGLE): a pair
# that has none of them for its target cannot run these (`refusal`)
TRAINED_PART_DRAFTERS = ("early-exit", "heads", "lookup+heads", "tree-heads", *EAGLE_DRAFTERS)


def refusal(name: str, core, target, draft, **options) -> str | None:
    # -> why this pair cannot run drafter `name` (make_drafter's one-line error), or None.
    # Only drafters with trained parts can be refused; they are built once here and dropped
    # (the method table asks before it measures anything, and leaves the refused ones out)
    if name not in TRAINED_PART_DRAFTERS:
        return None
    try:
        make_drafter(name, core, target, draft, **options)
    except ValueError as err:
        return str(err)
    return None


def model_drafter(core, draft, min_confidence: float | None):
    # -> core.ModelDrafter(draft); for the reference with a fast-path draft model, the one
    # whose sampled draws are one compiled call (the same law: specdec/fast_cpu/draw.py)
    if core.__name__ == "reference" and isinstance(draft, FastGPT):
        return FastModelDrafter(draft, min_confidence)
    return core.ModelDrafter(draft, min_confidence)


def describe_tree(
    name: str, tree_widths: tuple[int, ...] | None = None, nodes: int | None = None
) -> str:
    # "2,2,1 (children per node at depths 1..3; 10 candidates)": a tree drafter's shape;
    # eagle-tree's grows each round: `nodes` is its budget (its k)
    if name in DYNAMIC_TREE_DRAFTERS:
        return (
            f"dynamic (EAGLE-2): the {nodes} likeliest candidates by the drafter's path "
            f"probability, top {EAGLE_TREE_TOP} children per expanded node, depth <= {nodes}"
        )
    widths = tree_widths or TREE_WIDTHS[name]
    candidates, level = 0, 1
    for b in widths:
        level *= b
        candidates += level
    text = f"{','.join(map(str, widths))} (children per node at depths 1..{len(widths)}; "
    if name == "tree-heads" and candidates > HEADS_TREE_NODES:
        return text + f"the {HEADS_TREE_NODES} likeliest of {candidates} candidates)"
    return text + f"{candidates} candidates)"


def trained_heads(self_draft_dir, target) -> dict:
    if self_draft_dir is None:
        raise ValueError(
            "the heads drafter needs extra heads trained on this target: train them with "
            "`python -m specdec.training.train_heads --target DIR --out DIR2` and pass "
            "--self-draft DIR2"
        )
    return load_heads(self_draft_dir)


def eagle_drafter(core, target, eagle_dir, seed: int = 0):
    # -> the EagleDrafter of `core` for `target`: the weights trained on it (models/eagle/ for
    # the bundled target, through load_eagle), or untrained ones for --random
    eagle = importlib.import_module(f"{core.__name__}.eagle")
    if eagle_dir is None:
        raise ValueError(
            "the eagle drafter needs EAGLE weights trained on this target: train them with "
            f"`{TRAIN_EAGLE}` (docs/training.md) and pass --eagle DIR, or pass --random for "
            "untrained ones"
        )
    if isinstance(eagle_dir, str) and eagle_dir == RANDOM_EAGLE:
        # EAGLE-1 weights (the top layer's features): the output law is the target's whatever
        # they are, so an untrained drafter is exact (its drafts are just rarely accepted)
        drafter = eagle.EagleDrafter(
            target, init_eagle_params(target.config, np.random.default_rng(seed))
        )
    else:
        weights = importlib.import_module(f"{core.__name__}.weights")  # the I/O edge
        drafter = weights.load_eagle(Path(eagle_dir), target)
    return on_the_targets_path(drafter, target)


def on_the_targets_path(drafter, target):
    # An EAGLE block has the shapes of the target's blocks, so a target on the CPU fast path
    # (specdec/fast_cpu/model.py) lends its measured plan to the block: the same tricks for the same
    # products (the plain GELU alone costs ~0.1 ms a drafted token here). The block's cache
    # keeps its layout; the weights are laid out anew in the fast model, the drafter's
    # untouched. A twin or a plain target keeps the block as it is.
    if isinstance(target, FastGPT) and not isinstance(drafter.block_model, FastGPT):
        block = drafter.block_model
        kind = FastLlama if isinstance(block, Llama) else FastGPT  # the block's own family
        drafter.block_model = kind(block.config, block.params, target.plan)
    return drafter


def eagle_tree_drafter(core, eagle, nodes: int | None):
    # -> the EagleTreeDrafter of `core` around `eagle`: `nodes` candidates at most, no deeper
    # than `nodes` (None: the class's own budget and depth)
    tree = tree_module(core)
    if nodes is None:
        return tree.EagleTreeDrafter(eagle, top=EAGLE_TREE_TOP)
    return tree.EagleTreeDrafter(eagle, max_nodes=nodes, depth=nodes, top=EAGLE_TREE_TOP)


def drafts_tree(name: str) -> bool:
    # does this drafter draft trees (a static shape or a dynamic one)?
    return name in TREE_DRAFTERS or name in DYNAMIC_TREE_DRAFTERS


def tree_module(core):
    # the `reference` or `gpu` module -> its tree loop and drafters (reference.tree, gpu.tree)
    return importlib.import_module(f"{core.__name__}.tree")


def generate_function(core, drafter):
    # the loop of `core` that runs this drafter: trees have their own round (its tree module)
    if hasattr(drafter, "propose_tree"):
        return tree_module(core).tree_speculative_generate
    return core.speculative_generate

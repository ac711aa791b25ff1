"""The options several commands share: their definitions, and the checks that turn each one
into a value or a one-line error (a ValueError, exit 2) before any work starts."""

from __future__ import annotations

import argparse
import importlib
import os
from pathlib import Path

from specdec.drafting import DRAFTERS, DYNAMIC_TREE_DRAFTERS, EAGLE_DRAFTERS, TREE_DRAFTERS


class HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default, unless the help already names it."""

    def _get_help_string(self, action):
        help_text = action.help or ""
        if "default" in help_text or action.default is argparse.SUPPRESS:
            return help_text
        return super()._get_help_string(action)


def add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        metavar="DIR",
        help="target checkpoint folder (config.json + model.safetensors, and tokenizer.json "
        "for a Hugging Face GPT-2); give --draft with it; default: the bundled pair",
    )
    parser.add_argument(
        "--draft",
        metavar="DIR",
        help="draft checkpoint folder, sharing the target's tokenizer; default: the bundled pair",
    )
    parser.add_argument(
        "--random",
        action="store_true",
        help="untrained random models instead of a checkpoint (their text is noise)",
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help="run the plain model instead of the CPU fast path (same logits, slower)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of every random choice (and of --random)"
    )
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads")
    parser.add_argument(
        "--drafter",
        default="model",
        help=f"one of {', '.join(DRAFTERS)}. model: the draft model; lookup: prompt lookup / "
        "n-gram drafts from the text so far; hybrid: lookup when it matches, the draft model "
        "otherwise; early-exit: the target's first 2 blocks + a trained exit head; heads: "
        "extra heads on the target's last hidden state; lookup+heads: lookup, else the "
        "heads; eagle: one block extrapolating the target's own features (EAGLE); "
        "eagle-tree: the same drafter growing a tree by its confidence (EAGLE-2), k = its "
        "node budget. bench also takes a comma list or 'all': the method table "
        "(specdec/measure/methods.py)",
    )
    parser.add_argument(
        "--self-draft",
        metavar="DIR",
        help="exit heads and extra heads trained on this target (specdec/training/train_heads.py); "
        "default: models/self_draft for the bundled pair, none for other checkpoints (early-"
        "exit then exits through the target's own final LayerNorm; heads need them)",
    )
    parser.add_argument(
        "--eagle",
        metavar="DIR",
        help="EAGLE weights trained on this target (eagle.safetensors + metadata.json, "
        "specdec/training/train_eagle.py); default: models/eagle for the bundled pair, "
        "untrained random ones with --random, none for other checkpoints",
    )
    parser.add_argument(
        "--backend",
        choices=["cpu", "gpu"],
        default="cpu",
        help="cpu: the NumPy reference; gpu: the CuPy twin (gpu/; NumPy mode without a CUDA "
        "device)",
    )
    parser.add_argument(
        "--tree",
        metavar="WIDTHS",
        help="with --drafter tree, tree-wide or tree-heads: the tree's shape as children per "
        "node at each depth, e.g. 2,1,1,1 (default: the drafter's, specdec/drafting.py)",
    )
    parser.add_argument(
        "--min-confidence",
        type=float,
        default=None,
        help="stop a round's drafting early when the draft's top probability is below this "
        "(k becomes the most a round drafts); default: always draft k",
    )


def parse_list(text: str, kind, option: str = "list"):
    """'1-8' or '1,2,4' -> [1, ..., 8] / [1, 2, 4]; anything else is a ValueError that
    names the option and shows the syntax."""
    try:
        if kind is int and "-" in text:
            lo, hi = (int(x) for x in text.split("-"))
            values = list(range(lo, hi + 1))
        else:
            values = [kind(x) for x in text.split(",")]
    except ValueError:
        syntax = "1-8 or 1,2,4" if kind is int else "0,0.8"
        raise ValueError(f"{option} {text!r}: expected a list like {syntax}") from None
    if not values:
        raise ValueError(f"{option} {text!r} is an empty range")
    return values


def check_k(k: int, max_new_tokens: int) -> None:
    # A round drafts at most max_new_tokens - 1 tokens, so a larger k buys nothing; refusing
    # it here keeps a k of 10**12 from sizing the statistics' per-position arrays.
    if max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    if not 1 <= k <= max_new_tokens:
        raise ValueError(
            f"k must be in 1..{max_new_tokens} (--max-new-tokens): a round never drafts more "
            f"than it can emit, got {k}"
        )


def check_drafter(name: str, backend: str = "cpu") -> None:
    # every drafter runs on both backends where the GPU twin has its twin (gpu/)
    if name not in DRAFTERS:
        raise ValueError(f"--drafter {name!r}: demo runs one of {', '.join(DRAFTERS)}")
    if backend == "gpu" and name in EAGLE_DRAFTERS:
        missing = [f"{m}.{a}" for m, a in twin_parts(name) if not twin_has(m, a)]
        if missing:
            raise ValueError(
                f"--drafter {name} has no GPU twin yet ({', '.join(missing)} is missing): "
                "run it with --backend cpu"
            )


def twin_parts(name: str) -> list[tuple[str, str]]:
    # (module, name) of the twin that an EAGLE drafter needs (specdec/drafting.py reads them)
    parts = [("gpu.eagle", "EagleDrafter"), ("gpu.weights", "load_eagle")]
    return parts + ([("gpu.tree", "EagleTreeDrafter")] if name in DYNAMIC_TREE_DRAFTERS else [])


def twin_has(module: str, attribute: str) -> bool:
    # does the twin define this? (imports the twin: only --backend gpu asks)
    try:
        return hasattr(importlib.import_module(module), attribute)
    except ModuleNotFoundError:
        return False


def drafter_is_tree(args) -> bool:
    # a tree of a fixed shape (--tree): its depth is the shape's, and -k is refused
    return args.drafter in TREE_DRAFTERS


def tree_widths(args) -> tuple[int, ...] | None:
    # --tree "2,1,1,1" -> (2, 1, 1, 1); only with a tree drafter of a fixed shape
    if getattr(args, "tree", None) is None:
        return None
    if args.drafter in DYNAMIC_TREE_DRAFTERS:
        raise ValueError(
            f"--tree gives a fixed tree's shape; --drafter {args.drafter} grows its tree by its "
            "own confidence: -k sets its node budget"
        )
    if not args.drafter.startswith("tree"):
        raise ValueError(
            "--tree gives a tree's shape: use it with --drafter tree, tree-wide or tree-heads"
        )
    widths = tuple(parse_list(args.tree, int, "--tree"))
    if not widths or min(widths) < 1:
        raise ValueError(f"--tree {args.tree!r}: every width must be >= 1")
    return widths


PROMPT_SETS = ("heldout", "code", "text", "copy")


def prompt_set_names(args, several: bool) -> list[str]:
    # one set for one drafter; a comma list (default: held-out and copy-heavy) for several
    names = [n.strip() for n in args.prompts.split(",") if n.strip()]
    if not several and len(names) != 1:
        raise ValueError(f"--prompts {args.prompts!r}: one set with one drafter")
    return names


def write_atomically(path: Path, text: str) -> None:
    # a report under --out, through a temporary file and a rename: an interrupt never leaves
    # half a file
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)

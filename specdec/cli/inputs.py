"""What the options name: the model pair (checkpoint folders, the bundled pair or random
weights), the core whose loops run it (--backend), and the bench's prompts (--prompts).

Never a guess: random weights only with --random, the bundled pair when no folder is named,
and a named folder that is missing or not a checkpoint is an error (exit 2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import reference
from reference.eagle import FILES as EAGLE_FILES
from reference.llama import Llama
from reference.model import GPT
from specdec.bundled import MODELS_DIR as BUNDLED
from specdec.bundled import bundled_pair_available
from specdec.drafting import EAGLE_DIR, EAGLE_DRAFTERS, RANDOM_EAGLE, TRAIN_EAGLE
from specdec.fast_cpu import fast
from specdec.measure.bench import CODE_PROMPTS, COPY_PROMPTS, TEXT_PROMPTS, held_out_code_prompts
from specdec.standins import random_pair
from specdec.text import ByteTokenizer, load_text_pair


def load_pair(args) -> tuple[GPT, GPT, object, str]:
    # -> (target, draft, the tokenizer they share, a line saying where they came from)
    target, draft, tokenizer, source = load_plain_pair(args)
    target, draft, source = fast_pair(target, draft, source, args.plain)
    return target, draft, tokenizer, source


def fast_pair(target, draft, source: str, plain: bool) -> tuple[GPT, GPT, str]:
    # -> the pair on the CPU fast path, unless --plain or a model it does not run, with the
    # source line saying which
    if plain:
        return target, draft, source + ", plain model"
    return fast(target), fast(draft), source + ", CPU fast path (docs/fast-path.md)"


def twin_model(core, model: GPT) -> GPT:
    # --backend gpu: a plain model's twin of its own family (core is the gpu package), its
    # weights copied to the device once
    twin = core.Llama if isinstance(model, Llama) else core.GPT
    return twin(model.config, model.params)


def load_plain_pair(args) -> tuple[GPT, GPT, object, str]:
    if args.random:
        if args.target or args.draft:
            raise ValueError("--random makes untrained models: give it or --target/--draft")
        target, draft = random_pair(args.seed)
        untrained = "random weights (--random: untrained, the output is noise)"
        return target, draft, ByteTokenizer(), untrained
    target_dir, draft_dir = checkpoint_dirs(args)
    pair = load_text_pair(target_dir, draft_dir)  # checkpoints, one tokenizer, vocabularies
    return pair.target, pair.draft, pair.tokenizer, f"{target_dir} + {draft_dir}"


def checkpoint_dirs(args) -> tuple[Path, Path]:
    # -> (target folder, draft folder): both named, or neither (the bundled pair)
    if (args.target is None) != (args.draft is None):
        raise ValueError(
            "give --target and --draft together (a pair shares one tokenizer); "
            "give neither for the bundled pair"
        )
    if args.target is None:
        if not bundled_pair_available():
            raise ValueError(
                f"the bundled pair is missing from {BUNDLED}; reproduce it with "
                "`python -m specdec.training.train_pair` (docs/training.md), or pass --random for "
                "untrained weights"
            )
        return BUNDLED / "target", BUNDLED / "draft"
    return checkpoint_dir(args.target, "--target"), checkpoint_dir(args.draft, "--draft")


def checkpoint_dir(text: str, option: str) -> Path:
    path = Path(text)
    if not path.exists():
        raise ValueError(
            f"{option} {text}: no such folder (a checkpoint folder holds config.json + "
            "model.safetensors; untrained weights need --random)"
        )
    if not path.is_dir():
        raise ValueError(
            f"{option} {text} is a file; give the folder that holds config.json + model.safetensors"
        )
    return path


def self_draft_dir(args) -> Path | None:
    # the self-drafting parts of this target: named, the bundled ones for the bundled pair,
    # else none (never the bundled target's parts for another model)
    if args.self_draft is not None:
        path = Path(args.self_draft)
        if not path.is_dir():
            raise ValueError(f"--self-draft {path}: no such folder")
        return path
    return BUNDLED / "self_draft" if args.target is None and not args.random else None


def eagle_dir(args, drafters) -> Path | str | None:
    # the EAGLE weights of this target, for make_drafter: named (--eagle), the bundled ones
    # for the bundled pair, random ones with --random, else none (make_drafter then says how
    # to train them). Checked here, before any model is loaded, when a drafter needs them.
    if not any(name in EAGLE_DRAFTERS for name in drafters):
        return None
    if args.eagle is not None:
        path = Path(args.eagle)
        if not path.is_dir():
            raise ValueError(f"--eagle {path}: no such folder")
    elif args.random:
        return RANDOM_EAGLE
    elif args.target is None:
        path = EAGLE_DIR
    else:
        return None
    missing = [name for name in EAGLE_FILES if not (path / name).is_file()]
    if missing:
        raise ValueError(
            f"no trained EAGLE drafter in {path} ({' and '.join(missing)} missing): train one "
            f"on the frozen target with `{TRAIN_EAGLE}` (docs/training.md), or pass --random "
            "for untrained weights"
        )
    return path


def backend_core(args):
    # -> (the core module the loops come from, a line naming where they run)
    if args.backend == "gpu":
        # the twin's import loads CuPy and asks for a CUDA device: only --backend gpu pays it
        import gpu.device.backend  # lazy: CuPy and a CUDA device (above); binds `gpu` too

        return gpu, f"gpu twin: {gpu.device.backend.backend_name()}"
    return reference, "reference: NumPy on the CPU"


def bench_prompts(args, tokenizer) -> list[np.ndarray]:
    # the set --prompts names, as token ids of this tokenizer
    if args.prompts == "heldout":
        snippets = held_out_code_prompts(args.n_prompts)  # byte ids
        if isinstance(tokenizer, ByteTokenizer):
            return snippets
        texts = [bytes(s.astype(np.uint8)).decode("utf-8", "replace") for s in snippets]
    else:
        texts = {"text": TEXT_PROMPTS, "code": CODE_PROMPTS, "copy": COPY_PROMPTS}[args.prompts]
    return [tokenizer.encode(t) for t in texts]

"""The trained target/draft pair that ships in `models/` (see docs/training.md).

models/ is the package `specdec.models` (pyproject.toml maps it): a checkout and an installed
wheel find it the same way, through importlib.resources, never by a path from the repository.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from reference.model import GPT
from reference.weights import load_gpt2, read_safetensors

# the package's folder: models/ in a checkout (an editable install), site-packages otherwise
MODELS_DIR = Path(str(files("specdec.models")))
TARGET_DIR = MODELS_DIR / "target"
DRAFT_DIR = MODELS_DIR / "draft"


def bundled_pair_available() -> bool:
    return (TARGET_DIR / "model.safetensors").is_file() and (
        DRAFT_DIR / "model.safetensors"
    ).is_file()


def load_bundled_pair() -> tuple[GPT, GPT]:
    """(target, draft) as NumPy GPTs; byte-level vocabulary (reference.tokenizer)."""
    if not bundled_pair_available():
        raise FileNotFoundError(
            f"the bundled pair is missing from {MODELS_DIR}; reinstall specdec-lab, or, in a "
            "checkout with the `train` extra, reproduce it with "
            "`python -m specdec.training.train_pair` (see docs/training.md)"
        )
    return load_gpt2(TARGET_DIR), load_gpt2(DRAFT_DIR)


# The self-drafting parts trained on the frozen bundled target (specdec/training/train_heads.py):
# exit heads after blocks 2 and 3 (early exit) and four extra heads.
SELF_DRAFT_DIR = MODELS_DIR / "self_draft"


def load_exit_head(n_layer: int, directory: Path = SELF_DRAFT_DIR) -> dict | None:
    """The trained exit head after `n_layer` blocks, as float32 arrays, or None if none
    was trained for that layer (the drafter then exits through the target's own ln_f)."""
    path = Path(directory) / f"exit-{n_layer}.safetensors"
    if not path.is_file():
        return None
    return {name: w.astype("float32") for name, w in read_safetensors(path).items()}


def load_heads(directory: Path = SELF_DRAFT_DIR) -> dict:
    """The trained extra heads (float32), or an error that says how to make them."""
    path = Path(directory) / "heads.safetensors"
    if not path.is_file():
        raise FileNotFoundError(
            f"no extra heads in {directory}: train them on the frozen target with "
            "`python -m specdec.training.train_heads --out DIR` (docs/training.md)"
        )
    return {name: w.astype("float32") for name, w in read_safetensors(path).items()}

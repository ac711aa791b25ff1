"""The trained target/draft pair that ships in `models/` (see docs/training.md)."""

from __future__ import annotations

from pathlib import Path

from reference.model import GPT

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
TARGET_DIR = MODELS_DIR / "target"
DRAFT_DIR = MODELS_DIR / "draft"


def bundled_pair_available() -> bool:
    return (TARGET_DIR / "model.safetensors").is_file() and (
        DRAFT_DIR / "model.safetensors"
    ).is_file()


def load_bundled_pair() -> tuple[GPT, GPT]:
    """(target, draft) as NumPy GPTs; byte-level vocabulary (reference.tokenizer)."""
    from reference.weights import load_gpt2

    if not bundled_pair_available():
        raise FileNotFoundError(
            f"the bundled pair is missing from {MODELS_DIR}; reproduce it with "
            "`python -m training.train_pair` (see docs/training.md)"
        )
    return load_gpt2(TARGET_DIR), load_gpt2(DRAFT_DIR)

"""The twin's checkpoint loading: the reference reads the files, the twin copies the weights.

What differs from reference/weights.py, and why: nothing about the format or its checks
(the reference's `load_gpt2` does all of that on the host); the one GPU step is a copy of
the weights into device memory, which `gpu.model.GPT` makes when it is built.
"""

from __future__ import annotations

from pathlib import Path

from gpu.model import GPT
from reference import weights as reference_weights
from reference.weights import CheckpointError

__all__ = ["CheckpointError", "load_gpt2"]


def load_gpt2(directory: str | Path) -> GPT:
    """Load a GPT-2 checkpoint directory (config.json + model.safetensors) onto the device."""
    model = reference_weights.load_gpt2(directory)
    return GPT(model.config, model.params)

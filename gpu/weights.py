"""The twin's checkpoint loading: the reference reads the files, the twin copies the weights.

What differs from reference/weights.py, and why: nothing about the format or its checks
(the reference's `load_gpt2`, `load_llama` and `read_eagle` do all of that on the host);
the one GPU step is a copy of the weights into device memory, which `gpu.model.GPT`,
`gpu.llama.Llama` and `gpu.eagle`'s drafter make when they are built.
"""

from __future__ import annotations

from pathlib import Path

from gpu.eagle import EagleDrafter
from gpu.llama import Llama
from gpu.model import GPT
from reference import llama as reference_llama
from reference import weights as reference_weights
from reference.weights import CheckpointError

__all__ = ["CheckpointError", "load_eagle", "load_gpt2", "load_llama", "load_model"]


def load_gpt2(directory: str | Path) -> GPT:
    """Load a GPT-2 checkpoint directory (config.json + model.safetensors) onto the device."""
    model = reference_weights.load_gpt2(directory)
    return GPT(model.config, model.params)


def load_eagle(folder: str | Path, target) -> EagleDrafter:
    """The trained EAGLE drafter in `folder` (models/eagle/) as the twin's, for `target` (a
    twin GPT, or a reference one: its twin): the reference reads and checks the files, the
    twin's drafter copies the weights to the device once."""
    return reference_weights.load_eagle(folder, target, drafter=EagleDrafter)


def load_llama(directory: str | Path) -> Llama:
    """Load a Llama-family checkpoint folder (config.json + one or several safetensors
    shards) onto the device: the reference reads and checks it on the host."""
    model = reference_weights.load_llama(directory)
    return Llama(model.config, model.params)


def load_model(directory: str | Path) -> GPT:
    """Load a checkpoint folder of either family (config.json's model_type decides) onto the
    device: a twin GPT or a twin Llama."""
    model = reference_weights.load_model(directory)
    twin = Llama if isinstance(model, reference_llama.Llama) else GPT
    return twin(model.config, model.params)

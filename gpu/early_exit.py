"""The twin's early exit: the target's first L' blocks draft on the device, and the twin's
verification pass starts the drafted rows at the exit layer.

What differs from reference/early_exit.py, and why:
* It drafts as the twin's ModelDrafter does (gpu/drafters.py): each drafted token is a
  device scalar drawn by `inverse_cdf` from k uniforms copied over in one call, fed straight
  into the next step; nothing comes back to the host while it drafts (`min_confidence`
  aside, as for the twin's ModelDrafter). The class is the reference's, with the twin's
  ModelDrafter below it in the method order: the reference's `propose` (which attaches the
  rows fed as `Draft.shared`) calls the twin's, which calls `step` for each forward. `step`
  is the reference's without its host check of the logits (a sync per drafted token): the
  finiteness flag of the round's one transfer covers q as well as p.
* Its lower blocks are the twin target's own device arrays (the twin `GPT` shares arrays
  that are already on the device), and an exit adapter is copied over once.
* The shared rows (reference.drafters.SharedLayers) are device arrays, and the reference's
  `SharedLayers.continue_in` runs on them unchanged: it only calls model methods, slices,
  writes the cache and joins rows with `np.concatenate`, which hands CuPy arrays to CuPy
  (NumPy's __array_function__ protocol). So the twin's verification pass copies the
  drafter's K/V slots of blocks 0..L'-1 device to device and runs only what was not run.
The exit head's checks, the cache discipline, and why the shared rows are exactly the
target's are the reference's (reference/early_exit.py).
"""

from __future__ import annotations

import numpy as np

from gpu.device.backend import to_device
from gpu.drafters import ModelDrafter, register_twin
from gpu.model import GPT, as_twin_model
from reference import early_exit as reference_early_exit
from reference.config import LlamaConfig
from reference.early_exit import EXIT_ADAPTER, EXIT_NORM, EXIT_RMS_NORM

__all__ = ["EarlyExitDrafter"]


class EarlyExitDrafter(reference_early_exit.EarlyExitDrafter, ModelDrafter):
    """The reference's early-exit drafter on the device (same constructor, same calls)."""

    library_checked = True  # ModelDrafter's proposal, with the rows it fed attached

    def __init__(
        self,
        target: GPT,
        n_layer: int,
        head: dict[str, np.ndarray] | None = None,
        min_confidence: float | None = None,
    ) -> None:
        # target: a twin GPT, or a reference one (its twin: weights copied once)
        super().__init__(as_twin_model(target), n_layer, head, min_confidence)
        if self.adapter is not None:  # checked on the host by the reference, then copied
            self.adapter = tuple(to_device(a) for a in self.adapter)

    def step(self, tokens):
        # tokens [T] (host, or a device id) -> the exit head's logits [V] on the device;
        # keeps x_L' [T, C]. The reference's step without its host check of the logits (a
        # sync per drafted token): a NaN reaches q, and the round's one transfer reports it.
        x = self.model.residual(tokens, self.cache)
        self._rows.append(x)
        return self.exit_logits(x[-1:])[0]


def twin_of(drafter: reference_early_exit.EarlyExitDrafter) -> EarlyExitDrafter:
    # a reference early-exit drafter -> the twin with the same exit: its norm (the target's
    # own final norm when it was built without a trained head: GPT-2's LayerNorm, the Llama
    # family's RMSNorm gain) and its adapter, if any
    params = drafter.model.params
    if isinstance(drafter.target.config, LlamaConfig):
        head = {EXIT_RMS_NORM[0]: params["model.norm.weight"]}
    else:
        head = dict(zip(EXIT_NORM, (params["ln_f.weight"], params["ln_f.bias"]), strict=True))
    if drafter.adapter is not None:
        head |= dict(zip(EXIT_ADAPTER, drafter.adapter, strict=True))
    return EarlyExitDrafter(drafter.target, drafter.n_layer, head, drafter.min_confidence)


register_twin(reference_early_exit.EarlyExitDrafter, twin_of)

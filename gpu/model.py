"""The twin's GPT-2: the reference model with its weights, activations and logits on the device.

What differs from reference/model.py, and why:
* The weights are copied to the device once, at construction (weights already there are
  shared, not copied: an early-exit drafter's blocks are its target's); the logits a forward pass
  returns stay there (the next step that needs them, turning them into probabilities and
  sampling, runs on the device too). Token ids may come from the host or the device.
* Every array function is `xp`'s (CuPy on a GPU, NumPy in CI): the reference calls NumPy
  directly, and NumPy functions cannot take device arrays.
* GELU is one fused elementwise kernel on a GPU (`cupy.fuse`: one launch instead of ~8),
  the plain function in NumPy mode; tests/twin checks that both agree.
* The causal mask is built on the device from two `arange`s, so no host array crosses over;
  a tree's or a batch's positions and mask (built on the host from the tree / the rows'
  pointers) are copied over once per pass (`placed`).
The structure (the one forward for sequences, trees and batches, blocks, residuals, cache
writes, tied output) is the reference's own code: `GPT` here subclasses
`reference.model.GPT` and replaces the block's computations, how the parameters are stored,
and which cache it makes.
"""

from __future__ import annotations

import dataclasses
import math
import weakref

import numpy as np

from gpu.backend import ON_DEVICE as ON_DEVICE  # re-exported: the device-only test reads it
from gpu.backend import fuse, memory_kind, on_device, to_device, xp
from gpu.kv_cache import KVCache
from reference import model as reference_model
from reference.config import GPTConfig
from reference.model import Placement, check_param_shapes, init_params

__all__ = ["GPT", "init_params", "gelu", "layer_norm", "softmax", "attention", "causal_mask"]


def gelu_plain(x):  # [...] -> [...]: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    c = np.float32(math.sqrt(2.0 / math.pi))
    return 0.5 * x * (1.0 + xp.tanh(c * (x + 0.044715 * (x * x * x))))


# one fused kernel on the device (one counted launch on the stand-in); the same function,
# unfused, in NumPy mode
gelu = fuse(gelu_plain)


def softmax(x, axis: int = -1):  # [...] -> [...]
    e = xp.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x, g, b, eps: float):  # [T, C] -> [T, C]
    C = x.shape[-1]
    mean = x.sum(axis=-1, keepdims=True) / C
    centred = x - mean
    var = (centred * centred).sum(axis=-1, keepdims=True) / C
    return g * centred / xp.sqrt(var + eps) + b


def causal_mask(T: int, S: int):  # -> [T, S] bool on the device, True = may attend
    return xp.arange(S)[None, :] <= (S - T + xp.arange(T))[:, None]


def attention(q, k, v, mask=None):
    # q [..., nh, T, hs], k/v [..., nh, S, hs] -> [..., nh, T, hs]; mask None = causal, else
    # a device bool array that broadcasts to the scores (a tree's, a batch's)
    T, S = q.shape[-2], k.shape[-2]
    scores = q @ k.swapaxes(-1, -2) * np.float32(1.0 / math.sqrt(q.shape[-1]))  # [.., T, S]
    if mask is not None:
        scores = xp.where(mask, scores, np.float32(-1e10))
    elif T > 1:  # one new position of a sequence may see every key: nothing to mask
        scores = xp.where(causal_mask(T, S), scores, np.float32(-1e10))
    return softmax(scores) @ v


class GPT(reference_model.GPT):
    """The reference GPT with its parameters on the device; same constructor, same calls."""

    def __init__(self, config: GPTConfig, params: dict) -> None:
        # host arrays are checked, then copied to the device once; arrays already there
        # (another twin's: an early-exit drafter's blocks are its target's) are used as they
        # are, shared and not copied, as the reference shares them
        self.config = config
        given = {
            name: value if on_device(value) else np.asarray(value, np.float32)
            for name, value in params.items()
        }
        check_param_shapes(config, given)  # before anything is copied
        self.params = {name: to_device(value, np.float32) for name, value in given.items()}

    cache_type = KVCache  # new_cache (the reference's method) makes a device cache

    def forward(self, tokens, cache: KVCache | None = None):
        # tokens [T] (host or device) -> logits [T, V] on the device. Host tokens are
        # checked as in the reference; device tokens come from the twin's own sampling.
        if not on_device(tokens):
            return super().forward(tokens, cache)
        return self.forward_unchecked(tokens, cache)

    def residual_at(self, tokens, at: Placement, cache=None):
        # the reference's one forward, with the token ids on the device
        return super().residual_at(to_device(tokens), at, cache)

    def placed(self, at: Placement) -> Placement:
        # a tree's or a batch's positions and mask, built on the host, copied over once per
        # pass (a sequence's are a slice and None: nothing to copy)
        if isinstance(at.positions, slice) and at.mask is None:
            return at
        positions = at.positions if isinstance(at.positions, slice) else to_device(at.positions)
        mask = None if at.mask is None else to_device(at.mask)
        return dataclasses.replace(at, positions=positions, mask=mask)

    def norm(self, x, name: str):
        P = self.params
        return layer_norm(x, P[name + ".weight"], P[name + ".bias"], self.config.layer_norm_epsilon)

    def attend(self, q, k, v, mask=None):
        return attention(q, k, v, mask)

    def activation(self, x):
        return gelu(x)


# reference model -> {memory kind: its twin}; weak keys, so a twin lives exactly as long as
# its model. One twin per kind: the device's, and the stand-in's inside counting_launches()
_twins: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def as_twin_model(model: reference_model.GPT) -> GPT:
    """A twin GPT for a reference GPT (weights copied once and remembered), or the twin itself.

    The copy is keyed by the model object, so editing a reference model's weights after
    handing it over is not seen: hand over a new model instead."""
    if isinstance(model, GPT) or not isinstance(model, reference_model.GPT):
        return model
    twins = _twins.setdefault(model, {})
    if memory_kind() not in twins:
        twins[memory_kind()] = GPT(model.config, model.params)
    return twins[memory_kind()]

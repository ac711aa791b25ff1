"""The twin's GPT-2: the reference model with its weights, activations and logits on the device.

What differs from reference/model.py, and why:
* The weights are copied to the device once, at construction (weights already there are
  shared, not copied: an early-exit drafter's blocks are its target's); the logits a forward pass
  returns stay there (the next step that needs them, turning them into probabilities and
  sampling, runs on the device too). Token ids may come from the host or the device.
* Every array function is `xp`'s (CuPy on a GPU, NumPy in CI): the reference calls NumPy
  directly, and NumPy functions cannot take device arrays.
* A block of up to MAX_ROWS positions (every decode step, draft step and verification pass;
  a small batch's) runs as fused kernels (gpu/device/fused.py, kernels.cu): LN + c_attn, the
  K/V write + attention of every head, c_proj + residual, LN + c_fc + GELU, c_proj +
  residual -- the reference's block in the order it is written, in 5 launches instead of
  ~45 (a batch's attention keeps the reference's steps: its rows write at ragged slots).
  The embedding is one launch, LN_f + the tied output layer another. Longer passes (a
  prefill, a large batch) run the reference's block, its linears `xp` matmuls (cuBLAS on a
  GPU: there FLOPs, not launches, price a step) and its attention still the fused kernel.
  In NumPy mode every kernel runs its body, the same NumPy calls, so the twin's numbers
  there are the unfused twin's, bit for bit.
* The layer functions (GELU fused with `cupy.fuse`, a causal mask built on the device) are in
  gpu/device/layers.py; a tree's or a batch's positions and mask (built on the host from the tree /
  the rows' pointers) are copied over once per pass (`placed`).
The structure (the one forward for sequences, trees and batches, blocks, residuals, its
read-out after several blocks for EAGLE-3 (`layer_features`), cache writes, tied output) is
the reference's own code, bar the fused block: `GPT` here subclasses
`reference.model.GPT` and replaces the block's computations, how the parameters are stored,
and which cache it makes. The Llama family's twin (gpu/llama.py) subclasses this class in
turn, and registers itself here (`register_twin_model`) so that `as_twin_model` makes one.
"""

from __future__ import annotations

import dataclasses
import weakref

import numpy as np

from gpu.device.backend import ON_DEVICE as ON_DEVICE  # re-exported: the device-only test reads it
from gpu.device.backend import memory_kind, on_device, to_device
from gpu.device.backend import xp as xp  # re-exported: tests/twin/test_twin_loop.py reads it
from gpu.device.fused import (
    attention_fits,
    cached_attention,
    embed,
    fused_linear,
    layer_norm_rows,
    padded_rows,
)
from gpu.device.kernels import MAX_ROWS, kernels_on
from gpu.device.layers import attention, causal_mask, gelu, layer_norm, softmax
from gpu.kv_cache import KVCache
from reference import model as reference_model
from reference.config import GPTConfig
from reference.model import Placement, check_param_shapes, init_params

__all__ = ["GPT", "init_params", "gelu", "layer_norm", "softmax", "attention", "causal_mask"]


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
        self._wte_rows = None  # made by wte_rows() at the first output layer the kernels run

    cache_type = KVCache  # new_cache (the reference's method) makes a device cache
    # every launch of a short pass is a fused kernel, so a draft step or a verification pass
    # may be captured as a CUDA graph (gpu/device/graphs.py); the twin Llama's may not
    fused_steps = True

    def forward(self, tokens, cache: KVCache | None = None):
        # tokens [T] (host or device) -> logits [T, V] on the device. Host tokens are
        # checked as in the reference; device tokens come from the twin's own sampling.
        if not on_device(tokens):
            return super().forward(tokens, cache)
        return self.forward_unchecked(tokens, cache)

    def residual(self, tokens, cache=None, at: Placement | None = None):
        # the reference's one forward, with the token ids on the device
        return super().residual(to_device(tokens), cache, at)

    def layer_features(self, tokens, cache=None, at: Placement | None = None, layers=None):
        # the reference's forward read out after several blocks (EAGLE-3), with the token ids
        # on the device: the spans are device rows, joined on the device
        return super().layer_features(to_device(tokens), cache, at, layers)

    def placed(self, at: Placement) -> Placement:
        # a tree's or a batch's positions and mask, built on the host, copied over once per
        # pass; a sequence's stay where they are: `embed` reads only their first (no copy)
        if is_sequence(at):
            return at
        mask = None if at.mask is None else to_device(at.mask)
        return dataclasses.replace(at, positions=to_device(at.positions), mask=mask)

    def embed(self, tokens, at: Placement):
        # tokens [R] -> x [R, C] in one launch (a batch's [B, T]: the reference's way). A
        # sequence's positions are consecutive (causal_placement): the kernel is given the
        # first one and counts on from it, so no position ids go to the device
        P = self.params
        if is_sequence(at):
            first = int(at.start[0])
            return embed(
                P["wte.weight"], P["wpe.weight"], tokens, slice(first, first + at.shape[0])
            )
        return embed(P["wte.weight"], P["wpe.weight"], tokens, at.positions)

    def block(self, x, i: int, cache, at: Placement):
        # [R, C] -> [R, C]: the reference's block (reference/model.py GPT.block), step for
        # step, as four fused linears around the attention when R <= MAX_ROWS: the norms,
        # biases, GELU and residual adds ride inside them (else the reference's own block)
        if x.shape[0] > MAX_ROWS:
            return super().block(x, i, cache, at)
        P, h = self.params, f"h.{i}."
        qkv = fused_linear(
            x, P[h + "attn.c_attn.weight"], P[h + "attn.c_attn.bias"], ln=self.ln(h + "ln_1")
        )
        out = self.multi_head_attention(qkv, i, cache, at)
        x = fused_linear(out, P[h + "attn.c_proj.weight"], P[h + "attn.c_proj.bias"], resid=x)
        m = fused_linear(
            x, P[h + "mlp.c_fc.weight"], P[h + "mlp.c_fc.bias"], ln=self.ln(h + "ln_2"), act="gelu"
        )
        return fused_linear(m, P[h + "mlp.c_proj.weight"], P[h + "mlp.c_proj.bias"], resid=x)

    def multi_head_attention(self, qkv, i: int, cache, at: Placement):
        # qkv [R, 3C] -> [R, C]: one fused launch for a pass within the kernel's limits, with
        # a twin cache whose slots the kernel knows (or none); else the reference's steps
        cfg = self.config
        layout = "sequence" if cache is None else getattr(cache, "kernel_layout", None)
        ours = layout == ("batch" if len(at.shape) == 2 else "sequence")
        if ours and attention_fits(at, cfg.n_embd, cfg.n_head):
            return cached_attention(self, qkv, i, cache, at)
        return super().multi_head_attention(qkv, i, cache, at)

    def ln(self, name: str) -> tuple:  # a LayerNorm's (g, b, eps), as the fused linear takes it
        P = self.params
        return P[name + ".weight"], P[name + ".bias"], self.config.layer_norm_epsilon

    def forward_unchecked(self, tokens, cache=None):
        # tokens [T] -> logits [T, V]: the reference's, with LN_f fused into the output layer
        return self.output(self.residual(tokens, cache))

    def output(self, x):  # residual rows [R, C] -> logits [R, V]: LN_f and the output layer
        if x.shape[0] > MAX_ROWS:  # one LN launch, then cuBLAS (no fused linear that long)
            return self.logits(self.norm(x, "ln_f"))
        wte = self.params["wte.weight"]
        return fused_linear(x, wte.T, ln=self.ln("ln_f"), w_rows=self.wte_rows())

    def logits(self, h):  # [T, C] -> [T, V], one launch
        return fused_linear(h, self.params["wte.weight"].T, w_rows=self.wte_rows())

    def wte_rows(self):
        # the tied output layer as the fused linear kernel reads it: wte.T row-major, its rows
        # padded to ceil4(V) floats with zeros (fused.padded_rows: a one-row call then reads
        # them four floats a load; the kernel writes out V columns), copied at the first call
        # with the kernels on and kept; None where no kernel runs
        # (kernels off; the stand-in, which runs the body). Asked at every call, never at
        # construction, so the kernels may be turned off or on between two calls of one model
        if not kernels_on() or memory_kind() == "stand-in":
            return None
        if self._wte_rows is None:
            self._wte_rows = padded_rows(self.params["wte.weight"].T)
        return self._wte_rows

    def norm(self, x, name: str):  # [R, C] -> [R, C], one launch
        return layer_norm_rows(x, *self.ln(name))

    def attend(self, q, k, v, mask=None):
        return attention(q, k, v, mask)

    def activation(self, x):
        return gelu(x)


def is_sequence(at: Placement) -> bool:
    # one sequence's causal pass (causal_placement): positions start, start + 1, ...
    return at.mask is None and len(at.shape) == 1


# reference model -> {memory kind: its twin}; weak keys, so a twin lives exactly as long as
# its model. One twin per kind: the device's, and the stand-in's inside counting_launches()
_twins: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

# reference model class -> its twin's class. Each family's twin registers itself where it is
# defined (gpu/llama.py), so this module, which the twin Llama subclasses, never imports it
TWIN_MODELS: dict[type, type] = {}


def register_twin_model(reference_type: type, twin_type: type) -> None:
    """A reference model of `reference_type` (or a subclass) becomes a `twin_type`."""
    TWIN_MODELS[reference_type] = twin_type


def as_twin_model(model: reference_model.GPT) -> GPT:
    """A twin for a reference model -- GPT-2 or the Llama family: weights copied once and
    remembered -- or the twin itself.

    The copy is keyed by the model object, so editing a reference model's weights after
    handing it over is not seen: hand over a new model instead. A subclass of a reference
    model (a test's recording model) gets its family's twin: its own methods are not run."""
    if isinstance(model, GPT) or not isinstance(model, reference_model.GPT):
        return model
    twin_type = next(TWIN_MODELS[c] for c in type(model).__mro__ if c in TWIN_MODELS)
    twins = _twins.setdefault(model, {})
    if memory_kind() not in twins:
        twins[memory_kind()] = twin_type(model.config, model.params)
    return twins[memory_kind()]


register_twin_model(reference_model.GPT, GPT)

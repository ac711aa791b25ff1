"""The twin's Llama family: the reference Llama with its weights, activations and logits on
the device.

What differs from reference/llama.py, and why:
* The weights are copied to the device once, at construction (arrays already there are
  shared, not copied: an early-exit drafter's blocks are its target's), and so are the RoPE
  tables; logits stay on the device, as the twin GPT's do. Every array function is `xp`'s
  (CuPy on a GPU, NumPy in CI): RMSNorm, SiLU, the rotation and grouped attention are
  written here again with `xp`, since NumPy functions cannot take device arrays.
* The linear layers run as the fused linear kernel (gpu/device/fused.py `fused_linear`, one
  launch for up to MAX_ROWS rows, cuBLAS beyond), which reads its weight row-major
  [in, out]: torch's [out, in] weights are transposed once, at construction, into copies
  the kernel reads, q/k/v side by side (one launch for the three) and so are gate/up. The
  residual adds of o_proj and down_proj ride inside their launches. These copies double the
  linear weights' device memory (the originals stay: the parameters keep their names, and an
  early-exit drafter cuts them by name).
* What has no kernel runs its body, `xp` calls: RMSNorm (the fused linear's norm is
  LayerNorm's: centred, with a bias), the rotation, grouped attention (the fused attention
  kernel reads one K/V head per query head and rotates nothing) and SwiGLU's product (one
  `cupy.fuse` kernel on a GPU). SiLU is written x (1 + tanh(x / 2)) / 2, which needs no
  branch (the reference's guards exp against overflow with one), so it fuses; the two agree
  to float32 rounding.
* A sequence's RoPE rows are a slice of the tables (its positions are consecutive), so no
  position ids cross over; a tree's or a batch's positions are copied once a pass, with its
  mask (the twin GPT's `placed`).
* No step of a twin Llama is captured as a CUDA graph (`fused_steps` False): a graph holds
  fused kernels only (gpu/device/graphs.py), and a Llama step runs bodies too.
The block's order of operations, the cache writes (keys cached after rotation, by their
absolute position), the parameter names and every check are the reference's.

Method order: `Llama(reference.llama.Llama, gpu.model.GPT)`. The reference Llama's block and
hooks come first, and this class replaces only how they compute; the twin GPT below supplies
the device handling both families share (device token ids, `placed`, the device cache, the
forward without its checks). The other order would put the twin GPT's GPT-2 block and fused
LayerNorm before the Llama's, every one of which would then need undoing here.
"""

from __future__ import annotations

import numpy as np

from gpu.device.backend import fuse, on_device, to_device, xp
from gpu.device.fused import fused_linear, padded_rows
from gpu.device.layers import attention, merge_heads, split_heads
from gpu.model import GPT, is_sequence, register_twin_model
from reference import llama as reference_llama
from reference.config import LlamaConfig
from reference.llama import check_llama_params, expected_llama_param_shapes, rope_tables
from reference.model import Placement, check_against

__all__ = ["Llama", "grouped_attention", "rms_norm", "rotate", "silu", "swiglu"]


def rms_norm(x, g, eps: float):  # [R, C] -> [R, C]: g * x / sqrt(mean_c x_c^2 + eps)
    ms = (x * x).sum(axis=-1, keepdims=True) / x.shape[-1]
    return g * (x / xp.sqrt(ms + np.float32(eps)))


def silu(x):  # [...] -> [...]: x sigmoid(x), sigmoid(x) = (1 + tanh(x / 2)) / 2 (no overflow)
    return x * (0.5 * (1.0 + xp.tanh(0.5 * x)))


def swiglu_plain(gate, up):  # [R, I] x2 -> [R, I]: silu(gate) * up
    return silu(gate) * up


# one fused elementwise kernel on a device (one counted launch on the stand-in); the plain
# function in NumPy mode
swiglu = fuse(swiglu_plain)


def rotate(x, cos, sin):
    # x [..., nh, T, hs], cos/sin [..., 1, T, hs/2] -> [..., nh, T, hs]: the reference's
    # "rotate half" (reference/llama.py rotate), with xp
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return xp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def grouped_attention(q, k, v, mask=None):
    # q [..., nh, T, hs], k/v [..., nkv, S, hs] -> [..., nh, T, hs]: the reference's, with the
    # twin's attention (a causal mask built on the device); k and v broadcast over each group
    nkv = k.shape[-3]
    grouped = q.reshape(q.shape[:-3] + (nkv, q.shape[-3] // nkv) + q.shape[-2:])
    if mask is not None and mask.ndim >= 3:
        mask = mask[..., None, :, :]  # [..., 1, T, S] -> [..., 1, 1, T, S]
    out = attention(grouped, k[..., None, :, :], v[..., None, :, :], mask)
    return out.reshape(q.shape)


def rows_of(*weights):
    # torch weights [out_j, in] -> one row-major [in, sum_j out_j] device array, as the fused
    # linear kernel reads a weight; made once
    joined = weights[0] if len(weights) == 1 else xp.concatenate(weights, axis=0)
    return xp.ascontiguousarray(joined.T)


class Llama(reference_llama.Llama, GPT):
    """The reference Llama with its parameters on the device; same constructor, same calls."""

    fused_steps = False  # RMSNorm, RoPE and GQA run bodies: no step is a CUDA graph

    def __init__(self, config: LlamaConfig, params: dict) -> None:
        if not isinstance(config, LlamaConfig):
            raise ValueError(f"Llama needs a LlamaConfig, got {type(config).__name__}")
        self.config = config
        given = {
            name: value if on_device(value) else np.asarray(value, np.float32)
            for name, value in params.items()
        }
        if any(on_device(value) for value in given.values()):
            # another twin's arrays (an early-exit cut), checked when it was built: the names
            # and shapes only, before anything is copied
            check_against(expected_llama_param_shapes(config), given, config, refuse_extra=True)
        else:
            given = check_llama_params(config, given)  # the reference's checks, on the host
        self.params = {name: to_device(value, np.float32) for name, value in given.items()}
        self.rope_cos, self.rope_sin = (to_device(t) for t in rope_tables(config))
        self.fused = self.fused_weights()

    def fused_weights(self) -> dict:
        # name -> (w [in, out] row-major, bias or None): every block's linears as the fused
        # kernel reads them, made once; q/k/v side by side, gate/up side by side (the output
        # layer's is added by `logits`, at its first call)
        P, cfg = self.params, self.config
        fused = {}
        for i in range(cfg.n_layer):
            a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
            qkv = [a + n for n in ("q_proj", "k_proj", "v_proj")]
            bias = xp.concatenate([P[n + ".bias"] for n in qkv]) if cfg.attention_bias else None
            fused[a + "qkv"] = (rows_of(*(P[n + ".weight"] for n in qkv)), bias)
            fused[a + "o_proj"] = (rows_of(P[a + "o_proj.weight"]), None)
            gate_up = rows_of(P[m + "gate_proj.weight"], P[m + "up_proj.weight"])
            fused[m + "gate_up"] = (gate_up, None)
            fused[m + "down_proj"] = (rows_of(P[m + "down_proj.weight"]), None)
        return fused

    def block(self, x, i: int, cache, at: Placement):
        # [R, C] -> [R, C]: the reference's block (reference/llama.py Llama.block) in four
        # fused linears -- q/k/v, o_proj + residual, gate/up, down_proj + residual -- around
        # the bodies of RMSNorm, the rotary attention and SwiGLU's product
        cfg, F = self.config, self.fused
        a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        nq, nk = cfg.n_head * cfg.head_size, cfg.n_kv_head * cfg.head_size
        qkv = fused_linear(self.norm(x, f"model.layers.{i}.input_layernorm"), *F[a + "qkv"])
        q, k, v = qkv[:, :nq], qkv[:, nq : nq + nk], qkv[:, nq + nk :]
        out = self.rotary_attention(q, k, v, i, cache, at)
        x = fused_linear(out, *F[a + "o_proj"], resid=x)
        normed = self.norm(x, f"model.layers.{i}.post_attention_layernorm")
        h = fused_linear(normed, *F[m + "gate_up"])
        gated = swiglu(h[:, : cfg.n_inner], h[:, cfg.n_inner :])
        return fused_linear(gated, *F[m + "down_proj"], resid=x)

    def rotary_attention(self, q, k, v, i: int, cache, at: Placement):
        # q [R, nh*hs], k/v [R, nkv*hs] -> [R, nh*hs]: the reference's steps (split, rotate by
        # position, the cache write, grouped attention, merge), with xp and device tables
        cfg = self.config
        q = split_heads(q.reshape(at.shape + (-1,)), cfg.n_head)  # [..., nh, T, hs]
        k = split_heads(k.reshape(at.shape + (-1,)), cfg.n_kv_head)  # [..., nkv, T, hs]
        v = split_heads(v.reshape(at.shape + (-1,)), cfg.n_kv_head)
        cos, sin = self.rope_at(at)  # [..., 1, T, hs/2]
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if cache is not None:  # temporary write at the new slots; then history + new
            k, v = cache.write_at(i, at, k, v)  # [..., nkv, S, hs]
        out = merge_heads(self.attend(q, k, v, at.mask))  # [..., T, nh*hs]
        return out.reshape(-1, out.shape[-1])

    def rope_at(self, at: Placement) -> tuple:
        # the rotation of each new position, (cos, sin) [..., 1, T, hs/2] on the device. A
        # sequence's positions are consecutive: a slice of the tables, no ids copied over
        if is_sequence(at):
            first = int(at.start[0])
            rows = slice(first, first + at.shape[0])
            return self.rope_cos[rows][None], self.rope_sin[rows][None]
        cos, sin = self.rope_cos[at.positions], self.rope_sin[at.positions]  # [..., T, hs/2]
        return cos[..., None, :, :], sin[..., None, :, :]

    def output(self, x):  # residual rows [R, C] -> logits [R, V]
        return self.logits(self.norm(x, "ln_f"))

    def logits(self, h):  # [R, C] -> [R, V]: lm_head (or the tied embedding), one launch
        if "output" not in self.fused:
            # made at the first call, not at construction: a model whose output layer never
            # runs (EAGLE's one-block model, an early-exit cut's lower blocks) never pays for a
            # second copy of a [V, C] matrix (0.9 GB for Qwen2.5-1.5B). The copy's rows are
            # padded to ceil4(V) floats (fused.padded_rows: four floats a load at one row); the
            # kernel reads the copy and writes out V columns, the body computes with its view
            name = "model.embed_tokens" if self.config.tie_word_embeddings else "lm_head"
            weight = self.params[name + ".weight"]  # [V, C]
            rows = padded_rows(weight.T)
            self.fused["output"] = (rows[:, : weight.shape[0]], rows)
        view, rows = self.fused["output"]
        return fused_linear(h, view, w_rows=rows)

    def norm(self, x, name: str):  # [R, C] -> [R, C]; "ln_f" is model.norm (the reference's map)
        name = "model.norm" if name == "ln_f" else name
        return rms_norm(x, self.params[name + ".weight"], self.config.rms_norm_eps)

    def attend(self, q, k, v, mask=None):
        return grouped_attention(q, k, v, mask)  # [.., nh, T, hs], [.., nkv, S, hs] x2

    def activation(self, x):
        return silu(x)


register_twin_model(reference_llama.Llama, Llama)

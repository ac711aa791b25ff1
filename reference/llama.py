"""The Llama family in NumPy (Llama 2 and 3, Qwen2, Mistral with full attention).

`Llama` is `GPT` (reference/model.py) with another block: the forward, the placements of
a sequence, a tree and a batch, the cache writes, the masks and the attention are GPT's. Four
things change, and two of them touch what the article teaches:

* **Where positions go (RoPE).** Nothing is added to the token embedding. Instead every block
  rotates each query and key by an angle proportional to its position, so q.k depends only on
  the distance between the two positions. A pass's positions come from its `Placement`, as
  GPT-2's wpe rows do: a k-token append at cache.end.., a tree node at length + depth, a batch
  row at its own start.
* **What the cache holds (GQA).** Keys and values have n_kv_head heads, each shared by
  n_head / n_kv_head query heads: the cache is that much smaller.
* RMSNorm instead of LayerNorm, and a gated MLP (SwiGLU): per-row changes, nothing positional.

Parameter names are the Hugging Face checkpoint's keys, unchanged (nq = nh * hs, nk = nkv * hs):

    model.embed_tokens.weight [V, C]     model.norm.weight [C]     lm_head.weight [V, C] (untied)
    model.layers.{i}.input_layernorm.weight [C]    .post_attention_layernorm.weight [C]
    model.layers.{i}.self_attn.q_proj.weight [nq, C]   (.bias [nq] when attention_bias)
    model.layers.{i}.self_attn.k_proj.weight [nk, C]   (.bias [nk])    v_proj: the same
    model.layers.{i}.self_attn.o_proj.weight [C, nq]   (no bias)
    model.layers.{i}.mlp.gate_proj.weight [I, C]   .up_proj.weight [I, C]   .down_proj.weight [C, I]

The linear layers are torch's, stored [out, in]: y = x @ W.T (+ b), the transpose of GPT-2's.
"""

from __future__ import annotations

import math

import numpy as np

from reference.checks import check_generator
from reference.config import Llama3RopeScaling, LlamaConfig
from reference.model import GPT, Placement, attention, check_against, merge_heads, split_heads


def rms_norm(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    # [R, C] -> [R, C]:  g * x / sqrt((1/C) sum_c x_c^2 + eps), over the C features of a row:
    # LayerNorm without centring and without a bias
    ms = (x * x).sum(axis=-1, keepdims=True) / x.shape[-1]
    return g * (x / np.sqrt(ms + np.float32(eps)))


def silu(x: np.ndarray) -> np.ndarray:  # [...] -> [...]
    # x * sigmoid(x), with sigmoid written on e = exp(-|x|) in (0, 1]: it never overflows
    e = np.exp(-np.abs(x))
    return x * np.where(x >= 0, 1, e) / (1 + e)


def rope_frequencies(cfg: LlamaConfig) -> np.ndarray:  # -> [hs/2] float64, radians per position
    # theta_j = rope_theta^(-2j / hs), j = 0 .. hs/2 - 1: feature pair j of a head turns by
    # pos * theta_j, from one turn every ~6 positions (j = 0) to slower than the context
    hs = cfg.head_size
    theta = cfg.rope_theta ** (-np.arange(0, hs, 2, dtype=np.float64) / hs)
    return theta if cfg.rope_scaling is None else llama3_scaled(theta, cfg.rope_scaling)


def llama3_scaled(theta: np.ndarray, s: Llama3RopeScaling) -> np.ndarray:  # [hs/2] -> [hs/2]
    # Llama 3.1: a pair whose wavelength 2 pi / theta_j is longer than the pre-training
    # context / low_freq_factor turns `factor` times slower (so the longer context stays in
    # the angles it saw); one shorter than context / high_freq_factor keeps its speed; between
    # the two, theta_j (s_j / factor + 1 - s_j) blends them linearly in context / wavelength:
    #   s_j = (context / wavelength_j - low_freq_factor) / (high_freq_factor - low_freq_factor)
    n = s.original_max_position_embeddings
    wavelength = 2 * math.pi / theta
    s_j = (n / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    blended = (1 - s_j) * theta / s.factor + s_j * theta
    slow = np.where(wavelength > n / s.low_freq_factor, theta / s.factor, blended)
    return np.where(wavelength < n / s.high_freq_factor, theta, slow)


def rope_tables(cfg: LlamaConfig) -> tuple[np.ndarray, np.ndarray]:
    # -> (cos, sin) [n_ctx, hs/2] float32: row p is position p's rotation, read like a row of
    # GPT-2's wpe; the angles are computed in float64 (pos * theta_j loses digits at long
    # positions in float32)
    angles = np.arange(cfg.n_ctx, dtype=np.float64)[:, None] * rope_frequencies(cfg)[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    # x [..., nh, T, hs], cos/sin [..., 1, T, hs/2] -> [..., nh, T, hs]. Hugging Face's
    # "rotate half" layout: feature j pairs with feature j + hs/2, and the pair turns by its
    # position's angle a = pos * theta_j:
    #   x_j'        = x_j cos a - x_{j+hs/2} sin a
    #   x_{j+hs/2}' = x_{j+hs/2} cos a + x_j sin a
    # Rotations compose: R(m)q . R(n)k = q . R(n - m)k, so attention sees only distances.
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def grouped_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask=None) -> np.ndarray:
    # q [..., nh, T, hs], k/v [..., nkv, S, hs] -> [..., nh, T, hs]: query head h reads
    # key/value head h // g, g = nh / nkv (Hugging Face's repeat_kv order), without copying
    # k and v g times: the query heads are viewed as [nkv, g] and k/v broadcast over g.
    # A placement's mask has a head axis of 1 when it has one (a batch's [B, 1, T, S]);
    # it gains the group axis too. g = 1 is ordinary multi-head attention.
    nkv = k.shape[-3]
    grouped = q.reshape(q.shape[:-3] + (nkv, q.shape[-3] // nkv) + q.shape[-2:])
    if mask is not None and mask.ndim >= 3:
        mask = mask[..., None, :, :]  # [..., 1, T, S] -> [..., 1, 1, T, S]
    out = attention(grouped, k[..., None, :, :], v[..., None, :, :], mask)
    return out.reshape(q.shape)


class Llama(GPT):
    """A Llama-family decoder. ``forward(tokens, cache)`` returns logits for every new position.

    The same interfaces as GPT (forward, residual, layer_features, new_cache, blocks, block,
    logits, norm, linear, attend, activation), so every loop, drafter, tree and batch runs
    either family. The cache (`new_cache`) holds n_kv_head heads."""

    def __init__(self, config: LlamaConfig, params: dict[str, np.ndarray]) -> None:
        if not isinstance(config, LlamaConfig):
            raise ValueError(f"Llama needs a LlamaConfig, got {type(config).__name__}")
        self.config = config
        self.params = check_llama_params(config, params)
        self.rope_cos, self.rope_sin = rope_tables(config)  # [n_ctx, hs/2] each

    def embed(self, tokens: np.ndarray, at: Placement) -> np.ndarray:
        # tokens of at.shape -> x [..., T, C]: the token embedding alone. Positions enter
        # later, as rotations of q and k in every block (`rotary_attention`)
        return self.params["model.embed_tokens.weight"][tokens]

    def logits(self, h: np.ndarray) -> np.ndarray:
        # [T, C] @ [C, V] -> [T, V]: lm_head, or the token embedding when tied
        name = "model.embed_tokens" if self.config.tie_word_embeddings else "lm_head"
        return h @ self.params[name + ".weight"].T

    def block(self, x: np.ndarray, i: int, cache, at: Placement) -> np.ndarray:
        # [R, C] -> [R, C]: pre-norm residual block, GPT-2's with RMSNorm and a gated MLP
        h = f"model.layers.{i}."
        x = x + self.attention_block(self.norm(x, h + "input_layernorm"), i, cache, at)
        return x + self.mlp(self.norm(x, h + "post_attention_layernorm"), h + "mlp.")

    def mlp(self, x: np.ndarray, h: str) -> np.ndarray:
        # [R, C] -> [R, I] -> [R, C]: SwiGLU, down(silu(gate(x)) * up(x))
        gated = self.activation(self.linear(x, h + "gate_proj")) * self.linear(x, h + "up_proj")
        return self.linear(gated, h + "down_proj")

    def attention_block(self, x: np.ndarray, i: int, cache, at: Placement) -> np.ndarray:
        # [R, C] -> [R, C]: q [R, nh*hs], k and v [R, nkv*hs], attention, o_proj
        a = f"model.layers.{i}.self_attn."
        q, k, v = (self.linear(x, a + name) for name in ("q_proj", "k_proj", "v_proj"))
        return self.linear(self.rotary_attention(q, k, v, i, cache, at), a + "o_proj")

    def rotary_attention(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, i: int, cache, at: Placement
    ) -> np.ndarray:
        # q [R, nh*hs], k/v [R, nkv*hs] -> [R, nh*hs]: split into heads, rotate q and k by
        # their positions, write the new K/V, attend (each K/V head shared by its group).
        #
        # Where a position comes from: at.positions, the same numbers GPT-2 reads its wpe rows
        # at: cache.end + t for a sequence's t-th new token, length + depth for a tree node
        # (siblings share a position: the same distance from the committed tokens, whatever
        # slot stores them), start[b] + t for a batch's row b.
        #
        # Keys are cached AFTER rotation, by their absolute position. A committed slot's
        # position never changes (it is its index in the committed sequence), so a rollback,
        # which only moves the pointer, leaves every kept key correct: nothing is re-rotated.
        # A rejected draft's slot is overwritten later by a key rotated for that slot's
        # position. (Trees: compaction moves the kept path's keys to slots length..; their
        # positions were length + depth, which are exactly those slots' positions.)
        cfg = self.config
        q = split_heads(q.reshape(at.shape + (-1,)), cfg.n_head)  # [..., nh, T, hs]
        k = split_heads(k.reshape(at.shape + (-1,)), cfg.n_kv_head)  # [..., nkv, T, hs]
        v = split_heads(v.reshape(at.shape + (-1,)), cfg.n_kv_head)  # [..., nkv, T, hs]
        cos = self.rope_cos[at.positions][..., None, :, :]  # [..., 1, T, hs/2]
        sin = self.rope_sin[at.positions][..., None, :, :]
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if cache is not None:  # temporary write at the new slots; then history + new
            k, v = cache.write_at(i, at, k, v)  # [..., nkv, S, hs]
        out = merge_heads(self.attend(q, k, v, at.mask))  # [..., T, nh*hs]
        return out.reshape(-1, out.shape[-1])

    # The four computations of a block, by parameter name (GPT's hooks).

    def norm(self, x: np.ndarray, name: str) -> np.ndarray:  # [T, C] -> [T, C]
        # The code both families run (forward, trees, batches, drafters) asks for the final
        # norm by GPT-2's name, "ln_f"; here that norm is model.norm. Mapping the one name
        # here keeps every caller family-blind.
        name = "model.norm" if name == "ln_f" else name
        return rms_norm(x, self.params[name + ".weight"], self.config.rms_norm_eps)

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:  # [T, C_in] -> [T, C_out]
        # x @ W.T (+ b), W [C_out, C_in] as stored; only Qwen2's q/k/v have a bias
        y = x @ self.params[name + ".weight"].T
        b = self.params.get(name + ".bias")
        return y if b is None else y + b

    def attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask=None) -> np.ndarray:
        return grouped_attention(q, k, v, mask)  # [.., nh, T, hs], [.., nkv, S, hs] x2

    def activation(self, x: np.ndarray) -> np.ndarray:  # [...] -> [...]
        return silu(x)


def expected_llama_param_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    C, V, I = cfg.n_embd, cfg.n_vocab, cfg.n_inner  # noqa: E741 (the dimension letter)
    nq, nk = cfg.n_head * cfg.head_size, cfg.n_kv_head * cfg.head_size
    shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (V, C)
    for i in range(cfg.n_layer):
        h = f"model.layers.{i}."
        a = h + "self_attn."
        shapes |= {
            h + "input_layernorm.weight": (C,),
            a + "q_proj.weight": (nq, C),
            a + "k_proj.weight": (nk, C),
            a + "v_proj.weight": (nk, C),
            a + "o_proj.weight": (C, nq),
            h + "post_attention_layernorm.weight": (C,),
            h + "mlp.gate_proj.weight": (I, C),
            h + "mlp.up_proj.weight": (I, C),
            h + "mlp.down_proj.weight": (C, I),
        }
        if cfg.attention_bias:
            shapes |= {a + "q_proj.bias": (nq,), a + "k_proj.bias": (nk,), a + "v_proj.bias": (nk,)}
    return shapes


def check_llama_params(cfg: LlamaConfig, params: dict) -> dict[str, np.ndarray]:
    # -> the parameters as float32, exactly the expected names. Extra names are refused: a
    # bias this config does not expect would otherwise be added (linear reads any it finds).
    # Two extras are dropped: a tied checkpoint's lm_head.weight (when it equals the
    # embedding) and old checkpoints' rotary_emb.inv_freq buffers (recomputed from the config)
    expected = expected_llama_param_shapes(cfg)
    out = {}
    for name, value in params.items():
        if name.endswith("rotary_emb.inv_freq"):
            continue
        value = np.asarray(value, dtype=np.float32)
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            embedding = params.get("model.embed_tokens.weight")  # if absent: "missing" below
            if embedding is not None and not np.array_equal(value, np.asarray(embedding)):
                raise ValueError(
                    "lm_head.weight differs from model.embed_tokens.weight, but the config "
                    "says tie_word_embeddings: set it False to use lm_head"
                )
            continue
        out[name] = value
    check_against(expected, out, cfg, refuse_extra=True)
    return out


def init_llama_params(cfg: LlamaConfig, rng: np.random.Generator, std: float = 0.02) -> dict:
    """Random Llama-family parameters: N(0, std) weights and biases, norm gains 1 + N(0, std).

    Biases and gains are random too (unlike `init_params`' zeros and ones), so that a test
    that drops one, or reads the wrong one, sees a different output. Tests use a large
    ``std`` (e.g. 0.5) so that tiny models depend strongly on their context."""
    check_generator(rng)
    params = {}
    for name, shape in expected_llama_param_shapes(cfg).items():
        noise = (rng.standard_normal(shape) * std).astype(np.float32)
        params[name] = 1 + noise if name.endswith("norm.weight") else noise
    return params

"""GPT-2 in NumPy: every position's logits, with an optional KV cache.

Parameter names follow the Hugging Face GPT-2 checkpoint keys (without the
``transformer.`` prefix), so loading a real checkpoint is a dictionary lookup:

    wte.weight [V, C]   wpe.weight [n_ctx, C]   ln_f.weight / ln_f.bias [C]
    h.{i}.ln_1.weight / .bias [C]        h.{i}.attn.c_attn.weight [C, 3C] / .bias [3C]
    h.{i}.attn.c_proj.weight [C, C] / .bias [C]
    h.{i}.ln_2.weight / .bias [C]        h.{i}.mlp.c_fc.weight [C, 4C] / .bias [4C]
    h.{i}.mlp.c_proj.weight [4C, C] / .bias [C]

GPT-2 stores its linear layers as "Conv1D", i.e. already transposed: y = x @ W + b.
The output projection is tied to the token embedding: logits = x @ wte.T.
"""

from __future__ import annotations

import math

import numpy as np

from reference.checks import as_token_array, check_generator
from reference.config import GPTConfig
from reference.kv_cache import KVCache


def gelu(x: np.ndarray) -> np.ndarray:  # [...] -> [...]
    # GPT-2's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    # (x * x * x, not x**3: NumPy's float power is several times slower on small rows)
    return (
        0.5
        * x
        * (1.0 + np.tanh(np.float32(math.sqrt(2.0 / math.pi)) * (x + 0.044715 * (x * x * x))))
    )


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:  # [...] -> [...]
    # subtracting the max changes nothing mathematically and keeps exp() from overflowing
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    # [T, C] -> [T, C]:  g * (x - mean) / sqrt(var + eps) + b
    # (sums rather than np.mean / np.var: same numbers, a fraction of the call overhead,
    # which dominates for the draft model's single-row calls)
    n = x.shape[-1]
    centred = x - x.sum(axis=-1, keepdims=True) / n
    var = (centred * centred).sum(axis=-1, keepdims=True) / n
    return g * centred / np.sqrt(var + eps) + b


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    # [T, C_in] @ [C_in, C_out] + [C_out] -> [T, C_out]
    return x @ w + b


# Up to this many rows, a linear layer takes the blocked path below (verification appends
# k+1 <= 9 rows for the k this project sweeps; prefill and one-row decode keep x @ w).
FEW_ROWS = 16

# OpenBLAS multiplies without packing when M * N * K <= 100^3 (its "small matrix" kernels on
# AVX-512 CPUs; other builds simply take the normal path, which is still correct).
SMALL_PRODUCT = 100**3


def block_size(T: int, C_in: int) -> int:
    # output features per block: as many as keep [B, C_in] @ [C_in, T] a small product,
    # in multiples of 32 (the kernels' vector width), at least 32
    return max(32, SMALL_PRODUCT // (C_in * T) // 32 * 32)


def linear_few_rows(x: np.ndarray, w_t: np.ndarray, b: np.ndarray) -> np.ndarray:
    # [T, C_in], w_t = w.T [C_out, C_in] -> [T, C_out]: the same numbers as x @ w + b.
    # Why blocks: for a handful of rows, OpenBLAS first copies ("packs") the whole weight
    # matrix, so 5 rows cost ~4x one row on the 2-core CPU used here -- and verifying k
    # drafts in one pass stops paying. Slices of w_t small enough for its unpacked kernels
    # read every weight once for all T rows (docs/benchmarks.md has the measurements).
    x_t = np.ascontiguousarray(x.T)  # [C_in, T]
    B = block_size(x.shape[0], x.shape[1])
    y_t = np.concatenate([w_t[j : j + B] @ x_t for j in range(0, w_t.shape[0], B)])
    return y_t.T + b


def causal_mask(T: int, S: int) -> np.ndarray:  # -> [T, S] bool, True = may attend
    # New position i sits at absolute position (S - T) + i: it may see every key up to
    # and including itself. The offset S - T is the cache length the article stresses;
    # without it, verification rows would see the wrong history.
    return np.arange(S)[None, :] <= (S - T + np.arange(T))[:, None]


def split_heads(x: np.ndarray, n_head: int) -> np.ndarray:  # [T, C] -> [nh, T, hs]
    T, C = x.shape
    return x.reshape(T, n_head, C // n_head).transpose(1, 0, 2)


def merge_heads(x: np.ndarray) -> np.ndarray:  # [nh, T, hs] -> [T, C]
    nh, T, hs = x.shape
    return x.transpose(1, 0, 2).reshape(T, nh * hs)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    # q [nh, T, hs], k/v [nh, S, hs] -> [nh, T, hs]:  softmax(q k^T / sqrt(hs) + mask) v
    T, S = q.shape[1], k.shape[1]
    # q k^T computed as (k q^T)^T: the same numbers, but with the long side (S cached keys)
    # as the rows of the product, OpenBLAS skips repacking k; for a few new positions over a
    # long cache this is 1.5-2x faster (verification rows over 400 keys: 43 vs 72 us)
    scores = (k @ q.transpose(0, 2, 1)).transpose(0, 2, 1)  # [nh, T, S]
    scores = scores * np.float32(1.0 / math.sqrt(q.shape[-1]))
    if T > 1:  # one new position may see every key before it: nothing to mask
        scores = np.where(causal_mask(T, S), scores, np.float32(-1e10))
    return softmax(scores) @ v


class GPT:
    """A GPT-2 decoder. ``forward(tokens, cache)`` returns logits for every new position."""

    def __init__(self, config: GPTConfig, params: dict[str, np.ndarray]) -> None:
        self.config = config
        self.params = {name: np.asarray(value, dtype=np.float32) for name, value in params.items()}
        check_param_shapes(config, self.params)
        # transposed copies of the linear weights, for `linear_few_rows`
        self.params_t = {
            name: np.ascontiguousarray(w.T)
            for name, w in self.params.items()
            if name.startswith("h.") and w.ndim == 2
        }

    @property
    def n_vocab(self) -> int:  # V
        return self.config.n_vocab

    def new_cache(self, capacity: int | None = None) -> KVCache:
        cfg = self.config
        capacity = cfg.n_ctx if capacity is None else capacity
        if capacity > cfg.n_ctx:
            raise ValueError(f"cache capacity {capacity} exceeds the model's n_ctx {cfg.n_ctx}")
        return KVCache(cfg.n_layer, cfg.n_head, cfg.head_size, capacity)

    def forward(self, tokens, cache: KVCache | None = None) -> np.ndarray:
        # tokens [T] -> logits [T, V]; row i predicts the token *after* tokens[i].
        # With a cache, the T tokens continue after the cache's last written slot (start)
        # and their K/V are stored as temporary entries until the caller commits them.
        cfg, P = self.config, self.params
        tokens = as_token_array(tokens, cfg.n_vocab)
        T = len(tokens)
        start = 0 if cache is None else cache.end
        if start + T > cfg.n_ctx:
            raise ValueError(
                f"sequence too long: {start} cached + {T} new positions exceed n_ctx={cfg.n_ctx}"
            )
        if cache is not None:
            check_cache_fits(cache, cfg)
            cache.check_room(T)

        x = P["wte.weight"][tokens] + P["wpe.weight"][start : start + T]  # [T, C]
        for i in range(cfg.n_layer):
            x = self.block(x, i, cache, start)
        x = layer_norm(x, P["ln_f.weight"], P["ln_f.bias"], cfg.layer_norm_epsilon)
        if cache is not None:
            cache.mark_written(T)
        return x @ P["wte.weight"].T  # [T, C] @ [C, V] -> [T, V]

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        # [T, C_in] -> [T, C_out] with the parameters `name`.weight / `name`.bias
        w, b = self.params[name + ".weight"], self.params[name + ".bias"]
        T = x.shape[0]
        if 1 < T <= FEW_ROWS and T * w.size > SMALL_PRODUCT:  # small products never pack
            return linear_few_rows(x, self.params_t[name + ".weight"], b)
        return linear(x, w, b)

    def block(self, x: np.ndarray, i: int, cache: KVCache | None, start: int) -> np.ndarray:
        # [T, C] -> [T, C]: pre-LayerNorm residual block
        P, eps = self.params, self.config.layer_norm_epsilon
        h = f"h.{i}."
        a = layer_norm(x, P[h + "ln_1.weight"], P[h + "ln_1.bias"], eps)
        x = x + self.attention_block(a, i, cache, start)
        m = layer_norm(x, P[h + "ln_2.weight"], P[h + "ln_2.bias"], eps)
        m = gelu(self.linear(m, h + "mlp.c_fc"))
        return x + self.linear(m, h + "mlp.c_proj")

    def attention_block(
        self, x: np.ndarray, i: int, cache: KVCache | None, start: int
    ) -> np.ndarray:
        # [T, C] -> [T, C]: multi-head causal self-attention over cached + new positions
        nh = self.config.n_head
        h = f"h.{i}.attn."
        qkv = self.linear(x, h + "c_attn")  # [T, 3C]
        C = x.shape[-1]
        q, k, v = (split_heads(qkv[:, j * C : (j + 1) * C], nh) for j in range(3))  # [nh, T, hs]
        if cache is not None:
            cache.write(i, start, k, v)
            stop = start + x.shape[0]
            k, v = cache.keys(i, stop), cache.values(i, stop)  # [nh, S, hs]
        out = merge_heads(attention(q, k, v))
        return self.linear(out, h + "c_proj")


def expected_param_shapes(cfg: GPTConfig) -> dict[str, tuple[int, ...]]:
    C, V = cfg.n_embd, cfg.n_vocab
    shapes = {
        "wte.weight": (V, C),
        "wpe.weight": (cfg.n_ctx, C),
        "ln_f.weight": (C,),
        "ln_f.bias": (C,),
    }
    for i in range(cfg.n_layer):
        h = f"h.{i}."
        shapes |= {
            h + "ln_1.weight": (C,),
            h + "ln_1.bias": (C,),
            h + "attn.c_attn.weight": (C, 3 * C),
            h + "attn.c_attn.bias": (3 * C,),
            h + "attn.c_proj.weight": (C, C),
            h + "attn.c_proj.bias": (C,),
            h + "ln_2.weight": (C,),
            h + "ln_2.bias": (C,),
            h + "mlp.c_fc.weight": (C, 4 * C),
            h + "mlp.c_fc.bias": (4 * C,),
            h + "mlp.c_proj.weight": (4 * C, C),
            h + "mlp.c_proj.bias": (C,),
        }
    return shapes


def check_param_shapes(cfg: GPTConfig, params: dict[str, np.ndarray]) -> None:
    expected = expected_param_shapes(cfg)
    missing = sorted(set(expected) - set(params))
    if missing:
        raise ValueError(f"missing parameter(s) {missing[:5]} for config {cfg}")
    for name, shape in expected.items():
        if params[name].shape != shape:
            raise ValueError(
                f"parameter {name!r} has shape {params[name].shape}, the config needs {shape}"
            )


def check_cache_fits(cache: KVCache, cfg: GPTConfig) -> None:
    L, nh, _, hs = cache.k.shape
    if (L, nh, hs) != (cfg.n_layer, cfg.n_head, cfg.head_size):
        raise ValueError(
            f"this cache was made for another model (layers, heads, head size = {(L, nh, hs)}, "
            f"the model has {(cfg.n_layer, cfg.n_head, cfg.head_size)}); use model.new_cache()"
        )


def init_params(cfg: GPTConfig, rng: np.random.Generator, std: float = 0.02) -> dict:
    """Random GPT-2 parameters: N(0, std) weights, unit LayerNorm gains, zero biases.

    Tests use a large ``std`` (e.g. 0.5) so that tiny models depend strongly on their
    context; position and rollback bugs then change the output law visibly.
    """
    check_generator(rng)
    params = {}
    for name, shape in expected_param_shapes(cfg).items():
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            params[name] = np.ones(shape, dtype=np.float32)
        elif name.endswith(".bias"):
            params[name] = np.zeros(shape, dtype=np.float32)
        else:
            params[name] = (rng.standard_normal(shape) * std).astype(np.float32)
    return params

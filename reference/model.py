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
from dataclasses import dataclass

import numpy as np

from reference.checks import as_token_array, check_generator
from reference.config import GPTConfig
from reference.kv_cache import KVCache


def gelu(x: np.ndarray) -> np.ndarray:  # [...] -> [...]
    # GPT-2's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    c = np.float32(math.sqrt(2.0 / math.pi))
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x**3)))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:  # [...] -> [...]
    # subtracting the max changes nothing mathematically and keeps exp() from overflowing
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    # [T, C] -> [T, C]:  g * (x - mean) / sqrt(var + eps) + b, over the C features of a row
    # (the sums are np.mean and np.var written out: the same numbers, and far fewer Python
    # calls, which is most of the time of a tiny model's one-row step)
    C = x.shape[-1]
    mean = x.sum(axis=-1, keepdims=True) / C  # mean = (1/C) sum_c x_c
    centred = x - mean
    var = (centred * centred).sum(axis=-1, keepdims=True) / C  # var = (1/C) sum_c (x_c - mean)^2
    return g * centred / np.sqrt(var + eps) + b


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    # [T, C_in] @ [C_in, C_out] + [C_out] -> [T, C_out]
    return x @ w + b


def causal_mask(T: int, S: int) -> np.ndarray:  # -> [T, S] bool, True = may attend
    # New position i sits at absolute position (S - T) + i: it may see every key up to
    # and including itself. The offset S - T is the cache length the article stresses;
    # without it, verification rows would see the wrong history.
    return np.arange(S)[None, :] <= (S - T + np.arange(T))[:, None]


def split_heads(x: np.ndarray, n_head: int) -> np.ndarray:  # [..., T, C] -> [..., nh, T, hs]
    shape = x.shape  # (tuple arithmetic: this runs 3 times per block of every one-row step)
    return x.reshape(shape[:-1] + (n_head, shape[-1] // n_head)).swapaxes(-3, -2)


def merge_heads(x: np.ndarray) -> np.ndarray:  # [..., nh, T, hs] -> [..., T, C]
    x = x.swapaxes(-3, -2)  # [..., T, nh, hs]
    shape = x.shape
    return x.reshape(shape[:-2] + (shape[-2] * shape[-1],))


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask=None) -> np.ndarray:
    # q [..., nh, T, hs], k/v [..., nh, S, hs] -> [..., nh, T, hs]:
    # softmax(q k^T / sqrt(hs) + mask) v. mask: None = causal (causal_mask(T, S)), or a bool
    # array that broadcasts to the scores [..., nh, T, S] (a tree's, a batch's), True = may
    # attend. A masked key gets exp(-1e10 - max) = 0 exactly: it changes nothing.
    T, S = q.shape[-2], k.shape[-2]
    scores = q @ k.swapaxes(-1, -2) / np.float32(math.sqrt(q.shape[-1]))  # [..., nh, T, S]
    scores = np.where(causal_mask(T, S) if mask is None else mask, scores, np.float32(-1e10))
    return softmax(scores) @ v


@dataclass(frozen=True)
class Placement:
    """Where the new positions of one forward pass sit: everything a block needs besides x.

    One forward (`GPT.residual`) serves every pass; only this differs between them:

    * a sequence (`causal_placement`): T tokens at positions start.., causal mask;
    * a tree (reference/tree/forward.py): positions = cache length + depth, the ancestor mask;
    * a ragged batch (reference/batch.py): B rows of T, each row at its own start, with its
      own mask, padding positions writing nothing.

    Every field has one type: a sequence and a tree are one row, a batch is B. The cache
    reads the placement itself (`cache.write_at`, `cache.mark_written_at`).
    """

    shape: tuple[int, ...]  # (T,) or (B, T): the new positions, R = their product rows of x
    positions: np.ndarray  # int64 of `shape`: the wpe row each new position reads
    mask: np.ndarray | None  # None = causal (causal_mask); else bool, broadcasts to [..., nh, T, S]
    start: np.ndarray  # int64 [rows]: the first slot each row writes
    n_new: np.ndarray  # int64 [rows]: the real new positions of each row (the rest: padding)
    stop: int  # S: attention reads cache slots [0, stop)


def causal_placement(start: int, T: int) -> Placement:
    # T tokens of one sequence right after slot `start` (the cache's end; 0 without a cache)
    positions = np.arange(start, start + T)
    return Placement((T,), positions, None, np.array([start]), np.array([T]), start + T)


class GPT:
    """A GPT-2 decoder. ``forward(tokens, cache)`` returns logits for every new position.

    Every pass -- a sequence, a tree of drafts, a ragged batch -- runs the one block below
    (`residual`); they differ only in their `Placement`. The four steps a block is made
    of are methods (`norm`, `linear`, `attend`, `activation`, plus `logits`) so that the
    CPU fast path (specdec/fast_cpu/model.py) and the GPU twin (gpu/model.py) can replace
    how they are computed without touching what they compute, for every kind of pass at
    once; here they are the plain functions above.
    """

    def __init__(self, config: GPTConfig, params: dict[str, np.ndarray]) -> None:
        self.config = config
        self.params = {name: np.asarray(value, dtype=np.float32) for name, value in params.items()}
        check_param_shapes(config, self.params)

    @property
    def n_vocab(self) -> int:  # V
        return self.config.n_vocab

    def new_cache(self, capacity: int | None = None) -> KVCache:
        cfg = self.config
        capacity = cfg.n_ctx if capacity is None else capacity
        if capacity > cfg.n_ctx:
            raise ValueError(f"cache capacity {capacity} exceeds the model's n_ctx {cfg.n_ctx}")
        # n_kv_head: the heads that have keys and values (all of GPT-2's; fewer with GQA)
        return self.cache_type(cfg.n_layer, cfg.n_kv_head, cfg.head_size, capacity)

    cache_type = KVCache  # what new_cache makes (the GPU twin's model makes its own kind)

    def forward(self, tokens, cache: KVCache | None = None) -> np.ndarray:
        # tokens [T] -> logits [T, V]; row i predicts the token *after* tokens[i].
        # With a cache, the T tokens continue after the cache's last written slot (start)
        # and their K/V are stored as temporary entries until the caller commits them.
        # Every check runs before anything is written.
        cfg = self.config
        tokens = as_token_array(tokens, cfg.n_vocab)
        start = 0 if cache is None else cache.end
        if start + len(tokens) > cfg.n_ctx:
            raise ValueError(
                f"sequence too long: {start} cached + {len(tokens)} new positions exceed "
                f"n_ctx={cfg.n_ctx}"
            )
        if cache is not None:
            check_cache_fits(cache, cfg)
            cache.check_room(len(tokens))
        return self.forward_unchecked(tokens, cache)

    def forward_unchecked(self, tokens: np.ndarray, cache: KVCache | None = None) -> np.ndarray:
        # tokens [T] int64 -> logits [T, V]: `forward` without its checks, for the library's
        # own per-token calls, whose entry point (generate, speculative_generate, a drafter's
        # propose) has already checked the tokens, the cache and the room left in it.
        return self.logits(self.norm(self.residual(tokens, cache), "ln_f"))

    def residual(self, tokens: np.ndarray, cache=None, at: Placement | None = None) -> np.ndarray:
        # tokens of at.shape -> x [R, C], the residual stream after the last block (R
        # positions as rows): THE forward pass, unchecked. A sequence, a tree and a batch
        # differ only in `at` (positions, mask, slots); None places T tokens of one sequence
        # right after the cache's last written slot. The final LayerNorm is the caller's:
        # norm(x, "ln_f") gives the hidden states the output layer (and extra heads) read.
        if at is None:
            at = causal_placement(0 if cache is None else cache.end, len(tokens))
        at = self.placed(at)
        x = self.embed(tokens, at)
        x = self.blocks(x.reshape(-1, x.shape[-1]), cache, at, 0, self.config.n_layer)
        if cache is not None:
            cache.mark_written_at(at)
        return x

    def layer_features(
        self, tokens: np.ndarray, cache=None, at: Placement | None = None, layers=None
    ) -> np.ndarray:
        # tokens of at.shape -> [R, len(layers) * C]: the residual stream after the first l
        # blocks, for each l in `layers` (check_feature_layers: increasing, the last n_layer),
        # side by side in that order, so the top (`residual`, pre-ln_f) is the last C columns.
        # What an EAGLE-3 drafter reads; layers None or (n_layer,) IS `residual`, unchanged.
        layers = None if layers is None else check_feature_layers(layers, self.config.n_layer)
        if layers is None or len(layers) == 1:
            return self.residual(tokens, cache, at)
        if at is None:
            at = causal_placement(0 if cache is None else cache.end, len(tokens))
        at = self.placed(at)
        x = self.embed(tokens, at)
        x, first, spans = x.reshape(-1, x.shape[-1]), 0, []
        for stop in layers:  # the same blocks as `residual`, read out after each span
            x = self.blocks(x, cache, at, first, stop)
            spans.append(x)
            first = stop
        if cache is not None:
            cache.mark_written_at(at)
        return np.concatenate(spans, axis=1)

    def placed(self, at: Placement) -> Placement:
        # the placement as this model's arrays (the GPU twin moves its arrays to its device)
        return at

    def embed(self, tokens: np.ndarray, at: Placement) -> np.ndarray:
        # tokens of at.shape -> x [..., T, C]: token + position embeddings
        P = self.params
        return P["wte.weight"][tokens] + P["wpe.weight"][at.positions]

    def blocks(
        self, x: np.ndarray, cache: KVCache | None, at: Placement, first: int, stop: int
    ) -> np.ndarray:
        # [R, C] -> [R, C]: blocks first..stop-1, each writing its K/V at the slots of `at` (a
        # verification pass that reuses a drafter's lower layers runs them in two spans)
        for i in range(first, stop):
            x = self.block(x, i, cache, at)
        return x

    def logits(self, h: np.ndarray) -> np.ndarray:
        # [T, C] @ [C, V] -> [T, V]: the output layer is the tied token embedding
        return h @ self.params["wte.weight"].T

    def block(self, x: np.ndarray, i: int, cache: KVCache | None, at: Placement) -> np.ndarray:
        # [R, C] -> [R, C]: pre-LayerNorm residual block. Norms, linears and the activation
        # act on each position alone, so they see the R positions as rows of one array; only
        # attention needs to know which position is which (`at`).
        h = f"h.{i}."
        x = x + self.attention_block(self.norm(x, h + "ln_1"), i, cache, at)
        m = self.activation(self.linear(self.norm(x, h + "ln_2"), h + "mlp.c_fc"))
        return x + self.linear(m, h + "mlp.c_proj")

    def attention_block(
        self, x: np.ndarray, i: int, cache: KVCache | None, at: Placement
    ) -> np.ndarray:
        # [R, C] -> [R, C]: multi-head self-attention over cached + new positions
        h = f"h.{i}.attn."
        out = self.multi_head_attention(self.linear(x, h + "c_attn"), i, cache, at)
        return self.linear(out, h + "c_proj")

    def multi_head_attention(
        self, qkv: np.ndarray, i: int, cache: KVCache | None, at: Placement
    ) -> np.ndarray:
        # qkv [R, 3C] -> [R, C]: split into heads, write the new K/V, attend, merge the heads
        # (the GPU twin runs all of it as one fused kernel, for every kind of pass)
        C = qkv.shape[-1] // 3
        qkv = qkv.reshape(at.shape + (3 * C,))  # [..., T, 3C]
        q, k, v = (split_heads(qkv[..., j * C : (j + 1) * C], self.config.n_head) for j in range(3))
        if cache is not None:  # temporary write at the new slots; then history + new
            k, v = cache.write_at(i, at, k, v)  # [..., nh, S, hs]
        out = merge_heads(self.attend(q, k, v, at.mask))  # [..., T, C]
        return out.reshape(-1, C)

    # The four computations of a block, by parameter name.

    def norm(self, x: np.ndarray, name: str) -> np.ndarray:  # [T, C] -> [T, C]
        P = self.params
        return layer_norm(x, P[name + ".weight"], P[name + ".bias"], self.config.layer_norm_epsilon)

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:  # [T, C_in] -> [T, C_out]
        return linear(x, self.params[name + ".weight"], self.params[name + ".bias"])

    def attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask=None) -> np.ndarray:
        return attention(q, k, v, mask)  # [..., nh, T, hs], [..., nh, S, hs] x2 -> [.., T, hs]

    def activation(self, x: np.ndarray) -> np.ndarray:  # [...] -> [...]
        return gelu(x)


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
    check_against(expected_param_shapes(cfg), params, cfg)


def check_against(expected: dict, params: dict, cfg, refuse_extra: bool = False) -> None:
    # every expected parameter present with its shape (either family's); refuse_extra: a name
    # the config has no place for is an error too (reference/llama.py: a stray bias)
    missing = sorted(set(expected) - set(params))
    if missing:
        raise ValueError(f"missing parameter(s) {missing[:5]} for config {cfg}")
    extra = sorted(set(params) - set(expected)) if refuse_extra else []
    if extra:
        raise ValueError(f"parameter(s) {extra[:5]} are not part of a model with config {cfg}")
    for name, shape in expected.items():
        if params[name].shape != shape:
            raise ValueError(
                f"parameter {name!r} has shape {params[name].shape}, the config needs {shape}"
            )


def check_feature_layers(layers, n_layer: int) -> tuple[int, ...]:
    # -> layers as a tuple of ints: block counts l with 1 <= l <= n_layer, strictly increasing,
    # the last n_layer (the feature below ln_f, which scores p, is always read)
    if isinstance(layers, (str, bytes)) or not hasattr(layers, "__len__") or len(layers) == 0:
        raise ValueError(
            f"feature layers must be a non-empty sequence of block counts, e.g. (2, 4, "
            f"{n_layer}), got {layers!r}"
        )
    out = []
    for layer in layers:
        if isinstance(layer, (bool, np.bool_)) or not isinstance(layer, (int, np.integer)):
            raise ValueError(f"feature layers must be ints (block counts), got {layers!r}")
        if not 1 <= layer <= n_layer:
            raise ValueError(
                f"feature layer {int(layer)} is not a block count of the target: each must be "
                f"in 1..{n_layer} (the residual stream after that many blocks), got {layers!r}"
            )
        out.append(int(layer))
    if np.any(np.diff(out) <= 0):
        raise ValueError(f"feature layers must be strictly increasing, got {tuple(out)}")
    if out[-1] != n_layer:
        raise ValueError(
            f"the last feature layer must be the top, {n_layer} (the feature below ln_f that "
            f"scores p), got {tuple(out)}"
        )
    return tuple(out)


def check_cache_fits(cache: KVCache, cfg: GPTConfig) -> None:
    # cfg: a GPTConfig or a LlamaConfig; both name the cache's heads n_kv_head
    L, nkv, _, hs = cache.k.shape
    if (L, nkv, hs) != (cfg.n_layer, cfg.n_kv_head, cfg.head_size):
        raise ValueError(
            f"this cache was made for another model (layers, key/value heads, head size = "
            f"{(L, nkv, hs)}, the model has {(cfg.n_layer, cfg.n_kv_head, cfg.head_size)}); "
            f"use model.new_cache()"
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

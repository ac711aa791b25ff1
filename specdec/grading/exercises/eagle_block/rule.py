"""The EAGLE block exercise's contract, written here from its statement, in float64, with the
usual slips as switches (mistakes.py names them; the rule is the forward with none).

    eagle_block_forward(tokens [T] int64, features [T, C] float32, params, n_head) -> [T, C]

For each position t = 0..T-1, from an empty cache (tests/grader/test_exercise_eagle_block.py
holds this equal to the reference's EagleDrafter, fuse then step, on every case):

    g(t) = [e(tokens[t]); features[t]] W + b    e: wte's rows, W = fc.weight [2C, C]
    x    = g + Attention(LN_1(g))               causal: row t reads rows 0..t; n_head heads
                                                of C / n_head columns, scaled 1/sqrt(C/n_head)
    out  = x + MLP(LN_2(x))                     c_fc, GELU (GPT-2's tanh form), c_proj

No position embedding enters (the fused row carries its position in f(t)), and the output is
the next feature as the target's features are, before ln_f: the drafter's q applies ln_f and
the output layer to it afterwards. wpe and ln_f are in the params only because the drafter
holds them (and a student must see that the block does not read them).

How close a float32 answer must be: `gap` scales the largest difference by the largest value
(at least 1). A correct float32 forward is within ~4e-7 of this float64 one (the tests hold
the reference's within TOL / 100 on every case); GELU's exact (erf) form, which GPT-2
approximates with tanh, is within ~6e-4, and is accepted; every catalogued slip is at least
10 TOL away on the case that shows it (tested too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EPS = 1e-5  # GPT-2's LayerNorm epsilon (GPTConfig.layer_norm_epsilon)
TOL = 2e-3  # the largest `gap` of a correct answer (float32 rounding: ~4e-7 here)
FUSE = ("fc.weight", "fc.bias")
TARGET = ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias")  # the target's, shared


@dataclass(frozen=True)
class Slip:
    """One way the forward can go wrong; Slip() is the contract."""

    swapped: bool = False  # the fusion reads [f; e] instead of [e; f]
    positions: bool = False  # wpe[0..T-1] added to the fused rows
    feature_normed: bool = False  # the target's ln_f applied to f before the fusion
    output_normed: bool = False  # the target's ln_f applied to the output
    mask: str = "causal"  # "none": every row reads all T; "zeroed": masked scores set to 0
    scale: str = "head"  # "width": scores / sqrt(C); "none": not scaled
    heads: str = "split"  # "reshaped": [T, C] reshaped to [nh, T, hs] without a transpose
    residual: str = "both"  # "no-attn", "no-mlp": that residual add forgotten
    post_norm: bool = False  # LN after each residual add (the original Transformer's order)
    gelu: str = "tanh"  # "relu"; ("erf", the exact GELU, is within TOL: not a slip)
    eps: float = EPS
    eps_inside: bool = True  # False: sqrt(var) + eps


RULE = Slip()


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, slip: Slip = RULE) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    spread = np.sqrt(var + slip.eps) if slip.eps_inside else np.sqrt(var) + slip.eps
    return g * (x - mean) / spread + b


def gelu(x: np.ndarray, kind: str = "tanh") -> np.ndarray:
    if kind == "relu":
        return np.maximum(x, 0.0)
    if kind == "erf":
        return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def attention(x: np.ndarray, P: dict, n_head: int, slip: Slip) -> np.ndarray:
    # x [T, C] (normed) -> [T, C]: causal multi-head self-attention, c_attn then c_proj
    T, C = x.shape
    hs = C // n_head
    qkv = x @ P["h.0.attn.c_attn.weight"] + P["h.0.attn.c_attn.bias"]  # [T, 3C]

    def heads(m: np.ndarray) -> np.ndarray:  # [T, C] -> [nh, T, hs]
        if slip.heads == "reshaped":
            return m.reshape(n_head, T, hs)
        return m.reshape(T, n_head, hs).transpose(1, 0, 2)

    q, k, v = (heads(qkv[:, j * C : (j + 1) * C]) for j in range(3))
    scale = {"head": math.sqrt(hs), "width": math.sqrt(C), "none": 1.0}[slip.scale]
    scores = q @ k.transpose(0, 2, 1) / scale  # [nh, T, T]
    later = np.triu(np.ones((T, T), dtype=bool), 1)  # key j > query i
    if slip.mask == "causal":
        scores = np.where(later, -np.inf, scores)
    elif slip.mask == "zeroed":
        scores = np.where(later, 0.0, scores)
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    w /= w.sum(axis=-1, keepdims=True)
    out = (w @ v).transpose(1, 0, 2).reshape(T, C)
    return out @ P["h.0.attn.c_proj.weight"] + P["h.0.attn.c_proj.bias"]


def mlp(x: np.ndarray, P: dict, slip: Slip) -> np.ndarray:  # [T, C] (normed) -> [T, C]
    h = gelu(x @ P["h.0.mlp.c_fc.weight"] + P["h.0.mlp.c_fc.bias"], slip.gelu)
    return h @ P["h.0.mlp.c_proj.weight"] + P["h.0.mlp.c_proj.bias"]


def forward(
    tokens: np.ndarray, features: np.ndarray, params: dict, n_head: int, slip: Slip = RULE
) -> np.ndarray:
    """tokens [T], features [T, C], params, n_head -> [T, C] float64: the block's output for
    each position (the contract with slip = RULE)."""
    P = {name: np.asarray(value, dtype=np.float64) for name, value in params.items()}
    f = np.asarray(features, dtype=np.float64)
    if slip.feature_normed:
        f = layer_norm(f, P["ln_f.weight"], P["ln_f.bias"], slip)
    e = P["wte.weight"][np.asarray(tokens)]
    fused = np.concatenate([f, e] if slip.swapped else [e, f], axis=1)
    x = fused @ P["fc.weight"] + P["fc.bias"]
    if slip.positions:
        x = x + P["wpe.weight"][: len(x)]

    def norm(y: np.ndarray, name: str) -> np.ndarray:
        return layer_norm(y, P[f"h.0.{name}.weight"], P[f"h.0.{name}.bias"], slip)

    if slip.post_norm:
        x = norm(x + attention(x, P, n_head, slip), "ln_1")
        x = norm(x + mlp(x, P, slip), "ln_2")
    else:
        a = attention(norm(x, "ln_1"), P, n_head, slip)
        x = a if slip.residual == "no-attn" else x + a
        m = mlp(norm(x, "ln_2"), P, slip)
        x = m if slip.residual == "no-mlp" else x + m
    if slip.output_normed:
        x = layer_norm(x, P["ln_f.weight"], P["ln_f.bias"], slip)
    return x


def rule(tokens: np.ndarray, features: np.ndarray, params: dict, n_head: int) -> np.ndarray:
    """The contract: the block's output rows, in float64."""
    return forward(tokens, features, params, n_head, RULE)


def gap(got: np.ndarray, want: np.ndarray) -> float:
    """How far an answer is from the expected rows: the largest difference over the largest
    value (at least 1); inf for another shape or a value that is not finite."""
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape or not np.all(np.isfinite(got)):
        return math.inf
    if got.size == 0:
        return 0.0
    return float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))


def close(got: np.ndarray, want: np.ndarray) -> bool:
    return gap(got, want) <= TOL

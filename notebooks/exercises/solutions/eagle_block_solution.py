"""A solution to notebooks/exercises/my_eagle_block.py, written from scratch with numpy only.

Grade it like your own (from the repository root, one command):

    .venv/bin/specdec grade \\
        notebooks/exercises/solutions/eagle_block_solution.py:eagle_block_forward
"""

from __future__ import annotations

import numpy as np

EPS = 1e-5  # GPT-2's LayerNorm epsilon


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:  # [T, C] -> [T, C]
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return g * (x - mean) / np.sqrt(var + EPS) + b


def gelu(x: np.ndarray) -> np.ndarray:  # GPT-2's tanh approximation
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def causal_attention(x: np.ndarray, p: dict, n_head: int) -> np.ndarray:
    # x [T, C] (normed) -> [T, C]: row t reads rows 0..t, each head its own hs = C / nh columns
    T, C = x.shape
    hs = C // n_head
    qkv = x @ p["h.0.attn.c_attn.weight"] + p["h.0.attn.c_attn.bias"]  # [T, 3C]
    q, k, v = (
        qkv[:, i * C : (i + 1) * C].reshape(T, n_head, hs).transpose(1, 0, 2) for i in range(3)
    )
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(hs)  # [nh, T, T]
    scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)  # no later key
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)
    out = (w @ v).transpose(1, 0, 2).reshape(T, C)  # the heads side by side again
    return out @ p["h.0.attn.c_proj.weight"] + p["h.0.attn.c_proj.bias"]


def eagle_block_forward(
    tokens: np.ndarray, features: np.ndarray, params: dict, n_head: int
) -> np.ndarray:
    # tokens [T], features [T, C], params, n_head -> [T, C]: the next feature at each position
    p = params
    e = p["wte.weight"][tokens]  # the target's own embedding of each token
    g = np.concatenate([e, features], axis=1) @ p["fc.weight"] + p["fc.bias"]  # [T, 2C] -> [T, C]
    # no wpe: f(t) already carries its position (the target added wpe when it computed it)
    x = g + causal_attention(layer_norm(g, p["h.0.ln_1.weight"], p["h.0.ln_1.bias"]), p, n_head)
    h = layer_norm(x, p["h.0.ln_2.weight"], p["h.0.ln_2.bias"])
    m = gelu(h @ p["h.0.mlp.c_fc.weight"] + p["h.0.mlp.c_fc.bias"])
    # no ln_f: the output is a feature, before the norm the drafter's q applies to it
    return (x + m @ p["h.0.mlp.c_proj.weight"] + p["h.0.mlp.c_proj.bias"]).astype(np.float32)

"""Broken submissions of the EAGLE block exercise,
`eagle_block_forward(tokens [T], features [T, C], params, n_head) -> [T, C]`
(notebooks/exercises/my_eagle_block.py), each one small mistake a student makes on top of a
correct function (written here in float32, apart from the grader's float64 rule), to test
that the grader rejects it and that its hint names the mistake."""

from __future__ import annotations

import math

import numpy as np


def norm(x, g, b, eps=1e-5, inside=True):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return g * (x - mean) / (np.sqrt(var + eps) if inside else np.sqrt(var) + eps) + b


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.float32(math.sqrt(2 / math.pi)) * (x + 0.044715 * x**3)))


def attend(x, p, n_head, mask="causal", scale="head", heads="split"):
    T, C = x.shape
    hs = C // n_head
    qkv = x @ p["h.0.attn.c_attn.weight"] + p["h.0.attn.c_attn.bias"]
    parts = np.split(qkv, 3, axis=1)
    if heads == "split":
        q, k, v = (m.reshape(T, n_head, hs).transpose(1, 0, 2) for m in parts)
    else:  # a reshape straight to [nh, T, hs]: heads mix positions
        q, k, v = (m.reshape(n_head, T, hs) for m in parts)
    s = q @ k.transpose(0, 2, 1) / {"head": math.sqrt(hs), "width": math.sqrt(C), "none": 1}[scale]
    later = np.triu(np.ones((T, T), dtype=bool), 1)
    if mask == "causal":
        s = np.where(later, -1e30, s)
    elif mask == "zeroed":
        s = s * ~later
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    out = (w @ v).transpose(1, 0, 2).reshape(T, C)
    return out @ p["h.0.attn.c_proj.weight"] + p["h.0.attn.c_proj.bias"]


def forward(tokens, features, params, n_head, **slip):
    p = {n: np.asarray(v, dtype=np.float32) for n, v in params.items()}
    f = np.asarray(features, dtype=np.float32)
    if slip.get("feature_normed"):
        f = norm(f, p["ln_f.weight"], p["ln_f.bias"])
    e = p["wte.weight"][tokens]
    halves = [f, e] if slip.get("swapped") else [e, f]
    x = np.concatenate(halves, axis=1) @ p["fc.weight"] + p["fc.bias"]
    if slip.get("positions"):
        x = x + p["wpe.weight"][np.arange(len(tokens))]
    eps, inside = slip.get("eps", 1e-5), slip.get("inside", True)

    def ln(y, i):
        return norm(y, p[f"h.0.ln_{i}.weight"], p[f"h.0.ln_{i}.bias"], eps, inside)

    how = {key: slip[key] for key in ("mask", "scale", "heads") if key in slip}
    act = (lambda y: np.maximum(y, 0)) if slip.get("relu") else gelu
    mlp_w = (p["h.0.mlp.c_fc.weight"], p["h.0.mlp.c_fc.bias"])
    proj = (p["h.0.mlp.c_proj.weight"], p["h.0.mlp.c_proj.bias"])
    if slip.get("post_norm"):
        x = ln(x + attend(x, p, n_head, **how), 1)
        x = ln(x + act(x @ mlp_w[0] + mlp_w[1]) @ proj[0] + proj[1], 2)
    else:
        a = attend(ln(x, 1), p, n_head, **how)
        x = a if slip.get("no_attn_residual") else x + a
        m = act(ln(x, 2) @ mlp_w[0] + mlp_w[1]) @ proj[0] + proj[1]
        x = m if slip.get("no_mlp_residual") else x + m
    if slip.get("output_normed"):
        x = norm(x, p["ln_f.weight"], p["ln_f.bias"])
    return x


def correct(tokens, features, params, n_head):
    return forward(tokens, features, params, n_head)


def fusion_swapped(tokens, features, params, n_head):
    """[f; e] W + b: the feature in the fusion layer's first half."""
    return forward(tokens, features, params, n_head, swapped=True)


def position_embedding_added(tokens, features, params, n_head):
    """wpe[0..T-1] added to the fused rows, as the target adds it to its token embeddings."""
    return forward(tokens, features, params, n_head, positions=True)


def feature_normed(tokens, features, params, n_head):
    """The target's ln_f applied to the feature before the fusion."""
    return forward(tokens, features, params, n_head, feature_normed=True)


def output_normed(tokens, features, params, n_head):
    """The target's ln_f applied to the block's output."""
    return forward(tokens, features, params, n_head, output_normed=True)


def no_causal_mask(tokens, features, params, n_head):
    """Every row attends to all T rows."""
    return forward(tokens, features, params, n_head, mask="none")


def mask_zeroed(tokens, features, params, n_head):
    """Later positions' scores multiplied by 0: exp(0) still weighs them."""
    return forward(tokens, features, params, n_head, mask="zeroed")


def heads_reshaped(tokens, features, params, n_head):
    """q, k, v reshaped straight to [nh, T, hs]."""
    return forward(tokens, features, params, n_head, heads="reshaped")


def scaled_by_width(tokens, features, params, n_head):
    """Scores divided by sqrt(C), not sqrt(C / n_head)."""
    return forward(tokens, features, params, n_head, scale="width")


def attention_residual_forgotten(tokens, features, params, n_head):
    """x = Attention(LN_1(g)), the fused row not added back."""
    return forward(tokens, features, params, n_head, no_attn_residual=True)


def mlp_residual_forgotten(tokens, features, params, n_head):
    """out = MLP(LN_2(x)), x not added back."""
    return forward(tokens, features, params, n_head, no_mlp_residual=True)


def post_norm(tokens, features, params, n_head):
    """LN after each residual add, the original Transformer's order."""
    return forward(tokens, features, params, n_head, post_norm=True)


def relu_for_gelu(tokens, features, params, n_head):
    """ReLU in the MLP."""
    return forward(tokens, features, params, n_head, relu=True)


def eps_outside_sqrt(tokens, features, params, n_head):
    """LayerNorm divides by sqrt(var) + eps."""
    return forward(tokens, features, params, n_head, inside=False)


def eps_missing(tokens, features, params, n_head):
    """LayerNorm with eps = 1e-12 (next to nothing)."""
    return forward(tokens, features, params, n_head, eps=1e-12)


def two_slips(tokens, features, params, n_head):
    """Fusion swapped AND no causal mask: no one catalogued mistake fits."""
    return forward(tokens, features, params, n_head, swapped=True, mask="none")


def rows_transposed(tokens, features, params, n_head):
    """Returns [C, T]: the shape is wrong."""
    return correct(tokens, features, params, n_head).T.copy()


VARIANTS = {
    name: function
    for name, function in globals().items()
    if callable(function)
    and function.__module__ == __name__
    and name not in ("correct", "norm", "gelu", "attend", "forward")
}

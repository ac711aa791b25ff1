"""A Llama forward with a cache as one compiled call (numba, optional): specdec/fast_cpu/step.py
for the Llama block.

What step.py says of GPT-2 holds here, more so: a Llama block is about 30 NumPy calls beside
GPT-2's 20 (three projections where GPT-2 has one, the rotations, the gate), so a small
model's step is nearly all per-call overhead. `compiled_forward` runs
`reference.llama.Llama.forward_unchecked(tokens, cache)` as one call: each row takes its
token's embedding, and in every block RMSNorm, q/k/v (plus Qwen2's biases), the rotation of
q and k by the row's position (the model's own cos/sin tables, so Llama 3's scaling comes
with them), its K/V written at its slot, attention over the slots up to its own (query head
h reads key head h // (nh / nkv), step.attend_row), o_proj, RMSNorm, silu(gate) * up, down,
the residual adds; then the final RMSNorm and the output layer. The rows go in groups, one
by one ("stepwise") or all at once ("fused"), as in step.py, whose compiled pieces it reuses:
the products (`rows_times_matrix`: a weight row scaled and added for one row, the few-row
kernel for more) and the vectorised exp.

The linear weights reach the loops in both layouts the fast model keeps: the checkpoint's
W [C_out, C_in] (what the few-row kernel reads) and its transposed copy [C_in, C_out] (what
one row's product reads). A linear without a bias gets a zero vector, made once. The
16-bit configurations hand the loops the 16-bit copies of both layouts and of the output
layer instead (specdec/fast_cpu/sixteen.py), widened as they are read.
"""

from __future__ import annotations

import operator

import numpy as np

from specdec.fast_cpu import compiled, step

try:
    import numba
    from numba.typed import List
except ImportError:  # the `fast` extra is not installed: the plan never offers "stepwise"
    numba = None

# per block, in this order: its linears (model.layers.{i}.<name>) and its norms' gains
LINEARS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)
NORMS = ("input_layernorm", "post_attention_layernorm")


if numba is not None:
    jit = numba.njit(fastmath=True, boundscheck=False, error_model="numpy", cache=True)

    @jit
    def rms_norm_row(x, g, eps, out):  # [C], [C] -> out [C]: g x / sqrt(mean(x^2) + eps)
        total = np.float32(0.0)
        for c in range(x.shape[0]):
            total += x[c] * x[c]
        scale = np.float32(1.0) / np.sqrt(total / np.float32(x.shape[0]) + eps)
        for c in range(x.shape[0]):
            out[c] = g[c] * (x[c] * scale)

    @jit
    def rotate_row(x, hs, cos, sin):  # x [heads hs] in place; cos/sin [hs/2]: this position's
        # each head's feature j turns with feature j + hs/2 (reference.llama.rotate)
        half = hs // 2
        for o in range(0, x.shape[0], hs):
            for j in range(half):
                a, b = x[o + j], x[o + j + half]
                x[o + j] = a * cos[j] - b * sin[j]
                x[o + j + half] = b * cos[j] + a * sin[j]

    @jit
    def swiglu_row(gate, up, e, bits):  # gate [I] in place = silu(gate) * up; e, bits: scratch
        # silu(x) = x / (1 + exp(-x)), with step.py's vectorised exp (which keeps its input
        # within +-87.3, so that nothing overflows)
        for c in range(gate.shape[0]):
            e[c] = -gate[c]
        step.exp_into(e, e, bits)
        for c in range(gate.shape[0]):
            gate[c] = gate[c] / (np.float32(1.0) + e[c]) * up[c]

    @jit
    def forward_kernel(
        tokens, start, group, embed, matrices, transposed, chunks, biases, gains, cos, sin,
        k_cache, v_cache, eps, out_weight, residual, logits,
    ):  # fmt: skip
        # tokens [T] at positions start.. -> residual [T, C] (the stream after the last
        # block) and logits [T, V] (none when it has 0 rows); K/V written at slots start..
        # matrices [C_out, C_in], their transposes, chunks (the few-row kernel's input chunk)
        # and biases: 7 per block (LINEARS); gains: 2 per block (NORMS), then model.norm's
        T, L, C = tokens.shape[0], k_cache.shape[0], embed.shape[1]
        nkv, hs = k_cache.shape[1], k_cache.shape[3]
        nq, nk, inner = matrices[0].shape[0], nkv * hs, matrices[4].shape[0]
        scores = np.empty(k_cache.shape[2], np.float32)
        bits = np.empty(max(k_cache.shape[2], inner), np.int32)
        e = np.empty(inner, np.float32)
        for first in range(0, T, group):
            R = min(group, T - first)
            slot = start + first  # the group's first slot (= its first position)
            x, h = np.empty((R, C), np.float32), np.empty((R, C), np.float32)
            q, a = np.empty((R, nq), np.float32), np.empty((R, nq), np.float32)
            k, v = np.empty((R, nk), np.float32), np.empty((R, nk), np.float32)
            gate, up = np.empty((R, inner), np.float32), np.empty((R, inner), np.float32)
            for r in range(R):
                x[r] = embed[tokens[first + r]]
            for layer in range(L):
                M, G = 7 * layer, 2 * layer
                for r in range(R):
                    rms_norm_row(x[r], gains[G], eps, h[r])
                for j, out in ((0, q), (1, k), (2, v)):
                    step.rows_times_matrix(
                        h, transposed[M + j], matrices[M + j], biases[M + j], chunks[M + j], out
                    )
                for r in range(R):  # rotate by position, then K/V as temporary entries
                    rotate_row(q[r], hs, cos[slot + r], sin[slot + r])
                    rotate_row(k[r], hs, cos[slot + r], sin[slot + r])
                    for head in range(nkv):
                        for d in range(hs):
                            k_cache[layer, head, slot + r, d] = k[r, head * hs + d]
                            v_cache[layer, head, slot + r, d] = v[r, head * hs + d]
                for r in range(R):  # row r sees the slots up to its own
                    step.attend_row(
                        q[r], k_cache[layer], v_cache[layer], slot + r + 1, a[r], scores, bits
                    )
                step.rows_times_matrix(
                    a, transposed[M + 3], matrices[M + 3], biases[M + 3], chunks[M + 3], h
                )
                x += h  # x = x + attention(norm(x))
                for r in range(R):
                    rms_norm_row(x[r], gains[G + 1], eps, h[r])
                for j, out in ((4, gate), (5, up)):
                    step.rows_times_matrix(
                        h, transposed[M + j], matrices[M + j], biases[M + j], chunks[M + j], out
                    )
                for r in range(R):
                    swiglu_row(gate[r], up[r], e, bits)
                step.rows_times_matrix(
                    gate, transposed[M + 6], matrices[M + 6], biases[M + 6], chunks[M + 6], h
                )
                x += h  # x = x + mlp(norm(x))
            residual[first : first + R] = x
            for r in range(R if logits.shape[0] else 0):
                rms_norm_row(x[r], gains[2 * L], eps, h[r])
                for t in range(out_weight.shape[0]):  # logits = norm(x) @ W^T, W [V, C]
                    dot = np.float32(0.0)
                    for c in range(C):
                        dot += h[r, c] * compiled.widen(out_weight[t, c])
                    logits[first + r, t] = dot
        return residual


def weight_names(n_layer: int) -> tuple[list[str], list[str]]:
    # -> (linear names [7 L], gain names [2 L + 1]): the order the compiled forward reads them
    linears = [f"model.layers.{i}.{m}" for i in range(n_layer) for m in LINEARS]
    gains = [f"model.layers.{i}.{n}.weight" for i in range(n_layer) for n in NORMS]
    return linears, gains + ["model.norm.weight"]


class CompiledWeights:
    """A Llama's weights as the compiled forward reads them (step.CompiledWeights' rules: the
    arrays are shared, and the lists are built again when one under a name was replaced;
    `sixteen`: the linears and the output layer as the model's 16-bit copies)."""

    def __init__(self, n_layer: int, sixteen: bool = False) -> None:
        self.linear_names, self.gain_names = weight_names(n_layer)
        self.sixteen = sixteen
        self.arrays: tuple = ()
        self.lists = None  # (matrices, transposes, chunks, biases, gains), or None: unreadable

    def current(self, model):
        P = model.params
        matrices = [P[n + ".weight"] for n in self.linear_names]
        biases = [P.get(n + ".bias") for n in self.linear_names]
        arrays = (*matrices, *biases, *map(P.__getitem__, self.gain_names))
        if len(arrays) != len(self.arrays) or not all(map(operator.is_, arrays, self.arrays)):
            self.lists = None
            present = [a for a in arrays if a is not None]
            # the few-row kernel pairs output features: an odd C_out keeps the NumPy pass
            if all(map(step.is_float32_c, present)) and all(w.shape[0] % 2 == 0 for w in matrices):
                transposed = [model.transposed_weight(n + ".weight") for n in self.linear_names]
                if self.sixteen:  # the same weights in 16 bits: both layouts, or nothing
                    names = [n + ".weight" for n in self.linear_names]
                    matrices = [model.sixteen_bit(n) for n in names]
                    transposed = [model.sixteen_bit(n, True) for n in names]
                    if any(w is None for w in matrices + transposed):
                        self.arrays = arrays
                        return None
                added = [  # a zero bias where the linear has none: one type for the list
                    np.zeros(w.shape[0], np.float32) if b is None else b
                    for w, b in zip(matrices, biases, strict=True)
                ]
                self.lists = (
                    List([step.read_only_view(w) for w in matrices]),
                    List([step.read_only_view(w) for w in transposed]),
                    np.array([compiled.chunk_width(w.shape[1]) for w in matrices]),
                    List([step.read_only_view(b) for b in added]),
                    List([step.read_only_view(P[n]) for n in self.gain_names]),
                )
            self.arrays = arrays
        return self.lists


def compiled_forward(model, weights: CompiledWeights, tokens, cache, group: int, logits=True):
    # step.compiled_forward for a Llama: tokens [T] -> (residual [T, C], logits [T, V] or
    # None), their K/V temporary entries after the cache's last written slot; None (nothing
    # written) where an array is not what the loops read
    lists = weights.current(model)
    tied = model.config.tie_word_embeddings
    embed = model.params["model.embed_tokens.weight"]
    out_name = "model.embed_tokens.weight" if tied else "lm_head.weight"
    out_weight = model.params[out_name]
    tables = (model.rope_cos, model.rope_sin)
    arrays = (embed, out_weight, *tables, cache.k, cache.v)
    if lists is None or not all(map(step.is_float32_c, arrays)):
        return None
    if weights.sixteen:  # the output layer's 16-bit copy, as the matrices
        out_weight = model.sixteen_bit(out_name)
        if out_weight is None:
            return None
    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    residual = np.empty((len(tokens), embed.shape[1]), np.float32)
    scores = np.empty((len(tokens) if logits else 0, out_weight.shape[0]), np.float32)
    eps = np.float32(model.config.rms_norm_eps)
    matrices, transposed, chunks, biases, gains = lists
    compiled.interruptible(
        forward_kernel,
        tokens, cache.end, max(group, 1), embed, matrices, transposed, chunks, biases, gains,
        *tables, cache.k, cache.v, eps, out_weight, residual, scores,
    )  # fmt: skip
    cache.mark_written(len(tokens))
    return residual, (scores if logits else None)

"""A forward with a cache as one compiled call (numba, optional): the draft's step, and a
verification pass without NumPy's per-call overhead.

The bundled draft (2 layers of 128 features, 2 heads) does about 0.9 MFLOP per token and
reads 1.7 MB of weights: microseconds of work. Its NumPy forward takes about 170 µs, nearly
all of it the ~60 NumPy calls of a step (a few microseconds of Python and dispatch each), and
a speculative round of k drafts pays that k times, plus the catch-up rows. The target's
passes pay the same calls too, beside their 43 MB of weights. `compiled_forward` runs
`reference.model.GPT.forward_unchecked(tokens, cache)` as a single compiled call: each row
embeds its token, runs every block (LayerNorm, the four linears, attention over the cached
keys, GELU, the residual adds), writes its K/V into the cache as temporary entries, and
leaves its logits. The numbers are the plain model's to float32 rounding (the sums run in
another order). The rows go through the blocks in groups: one by one (`group` 1, the plan's
"stepwise") or all at once ("fused"); either way row t sees exactly the keys a causal pass
shows it (its own slot and those before).

One row's linears are weight rows scaled and added (`vector_times_matrix`, reading the
checkpoint's [C_in, C_out] layout, vectorised along the outputs with no horizontal sum);
several rows' go through the few-row kernel of specdec/fast_cpu/compiled.py on the
transposed layout, which reads each pair of weight rows once for all of them. Attention runs
one row and one head at a time over the cache's contiguous slots, with scalar `exp` (about
2 ns each: 9,600 for an 8-row pass of one target layer). Rows one by one read every weight
once per row, so "stepwise" can pay only where weights are few (the draft) or for one row;
the plan (specdec/fast_cpu/plan.py) times both against the other configurations for passes
of up to FEW_ROWS rows and keeps them only where they measured faster.

The weights reach the compiled code as numba typed lists that refer to the model's own arrays
(and the fast model's transposed copies): nothing is copied, an in-place edit shows at the
next call, a replaced array is noticed (an identity test per call) and the lists are built
again, and an array that is not float32 in C order leaves the call to the NumPy forward.
The plan's "stepwise16" and "fused16" run the same loops on the 16-bit copies of the matrices
and of the output layer (specdec/fast_cpu/sixteen.py), widened as they are read: half the
bytes a pass streams, the same float32 arithmetic.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from specdec.fast_cpu import compiled

try:
    import numba
    from numba.typed import List
except ImportError:  # the `fast` extra is not installed: the plan never offers "stepwise"
    numba = None

# per block, in this order: the names of its matrices and of its vectors
MATRICES = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
VECTORS = (
    "ln_1.weight",
    "ln_1.bias",
    "attn.c_attn.bias",
    "attn.c_proj.bias",
    "ln_2.weight",
    "ln_2.bias",
    "mlp.c_fc.bias",
    "mlp.c_proj.bias",
)
GELU_C = np.float32(math.sqrt(2.0 / math.pi))
LOG2E = np.float32(1 / math.log(2.0))
# ln 2 in two parts, the first exact in a few bits, so that x - n ln 2 loses nothing (Cody and
# Waite's reduction, as C libraries do it)
LN2_HIGH, LN2_LOW = np.float32(0.693359375), np.float32(math.log(2.0) - 0.693359375)
# exp(r) for |r| <= ln(2) / 2: its Taylor series to r^7 (error under 1e-8)
EXP_TAYLOR = tuple(np.float32(1 / math.factorial(k)) for k in range(8))


def weight_names(n_layer: int) -> tuple[list[str], list[str]]:
    # -> (matrix names [4 L], vector names [8 L + 2]): the order the compiled step reads them
    matrices = [f"h.{i}.{m}.weight" for i in range(n_layer) for m in MATRICES]
    vectors = [f"h.{i}.{v}" for i in range(n_layer) for v in VECTORS]
    return matrices, vectors + ["ln_f.weight", "ln_f.bias"]


if numba is not None:  # (the fast path asks compiled.AVAILABLE at each call)
    jit = numba.njit(fastmath=True, boundscheck=False, error_model="numpy", cache=True)

    @jit
    def layer_norm_row(x, g, b, eps, out):  # [C], [C], [C] -> out [C]
        # g (x - mean) / sqrt(var + eps) + b, as reference.model.layer_norm for one row
        n = np.float32(x.shape[0])
        mean = np.float32(0.0)
        for c in range(x.shape[0]):
            mean += x[c]
        mean /= n
        spread = np.float32(0.0)
        for c in range(x.shape[0]):
            spread += (x[c] - mean) * (x[c] - mean)
        scale = np.float32(1.0) / np.sqrt(spread / n + eps)
        for c in range(x.shape[0]):
            out[c] = g[c] * ((x[c] - mean) * scale) + b[c]

    @jit
    def vector_times_matrix(x, w, b, out):  # [C_in] @ [C_in, C_out] + [C_out] -> out [C_out]
        # out = b + sum_i x[i] w[i, :]: each weight row scaled and added, four rows at a time
        # (one load and store of out per four rows), vectorised along the outputs; w float32
        # or 16-bit (compiled.widen)
        C_in, C_out = w.shape
        for j in range(C_out):
            out[j] = b[j]
        i = 0
        while i + 4 <= C_in:
            x0, x1, x2, x3 = x[i], x[i + 1], x[i + 2], x[i + 3]
            for j in range(C_out):
                w0, w1 = compiled.widen(w[i, j]), compiled.widen(w[i + 1, j])
                w2, w3 = compiled.widen(w[i + 2, j]), compiled.widen(w[i + 3, j])
                out[j] += x0 * w0 + x1 * w1 + x2 * w2 + x3 * w3
            i += 4
        while i < C_in:
            for j in range(C_out):
                out[j] += x[i] * compiled.widen(w[i, j])
            i += 1

    @jit
    def exp_into(x, out, bits):  # [n] -> out [n] = exp(x); bits: [n] int32, scratch
        # exp(x) = 2^n exp(r) with n = round(x / ln 2), |r| <= ln(2) / 2: exp(r) by its
        # polynomial, 2^n built as a float's bits. Loops the compiler vectorises, where a call
        # to the C library's expf per value cannot be (about 2 ns each, and tanhf 12). Within
        # a few ulps of np.exp; x is kept within +-87.3 (exp(-87.3) ~ 1e-38 stands for 0).
        c0, c1, c2, c3, c4, c5, c6, c7 = EXP_TAYLOR
        for i in range(x.shape[0]):
            v = min(max(x[i], np.float32(-87.3)), np.float32(87.3))
            n = np.floor(v * LOG2E + np.float32(0.5))
            r = (v - n * LN2_HIGH) - n * LN2_LOW
            p = c4 + r * (c5 + r * (c6 + r * c7))
            out[i] = c0 + r * (c1 + r * (c2 + r * (c3 + r * p)))
            bits[i] = (np.int32(n) + np.int32(127)) << np.int32(23)  # the float 2^n
        scale = bits.view(np.float32)
        for i in range(x.shape[0]):
            out[i] *= scale[i]

    @jit
    def gelu_row(x, e, bits):  # [C] -> [C] in place; e [C], bits [C] int32: scratch
        # GPT-2's GELU, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), written as
        # x / (1 + exp(-2u)) (the same function: 0.5 (1 + tanh u) = 1 / (1 + e^-2u)), so that
        # it takes the vectorised exp
        for c in range(x.shape[0]):
            v = x[c]
            e[c] = np.float32(-2.0) * GELU_C * (v + np.float32(0.044715) * v * v * v)
        exp_into(e, e, bits)
        for c in range(x.shape[0]):
            x[c] = x[c] / (np.float32(1.0) + e[c])

    @jit
    def attend_row(qkv, keys, values, S, out, scores, bits):
        # qkv [3C] (this row's q, k, v; or its q alone), keys/values [nkv, N, hs] with this
        # row's K/V already in slot S - 1 -> out [nh hs]: per query head softmax(q k^T /
        # sqrt(hs)) v over slots 0..S-1, query head h reading key/value head h // (nh / nkv)
        # (GPT-2: nkv = nh; a Llama's grouped heads share). scores [N] float32, bits [N] int32:
        # scratch
        hs = keys.shape[2]
        nh = out.shape[0] // hs
        group = nh // keys.shape[0]
        scale = np.float32(1.0 / math.sqrt(hs))
        for h in range(nh):
            q = qkv[h * hs : (h + 1) * hs]
            kv = h // group
            top = np.float32(-np.inf)
            for s in range(S):
                dot = np.float32(0.0)
                for d in range(hs):
                    dot += q[d] * keys[kv, s, d]
                scores[s] = dot * scale
                top = max(top, scores[s])
            for s in range(S):
                scores[s] -= top
            exp_into(scores[:S], scores[:S], bits[:S])
            total = np.float32(0.0)
            for s in range(S):
                total += scores[s]
            o = out[h * hs : (h + 1) * hs]
            o[:] = 0.0
            for s in range(S):
                p = scores[s] / total
                for d in range(hs):
                    o[d] += p * values[kv, s, d]

    @jit
    def rows_times_matrix(x, w, w_t, b, chunk, out):  # [R, C_in] -> out [R, C_out]
        # x @ w + b. One row: weight rows scaled and added (w, the checkpoint's [C_in, C_out]);
        # more: the few-row kernel (w_t, its [C_out, C_in] transpose), which reads each pair of
        # weight rows once for all the rows (specdec/fast_cpu/compiled.py)
        if x.shape[0] == 1:
            vector_times_matrix(x[0], w, b, out[0])
            return
        compiled.few_rows_kernel(x, w_t, out, chunk)
        for r in range(x.shape[0]):
            for j in range(out.shape[1]):
                out[r, j] += b[j]

    @jit
    def forward_kernel(
        tokens, start, group, wte, wpe, matrices, transposed, chunks, vectors, k_cache, v_cache,
        eps, out_weight, residual, logits,
    ):  # fmt: skip
        # tokens [T] at positions start.. -> residual [T, C], the stream after the last block,
        # and logits [T, V] (or nothing when logits has 0 rows); K/V written at slots start..
        # The rows go through the blocks in groups of `group` (1: one by one; T: one pass).
        # matrices and their transposes: 4 per block (MATRICES), chunks: the few-row kernel's
        # input chunk per matrix; vectors: 8 per block (VECTORS), then ln_f's two. out_weight:
        # wte as the output layer reads it (wte itself, or its 16-bit copy, as the matrices)
        T, L, C = tokens.shape[0], k_cache.shape[0], wte.shape[1]
        nh, hs = k_cache.shape[1], k_cache.shape[3]
        scores = np.empty(k_cache.shape[2], np.float32)
        bits = np.empty(max(k_cache.shape[2], matrices[2].shape[1]), np.int32)
        e = np.empty(matrices[2].shape[1], np.float32)
        for first in range(0, T, group):
            R = min(group, T - first)
            slot = start + first  # the group's first slot
            x, h, a = (
                np.empty((R, C), np.float32),
                np.empty((R, C), np.float32),
                np.empty((R, C), np.float32),
            )
            qkv = np.empty((R, 3 * C), np.float32)
            m = np.empty((R, matrices[2].shape[1]), np.float32)
            for r in range(R):
                for c in range(C):
                    x[r, c] = wte[tokens[first + r], c] + wpe[slot + r, c]
            for layer in range(L):
                M, V = 4 * layer, 8 * layer
                for r in range(R):
                    layer_norm_row(x[r], vectors[V], vectors[V + 1], eps, h[r])
                rows_times_matrix(h, matrices[M], transposed[M], vectors[V + 2], chunks[M], qkv)
                for r in range(R):  # the rows' K/V: temporary entries at their slots
                    for head in range(nh):
                        for d in range(hs):
                            k_cache[layer, head, slot + r, d] = qkv[r, C + head * hs + d]
                            v_cache[layer, head, slot + r, d] = qkv[r, 2 * C + head * hs + d]
                for r in range(R):  # row r sees the slots up to its own
                    keys, values = k_cache[layer], v_cache[layer]
                    attend_row(qkv[r], keys, values, slot + r + 1, a[r], scores, bits)
                rows_times_matrix(
                    a, matrices[M + 1], transposed[M + 1], vectors[V + 3], chunks[M + 1], h
                )
                x += h  # x = x + attention(ln_1(x))
                for r in range(R):
                    layer_norm_row(x[r], vectors[V + 4], vectors[V + 5], eps, h[r])
                rows_times_matrix(
                    h, matrices[M + 2], transposed[M + 2], vectors[V + 6], chunks[M + 2], m
                )
                for r in range(R):
                    gelu_row(m[r], e, bits)
                rows_times_matrix(
                    m, matrices[M + 3], transposed[M + 3], vectors[V + 7], chunks[M + 3], h
                )
                x += h  # x = x + mlp(ln_2(x))
            residual[first : first + R] = x
            for r in range(R if logits.shape[0] else 0):
                layer_norm_row(x[r], vectors[8 * L], vectors[8 * L + 1], eps, h[r])
                for v in range(out_weight.shape[0]):  # logits = ln_f(x) @ wte^T
                    dot = np.float32(0.0)
                    for c in range(C):
                        dot += h[r, c] * compiled.widen(out_weight[v, c])
                    logits[first + r, v] = dot
        return residual


def read_only_view(a: np.ndarray) -> np.ndarray:
    # the same memory, flagged read-only: every array of a typed list then has one type
    view = a.view()
    view.flags.writeable = False
    return view


class CompiledWeights:
    """The model's weights as the compiled forward reads them, built again when an array under
    one of the names was replaced (the arrays themselves are shared: in-place edits show).
    `sixteen`: the matrices and the output layer as the model's 16-bit copies
    (specdec/fast_cpu/sixteen.py; none where a weight is not exactly 16-bit)."""

    def __init__(self, n_layer: int, sixteen: bool = False) -> None:
        self.matrix_names, self.vector_names = weight_names(n_layer)
        self.sixteen = sixteen
        self.arrays: tuple = ()
        # (matrices, their transposes, chunks, vectors), or None when an array is not float32
        # in C order or a matrix has an odd number of outputs (the few-row kernel pairs them)
        self.lists = None

    def current(self, model):
        # -> the typed lists for model.params as they are now, None if they can't be read
        arrays = tuple(map(model.params.__getitem__, self.matrix_names + self.vector_names))
        if len(arrays) != len(self.arrays) or not all(map(operator.is_, arrays, self.arrays)):
            n = len(self.matrix_names)
            matrices, vectors = arrays[:n], arrays[n:]
            self.lists = None
            if all(map(is_float32_c, arrays)) and all(w.shape[1] % 2 == 0 for w in matrices):
                transposed = [model.transposed_weight(name) for name in self.matrix_names]
                if self.sixteen:  # the same weights in 16 bits: both layouts, or nothing
                    matrices = [model.sixteen_bit(name) for name in self.matrix_names]
                    transposed = [model.sixteen_bit(name, True) for name in self.matrix_names]
                    if any(w is None for w in matrices + transposed):
                        self.arrays = arrays
                        return None
                self.lists = (
                    List([read_only_view(w) for w in matrices]),
                    List([read_only_view(w) for w in transposed]),
                    np.array([compiled.chunk_width(w.shape[0]) for w in matrices]),
                    List([read_only_view(v) for v in vectors]),
                )
            self.arrays = arrays
        return self.lists


def is_float32_c(a: np.ndarray) -> bool:  # what the compiled loops read (else: the NumPy pass)
    return a.dtype == np.float32 and a.flags.c_contiguous


def compiled_forward(model, weights: CompiledWeights, tokens, cache, group: int, logits=True):
    # tokens [T] -> (residual [T, C], logits [T, V] or None), their K/V temporary entries of
    # the cache after its last written slot: what model.residual(tokens, cache) and
    # model.forward_unchecked(tokens, cache) return and write, the rows in groups of `group`
    # (1: one by one). None (nothing written) where an array is not what the loops read.
    lists = weights.current(model)
    wte, wpe = model.params["wte.weight"], model.params["wpe.weight"]
    if lists is None or not all(map(is_float32_c, (wte, wpe, cache.k, cache.v))):
        return None
    out_weight = model.sixteen_bit("wte.weight") if weights.sixteen else wte
    if out_weight is None:
        return None
    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    residual = np.empty((len(tokens), wte.shape[1]), np.float32)
    scores = np.empty((len(tokens) if logits else 0, wte.shape[0]), np.float32)
    eps = np.float32(model.config.layer_norm_epsilon)
    matrices, transposed, chunks, vectors = lists
    compiled.interruptible(
        forward_kernel,
        tokens, cache.end, max(group, 1), wte, wpe, matrices, transposed, chunks, vectors,
        cache.k, cache.v, eps, out_weight, residual, scores,
    )  # fmt: skip
    cache.mark_written(len(tokens))
    return residual, (scores if logits else None)

"""The twin's fused operations: each one kernel launch of kernels.cu on a device.

No reference counterpart: these are how the twin computes what the reference computes in
several NumPy calls. Each operation is a function whose lines are its body (the plain xp
composition: what runs in NumPy mode, bit for bit the unfused twin), with `@fused(plan)`
above it naming its plan (the kernel's grid, block and arguments): kernels.py
`FusedOperation` decides which runs. A call beyond a kernel's limits (the decorator's
`fits`: more than MAX_ROWS rows for a linear, a sampling mode the kernel lacks; or a plan's
`KernelCannot`: an output it cannot write in place) runs its body, unfused, wherever it is
(a longer attention span: gpu/model.py asks `attention_fits` first); a call with zero rows
launches nothing (kernels.py `Plan.idle`).

    embed            x = wte[tokens] + wpe[positions]                               1 launch
    layer_norm_rows  LN(x)                                                          1
    fused_linear     act(LN(x) @ W + b) + residual  (LN, b, act, residual optional)  1
                     (its kernel by row bound: fused_linear_1 (_1v: float4 loads where W
                     is aligned), _8, or the 16-row one)
    cached_attention the new positions' K/V into the cache, softmax(q k^T / sqrt(hs)) V, all
                     heads merged (a sequence, a tree, a ragged batch)              1
    pick             a row's processed distribution and its inverse-CDF draw (greedy or
                     temperature), with a finiteness flag       1 (2 at a temperature
                                                  over several blocks: scan, then draw)
    decide_packed    the verification of a round, packed for its one transfer        1

The model's four are whole here (their bodies call layers.py and the reference's
attention). The last two fuse the twin's sampling and verification: their plans are here,
and the operations themselves (`pick`, `decide_packed`: their bodies) sit with the code they
fuse, in gpu/sampling.py and gpu/verification.py, which import this module (never the other
way).
"""

from __future__ import annotations

import numpy as np

from gpu.device.backend import xp
from gpu.device.graphs import current_slot
from gpu.device.kernels import (
    MAX_HS,
    MAX_ROWS,
    MAX_S,
    Counters,
    KernelCannot,
    Plan,
    fused,
    reserve_counters,
)
from gpu.device.layers import gelu, layer_norm, split_heads
from reference import model as reference_model

__all__ = [
    "attention_fits",
    "cached_attention",
    "decide_plan",
    "embed",
    "fused_linear",
    "layer_norm_rows",
    "padded_rows",
    "pick_fits",
    "pick_plan",
]

LINEAR_COLS, LINEAR_SLICES = 32, 8  # fused_linear's block: kernels.cu LIN_COLS x LIN_SLICES
LINEAR_VEC_COLS = 128  # fused_linear_1v's columns a block (kernels.cu LIN_VEC_COLS: 4 a thread)
ROW_THREADS = 256  # the one-block-per-row kernels' block (kernels.cu RED_THREADS)

i32, f32, f64 = np.int32, np.float32, np.float64
ZERO, ONE = i32(0), i32(1)


# Every array a plan hands a kernel is of the kernel's dtype and C-contiguous: the kernel
# gets a bare pointer, and a strided view or another dtype would be read as if it were one
# (silently wrong numbers; CuPy does not check). An input is made so (a copy only when it is
# not so already); an output the kernel writes in place cannot be copied (the writes would
# go to the copy), so a plan refuses one that is not so, and the call runs its body.


def contiguous(a, dtype):  # an input as the kernel reads it (a no-op when it is so already)
    return xp.ascontiguousarray(a.astype(dtype, copy=False))


def in_place(a, dtype, shape: tuple[int, ...]):
    # an output the kernel writes where it is -> a, or KernelCannot (the call runs its body)
    if a.dtype != dtype or a.shape != shape or not a.flags.c_contiguous:
        raise KernelCannot(f"an output of {a.dtype} {a.shape} is not C-contiguous {shape}")
    return a


def column_stride(a) -> int:
    # a 1-D int64 output written at row r * stride (a column of a packed array) -> stride
    if a.dtype != np.int64 or a.ndim != 1 or a.strides[0] <= 0 or a.strides[0] % 8:
        raise KernelCannot(f"an output column of {a.dtype}, strides {a.strides}")
    return a.strides[0] // 8


# Several blocks for one row, one combine (kernels.cu `last_block_done`): a large
# vocabulary's pick and verification, and a small linear's input dimension (split-K), are
# spread over blocks that each leave a partial result in a float64 array made for the call;
# the last block to finish (an int32 counter each group of blocks counts itself on) combines
# them. The last block sets its counter back to 0, so counters are made once and reused by
# every launch (a stream runs them one after another), and kept, all of them (a captured
# graph holds their pointers): kernels.py `reserve_counters`, made before any capture.
FILL_BLOCKS = 132  # an H200's SMs: a linear's input dimension is split until its blocks fill them
SPLIT_INPUTS = 4 * LINEAR_SLICES  # inputs of a linear's part at least (one unrolled step a slice)
PART_IDS = 4 * ROW_THREADS  # ids of a pick's or a verification's block (4 a thread)
MAX_PARTS = ROW_THREADS  # blocks one combine takes: one partial per thread of the last block
counter_arrays = Counters.arrays  # every counter array made: none is ever freed
counters = reserve_counters  # (n) -> int32 [>= n], all 0 between launches


# A kernel's partial results live within its call (written by its blocks, read by the last
# one, or by the call's second launch), and a placeholder for an absent argument is never
# read: so one array per (size, dtype) serves every launch, as the counters do -- launches
# run one after another on a stream, a graph's replays among them -- and a plan allocates
# only the outputs it returns (an allocation is microseconds of host time on a device).
scratch_arrays: dict[tuple, object] = {}


def scratch(n: int, dtype):
    # a [n] array of dtype (a NumPy type) for a kernel's partials, or a placeholder: made once
    # (plans run where the kernels do: one array module in a process)
    try:
        return scratch_arrays[n, dtype]
    except KeyError:
        return scratch_arrays.setdefault((n, dtype), xp.empty(n, dtype=dtype))


def aligned16(a) -> bool:
    # the array's first byte is on a 16-byte boundary: a kernel may read it 4 floats a load
    address = a.data.ptr if hasattr(a.data, "ptr") else a.ctypes.data  # CuPy | NumPy
    return address % 16 == 0


def parts(ids: int, per: int) -> int:
    # blocks for `ids` ids, `per` a block: 1 .. MAX_PARTS
    return max(1, min(MAX_PARTS, -(-ids // per)))


def linear_parts(C_in: int, N: int, per_block: int = LINEAR_COLS) -> int:
    # K, the parts of the input dimension (kernels.cu part_of: ceil(C_in / K) inputs each):
    # at least a block for every SM (two fit one at once: one wave), every part at least
    # SPLIT_INPUTS inputs; per_block: the kernel's columns a block (LINEAR_COLS, or
    # LINEAR_VEC_COLS for fused_linear_1v)
    columns = -(-N // per_block)
    return max(1, min(-(-FILL_BLOCKS // columns), C_in // SPLIT_INPUTS))


# ---------------------------------------------------------------- embed


def embed_plan(wte, wpe, tokens, positions) -> Plan:
    tokens = contiguous(tokens, np.int64)
    R, C = tokens.shape[0], wte.shape[1]
    by_array = not isinstance(positions, slice)
    ids = contiguous(positions, np.int64) if by_array else tokens  # (unread when a slice)
    start = 0 if by_array else positions.start
    # in a captured graph's step the first position is read from the device (graphs.py)
    slot = None if by_array else current_slot()
    start_at = tokens if slot is None else contiguous(slot, np.int64)  # (unread when None)
    x = xp.empty((R, C), dtype=np.float32)
    wte, wpe = contiguous(wte, np.float32), contiguous(wpe, np.float32)
    args = (
        tokens, ids, i32(by_array), i32(start), start_at, i32(slot is not None), wte, wpe,
        i32(C), x,
    )  # fmt: skip
    return Plan("embed_rows", (R,), (128,), args, x)


def embed_fits(wte, wpe, tokens, positions) -> bool:
    return tokens.ndim == 1  # a batch's [B, T]: the body


@fused(embed_plan, kernel="embed_rows", fits=embed_fits)
def embed(wte, wpe, tokens, positions):
    # tokens [R] ids (device), positions a slice or ids [R] -> x [R, C]: token + position
    # embeddings
    return wte[tokens] + wpe[positions]


# ---------------------------------------------------------------- layer_norm_rows


def layer_norm_plan(x, g, b, eps: float) -> Plan:
    x, g, b = (contiguous(a, np.float32) for a in (x, g, b))
    R, C = x.shape
    out = xp.empty((R, C), dtype=np.float32)
    return Plan("layer_norm_rows", (R,), (128,), (x, i32(C), g, b, f32(eps), out), out)


def rows_fit(x, *args, **kwargs) -> bool:
    return x.ndim == 2  # rows [R, C]: anything else runs the body


@fused(layer_norm_plan, fits=rows_fit)
def layer_norm_rows(x, g, b, eps: float):  # [R, C] -> [R, C]
    return layer_norm(x, g, b, eps)


# ---------------------------------------------------------------- fused_linear


# A plan is host time before every eager launch (linear_plan took 6.3 µs with NumPy arrays,
# most of it Python: the scalars made one by one, the parts worked out, the scratch looked up;
# 3.4 µs now: docs/gpu.md, "Host cost per fused call"). What follows from the call's shapes
# and flags alone is made once per shape and kept (`by_shape`): the kernel, grid and block,
# the scalar arguments, the scratch array and how many counters. What depends on the call's
# own arrays -- each one's dtype and contiguity (a copy where it is not the kernel's), the
# new output -- is done at every call, as before, and so is the counters' look-up (cheap,
# and never to be kept: graphs.py and the tests make a new array where none was made before
# a capture).
by_shape: dict[tuple, tuple] = {}


def linear_fixed(R: int, C_in: int, N: int, eps, bias: bool, act, resid: bool, ldw: int,
                 vec4: bool) -> tuple:  # fmt: skip
    # (kernel, grid, block, scalars before g / after it / after bias / after resid, split_sum,
    # counters wanted, ldw) of a linear of these shapes and flags; eps None: no LayerNorm;
    # vec4: W may be read four floats a load (one row only: fused_linear_1v)
    vec4 = vec4 and R == 1
    per_block = LINEAR_VEC_COLS if vec4 else LINEAR_COLS
    columns, K = -(-N // per_block), linear_parts(C_in, N, per_block)
    split_sum = scratch(K * R * N if K > 1 else 1, np.float64)  # [K, R, N]
    # the kernel of the fewest rows that holds R: fewer registers, more blocks an SM at once
    name = "fused_linear_1" if R == 1 else "fused_linear_8" if R <= 8 else "fused_linear"
    return (
        name + "v" if vec4 else name, (columns, K), (LINEAR_COLS * LINEAR_SLICES,),
        (i32(R), i32(C_in), i32(N)), (f32(eps or 0.0), i32(eps is not None)),
        (i32(bias), i32(act == "gelu")), (i32(resid),), split_sum, columns, i32(ldw),
    )  # fmt: skip


def linear_plan(x, w, bias=None, ln=None, act=None, resid=None, w_rows=None) -> Plan:
    x = contiguous(x, np.float32)
    # the kernel reads W row-major [C_in, ldw]: w_rows when given (an output layer's copy,
    # made once, its rows padded to a multiple of 4 floats), else w itself, copied here only
    # if it is a view (wte.T) or not float32. N, the columns written out, is w's: the logical
    # width, never the padded copy's
    R, C_in = x.shape
    N = w.shape[1]
    w = contiguous(w if w_rows is None else w_rows, np.float32)
    if w.shape[0] != C_in or w.shape[1] < N:
        raise ValueError(f"fused_linear: rows {w.shape} cannot hold a [{C_in}, {N}] weight")
    ldw = w.shape[1]
    eps = None if ln is None else float(ln[2])
    vec4 = R == 1 and ldw % 4 == 0 and aligned16(w)
    key = ("linear", R, C_in, N, eps, bias is not None, act, resid is not None, ldw, vec4)
    fixed = by_shape.get(key)
    if fixed is None:
        fixed = by_shape.setdefault(key, linear_fixed(R, C_in, N, *key[4:]))
    name, grid, block, sizes, norm, flags, with_resid, split_sum, groups, ldw = fixed
    out = xp.empty((R, N), dtype=np.float32)
    g, b = (x, x) if ln is None else (contiguous(ln[0], np.float32), contiguous(ln[1], np.float32))
    bias = x if bias is None else contiguous(bias, np.float32)  # (unread without it)
    resid = x if resid is None else contiguous(resid, np.float32)
    args = (
        x, *sizes, g, b, *norm, w, bias, flags[0], flags[1], resid, *with_resid, out, split_sum,
        counters(groups), ldw,
    )  # fmt: skip
    return Plan(name, grid, block, args, out, rows=R)  # grid: columns x parts


def padded_rows(w):
    # a weight [C_in, N] (a view: wte.T, lm_head.T) -> its row-major copy [C_in, ceil4(N)],
    # zeros beyond N: every row starts on a 16-byte boundary, so a one-row linear reads it four
    # floats a load (fused_linear_1v; GPT-2's 50,257 columns would not allow it unpadded).
    # Pass it as w_rows, with the view as w: the kernel writes out N columns, never the padding
    C_in, N = w.shape
    rows = xp.zeros((C_in, -(-N // 4) * 4), dtype=np.float32)
    rows[:, :N] = w
    return rows


def linear_fits(x, *args, **kwargs) -> bool:
    return x.ndim == 2 and x.shape[0] <= MAX_ROWS  # the kernel's rows, at most


@fused(linear_plan, fits=linear_fits)
def fused_linear(x, w, bias=None, *, ln=None, act=None, resid=None, w_rows=None):
    """x [R, C_in] -> act(LN(x) @ w + bias) + resid, [R, N], in one launch for R <= MAX_ROWS.

    ln = (g, b, eps) or None; act = "gelu" or None; resid [R, N] or None. w may be a view
    (the tied output layer's wte.T); w_rows is then its row-major copy [C_in, N], which the
    kernel reads (this body, the plain way, keeps computing with w, so NumPy mode stays bit
    for bit)."""
    h = x if ln is None else layer_norm(x, *ln)
    y = h @ w
    if bias is not None:
        y = y + bias
    if act == "gelu":
        y = gelu(y)
    return y if resid is None else resid + y


# ---------------------------------------------------------------- cached_attention


def attention_fits(at, n_embd: int, n_head: int) -> bool:
    # the kernel's limits: the span, the head size; a mask only as a sequence's or a tree's
    # [T, S] (a batch's rows are masked by the kernel's own rule, from their pointers)
    T = at.shape[-1]
    mask_ok = at.mask is None or len(at.shape) == 2 or at.mask.shape == (T, at.stop)
    return at.stop <= MAX_S and n_embd // n_head <= MAX_HS and mask_ok


# Flash-decoding: a step's attention is nh blocks a row, a few % of an H200's SMs, each walking
# the whole span; its positions are split over P blocks a head (kernels.cu cached_attention)
# with one combine. P is fixed by the plan from the most positions the call can read (the
# cache's capacity: in a captured graph the span is known only at each replay), each part
# taking its share of the launch's span.
ATTENTION_POSITIONS = 128  # positions of a part, at most (at the largest span the plan allows)


def span_parts(span: int) -> int:
    # P, the blocks a head's positions are split over: 1 .. MAX_PARTS
    return parts(span, ATTENTION_POSITIONS)


def attention_fixed(
    C: int, n_head: int, B: int, T: int, cached: bool, n_layer: int, capacity: int, span
) -> tuple:
    # (scalars, P, partials, counters wanted) of an attention of these shapes: what the call's
    # arrays and positions do not change (span: the positions read, without a cache; else None)
    P = span_parts(capacity if cached else span)
    partial = scratch(B * T * n_head * P * (C // n_head + 2), np.float32)  # [g, P, 2 + hs]
    scalars = (i32(T), i32(C), i32(n_head), i32(n_layer), i32(capacity), i32(cached))
    return scalars, P, partial, B * T * n_head


def attention_plan(model, qkv, layer: int, cache, at) -> Plan:
    qkv = contiguous(qkv, np.float32)
    C, n_head = qkv.shape[1] // 3, model.config.n_head
    B, T = (1, at.shape[0]) if len(at.shape) == 1 else at.shape
    out = xp.empty((B * T, C), dtype=np.float32)
    k_cache, v_cache = (qkv, qkv) if cache is None else (cache.k, cache.v)
    k_cache, v_cache = (in_place(a, np.float32, a.shape) for a in (k_cache, v_cache))  # written
    n_layer = 1 if cache is None else cache.k.shape[-4]
    capacity = 1 if cache is None else cache.k.shape[-2]
    span = at.stop if cache is None else None  # P follows the capacity, or the span without it
    key = ("attention", C, n_head, B, T, cache is not None, n_layer, capacity, span)
    key += (ATTENTION_POSITIONS,)  # (the tests change it between calls)
    fixed = by_shape.get(key)
    if fixed is None:
        fixed = by_shape.setdefault(key, attention_fixed(*key[1:-1]))
    (T_, C_, heads, layers, slots, cached), P, partial, groups = fixed
    batch = len(at.shape) == 2
    rows = cache.rows_on_device(at.start, at.n_new) if batch else scratch(1, np.int64)
    rows = contiguous(rows, np.int64)
    mask = at.mask if at.mask is not None and not batch else None
    bool_mask = scratch(1, np.bool_) if mask is None else contiguous(mask, bool)
    # in a captured graph's step (a sequence's) the first slot and the span are read from the
    # device at each replay (graphs.py), the arguments start and S then unread
    slot = None if batch or mask is not None else current_slot()
    start_at = rows if slot is None else contiguous(slot, np.int64)  # (unread when None)
    args = (
        qkv, T_, C_, heads, i32(at.stop), k_cache, v_cache, i32(layer), layers, slots, cached,
        i32(0 if batch else int(at.start[0])), start_at, i32(slot is not None), rows, i32(batch),
        bool_mask, i32(mask is not None), out, partial, counters(groups),
    )  # fmt: skip
    return Plan("cached_attention", (n_head * P, T, B), (128,), args, out, span=at.stop)


def attention_checked(model, qkv, layer: int, cache, at) -> bool:
    # the cache's own checks, before the kernel or the body writes anything (they raise on
    # bad input); every call fits then (gpu/model.py asked `attention_fits` already)
    if cache is not None and len(at.shape) == 1:
        C = qkv.shape[-1] // 3
        k = split_heads(qkv[..., C : 2 * C], model.config.n_head)  # views: what the check reads
        cache.check_slots(layer, int(at.start[0]), k, k)
    return True


@fused(attention_plan, fits=attention_checked)
def cached_attention(model, qkv, layer: int, cache, at):
    """qkv [R, 3C] of the new positions `at` places -> [R, C], heads merged: the K/V write
    and the attention of every head in one launch, for a sequence's, a tree's or a ragged
    batch's pass. This body: the reference's own steps (split into heads, the temporary
    write, attention over the history and the new positions, merge), with the twin's xp."""
    return reference_model.GPT.multi_head_attention(model, qkv, layer, cache, at)


# ---------------------------------------------------------------- pick


def pick_fits(params) -> bool:
    # the kernel draws from greedy and plain-temperature distributions (top-k / top-p need
    # a sort: the xp path)
    return params.greedy or (params.top_k is None and params.top_p >= 1.0)


def pick_fixed(R: int, V: int, temperature, u_kind: str, outputs: tuple, stride: int) -> tuple:
    # (grid, block, scalars, the stages' (scan, draw) flags, partials, counters wanted) of a
    # pick of these shapes: what the call's arrays do not change (temperature None: greedy; u_kind:
    # "none" | "float" | "array"; outputs: whether probs, tokens, finite are given)
    greedy = temperature is None
    G = parts(V, PART_IDS)
    with_probs, with_tokens, with_finite = outputs
    scalars = (
        i32(V), i32(greedy), f64(1.0 if greedy else 1.0 / temperature),
        i32(u_kind == "array"), i32(with_probs), i32(with_tokens), i32(with_finite), i32(stride),
    )  # fmt: skip
    # the kernel's two stages (kernels.cu pick_rows): greedy, or a row of one block, in one
    # launch; at a temperature over G > 1 blocks the scan, then the draw (when p or a token
    # is wanted), each spread over the row's blocks
    split, drawn = not greedy and G > 1, with_probs or with_tokens
    stages = ((ONE, ZERO), (ZERO, ONE)) if split and drawn else ((ONE, ZERO),) if split else None
    partial = scratch(R * G * 4 + R * 3, np.float64)  # [R, G, 4], then stats [R, 3]
    return (G, R), (ROW_THREADS,), scalars, stages or ((ONE, ONE),), partial, R


def pick_plan(logits, params, u=None, probs=None, tokens=None, finite=None) -> Plan:
    # the kernel of gpu.sampling.pick (the operation and its body are there)
    logits = contiguous(logits, np.float32)
    R, V = logits.shape
    u_array = None if u is None or isinstance(u, float) else contiguous(u, np.float64)
    probs = None if probs is None else in_place(probs, np.float32, (R, V))
    # tokens and finite may be columns of one packed int64 array [R, 2]: row r at r * stride
    # (one stride for both; a single row's is never used)
    strides = {column_stride(a) for a in (tokens, finite) if a is not None and a.shape[0] > 1}
    if len(strides) > 1:
        raise KernelCannot(f"tokens and finite have different row strides {strides}")
    stride = strides.pop() if strides else 1
    for a in (tokens, finite):
        if a is not None and (a.dtype != np.int64 or a.shape != (R,)):
            raise KernelCannot(f"an output of {a.dtype} {a.shape}, not int64 ({R},)")
    u_kind = "none" if u is None else "float" if u_array is None else "array"
    outputs = (probs is not None, tokens is not None, finite is not None)
    temperature = None if params.greedy else float(params.temperature)
    key = ("pick", R, V, temperature, u_kind, outputs, stride)
    fixed = by_shape.get(key)
    if fixed is None:
        fixed = by_shape.setdefault(key, pick_fixed(*key[1:]))
    grid, block, scalars, stages, partial, groups = fixed
    tickets = counters(groups)
    V_, greedy, inverse_t, has_u, has_probs, has_tokens, has_finite, row_stride = scalars
    some_int = tokens if tokens is not None else finite
    dummy_int = scratch(1, np.int64) if some_int is None else some_int
    args = (
        logits, V_, greedy, inverse_t, scratch(1, np.float64) if u_array is None else u_array,
        f64(u if u_kind == "float" else 0.0), has_u, logits if probs is None else probs,
        has_probs, dummy_int if tokens is None else tokens, has_tokens,
        dummy_int if finite is None else finite, has_finite, row_stride,
    )  # fmt: skip
    then = None
    for scan, draw in reversed(stages):  # the last stage first: each links the next
        then = Plan(
            "pick_rows", grid, block, (*args, scan, draw, partial, tickets), probs, then=then
        )
    return then


# ---------------------------------------------------------------- decide_packed


def decide_plan(p, q, tokens, u) -> Plan:
    # the kernel of gpu.verification.decide_packed (the operation and its body are there)
    k, V = q.shape
    out = xp.empty(k + 3, dtype=np.int64)
    p, q = contiguous(p, np.float32), contiguous(q, np.float32)
    args = (
        p, q, contiguous(tokens, np.int64), contiguous(u, np.float64), i32(k), i32(V),
        i32(aligned16(p) and aligned16(q)), out,
    )  # fmt: skip
    G = parts((2 * k + 1) * V, PART_IDS)  # the finiteness scan sets it: all of p and q
    args += (scratch(G * 3, np.float64), counters(1))  # partials [G, 3]
    return Plan("decide_packed", (G,), (ROW_THREADS,), args, out)

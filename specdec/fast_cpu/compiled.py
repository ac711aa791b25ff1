"""The few-row product and LayerNorm as compiled loops (numba, optional).

A verification pass multiplies k+1 <= 16 rows by every weight matrix of the target. The weights
(43 MB for the bundled target) do not fit a laptop's last-level cache, so the pass's floor is
the time to stream them once from memory, and the k+1 rows' FLOPs could hide behind that
stream. BLAS does not do that with a handful of rows: it first copies ("packs") the weight
matrix, streaming it from memory, and only then computes, from the copy, so a pass pays the
stream and the arithmetic one after the other (OpenBLAS's Haswell kernels: a whole 8-row pass
about 1.9 one-row steps; docs/fast-path.md).

`few_rows_product` computes y = x @ w with w stored transposed, [C_out, C_in], reading each
pair of weight rows from memory once and using it for every row of x while it sits in the L1
cache: four rows of x times two weight rows make eight running sums, which the compiler keeps
in vector registers along C_in. While a pair computes it asks the CPU to start loading the
pair `AHEAD` pairs further on (`prefetch`), in pieces spread over the pair's arithmetic, so
that memory works while the arithmetic runs.

The weights may also come in 16 bits (float16's bits as int16, bfloat16's as uint16;
specdec/fast_cpu/sixteen.py): every weight the kernels read goes through `widen`, which
leaves a float32 as it is and turns a 16-bit one into the float32 it stands for, so the
arithmetic and the order of the sums are the same and only the bytes streamed halve.

`layer_norm_rows` is the plain LayerNorm's written-out sums in one compiled call instead of
eight NumPy calls: most of a tiny model's one-row step is such calls.

numba compiles each at its first call (about a second; cached on disk after that) for the CPU it
runs on: AVX2 on a laptop, AVX-512 where there is one. `NUMBA_CPU_NAME=haswell
NUMBA_CPU_FEATURES=+avx2,+fma` makes it compile for AVX2 anywhere, as `OPENBLAS_CORETYPE=Haswell`
does for OpenBLAS; the CPU name alone is not enough: numba then still hands LLVM the host's
features, AVX-512 included (`compiled_for()` names the instruction set it got). Without numba
(`pip install specdec-lab[fast]` brings it) `AVAILABLE` is False and the fast path never
offers the compiled configuration; with it, the plan (specdec/fast_cpu/plan.py) still uses it
only for the pass sizes where whole passes measured faster.
"""

from __future__ import annotations

import numpy as np

try:
    import numba
    from llvmlite import binding, ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic
except ImportError:  # the `fast` extra is not installed: the fast path runs without it
    numba = None

AVAILABLE = numba is not None
COLUMNS_PER_BLOCK = 2  # weight rows (output features) per block
AHEAD = 6  # blocks of weight rows between the one computed and the one prefetched
CHUNK = 384  # inputs per chunk at most (see few_rows_kernel)
LINE = 16  # float32 values per 64-byte cache line
# (4 x 2 sums and a prefetch distance of 6 pairs, 18 KB at C_in = 384: the fastest of the
# shapes and distances measured inside whole passes, docs/fast-path.md)


def compiled_for() -> str:
    # the CPU and vector instructions the kernels are compiled for ("haswell, AVX2"):
    # NUMBA_CPU_NAME and NUMBA_CPU_FEATURES, each else the host's (as numba decides)
    if not AVAILABLE:
        return "numba not installed"
    name = numba.config.CPU_NAME or binding.get_host_cpu_name()
    features = numba.config.CPU_FEATURES
    if features is None:
        features = binding.get_host_cpu_features().flatten()
    return f"{name}, {vector_instructions(features)}"


def vector_instructions(features: str) -> str:
    # LLVM's feature string ("+avx2,+fma,-avx512f,...") -> the widest vector set it enables
    enabled = {f[1:] for f in features.split(",") if f.startswith("+")}
    for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX")):
        if flag in enabled:
            return name
    return "SSE"


if AVAILABLE:

    @intrinsic
    def prefetch(typingctx, matrix, row, column):
        """Ask the CPU to load the cache line holding matrix[row, column] (a C-contiguous 2-D
        array; no wait, no fault, nothing returned)."""

        def codegen(context, builder, signature, args):
            kind_of_array = signature.args[0]
            array = context.make_array(kind_of_array)(context, builder, args[0])
            element = cgutils.get_item_pointer(
                context, builder, kind_of_array, array, [args[1], args[2]]
            )
            address = builder.bitcast(element, ir.IntType(8).as_pointer())
            i32 = ir.IntType(32)
            kind = ir.FunctionType(ir.VoidType(), [address.type, i32, i32, i32])
            llvm_prefetch = cgutils.get_or_insert_function(builder.module, kind, "llvm.prefetch.p0")
            # read (0), keep in the L2 cache (locality 2 of 0..3), data cache (1)
            builder.call(llvm_prefetch, [address, i32(0), i32(2), i32(1)])
            return context.get_dummy_value()

        return types.void(matrix, row, column), codegen

    @intrinsic
    def widen(typingctx, value):
        """A weight as the float32 it stands for: a float32 as it is; int16, the bits of a
        float16 (numba has no float16 on the CPU), converted exactly (vcvtph2ps, 8 values an
        instruction under AVX2, where the CPU has F16C); uint16, the top half of a float32
        (bfloat16), shifted into place. Each weight read of the kernels goes through it, so
        one source serves the 32-bit weights and the 16-bit ones (specialised per dtype;
        float32's adds nothing)."""
        f32 = ir.FloatType()

        def as_is(context, builder, signature, args):
            return args[0]

        def from_half(context, builder, signature, args):
            return builder.fpext(builder.bitcast(args[0], ir.HalfType()), f32)

        def from_bfloat(context, builder, signature, args):
            i32 = ir.IntType(32)
            return builder.bitcast(builder.shl(builder.zext(args[0], i32), i32(16)), f32)

        codegens = {types.float32: as_is, types.int16: from_half, types.uint16: from_bfloat}
        if value not in codegens:
            return None  # numba reports the type it cannot widen
        return types.float32(value), codegens[value]

    # (the three blocks below are inlined into few_rows_kernel: one compiled loop, no calls)
    @numba.njit(fastmath=True, boundscheck=False, error_model="numpy", inline="always")
    def keep(out, t, j, s0, s1, first):  # out[t, j:j+2] = (s0, s1), or += after the first chunk
        if first:
            out[t, j], out[t, j + 1] = s0, s1
        else:
            out[t, j] += s0
            out[t, j + 1] += s1

    @numba.njit(fastmath=True, boundscheck=False, error_model="numpy", inline="always")
    def four_rows(x, w_t, out, t, j, start, stop, first):
        # rows t..t+3 x weight rows j, j+1 over inputs start..stop: eight running sums
        s00 = s01 = s10 = s11 = s20 = s21 = s30 = s31 = np.float32(0.0)
        for i in range(start, stop):
            w0, w1 = widen(w_t[j, i]), widen(w_t[j + 1, i])
            x0, x1, x2, x3 = x[t, i], x[t + 1, i], x[t + 2, i], x[t + 3, i]
            s00 += x0 * w0
            s01 += x0 * w1
            s10 += x1 * w0
            s11 += x1 * w1
            s20 += x2 * w0
            s21 += x2 * w1
            s30 += x3 * w0
            s31 += x3 * w1
        keep(out, t, j, s00, s01, first)
        keep(out, t + 1, j, s10, s11, first)
        keep(out, t + 2, j, s20, s21, first)
        keep(out, t + 3, j, s30, s31, first)

    @numba.njit(fastmath=True, boundscheck=False, error_model="numpy", inline="always")
    def three_rows(x, w_t, out, t, j, start, stop, first):  # rows t..t+2: six sums
        s00 = s01 = s10 = s11 = s20 = s21 = np.float32(0.0)
        for i in range(start, stop):
            w0, w1 = widen(w_t[j, i]), widen(w_t[j + 1, i])
            x0, x1, x2 = x[t, i], x[t + 1, i], x[t + 2, i]
            s00 += x0 * w0
            s01 += x0 * w1
            s10 += x1 * w0
            s11 += x1 * w1
            s20 += x2 * w0
            s21 += x2 * w1
        keep(out, t, j, s00, s01, first)
        keep(out, t + 1, j, s10, s11, first)
        keep(out, t + 2, j, s20, s21, first)

    @numba.njit(fastmath=True, boundscheck=False, error_model="numpy", inline="always")
    def two_rows(x, w_t, out, t, j, start, stop, first):  # rows t, t+1: four sums
        s00 = s01 = s10 = s11 = np.float32(0.0)
        for i in range(start, stop):
            w0, w1 = widen(w_t[j, i]), widen(w_t[j + 1, i])
            x0, x1 = x[t, i], x[t + 1, i]
            s00 += x0 * w0
            s01 += x0 * w1
            s10 += x1 * w0
            s11 += x1 * w1
        keep(out, t, j, s00, s01, first)
        keep(out, t + 1, j, s10, s11, first)

    @numba.njit(fastmath=True, boundscheck=False, error_model="numpy", inline="always")
    def one_row(x, w_t, out, t, j, start, stop, first):  # row t: two sums
        s0 = s1 = np.float32(0.0)
        for i in range(start, stop):
            s0 += x[t, i] * widen(w_t[j, i])
            s1 += x[t, i] * widen(w_t[j + 1, i])
        keep(out, t, j, s0, s1, first)

    @numba.njit(fastmath=True, boundscheck=False, error_model="numpy", inline="always")
    def rows_block(x, w_t, out, t, j, start, stop, first, rows):  # rows t..t+rows-1, 1-4
        if rows == 4:
            four_rows(x, w_t, out, t, j, start, stop, first)
        elif rows == 3:
            three_rows(x, w_t, out, t, j, start, stop, first)
        elif rows == 2:
            two_rows(x, w_t, out, t, j, start, stop, first)
        else:
            one_row(x, w_t, out, t, j, start, stop, first)

    @numba.njit(fastmath=True, boundscheck=False, error_model="numpy", inline="always")
    def prefetch_pair(w_t, j, start, stop):  # weight rows j, j+1 over inputs start..stop
        if j < w_t.shape[0]:
            for e in range(start, stop, LINE * 4 // w_t.itemsize):  # one call per cache line
                prefetch(w_t, j, e)
                prefetch(w_t, j + 1, e)

    @numba.njit(fastmath=True, boundscheck=False, error_model="numpy", cache=True)
    def few_rows_kernel(x, w_t, out, chunk):  # [T, C_in], [C_out, C_in] -> out [T, C_out]
        # C_out a multiple of 2 (fits() sees to it). out[t, j] = sum_i x[t, i] w_t[j, i]: for
        # each pair of weight rows, the rows of x in blocks of four, the last block holding
        # the one to three rows left (T = 5 computes 4 + 1 rows, not 8: past four rows a
        # pass is bound by this arithmetic more than by memory). Over C_in in chunks of
        # `chunk` inputs, so that the x rows of a chunk stay in L1 beside the two weight rows
        # being read (at C_in = 1536 four whole x rows alone fill it).
        # While a pair computes, the pair AHEAD pairs on is prefetched in pieces, one before
        # each block of rows (a single block: in two halves of its inputs): the CPU holds a
        # few dozen misses in flight, and a burst of all 48 lines of a pair (C_in = 384) at
        # once stalls the arithmetic until most of them have arrived, so memory and
        # arithmetic took turns instead of overlapping (13-18 % of a 2-9-row product)
        T, C_in = x.shape
        C_out = w_t.shape[0]
        blocks = (T + 3) // 4
        for i0 in range(0, C_in, chunk):
            # unsigned bounds: numba then knows every index is >= 0 and drops the check for
            # negative ones that would keep the compiler from vectorizing the loop
            start, stop = np.uint64(i0), np.uint64(min(C_in, i0 + chunk))
            first = i0 == 0
            lines = (stop - start + np.uint64(LINE - 1)) // np.uint64(LINE)
            for j in range(0, C_out, 2):
                ahead = j + 2 * AHEAD  # the pair whose chunk is loaded while this one computes
                if T == 1:  # one row: so little arithmetic that there is nothing to overlap
                    prefetch_pair(w_t, ahead, start, stop)
                    one_row(x, w_t, out, 0, j, start, stop, first)
                elif blocks == 1:  # two to four rows: one block, its inputs in two halves
                    mid = start + np.uint64(LINE) * (lines // np.uint64(2))
                    prefetch_pair(w_t, ahead, start, mid)
                    rows_block(x, w_t, out, 0, j, start, mid, first, T)
                    prefetch_pair(w_t, ahead, mid, stop)
                    rows_block(x, w_t, out, 0, j, mid, stop, False, T)
                else:
                    for b in range(blocks):  # block b prefetches lines [b/blocks, (b+1)/blocks)
                        near = start + np.uint64(LINE) * (lines * np.uint64(b) // np.uint64(blocks))
                        far = start + np.uint64(LINE) * (
                            lines * np.uint64(b + 1) // np.uint64(blocks)
                        )
                        prefetch_pair(w_t, ahead, near, min(stop, far))
                        t = 4 * b
                        rows_block(x, w_t, out, t, j, start, stop, first, min(4, T - t))
        return out

    @numba.njit(fastmath=True, boundscheck=False, error_model="numpy", cache=True)
    def layer_norm_kernel(x, g, b, eps, out):  # [R, C], [C], [C], float32 -> out [R, C]
        # g (x - mean) / sqrt(var + eps) + b per row, as reference.model.layer_norm: one call
        # instead of the eight NumPy calls of the written-out sums (most of a tiny model's step)
        R, C = x.shape
        n = np.float32(C)
        for r in range(R):
            total = np.float32(0.0)
            for c in range(C):
                total += x[r, c]
            mean = total / n
            spread = np.float32(0.0)
            for c in range(C):
                d = x[r, c] - mean
                spread += d * d
            scale = np.float32(1.0) / np.sqrt(spread / n + eps)
            for c in range(C):
                out[r, c] = g[c] * ((x[r, c] - mean) * scale) + b[c]
        return out


def interruptible(kernel, *args):
    # kernel(*args), with a Ctrl-C that arrived while the compiled code ran raised as the
    # KeyboardInterrupt it is: numba returns from the call with Python's exception set and
    # Python reports a SystemError instead, which no `except KeyboardInterrupt` catches (the
    # bench saves its finished cells on one)
    try:
        return kernel(*args)
    except SystemError as error:
        if isinstance(error.__cause__, KeyboardInterrupt):
            raise error.__cause__ from None
        raise


def layer_norm_rows(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    # [R, C] -> [R, C]: reference.model.layer_norm to float32 rounding, one compiled call
    x = np.ascontiguousarray(x, dtype=np.float32)
    return interruptible(layer_norm_kernel, x, g, b, np.float32(eps), np.empty_like(x))


def chunk_width(C_in: int) -> int:
    # inputs per chunk: all of them up to CHUNK, else the largest divisor of C_in up to CHUNK
    # that is a whole number of cache lines (C_in itself when there is none)
    if C_in <= CHUNK:
        return C_in
    return next((d for d in range(CHUNK, 15, -16) if C_in % d == 0), C_in)


def fits(C_out: int) -> bool:
    # the kernel pairs the output features: an odd C_out runs BLAS's product instead
    return AVAILABLE and C_out % COLUMNS_PER_BLOCK == 0


def few_rows_product(x: np.ndarray, w_t: np.ndarray, b: np.ndarray) -> np.ndarray:
    # [T, C_in], w_t = w.T [C_out, C_in] (C-contiguous float32, or 16-bit: `widen`),
    # b [C_out] -> [T, C_out]: x @ w + b to float32 rounding (the sums run in another order
    # than BLAS's)
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = interruptible(
        few_rows_kernel,
        x,
        w_t,
        np.empty((x.shape[0], w_t.shape[0]), np.float32),
        chunk_width(x.shape[1]),
    )
    out += b
    return out

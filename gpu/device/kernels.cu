// The twin's fused kernels: one launch where the xp composition of gpu/model.py takes tens.
//
// At the bundled pair's size a GPU step is priced by kernel launches, not FLOPs (docs/gpu.md),
// so each kernel below does the work of a whole stretch of a block in one launch. Each has a
// NumPy body in gpu/device/fused.py that computes the same thing the plain way: NumPy mode runs the
// bodies, the stand-in counts each call as one launch, and tests/twin/test_fused_kernels.py
// runs THIS source on the CPU (tests/twin/cuda_emulator.py: one fiber per CUDA thread)
// and compares it with the bodies. The device compiles it with NVRTC (cupy.RawModule).
//
// Layouts: row-major, float32 activations and weights, int64 token ids; rows R <= MAX_ROWS.
// Reductions, argmax and prefix sums are trees of full-warp shuffles (__shfl_*_sync) with one
// combine of the warps' partials through shared memory: no thread loops over blockDim alone
// (tests/twin/test_kernel_shape.py holds it). Blocks are whole warps. Where one row's work
// is spread over several blocks (a large vocabulary's pick and verification, a linear's input
// dimension, an attention head's positions), each block leaves its partial result in global
// memory and the group's LAST block to finish (an atomic count, `last_block_done`) combines
// them, by block index, so the result does not depend on which block finishes last. The
// emulator (which steps a warp's 32 fibers together through each shuffle, and has the
// atomic) runs every kernel exactly as written, its blocks in either order.

#ifndef MAX_ROWS
#define MAX_ROWS 16  // rows one fused_linear call takes (gpu/device/kernels.py MAX_ROWS)
#endif
#ifndef MAX_S
#define MAX_S 1024  // attention span a cached_attention call takes (the model's n_ctx)
#endif
#ifndef MAX_HS
#define MAX_HS 128  // head size
#endif
#ifndef SPECDEC_NAN
#define SPECDEC_NAN() __int_as_float(0x7fffffff)
#endif
#ifndef SPECDEC_NEG_INF
#define SPECDEC_NEG_INF() __int_as_float(0xff800000)
#endif

#define LIN_COLS 32    // fused_linear: output columns per block (one warp reads a W row segment)
#define LIN_SLICES 8   // ... and slices of the input dimension per column, summed at the end
#define LIN_VEC_COLS 128  // fused_linear_1v: output columns per block (4 a thread, float4 loads)
#define RED_THREADS 256  // threads of the one-block-per-row kernels
#define ATT_WARPS 4      // cached_attention's block: 4 warps (gpu/device/fused.py: 128 threads)
#define WARP 32          // threads of a warp (warpSize, a constant here so loops unroll)
#define FULL_MASK 0xffffffffu

// ---------------------------------------------------------------- warp and block helpers
// Every reduction is a tree: five shuffle steps inside each warp, then the first warp combines
// the warps' partials (at most 32) from shared memory the same way. No thread walks blockDim
// alone. Each helper is called by every thread of the block (blocks are whole warps).

// the sum / the largest of one value per lane, returned to every lane
__device__ float warp_sum(float v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ double warp_sum_double(double v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ float warp_max(float v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

// inclusive prefix over the lanes (lane order = id order), in float64 for the CDFs
__device__ double warp_scan(double v) {
    int lane = threadIdx.x % WARP;
#pragma unroll
    for (int o = 1; o < WARP; o <<= 1) {
        double below = __shfl_up_sync(FULL_MASK, v, o);
        if (lane >= o) v += below;
    }
    return v;
}

// the sum (or the largest) of one value per thread, returned to every thread;
// scratch: WARP + 1 floats
__device__ float block_reduce(float v, float* scratch, bool largest) {
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, warps = blockDim.x / WARP;
    v = largest ? warp_max(v) : warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {  // the first warp combines the partials; absent warps add nothing
        float w = lane < warps ? scratch[lane] : (largest ? SPECDEC_NEG_INF() : 0.0f);
        w = largest ? warp_max(w) : warp_sum(w);
        if (lane == 0) scratch[WARP] = w;
    }
    __syncthreads();
    float result = scratch[WARP];
    __syncthreads();  // scratch may be reused at once
    return result;
}

__device__ float block_sum(float v, float* scratch) { return block_reduce(v, scratch, false); }

__device__ float block_max(float v, float* scratch) { return block_reduce(v, scratch, true); }

// the first largest of one (value, id) per thread (ids < V; id == V: none), to every thread:
// the larger value wins, then the lower id, so the result is the body's argmax (its first
// largest) whatever order the tree meets the candidates in. scratch / ids: WARP + 1 each
__device__ bool beats(float v, int i, float best, int best_i, int V) {
    return i < V && (best_i == V || v > best || (v == best && i < best_i));
}

__device__ void warp_argmax(float* best, int* best_i, int V) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) {
        float v = __shfl_xor_sync(FULL_MASK, *best, o);
        int i = __shfl_xor_sync(FULL_MASK, *best_i, o);
        if (beats(v, i, *best, *best_i, V)) { *best = v; *best_i = i; }
    }
}

__device__ int block_argmax(float best, int best_i, int V, float* scratch, int* ids, float* top) {
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, warps = blockDim.x / WARP;
    warp_argmax(&best, &best_i, V);
    if (lane == 0) { scratch[warp] = best; ids[warp] = best_i; }
    __syncthreads();
    if (warp == 0) {
        best = lane < warps ? scratch[lane] : 0.0f;
        best_i = lane < warps ? ids[lane] : V;
        warp_argmax(&best, &best_i, V);
        if (lane == 0) { scratch[WARP] = best; ids[WARP] = best_i; }
    }
    __syncthreads();
    *top = scratch[WARP];
    int result = ids[WARP];
    __syncthreads();
    return result;
}

// part `which` of `parts` of the ids [first, end), in order, each a multiple of `multiple`
// long (the last one short, any past the end empty)
__device__ void part_of(int first, int end, int which, int parts, int multiple, int* lo, int* hi) {
    int per = (end - first + parts - 1) / parts;
    per = (per + multiple - 1) / multiple * multiple;
    *lo = min(end, first + which * per);
    *hi = min(end, *lo + per);
}

// warp w's contiguous run of ids [lo, hi) of [first, end): the CDF needs ids in order, so
// each warp owns a run and its lanes stride through it, a warp reading WARP consecutive
// floats a step (coalesced) instead of each thread a chunk of its own
__device__ void warp_run(int first, int end, int* lo, int* hi) {
    part_of(first, end, threadIdx.x / WARP, blockDim.x / WARP, WARP, lo, hi);
}

// ---------------------------------------------------------------- several blocks, one combine

// Read another block's partial result: volatile, so that it comes from L2 (where the other
// block's write went), never from a stale line of this SM's L1.
template <typename T>
__device__ T fresh(const T* p) {
    return *(const volatile T*)p;
}

// True in the last of `blocks` blocks to call it (with the same counter), in every thread of
// that block; the others should return. Each block's partials, written before the call, are
// visible to the last block: every thread fences its writes (release), then one thread takes
// a ticket; the last block's threads fence again once the last ticket is seen (acquire), so
// that none of their reads of the partials is served before it. The last block sets the
// counter back to 0 for the next launch (so counters are made once).
__device__ bool last_block_done(int* counter, int blocks) {
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1) == blocks - 1;
        if (last) *counter = 0;
    }
    __syncthreads();
    if (last) __threadfence();  // block-uniform: every thread read the same `last`
    return last;
}

// exclusive prefix of one double per warp (warp order = id order) into prefix[w], the grand
// total into prefix[warps]; v: the warp's total, the same in every lane.
// scratch: WARP doubles, prefix: WARP + 1
__device__ void block_prefix(double v, double* scratch, double* prefix) {
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, warps = blockDim.x / WARP;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double mine = lane < warps ? scratch[lane] : 0.0;
        double upto = warp_scan(mine);
        double before = __shfl_up_sync(FULL_MASK, upto, 1);
        if (lane < warps) prefix[lane] = lane == 0 ? 0.0 : before;
        if (lane == warps - 1) prefix[warps] = upto;
    }
    __syncthreads();
}

// how many ids of this warp's run [lo, hi) have a cumulative mass <= limit, `run` being the
// mass before the run; term(i): id i's mass. The lanes take WARP ids a step, a warp scan puts
// them in order, and the step's total carries to the next. Every lane returns its own count.
template <typename Term>
__device__ float count_below(int lo, int hi, double run, double limit, Term term) {
    int lane = threadIdx.x % WARP;
    float count = 0.0f;
    for (int base = lo; base < hi; base += WARP) {
        int i = base + lane;
        double upto = warp_scan(i < hi ? (double)term(i) : 0.0);
        if (i < hi && run + upto <= limit) count += 1.0f;
        run += __shfl_sync(FULL_MASK, upto, WARP - 1);
    }
    return count;
}

// the least of one int per lane, to every lane
__device__ int warp_min(int v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

// the least of one int per thread, to every thread (scratch: WARP + 1)
__device__ int block_min(int v, int* scratch) {
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, warps = blockDim.x / WARP;
    v = warp_min(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {  // absent warps: the largest int, which changes no minimum
        int w = warp_min(lane < warps ? scratch[lane] : 0x7fffffff);
        if (lane == 0) scratch[WARP] = w;
    }
    __syncthreads();
    int result = scratch[WARP];
    __syncthreads();  // scratch may be reused at once
    return result;
}

// the sum of one double per thread, to every thread (scratch: WARP, prefix: WARP + 1)
__device__ double block_total(double v, double* scratch, double* prefix) {
    block_prefix(warp_sum_double(v), scratch, prefix);
    return prefix[blockDim.x / WARP];
}

// the sum of the values of the threads before this one (thread order), the grand total into
// prefix[warps] (scratch: WARP, prefix: WARP + 1)
__device__ double thread_prefix(double v, double* scratch, double* prefix) {
    int lane = threadIdx.x % WARP;
    double upto = warp_scan(v), before = __shfl_up_sync(FULL_MASK, upto, 1);
    block_prefix(__shfl_sync(FULL_MASK, upto, WARP - 1), scratch, prefix);
    return prefix[threadIdx.x / WARP] + (lane == 0 ? 0.0 : before);
}

__device__ float gelu_tanh(float x) {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    const float c = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * (x * x * x))));
}

// ---------------------------------------------------------------- embed_rows

// x[r, :] = wte[tokens[r], :] + wpe[pos(r), :], pos(r) = positions[r] if has_positions else
// first + r, first = start_at[0] when has_start_at (a captured graph's step reads its slot from
// the device, the host writing it before each replay: gpu/device/graphs.py), else start.
// grid: (R), block: (128)
extern "C" __global__ void embed_rows(const long long* tokens, const long long* positions,
                                      int has_positions, int start,
                                      const long long* start_at, int has_start_at,
                                      const float* wte, const float* wpe, int C, float* x) {
    int r = blockIdx.x;
    long long tok = tokens[r];
    long long first = has_start_at ? start_at[0] : (long long)start;
    long long pos = has_positions ? positions[r] : first + r;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        x[(long long)r * C + i] = wte[tok * C + i] + wpe[pos * C + i];
}

// ---------------------------------------------------------------- layer_norm_rows

// out[r] = (x[r] - mean) / sqrt(var + eps) * g + b, one row per block: grid (R), block (128)
extern "C" __global__ void layer_norm_rows(const float* x, int C, const float* g, const float* b,
                                           float eps, float* out) {
    __shared__ float scratch[WARP + 1];
    const float* row = x + (long long)blockIdx.x * C;
    float local = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) local += row[i];
    float mean = block_sum(local, scratch) / C;
    local = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) local += (row[i] - mean) * (row[i] - mean);
    float rstd = 1.0f / sqrtf(block_sum(local, scratch) / C + eps);
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        out[(long long)blockIdx.x * C + i] = (row[i] - mean) * rstd * g[i] + b[i];
}

// ---------------------------------------------------------------- fused_linear

// act(y + bias[j]) + resid[r, j]: once per output, after the whole sum over the inputs
__device__ float epilogue(float y, int r, int j, int N, const float* bias, int has_bias, int act,
                          const float* resid, int has_resid) {
    if (has_bias) y += bias[j];
    if (act == 1) y = gelu_tanh(y);
    if (has_resid) y += resid[(long long)r * N + j];
    return y;
}

// out[r, j] = act(LN(x[r]) @ W[:, j] + bias[j]) + resid[r, j]    for r < R, j < N
//   W row-major [C_in, ldw], ldw >= N: a padded copy (the output layer's, ldw = N rounded up
//   to 4, zeros beyond N) has rows longer than the N columns written out.
//   LN(x)[i] = (x[i] - mean) / sqrt(var + eps) * g[i] + b[i] (when has_ln; else x itself),
//   act = gelu when act == 1; resid may be out itself (x += ...), never x.
// grid: (ceil(N / LIN_COLS), K), block: (LIN_COLS * LIN_SLICES). Block (b, k) takes columns
// b * LIN_COLS ... and part k of the K parts of the input dimension (split-K: a small linear's
// ceil(N / LIN_COLS) blocks alone would leave most SMs idle). Thread (slice s, column c) sums
// the inputs i = s, s + LIN_SLICES, ... of the block's part for column j = b * LIN_COLS + c
// and all R rows (a warp reads 32 consecutive floats of one W row), then the slices are added
// up, rows spread over the slices' threads. With K > 1 each block leaves its sums in
// split_sum[k, r, j] (float64) and the column's last block (counter done[b]) adds the K parts
// in order and applies bias, GELU and residual once.
template <int ROWS>
__device__ void linear_rows(const float* x, int R, int C_in, int N, const float* ln_g,
                            const float* ln_b, float eps, int has_ln, const float* w,
                            const float* bias, int has_bias, int act, const float* resid,
                            int has_resid, float* out, double* split_sum, int* done, int ldw) {
    __shared__ float mean[ROWS], rstd[ROWS];
    __shared__ float partial[LIN_SLICES * LIN_COLS * ROWS];
    int t = threadIdx.x, c = t % LIN_COLS, s = t / LIN_COLS;
    int j = blockIdx.x * LIN_COLS + c, part = blockIdx.y, parts = gridDim.y;
    int first, end;  // this block's inputs
    part_of(0, C_in, part, parts, 1, &first, &end);

    if (has_ln) {  // every block finds the rows' mean and variance itself (no second launch):
        // warp w takes rows w, w + warps, ..., its lanes striding along the row (coalesced)
        int lane = t % WARP, warps = blockDim.x / WARP;
        for (int r = t / WARP; r < R; r += warps) {
            const float* row = x + r * C_in;
            float acc = 0.0f;
#pragma unroll 4  // the row's loads in flight together
            for (int i = lane; i < C_in; i += WARP) acc += row[i];
            float m = warp_sum(acc) / C_in;
            acc = 0.0f;  // var = mean((x - mean)^2), two passes as in the reference
            for (int i = lane; i < C_in; i += WARP) acc += (row[i] - m) * (row[i] - m);
            float var = warp_sum(acc) / C_in;
            if (lane == 0) {
                mean[r] = m;
                rstd[r] = 1.0f / sqrtf(var + eps);
            }
        }
        __syncthreads();
    }

    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) acc[r] = 0.0f;
    if (j < N) {
#pragma unroll 4  // independent weight loads in flight, not one a trip
        for (int i = first + s; i < end; i += LIN_SLICES) {
            float wij = w[(long long)i * ldw + j];
            float g = has_ln ? ln_g[i] : 1.0f, b = has_ln ? ln_b[i] : 0.0f;
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                if (r < R) {
                    float xi = x[r * C_in + i];
                    if (has_ln) xi = (xi - mean[r]) * rstd[r] * g + b;
                    acc[r] += xi * wij;
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++)
        if (r < R) partial[(r * LIN_SLICES + s) * LIN_COLS + c] = acc[r];
    __syncthreads();
    // thread (s, c) adds up rows s, s + LIN_SLICES, ... of column j: every thread has work
    if (j < N) {
        for (int r = s; r < R; r += LIN_SLICES) {
            float y = 0.0f;
#pragma unroll
            for (int k = 0; k < LIN_SLICES; k++) y += partial[(r * LIN_SLICES + k) * LIN_COLS + c];
            if (parts == 1)
                out[(long long)r * N + j] = epilogue(y, r, j, N, bias, has_bias, act, resid, has_resid);
            else
                split_sum[((long long)part * R + r) * N + j] = y;
        }
    }
    if (parts == 1 || !last_block_done(done + blockIdx.x, parts)) return;
    if (j < N) {  // the column's last block: the parts in order, whichever block came last
        for (int r = s; r < R; r += LIN_SLICES) {
            double y = 0.0;
#pragma unroll 4
            for (int k = 0; k < parts; k++) y += fresh(split_sum + ((long long)k * R + r) * N + j);
            out[(long long)r * N + j] = epilogue((float)y, r, j, N, bias, has_bias, act, resid, has_resid);
        }
    }
}

// One kernel per row bound: up to MAX_ROWS (a prefill), up to 8 (a verification pass of
// k <= 7), one (a decode step, its output layer above all). A smaller accumulator takes
// fewer registers (ptxas for sm_90: 96, 72, 40 a thread), so that more blocks of 256 threads
// fit an SM at once (2, 3, 6) and more weight reads are in flight: gpu/device/roofline.py
// predicts GPT-2's one-row output layer serial-bound at 2.6 TB/s with 2 blocks an SM, and at
// HBM's 4.8 with 6 (docs/gpu.md). The plan picks the least that holds R (fused.py).
#define LINEAR_CALL(ROWS)                                                                   \
    linear_rows<ROWS>(x, R, C_in, N, ln_g, ln_b, eps, has_ln, w, bias, has_bias, act, resid, \
                      has_resid, out, split_sum, done, ldw)
extern "C" __global__ void fused_linear(const float* x, int R, int C_in, int N,
                                        const float* ln_g, const float* ln_b, float eps,
                                        int has_ln, const float* w, const float* bias,
                                        int has_bias, int act, const float* resid,
                                        int has_resid, float* out, double* split_sum,
                                        int* done, int ldw) {
    LINEAR_CALL(MAX_ROWS);
}
extern "C" __global__ void fused_linear_8(const float* x, int R, int C_in, int N,
                                          const float* ln_g, const float* ln_b, float eps,
                                          int has_ln, const float* w, const float* bias,
                                          int has_bias, int act, const float* resid,
                                          int has_resid, float* out, double* split_sum,
                                          int* done, int ldw) {
    LINEAR_CALL(8);
}
extern "C" __global__ void fused_linear_1(const float* x, int R, int C_in, int N,
                                          const float* ln_g, const float* ln_b, float eps,
                                          int has_ln, const float* w, const float* bias,
                                          int has_bias, int act, const float* resid,
                                          int has_resid, float* out, double* split_sum,
                                          int* done, int ldw) {
    LINEAR_CALL(1);
}

// fused_linear_1v: one row (a decode step), four columns a thread read as one float4, so a
// warp's load is 512 consecutive bytes of a W row and each thread keeps four loads' worth of
// bytes in flight per issued load. The plan picks it where W's rows allow it: ldw a multiple
// of 4 and W on a 16-byte boundary (every float4 then is). Columns N .. ceil4(N) - 1 of the
// last group are read (the padding, zeros) and never written out. grid: (ceil(N /
// LIN_VEC_COLS), K), block: (WARP * LIN_SLICES); thread (slice s, lane q) sums columns
// b * LIN_VEC_COLS + 4q .. + 3 over inputs i = s, s + LIN_SLICES, ... of the block's part;
// then the block's first LIN_VEC_COLS threads add up the slices of one column each, and the
// split-K combine is fused_linear's, one counter per LIN_VEC_COLS columns.
extern "C" __global__ void fused_linear_1v(const float* x, int R, int C_in, int N,
                                           const float* ln_g, const float* ln_b, float eps,
                                           int has_ln, const float* w, const float* bias,
                                           int has_bias, int act, const float* resid,
                                           int has_resid, float* out, double* split_sum,
                                           int* done, int ldw) {
    __shared__ float stats[2];
    __shared__ float partial[LIN_SLICES * LIN_VEC_COLS];
    int t = threadIdx.x, q = t % WARP, s = t / WARP;
    int j0 = blockIdx.x * LIN_VEC_COLS + 4 * q, part = blockIdx.y, parts = gridDim.y;
    int first, end;  // this block's inputs
    part_of(0, C_in, part, parts, 1, &first, &end);

    if (has_ln) {  // the first warp finds the row's mean and variance, as fused_linear does
        if (s == 0) {
            float acc = 0.0f;
#pragma unroll 4  // the row's loads in flight together
            for (int i = q; i < C_in; i += WARP) acc += x[i];
            float m = warp_sum(acc) / C_in;
            acc = 0.0f;  // var = mean((x - mean)^2), two passes as in the reference
            for (int i = q; i < C_in; i += WARP) acc += (x[i] - m) * (x[i] - m);
            float var = warp_sum(acc) / C_in;
            if (q == 0) {
                stats[0] = m;
                stats[1] = 1.0f / sqrtf(var + eps);
            }
        }
        __syncthreads();
    }

    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    if (j0 < N) {  // then j0 + 3 < ldw: the row holds the whole group
#pragma unroll 4  // independent weight loads in flight, not one a trip
        for (int i = first + s; i < end; i += LIN_SLICES) {
            float4 wv = *(const float4*)(w + (long long)i * ldw + j0);
            float xi = x[i];
            if (has_ln) xi = (xi - stats[0]) * stats[1] * ln_g[i] + ln_b[i];
            a0 += xi * wv.x;
            a1 += xi * wv.y;
            a2 += xi * wv.z;
            a3 += xi * wv.w;
        }
    }
    float* mine = partial + s * LIN_VEC_COLS + 4 * q;
    mine[0] = a0;
    mine[1] = a1;
    mine[2] = a2;
    mine[3] = a3;
    __syncthreads();
    int j = blockIdx.x * LIN_VEC_COLS + t;  // thread t < LIN_VEC_COLS finishes column j
    if (t < LIN_VEC_COLS && j < N) {
        float y = 0.0f;
#pragma unroll
        for (int k = 0; k < LIN_SLICES; k++) y += partial[k * LIN_VEC_COLS + t];
        if (parts == 1)
            out[j] = epilogue(y, 0, j, N, bias, has_bias, act, resid, has_resid);
        else
            split_sum[(long long)part * N + j] = y;
    }
    if (parts == 1 || !last_block_done(done + blockIdx.x, parts)) return;
    if (t < LIN_VEC_COLS && j < N) {  // the columns' last block: the parts in order
        double y = 0.0;
#pragma unroll 4
        for (int k = 0; k < parts; k++) y += fresh(split_sum + (long long)k * N + j);
        out[j] = epilogue((float)y, 0, j, N, bias, has_bias, act, resid, has_resid);
    }
}

// ---------------------------------------------------------------- cached_attention

// One part of the positions of one head of one new position of one row per block: grid
// (nh * P, T, B), block (ATT_WARPS x 32); blockIdx.x = h * P + p.
//   qkv [B*T, 3C] (q | k | v, heads side by side), out [B*T, C] (heads merged); B = 1 for a
//   sequence or a tree, whose cache is [L, nh, N, hs]; a ragged batch's is [B, L, nh, N, hs].
//   Row b's new positions sit at its cache slots from start_b (`start`, or rows[b] when
//   has_rows), the first n_b of them real (T, or rows[B + b]); they attend to slots 0..S-1.
//   Slots before start_b are read from the cache, the row's new ones from qkv itself (so no
//   block waits for another's write); each block writes its own real position's K and V
//   into the cache when has_cache. The mask is mask[b*T + t][s] when has_mask (a tree's),
//   else s <= start_b + t and s < start_b + n_b (causal; a batch row's padding reads only
//   its own row's slots). scores = q k^T / sqrt(hs), masked to -1e10, softmax, times V.
//   has_start_at (a sequence in a captured graph, gpu/device/graphs.py): start = start_at[0]
//   and S = start + T, read from the device at each replay instead of the arguments.
// P > 1 (flash-decoding; P is fixed by the plan, from the cache's capacity, as S may be known
// only at run time): part p takes its share of 0..S-1 (part_of, an even split of the S of
// this launch; a part past S has none) and leaves partial[g, p] = (m, l, y[hs]): its largest
// score, sum exp(score - m), sum exp(score - m) v (m = -3e38, l = 0, y = 0 when it has no
// positions: it weighs nothing). The group's (g = (b T + t) nh + h) last block, counter
// done[g], rescales the parts to their largest M, in part order, and divides. Only part 0
// writes the cache (the other parts read the new positions from qkv, as part 0 does).
extern "C" __global__ void cached_attention(const float* qkv, int T, int C, int nh, int S,
                                            float* k_cache, float* v_cache, int layer,
                                            int n_layer, int capacity, int has_cache,
                                            int start, const long long* start_at,
                                            int has_start_at, const long long* rows, int has_rows,
                                            const bool* mask, int has_mask, float* out,
                                            float* partial, int* done) {
    __shared__ float q[MAX_HS];
    __shared__ float score[MAX_S];
    __shared__ float scratch[WARP + 1];
    __shared__ float part[ATT_WARPS * MAX_HS];  // the warps' partial outputs
    int P = gridDim.x / nh, h = blockIdx.x / P, p = blockIdx.x % P;
    int t = blockIdx.y, b = blockIdx.z, B = gridDim.z;
    int tid = threadIdx.x, hs = C / nh, group = (b * T + t) * nh + h;
    if (has_start_at) start = (int)start_at[0], S = start + T;
    int row_start = has_rows ? (int)rows[b] : start, row_new = has_rows ? (int)rows[B + b] : T;
    // slot 0 of this head's cache (row b's, in a batch's cache)
    long long head = (((long long)b * n_layer + layer) * nh + h) * capacity;
    const float* first = qkv + (long long)b * T * 3 * C;  // the row's first new position
    const float* row = first + (long long)t * 3 * C;

    for (int d = tid; d < hs; d += blockDim.x) {
        q[d] = row[h * hs + d];
        if (has_cache && t < row_new && p == 0) {
            k_cache[(head + row_start + t) * hs + d] = row[C + h * hs + d];
            v_cache[(head + row_start + t) * hs + d] = row[2 * C + h * hs + d];
        }
    }
    __syncthreads();

    int lo, hi;  // this part's positions
    part_of(0, S, p, P, 1, &lo, &hi);
    float scale = 1.0f / sqrtf((float)hs), local_max = -3.0e38f;
    for (int s = lo + tid; s < hi; s += blockDim.x) {
        bool fresh = s >= row_start && s < row_start + row_new;
        const float* key = fresh ? first + (long long)(s - row_start) * 3 * C + C + h * hs
                                 : k_cache + (head + s) * hs;
        bool allowed = has_mask ? mask[((long long)b * T + t) * S + s]
                                : (s <= row_start + t && s < row_start + row_new);
        float dot = 0.0f;
        if (allowed)
            for (int d = 0; d < hs; d++) dot += q[d] * key[d];
        score[s] = allowed ? dot * scale : -1e10f;
        local_max = fmaxf(local_max, score[s]);
    }
    float top = block_max(local_max, scratch);
    float local_sum = 0.0f;
    for (int s = lo + tid; s < hi; s += blockDim.x) {
        score[s] = expf(score[s] - top);
        local_sum += score[s];
    }
    float total = block_sum(local_sum, scratch);  // its barriers also publish score[]

    // weights x V: warp w takes positions w, w + ATT_WARPS, ..., its lanes the head's dims (a
    // V row read 32 consecutive floats at a time); the warps' partial sums meet in shared
    // memory, and each dim adds its ATT_WARPS partials (a fixed 4, unrolled)
    int lane = tid % WARP, warp = tid / WARP;
    float y[MAX_HS / WARP];
#pragma unroll
    for (int k = 0; k < MAX_HS / WARP; k++) y[k] = 0.0f;
    for (int s = lo + warp; s < hi; s += ATT_WARPS) {
        bool fresh = s >= row_start && s < row_start + row_new;
        if (!has_cache && !fresh) continue;  // weight 0: masked, and no slot to read
        const float* value = fresh ? first + (long long)(s - row_start) * 3 * C + 2 * C + h * hs
                                   : v_cache + (head + s) * hs;
        float weight = score[s];
#pragma unroll
        for (int k = 0; k < MAX_HS / WARP; k++)
            if (lane + k * WARP < hs) y[k] += weight * value[lane + k * WARP];
    }
#pragma unroll
    for (int k = 0; k < MAX_HS / WARP; k++)
        if (lane + k * WARP < hs) part[warp * hs + lane + k * WARP] = y[k];
    __syncthreads();
    for (int d = tid; d < hs; d += blockDim.x) {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) sum += part[w * hs + d];
        if (P == 1)
            out[((long long)b * T + t) * C + h * hs + d] = sum / total;
        else
            partial[((long long)group * P + p) * (hs + 2) + 2 + d] = sum;
    }
    if (P == 1) return;
    if (tid == 0) {
        partial[((long long)group * P + p) * (hs + 2)] = top;
        partial[((long long)group * P + p) * (hs + 2) + 1] = total;
    }
    if (!last_block_done(done + group, P)) return;
    // the combine, in every thread (P is small: MAX_S / the plan's positions a part)
    const float* parts_of = partial + (long long)group * P * (hs + 2);
    float M = -3.0e38f, L = 0.0f;
    for (int k = 0; k < P; k++) M = fmaxf(M, fresh(parts_of + k * (hs + 2)));
    for (int k = 0; k < P; k++)
        L += fresh(parts_of + k * (hs + 2) + 1) * expf(fresh(parts_of + k * (hs + 2)) - M);
    for (int d = tid; d < hs; d += blockDim.x) {
        float y = 0.0f;
        for (int k = 0; k < P; k++)
            y += fresh(parts_of + k * (hs + 2) + 2 + d) * expf(fresh(parts_of + k * (hs + 2)) - M);
        out[((long long)b * T + t) * C + h * hs + d] = y / L;
    }
}

// ---------------------------------------------------------------- pick_rows

// id i's mass in a greedy row: one-hot at the first largest logit, NaN everywhere when a
// logit is not finite (the xp path's + 0 * sum)
__device__ float one_hot(int i, int top_i, bool bad) {
    return bad ? SPECDEC_NAN() : (i == top_i ? 1.0f : 0.0f);
}

// exp((z - top) / T) as the xp path computes it: the shift in float32, the scaling in float64,
// the exp in float32; inv_t = 1 / T, computed once by the plan, so that each id costs a
// float64 multiplication, not a float64 division (a long instruction sequence on a GPU)
__device__ float tempered(float z, float top, double inv_t) {
    return expf((float)((double)(z - top) * inv_t));
}

// One row of logits per group of G blocks: grid (G, R), block (RED_THREADS).
//   probs[r] = the processed distribution: greedy -> one-hot at the first largest logit
//   (NaN everywhere if a logit is not finite, as the xp path's + 0 * sum does); else
//   softmax(z / T) with z = logits - max (no top-k / top-p here), inv_t = 1 / T.
//   tokens[r] (when has_tokens) = inverse CDF at u[r] (u_scalar when not has_u_array): the
//   number of ids whose cumulative mass (float64) is <= u * total, capped at V - 1.
//   finite[r] (when has_finite) = 1 if every logit is finite.
//   probs is written only when has_probs. Outputs are strided (token_stride) so that a
//   caller can pack a token next to its finite flag in one array.
// A launch does one or both of two stages (the plan chooses):
//   scan: block g reads its part of the ids for the row's finiteness, its first largest
//     logit and, at a temperature, its softmax partial: its own max m_g and
//     s_g = sum exp((z - m_g) / T). The row's last block (counter done[r]) combines the G
//     partials: the argmax, and the row's max M and sum S = sum_g s_g exp((m_g - M) / T).
//     Greedy, it finishes there (the 1 at the argmax, the token: a one-hot row needs no
//     scan); at a temperature it leaves (M, S, not finite) in stats[r] for the draw.
//   draw (at a temperature): block g writes p_i = exp((z_i - M) / T) / S for its part and
//     leaves the part's mass (float64, in id order) in partial[r, g]; the row's last block
//     finds the first part whose cumulative mass passes u * total and counts the ids inside
//     that part alone (as decide_packed does).
// A row of one block (G = 1) does both stages in one launch; a larger one launches the scan
// and then the draw, so that every block writes its share of p, instead of one block writing
// the whole row after the combine (V / 256 dependent steps of one block: a latency, not a
// bandwidth, at GPT-2's 50,257 ids). partial: [R, G, 4] doubles, then stats [R, 3].
extern "C" __global__ void pick_rows(const float* logits, int V, int greedy, double inv_t,
                                     const double* u, double u_scalar, int has_u_array,
                                     float* probs, int has_probs,
                                     long long* tokens, int has_tokens, long long* finite,
                                     int has_finite, int token_stride, int scan, int draw,
                                     double* partial, int* done) {
    __shared__ float scratch[WARP + 1];
    __shared__ int ids[WARP + 1];
    __shared__ double partials[WARP], prefix[WARP + 1], before_crossing;
    int g = blockIdx.x, G = gridDim.x, r = blockIdx.y, t = threadIdx.x, n = blockDim.x;
    int warp = t / WARP, lane = t % WARP, warps = n / WARP;
    const float* z = logits + (long long)r * V;
    float* p = probs + (long long)r * V;
    double* row = partial + (long long)r * G * 4;  // the row's G partials
    double* stats = partial + (long long)gridDim.y * G * 4 + 3 * r;  // its (M, S, not finite)
    double uniform = has_u_array ? u[r] : u_scalar;

    int first, end;  // this block's ids
    part_of(0, V, g, G, WARP, &first, &end);
    float top, e_total, any_bad;
    if (scan) {  // this thread's first largest among the block's ids (coalesced)
        int bad = 0, best_i = V;
        float best = 0.0f;
        for (int i = first + t; i < end; i += n) {
            float v = z[i];
            if (!isfinite(v)) bad = 1;
            if (best_i == V || v > best) { best = v; best_i = i; }
            if (greedy && has_probs) p[i] = 0.0f;  // one-hot: the 1 comes after the combine
        }
        any_bad = block_max((float)bad, scratch);
        int top_i = block_argmax(best, best_i, V, scratch, ids, &top);
        // s_g (a part all -inf, or empty, has no mass: its own max would make it NaN)
        float local = 0.0f;
        if (!greedy && top != SPECDEC_NEG_INF() && top_i < V)
            for (int i = first + t; i < end; i += n) local += tempered(z[i], top, inv_t);
        e_total = greedy ? 1.0f : block_sum(local, scratch);
        if (G > 1) {  // one block alone has the row's already
            if (t == 0) {
                double* mine = row + 4 * g;
                mine[0] = top; mine[1] = top_i; mine[2] = any_bad; mine[3] = e_total;
            }
            if (!last_block_done(done + r, G)) return;
            // the combine: one block's partial per thread (G <= blockDim.x), the argmax rule
            bool here = t < G;
            any_bad = block_max(here ? (float)fresh(row + 4 * t + 2) : 0.0f, scratch);
            float m_g = here ? (float)fresh(row + 4 * t) : 0.0f;
            top_i = block_argmax(m_g, here ? (int)fresh(row + 4 * t + 1) : V, V, scratch, ids,
                                 &top);
            if (!greedy) {  // S: each part's sum moved to the row's max (0 stays 0, NaN NaN)
                double s_g = here ? fresh(row + 4 * t + 3) : 0.0;
                double moved = s_g == 0.0 ? 0.0 : s_g * (double)tempered(m_g, top, inv_t);
                e_total = (float)block_total(moved, partials, prefix);
            }
        }
        if (greedy) {
            if (has_probs) {  // NaN everywhere (a logit not finite), else the 1
                if (any_bad > 0.0f)
                    for (int i = t; i < V; i += n) p[i] = one_hot(i, top_i, true);
                else if (t == 0)
                    p[top_i] = 1.0f;
            }
            // a one-hot row's CDF is 0 before top_i and 1 from it: as many ids <= u as the
            // body counts, without the scan (u >= 1: all V; u < 0 or NaN: none); a row of
            // NaN (a logit not finite): no cumulative mass is <= u, id 0
            long long id = any_bad > 0.0f ? 0 : (uniform >= 1.0 ? V : (uniform >= 0.0 ? top_i : 0));
            if (t == 0 && has_tokens) tokens[(long long)r * token_stride] = id < V - 1 ? id : V - 1;
        }
        if (t == 0 && has_finite) finite[(long long)r * token_stride] = any_bad > 0.0f ? 0 : 1;
        if (greedy || !draw) {  // the draw, if any, is the next launch's: it reads stats
            if (t == 0 && !greedy) { stats[0] = top; stats[1] = e_total; stats[2] = any_bad; }
            return;
        }
    } else {  // the scan was the previous launch
        top = (float)stats[0];
        e_total = (float)stats[1];
    }

    // the draw: this block's part, each warp a run of it in id order (for the CDF)
    // id i's probability, as the body's: the same expression wherever it is computed
    auto prob = [&](int i) { return tempered(z[i], top, inv_t) / e_total; };
    int lo, hi;
    warp_run(first, end, &lo, &hi);
    double mass = 0.0;
    for (int i = lo + lane; i < hi; i += WARP) {
        float pi = prob(i);
        if (has_probs) p[i] = pi;
        mass += (double)pi;
    }
    if (!has_tokens) return;
    block_prefix(warp_sum_double(mass), partials, prefix);  // the warps' runs, in order
    long long id;
    if (G == 1) {
        double limit = uniform * prefix[warps];
        id = (long long)block_sum(count_below(lo, hi, prefix[warp], limit, prob), scratch);
    } else {
        if (t == 0) row[4 * g] = prefix[warps];
        if (!last_block_done(done + r, G)) return;
        // the combine: part b's mass in thread b; the first part whose cumulative mass passes
        // the limit (every id before it counts: the CDF only grows), and the count inside it
        // (a NaN limit: every part "passes", the first is scanned, and no id counts)
        bool here = t < G;
        double part_mass = here ? fresh(row + 4 * t) : 0.0;
        double before = thread_prefix(part_mass, partials, prefix);
        double limit = uniform * prefix[warps];
        int crossing = block_min(here && !(before + part_mass <= limit) ? t : G, ids);
        if (t == crossing) before_crossing = before;
        __syncthreads();
        id = V;  // no part passes the limit: all V ids (capped below)
        if (crossing < G) {
            part_of(0, V, crossing, G, WARP, &first, &end);
            warp_run(first, end, &lo, &hi);
            double run = 0.0;
            for (int i = lo + lane; i < hi; i += WARP) run += (double)prob(i);
            block_prefix(warp_sum_double(run), partials, prefix);
            run = before_crossing + prefix[warp];
            id = first + (long long)block_sum(count_below(lo, hi, run, limit, prob), scratch);
        }
    }
    if (t == 0) tokens[(long long)r * token_stride] = id < V - 1 ? id : V - 1;
}

// ---------------------------------------------------------------- decide_packed

// max(0, p_i - q_i) in float64; q absent (the bonus row): p_i itself
__device__ double residual(const float* p, const float* q, int i) {
    double r = (double)p[i] - (q ? (double)q[i] : 0.0);
    return r > 0.0 ? r : 0.0;
}

// 1 if one of the entries a[0 .. n) this thread takes is not finite: the grid's threads
// stride through them (coalesced), four at a time (one 16-byte load) where `a` is 16-byte
// aligned (vec4: the plan checks), else one at a time
__device__ int not_finite(const float* a, long long n, int vec4) {
    long long me = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long all = (long long)gridDim.x * blockDim.x, fours = vec4 ? n / 4 : 0;
    int bad = 0;
    for (long long i = me; i < fours; i += all) {
        float4 v = ((const float4*)a)[i];
        if (!isfinite(v.x) || !isfinite(v.y) || !isfinite(v.z) || !isfinite(v.w)) bad = 1;
    }
    for (long long i = 4 * fours + me; i < n; i += all)
        if (!isfinite(a[i])) bad = 1;
    return bad;
}

// The verification of a round over G blocks (grid (G), block RED_THREADS):
//   a_i = min(1, p_i(x_i) / q_i(x_i)); n = first i < k with u_i >= a_i, else k;
//   row = norm(max(0, p_n - q_n)) (q_k = 0: the bonus row p_k), p_n itself if that is all 0;
//   token = inverse CDF of row at u_k.
// out int64 [k + 3] = (n, token, x_0..x_{k-1}, 1 if every p and q entry is finite else 0):
// the round's one transfer, packed.
// Every block finds n itself (k gathers, a lane each), checks its share of p and q for
// finiteness (the grid strides through them, 16 bytes a load where they are aligned: vec4)
// and sums its part of row n, the residual and p_n, into partial[g] = (not finite, residual
// mass, p_n mass). The last block (counter done[0]) combines them: which row (the residual,
// or p_n if that is all 0), the parts' masses in order, the first part whose cumulative mass
// passes u_k, and the count inside that part alone.
extern "C" __global__ void decide_packed(const float* p, const float* q, const long long* x,
                                         const double* u, int k, int V, int vec4, long long* out,
                                         double* partial, int* done) {
    __shared__ float scratch[WARP + 1];
    __shared__ double partials[WARP], prefix[WARP + 1], before_crossing;
    __shared__ int first_rejected, ids[WARP + 1];
    int g = blockIdx.x, G = gridDim.x, t = threadIdx.x, n_threads = blockDim.x;
    int warps = n_threads / WARP, warp = t / WARP, lane = t % WARP;

    int bad = not_finite(p, (long long)(k + 1) * V, vec4) | not_finite(q, (long long)k * V, vec4);
    float any_bad = block_max((float)bad, scratch);
    if (warp == 0) {  // lane i judges drafts i, i + WARP, ...; the first rejection is the least
        int n = k;
        for (int i = lane; i < k; i += WARP) {
            float a = fminf(1.0f, p[(long long)i * V + x[i]] / q[(long long)i * V + x[i]]);
            if (u[i] >= (double)a) { n = i; break; }
        }
        n = warp_min(n);
        if (lane == 0) first_rejected = n;
    }
    __syncthreads();
    int n = first_rejected;
    const float* pn = p + (long long)n * V;
    const float* qn = n < k ? q + (long long)n * V : 0;

    int first, end;  // this block's part of row n: its residual mass and p_n's (coalesced)
    part_of(0, V, g, G, WARP, &first, &end);
    double r_sum = 0.0, p_sum = 0.0;
    for (int i = first + t; i < end; i += n_threads) {
        r_sum += residual(pn, qn, i);
        p_sum += (double)pn[i];
    }
    r_sum = block_total(r_sum, partials, prefix);
    p_sum = block_total(p_sum, partials, prefix);
    if (t == 0) {
        partial[3 * g] = any_bad;
        partial[3 * g + 1] = r_sum;
        partial[3 * g + 2] = p_sum;
    }
    if (!last_block_done(done, G)) return;

    // the combine: part b's partial in thread b (G <= blockDim.x)
    bool here = t < G;
    any_bad = block_max(here ? (float)fresh(partial + 3 * t) : 0.0f, scratch);
    double r_part = here ? fresh(partial + 3 * t + 1) : 0.0;
    double p_part = here ? fresh(partial + 3 * t + 2) : 0.0;
    double before = thread_prefix(r_part, partials, prefix);  // the residual before part t
    bool has_residual = prefix[warps] > 0.0;
    if (!has_residual) before = thread_prefix(p_part, partials, prefix);  // then p_n's
    double mass = has_residual ? r_part : p_part, norm = prefix[warps];
    // the row is r / r_total (or p / p_total); its CDF is the prefix of the same terms
    double limit = u[k] * (prefix[warps] / norm);
    auto share = [&](int i) {
        return (has_residual ? residual(pn, qn, i) : (double)pn[i]) / norm;
    };
    // the first part whose cumulative mass passes the limit: every id before it counts (the
    // CDF only grows), and the ids inside it are counted one by one (with a NaN limit every
    // part "passes": the first one is scanned and no id counts, as in the body)
    int crossing = block_min(here && !((before + mass) / norm <= limit) ? t : G, ids);
    if (t == crossing) before_crossing = before;
    __syncthreads();
    long long id = V;  // no part passes the limit: all V ids (capped below)
    if (crossing < G) {
        part_of(0, V, crossing, G, WARP, &first, &end);
        int lo, hi;  // this warp's run of the crossing part's ids, in order
        warp_run(first, end, &lo, &hi);
        double run = 0.0;
        for (int i = lo + lane; i < hi; i += WARP) run += share(i);
        block_prefix(warp_sum_double(run), partials, prefix);
        run = before_crossing / norm + prefix[warp];
        id = first + (long long)block_sum(count_below(lo, hi, run, limit, share), scratch);
    }
    if (t == 0) {
        out[0] = n;
        out[1] = id < V - 1 ? id : V - 1;
        out[2 + k] = any_bad > 0.0f ? 0 : 1;
    }
    for (int i = t; i < k; i += n_threads) out[2 + i] = x[i];
}

"""Runs gpu/device/kernels.cu on the CPU: every CUDA thread of a block is a host thread.

The twin's kernels cannot be run without a GPU, but they can be run as written: each
`extern "C" __global__` kernel is compiled by the host's C++ compiler next to a small
harness in which `threadIdx` / `blockIdx` are per-thread variables, `__shared__` memory is
one static array per kernel (blocks run one after another), and `__syncthreads()` is a
`std::barrier` across the block's threads. A launch runs the grid's blocks in turn on
blockDim host threads, taken from a pool started once. The 32 threads of a warp step together
through a shuffle (`__shfl_xor_sync` / `__shfl_down_sync` / `__shfl_up_sync` / `__shfl_sync`,
full mask only): each lane writes its value to an exchange slot, meets the other 31 at the
warp's own barrier, reads its source lane's slot, and meets them again before the slots are
reused, so a kernel's warp reductions run as the device runs them. Blocks are whole warps.
`atomicAdd` (int) and `__threadfence` are the host's own, so a kernel whose last block to
finish combines the others' partials (`last_block_done`) runs as written; since blocks run
one at a time, the last block is the last in order, and `Emulator.block_order` can reverse
that order so a test sees the combine not depend on which block finishes last.
What this checks: the kernels' index arithmetic, their barriers and shuffles, their
arithmetic and the argument lists gpu/device/fused.py builds
(each argument's C type is checked against the array's dtype or the scalar's NumPy type).
What it cannot check: warp timing and the device's own float rounding (compare with a
tolerance).

`Emulator.launch(plan)` runs a `gpu.device.kernels.Plan` in place on NumPy arrays.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from gpu.device.kernels import MAX_HS, MAX_ROWS, MAX_S, SOURCE, Plan

HARNESS = r"""
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>
using std::isfinite;
using std::min;
struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct alignas(16) float4 { float x, y, z, w; };  // a misaligned float4 load is UB here too
thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static std::barrier<>* block_barrier;
static void __syncthreads() { block_barrier->arrive_and_wait(); }
// blocks run one at a time, so a block's writes are seen by the next ones; inside a block
// the fence and the atomic are the host's own
static void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static int atomicAdd(int* address, int value) {
    return std::atomic_ref<int>(*address).fetch_add(value);
}

// warps: one barrier per warp of the block, and one 8-byte exchange slot per thread
static const int warpSize = 32;
static std::vector<std::barrier<>*>* warp_barriers;
static unsigned long long shuffle_slot[1024];
static unsigned __activemask() { return 0xffffffffu; }  // every warp of a launch is whole

// the value lane `from(lane)` held, for every lane of the warp at once (lanes whose source is
// outside the warp keep their own value, as __shfl_down_sync / __shfl_up_sync do)
template <typename T, typename F> static T shuffle(unsigned mask, T v, F from) {
    static_assert(sizeof(T) <= sizeof(unsigned long long), "shuffle: 8 bytes at most");
    if (mask != 0xffffffffu) std::abort();  // only full-warp shuffles are emulated
    int t = threadIdx.x, lane = t % warpSize, base = t - lane, src = from(lane);
    std::barrier<>& warp = *(*warp_barriers)[t / warpSize];
    std::memcpy(&shuffle_slot[t], &v, sizeof(T));
    warp.arrive_and_wait();  // every lane's value is written
    T got = v;
    if (src >= 0 && src < warpSize) std::memcpy(&got, &shuffle_slot[base + src], sizeof(T));
    warp.arrive_and_wait();  // every lane has read: the slots may be written again
    return got;
}
template <typename T> static T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
    return shuffle(mask, v, [&](int lane) { return lane ^ lane_mask; });
}
template <typename T> static T __shfl_down_sync(unsigned mask, T v, unsigned delta) {
    return shuffle(mask, v, [&](int lane) { return lane + (int)delta; });
}
template <typename T> static T __shfl_up_sync(unsigned mask, T v, unsigned delta) {
    return shuffle(mask, v, [&](int lane) { return lane - (int)delta; });
}
template <typename T> static T __shfl_sync(unsigned mask, T v, int src_lane) {
    return shuffle(mask, v, [&](int) { return src_lane % warpSize; });
}
#define __global__
#define __device__ static
#define __shared__ static
#define SPECDEC_NAN() std::numeric_limits<float>::quiet_NaN()
#define SPECDEC_NEG_INF() (-std::numeric_limits<float>::infinity())
#include "KERNELS"

// A pool of host threads, one per CUDA thread of the widest block so far, started once and
// reused by every launch (starting threads is most of an emulated launch's time). Thread t
// of a launch runs every block of the grid in turn, meeting the others at a barrier after
// each, so that one block's __shared__ arrays are free for the next.
// (made on the heap and never destroyed: the pool's threads still wait on them at exit)
static std::mutex& pool_lock = *new std::mutex;
static std::condition_variable& job_posted = *new std::condition_variable;
static std::condition_variable& job_done = *new std::condition_variable;
static long generation = 0;  // one per launch
static bool reversed = false;  // blocks from the last to the first (set_block_order)
static int pool_size = 0, running = 0;
static const std::function<void()>* job = nullptr;

static void worker(int t, long seen) {
    threadIdx = dim3{(unsigned)t, 0, 0};
    for (;;) {
        std::unique_lock<std::mutex> lock(pool_lock);
        job_posted.wait(lock, [&] { return generation != seen; });
        seen = generation;
        bool mine = t < (int)blockDim.x;
        lock.unlock();
        if (!mine) continue;
        for (unsigned z = 0; z < gridDim.z; z++)
            for (unsigned y = 0; y < gridDim.y; y++)
                for (unsigned x = 0; x < gridDim.x; x++) {
                    blockIdx = reversed ? dim3{gridDim.x - 1 - x, gridDim.y - 1 - y, z}
                                        : dim3{x, y, z};
                    (*job)();
                    block_barrier->arrive_and_wait();
                }
        lock.lock();
        if (--running == 0) job_done.notify_one();
    }
}

// the order the next launches run their blocks in: 0 first to last, 1 last to first (a
// kernel must not care: on a device any block may finish last)
extern "C" void set_block_order(int last_first) { reversed = last_first != 0; }

static void run_grid(int gx, int gy, int gz, int bx, const std::function<void()>& kernel) {
    std::barrier<> barrier(bx);
    std::vector<std::barrier<>*> warps;
    for (int w = 0; w < bx / warpSize; w++) warps.push_back(new std::barrier<>(warpSize));
    {
        std::lock_guard<std::mutex> guard(pool_lock);
        for (; pool_size < bx; pool_size++) std::thread(worker, pool_size, generation).detach();
        gridDim = dim3{(unsigned)gx, (unsigned)gy, (unsigned)gz};
        blockDim = dim3{(unsigned)bx, 1, 1};
        block_barrier = &barrier;
        warp_barriers = &warps;
        job = &kernel;
        running = bx;
        generation++;
    }
    job_posted.notify_all();
    std::unique_lock<std::mutex> lock(pool_lock);
    job_done.wait(lock, [] { return running == 0; });
    for (std::barrier<>* warp : warps) delete warp;
}
"""

WARP = 32  # threads of a warp, the harness's warpSize
SIGNATURE = re.compile(r'extern "C" __global__ void (\w+)\(([^)]*)\)', re.S)
POINTERS = {
    "float": np.float32,
    "double": np.float64,
    "long long": np.int64,
    "bool": np.bool_,
    "int": np.int32,
}
SCALARS = {"int": (np.int32, ctypes.c_int), "float": (np.float32, ctypes.c_float),
           "double": (np.float64, ctypes.c_double)}  # fmt: skip


def kernel_signatures(source: str) -> dict[str, list[tuple[str, bool]]]:
    # kernel name -> [(C base type, is a pointer)] in argument order
    found = {}
    for name, params in SIGNATURE.findall(source):
        args = []
        for param in params.split(","):
            words = param.replace("const", "").replace("*", " * ").split()
            pointer = "*" in words
            args.append((" ".join(w for w in words[:-1] if w != "*"), pointer))
        found[name] = args
    return found


def wrapper(name: str, args: list[tuple[str, bool]]) -> str:
    # extern "C" void launch_<name>(gx, gy, gz, bx, args...): runs the kernel over the grid
    params = [f"{t}{'*' if p else ''} a{i}" for i, (t, p) in enumerate(args)]
    call = ", ".join(f"a{i}" for i in range(len(args)))
    return (
        f'extern "C" void launch_{name}(int gx, int gy, int gz, int bx, {", ".join(params)}) '
        f"{{ run_grid(gx, gy, gz, bx, [&] {{ {name}({call}); }}); }}\n"
    )


def compiler() -> str | None:
    return shutil.which("g++")


class Emulator:
    """gpu/device/kernels.cu built for the host (once per source, in `build_dir`)."""

    def __init__(self, build_dir: Path, path: Path = SOURCE) -> None:
        # path: the kernels' source (another file only in the emulator's own tests)
        source = path.read_text()
        self.signatures = kernel_signatures(source)
        code = HARNESS.replace("KERNELS", str(path)) + "".join(
            wrapper(n, a) for n, a in self.signatures.items()
        )
        digest = hashlib.sha1(code.encode() + source.encode()).hexdigest()[:12]
        library = build_dir / f"kernels-{digest}.so"
        if not library.exists():
            cpp = build_dir / f"kernels-{digest}.cpp"
            cpp.write_text(code)
            defines = [f"-DMAX_ROWS={MAX_ROWS}", f"-DMAX_S={MAX_S}", f"-DMAX_HS={MAX_HS}"]
            subprocess.run(
                [compiler(), "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", *defines,
                 "-w", str(cpp), "-o", str(library)],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
        self.library = ctypes.CDLL(str(library))

    def block_order(self, last_first: bool) -> None:
        # the order the blocks of every launch from now on run in (the default: first to last)
        self.library.set_block_order(int(last_first))

    def launch(self, plan: Plan) -> None:
        # run the plan's kernel on its (NumPy) arguments, in place
        signature = self.signatures[plan.name]
        assert len(plan.args) == len(signature), f"{plan.name}: argument count"
        # CuPy launches a zero grid dimension as 1 (it raises every dimension to at least 1),
        # so a plan over zero rows runs a block here too, as it would on a device
        grid = tuple(max(1, int(g)) for g in plan.grid) + (1,) * (3 - len(plan.grid))
        threads = int(plan.block[0])
        # a block of whole warps: the device runs a partial warp's shuffles with lanes absent
        assert threads > 0 and threads % WARP == 0, (
            f"{plan.name}: block {threads} is not whole warps"
        )
        c_args = [*(ctypes.c_int(g) for g in grid), ctypes.c_int(threads)]
        for i, (arg, (ctype, pointer)) in enumerate(zip(plan.args, signature, strict=True)):
            where = f"{plan.name} argument {i} ({ctype}{'*' if pointer else ''})"
            if pointer:
                assert isinstance(arg, np.ndarray), f"{where}: got {type(arg).__name__}"
                assert arg.dtype == POINTERS[ctype], f"{where}: got dtype {arg.dtype}"
                assert arg.flags.c_contiguous or arg.ndim == 1, f"{where}: not contiguous"
                c_args.append(ctypes.c_void_p(arg.ctypes.data))
            else:
                numpy_type, c_type = SCALARS[ctype]
                assert type(arg) is numpy_type, f"{where}: got {type(arg).__name__}"
                c_args.append(c_type(arg.item()))
        getattr(self.library, f"launch_{plan.name}")(*c_args)

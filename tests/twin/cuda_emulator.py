"""Runs gpu/device/kernels.cu on the CPU: every CUDA thread of a block is a fiber.

The twin's kernels cannot be run without a GPU, but they can be run as written: each
`extern "C" __global__` kernel is compiled by the host's C++ compiler next to a small
harness in which `threadIdx` / `blockIdx` are set for the running thread, `__shared__` memory
is one static array per kernel (blocks run one after another), and a block's threads are
fibers (ucontext) on the calling host thread, switched cooperatively: each runs until it
waits at a barrier, then the next one runs. `__syncthreads()` is such a barrier across the
block; the 32 threads of a warp step together through a shuffle (`__shfl_xor_sync` /
`__shfl_down_sync` / `__shfl_up_sync` / `__shfl_sync`, full mask only): each lane writes its
value to an exchange slot, meets the other 31 at the warp's own barrier, reads its source
lane's slot, and meets them again before the slots are reused, so a kernel's warp
reductions run as the device runs them. Blocks are whole warps. Fibers, not OS threads: a
barrier of 256 OS threads on two cores costs the kernel's scheduler hundreds of context
switches; a fiber's switch is a function call's worth (the emulated tests ran about
tenfold faster so). A barrier no thread can pass (threads waiting at different barriers, or
some returned early) aborts the launch with a message instead of hanging.
`atomicAdd` (int) and `__threadfence` are plain host operations, so a kernel whose last
block to finish combines the others' partials (`last_block_done`) runs as written; since
blocks run one at a time, the last block is the last in order, and `Emulator.block_order`
can reverse that order so a test sees the combine not depend on which block finishes last.
What this checks: the kernels' index arithmetic, their barriers and shuffles, their
arithmetic and the argument lists gpu/device/fused.py builds
(each argument's C type is checked against the array's dtype or the scalar's NumPy type).
What it cannot check: warp timing and the device's own float rounding (compare with a
tolerance).

`Emulator.launch(plan)` runs a `gpu.device.kernels.Plan` in place on NumPy arrays (and the
launches it chains, `Plan.then`, after it).
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
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>
#include <csetjmp>
#include <ucontext.h>
using std::isfinite;
using std::min;
struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct alignas(16) float4 { float x, y, z, w; };  // a misaligned float4 load is UB here too
static dim3 threadIdx, blockIdx;  // the running fiber's (set by the scheduler at each switch)
static dim3 blockDim, gridDim;

// The fibers of one block, all on the calling thread: fiber t is CUDA thread t. A fiber runs
// until it waits at a barrier (or returns); then the scheduler resumes the next one. Each
// fiber is made once (ucontext: its own stack) and then loops, running the kernel once per
// block; the switches are _setjmp / _longjmp, which (unlike swapcontext) make no system
// call to save the signal mask.
static const int MAX_THREADS = 1024, STACK = 128 * 1024;
static jmp_buf scheduler, fibers[MAX_THREADS];
static ucontext_t births[MAX_THREADS];
static std::vector<char*> stacks;  // one per thread index, made once and reused
static int pool = 0;  // fibers made and parked at the top of their loop
static bool finished[MAX_THREADS];
static int running_fiber = 0;
static long arrivals = 0;  // barrier arrivals so far: a pass of the scheduler without any
                           // (and with no fiber finishing) means no barrier can open
static const std::function<void()>* job = nullptr;

static void suspend() {
    if (_setjmp(fibers[running_fiber]) == 0) _longjmp(scheduler, 1);
}
static void resume(int t) {
    threadIdx = dim3{(unsigned)t, 0, 0};
    running_fiber = t;
    if (_setjmp(scheduler) == 0) _longjmp(fibers[t], 1);
}

// A barrier of `expected` fibers: the last to arrive opens it (a new generation) and goes
// on; the others give way until they see the generation change.
struct Barrier {
    int expected = 0, arrived = 0;
    long generation = 0;
    void arrive_and_wait() {
        long mine = generation;
        arrivals++;
        if (++arrived == expected) {
            arrived = 0;
            generation++;
            return;
        }
        while (generation == mine) suspend();
    }
};

static Barrier block_barrier;
static void __syncthreads() { block_barrier.arrive_and_wait(); }
// blocks run one at a time, and a block's fibers one at a time: writes are seen at once
static void __threadfence() {}
static int atomicAdd(int* address, int value) {
    int old = *address;
    *address = old + value;
    return old;
}

// warps: one barrier per warp of the block, and one 8-byte exchange slot per thread
static const int warpSize = 32;
static Barrier warp_barriers[MAX_THREADS / warpSize];
static unsigned long long shuffle_slot[MAX_THREADS];
static unsigned __activemask() { return 0xffffffffu; }  // every warp of a launch is whole

// the value lane `from(lane)` held, for every lane of the warp at once (lanes whose source is
// outside the warp keep their own value, as __shfl_down_sync / __shfl_up_sync do)
template <typename T, typename F> static T shuffle(unsigned mask, T v, F from) {
    static_assert(sizeof(T) <= sizeof(unsigned long long), "shuffle: 8 bytes at most");
    if (mask != 0xffffffffu) std::abort();  // only full-warp shuffles are emulated
    int t = threadIdx.x, lane = t % warpSize, base = t - lane, src = from(lane);
    Barrier& warp = warp_barriers[t / warpSize];
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

static void fiber_loop() {
    int t = running_fiber;
    suspend();  // parked at birth; every resume after a finish runs the next block
    for (;;) {
        (*job)();
        finished[t] = true;
        suspend();
    }
}

// fibers 0 .. n-1 made (once each; again after a stuck launch left them mid-kernel)
static void make_fibers(int n) {
    for (; pool < n; pool++) {
        if (pool == (int)stacks.size()) stacks.push_back(new char[STACK]);
        getcontext(&births[pool]);
        births[pool].uc_stack.ss_sp = stacks[pool];
        births[pool].uc_stack.ss_size = STACK;
        births[pool].uc_link = nullptr;  // a fiber never returns
        makecontext(&births[pool], fiber_loop, 0);
        running_fiber = pool;
        if (_setjmp(scheduler) == 0) setcontext(&births[pool]);  // runs to its first suspend
    }
}

// one block: fibers 0 .. bx-1 resumed in turn until every one has run the kernel through;
// false if a pass resumed every waiting fiber and none got further
static bool run_block(int bx) {
    std::fill(finished, finished + bx, false);
    for (int left = bx; left > 0;) {
        long before = arrivals;
        int done = 0;
        for (int t = 0; t < bx; t++) {
            if (finished[t]) continue;
            resume(t);
            done += finished[t];
        }
        left -= done;
        if (left > 0 && done == 0 && arrivals == before) return false;
    }
    return true;
}

static bool reversed = false;  // blocks from the last to the first (set_block_order)

// the order the next launches run their blocks in: 0 first to last, 1 last to first (a
// kernel must not care: on a device any block may finish last)
extern "C" void set_block_order(int last_first) { reversed = last_first != 0; }

// 0, or 1 + the flat index of the first block whose threads got stuck (the launch stops
// there; its fibers are dropped where they wait)
static long run_grid(int gx, int gy, int gz, int bx, const std::function<void()>& kernel) {
    if (bx > MAX_THREADS) std::abort();
    make_fibers(bx);
    gridDim = dim3{(unsigned)gx, (unsigned)gy, (unsigned)gz};
    blockDim = dim3{(unsigned)bx, 1, 1};
    job = &kernel;
    for (unsigned z = 0; z < gridDim.z; z++)
        for (unsigned y = 0; y < gridDim.y; y++)
            for (unsigned x = 0; x < gridDim.x; x++) {
                blockIdx = reversed ? dim3{gridDim.x - 1 - x, gridDim.y - 1 - y, z}
                                    : dim3{x, y, z};
                block_barrier = Barrier{bx};
                for (int w = 0; w < bx / warpSize; w++) warp_barriers[w] = Barrier{warpSize};
                if (!run_block(bx)) {
                    pool = 0;  // its fibers wait mid-kernel: made anew by the next launch
                    return 1 + blockIdx.x + (long)gx * (blockIdx.y + (long)gy * blockIdx.z);
                }
            }
    return 0;
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
    # extern "C" long launch_<name>(gx, gy, gz, bx, args...): runs the kernel over the grid
    # (0, or 1 + the first stuck block)
    params = [f"{t}{'*' if p else ''} a{i}" for i, (t, p) in enumerate(args)]
    call = ", ".join(f"a{i}" for i in range(len(args)))
    return (
        f'extern "C" long launch_{name}(int gx, int gy, int gz, int bx, {", ".join(params)}) '
        f"{{ return run_grid(gx, gy, gz, bx, [&] {{ {name}({call}); }}); }}\n"
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
            # -U_FORTIFY_SOURCE: where a compiler turns it on by default (Ubuntu's), _longjmp
            # becomes a checked jump that aborts when it lands on another fiber's stack
            subprocess.run(
                [compiler(), "-std=c++20", "-O1", "-shared", "-fPIC", "-U_FORTIFY_SOURCE", *defines,
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
        launch = getattr(self.library, f"launch_{plan.name}")
        launch.restype = ctypes.c_long
        stuck = launch(*c_args)
        assert stuck == 0, (
            f"{plan.name}: block {stuck - 1} (flat index) stuck: its threads wait at barriers "
            "no thread can open (a barrier some threads skip, or reach after returning)"
        )
        if plan.then is not None:  # a second stage of the same call: next on the stream
            self.launch(plan.then)

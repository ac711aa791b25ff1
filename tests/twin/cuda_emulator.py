"""Runs gpu/device/kernels.cu on the CPU: every CUDA thread of a block is a host thread.

The twin's kernels cannot be run without a GPU, but they can be run as written: each
`extern "C" __global__` kernel is compiled by the host's C++ compiler next to a small
harness in which `threadIdx` / `blockIdx` are per-thread variables, `__shared__` memory is
one static array per kernel (blocks run one after another), and `__syncthreads()` is a
`std::barrier` across the block's threads. A launch runs the grid's blocks in turn on
blockDim host threads, taken from a pool started once. What this checks: the kernels' index
arithmetic, their barriers, their arithmetic and the argument lists gpu/device/fused.py builds
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
#include <barrier>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>
using std::isfinite;
using std::min;
struct dim3 { unsigned x = 1, y = 1, z = 1; };
thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static std::barrier<>* block_barrier;
static void __syncthreads() { block_barrier->arrive_and_wait(); }
#define __global__
#define __device__ static
#define __shared__ static
#define SPECDEC_NAN() std::numeric_limits<float>::quiet_NaN()
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
                    blockIdx = dim3{x, y, z};
                    (*job)();
                    block_barrier->arrive_and_wait();
                }
        lock.lock();
        if (--running == 0) job_done.notify_one();
    }
}

static void run_grid(int gx, int gy, int gz, int bx, const std::function<void()>& kernel) {
    std::barrier<> barrier(bx);
    {
        std::lock_guard<std::mutex> guard(pool_lock);
        for (; pool_size < bx; pool_size++) std::thread(worker, pool_size, generation).detach();
        gridDim = dim3{(unsigned)gx, (unsigned)gy, (unsigned)gz};
        blockDim = dim3{(unsigned)bx, 1, 1};
        block_barrier = &barrier;
        job = &kernel;
        running = bx;
        generation++;
    }
    job_posted.notify_all();
    std::unique_lock<std::mutex> lock(pool_lock);
    job_done.wait(lock, [] { return running == 0; });
}
"""

SIGNATURE = re.compile(r'extern "C" __global__ void (\w+)\(([^)]*)\)', re.S)
POINTERS = {"float": np.float32, "double": np.float64, "long long": np.int64, "bool": np.bool_}
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

    def __init__(self, build_dir: Path) -> None:
        source = SOURCE.read_text()
        self.signatures = kernel_signatures(source)
        code = HARNESS.replace("KERNELS", str(SOURCE)) + "".join(
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

    def launch(self, plan: Plan) -> None:
        # run the plan's kernel on its (NumPy) arguments, in place
        signature = self.signatures[plan.name]
        assert len(plan.args) == len(signature), f"{plan.name}: argument count"
        grid = tuple(plan.grid) + (1,) * (3 - len(plan.grid))
        c_args = [*(ctypes.c_int(g) for g in grid), ctypes.c_int(plan.block[0])]
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

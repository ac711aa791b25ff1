"""gpu/device/kernels.cu compiled for the H200 (sm_90) as a device would compile it, with no GPU.

NVRTC, the compiler CuPy's RawModule calls, comes as a wheel from the registry
(nvidia-cuda-nvrtc-cu12, in the `dev` extra) and runs on any Linux machine: it is loaded
here with ctypes, no CuPy. It is given exactly what the twin gives RawModule
(`gpu.device.kernels.COMPILE_OPTIONS`) plus what RawModule adds on its own:

    -ftz=true      (cupy/cuda/compiler.py, every NVRTC compile)
    -arch=sm_90    (CuPy compiles straight to the device's machine code, a cubin; it asks
                    for PTX, -arch=compute_90, only under CUPY_COMPILE_WITH_PTX=1)
    -I ...         (CuPy's, CCCL's and CUDA's headers: kernels.cu includes none, checked
                    below, so they cannot change what it compiles to)

Then the assembler's report for each kernel (NVRTC runs ptxas itself for an sm_90 target;
`--ptxas-options=-v` prints it): registers per thread, spills, static shared memory. No
kernel may spill, and a block of the threads its launch plan asks for (gpu/device/fused.py)
must fit one SM's register file (65,536 registers on sm_90) and static shared memory
(48 KB): a launch beyond either fails on the device. Where the standalone ptxas is
installed too (the nvidia-cuda-nvcc-cu12 wheel, not in `dev`), the PTX route is checked
the same way. Skipped, saying why, where the wheels are absent.
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import gpu
from gpu.device import fused
from gpu.device.kernels import COMPILE_OPTIONS, SOURCE
from gpu.kv_cache import KVCache
from reference.config import GPTConfig
from reference.model import causal_placement, init_params
from reference.sampling import SamplingParams

ARCH = "sm_90"  # the H200's
REGISTER_FILE = 65_536  # 32-bit registers of one SM (sm_90)
MAX_REGISTERS = 255  # per thread
STATIC_SHARED = 48 * 1024  # bytes of __shared__ arrays one block may declare
CUPY_ADDS = ("-ftz=true", f"-arch={ARCH}")


def wheel_dir(package: str) -> Path | None:
    # the folder of an nvidia-* wheel's namespace package (nvidia/cuda_nvrtc ...), or None
    try:
        spec = importlib.util.find_spec(f"nvidia.{package}")
    except ModuleNotFoundError:
        return None
    return None if spec is None else Path(next(iter(spec.submodule_search_locations)))


def nvrtc_path() -> Path | None:
    folder = wheel_dir("cuda_nvrtc")
    found = sorted((folder / "lib").glob("libnvrtc.so.*")) if folder else []
    return found[0] if found and sys.platform == "linux" else None


def ptxas_path() -> Path | None:
    folder = wheel_dir("cuda_nvcc")
    found = folder / "bin" / "ptxas" if folder else None
    return found if found is not None and found.exists() else None


NO_NVRTC = "no NVRTC wheel: pip install nvidia-cuda-nvrtc-cu12 (the `dev` extra, Linux only)"
needs_nvrtc = pytest.mark.skipif(nvrtc_path() is None, reason=NO_NVRTC)


def nvrtc_compile(options: tuple[str, ...], want: str) -> tuple[bytes, str]:
    """kernels.cu through NVRTC -> (the cubin or PTX, `want` = "CUBIN" | "PTX", the log)."""
    lib = ctypes.CDLL(str(nvrtc_path()))
    program = ctypes.c_void_p()
    check = nvrtc_checker(lib)
    source = SOURCE.read_text().encode()
    check(lib.nvrtcCreateProgram(ctypes.byref(program), source, b"kernels.cu", 0, None, None))
    try:
        encoded = [o.encode() for o in options]
        status = lib.nvrtcCompileProgram(
            program, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded)
        )
        log = read_nvrtc(lib, program, "ProgramLog").decode(errors="replace").rstrip("\0")
        assert status == 0, f"NVRTC failed ({status}) with {options}:\n{log}"
        return read_nvrtc(lib, program, want), log
    finally:
        check(lib.nvrtcDestroyProgram(ctypes.byref(program)))


def nvrtc_checker(lib):
    def check(status: int) -> None:
        if status != 0:
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            raise RuntimeError(f"NVRTC: {lib.nvrtcGetErrorString(status).decode()}")

    return check


def read_nvrtc(lib, program, what: str) -> bytes:
    # one of the program's outputs: nvrtcGet<what>Size, then nvrtcGet<what>
    size = ctypes.c_size_t()
    nvrtc_checker(lib)(getattr(lib, f"nvrtcGet{what}Size")(program, ctypes.byref(size)))
    buffer = ctypes.create_string_buffer(size.value)
    nvrtc_checker(lib)(getattr(lib, f"nvrtcGet{what}")(program, buffer))
    return buffer.raw


@dataclass
class Resources:
    """One kernel as ptxas assembled it."""

    registers: int  # per thread
    spill_bytes: int  # spill stores + spill loads
    stack_bytes: int
    shared_bytes: int  # static __shared__


ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(?:.*?, (\d+) bytes smem)?")


def ptxas_report(text: str) -> dict[str, Resources]:
    # ptxas -v's lines -> kernel name -> Resources (each kernel's lines follow its entry line)
    found: dict[str, Resources] = {}
    name = None
    for line in text.splitlines():
        if m := ENTRY.search(line):
            assert m.group(2) == ARCH, line
            name = m.group(1)
            found[name] = Resources(-1, 0, 0, 0)
        elif name and (m := SPILLS.search(line)):
            found[name].stack_bytes = int(m.group(1))
            found[name].spill_bytes = int(m.group(2)) + int(m.group(3))
        elif name and (m := USED.search(line)):
            found[name].registers = int(m.group(1))
            found[name].shared_bytes = int(m.group(2) or 0)
    return found


def kernel_names() -> set[str]:
    return set(re.findall(r'extern "C" __global__ void (\w+)\(', SOURCE.read_text()))


def threads_per_block() -> dict[str, int]:
    """Each kernel's block, read from the plan gpu/device/fused.py builds for it (NumPy
    arrays, small sizes: the block does not depend on them)."""
    rng = np.random.default_rng(0)

    def f(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    cfg = GPTConfig(n_vocab=16, n_ctx=16, n_embd=16, n_head=2, n_layer=1)
    model = gpu.GPT(cfg, init_params(cfg, rng))
    probs, tokens = np.zeros((2, 16), np.float32), np.zeros(2, np.int64)
    p = np.full((3, 16), 1 / 16, np.float32)
    plans = [
        fused.embed_plan(f(16, 8), f(16, 8), np.array([1, 2]), slice(0, 2)),
        fused.layer_norm_plan(f(2, 8), f(8), f(8), 1e-5),
        fused.linear_plan(f(2, 8), f(8, 40), f(40), ln=(f(8), f(8), 1e-5)),
        fused.linear_plan(f(1, 8), f(8, 40), f(40)),  # one row, W 4-float aligned: _1v
        fused.linear_plan(f(1, 8), f(8, 41), f(41)),  # one row, rows of 41 floats: _1
        fused.linear_plan(f(16, 8), f(8, 40), f(40)),  # more than 8 rows: fused_linear
        fused.attention_plan(model, f(2, 48), 0, KVCache(1, 2, 8, 16), causal_placement(0, 2)),
        fused.pick_plan(f(2, 16), SamplingParams(), np.array([0.5, 0.5]), probs, tokens, None),
        fused.decide_plan(p, p[:2], np.array([1, 2]), np.array([0.1, 0.2, 0.3])),
    ]
    blocks = {plan.name: int(np.prod(plan.block)) for plan in plans}
    assert set(blocks) == kernel_names(), "a kernel of kernels.cu without a plan here"
    return blocks


def check_fits(report: dict[str, Resources]) -> None:
    # every kernel: assembled, no spill, and a block of its plan's threads fits one SM
    assert set(report) == kernel_names(), sorted(report)
    for name, threads in threads_per_block().items():
        used = report[name]
        where = f"{name}: {used}, {threads} threads a block"
        assert 0 < used.registers <= MAX_REGISTERS, where
        assert used.spill_bytes == 0, f"{where}: spills to local memory"
        assert used.registers * threads <= REGISTER_FILE, f"{where}: exceeds the register file"
        assert used.shared_bytes <= STATIC_SHARED, f"{where}: exceeds static shared memory"


def test_the_source_includes_no_header():
    """CuPy adds include paths (its own, CCCL's, CUDA's): without an #include they change
    nothing, so compiling without them is compiling what the device compiles."""
    assert "#include" not in SOURCE.read_text()


def test_the_ptxas_report_is_read_per_kernel():
    text = """ptxas info    : Compiling entry function 'a' for 'sm_90'
ptxas info    : Function properties for a
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'b' for 'sm_90'
ptxas info    : Function properties for b
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 26 registers, used 0 barriers, 380 bytes cmem[0]"""
    assert ptxas_report(text) == {"a": Resources(40, 16, 8, 1024), "b": Resources(26, 0, 0, 0)}


@needs_nvrtc
def test_nvrtc_compiles_the_kernels_for_the_h200_as_cupy_would():
    """The exact options (the twin's and CuPy's): a cubin for sm_90, and no warning."""
    cubin, log = nvrtc_compile(COMPILE_OPTIONS + CUPY_ADDS, "CUBIN")
    assert cubin[:4] == b"\x7fELF"  # device machine code, as the driver loads it
    assert "warning" not in log.lower(), log


@needs_nvrtc
def test_every_kernel_fits_an_sm_with_no_spills():
    """ptxas's report for the cubin CuPy would load (-v only prints: same code)."""
    _, log = nvrtc_compile(COMPILE_OPTIONS + CUPY_ADDS + ("--ptxas-options=-v",), "CUBIN")
    check_fits(ptxas_report(log))


@needs_nvrtc
@pytest.mark.skipif(ptxas_path() is None, reason="no ptxas: pip install nvidia-cuda-nvcc-cu12")
def test_the_ptx_route_assembles_for_the_h200_with_no_spills(tmp_path):
    """CuPy's other route (CUPY_COMPILE_WITH_PTX=1): NVRTC's PTX, assembled for sm_90 by the
    standalone ptxas, as the driver would assemble it at load."""
    options = COMPILE_OPTIONS + ("-ftz=true", f"-arch=compute_{ARCH[3:]}")
    ptx, _ = nvrtc_compile(options, "PTX")
    source = tmp_path / "kernels.ptx"
    source.write_bytes(ptx.rstrip(b"\0"))
    done = subprocess.run(
        [str(ptxas_path()), f"-arch={ARCH}", "-v", str(source), "-o", str(tmp_path / "k.cubin")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr.lower(), done.stderr
    check_fits(ptxas_report(done.stdout + done.stderr))

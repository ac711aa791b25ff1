"""Which machine a number came from, and the BLAS threads a run chose (not inherited).

A time measured here is a fact about this CPU, this BLAS library and the kernel it picked,
and the number of threads it ran on; on a laptop with AVX2 only, or with another thread
count, the same code gives other numbers (docs/benchmarks.md, "Which machines these figures
came from"). So every report names them:

    >>> from specdec.machine import describe_machine
    >>> print(describe_machine().line())
    AMD EPYC, 2 cores; OpenBLAS 0.3.31 (SkylakeX kernels), 1 BLAS thread; NumPy 2.4.6

and every notebook and benchmark sets its BLAS threads itself (`use_blas_threads`), so a
notebook run in JupyterLab, by `make lab` or by `notebooks/render.py` measures the same
thing. `SPECDEC_BLAS_THREADS` overrides the default of one thread (the suite's second
configuration runs the notebooks with 2); OpenBLAS's own `OPENBLAS_CORETYPE` picks another
kernel (`Haswell` is what AVX2 laptops run), and this module reports whichever is running.
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

THREADS_VARIABLE = "SPECDEC_BLAS_THREADS"
DEFAULT_BLAS_THREADS = 1  # steady timings, and no spinning threads on a busy machine

_limiter = None  # the threadpoolctl limit in force for this process (kept so it lasts)


def blas_threads_wanted(threads: int | None = None) -> int:
    """The thread count a run uses: `threads` if given, else $SPECDEC_BLAS_THREADS, else 1."""
    if threads is None:
        text = os.environ.get(THREADS_VARIABLE, "").strip()
        if not text:
            return DEFAULT_BLAS_THREADS
        try:
            threads = int(text)
        except ValueError:
            raise ValueError(
                f"${THREADS_VARIABLE}={text!r}: expected a whole number >= 1"
            ) from None
    if threads < 1:
        raise ValueError(f"BLAS threads must be >= 1, got {threads}")
    return threads


def use_blas_threads(threads: int | None = None) -> int:
    """Limit every BLAS library of this process to `threads` (see `blas_threads_wanted`)
    from now on; returns the count. Called at the top of each notebook and by the CLI."""
    from threadpoolctl import threadpool_limits

    global _limiter
    n = blas_threads_wanted(threads)
    _limiter = threadpool_limits(limits=n, user_api="blas")
    return n


@dataclass(frozen=True)
class MachineInfo:
    cpu: str  # the processor's model name, as the OS reports it
    cores: int  # logical CPUs the OS reports
    blas: str  # the BLAS library NumPy calls ("OpenBLAS 0.3.31")
    kernel: str  # the kernel family the BLAS picked for this CPU (threadpoolctl's
    #              architecture: SkylakeX, Haswell, Zen, ...), or "unknown"
    threads: int  # BLAS threads in force now
    numpy: str
    python: str
    coretype_override: str  # $OPENBLAS_CORETYPE when set (an emulated kernel), else ""

    def line(self) -> str:
        """One line for a report's header."""
        threads = f"{self.threads} BLAS thread" + ("s" if self.threads != 1 else "")
        forced = f", forced by OPENBLAS_CORETYPE={self.coretype_override}"
        kernel = f"{self.kernel} kernels" + (forced if self.coretype_override else "")
        return (
            f"{self.cpu}, {self.cores} cores; {self.blas} ({kernel}), {threads}; "
            f"NumPy {self.numpy}, Python {self.python}"
        )

    def short(self) -> str:
        """CPU and kernel, for a table's column: 'AMD EPYC / SkylakeX / 1 thread'."""
        return f"{self.cpu} / {self.kernel} / {self.threads} thread" + (
            "s" if self.threads != 1 else ""
        )

    def as_dict(self) -> dict:
        return asdict(self)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def blas_info() -> dict:
    """threadpoolctl's record of the BLAS NumPy uses ({} when it finds none, or when
    threadpoolctl is missing: the device machine's python3 has none)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return {}

    found = [info for info in threadpool_info() if info.get("user_api") == "blas"]
    # NumPy's own first: SciPy brings a second OpenBLAS (numba loads SciPy when it compiles),
    # which the project's products never call
    found.sort(key=lambda info: "numpy" not in str(info.get("filepath", "")))
    return found[0] if found else {}


def blas_name(info: dict) -> str:
    names = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS", "flexiblas": "FlexiBLAS"}
    if not info:
        return "no BLAS found"
    name = names.get(info.get("internal_api", ""), info.get("internal_api", "BLAS"))
    version = info.get("version") or ""
    # scipy-openblas appends its own build number (0.3.31.188.0): keep OpenBLAS's three parts
    version = ".".join(version.split(".")[:3])
    return f"{name} {version}".strip()


def describe_machine() -> MachineInfo:
    info = blas_info()
    return MachineInfo(
        cpu=cpu_model(),
        cores=os.cpu_count() or 1,
        blas=blas_name(info),
        kernel=info.get("architecture") or "unknown",
        threads=int(info.get("num_threads") or 1),
        numpy=np.__version__,
        python=platform.python_version(),
        coretype_override=os.environ.get("OPENBLAS_CORETYPE", ""),
    )


def cache_sizes() -> dict[str, int]:
    """Data and unified cache sizes of CPU 0 in bytes, as the OS reports them
    ({'L1d': 65536, 'L2': 1048576, 'L3': 33554432}); {} where the OS does not say."""
    sizes = {}
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = (index / "level").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        units = {"K": 1024, "M": 1024**2, "G": 1024**3}
        value = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
        sizes[f"L{level}" + ("d" if kind == "Data" else "")] = value
    return sizes


def mib(n_bytes: int) -> str:
    return f"{n_bytes / 1024**2:g} MiB" if n_bytes >= 1024**2 else f"{n_bytes // 1024} KiB"

"""Which tricks of the CPU fast path pay on this machine: measured, then chosen.

A trick of `specdec/fast_cpu.py` is a different way to compute the same numbers; whether it is
faster depends on the BLAS kernels the machine runs (SkylakeX, Haswell, Zen, ...), on the
number of threads and on the shape. So before a `FastGPT` uses one, `measure_plan` times it
against the plain computation on the model's own shapes, for every row count T it serves,
and keeps it only where it was faster. The calls to time come from the fast path itself
(`candidates(model)` in specdec/fast_cpu.py, beside the tricks): this file times and
chooses, and imports nothing of the fast path.

    trick       serves                                  plain computation
    linear      2..FEW_ROWS rows, per weight shape      x @ w + b
    attention   1..FEW_ROWS new rows, and a prefill     reference.model.attention
    gelu        1..FEW_ROWS rows, and a prefill         reference.model.gelu
    logits      2..FEW_ROWS rows                        h @ wte^T

Each figure is the fastest of `repeats` calls, plain and fast alternating (other work on the
machine can only add time, so the minimum depends least on it). A measurement is cached for
the process by what it depends on (trick, shape, rows, BLAS kernel, threads), so a second
model of the same shapes, or a second `fast(...)` of the same model, costs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from specdec.machine import blas_info

FEW_ROWS = 16  # the fast path serves passes of up to this many new rows (specdec/fast_cpu.py)
MANY_ROWS = 64  # the row count a prefill is timed at; every T > FEW_ROWS uses its choice
TRICKS = ("linear", "attention", "gelu", "logits")
# one choice to measure: (trick, shape, rows T, the plain call, the trick's call), both
# calls without arguments and giving the same numbers
Candidate = tuple[str, tuple[int, ...], int, Callable[[], object], Callable[[], object]]


def rows_key(T: int) -> int:
    # the row counts a choice is made for: 1..FEW_ROWS one by one, the rest as one bucket
    return T if T <= FEW_ROWS else MANY_ROWS


@dataclass(frozen=True)
class Timing:
    """One trick against the plain computation, at one shape and row count."""

    trick: str  # one of TRICKS
    shape: tuple[int, ...]  # linear (C_in, C_out); attention (nh, hs, S); gelu (width,);
    #                         logits (V, C)
    rows: int  # T new rows (MANY_ROWS stands for every T > FEW_ROWS)
    plain_s: float  # fastest of the repeats, seconds
    fast_s: float

    @property
    def kept(self) -> bool:
        return self.fast_s < self.plain_s


@dataclass(frozen=True)
class TrickPlan:
    """What a FastGPT computes the fast way. `uses(trick, shape, T)` is asked on every call,
    so it is one set lookup. `everything` forces all tricks on (True) or off (False)."""

    timings: tuple[Timing, ...] = ()
    everything: bool | None = None
    machine: str = ""  # the BLAS kernel and threads the timings were taken with
    kept: frozenset = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        keys = frozenset((t.trick, t.shape[:2], t.rows) for t in self.timings if t.kept)
        object.__setattr__(self, "kept", keys)

    def uses(self, trick: str, shape: tuple[int, ...], T: int) -> bool:
        if self.everything is not None:
            return self.everything
        return (trick, shape[:2], rows_key(T)) in self.kept

    @classmethod
    def all_tricks(cls) -> TrickPlan:
        return cls(everything=True, machine="every trick forced on")

    @classmethod
    def no_tricks(cls) -> TrickPlan:
        return cls(everything=False, machine="every trick forced off")


_MEASURED: dict[tuple, Timing] = {}  # (trick, shape, rows, kernel, threads) -> Timing


def blas_setting() -> tuple[str, int]:
    # (kernel, threads): what a timing depends on besides the shape
    info = blas_info()
    return str(info.get("architecture") or "unknown"), int(info.get("num_threads") or 1)


def fastest_pair(plain, fast, repeats: int) -> tuple[float, float]:
    """(plain seconds, fast seconds): the fastest of `repeats` calls each, alternating, after
    one warm-up call of each."""
    plain()
    fast()
    best_plain = best_fast = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        plain()
        middle = time.perf_counter()
        fast()
        end = time.perf_counter()
        best_plain = min(best_plain, middle - start)
        best_fast = min(best_fast, end - middle)
    return best_plain, best_fast


def measure_plan(candidates: list[Candidate], repeats: int = 7) -> TrickPlan:
    """Time every trick a model could use against the plain computation, on its shapes and
    this machine's current BLAS setting; keep the faster. `candidates` are the model's choices
    (specdec/fast_cpu.py `candidates(model)`). Timings already taken in this process for the
    same setting are reused."""
    kernel, threads = blas_setting()
    timings = []
    for trick, shape, T, plain, fast in candidates:
        key = (trick, shape, T, kernel, threads)
        if key not in _MEASURED:
            plain_s, fast_s = fastest_pair(plain, fast, repeats)
            _MEASURED[key] = Timing(trick, shape, T, plain_s, fast_s)
        timings.append(_MEASURED[key])
    return TrickPlan(tuple(timings), machine=f"{kernel} kernels, {threads} BLAS thread(s)")


def forget_measurements() -> None:
    """Drop the process's cached timings (the next plan measures afresh)."""
    _MEASURED.clear()


def row_ranges(rows: list[int]) -> str:
    # [2, 3, 4, 7, 64] -> "2-4, 7, >16"
    parts, run = [], []
    for r in sorted(rows):
        if run and r == run[-1] + 1 and r <= FEW_ROWS:
            run.append(r)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}")
        run = [r]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}")
    return ", ".join(p if p != str(MANY_ROWS) else f">{FEW_ROWS}" for p in parts) or "none"


def describe_plan(plan: TrickPlan) -> str:
    """A markdown table: per trick and shape, the row counts where the trick was kept, and
    plain / fast time at a few row counts (over 1: the trick is faster)."""
    if plan.everything is not None:
        return f"fast-path tricks: {plan.machine} (nothing measured)\n"
    groups: dict[tuple[str, tuple], list[Timing]] = {}
    for t in plan.timings:
        groups.setdefault((t.trick, t.shape), []).append(t)
    lines = [
        f"Fast-path tricks chosen by measurement ({plan.machine}); plain / fast time, "
        "over 1 = the trick is faster:",
        "",
        "| trick | shape | kept for rows | plain for rows | plain / fast at T = 2, 8, 16 |",
        "|---|---|---|---|---|",
    ]
    for (trick, shape), ts in groups.items():
        kept = [t.rows for t in ts if t.kept]
        plain = [t.rows for t in ts if not t.kept]
        by_rows = {t.rows: t.plain_s / t.fast_s for t in ts}
        ratios = ", ".join(f"{by_rows[T]:.2f}" if T in by_rows else "-" for T in (2, 8, 16))
        shape_text = "x".join(str(s) for s in shape)
        lines.append(
            f"| {trick} | {shape_text} | {row_ranges(kept)} | {row_ranges(plain)} | {ratios} |"
        )
    return "\n".join(lines) + "\n"

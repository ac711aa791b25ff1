"""Which tricks of the CPU fast path pay on this machine: whole passes measured, then chosen.

A trick of `specdec/fast_cpu/model.py` is a different way to compute the same numbers; whether it is
faster depends on the BLAS kernels the machine runs (SkylakeX, Haswell, Zen, ...), on the
number of threads, on the shapes, and on where the weights are when it runs. That last one is
why a trick is never timed alone: a product repeated on one weight matrix finds that matrix in
the cache, while inside a model whose weights exceed the CPU's last-level cache every pass
streams them from memory. A trick that won alone could then lose in the model (issue 33: the
sliced product on Haswell kernels, 0.90x for a whole 8-row pass).

So `measure_plan` times what the model runs: whole passes of T new rows, for every T the fast
path serves, under each configuration of tricks (`CONFIGS`, "plain" among them), with every
weight of the model read between two timed passes so that each pass finds the weights as
cold as the loop leaves them (the draft model and the sampling run between two verification
passes). For each T the fastest configuration is kept, so the fast path is never slower than
the plain computations by more than the timing noise. The calls to time come from the fast
path (`measure_passes(model)` in specdec/fast_cpu/model.py): this file times and chooses, and
imports nothing of the fast path.

    trick       what it replaces                        where (specdec/fast_cpu/model.py)
    linear      x @ w + b (2..FEW_ROWS rows)            linear_few_rows
    compiled    x @ w + b (2..FEW_ROWS rows)            few_rows_product (numba; optional)
    compiled_norm  reference.model.layer_norm           layer_norm_rows (numba)
    attention   reference.model.attention               attention_keys_first
    gelu        reference.model.gelu                    gelu_by_products
    logits      h @ wte^T (2..FEW_ROWS rows)            logits_few_rows

On a Llama-family model (FastLlama) the same names cover its block: compiled_norm its RMSNorm
(rms_norm_rows), attention the grouped attention and the RoPE rotation before it
(rotate_by_products), gelu its SiLU (silu_by_products; `describe_plan` prints "silu"), all in
specdec/fast_cpu/llama.py.

There are also two configurations that replace a whole forward with a cache by one compiled
call (`WHOLE_FORWARD`, specdec/fast_cpu/step.py; llama_step.py for a Llama), timed for passes
of up to FEW_ROWS rows only (`MOST_ROWS`): "stepwise" runs the rows one after the other (a
small model's step), "fused" all at once (a verification pass). "stepwise16" and "fused16"
are the same calls reading 16-bit copies of the weights (`SIXTEEN_BIT`,
specdec/fast_cpu/sixteen.py): half the bytes, which pays where a pass streams its weights
from memory; they are offered only for a model whose weights were 16-bit numbers.

Each figure is the fastest of `repeats` passes, the configurations and row counts taking
turns: other work on the machine can only add time, and the cold weights are the same at
every repeat, so the fastest is the pass least disturbed (medians of 5 let a busy machine
pick BLAS's 8-row product over the compiled one in one run of three). A plan is cached for
the process by what it depends on (the model's shapes, the BLAS kernel, threads), so a second
model of the same shapes, or a second `fast(...)` of the same model, measures nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from specdec.machine import blas_info

FEW_ROWS = 16  # passes of 1..FEW_ROWS new rows are measured one by one (verification, trees)
MANY_ROWS = 64  # the row count a prefill is timed at; every T > FEW_ROWS uses its choice
TRICKS = (
    "linear",
    "compiled",
    "compiled_norm",
    "attention",
    "gelu",
    "logits",
)
# the configurations a pass can run: name -> the tricks it uses ("plain": none of them).
# "all" forces every trick (where two replace x @ w, the sliced product is the one taken)
CONFIGS = {
    "plain": frozenset(),
    "products": frozenset({"attention", "gelu", "logits"}),  # BLAS's own x @ w for linears
    "all": frozenset({"linear", "attention", "gelu", "logits"}),  # the sliced x @ w
    # numba's compiled loops (specdec/fast_cpu/compiled.py): the few-row product, LayerNorm
    "compiled": frozenset({"compiled", "compiled_norm", "attention", "gelu", "logits"}),
    # a forward with a cache as one compiled call (specdec/fast_cpu/step.py), its rows one
    # after the other (a small model's step) or all at once (a verification pass); the other
    # passes (a tree's, a batch's, features for extra heads) take the compiled tricks
    "stepwise": frozenset({"compiled", "compiled_norm", "attention", "gelu", "logits"}),
    "fused": frozenset({"compiled", "compiled_norm", "attention", "gelu", "logits"}),
    # the same two calls reading the weights in the 16 bits they were stored in
    # (specdec/fast_cpu/sixteen.py): offered only for a model whose weights are 16-bit numbers
    "stepwise16": frozenset({"compiled", "compiled_norm", "attention", "gelu", "logits"}),
    "fused16": frozenset({"compiled", "compiled_norm", "attention", "gelu", "logits"}),
}
# offered only where numba is installed
COMPILED_CONFIGS = ("compiled", "stepwise", "fused", "stepwise16", "fused16")
SIXTEEN_BIT = {"stepwise16": "stepwise", "fused16": "fused"}  # -> its float32 twin
MOST_ROWS = {c: FEW_ROWS for c in ("stepwise", "fused", *SIXTEEN_BIT)}  # timed only up to this T
# configurations that replace a whole forward with a cache, not single calls in it
WHOLE_FORWARD = {
    "stepwise": "rows one by one in one compiled call",
    "fused": "the whole pass in one compiled call",
    "stepwise16": "rows one by one in one compiled call, 16-bit weights",
    "fused16": "the whole pass in one compiled call, 16-bit weights",
}


def rows_key(T: int) -> int:
    # the row counts a choice is made for: 1..FEW_ROWS one by one, the rest as one bucket
    return T if T <= FEW_ROWS else MANY_ROWS


@dataclass(frozen=True)
class PassTiming:
    """One configuration's pass over T new rows: the fastest of the repeats, weights cold."""

    config: str  # a key of CONFIGS
    rows: int  # T new rows (MANY_ROWS stands for every T > FEW_ROWS)
    seconds: float


def fastest_configs(timings) -> dict[int, str]:
    # rows -> the configuration of least time at that row count ("plain" on a tie: a trick
    # has to be faster to be used)
    best: dict[int, PassTiming] = {}
    for t in sorted(timings, key=lambda t: t.config != "plain"):  # plain first
        if t.rows not in best or t.seconds < best[t.rows].seconds:
            best[t.rows] = t
    return {rows: t.config for rows, t in best.items()}


@dataclass(frozen=True)
class TrickPlan:
    """What a FastGPT computes the fast way, per pass size. `uses(trick, shape, T)` is asked
    on every call, so it is one set lookup; `shape` is accepted for the callers' sake (one
    plan serves one model, whose shapes are fixed). `everything` forces all tricks on (True)
    or off (False)."""

    timings: tuple[PassTiming, ...] = ()
    everything: bool | None = None
    machine: str = ""  # the BLAS kernel and threads the timings were taken with
    activation: str = "gelu"  # the model's activation, as the description names its trick
    chosen: dict = field(init=False, repr=False, compare=False)  # rows -> config name
    kept: frozenset = field(init=False, repr=False, compare=False)  # {(trick, rows)}

    def __post_init__(self) -> None:
        chosen = fastest_configs(self.timings)
        kept = frozenset((trick, rows) for rows, c in chosen.items() for trick in CONFIGS[c])
        object.__setattr__(self, "chosen", chosen)
        object.__setattr__(self, "kept", kept)

    def uses(self, trick: str, shape: tuple[int, ...], T: int) -> bool:
        if self.everything is not None:
            return self.everything
        return (trick, rows_key(T)) in self.kept

    def whole_forward(self, T: int) -> str | None:
        # "stepwise" / "fused" when a forward of T rows with a cache is one compiled call
        # (specdec/fast_cpu/step.py), else None
        config = self.chosen.get(rows_key(T)) if self.everything is None else None
        return config if config in WHOLE_FORWARD else None

    def seconds(self, config: str, rows: int) -> float:
        return next(t.seconds for t in self.timings if (t.config, t.rows) == (config, rows))

    @classmethod
    def all_tricks(cls) -> TrickPlan:
        return cls(everything=True, machine="every trick forced on")

    @classmethod
    def no_tricks(cls) -> TrickPlan:
        return cls(everything=False, machine="every trick forced off")

    @classmethod
    def fixed(cls, config: str) -> TrickPlan:
        # one configuration at every pass size (what measure_plan runs while it times)
        if config not in CONFIGS:
            raise ValueError(f"config must be one of {tuple(CONFIGS)}, got {config!r}")
        rows = [*range(1, FEW_ROWS + 1), MANY_ROWS]
        return cls(tuple(PassTiming(config, T, 0.0) for T in rows), machine=f"{config} forced")


_MEASURED: dict[tuple, tuple[PassTiming, ...]] = {}  # (model key, kernel, threads) -> timings


def blas_setting() -> tuple[str, int]:
    # (kernel, threads): what a timing depends on besides the shape
    info = blas_info()
    return str(info.get("architecture") or "unknown"), int(info.get("num_threads") or 1)


OUT_OF_THE_RUNNING = 1.5  # a configuration this many times slower than the best is dropped
FULL_REPEATS = 2  # repeats every configuration runs before any is dropped


def still_in_the_running(best: dict[str, float]) -> set[str]:
    # configuration -> fastest seconds so far at one pass size -> those that could still win:
    # within OUT_OF_THE_RUNNING of the fastest (the rest would need that much noise to win)
    fastest = min(best.values())
    return {c for c, seconds in best.items() if seconds <= OUT_OF_THE_RUNNING * fastest}


def fastest_pass_seconds(
    run_pass: Callable[[str, int], None],
    touch: Callable[[], object],
    rows: list[int],
    repeats: int,
    configs: tuple[str, ...] = tuple(CONFIGS),
) -> list[PassTiming]:
    """Fastest seconds of `run_pass(config, T)` for every configuration and T, each pass after
    `touch()` (which reads every weight of the model: the pass then finds them where a pass
    of the model left them). Configurations and row counts take turns within each repeat, so
    a change of load on the machine spreads over all of them. After FULL_REPEATS, a
    configuration far slower than the best at a pass size (`still_in_the_running`) is not
    timed there again: its fastest so far stands, and cannot win. (That halves the time the
    bundled target's plan takes; the plain passes of many rows are the slowest of all.)"""
    for config in configs:  # warm-up: the first calls of each kind (and numba's compile)
        for T in rows[:2]:
            run_pass(config, T)
    seconds = {(c, T): [] for T in rows for c in configs if T <= MOST_ROWS.get(c, T)}
    running = {T: [c for c in configs if T <= MOST_ROWS.get(c, T)] for T in rows}
    for repeat in range(repeats):
        for T in rows:
            for config in running[T]:
                touch()
                start = time.perf_counter()
                run_pass(config, T)
                seconds[config, T].append(time.perf_counter() - start)
            if repeat + 1 >= FULL_REPEATS:
                kept = still_in_the_running({c: min(seconds[c, T]) for c in running[T]})
                running[T] = [c for c in running[T] if c in kept]
    return [PassTiming(c, T, min(s)) for (c, T), s in seconds.items()]


def measure_plan(
    run_pass: Callable[[str, int], None],
    touch: Callable[[], object],
    key: tuple,
    repeats: int = 7,
    configs: tuple[str, ...] = tuple(CONFIGS),
    note: str = "",
) -> TrickPlan:
    """Time a model's passes of 1..FEW_ROWS and MANY_ROWS new rows under each configuration
    it can run (`configs`; `run_pass(config, T)` runs one, `touch()` reads every weight) on
    this machine's current BLAS setting, and keep the fastest per T. `key` names what the
    timings depend on besides the BLAS setting (the model's shapes): a plan already measured
    in this process for the same key, configurations and setting is reused. `note` is added
    to the plan's description of the machine (what the compiled loop was compiled for)."""
    if "plain" not in configs or not set(configs) <= set(CONFIGS):
        raise ValueError(f"configs must include 'plain' and come from {tuple(CONFIGS)}: {configs}")
    kernel, threads = blas_setting()
    full_key = (key, tuple(configs), kernel, threads)
    if full_key not in _MEASURED:
        rows = [*range(1, FEW_ROWS + 1), MANY_ROWS]
        timings = fastest_pass_seconds(run_pass, touch, rows, repeats, tuple(configs))
        _MEASURED[full_key] = tuple(timings)
    machine = f"{kernel} kernels, {threads} BLAS thread(s)" + (f", {note}" if note else "")
    return TrickPlan(_MEASURED[full_key], machine=machine)


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
    """A markdown table: per configuration, the pass sizes it was chosen for, and the plain
    passes' time over the chosen ones at a few sizes (never under 1: plain is a candidate)."""
    if plan.everything is not None or not plan.timings:
        return f"fast-path tricks: {plan.machine} (nothing measured)\n"
    by_config: dict[str, list[int]] = {}
    for rows, config in sorted(plan.chosen.items()):
        by_config.setdefault(config, []).append(rows)
    shown = [T for T in (1, 2, 8, 9, FEW_ROWS, MANY_ROWS) if T in plan.chosen]

    def ratio(T: int) -> str:
        return f"{plan.seconds('plain', T) / plan.seconds(plan.chosen[T], T):.2f}"

    lines = [
        f"Fast path chosen by measuring whole passes, weights cold ({plan.machine}):",
        "",
        "| configuration | tricks | chosen for passes of |",
        "|---|---|---|",
    ]
    for config, rows in by_config.items():
        names = [plan.activation if t == "gelu" else t for t in TRICKS if t in CONFIGS[config]]
        tricks = ", ".join(names) or "none"
        if config in WHOLE_FORWARD:
            tricks = f"{WHOLE_FORWARD[config]} (other passes: {tricks})"
        lines.append(f"| {config} | {tricks} | {row_ranges(rows)} rows |")
    lines += [
        "",
        "plain pass / chosen pass at "
        + ", ".join(f"T = {T if T <= FEW_ROWS else f'>{FEW_ROWS}'}: {ratio(T)}" for T in shown)
        + " (1.00 where plain was kept)",
    ]
    return "\n".join(lines) + "\n"

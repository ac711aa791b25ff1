"""Where a verification pass spends its time, against what its bytes and FLOPs need.

    .venv/bin/python -m specdec.measure.roofline              # markdown, docs/figures/roofline.png
    .venv/bin/python -m specdec.measure.roofline --threads 2  # the same with two BLAS threads

A pass over T new positions reads every weight of the target once, whatever T is, and does
2 T FLOPs per weight. So its time cannot drop below

    floor(T) = sum over its products of max(bytes / bandwidth, FLOPs / FLOP rate)

with the two rates measured on this machine (`machine_rates`): the bandwidth at which
one-row products stream the target's own weights (what a one-row step can read), and the
FLOP rate of a large single-precision matrix product (what the cores can compute). Below
about T = 16 the bytes term wins for every linear layer: ideally a verification pass of
k + 1 <= 16 rows costs what one row costs, v(k+1) = 1.

`pass_breakdown` times each product inside real passes of the bundled target (the plain
model and the CPU fast path), and `v_curves` the whole passes for T = 1..16; the figure
(`specdec.figures.plot_roofline`) puts both models' v(T) next to the floor's.
`pass_bytes_table` prints the bytes each timed pass reads (a weight read in 16 bits counts
2 bytes: specdec/fast_cpu/sixteen.py) and its bytes/s against both bandwidths; `specdec
bench` prints the same for the passes it times.
docs/benchmarks.md ("The CPU limit") shows and reads the figures of one run.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reference.llama import Llama
from reference.model import GPT
from specdec.bundled import load_bundled_pair
from specdec.costs import time_append
from specdec.fast_cpu import fast
from specdec.fast_cpu.llama_step import LINEARS as LLAMA_STEP_LINEARS
from specdec.fast_cpu.plan import SIXTEEN_BIT
from specdec.machine import describe_machine

LINEARS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
# a Llama block's linears (reference/llama.py), each stored [C_out, C_in]: the compiled
# pass's own list, named once
LLAMA_LINEARS = LLAMA_STEP_LINEARS
F32 = 4  # bytes per float32


@dataclass
class Rates:
    bandwidth: float  # bytes/s: one-row products over the target's weights
    flops: float  # FLOP/s: a large float32 matrix product
    dram_bandwidth: float  # bytes/s: a sum over an array far larger than any cache


def median_seconds(fn, repeats: int, warmups: int = 1) -> float:
    for _ in range(warmups):  # the first calls of a process, or on cold data, are slower
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def block_weights(model: GPT) -> list[np.ndarray]:
    # every block's linear weights as [C_in, C_out], the layout a one-row product reads
    # fastest: a Llama's W [C_out, C_in] as the fast model's contiguous copy of W.T where it
    # keeps one (FastLlama.transposed_weight), else as a view of W.T (what the plain model reads)
    if not isinstance(model, Llama):
        n_layer = model.config.n_layer
        return [model.params[f"h.{i}.{n}.weight"] for i in range(n_layer) for n in LINEARS]
    names = [
        f"model.layers.{i}.{n}.weight" for i in range(model.config.n_layer) for n in LLAMA_LINEARS
    ]
    laid_out = getattr(model, "transposed_weight", None)
    return [model.params[n].T if laid_out is None else laid_out(n) for n in names]


def linear_label(name: str) -> str:
    # a linear's parameter name -> its name within a block: "h.3.attn.c_attn" -> "attn.c_attn",
    # "model.layers.3.mlp.up_proj" -> "mlp.up_proj"
    return name.split(".", 3)[3] if name.startswith("model.layers.") else name.split(".", 2)[2]


def machine_rates(model: GPT, repeats: int = 30) -> Rates:
    """The two rates of the roofline, measured here on the current BLAS threads."""
    weights = block_weights(model)
    rows = [np.ones((1, w.shape[0]), np.float32) for w in weights]

    def one_row_products():
        for x, w in zip(rows, weights, strict=True):
            x @ w

    n_bytes = sum(w.nbytes for w in weights)
    bandwidth = n_bytes / median_seconds(one_row_products, repeats)
    a = np.ones((1024, 1024), np.float32)
    flops = 2 * 1024**3 / median_seconds(lambda: a @ a, 10)
    big = np.ones(64 * 2**20, np.float32)  # 256 MiB
    dram = big.nbytes / median_seconds(big.sum, 5)
    return Rates(bandwidth, flops, dram)


def rates_words(rates: Rates) -> str:
    return (
        f"bandwidth {rates.bandwidth / 1e9:.1f} GB/s of one-row products over the target's "
        f"weights, peak {rates.flops / 1e9:.0f} GFLOP/s of a 1024^3 product, both measured here"
    )


@dataclass
class Product:
    name: str  # "attn.c_attn", ..., "attention", "logits"
    bytes: float  # what it must read per pass (weights, or the cached K/V), all layers
    flops: float  # 2 per multiply-add, all layers

    def floor(self, rates: Rates) -> float:  # seconds
        return max(self.bytes / rates.bandwidth, self.flops / rates.flops)


def weight_bytes(model: GPT, T: int) -> int:
    # bytes per weight a T-row pass reads: 2 where a fast model's plan runs that pass on its
    # 16-bit copies (specdec/fast_cpu/sixteen.py), else a float32's 4
    plan, copies = getattr(model, "plan", None), getattr(model, "sixteen_copies", None)
    if plan is None or copies is None or copies.fmt is None:
        return F32
    return 2 if plan.whole_forward(T) in SIXTEEN_BIT else F32


def pass_products(model: GPT, T: int, S: int) -> list[Product]:
    """The products of one pass over T new positions, attending over S keys in all; the
    weights at the bytes the model reads them in (`weight_bytes`), the cache in float32."""
    if not (isinstance(T, int) and isinstance(S, int) and 1 <= T <= S):
        raise ValueError(f"a pass needs 1 <= T <= S new positions and keys, got T={T}, S={S}")
    cfg = model.config
    C, L, V = cfg.n_embd, cfg.n_layer, cfg.n_vocab
    shapes, biased = linear_shapes(model)
    W = weight_bytes(model, T)
    products = [
        Product(
            name,
            L * (W * c_in * c_out + F32 * (c_out if name in biased else 0)),
            L * 2.0 * T * c_in * c_out,
        )
        for name, (c_in, c_out) in shapes.items()
    ]
    # q k^T and p v over S keys: reads the cached K and V of every layer (n_kv_head heads of
    # them: a Llama's grouped query heads share each), and multiplies every query head by them
    nq, nk = cfg.n_head * cfg.head_size, cfg.n_kv_head * cfg.head_size
    products.append(Product("attention", L * 2 * F32 * S * nk, L * 2 * 2.0 * T * S * nq))
    products.append(Product("logits", W * V * C, 2.0 * T * V * C))
    return products


def pass_bytes_table(model: GPT, seconds: dict[int, float], S: int, rates: Rates) -> str:
    """Markdown: for each timed pass (T new rows -> its seconds, after S cached positions),
    the bytes it reads (weights at the bytes the pass reads them in, and the cache) and its
    rate against the two bandwidths measured here (`machine_rates`)."""
    lines = [
        f"| T | bytes read per pass | pass ms | GB/s | of {rates.bandwidth / 1e9:.1f} GB/s "
        f"(one-row products) | of {rates.dram_bandwidth / 1e9:.1f} GB/s (256 MiB sum) |",
        "|---|---|---|---|---|---|",
    ]
    for T, t in sorted(seconds.items()):
        n = sum(p.bytes for p in pass_products(model, T, S + T))
        rate = n / t
        bits = "16-bit" if weight_bytes(model, T) == 2 else "32-bit"
        lines.append(
            f"| {T} | {n / 1e6:.1f} MB ({bits} weights) | {t * 1e3:.2f} | {rate / 1e9:.1f} | "
            f"{rate / rates.bandwidth:.2f} | {rate / rates.dram_bandwidth:.2f} |"
        )
    return "\n".join(lines)


def linear_shapes(model: GPT) -> tuple[dict[str, tuple[int, int]], set[str]]:
    # -> ({a block's linear: (C_in, C_out)}, the linears with a bias)
    cfg = model.config
    C = cfg.n_embd
    if not isinstance(model, Llama):
        shapes = {"attn.c_attn": (C, 3 * C), "attn.c_proj": (C, C), "mlp.c_fc": (C, 4 * C)}
        shapes["mlp.c_proj"] = (4 * C, C)
        return shapes, set(shapes)
    nq, nk, I = cfg.n_head * cfg.head_size, cfg.n_kv_head * cfg.head_size, cfg.n_inner  # noqa: E741
    widths = (C, nq), (C, nk), (C, nk), (nq, C), (C, I), (C, I), (I, C)
    biased = set(LLAMA_LINEARS[:3]) if cfg.attention_bias else set()  # Qwen2's q, k, v
    return dict(zip(LLAMA_LINEARS, widths, strict=True)), biased


def floor_seconds(model: GPT, T: int, S: int, rates: Rates) -> float:
    return sum(p.floor(rates) for p in pass_products(model, T, S))


def layer_by_layer(model: GPT, tokens: np.ndarray, cache) -> np.ndarray:
    # tokens [T] -> logits [T, V]: the forward through the model's own methods, block by
    # block, whatever whole-forward shortcut a fast model's plan would take
    return model.logits(model.norm(GPT.residual(model, tokens, cache), "ln_f"))


def pass_breakdown(model: GPT, context: np.ndarray, T: int, repeats: int) -> dict[str, float]:
    """Seconds per pass spent in each product (all layers), 'other' for the rest (norms,
    GELU, embeddings, cache writes, Python), and 'total'; means over `repeats` passes. The
    pass is the layer-by-layer one (`GPT.residual`, then the final norm and the logits): a fast
    model whose plan runs the pass as one compiled call (specdec/fast_cpu/step.py) has no
    parts to time."""
    spent: dict[str, float] = defaultdict(float)
    timed = {"linear": None, "attend": "attention", "logits": "logits"}

    def timer(method, label):
        def wrapped(*args):
            start = time.perf_counter()
            out = method(*args)
            spent[label or linear_label(args[1])] += time.perf_counter() - start
            return out

        return wrapped

    for name, label in timed.items():  # instance attributes shadow the class's methods
        setattr(model, name, timer(getattr(model, name), label))
    try:
        cache = model.new_cache()
        model.forward(context, cache)
        cache.commit(len(context))
        rows = np.asarray(context[:T], dtype=np.int64)
        for _ in range(3):  # warm-up
            layer_by_layer(model, rows, cache)
            cache.rollback()
        spent.clear()
        start = time.perf_counter()
        for _ in range(repeats):
            layer_by_layer(model, rows, cache)
            cache.rollback()
        total = time.perf_counter() - start
    finally:
        for name in timed:
            delattr(model, name)
    out = {name: seconds / repeats for name, seconds in spent.items()}
    out["other"] = total / repeats - sum(out.values())
    out["total"] = total / repeats
    return out


def v_curves(models: dict[str, GPT], context: np.ndarray, Ts, repeats: int, rounds: int = 3):
    """name -> {T: median seconds of a T-row pass}; the models alternate, `rounds` times."""
    seconds = {name: defaultdict(list) for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            for T in Ts:
                seconds[name][T].append(time_append(model, context, T, repeats))
    return {
        name: {T: float(np.median(s)) for T, s in per_T.items()} for name, per_T in seconds.items()
    }


def breakdown_table(model: GPT, S: int, rates: Rates, measured: dict[int, dict[str, float]]) -> str:
    # measured: T -> pass_breakdown after S cached positions -> markdown, each product's
    # measured time against its floor ("other" has none), bytes read at the first T
    Ts = sorted(measured)
    floors = {T: {p.name: p.floor(rates) for p in pass_products(model, T, S + T)} for T in Ts}
    for per_product in floors.values():
        per_product["total"] = sum(per_product.values())
    sizes = {p.name: p.bytes for p in pass_products(model, Ts[0], S + Ts[0])}
    lines = [
        f"| product ({model.config.n_layer} layers) | bytes (T = {Ts[0]}) | "
        + " | ".join(f"T={T}: measured / floor (µs)" for T in Ts)
        + " |",
        "|---|---|" + "---|" * len(Ts),
    ]
    for name in [*sizes, "other", "total"]:
        cells = [
            f"{measured[T][name] * 1e6:.0f} / "
            + (f"{floors[T][name] * 1e6:.0f}" if name in floors[T] else "-")
            for T in Ts
        ]
        size = f"{sizes[name] / 1e6:.2f} MB" if name in sizes else ""
        lines.append(f"| {name} | {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    from threadpoolctl import threadpool_limits

    from specdec.figures import plot_roofline  # lazy: matplotlib (the `lab` extra)

    parser = argparse.ArgumentParser(
        prog="python -m specdec.measure.roofline", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads")
    parser.add_argument("--repeats", type=int, default=30, help="passes per timing")
    parser.add_argument("--figure", default="docs/figures/roofline.png", help="'' for none")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.repeats < 1:
        parser.error(f"--threads and --repeats must be >= 1, got {args.threads}, {args.repeats}")
    target, draft = load_bundled_pair()
    context = np.frombuffer(b"    def area(self):\n        return self.w * self.h\n" * 8, np.uint8)
    context = context.astype(np.int64)[:400]
    S = len(context)
    Ts = range(1, 17)
    with threadpool_limits(limits=args.threads, user_api="blas"):
        models = {"plain": target, "fast path": fast(target)}
        rates = machine_rates(models["fast path"])
        curves = v_curves(models, context, Ts, args.repeats)
        breakdowns = {
            name: {T: pass_breakdown(model, context, T, args.repeats) for T in (1, 8)}
            for name, model in models.items()
        }
        draft_step = time_append(fast(draft), context, 1, 10 * args.repeats)
        machine = describe_machine().line()
    floors = {T: floor_seconds(target, T, S + T, rates) for T in Ts}
    draft_floor = floor_seconds(draft, 1, S + 1, rates)
    print(f"Machine: {machine}")
    print(
        f"BLAS threads: {args.threads}; bandwidth (one-row products over the target's weights) "
        f"{rates.bandwidth / 1e9:.1f} GB/s, a 256 MiB sum {rates.dram_bandwidth / 1e9:.1f} GB/s; "
        f"FLOP rate (1024^3 sgemm) {rates.flops / 1e9:.0f} GFLOP/s\n"
    )
    print("| T | " + " | ".join(f"{name} ms (v)" for name in curves) + " | floor ms (v) |")
    print("|---|" + "---|" * (len(curves) + 1))
    for T in Ts:
        cells = [f"{c[T] * 1e3:.2f} ({c[T] / c[1]:.2f})" for c in curves.values()]
        cells.append(f"{floors[T] * 1e3:.2f} ({floors[T] / floors[1]:.2f})")
        print(f"| {T} | " + " | ".join(cells) + " |")
    print(f"\nbytes each fast-path pass reads, S = {S} cached positions:\n")
    print(pass_bytes_table(models["fast path"], curves["fast path"], S, rates))
    for name, measured in breakdowns.items():
        print(f"\n{name}, S = {S} cached positions:\n")
        print(breakdown_table(target, S, rates, measured))
    # the draft's one-row step against its own floor: c measured, and c if both ran at theirs
    print(
        f"\ndraft one-row step (fast path): {draft_step * 1e6:.0f} us, floor "
        f"{draft_floor * 1e6:.0f} us; c = {draft_step / curves['fast path'][1]:.3f} measured, "
        f"{draft_floor / floors[1]:.3f} at both floors"
    )
    if args.figure:
        plot_roofline(curves, floors, Path(args.figure), mark_v=1.4)  # issue 14's target
        print(f"\nwritten: {args.figure}")


if __name__ == "__main__":
    main()

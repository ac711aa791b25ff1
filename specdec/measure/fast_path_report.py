"""What each trick of the CPU fast path buys on this machine, measured on the bundled pair.

    .venv/bin/python -m specdec.measure.fast_path_report            # prints markdown tables
    .venv/bin/python -m specdec.measure.fast_path_report --llama    # the same for a Llama pair

First the machine and what `fast(model)` chose for each model here (specdec/fast_cpu/plan.py:
whole passes timed under each configuration of tricks, the fastest kept per pass size), then
the tricks forced on, one by one.

Each row times the plain computation (reference/model.py) and the fast one
(specdec/fast_cpu/model.py) on the shapes the bundled pair really uses, one BLAS thread, median
of many calls. With --llama the pair is a random Llama-family pair of the bundled pair's
sizes (`LLAMA_PAIR`: GQA, SwiGLU; timings need the shapes, not trained weights), and the
tricks timed alone are the Llama block's own (specdec/fast_cpu/llama.py); its weights are cut
to bfloat16 numbers, as a bf16 checkpoint's. Last, each model's compiled passes with float32
weights against the same passes reading 16-bit copies (specdec/fast_cpu/sixteen.py). The
figures in docs/fast-path.md come from this script.
"""

from __future__ import annotations

import argparse

import numpy as np

from reference import llama as plain_llama
from reference import model as plain
from reference.config import LlamaConfig
from reference.tree import TreeShape
from specdec.bundled import load_bundled_pair
from specdec.costs import time_append, time_tree_pass
from specdec.drafting import TREE_WIDTHS
from specdec.fast_cpu import compiled as fast_compiled
from specdec.fast_cpu import llama as fast_llama
from specdec.fast_cpu import model as fast_model
from specdec.fast_cpu.plan import TrickPlan, describe_plan
from specdec.machine import describe_machine
from specdec.measure.roofline import median_seconds


def median_us(fn, repeats: int = 200) -> float:
    return median_seconds(fn, repeats, warmups=5) * 1e6


def trick_rows(target, draft, rng: np.random.Generator) -> list[tuple[str, float, float]]:
    # -> [(what, plain microseconds, fast microseconds)]
    C = target.config.n_embd
    w = target.params["h.0.mlp.c_fc.weight"]  # [C, 4C]
    w_t = np.ascontiguousarray(w.T)
    b = target.params["h.0.mlp.c_fc.bias"]
    rows = []
    for T in (2, 5, 8):
        x = rng.standard_normal((T, C)).astype(np.float32)
        rows.append(
            (
                f"target MLP c_fc [{T},{C}]@[{C},{4 * C}], sliced",
                median_us(lambda x=x: plain.linear(x, w, b)),
                median_us(lambda x=x: fast_model.linear_few_rows(x, w_t, b)),
            )
        )
        if fast_compiled.AVAILABLE:  # the `fast` extra: numba's compiled loop
            rows.append(
                (
                    f"target MLP c_fc [{T},{C}]@[{C},{4 * C}], compiled",
                    median_us(lambda x=x: plain.linear(x, w, b)),
                    median_us(lambda x=x: fast_compiled.few_rows_product(x, w_t, b)),
                )
            )
    nh, hs, S = target.config.n_head, target.config.head_size, 400
    q = rng.standard_normal((nh, 5, hs)).astype(np.float32)
    k = rng.standard_normal((nh, S, hs)).astype(np.float32)
    v = rng.standard_normal((nh, S, hs)).astype(np.float32)
    rows.append(
        (
            f"attention, 5 new rows over {S} keys (one layer)",
            median_us(lambda: plain.attention(q, k, v)),
            median_us(lambda: fast_model.attention_keys_first(q, k, v)),
        )
    )
    q1 = q[:, :1]
    rows.append(
        (
            f"attention, 1 new row over {S} keys (one layer)",
            median_us(lambda: plain.attention(q1, k, v)),
            median_us(lambda: fast_model.attention_keys_first(q1, k, v)),
        )
    )
    wte = target.params["wte.weight"]  # [V, C]
    h = rng.standard_normal((8, C)).astype(np.float32)
    quick = fast_model.fast(target, tricks="all")
    rows.append(
        (
            f"target output layer [8,{C}]@[{C},{wte.shape[0]}]",
            median_us(lambda: target.logits(h)),
            median_us(lambda: quick.logits(h)),
        )
    )
    Cd = draft.config.n_embd
    xg = rng.standard_normal((1, 4 * Cd)).astype(np.float32)
    rows.append(
        (
            f"GELU of one draft row [1,{4 * Cd}]",
            median_us(lambda: plain.gelu(xg)),
            median_us(lambda: fast_model.gelu_by_products(xg)),
        )
    )
    return rows


# the bundled pair's sizes as Llamas: widths, layers, heads (keys and values: a third, a
# half), an MLP of about GPT-2's weight count, the bundled vocabulary and context
LLAMA_PAIR = {
    "target": LlamaConfig(
        n_vocab=257, n_ctx=512, n_embd=384, n_layer=6, n_head=6, n_kv_head=2, n_inner=1024
    ),
    "draft": LlamaConfig(
        n_vocab=257, n_ctx=512, n_embd=128, n_layer=2, n_head=2, n_kv_head=1, n_inner=384
    ),
}


def random_llama_pair() -> tuple[plain_llama.Llama, plain_llama.Llama]:
    # the weights cut to bfloat16 numbers (their low 16 bits zeroed), as a checkpoint stored
    # in bf16 loads: the fast path can then keep them in 16 bits (specdec/fast_cpu/sixteen.py)
    rng = np.random.default_rng(0)
    pair = []
    for cfg in LLAMA_PAIR.values():
        params = plain_llama.init_llama_params(cfg, rng, std=0.05)
        cut = np.uint32(0xFFFF0000)
        pair.append(
            plain_llama.Llama(
                cfg, {n: (w.view(np.uint32) & cut).view(np.float32) for n, w in params.items()}
            )
        )
    return pair[0], pair[1]


def llama_trick_rows(target, draft, rng: np.random.Generator) -> list[tuple[str, float, float]]:
    # -> [(what, plain microseconds, fast microseconds)]: the Llama block's own tricks
    cfg, dcfg = target.config, draft.config
    C, nh, nkv, hs, S = cfg.n_embd, cfg.n_head, cfg.n_kv_head, cfg.head_size, 400
    rows = []
    for R, width in ((1, dcfg.n_embd), (8, C)):
        x = rng.standard_normal((R, width)).astype(np.float32)
        g = np.ones(width, np.float32)
        if fast_compiled.AVAILABLE:
            rows.append(
                (
                    f"RMSNorm [{R},{width}], compiled",
                    median_us(lambda x=x, g=g: plain_llama.rms_norm(x, g, 1e-6)),
                    median_us(lambda x=x, g=g: fast_llama.rms_norm_rows(x, g, 1e-6)),
                )
            )
    gate = rng.standard_normal((1, dcfg.n_inner)).astype(np.float32)
    rows.append(
        (
            f"SiLU of one draft row [1,{dcfg.n_inner}]",
            median_us(lambda: plain_llama.silu(gate)),
            median_us(lambda: fast_llama.silu_by_products(gate)),
        )
    )
    q = rng.standard_normal((nh, 5, hs)).astype(np.float32)
    angles = rng.uniform(-3, 3, (1, 5, hs // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    wide = fast_llama.whole_width(cos, sin)  # made once per model
    rows.append(
        (
            f"RoPE of 5 rows' queries [{nh},5,{hs}]",
            median_us(lambda: plain_llama.rotate(q, cos, sin)),
            median_us(lambda: fast_llama.rotate_by_products(q, *wide)),
        )
    )
    k = rng.standard_normal((nkv, S, hs)).astype(np.float32)
    v = rng.standard_normal((nkv, S, hs)).astype(np.float32)
    rows.append(
        (
            f"grouped attention, {nh} query / {nkv} key heads, 5 rows over {S} keys",
            median_us(lambda: plain_llama.grouped_attention(q, k, v)),
            median_us(lambda: fast_model.attention_keys_first(q, k, v)),
        )
    )
    return rows


def pass_rows(target, draft, context: np.ndarray) -> list[tuple[str, float, float]]:
    # whole forward passes after `context` is cached: the draft's one-row step, the
    # target's one-row step and its T-row verification passes
    fast_target, fast_draft = fast_model.fast(target), fast_model.fast(draft)
    rows = [
        (
            "draft one-row step",
            time_append(draft, context, 1, 200) * 1e6,
            time_append(fast_draft, context, 1, 200) * 1e6,
        )
    ]
    for T in (1, 2, 4, 5, 8):
        rows.append(
            (
                f"target pass over {T} new row(s)",
                time_append(target, context, T, 60) * 1e6,
                time_append(fast_target, context, T, 60) * 1e6,
            )
        )
    for name, widths in TREE_PASSES.items():  # the method table's trees, the root included
        parents = TreeShape.of_widths(widths).parents
        rows.append(
            (
                f"target tree pass, {name} {widths}: {len(parents)} rows",
                time_tree_pass(target, context, parents, 60) * 1e6,
                time_tree_pass(fast_target, context, parents, 60) * 1e6,
            )
        )
    return rows


def sixteen_bit_rows(models: dict, context: np.ndarray, rounds: int = 5) -> list:
    # -> [(what, float32 microseconds, 16-bit microseconds)]: each model's compiled passes
    # (rows together, and one by one for one row) on float32 weights and on their 16-bit
    # copies, the two taking turns, `rounds` medians of 30 passes, the median of those kept
    if not fast_compiled.AVAILABLE:
        return []
    cases = [(name, T, "fused") for name in models for T in (1, 2, 4, 8)]
    cases += [(name, 1, "stepwise") for name in models]
    quick = {name: fast_model.fast(model, "none") for name, model in models.items()}
    plans = {c: TrickPlan.fixed(c) for c in ("fused", "stepwise", "fused16", "stepwise16")}
    formats = {q.sixteen_copies.fmt for q in quick.values()}
    if None in formats:
        return []  # weights that are no 16-bit numbers: nothing to compare
    seconds = {(case, c): [] for case in cases for c in (case[2], case[2] + "16")}
    for _ in range(rounds):
        for case in cases:
            name, T, config = case
            for c in (config, config + "16"):
                quick[name].plan = plans[c]
                seconds[case, c].append(time_append(quick[name], context, T, 30))
    return [
        (
            f"{name} {config} pass over {T} row(s), {'/'.join(sorted(formats))}",
            float(np.median(seconds[(name, T, config), config])) * 1e6,
            float(np.median(seconds[(name, T, config), config + "16"])) * 1e6,
        )
        for name, T, config in cases
    ]


# specdec/drafting.py's static trees: 9 and 10 rows per verification pass (root + candidates)
TREE_PASSES = {name: TREE_WIDTHS[name] for name in ("tree", "tree-wide")}


def main(argv=None) -> None:
    from threadpoolctl import threadpool_limits

    parser = argparse.ArgumentParser(
        prog="python -m specdec.measure.fast_path_report", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--llama", action="store_true", help="a random Llama pair of the bundled pair's sizes"
    )
    args = parser.parse_args(argv)
    target, draft = random_llama_pair() if args.llama else load_bundled_pair()
    context = np.frombuffer(b"    def area(self):\n        return self.w * self.h\n" * 8, np.uint8)
    context = context.astype(np.int64)[:400]
    with threadpool_limits(limits=1, user_api="blas"):
        print(f"Machine: {describe_machine().line()}")
        print(f"Compiled loop (numba): {fast_compiled.compiled_for()}\n")
        for name, model in (("target", target), ("draft", draft)):
            print(f"**{name}**: " + describe_plan(fast_model.fast(model).plan))
        rng = np.random.default_rng(0)
        rows = (llama_trick_rows if args.llama else trick_rows)(target, draft, rng)
        rows += pass_rows(target, draft, context)
        halves = sixteen_bit_rows({"target": target, "draft": draft}, context)
    print("Every trick forced on (whole passes: the measured choice):\n")
    print("| what | plain (us) | fast path (us) | plain / fast |")
    print("|---|---|---|---|")
    for what, slow, quick in rows:
        print(f"| {what} | {slow:.1f} | {quick:.1f} | {slow / quick:.2f}x |")
    if halves:  # the compiled passes with the weights in 16 bits (SPECDEC_FAST_16BIT aside)
        print("\nThe compiled passes, weights in float32 and in 16 bits:\n")
        print("| what | float32 (us) | 16-bit (us) | float32 / 16-bit |")
        print("|---|---|---|---|")
        for what, wide, narrow in halves:
            print(f"| {what} | {wide:.1f} | {narrow:.1f} | {wide / narrow:.2f}x |")


if __name__ == "__main__":
    main()

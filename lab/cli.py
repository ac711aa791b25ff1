"""The `specdec` command. All printing and timing lives here, at the edge."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from lab.bench import AR_DECODE, SPEC_DECODE
from lab.bundled import MODELS_DIR as BUNDLED
from lab.drafting import DRAFTERS, make_drafter
from lab.fast_cpu import fast
from lab.report import describe_round, render_tokens, stats_table
from lab.standins import random_pair
from lab.timing import StageClock
from reference.model import GPT
from reference.sampling import SamplingParams
from reference.tokenizer import EOS, decode, encode

# A prompt the bundled target continues as code at greedy (small byte-level models loop on
# many prompts; this one gives varied lines: docs/training.md shows a few)
DEFAULT_PROMPT = (
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
    "    def __repr__(self):\n"
)


def load_pair(args) -> tuple[GPT, GPT, str]:
    target, draft, source = load_plain_pair(args)
    if args.plain:
        return target, draft, source + ", plain model"
    return fast(target), fast(draft), source + ", CPU fast path (docs/fast-path.md)"


def load_plain_pair(args) -> tuple[GPT, GPT, str]:
    target_dir = Path(args.target or BUNDLED / "target")
    draft_dir = Path(args.draft or BUNDLED / "draft")
    if not args.random and (target_dir / "config.json").exists():
        from reference.weights import load_gpt2

        return load_gpt2(target_dir), load_gpt2(draft_dir), f"{target_dir} + {draft_dir}"
    target, draft = random_pair(args.seed)
    why = "--random" if args.random else f"no trained pair in {target_dir.parent}"
    return target, draft, f"random weights ({why}: untrained, the output is noise)"


def backend_core(args):
    # -> (the core module the loops come from, a line naming where they run)
    if args.backend == "gpu":
        import gpu
        from gpu.backend import backend_name

        return gpu, f"gpu twin: {backend_name()}"
    import reference

    return reference, "reference: NumPy on the CPU"


def cmd_demo(args) -> int:
    core, where = backend_core(args)
    if args.backend == "gpu":  # the plain weights, copied to the device once
        target, draft, source = load_plain_pair(args)
        target, draft = core.GPT(target.config, target.params), core.GPT(draft.config, draft.params)
    else:
        target, draft, source = load_pair(args)
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p)
    prompt = encode(args.prompt)
    print(f"models: {source}")
    print(f"backend: {where}; drafter: {args.drafter}")
    stop = "" if args.min_confidence is None else f" (stops below {args.min_confidence:g})"
    print(
        f"sampling: {sampling.describe()}, k={args.k}{stop}, max_new_tokens={args.max_new_tokens}"
    )
    print(f"prompt: {args.prompt!r}\n")

    drafter = make_drafter(args.drafter, core, target, draft, args.min_confidence)
    spec_clock, ar_clock = StageClock(), StageClock()
    spec = core.speculative_generate(
        target,
        drafter,
        prompt,
        k=args.k,
        max_new_tokens=args.max_new_tokens,
        rng=np.random.default_rng(args.seed),
        sampling=sampling,
        eos_id=EOS,
        trace=True,
        clock=spec_clock,
    )
    ar = core.generate(
        target,
        prompt,
        max_new_tokens=args.max_new_tokens,
        rng=np.random.default_rng(args.seed),
        sampling=sampling,
        eos_id=EOS,
        clock=ar_clock,
    )

    for n, r in enumerate(spec.trace[: args.show_rounds], start=1):
        print(describe_round(n, r))
    if len(spec.trace) > args.show_rounds:
        print(f"... {len(spec.trace) - args.show_rounds} more rounds (--show-rounds to see them)")

    colour = sys.stdout.isatty() and not args.no_colour
    legend = (
        "green = accepted draft, red = correction, blue = bonus"
        if colour
        else "plain = accepted draft, [x] = correction, {x} = bonus"
    )
    print(f"\ngenerated text ({legend}):\n")
    print(args.prompt + render_tokens(spec.trace, colour))
    # decode phase only: the prompt's prefill is the same work for both
    timings = {
        "autoregressive_tps": len(ar) / ar_clock.total(*AR_DECODE),
        "speculative_tps": len(spec.tokens) / spec_clock.total(*SPEC_DECODE),
    }
    print("\nstatistics (one run each, decode phase; `specdec bench` measures properly):")
    print(stats_table(spec.stats, timings))
    if sampling.greedy:
        same = "yes" if ar == spec.tokens else "NO"
        print(f"\ngreedy: speculative output identical to autoregressive output: {same}")
    else:
        print(f"\nautoregressive sample for comparison:\n{args.prompt + decode(ar)}")
    return 0


def parse_list(text: str, kind):
    """'1-8' or '1,2,4' -> [1, ..., 8] / [1, 2, 4]."""
    if kind is int and "-" in text:
        lo, hi = (int(x) for x in text.split("-"))
        return list(range(lo, hi + 1))
    return [kind(x) for x in text.split(",")]


def machine_description() -> str:
    import os
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, NumPy {np.__version__}"
    )


def bench_prompts(args) -> list[np.ndarray]:
    from lab.bench import CODE_PROMPTS, COPY_PROMPTS, TEXT_PROMPTS, held_out_code_prompts

    if args.prompts == "heldout":
        return held_out_code_prompts(args.n_prompts)
    texts = {"text": TEXT_PROMPTS, "code": CODE_PROMPTS, "copy": COPY_PROMPTS}[args.prompts]
    return [encode(t) for t in texts]


def cmd_bench_gpu(args) -> int:
    # the twin's benchmark (lab/gpu_bench.py): batch 1 over k, batch scaling, transfers
    from lab import gpu_bench

    gpu_argv = [
        "--repeats",
        str(args.repeats),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--n-prompts",
        str(args.n_prompts),
        "--ks",
        args.ks,
        "--batches",
        args.batches,
        "--out",
        args.out,
    ]
    gpu_bench.main(gpu_argv)
    return 0


def cmd_bench(args) -> int:
    from tqdm import tqdm

    from lab.bench import markdown_report, run_bench, run_transformers_rows
    from lab.costs import measure_costs
    from lab.figures import (
        plot_accepted_histogram,
        plot_measured_vs_predicted,
        plot_speedup_vs_k,
    )

    if args.backend == "gpu":
        return cmd_bench_gpu(args)
    target, draft, source = load_pair(args)
    prompts = bench_prompts(args)
    ks, temperatures = parse_list(args.ks, int), parse_list(args.temperatures, float)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"models: {source}")
    context = np.concatenate([prompts[0]] * 8)[: target.config.n_ctx // 2]
    costs = measure_costs(target, draft, context, max_T=max(ks) + 1)
    total = len(temperatures) * args.repeats * len(prompts) * len(ks)
    with tqdm(total=total, desc="bench", unit="run") as bar:
        report = run_bench(
            target,
            draft,
            prompts,
            ks,
            temperatures,
            args.max_new_tokens,
            args.repeats,
            costs,
            seed=args.seed,
            progress=bar,
            min_confidence=args.min_confidence,
            drafter_name=args.drafter,
        )
    # transformers' assisted generation is compared with the draft-model drafter only
    if not args.no_transformers and args.drafter == "model":
        for t in temperatures:
            best = report.best(t)
            print(f"transformers assisted generation at T={t:g}, k={best.k} ...")
            report.transformers_rows.append(
                run_transformers_rows(
                    Path(args.target or BUNDLED / "target"),
                    Path(args.draft or BUNDLED / "draft"),
                    target,
                    draft,
                    prompts,
                    best.k,
                    t,
                    args.max_new_tokens,
                    args.repeats,
                    args.seed,
                    args.min_confidence,
                )
            )
    command = "specdec bench " + " ".join(sys.argv[2:]) if len(sys.argv) > 1 else "specdec bench"
    text = markdown_report(report, machine_description(), command.strip())
    (out / "bench.md").write_text(text)
    plot_speedup_vs_k(report, out / "speedup_vs_k.png")
    plot_measured_vs_predicted(report, out / "measured_vs_predicted.png")
    best = report.best(temperatures[0])
    plot_accepted_histogram(
        best.histogram,
        out / "accepted_histogram.png",
        f"Accepted drafts per round (T = {best.temperature:g}, k = {best.k})",
    )
    print(text)
    print(
        f"written: {out}/bench.md, speedup_vs_k.png, measured_vs_predicted.png, "
        "accepted_histogram.png"
    )
    return 0


def add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", help="target checkpoint dir (config.json + model.safetensors)")
    parser.add_argument("--draft", help="draft checkpoint dir")
    parser.add_argument("--random", action="store_true", help="use untrained random models")
    parser.add_argument(
        "--plain",
        action="store_true",
        help="run the plain model instead of the CPU fast path (same logits, slower)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    parser.add_argument(
        "--drafter",
        choices=DRAFTERS,
        default="model",
        help="model: the draft model (default); lookup: prompt lookup / n-gram drafts from "
        "the text so far; hybrid: lookup when it matches, the draft model otherwise",
    )
    parser.add_argument(
        "--backend",
        choices=["cpu", "gpu"],
        default="cpu",
        help="cpu: the NumPy reference (default); gpu: the CuPy twin (gpu/; NumPy mode "
        "without a CUDA device)",
    )
    parser.add_argument(
        "--min-confidence",
        type=float,
        default=None,
        help="stop a round's drafting early when the draft's top probability is below this "
        "(k becomes the most a round drafts); default: always draft k",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="speculative decoding on the bundled pair, round by round")
    demo.add_argument("--prompt", default=DEFAULT_PROMPT)
    demo.add_argument("-k", type=int, default=4, help="draft length per round")
    demo.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    demo.add_argument("--top-k", type=int, default=None)
    demo.add_argument("--top-p", type=float, default=1.0)
    demo.add_argument("--max-new-tokens", type=int, default=120)
    demo.add_argument("--show-rounds", type=int, default=6)
    demo.add_argument("--no-colour", action="store_true")
    add_model_options(demo)
    demo.set_defaults(func=cmd_demo)

    bench = sub.add_parser("bench", help="autoregressive vs speculative, swept over k and T")
    bench.add_argument("--ks", default="1-8", help="draft lengths, e.g. 1-8 or 1,2,4")
    bench.add_argument("--temperatures", default="0,0.8", help="comma-separated; 0 = greedy")
    bench.add_argument(
        "--prompts",
        choices=["heldout", "code", "text", "copy"],
        default="heldout",
        help="heldout: snippets of stdlib files the models never saw (default); code: four "
        "hand-written code openings; text: free English text; copy: prompts whose "
        "continuation repeats them (lookup drafting's case)",
    )
    bench.add_argument("--n-prompts", type=int, default=6, help="number of held-out snippets")
    bench.add_argument(
        "--batches", default="1,8,64", help="with --backend gpu: batch sizes, e.g. 1,8,64"
    )
    bench.add_argument("--max-new-tokens", type=int, default=128)
    bench.add_argument("--repeats", type=int, default=5)
    bench.add_argument("--out", default="bench-results", help="folder for bench.md and PNGs")
    bench.add_argument(
        "--no-transformers",
        action="store_true",
        help="skip the row against transformers' assisted generation",
    )
    add_model_options(bench)
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    from threadpoolctl import threadpool_limits

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        # BLAS threads: with as many threads as cores, any other busy process makes the
        # threads of a small matrix product wait for each other (docs/benchmarks.md measured
        # how much). One thread is steady; --threads changes it.
        with threadpool_limits(limits=args.threads, user_api="blas"):
            return args.func(args)
    except ValueError as err:  # bad input: one clear line, no traceback
        parser.exit(2, f"specdec: error: {err}\n")


if __name__ == "__main__":
    raise SystemExit(main())

"""`specdec bench`: autoregressive vs speculative, swept over k and T, written as it is
measured (bench.md, bench.json, figures); several drafters make the method table
(specdec/cli/methods.py), --backend gpu the twin's benchmark (specdec/measure/gpu_bench.py)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from reference.sampling import SamplingParams
from reference.weights import save_gpt2
from specdec.cli.inputs import (
    bench_prompts,
    checkpoint_dirs,
    eagle_dir,
    fast_pair,
    load_plain_pair,
    self_draft_dir,
)
from specdec.cli.methods import cmd_methods
from specdec.cli.options import (
    PROMPT_SETS,
    HelpWithDefaults,
    add_model_options,
    check_drafter,
    check_k,
    parse_list,
    prompt_set_names,
    tree_widths,
    write_atomically,
)
from specdec.costs import measure_costs
from specdec.drafting import TREE_DRAFTERS, TREE_WIDTHS
from specdec.machine import describe_machine
from specdec.measure.bench import (
    BenchReport,
    json_report,
    markdown_report,
    run_bench,
    run_transformers_rows,
)
from specdec.measure.methods import parse_drafters
from specdec.measure.roofline import floor_seconds, machine_rates, pass_bytes_table, rates_words


def add_parser(sub) -> None:
    bench = sub.add_parser(
        "bench",
        help="autoregressive vs speculative, swept over k and T",
        formatter_class=HelpWithDefaults,
    )
    bench.add_argument("--ks", default="1-8", help="draft lengths, e.g. 1-8 or 1,2,4")
    bench.add_argument("--temperatures", default="0,0.8", help="comma-separated; 0 = greedy")
    bench.add_argument(
        "--prompts",
        default="heldout",
        help="heldout: snippets of stdlib files the models never saw; code: four "
        "hand-written code openings; text: free English text; copy: prompts whose "
        "continuation repeats them (lookup drafting's case); with several drafters, a comma "
        "list (e.g. heldout,copy): one table per set",
    )
    bench.add_argument("--n-prompts", type=int, default=6, help="number of held-out snippets")
    bench.add_argument(
        "--batches", default="1,8,64", help="with --backend gpu: batch sizes, e.g. 1,8,64"
    )
    bench.add_argument("--max-new-tokens", type=int, default=128, help="tokens per run")
    bench.add_argument("--repeats", type=int, default=5, help="repeats of every measurement")
    bench.add_argument("--out", default="bench-results", help="folder for bench.md and PNGs")
    bench.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the report of an earlier run in --out (otherwise refused)",
    )
    bench.add_argument(
        "--no-transformers",
        action="store_true",
        help="skip the row against transformers' assisted generation (needs torch)",
    )
    add_model_options(bench)
    bench.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    ks, temperatures = check_bench_options(args)  # every option, before any work
    if len(parse_drafters(args.drafter)) > 1:
        return cmd_methods(args)
    if args.backend == "gpu":
        return cmd_bench_gpu(args)
    from tqdm import tqdm

    plain_target, plain_draft, tokenizer, source = load_plain_pair(args)
    prompts = bench_prompts(args, tokenizer)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # each trick kept only where it measured faster here (specdec/fast_cpu/plan.py), for
    # either family
    plain = args.plain
    target, draft, source = fast_pair(plain_target, plain_draft, source, plain)
    print(f"models: {source}")
    print(f"machine: {describe_machine().line()}")
    context = np.concatenate([prompts[0]] * 8)[: target.config.n_ctx // 2]
    # every T in turn, the fastest of 30 passes kept: load moves no T more than another
    costs = measure_costs(target, draft, context, max(ks) + 1)
    plain_costs = None
    if not plain:  # the same profile of the plain model: is the fast path faster here?
        plain_costs = measure_costs(plain_target, plain_draft, context, max(ks) + 1)
    total = len(temperatures) * args.repeats * len(prompts) * len(ks)
    report = BenchReport([], costs, args.max_new_tokens, args.repeats, len(prompts))
    report.min_confidence, report.drafter = args.min_confidence, args.drafter
    report.plain_costs = plain_costs
    report.plans = {} if plain else {"target": target.plan, "draft": draft.plan}
    rates = machine_rates(target)  # the floors' two rates, on this machine now
    report.rates_text = rates_words(rates)
    report.floors = {
        T: floor_seconds(target, T, len(context) + T, rates) for T in costs.target_append
    }
    # what each timed target pass reads (16-bit weights count 2 bytes) against the bandwidth
    read = pass_bytes_table(target, costs.target_append, len(context), rates)
    print(f"target passes, bytes read:\n{read}")
    n_cells = len(temperatures) * len(ks)

    def cell_done(point) -> None:  # rewrite the report after every finished (T, k) cell
        report.points.append(point)
        done = len(report.points)
        write_bench_report(out, report, f"partial: {done} of {n_cells} (T, k) cells measured")

    try:
        with tqdm(total=total, desc="bench", unit="run") as bar:
            run_bench(
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
                drafter_options={
                    "self_draft_dir": self_draft_dir(args),
                    "tree_widths": tree_widths(args),
                    "eagle_dir": eagle_dir(args, [args.drafter]),
                    "eagle_seed": args.seed,
                },
                on_point=cell_done,
            )
        if wants_transformers_row(args):
            transformers_rows(args, report, target, draft, prompts, temperatures, out)
    except BaseException as stop:  # Ctrl-C or a late failure: keep what was measured
        why = "interrupted" if isinstance(stop, KeyboardInterrupt) else f"stopped: {stop}"
        done = len(report.points)
        write_bench_report(
            out,
            report,
            f"partial ({why}); {done} of {n_cells} (T, k) cells measured, every row shown "
            "was measured",
        )
        print(
            f"partial results kept in {out}/bench.md and bench.json: {done} of {n_cells} "
            "(T, k) cells",
            file=sys.stderr,
        )
        raise
    text = write_bench_report(out, report, "complete")
    write_bench_figures(out, report, temperatures[0])
    print(text)
    print(
        f"written: {out}/bench.md, bench.json, speedup_vs_k.png, measured_vs_predicted.png, "
        "accepted_histogram.png"
    )
    return 0


def cmd_bench_gpu(args) -> int:
    # the twin's benchmark (specdec/measure/gpu_bench.py): batch 1 over k, batch scaling, transfers
    from specdec.measure import gpu_bench  # lazy: it imports the twin, so CuPy and a CUDA device

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
        "--drafter",
        args.drafter,
        "--out",
        args.out,
    ]
    widths = tree_widths(args)
    if widths is not None:
        gpu_argv += ["--tree", ",".join(map(str, widths))]
    gpu_bench.main(gpu_argv)
    return 0


def check_tree_ks(ks: list[int], depth: int) -> None:
    # a tree's k is the depth it is cut at: a k above its depth would measure the same tree
    # again under another label
    deeper = [k for k in ks if k > depth]
    if deeper:
        raise ValueError(
            f"--ks {','.join(map(str, deeper))}: a tree drafter's k is the depth its trees are "
            f"cut at, at most the shape's depth {depth} (--tree sets the shape); give ks <= {depth}"
        )


def check_bench_options(args) -> tuple[list[int], list[float]]:
    # -> (ks, temperatures); every refusal happens here, before a model is loaded
    for option, value in (("--repeats", args.repeats), ("--n-prompts", args.n_prompts)):
        if value < 1:
            raise ValueError(f"{option} must be >= 1, got {value}")
    drafters = parse_drafters(args.drafter)
    for name in prompt_set_names(args, several=len(drafters) > 1):
        if name not in PROMPT_SETS:
            raise ValueError(
                f"--prompts {args.prompts!r}: each set must be one of {', '.join(PROMPT_SETS)}"
            )
    if len(drafters) > 1 and args.backend == "gpu":
        raise ValueError("the method table (several drafters) runs on the cpu backend only")
    if args.backend == "gpu" and args.target is not None:
        # gpu_bench loads the bundled pair itself: another pair would be silently replaced
        raise ValueError(
            "--backend gpu benches the bundled GPT-2 pair only so far (its GPU bench loads that "
            "pair itself); drop --target/--draft, or bench this pair with --backend cpu"
        )
    if len(drafters) > 1 and args.tree is not None:
        raise ValueError("--tree shapes one tree drafter; the method table uses each one's own")
    if len(drafters) == 1:
        check_drafter(drafters[0], args.backend)
        tree_widths(args)
    eagle_dir(args, drafters)  # EAGLE weights that are missing: refused before any work
    ks = parse_list(args.ks, int, "--ks")
    for k in ks:
        check_k(k, args.max_new_tokens)
    if len(drafters) == 1 and drafters[0] in TREE_DRAFTERS:
        check_tree_ks(ks, len(tree_widths(args) or TREE_WIDTHS[drafters[0]]))
    temperatures = parse_list(args.temperatures, float, "--temperatures")
    for t in temperatures:
        SamplingParams(temperature=t)  # its own check: finite and >= 0
    if args.backend == "gpu":
        if any(b < 1 for b in parse_list(args.batches, int, "--batches")):
            raise ValueError(f"--batches {args.batches!r}: every batch size must be >= 1")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder for the report and figures")
    report_name = "methods.md" if len(drafters) > 1 else "bench.md"
    written = out / ("gpu_bench.json" if args.backend == "gpu" else report_name)
    if written.exists() and not args.overwrite:
        raise ValueError(
            f"--out {out} already holds {written.name} from an earlier run; pass --overwrite "
            "to replace it, or another --out"
        )
    if wants_transformers_row(args) and args.backend == "cpu":
        import importlib.util

        missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            raise ValueError(
                f"the transformers row needs {' and '.join(missing)} (pip install -e "
                "'.[interop]'); or pass --no-transformers"
            )
    return ks, temperatures


def wants_transformers_row(args) -> bool:
    # transformers' assisted generation is compared with the draft-model drafter only
    return not args.no_transformers and args.drafter == "model"


def transformers_rows(args, report, target, draft, prompts, temperatures, out: Path) -> None:
    # transformers' assisted generation on the very same weights: the checkpoint folders,
    # or, with --random, the random pair saved to a temporary folder for this run
    with tempfile.TemporaryDirectory(prefix="specdec-random-") as tmp:
        if args.random:
            target_dir, draft_dir = Path(tmp) / "target", Path(tmp) / "draft"
            save_gpt2(target, target_dir, dtype=np.float32)
            save_gpt2(draft, draft_dir, dtype=np.float32)
        else:
            target_dir, draft_dir = checkpoint_dirs(args)
        for t in temperatures:
            best = report.best(t)
            print(f"transformers assisted generation at T={t:g}, k={best.k} ...")
            row = run_transformers_rows(
                target_dir,
                draft_dir,
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
            report.transformers_rows.append(row)
            write_bench_report(out, report, f"partial: transformers row T={t:g} measured")


def write_bench_report(out: Path, report, status: str) -> str:
    # bench.md and bench.json, rewritten after each step of the run (each through a
    # temporary file and a rename, so an interrupt never leaves half a file); bench.md's
    # first line says how far it got
    command = "specdec bench " + " ".join(sys.argv[2:]) if len(sys.argv) > 1 else "specdec bench"
    machine = describe_machine()
    text = f"Status: {status}\n\n" + markdown_report(report, machine.line(), command.strip())
    write_atomically(out / "bench.md", text)
    data = json_report(report, machine.as_dict(), command.strip(), status)
    write_atomically(out / "bench.json", json.dumps(data, indent=1) + "\n")
    return text


def write_bench_figures(out: Path, report, temperature: float) -> None:
    # matplotlib: an optional extra (`lab`), and about a second to import; only a finished
    # bench plots, so `specdec --help`, demo and a refused option never pay it
    from specdec.figures import (  # lazy: matplotlib (above)
        plot_accepted_histogram,
        plot_measured_vs_predicted,
        plot_speedup_vs_k,
    )

    plot_speedup_vs_k(report, out / "speedup_vs_k.png")
    plot_measured_vs_predicted(report, out / "measured_vs_predicted.png")
    best = report.best(temperature)
    plot_accepted_histogram(
        best.histogram,
        out / "accepted_histogram.png",
        f"Accepted drafts per round (T = {best.temperature:g}, k = {best.k})",
    )

"""The `specdec` command. All printing and timing lives here, at the edge."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from reference.model import GPT
from reference.sampling import SamplingParams
from specdec.bench import AR_DECODE, SPEC_DECODE
from specdec.bundled import MODELS_DIR as BUNDLED
from specdec.bundled import bundled_pair_available
from specdec.course import unpack_course
from specdec.drafting import (
    DRAFTERS,
    TREE_DRAFTERS,
    TREE_WIDTHS,
    describe_tree,
    generate_function,
    make_drafter,
)
from specdec.fast_cpu import fast
from specdec.grading import add_class_parser, add_grade_parser
from specdec.machine import describe_machine
from specdec.methods import parse_drafters
from specdec.report import (
    COLOUR_LEGEND,
    MARKS_LEGEND,
    describe_round,
    render_marked,
    render_tokens,
    stats_table,
)
from specdec.standins import random_pair
from specdec.text import ByteTokenizer, load_text_pair
from specdec.timing import StageClock

# A prompt the bundled target continues as code at greedy (small byte-level models loop on
# many prompts; this one gives varied lines: docs/training.md shows a few)
DEFAULT_PROMPT = (
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
    "    def __repr__(self):\n"
)


def load_pair(args) -> tuple[GPT, GPT, object, str]:
    # -> (target, draft, the tokenizer they share, a line saying where they came from)
    target, draft, tokenizer, source = load_plain_pair(args)
    if args.plain:
        return target, draft, tokenizer, source + ", plain model"
    fast_source = source + ", CPU fast path (docs/fast-path.md)"
    return fast(target), fast(draft), tokenizer, fast_source


def load_plain_pair(args) -> tuple[GPT, GPT, object, str]:
    # Never a guess: random weights only with --random, the bundled pair when no folder is
    # named, and a named folder that is missing or not a checkpoint is an error (exit 2).
    if args.random:
        if args.target or args.draft:
            raise ValueError("--random makes untrained models: give it or --target/--draft")
        target, draft = random_pair(args.seed)
        untrained = "random weights (--random: untrained, the output is noise)"
        return target, draft, ByteTokenizer(), untrained
    target_dir, draft_dir = checkpoint_dirs(args)
    pair = load_text_pair(target_dir, draft_dir)  # checkpoints, one tokenizer, vocabularies
    return pair.target, pair.draft, pair.tokenizer, f"{target_dir} + {draft_dir}"


def checkpoint_dirs(args) -> tuple[Path, Path]:
    # -> (target folder, draft folder): both named, or neither (the bundled pair)
    if (args.target is None) != (args.draft is None):
        raise ValueError(
            "give --target and --draft together (a pair shares one tokenizer); "
            "give neither for the bundled pair"
        )
    if args.target is None:
        if not bundled_pair_available():
            raise ValueError(
                f"the bundled pair is missing from {BUNDLED}; reproduce it with "
                "`python -m specdec.training.train_pair` (docs/training.md), or pass --random for "
                "untrained weights"
            )
        return BUNDLED / "target", BUNDLED / "draft"
    return checkpoint_dir(args.target, "--target"), checkpoint_dir(args.draft, "--draft")


def self_draft_dir(args) -> Path | None:
    # the self-drafting parts of this target: named, the bundled ones for the bundled pair,
    # else none (never the bundled target's parts for another model)
    if args.self_draft is not None:
        path = Path(args.self_draft)
        if not path.is_dir():
            raise ValueError(f"--self-draft {path}: no such folder")
        return path
    return BUNDLED / "self_draft" if args.target is None and not args.random else None


def tree_widths(args) -> tuple[int, ...] | None:
    # --tree "2,1,1,1" -> (2, 1, 1, 1); only with a tree drafter
    if getattr(args, "tree", None) is None:
        return None
    if not args.drafter.startswith("tree"):
        raise ValueError(
            "--tree gives a tree's shape: use it with --drafter tree, tree-wide or tree-heads"
        )
    widths = tuple(parse_list(args.tree, int, "--tree"))
    if not widths or min(widths) < 1:
        raise ValueError(f"--tree {args.tree!r}: every width must be >= 1")
    return widths


def check_drafter(name: str) -> None:
    # every drafter runs on both backends: the GPU twin has each one's twin (gpu/)
    if name not in DRAFTERS:
        raise ValueError(f"--drafter {name!r}: demo runs one of {', '.join(DRAFTERS)}")


def checkpoint_dir(text: str, option: str) -> Path:
    path = Path(text)
    if not path.exists():
        raise ValueError(
            f"{option} {text}: no such folder (a checkpoint folder holds config.json + "
            "model.safetensors; untrained weights need --random)"
        )
    if not path.is_dir():
        raise ValueError(
            f"{option} {text} is a file; give the folder that holds config.json + model.safetensors"
        )
    return path


def backend_core(args):
    # -> (the core module the loops come from, a line naming where they run)
    if args.backend == "gpu":
        import gpu
        from gpu.backend import backend_name

        return gpu, f"gpu twin: {backend_name()}"
    import reference

    return reference, "reference: NumPy on the CPU"


def cmd_demo(args) -> int:
    # before a model is loaded or a cache allocated (no -k: chosen below, by measurement)
    check_k(1 if args.k is None else args.k, args.max_new_tokens)
    check_drafter(args.drafter)
    tree_widths(args)
    if args.k is not None and drafter_is_tree(args):
        raise ValueError(
            f"-k is a chain's draft length; --drafter {args.drafter} drafts a tree whose depth "
            "is set by --tree (children per node at each depth): leave -k out"
        )
    if args.show_rounds < 0:
        raise ValueError(f"--show-rounds must be >= 0, got {args.show_rounds}")
    text = prompt_text(args)
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p)
    core, where = backend_core(args)
    if args.backend == "gpu":  # the plain weights, copied to the device once
        target, draft, tokenizer, source = load_plain_pair(args)
        target, draft = core.GPT(target.config, target.params), core.GPT(draft.config, draft.params)
    else:
        target, draft, tokenizer, source = load_pair(args)
    prompt = tokenizer.encode(text)
    drafter = make_drafter(  # before any output: its parts may be missing
        args.drafter,
        core,
        target,
        draft,
        args.min_confidence,
        self_draft_dir(args),
        tree_widths=tree_widths(args),
    )
    print(f"models: {source}")
    print(f"machine: {describe_machine().line()}")
    print(f"tokenizer: {tokenizer.name}; EOS id {tokenizer.eos_id}")
    print(f"backend: {where}; drafter: {args.drafter}")
    k, why_k = demo_k(args, target, draft, prompt, sampling)
    stop = "" if args.min_confidence is None else f" (stops below {args.min_confidence:g})"
    print(f"sampling: {sampling.describe()}, k={k}{stop}, max_new_tokens={args.max_new_tokens}")
    if why_k:
        print(why_k)
    print(f"prompt ({len(prompt)} tokens): {text!r}\n")

    spec_clock, ar_clock = StageClock(), StageClock()
    spec = generate_function(core, drafter)(  # trees have their own round
        target,
        drafter,
        prompt,
        k=k,
        max_new_tokens=args.max_new_tokens,
        rng=np.random.default_rng(args.seed),
        sampling=sampling,
        eos_id=tokenizer.eos_id,
        trace=True,
        clock=spec_clock,
    )
    ar = core.generate(
        target,
        prompt,
        max_new_tokens=args.max_new_tokens,
        rng=np.random.default_rng(args.seed),
        sampling=sampling,
        eos_id=tokenizer.eos_id,
        clock=ar_clock,
    )

    def show(tok: int) -> str:
        return "'" + tokenizer.token_text(tok) + "'"

    for n, r in enumerate(spec.trace[: args.show_rounds], start=1):
        print(describe_round(n, r, show))
    if len(spec.trace) > args.show_rounds:
        print(f"... {len(spec.trace) - args.show_rounds} more rounds (--show-rounds to see them)")

    colour = sys.stdout.isatty() and not args.no_colour
    print(f"\ngenerated text ({COLOUR_LEGEND if colour else MARKS_LEGEND}):\n")
    if colour:
        print(text + render_tokens(spec.trace, colour, tokenizer.piece))
    else:
        print(render_marked(text, spec.trace, tokenizer.piece))
    # decode phase only: the prompt's prefill is the same work for both
    timings = {
        "autoregressive_tps": len(ar) / ar_clock.total(*AR_DECODE),
        "speculative_tps": len(spec.tokens) / spec_clock.total(*SPEC_DECODE),
    }
    print("\nstatistics (one run each, decode phase; `specdec bench` measures properly):")
    shape = describe_tree(args.drafter, tree_widths(args)) if drafter_is_tree(args) else None
    print(stats_table(spec.stats, timings, tree=shape))
    if sampling.greedy:
        same = "yes" if ar == spec.tokens else "NO"
        print(f"\ngreedy: speculative output identical to autoregressive output: {same}")
    else:
        print(f"\nautoregressive sample for comparison:\n{text + tokenizer.decode(ar)}")
    return 0


DEMO_K = 4  # k for drafters whose k is not chosen by measurement


def drafter_is_tree(args) -> bool:
    return args.drafter in TREE_DRAFTERS


AUTO_K_MAX = 8  # the largest k the measured choice considers


def demo_k(args, target, draft, prompt, sampling) -> tuple[int, str]:
    # -> (k, a line saying where it came from, or "" when the user gave it). Without -k the
    # draft-model drafter on the CPU gets the k this machine's costs predict best
    # (specdec/choose_k.py): a fixed k loses on CPUs whose kernels make long passes dear.
    if args.k is not None:
        return args.k, ""
    if drafter_is_tree(args):  # -k was refused: the depth comes from the shape
        depth = min(len(tree_widths(args) or TREE_WIDTHS[args.drafter]), args.max_new_tokens)
        return depth, f"k={depth}: the tree's depth (--tree sets it; -k is for chain drafters)"
    if args.drafter != "model" or args.backend != "cpu":
        return min(DEMO_K, args.max_new_tokens), (
            f"k={min(DEMO_K, args.max_new_tokens)}: the fixed default (-k is chosen by "
            "measurement for --drafter model on the cpu backend only)"
        )
    from specdec.choose_k import choose_k

    k_max = min(AUTO_K_MAX, args.max_new_tokens)
    choice = choose_k(target, draft, prompt, sampling, k_max, np.random.default_rng((args.seed, 1)))
    return choice.k, choice.explain()


def check_k(k: int, max_new_tokens: int) -> None:
    # A round drafts at most max_new_tokens - 1 tokens, so a larger k buys nothing; refusing
    # it here keeps a k of 10**12 from sizing the statistics' per-position arrays.
    if max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    if not 1 <= k <= max_new_tokens:
        raise ValueError(
            f"k must be in 1..{max_new_tokens} (--max-new-tokens): a round never drafts more "
            f"than it can emit, got {k}"
        )


ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}


def unescape(text: str) -> str:
    # --prompt 'a\nb' -> "a<newline>b": \n, \t and \\ (a backslash); others stay as typed
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in ESCAPES:
            out.append(ESCAPES[text[i + 1]])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def prompt_text(args) -> str:
    # the prompt as text: --prompt-file as is, --prompt with escapes, or the default
    if args.prompt_file is not None and args.prompt is not None:
        raise ValueError("give --prompt or --prompt-file, not both")
    if args.prompt_file is not None:
        path = Path(args.prompt_file)
        try:
            data = sys.stdin.buffer.read() if args.prompt_file == "-" else path.read_bytes()
        except OSError as err:
            raise ValueError(f"--prompt-file {path}: {err.strerror}") from None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(
                f"--prompt-file {path} is not UTF-8 text (byte {err.start}); save it as UTF-8"
            ) from None
    if args.prompt is None:
        return DEFAULT_PROMPT
    text = unescape(args.prompt)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # the shell passed bytes that are not UTF-8 (a surrogate)
        raise ValueError(
            "the prompt (--prompt) is not valid UTF-8 text; check the terminal's encoding, "
            "or put the prompt in a UTF-8 file and pass --prompt-file"
        ) from None
    return text


def parse_list(text: str, kind, option: str = "list"):
    """'1-8' or '1,2,4' -> [1, ..., 8] / [1, 2, 4]; anything else is a ValueError that
    names the option and shows the syntax."""
    try:
        if kind is int and "-" in text:
            lo, hi = (int(x) for x in text.split("-"))
            values = list(range(lo, hi + 1))
        else:
            values = [kind(x) for x in text.split(",")]
    except ValueError:
        syntax = "1-8 or 1,2,4" if kind is int else "0,0.8"
        raise ValueError(f"{option} {text!r}: expected a list like {syntax}") from None
    if not values:
        raise ValueError(f"{option} {text!r} is an empty range")
    return values


def machine_description() -> str:
    # the machine a report's numbers came from: CPU, BLAS, its kernel, threads (specdec/machine.py)
    return describe_machine().line()


def bench_prompts(args, tokenizer) -> list[np.ndarray]:
    from specdec.bench import CODE_PROMPTS, COPY_PROMPTS, TEXT_PROMPTS, held_out_code_prompts

    if args.prompts == "heldout":
        snippets = held_out_code_prompts(args.n_prompts)  # byte ids
        if isinstance(tokenizer, ByteTokenizer):
            return snippets
        texts = [bytes(s.astype(np.uint8)).decode("utf-8", "replace") for s in snippets]
    else:
        texts = {"text": TEXT_PROMPTS, "code": CODE_PROMPTS, "copy": COPY_PROMPTS}[args.prompts]
    return [tokenizer.encode(t) for t in texts]


def cmd_course(args) -> int:
    written = unpack_course(args.folder, solutions=args.solutions)
    notebooks = sum(1 for path in written if path.suffix == ".ipynb")
    exercises = sum(1 for path in written if path.name.startswith("my_"))
    solutions = sum(1 for path in written if path.parent.name == "solutions")
    print(
        f"wrote {len(written)} files to {args.folder}: {notebooks} notebooks (with their "
        f"jupytext sources), {exercises} exercises"
        + (f", {solutions} solutions" if solutions else " (no solutions: --solutions adds them)")
    )
    print(f"open them with: jupyter lab {args.folder}")
    print("grade an exercise from there: specdec grade exercises/my_verify.py:verify")
    return 0


def cmd_bench_gpu(args) -> int:
    # the twin's benchmark (specdec/gpu_bench.py): batch 1 over k, batch scaling, transfers
    from specdec import gpu_bench

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


def cmd_bench(args) -> int:
    ks, temperatures = check_bench_options(args)  # every option, before any work
    if len(parse_drafters(args.drafter)) > 1:
        return cmd_methods(args)
    if args.backend == "gpu":
        return cmd_bench_gpu(args)
    from tqdm import tqdm

    from specdec.bench import BenchReport, run_bench
    from specdec.costs import measure_costs

    plain_target, plain_draft, tokenizer, source = load_plain_pair(args)
    prompts = bench_prompts(args, tokenizer)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.plain:
        target, draft, source = plain_target, plain_draft, source + ", plain model"
    else:  # each trick kept only where it measured faster here (specdec/fast_cpu_plan.py)
        target, draft = fast(plain_target), fast(plain_draft)
        source += ", CPU fast path (docs/fast-path.md)"
    print(f"models: {source}")
    print(f"machine: {describe_machine().line()}")
    context = np.concatenate([prompts[0]] * 8)[: target.config.n_ctx // 2]
    # every T in turn, the fastest of 30 passes kept: load moves no T more than another
    costs = measure_costs(target, draft, context, max(ks) + 1)
    plain_costs = None
    if not args.plain:  # the same profile of the plain model: is the fast path faster here?
        plain_costs = measure_costs(plain_target, plain_draft, context, max(ks) + 1)
    total = len(temperatures) * args.repeats * len(prompts) * len(ks)
    report = BenchReport([], costs, args.max_new_tokens, args.repeats, len(prompts))
    report.min_confidence, report.drafter = args.min_confidence, args.drafter
    report.plain_costs = plain_costs
    report.plans = {} if args.plain else {"target": target.plan, "draft": draft.plan}
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
    if len(drafters) > 1 and args.tree is not None:
        raise ValueError("--tree shapes one tree drafter; the method table uses each one's own")
    if len(drafters) == 1:
        check_drafter(drafters[0])
        tree_widths(args)
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


PROMPT_SETS = ("heldout", "code", "text", "copy")


def prompt_set_names(args, several: bool) -> list[str]:
    # one set for one drafter; a comma list (default: held-out and copy-heavy) for several
    names = [n.strip() for n in args.prompts.split(",") if n.strip()]
    if not several and len(names) != 1:
        raise ValueError(f"--prompts {args.prompts!r}: one set with one drafter")
    return names


def cmd_methods(args) -> int:
    # several drafters: the method table, every drafter against one AR baseline per set
    from tqdm import tqdm

    from specdec.costs import measure_costs
    from specdec.methods import METHOD_KS, methods_markdown, run_methods

    drafters = parse_drafters(args.drafter)
    target, draft, tokenizer, source = load_pair(args)
    options = {"self_draft_dir": self_draft_dir(args)}
    sets = {}
    for name in prompt_set_names(args, several=True):
        one = argparse.Namespace(**{**vars(args), "prompts": name})
        sets[name] = bench_prompts(one, tokenizer)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"models: {source}")
    context = np.concatenate([next(iter(sets.values()))[0]] * 8)[: target.config.n_ctx // 2]
    max_T = max(max(METHOD_KS[d]) for d in drafters) + 1
    costs = measure_costs(target, draft, context, max_T)
    temperatures = parse_list(args.temperatures, float, "--temperatures")
    total = sum(len(p) for p in sets.values()) * len(temperatures) * args.repeats
    total *= sum(len(METHOD_KS[d]) for d in drafters)
    command = "specdec bench " + " ".join(sys.argv[2:])
    reports = {}
    with tqdm(total=total, desc="methods", unit="run") as bar:
        for name, prompts in sets.items():  # each set written as soon as it is measured
            reports |= run_methods(
                target,
                draft,
                {name: prompts},
                drafters,
                temperatures,
                args.max_new_tokens,
                args.repeats,
                costs,
                seed=args.seed,
                progress=bar,
                drafter_options=options,
            )
            text = methods_markdown(reports, machine_description(), command.strip())
            write_atomically(out / "methods.md", text)  # each set, as soon as it is measured
    print(text)
    print(f"written: {out}/methods.md")
    return 0


def transformers_rows(args, report, target, draft, prompts, temperatures, out: Path) -> None:
    # transformers' assisted generation on the very same weights: the checkpoint folders,
    # or, with --random, the random pair saved to a temporary folder for this run
    import tempfile

    from reference.weights import save_gpt2
    from specdec.bench import run_transformers_rows

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
    from specdec.bench import json_report, markdown_report

    command = "specdec bench " + " ".join(sys.argv[2:]) if len(sys.argv) > 1 else "specdec bench"
    machine = describe_machine()
    text = f"Status: {status}\n\n" + markdown_report(report, machine.line(), command.strip())
    write_atomically(out / "bench.md", text)
    data = json_report(report, machine.as_dict(), command.strip(), status)
    write_atomically(out / "bench.json", json.dumps(data, indent=1) + "\n")
    return text


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def write_bench_figures(out: Path, report, temperature: float) -> None:
    from specdec.figures import (
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


class HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default, unless the help already names it."""

    def _get_help_string(self, action):
        help_text = action.help or ""
        if "default" in help_text or action.default is argparse.SUPPRESS:
            return help_text
        return super()._get_help_string(action)


def add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        metavar="DIR",
        help="target checkpoint folder (config.json + model.safetensors, and tokenizer.json "
        "for a Hugging Face GPT-2); give --draft with it; default: the bundled pair",
    )
    parser.add_argument(
        "--draft",
        metavar="DIR",
        help="draft checkpoint folder, sharing the target's tokenizer; default: the bundled pair",
    )
    parser.add_argument(
        "--random",
        action="store_true",
        help="untrained random models instead of a checkpoint (their text is noise)",
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help="run the plain model instead of the CPU fast path (same logits, slower)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of every random choice (and of --random)"
    )
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads")
    parser.add_argument(
        "--drafter",
        default="model",
        help=f"one of {', '.join(DRAFTERS)}. model: the draft model; lookup: prompt lookup / "
        "n-gram drafts from the text so far; hybrid: lookup when it matches, the draft model "
        "otherwise; early-exit: the target's first 2 blocks + a trained exit head; heads: "
        "extra heads on the target's last hidden state; lookup+heads: lookup, else the "
        "heads. bench also takes a comma list or 'all': the method table (specdec/methods.py)",
    )
    parser.add_argument(
        "--self-draft",
        metavar="DIR",
        help="exit heads and extra heads trained on this target (specdec/training/train_heads.py); "
        "default: models/self_draft for the bundled pair, none for other checkpoints (early-"
        "exit then exits through the target's own final LayerNorm; heads need them)",
    )
    parser.add_argument(
        "--backend",
        choices=["cpu", "gpu"],
        default="cpu",
        help="cpu: the NumPy reference; gpu: the CuPy twin (gpu/; NumPy mode without a CUDA "
        "device)",
    )
    parser.add_argument(
        "--tree",
        metavar="WIDTHS",
        help="with --drafter tree, tree-wide or tree-heads: the tree's shape as children per "
        "node at each depth, e.g. 2,1,1,1 (default: the drafter's, specdec/drafting.py)",
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
    demo = sub.add_parser(
        "demo",
        help="speculative decoding on the bundled pair, round by round",
        formatter_class=HelpWithDefaults,
    )
    demo.add_argument(
        "--prompt",
        default=None,
        help="the text to continue; \\n, \\t and \\\\ are read as newline, tab and "
        "backslash; default: the opening of a Python class (printed by the demo)",
    )
    demo.add_argument(
        "--prompt-file",
        metavar="PATH",
        default=None,
        help="read the prompt from a UTF-8 file, as is ('-' for stdin); default: --prompt",
    )
    demo.add_argument(
        "-k",
        type=int,
        default=None,
        help="draft length per round (at most --max-new-tokens); default: chosen on this "
        "machine from its measured costs and the pair's acceptance (--drafter model), "
        f"the tree's depth for tree drafters (which refuse -k: --tree sets it), else {DEMO_K}",
    )
    demo.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    demo.add_argument(
        "--top-k", type=int, default=None, help="keep the k most likely tokens (None: all)"
    )
    demo.add_argument(
        "--top-p", type=float, default=1.0, help="nucleus: keep the smallest set with this mass"
    )
    demo.add_argument("--max-new-tokens", type=int, default=120, help="tokens to generate")
    demo.add_argument("--show-rounds", type=int, default=6, help="rounds to print in detail")
    demo.add_argument(
        "--no-colour",
        action="store_true",
        help="mark token fates on a line under the text instead of with colour (automatic "
        "when the output is not a terminal)",
    )
    add_model_options(demo)
    demo.set_defaults(func=cmd_demo)

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
    course = sub.add_parser(
        "course",
        help="unpack the notebooks and exercises into a folder, to open with `jupyter lab DIR`",
        formatter_class=HelpWithDefaults,
    )
    course.add_argument("folder", metavar="DIR", help="where to put them (created if missing)")
    course.add_argument(
        "--solutions",
        action="store_true",
        help="also copy the exercises' worked solutions (left out by default)",
    )
    course.set_defaults(func=cmd_course, threads=1)
    add_grade_parser(sub)  # `specdec grade PATH.py:function` (specdec/grading/)
    add_class_parser(sub)  # `specdec grade-class FOLDER`: a whole class at once
    return parser


def main(argv: list[str] | None = None) -> int:
    from threadpoolctl import threadpool_limits

    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "threads", 1) < 1:
        parser.exit(2, f"specdec: error: --threads must be >= 1, got {args.threads}\n")
    try:
        # BLAS threads: with as many threads as cores, any other busy process makes the
        # threads of a small matrix product wait for each other (docs/benchmarks.md measured
        # how much). One thread is steady; --threads changes it.
        with threadpool_limits(limits=args.threads, user_api="blas"):
            return args.func(args)
    except ValueError as err:  # bad input: one clear line, no traceback
        parser.exit(2, f"specdec: error: {err}\n")
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's usual code, 128 + SIGINT
        parser.exit(130, "specdec: interrupted\n")


if __name__ == "__main__":
    raise SystemExit(main())

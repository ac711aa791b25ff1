"""`specdec demo`: speculative decoding on a pair, round by round, then the text with each
token's fate and the run's statistics against an autoregressive run of the same model."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from reference.sampling import SamplingParams
from specdec.cli.inputs import (
    backend_core,
    eagle_dir,
    load_pair,
    load_plain_pair,
    self_draft_dir,
    twin_model,
)
from specdec.cli.options import (
    HelpWithDefaults,
    add_model_options,
    check_drafter,
    check_k,
    drafter_is_tree,
    tree_widths,
)
from specdec.drafting import (
    DYNAMIC_TREE_DRAFTERS,
    TREE_WIDTHS,
    describe_tree,
    drafts_tree,
    generate_function,
    make_drafter,
)
from specdec.machine import describe_machine
from specdec.measure.bench import AR_DECODE, SPEC_DECODE
from specdec.measure.choose_k import choose_k
from specdec.report import (
    COLOUR_LEGEND,
    MARKS_LEGEND,
    describe_round,
    render_marked,
    render_tokens,
    stats_table,
)
from specdec.timing import StageClock

# A prompt the bundled target continues as code at greedy (small byte-level models loop on
# many prompts; this one gives varied lines: docs/training.md shows a few)
DEFAULT_PROMPT = (
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
    "    def __repr__(self):\n"
)
DEMO_K = 4  # k for drafters whose k is not chosen by measurement
AUTO_K_MAX = 8  # the largest k the measured choice considers


def add_parser(sub) -> None:
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
        help="draft length per round (at most --max-new-tokens); eagle-tree: its node budget "
        "and depth limit; default: chosen on this machine from its measured costs and the "
        "pair's acceptance (--drafter model), the tree's depth for tree drafters of a fixed "
        f"shape (which refuse -k: --tree sets it), else {DEMO_K}",
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


def cmd_demo(args) -> int:
    # before a model is loaded or a cache allocated (no -k: chosen below, by measurement)
    check_k(1 if args.k is None else args.k, args.max_new_tokens)
    check_drafter(args.drafter, args.backend)
    tree_widths(args)
    weights = eagle_dir(args, [args.drafter])  # before a model is loaded: they may be missing
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
        target, draft = twin_model(core, target), twin_model(core, draft)
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
        eagle_dir=weights,
        tree_nodes=eagle_tree_nodes(args),
        eagle_seed=args.seed,
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
    shape = None
    if drafts_tree(args.drafter):
        shape = describe_tree(args.drafter, tree_widths(args), eagle_tree_nodes(args))
    print(stats_table(spec.stats, timings, tree=shape))
    if sampling.greedy:
        same = "yes" if ar == spec.tokens else "NO"
        print(f"\ngreedy: speculative output identical to autoregressive output: {same}")
    else:
        print(f"\nautoregressive sample for comparison:\n{text + tokenizer.decode(ar)}")
    return 0


def demo_k(args, target, draft, prompt, sampling) -> tuple[int, str]:
    # -> (k, a line saying where it came from, or "" when the user gave it). Without -k the
    # draft-model drafter on the CPU gets the k this machine's costs predict best
    # (specdec/measure/choose_k.py): a fixed k loses on CPUs whose kernels make long passes dear.
    if args.k is not None:
        return args.k, ""
    if drafter_is_tree(args):  # -k was refused: the depth comes from the shape
        depth = min(len(tree_widths(args) or TREE_WIDTHS[args.drafter]), args.max_new_tokens)
        return depth, f"k={depth}: the tree's depth (--tree sets it; -k is for chain drafters)"
    if args.drafter in DYNAMIC_TREE_DRAFTERS:
        k = eagle_tree_nodes(args)
        return k, f"k={k}: the dynamic tree's node budget and depth limit (-k sets it)"
    if args.drafter != "model" or args.backend != "cpu":
        return min(DEMO_K, args.max_new_tokens), (
            f"k={min(DEMO_K, args.max_new_tokens)}: the fixed default (-k is chosen by "
            "measurement for --drafter model on the cpu backend only)"
        )
    k_max = min(AUTO_K_MAX, args.max_new_tokens)
    choice = choose_k(target, draft, prompt, sampling, k_max, np.random.default_rng((args.seed, 1)))
    return choice.k, choice.explain()


def eagle_tree_nodes(args) -> int | None:
    # eagle-tree's node budget: its k (-k, else the fixed default), None for other drafters
    if args.drafter not in DYNAMIC_TREE_DRAFTERS:
        return None
    return args.k if args.k is not None else min(DEMO_K, args.max_new_tokens)


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

"""The `specdec` command. All printing and timing lives here, at the edge."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from reference.autoregressive import generate
from reference.config import GPTConfig
from reference.drafters import ModelDrafter
from reference.model import GPT, init_params
from reference.report import describe_round, render_tokens, stats_table
from reference.sampling import SamplingParams
from reference.speculative import speculative_generate
from reference.tokenizer import EOS, VOCAB_SIZE, decode, encode

BUNDLED = Path(__file__).resolve().parent.parent / "models"
DEFAULT_PROMPT = "def fibonacci(n):\n    "


def random_pair(seed: int) -> tuple[GPT, GPT]:
    """Untrained stand-ins: a target and a draft that is the target plus noise, so that
    drafts are sometimes accepted. Only used when no trained pair is on disk."""
    rng = np.random.default_rng(seed)
    cfg = GPTConfig(n_vocab=VOCAB_SIZE, n_ctx=512, n_embd=128, n_head=4, n_layer=4)
    params = init_params(cfg, rng, std=0.1)
    noisy = {name: w + (rng.standard_normal(w.shape) * 0.02).astype(np.float32)
             for name, w in params.items()}
    return GPT(cfg, params), GPT(cfg, noisy)


def load_pair(args) -> tuple[GPT, GPT, str]:
    target_dir = Path(args.target or BUNDLED / "target")
    draft_dir = Path(args.draft or BUNDLED / "draft")
    if not args.random and (target_dir / "config.json").exists():
        from reference.weights import load_gpt2

        return load_gpt2(target_dir), load_gpt2(draft_dir), f"{target_dir} + {draft_dir}"
    target, draft = random_pair(args.seed)
    return target, draft, "random weights (no trained pair found: untrained, output is noise)"


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def cmd_demo(args) -> int:
    target, draft, source = load_pair(args)
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p)
    prompt = encode(args.prompt)
    print(f"models: {source}")
    print(f"sampling: {sampling.describe()}, k={args.k}, max_new_tokens={args.max_new_tokens}")
    print(f"prompt: {args.prompt!r}\n")

    drafter = ModelDrafter(draft)
    spec, t_spec = timed(lambda: speculative_generate(
        target, drafter, prompt, k=args.k, max_new_tokens=args.max_new_tokens,
        rng=np.random.default_rng(args.seed), sampling=sampling, eos_id=EOS, trace=True))
    ar, t_ar = timed(lambda: generate(
        target, prompt, max_new_tokens=args.max_new_tokens,
        rng=np.random.default_rng(args.seed), sampling=sampling, eos_id=EOS))

    for n, r in enumerate(spec.trace[: args.show_rounds], start=1):
        print(describe_round(n, r))
    if len(spec.trace) > args.show_rounds:
        print(f"... {len(spec.trace) - args.show_rounds} more rounds (--show-rounds to see them)")

    colour = sys.stdout.isatty() and not args.no_colour
    legend = ("green = accepted draft, red = correction, blue = bonus" if colour
              else "plain = accepted draft, [x] = correction, {x} = bonus")
    print(f"\ngenerated text ({legend}):\n")
    print(args.prompt + render_tokens(spec.trace, colour))
    timings = {"autoregressive_tps": len(ar) / t_ar, "speculative_tps": len(spec.tokens) / t_spec}
    print("\nstatistics (one run each; `specdec bench` measures properly):")
    print(stats_table(spec.stats, timings))
    if sampling.greedy:
        same = "yes" if ar == spec.tokens else "NO"
        print(f"\ngreedy: speculative output identical to autoregressive output: {same}")
    else:
        print(f"\nautoregressive sample for comparison:\n{args.prompt + decode(ar)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="speculative decoding on the bundled pair, round by round")
    demo.add_argument("--prompt", default=DEFAULT_PROMPT)
    demo.add_argument("-k", type=int, default=4, help="draft length per round")
    demo.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    demo.add_argument("--top-k", type=int, default=None)
    demo.add_argument("--top-p", type=float, default=1.0)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--max-new-tokens", type=int, default=120)
    demo.add_argument("--show-rounds", type=int, default=6)
    demo.add_argument("--target", help="target checkpoint dir (config.json + model.safetensors)")
    demo.add_argument("--draft", help="draft checkpoint dir")
    demo.add_argument("--random", action="store_true", help="use untrained random models")
    demo.add_argument("--no-colour", action="store_true")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:  # bad input: one clear line, no traceback
        parser.exit(2, f"specdec: error: {err}\n")


if __name__ == "__main__":
    raise SystemExit(main())

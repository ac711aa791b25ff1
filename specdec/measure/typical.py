"""Typical acceptance against exact tree verification: the speed it buys, the law it costs.

    python -m specdec.measure.typical --repeats 3  (docs/benchmarks.md, "Typical acceptance")

On the bundled pair (fast CPU path, one BLAS thread), with the extra heads drafting a tree
(HeadsTreeDrafter, the Medusa pairing: heads + typical acceptance), at temperature 0.8:

* speed: every prompt decoded autoregressively, then by the exact tree loop
  (reference.tree.tree_speculative_generate), then by the typical loop at each epsilon
  (reference.typical.typical_tree_speculative_generate, delta = sqrt(epsilon)), back to
  back in each repeat; speedup = decode tokens/s over the autoregressive run's, per repeat,
  median over repeats; tokens per round pooled.
* distance from the target's law, two ways:
  - exact, small: random tables on V = 3 (target rows p, draft rows q), a top-2 x 2 tree of
    q's point masses, the law of 3 tokens (one typical round, then the target's own rows)
    enumerated in float64 against the target's law of 3 tokens; the TV averaged over seeds;
  - on the real model, per round: the heads' tree is deterministic given the context, so a
    typical round puts mass 1 on its accepted path where the target puts prod p(path), and
    both continue with the target's rows: the TV of that round's output law from the
    target's, given the context, is exactly 1 - prod p(path) (reference.typical.
    round_total_variation; the oracle checks the formula against enumeration). We report
    its mean over the rounds the typical decoder actually ran, and the same for the first
    token alone (1 - p(x) if the first candidate x was accepted, else 0). This is the
    distance of ONE round's output, from contexts the lossy decoder reached; the law of a
    whole generated text drifts further, round after round, and is not measured.

The exact tree loop is the TV = 0 point of the figure (docs/figures/typical_tradeoff.png).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from reference.autoregressive import generate
from reference.heads import HeadsDrafter
from reference.sampling import SamplingParams
from reference.tree import (
    POINT,
    ROOT,
    HeadsTreeDrafter,
    Tree,
    tree_speculative_generate,
    verify_tree_law,
)
from reference.typical import (
    TypicalThreshold,
    round_total_variation,
    total_variation,
    typical_tree_speculative_generate,
    typical_verify_tree_law,
)
from specdec.bundled import load_bundled_pair, load_heads
from specdec.fast_cpu import fast
from specdec.machine import describe_machine
from specdec.measure.bench import AR_DECODE, SPEC_DECODE, held_out_code_prompts
from specdec.timing import StageClock

EPSILONS = (0.01, 0.03, 0.09, 0.3, 0.9)  # delta = sqrt(epsilon); 0.09 is Medusa's default
HEADS_WIDTHS = (3, 2, 2, 1)  # the heads tree of specdec/drafting.py's "tree-heads"
HEADS_NODES = 10
FIGURE = Path(__file__).resolve().parent.parent / "docs" / "figures" / "typical_tradeoff.png"


@dataclass
class TradeoffPoint:
    label: str  # "exact" or "typical eps=..."
    epsilon: float | None  # None for exact verification
    tokens_per_round: float  # emitted / rounds, pooled over prompts and repeats
    speedups: list[float]  # one per repeat: spec decode tokens/s / AR decode tokens/s
    round_tv: float  # mean over rounds of 1 - prod p(path) (0 for exact)
    first_token_tv: float  # mean over rounds of the first token's TV (0 for exact)
    small_tv: float  # mean TV on the small exact cases (V = 3)

    @property
    def speedup(self) -> float:
        return float(np.median(self.speedups))


@dataclass
class TradeoffReport:
    points: list[TradeoffPoint]
    temperature: float
    max_new_tokens: int
    repeats: int
    n_prompts: int
    ar_tps: float  # median autoregressive decode tokens/s
    machine: str = field(default_factory=lambda: machine_name())
    date: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))


def machine_name() -> str:
    # CPU, cores, BLAS library, its kernel and threads (specdec/machine.py)
    return describe_machine().line()


# ------------------------------------------------------------------------------------------
# The small exact cases: enumeration in float64
# ------------------------------------------------------------------------------------------


def table_row(seed: int, context: tuple, n_vocab: int) -> np.ndarray:
    # a random conditional row fixed by (seed, context): Dirichlet(1)
    return np.random.default_rng([seed, len(context), *context]).dirichlet(np.ones(n_vocab))


def top_b_tree(context: tuple, q_seed: int, widths, n_vocab: int) -> Tree:
    # the draft's top-b point masses at each node, level by level (q = the q_seed table)
    tokens, parents, paths, level = [context[-1]], [-1], {0: ()}, [0]
    for b in widths:
        nxt = []
        for node in level:
            q = table_row(q_seed, context + paths[node], n_vocab)
            for t in np.argsort(-q, kind="stable")[:b]:
                tokens.append(int(t))
                parents.append(node)
                paths[len(tokens) - 1] = paths[node] + (int(t),)
                nxt.append(len(tokens) - 1)
        level = nxt
    q_rows = np.zeros((len(tokens), n_vocab))
    q_rows[np.arange(1, len(tokens)), tokens[1:]] = 1.0
    return Tree(np.array(tokens), np.array(parents), q_rows, (ROOT,) + (POINT,) * (len(tokens) - 1))


def sequence_law(p_seed: int, context: tuple, first: dict, length: int, n_vocab: int) -> dict:
    # {emitted prefix: probability} -> the law of `length` tokens, each prefix continued by
    # the target's own rows
    law: dict = {}

    def extend(out: tuple, w: float) -> None:
        if len(out) == length:
            law[out] = law.get(out, 0.0) + w
            return
        row = table_row(p_seed, context + out, n_vocab)
        for y in range(n_vocab):
            extend(out + (y,), w * float(row[y]))

    for out, w in first.items():
        extend(out, w)
    return law


def small_case_tv(threshold: TypicalThreshold | None, seeds=range(20), n_vocab: int = 3) -> float:
    # mean over seeds of the TV between one round (typical, or exact if threshold is None)
    # on a top-2 x 2 tree, extended to 3 tokens, and the target's law of 3 tokens
    widths, context, tvs = (2, 2), (0, 1), []
    for seed in seeds:
        p_seed, q_seed = 2 * seed, 2 * seed + 1
        tree = top_b_tree(context, q_seed, widths, n_vocab)
        paths = [()]
        for i in range(1, tree.n_nodes):
            paths.append(paths[int(tree.parents[i])] + (int(tree.tokens[i]),))
        p = np.stack([table_row(p_seed, context + path, n_vocab) for path in paths])
        outcomes = (
            verify_tree_law(p, tree)
            if threshold is None
            else typical_verify_tree_law(p, tree, threshold)
        )
        first: dict = {}
        for (path, token), m in outcomes.items():
            key = tuple(tree.path_tokens(path)) + (token,)
            first[key] = first.get(key, 0.0) + m
        got = sequence_law(p_seed, context, first, len(widths) + 1, n_vocab)
        expected = sequence_law(p_seed, context, {(): 1.0}, len(widths) + 1, n_vocab)
        tvs.append(total_variation(got, expected))
    return float(np.mean(tvs))


# ------------------------------------------------------------------------------------------
# The real model: timing and the per-round TV
# ------------------------------------------------------------------------------------------


def round_tvs(trace) -> tuple[list[float], list[float]]:
    # trace [RoundTrace] (the accepted path, then maybe a rejected child) -> per round
    # (1 - prod p(path), the first token's TV); p_rows[i] scores draft_tokens[i]
    rounds, firsts = [], []
    for rt in trace:
        p_path = [float(rt.p_rows[i][rt.draft_tokens[i]]) for i in range(rt.accepted)]
        rounds.append(round_total_variation(p_path))
        firsts.append(1.0 - p_path[0] if p_path else 0.0)
    return rounds, firsts


def heads_tree_drafter(target):
    return HeadsTreeDrafter(HeadsDrafter(target, load_heads()), HEADS_WIDTHS, HEADS_NODES)


def run_tradeoff(
    target,
    drafter,
    prompts: list[np.ndarray],
    epsilons=EPSILONS,
    temperature: float = 0.8,
    max_new_tokens: int = 64,
    repeats: int = 3,
    seed: int = 0,
    progress=None,
) -> TradeoffReport:
    """Per repeat and prompt: autoregressive, exact tree, then typical at each epsilon, back
    to back with the same seed. Returns one TradeoffPoint per rule."""
    sampling = SamplingParams(temperature=temperature)
    labels = ["exact"] + [f"typical eps={e:g}" for e in epsilons]
    thresholds = {"exact": None} | {f"typical eps={e:g}": TypicalThreshold(e) for e in epsilons}
    ar_rate = np.zeros(repeats)
    rate = {lab: np.zeros(repeats) for lab in labels}
    emitted = dict.fromkeys(labels, 0)
    rounds = dict.fromkeys(labels, 0)
    tvs = {lab: ([], []) for lab in labels}
    for r in range(repeats):
        ar_tokens, ar_seconds = 0, 0.0
        tokens = dict.fromkeys(labels, 0)
        seconds = dict.fromkeys(labels, 0.0)
        for j, prompt in enumerate(prompts):
            rng_seed = (seed, r, j)
            clock = StageClock()
            out = generate(
                target,
                prompt,
                max_new_tokens=max_new_tokens,
                rng=np.random.default_rng(rng_seed),
                sampling=sampling,
                clock=clock,
            )
            ar_tokens += len(out)
            ar_seconds += clock.total(*AR_DECODE)
            for lab in labels:
                clock = StageClock()
                kwargs = dict(
                    max_new_tokens=max_new_tokens,
                    rng=np.random.default_rng(rng_seed),
                    sampling=sampling,
                    trace=True,
                    clock=clock,
                )
                if thresholds[lab] is None:
                    res = tree_speculative_generate(target, drafter, prompt, **kwargs)
                else:
                    res = typical_tree_speculative_generate(
                        target, drafter, prompt, threshold=thresholds[lab], **kwargs
                    )
                tokens[lab] += len(res.tokens)
                seconds[lab] += clock.total(*SPEC_DECODE)
                emitted[lab] += res.stats.emitted
                rounds[lab] += res.stats.rounds
                if thresholds[lab] is not None:  # exact: TV = 0, proved and oracle-tested
                    per_round, first = round_tvs(res.trace)
                    tvs[lab][0].extend(per_round)
                    tvs[lab][1].extend(first)
                if progress is not None:
                    progress(f"repeat {r + 1}/{repeats} prompt {j + 1}: {lab}")
        ar_rate[r] = ar_tokens / ar_seconds
        for lab in labels:
            rate[lab][r] = tokens[lab] / seconds[lab]
    points = [
        TradeoffPoint(
            label=lab,
            epsilon=None if thresholds[lab] is None else thresholds[lab].epsilon,
            tokens_per_round=emitted[lab] / rounds[lab],
            speedups=[float(x) for x in rate[lab] / ar_rate],
            round_tv=float(np.mean(tvs[lab][0])) if tvs[lab][0] else 0.0,
            first_token_tv=float(np.mean(tvs[lab][1])) if tvs[lab][1] else 0.0,
            small_tv=small_case_tv(thresholds[lab]),
        )
        for lab in labels
    ]
    return TradeoffReport(
        points, temperature, max_new_tokens, repeats, len(prompts), float(np.median(ar_rate))
    )


# ------------------------------------------------------------------------------------------
# Report: a markdown table and the figure
# ------------------------------------------------------------------------------------------


def markdown_table(report: TradeoffReport) -> str:
    lines = [
        "| rule | tokens / round | speedup (median) | TV per round, real model | "
        "TV first token, real model | TV, small exact cases |",
        "|---|---|---|---|---|---|",
    ]
    for pt in report.points:
        name = "exact (`verify_tree`)" if pt.epsilon is None else f"typical, ε = {pt.epsilon:g}"
        lines.append(
            f"| {name} | {pt.tokens_per_round:.2f} | {pt.speedup:.2f}x | {pt.round_tv:.3f} | "
            f"{pt.first_token_tv:.3f} | {pt.small_tv:.3f} |"
        )
    return "\n".join(lines)


def plot_tradeoff(report: TradeoffReport, path=FIGURE) -> Path:
    """Left: TV of one round's output from the target's law against the speedup, one point
    per rule (exact tree verification at TV = 0; bars: the range over repeats). Right: the
    three TV measures against epsilon (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from specdec.figures.style import colour_for, save  # lazy: matplotlib (the `lab` extra)

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.3), width_ratios=[1.35, 1])
    colour = colour_for(report.temperature)
    for pt in report.points:
        exact = pt.epsilon is None
        lo, hi = min(pt.speedups), max(pt.speedups)
        ax.errorbar(
            pt.speedup,
            pt.round_tv,
            xerr=[[pt.speedup - lo], [hi - pt.speedup]],
            fmt="*" if exact else "o",
            markersize=13 if exact else 7,
            color="black" if exact else colour,
            capsize=3,
        )
        text = "exact (verify_tree)" if exact else f"ε = {pt.epsilon:g}"
        # the label sits right of the bar's end, so bars and labels never cross
        ax.annotate(text, (hi, pt.round_tv), textcoords="offset points", xytext=(6, -4))
    ax.axhline(0.0, color="#999999", lw=0.8)
    ax.axvline(1.0, color="#999999", lw=0.8, ls=":")
    ax.set_xlabel("speedup over autoregressive (decode tokens/s, median of repeats)")
    ax.set_ylabel("TV of one round's output from p\n(real model, mean over rounds)")
    ax.set_ylim(bottom=-0.03)
    ax.set_title(
        f"bundled pair, heads tree {HEADS_WIDTHS}, T = {report.temperature:g}, δ = √ε",
        fontsize=10,
    )
    typical = [pt for pt in report.points if pt.epsilon is not None]
    eps = [pt.epsilon for pt in typical]
    for values, label, style in [
        ([pt.round_tv for pt in typical], "one round, real model", "o-"),
        ([pt.first_token_tv for pt in typical], "first token, real model", "s--"),
        ([pt.small_tv for pt in typical], "3 tokens, small exact cases (V = 3)", "^:"),
    ]:
        ax2.plot(eps, values, style, color=colour if "real" in label else "#555555", label=label)
    ax2.set_xscale("log")
    ax2.set_xlabel("ε (Medusa's default 0.09)")
    ax2.set_ylabel("total variation from the target's law")
    ax2.set_ylim(0, 1)
    ax2.legend(fontsize=8)
    ax2.set_title("exact verification: TV = 0 on every measure", fontsize=10)
    fig.suptitle("Typical acceptance is lossy: distance from p bought for speed", fontsize=11)
    return save(fig, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4, help="held-out code prompts")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument(
        "--epsilons", default=",".join(f"{e:g}" for e in EPSILONS), help="comma list"
    )
    parser.add_argument("--figure", default=str(FIGURE))
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    epsilons = [float(e) for e in args.epsilons.split(",") if e.strip()]
    target, _ = load_bundled_pair()
    target = fast(target)
    drafter = heads_tree_drafter(target)
    prompts = held_out_code_prompts(args.prompts)
    with threadpool_limits(limits=1, user_api="blas"):
        report = run_tradeoff(
            target,
            drafter,
            prompts,
            epsilons,
            args.temperature,
            args.max_new_tokens,
            args.repeats,
            progress=lambda s: print(s, file=sys.stderr, flush=True),
        )
    print(
        f"{report.date}, {report.machine}; {report.n_prompts} held-out prompts x "
        f"{report.max_new_tokens} tokens, {report.repeats} repeats, T = {report.temperature:g}, "
        f"autoregressive {report.ar_tps:.0f} tokens/s"
    )
    print(markdown_table(report))
    for pt in report.points:
        print(f"{pt.label}: speedups per repeat {[round(s, 3) for s in pt.speedups]}")
    print(f"figure: {plot_tradeoff(report, args.figure)}")
    return 0 if all(math.isfinite(p.speedup) for p in report.points) else 1


if __name__ == "__main__":
    sys.exit(main())

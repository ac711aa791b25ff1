"""The method table: every drafter of specdec/drafting.py side by side, from one run.

    specdec bench --drafter all --prompts heldout,copy   (or --drafter model,lookup,heads)

For each prompt set (held-out code, copy-heavy) and temperature, every prompt is decoded
autoregressively once per repeat and then by every drafter at each of its k, back to back
(specdec.measure.bench.run_bench with several drafters), so every speedup is a ratio measured in the
same repeat against the same autoregressive runs. Per drafter and k: alpha, tokens per
round, drafting cost c (per drafted token) and verification cost v (per round), both in
autoregressive steps and measured by the stage clocks of the runs themselves, the speedup,
and Leviathan's prediction from the drafter's own terms, E(alpha, k) / (k_round c + v).
"""

from __future__ import annotations

import numpy as np

from specdec.measure.bench import BenchPoint, BenchReport, by_position_text, run_bench

# k values per drafter: around each one's best on the bundled pair (heads draft at most 4)
METHOD_KS = {
    "model": [3, 5, 7],
    "lookup": [3, 7],
    "hybrid": [3, 7],
    "early-exit": [2, 3, 4],
    "heads": [2, 3, 4],
    "lookup+heads": [3, 7],
    "tree": [4],  # a tree's k is its depth (specdec/drafting.py TREE_WIDTHS)
    "tree-wide": [3],
    "tree-heads": [4],
    # EAGLE's chain and its dynamic tree at the same ks: eagle-tree's k is its node budget,
    # so each pair verifies as many nodes per round (equal nodes, EQUAL_NODES below). A first
    # short run on the bundled pair had the chain's best k at 6 greedy, 4 at T = 0.8.
    "eagle": [3, 4, 6, 8],
    "eagle-tree": [3, 4, 6, 8],
}
# a dynamic tree -> the chain it is set against at equal nodes (the same k)
EQUAL_NODES = {"eagle-tree": "eagle"}


def parse_drafters(text: str) -> list[str]:
    # "all" or "model,lookup,..." -> the names, checked against METHOD_KS
    names = list(METHOD_KS) if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in METHOD_KS]
    if not names or unknown:
        raise ValueError(
            f"--drafter takes 'all' or a comma list of {', '.join(METHOD_KS)}; got {text!r}"
        )
    return names


def run_methods(
    target,
    draft,
    prompt_sets: dict[str, list[np.ndarray]],
    drafters: list[str],
    temperatures: list[float],
    max_new_tokens: int,
    repeats: int,
    costs,
    seed: int = 0,
    progress=None,
    ks: dict[str, list[int]] | None = None,
    drafter_options: dict | None = None,
) -> dict[str, BenchReport]:
    # -> {prompt set: the report of every drafter at its ks, against one AR baseline}
    ks = ks or METHOD_KS
    plan = {name: ks[name] for name in drafters}
    return {
        name: run_bench(
            target,
            draft,
            prompts,
            [],
            temperatures,
            max_new_tokens,
            repeats,
            costs,
            seed=seed,
            progress=progress,
            ks_by_drafter=plan,
            drafter_options=drafter_options,
            shared_baseline=True,  # every drafter against the same autoregressive runs
        )
        for name, prompts in prompt_sets.items()
    }


def best_points(report: BenchReport, temperature: float) -> list[BenchPoint]:
    # the best k of each drafter at this temperature, in the drafters' order
    best: dict[str, BenchPoint] = {}
    for p in report.points:
        if p.temperature == temperature and (
            p.drafter not in best or p.speedup > best[p.drafter].speedup
        ):
            best[p.drafter] = p
    return list(best.values())


def method_row(p: BenchPoint) -> str:
    draft_per_round = p.c_loop * p.drafted_per_round if p.drafted_per_round else 0.0
    c = f"{p.c_loop:.3f}" if np.isfinite(p.c_loop) else "-"
    return (
        f"| {p.drafter} | {p.k} | {p.nodes_per_round:.2f} | {p.alpha:.3f} | "
        f"{p.tokens_per_round:.2f} | {c} | {draft_per_round:.3f} | {p.v_loop:.2f} | "
        f"**{p.speedup:.2f}x** "
        f"({min(p.speedups):.2f}..{max(p.speedups):.2f}) | {p.predicted_loop:.2f}x | "
        f"{by_position_text(p.alpha_by_position)} |"
    )


HEADER = [
    "| drafter | k | nodes/round | alpha | tokens/round | c | draft/round | v | "
    "**speedup** (spread) | Leviathan, own c, v | alpha by position 1..k |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
]


def equal_nodes_pairs(
    report: BenchReport, temperature: float
) -> list[tuple[BenchPoint, BenchPoint]]:
    # (chain, dynamic tree) points measured at the same k, so at the same node budget
    points = {(p.drafter, p.k): p for p in report.points if p.temperature == temperature}
    return [
        (points[(chain, k)], tree)
        for (name, k), tree in points.items()
        for chain in [EQUAL_NODES.get(name)]
        if chain is not None and (chain, k) in points
    ]


def equal_nodes_lines(reports: dict[str, BenchReport]) -> list[str]:
    # the chain against its dynamic tree at equal nodes, every set, T and k measured
    rows = [
        f"| {set_name}, {t:g} | {chain.drafter} / {tree.drafter} | {chain.k} | "
        f"{chain.nodes_per_round:.2f} / {tree.nodes_per_round:.2f} | "
        f"{chain.tokens_per_round:.2f} / {tree.tokens_per_round:.2f} | "
        f"{chain.v_loop:.2f} / {tree.v_loop:.2f} | "
        f"{chain.speedup:.2f}x / {tree.speedup:.2f}x |"
        for set_name, report in reports.items()
        for t in sorted({p.temperature for p in report.points})
        for chain, tree in equal_nodes_pairs(report, t)
    ]
    if not rows:
        return []
    return [
        "",
        "Chain against dynamic tree at equal nodes (the tree's k is its node budget: at most k "
        "candidates per verification pass, as the chain's k drafts), chain / tree:",
        "",
        "| prompts, T | drafters | k | nodes/round | tokens/round | v | speedup |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]


def methods_markdown(
    reports: dict[str, BenchReport], machine: str, command: str, refused: dict | None = None
) -> str:
    # refused: {drafter: why} for the drafters this pair cannot run (no trained parts for
    # its target), listed by name under the tables
    first = next(iter(reports.values()))
    lines = [
        f"Machine: {machine}",
        f"Command: `{command}`",
        f"{first.max_new_tokens} new tokens per prompt, {first.repeats} repeats; medians over "
        "repeats, speedups are ratios within each repeat (spread = min..max). c = drafting "
        "time per drafted token, draft/round = drafting time per round, v = the target's "
        "verification pass per round, all in autoregressive decode steps, from the runs' own "
        "stage clocks. Leviathan = E(alpha, k) / (k_round c + v) with those terms. A tree "
        "row's k is its depth and its alpha counts depths as a chain's counts positions "
        "(docs/algorithm.md, 'Tree drafts'), so c is per depth drafted; nodes/round = the "
        "candidates each verification pass judged (a chain: its drafts; a tree: every node "
        "but the root), the rows v pays for. eagle-tree's k is its node budget and depth "
        "limit (EAGLE-2's dynamic tree: it verifies as many nodes as eagle's chain at the same "
        "k); its depth varies from round to round, so its Leviathan column (the chain's "
        "formula at k) is a rough guide only. alpha by position = P(accept position i | "
        "examined) (a tree: depth i).",
    ]
    for set_name, report in reports.items():
        temperatures = sorted({p.temperature for p in report.points})
        for t in temperatures:
            lines += [
                "",
                f"**{set_name}**, {report.n_prompts} prompts, T = {t:g}: best k per drafter",
                "",
            ]
            lines += HEADER + [method_row(p) for p in best_points(report, t)]
    lines += equal_nodes_lines(reports)
    lines += ["", "Every (drafter, k) measured:", ""]
    for set_name, report in reports.items():
        for t in sorted({p.temperature for p in report.points}):
            lines += ["", f"{set_name}, T = {t:g}", ""]
            lines += HEADER + [method_row(p) for p in report.points if p.temperature == t]
    if refused:
        lines += ["", "Not run on this pair:", ""]
        lines += [f"- {name}: {why}" for name, why in refused.items()]
    return "\n".join(lines) + "\n"

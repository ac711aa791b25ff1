"""Laws and the oracle: how verify assembles the target's law from accepted and corrected mass
(one small example), exact output laws against the target's, and the oracle's p-values on a
correct and on broken samplers."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from reference.speculative import ACCEPTED
from reference.verification import residual_distribution
from specdec.figures.style import FATE_COLOURS, display_token, save


def plot_acceptance_example(p, q, path, labels=None, sampled=None, n_samples: int = 0) -> Path:
    """One position, small vocabulary: q, p, and how the output law is assembled —
    accepted mass min(p, q) plus rejection mass P(reject) · norm(max(0, p - q)) — against p.
    `sampled` (optional): output frequencies measured by running `verify`."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    V = len(p)
    labels = labels or [str(i) for i in range(V)]
    accepted = np.minimum(p, q)
    reject = 1.0 - accepted.sum()
    residual = reject * residual_distribution(p, q)
    x = np.arange(V)
    fig, ax = plt.subplots(figsize=(max(6.5, 1.7 * V + 3), 4.3))
    w = 0.2
    ax.bar(x - 1.5 * w, q, w, color=FATE_COLOURS["draft"], edgecolor="#555555", label="draft q")
    ax.bar(
        x - 0.5 * w,
        accepted,
        w,
        color=FATE_COLOURS[ACCEPTED],
        edgecolor="#555555",
        label="accepted draft mass q·min(1, p/q)",
    )
    ax.bar(
        x - 0.5 * w,
        residual,
        w,
        bottom=accepted,
        color=FATE_COLOURS["correction"],
        edgecolor="#555555",
        label="rejection mass × residual norm(max(0, p−q))",
    )
    ax.bar(x + 0.5 * w, p, w, color="white", edgecolor="black", hatch="//", label="target p")
    if sampled is not None:
        sampled = np.asarray(sampled, dtype=np.float64)
        err = np.sqrt(sampled * (1 - sampled) / n_samples) * 1.96 if n_samples else None
        ax.bar(
            x + 1.5 * w,
            sampled,
            w,
            color="#4a90d9",
            edgecolor="#555555",
            yerr=err,
            capsize=3,
            label=f"verify, sampled ({n_samples:,} runs, 95% CI)",
        )
    for i in range(V):
        ax.text(
            x[i] - 0.5 * w,
            accepted[i] + residual[i] + 0.015,
            f"{accepted[i]:.2f}+{residual[i]:.2f}",
            ha="center",
            fontsize=8,
        )
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=11)
    ax.set_ylabel("probability")
    ax.set_ylim(0, 1.08)
    ax.set_title(
        f"Accepted + corrected = target: acceptance rate Σ min(p, q) = "
        f"{accepted.sum():.2f}, P(reject) = {reject:.2f}"
    )
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(True, axis="y", alpha=0.3)
    return save(fig, path)


def plot_law_comparison(
    target, laws: dict, path, token_label=None, top: int = 10, title: str = ""
) -> Path:
    """Output laws of several verify set-ups (name -> [V] probabilities) against the law the
    target really samples from. Legends carry the total-variation distance to the target."""
    target = np.asarray(target, dtype=np.float64)
    order = np.argsort(-target, kind="stable")[:top]
    order = order[target[order] > 0]  # never a named bar for a token the target cannot emit
    rest = np.setdiff1d(np.arange(len(target)), order)
    others = "others (p = 0)" if target[rest].sum() == 0 else "others"

    def shown(law):  # the top tokens, then all the others pooled in one bar
        return np.append(law[order], law[rest].sum())

    names = list(laws)
    n = len(names) + 1
    w = 0.8 / n
    x = np.arange(len(order) + 1)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.9 * len(order) + 3), 4.3))
    ax.bar(
        x - 0.4 + w / 2,
        shown(target),
        w,
        color="white",
        edgecolor="black",
        hatch="//",
        label="target: what p would sample",
    )
    palette = ["#2ca02c", "#d62728", "#ff7f0e", "#9467bd", "#8c564b"]
    for j, name in enumerate(names):
        law = np.asarray(laws[name], dtype=np.float64)
        tv = 0.5 * np.abs(law - target).sum()
        ax.bar(
            x - 0.4 + w * (j + 1.5),
            shown(law),
            w,
            color=palette[j % len(palette)],
            alpha=0.85,
            label=f"{name}  (TV distance {tv:.3f})",
        )
    ax.set_xticks(x)
    ax.set_xticklabels(
        [f"'{display_token(t, token_label)}'" for t in order] + [others],
        family="DejaVu Sans Mono",
    )
    ax.set_ylabel("probability of the emitted token")
    ax.set_xlabel(
        f"the {len(order)} most likely tokens under the target (p > 0), then all others pooled"
    )
    ax.set_title(title or "Exact output law of verify (verify_law) vs the target's law")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return save(fig, path)


def plot_oracle_power(results: dict, path, level: float = 1e-3, title: str = "") -> Path:
    """results: variant name -> p-value of a goodness-of-fit test against the target law.
    The correct sampler should sit left of the line (no alarm); each broken one far right."""
    names = list(results)
    pvals = np.array([max(results[n], 1e-300) for n in names])
    score = -np.log10(pvals)
    fig, ax = plt.subplots(figsize=(7.5, 0.5 * len(names) + 1.6))
    colours = ["#d62728" if p < level else "#2ca02c" for p in pvals]
    ax.barh(np.arange(len(names)), np.minimum(score, 300), color=colours)
    ax.axvline(-np.log10(level), color="black", ls="--", label=f"alarm at p < {level:g}")
    for i, name in enumerate(names):
        text = "p < 1e-300" if results[name] <= 1e-300 else f"p = {results[name]:.2g}"
        x = min(score[i], 300)
        ax.text(x * 1.12 + 0.3, i, text, va="center", fontsize=8)
    ax.set_yticks(np.arange(len(names)))
    ax.set_yticklabels(names)
    ax.invert_yaxis()
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlim(0, max(30.0, float(np.minimum(score, 300).max()) * 5))
    ax.set_xlabel("−log10(p-value)   (right = the test is sure the law is wrong)")
    ax.set_title(title or "The oracle on a correct and on broken samplers")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)
    return save(fig, path)

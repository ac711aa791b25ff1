"""Figures drawn from real runs (traces, statistics, benchmark reports).

matplotlib with the Agg backend: no display needed; every function writes a PNG and
returns its path. Kept apart from the core so that `reference` itself needs only NumPy.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

COLOURS = {0.0: "#1f77b4", 0.8: "#d62728"}


def colour_for(temperature: float) -> str:
    return COLOURS.get(temperature, "#2ca02c")


def save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_speedup_vs_k(report, path) -> Path:
    """Measured speedup (median, with min..max over repeats) against k, per temperature."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for t in sorted({p.temperature for p in report.points}):
        pts = [p for p in report.points if p.temperature == t]
        ks = [p.k for p in pts]
        med = np.array([p.speedup for p in pts])
        lo = med - np.array([min(p.speedups) for p in pts])
        hi = np.array([max(p.speedups) for p in pts]) - med
        label = "greedy" if t == 0 else f"T = {t:g}"
        ax.errorbar(ks, med, yerr=[lo, hi], marker="o", capsize=3, color=colour_for(t), label=label)
        ax.plot(ks, [p.predicted_corrected for p in pts], ls="--", color=colour_for(t), alpha=0.6)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("draft length k")
    ax.set_ylabel("speedup over autoregressive")
    ax.set_title("Measured speedup (dashed: prediction from measured alpha, c, v)")
    ax.legend()
    return save(fig, path)


def plot_measured_vs_predicted(report, path) -> Path:
    """Each (T, k) point: measured speedup against Leviathan's prediction, plain and corrected."""
    fig, ax = plt.subplots(figsize=(5.0, 5.0))
    pts = report.points
    top = max(max(p.speedup, p.predicted, p.predicted_corrected) for p in pts) * 1.1
    ax.plot([0, top], [0, top], color="grey", lw=0.8)
    ax.scatter(
        [p.predicted for p in pts],
        [p.speedup for p in pts],
        marker="x",
        color="grey",
        label="Leviathan (verify costs 1 step)",
    )
    for t in sorted({p.temperature for p in pts}):
        sel = [p for p in pts if p.temperature == t]
        ax.scatter(
            [p.predicted_corrected for p in sel],
            [p.speedup for p in sel],
            color=colour_for(t),
            label=f"corrected, {'greedy' if t == 0 else f'T={t:g}'}",
        )
        for p in sel:
            ax.annotate(
                str(p.k),
                (p.predicted_corrected, p.speedup),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("predicted speedup")
    ax.set_ylabel("measured speedup")
    ax.set_title("Measured vs predicted (labels: k)")
    ax.legend(fontsize=8)
    return save(fig, path)


def plot_accepted_histogram(histogram: np.ndarray, path, title: str = "") -> Path:
    """Rounds that accepted 0..k drafts."""
    histogram = np.asarray(histogram)
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    share = histogram / histogram.sum()
    ax.bar(np.arange(len(histogram)), share, color="#2ca02c")
    ax.set_xticks(np.arange(len(histogram)))
    ax.set_xlabel("drafts accepted in a round")
    ax.set_ylabel("share of rounds")
    ax.set_title(title or f"Accepted-length histogram (k = {len(histogram) - 1})")
    return save(fig, path)

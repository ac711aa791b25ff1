"""Benchmark figures, from a BenchReport (specdec.measure.bench.run_bench) or from SpeculativeStats:
speedup and acceptance against k, measured against predicted speedup, the accepted-length
histogram, and acceptance per draft position."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from reference.speculative import SpeculativeStats
from specdec.costs import expected_tokens_per_round
from specdec.figures.style import colour_for, save


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
        ax.plot(ks, [p.predicted_loop for p in pts], ls="--", color=colour_for(t), alpha=0.6)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("draft length k")
    ax.set_ylabel("decode speedup over autoregressive")
    ax.set_title("Measured speedup (dashed: E / (k c + v) from the run's alpha, c, v)")
    ax.legend()
    return save(fig, path)


def plot_measured_vs_predicted(report, path) -> Path:
    """Each (T, k) point: measured speedup against three predictions of E / (k c + v):
    Leviathan's (v = 1), with c and v timed in isolation, and with c and v as the run spent
    them. On the diagonal, nothing but the measured terms limits the speedup."""
    fig, ax = plt.subplots(figsize=(5.4, 5.4))
    pts = report.points
    top = max(max(p.speedup, p.predicted, p.predicted_corrected, p.predicted_loop) for p in pts)
    top *= 1.1
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
        name = "greedy" if t == 0 else f"T={t:g}"
        ax.scatter(
            [p.predicted_corrected for p in sel],
            [p.speedup for p in sel],
            facecolors="none",
            edgecolors=colour_for(t),
            label=f"c, v timed in isolation, {name}",
        )
        ax.scatter(
            [p.predicted_loop for p in sel],
            [p.speedup for p in sel],
            color=colour_for(t),
            label=f"c, v as the run spent them, {name}",
        )
        for p in sel:
            ax.annotate(
                str(p.k),
                (p.predicted_loop, p.speedup),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("predicted speedup")
    ax.set_ylabel("measured decode speedup")
    ax.set_title("Measured vs predicted (labels: k)")
    ax.legend(fontsize=7)
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


def plot_acceptance_vs_k(report, path) -> Path:
    """A BenchReport (specdec.measure.bench.run_bench): per temperature, the measured alpha against
    k (left) and the measured tokens per target pass against Leviathan's
    E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha) computed from that alpha (right)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.0))
    temperatures = sorted({p.temperature for p in report.points})
    for t in temperatures:
        pts = sorted((p for p in report.points if p.temperature == t), key=lambda p: p.k)
        ks = np.array([p.k for p in pts])
        alphas = np.array([p.alpha for p in pts])
        colour = colour_for(t)
        name = "greedy" if t == 0 else f"T = {t:g}"
        ax1.plot(ks, alphas, marker="o", color=colour, label=f"{name}: measured α")
        pooled = float(np.mean(alphas))
        ax1.axhline(pooled, color=colour, ls=":", lw=1)
        kk = np.linspace(ks.min(), ks.max(), 100)
        ax2.plot(
            kk,
            [expected_tokens_per_round(pooled, x) for x in kk],
            color=colour,
            ls="--",
            alpha=0.7,
            label=f"{name}: E(ᾱ, k), ᾱ = {pooled:.2f}",
        )
        ax2.plot(
            ks,
            [p.tokens_per_round for p in pts],
            marker="o",
            color=colour,
            label=f"{name}: measured",
        )
    ks_all = sorted({p.k for p in report.points})
    ax2.plot(ks_all, np.array(ks_all) + 1, color="#bbbbbb", lw=0.8, label="ceiling k + 1")
    ax1.set_ylim(0, 1)
    ax1.set_xlabel("draft length k")
    ax1.set_ylabel("α = accepted / examined drafts")
    ax1.set_title("Per-token acceptance α against k (dotted: mean)")
    ax1.legend(fontsize=8, loc="lower left")
    ax2.set_xlabel("draft length k")
    ax2.set_ylabel("tokens per target pass")
    ax2.set_title("Tokens per round: measured vs (1 − α^(k+1)) / (1 − α)")
    ax2.legend(fontsize=8, loc="upper left")
    for ax in (ax1, ax2):
        ax.set_xticks(ks_all)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return save(fig, path)


def plot_per_position_acceptance(stats_by_label: dict, path, title: str = "") -> Path:
    """label -> SpeculativeStats (or list, pooled): P(accept x_i | x_i examined) per draft
    position i, with alpha and mean tokens per round in the legend."""
    fig, ax = plt.subplots(figsize=(6.8, 4.0))
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    for j, (label, runs) in enumerate(stats_by_label.items()):
        runs = runs if isinstance(runs, (list, tuple)) else [runs]
        pooled = SpeculativeStats.pooled(runs)
        rate = pooled.per_position_acceptance  # [k]
        pos = np.arange(1, len(rate) + 1)
        ax.plot(
            pos,
            rate,
            marker="o",
            color=palette[j % len(palette)],
            label=f"{label}: α = {pooled.alpha:.2f}, "
            f"{pooled.mean_tokens_per_round:.2f} tokens/round",
        )
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("draft position i")
    ax.set_xticks(pos)
    ax.set_ylabel("P(accept x_i | x_i examined)")
    ax.set_title(title or "Acceptance per draft position")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, path)

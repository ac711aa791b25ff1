"""Mechanics and costs: why one pass over k rows costs about one row (matmul times, forward
costs), how far a pass is from its floor (the roofline), which slots a new position attends
to (the causal mask), and what speedup Leviathan's formula predicts from measured costs."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from reference.model import causal_mask
from specdec.costs import predicted_speedup
from specdec.figures.style import save


def plot_matmul_times(times: dict, path, blocked: dict | None = None) -> Path:
    """times[H][k] = median seconds of one [k, H] @ [H, H] product (measured by the caller);
    `blocked`, the same for the blocked few-row product of specdec/fast_cpu/model.py (dashed lines).

    Left: seconds per call; right: seconds per row. A row costs less in a k-row product than
    alone only where the right panel's curve falls below its k = 1 point."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    cmap = plt.get_cmap("viridis")
    Hs = sorted(times)
    for j, H in enumerate(Hs):
        colour = cmap(j / max(1, len(Hs) - 1) * 0.85)
        for label, table, ls in (("x @ W", times, "-"), ("blocked", blocked or {}, "--")):
            if H not in table:
                continue
            ks = sorted(table[H])
            t = np.array([table[H][k] for k in ks])
            name = f"H = {H}" + (f", {label}" if blocked else "")
            ax1.plot(ks, t * 1e6, marker="o", ls=ls, color=colour, label=name)
            ax2.plot(ks, t / np.array(ks) * 1e6, marker="o", ls=ls, color=colour, label=name)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("rows k in [k, H] @ [H, H]")
        ax.grid(True, which="both", alpha=0.3)
    ax1.set_ylabel("µs per product")
    ax1.set_title("Time of one product")
    ax2.set_ylabel("µs per row (product time / k)")
    ax2.set_title("Time per row: below the k = 1 point, rows are cheaper together")
    ax2.legend(fontsize=7, ncol=2 if blocked else 1)
    fig.suptitle("One row (k = 1, decoding) vs a few rows (k > 1, verification)")
    fig.tight_layout()
    return save(fig, path)


def plot_forward_costs(profile, path) -> Path:
    """A CostProfile: target pass time over T new positions, per pass and per position,
    with the draft's one-token step for scale."""
    Ts = np.array(sorted(profile.target_append))
    t = np.array([profile.target_append[T] for T in Ts]) * 1e3
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.0))
    ax1.plot(Ts, t, marker="o", color="#d62728", label="target pass over T positions")
    ax1.plot(Ts, t[0] * Ts, ls=":", color="grey", label="T separate one-token steps")
    ax1.axhline(
        profile.draft_step * 1e3,
        color="#1f77b4",
        ls="--",
        label=f"draft one-token step (c = {profile.c:.3f})",
    )
    ax1.set_xlabel("new positions T in one forward pass (cache warm)")
    ax1.set_ylabel("ms")
    ax1.set_title("One pass over T positions vs T one-token passes")
    ax1.legend(fontsize=8)
    ax2.bar(Ts, t / Ts, color="#d62728", alpha=0.8)
    ax2.set_xlabel("new positions T")
    ax2.set_ylabel("ms per position")
    ax2.set_title("Cost per position (pass time / T)")
    for ax in (ax1, ax2):
        ax.set_xticks(Ts)
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return save(fig, path)


def plot_roofline(
    curves: dict[str, dict[int, float]],
    floors: dict[int, float],
    path,
    mark_v: float | None = None,
) -> Path:
    """Seconds per pass over T new rows, one curve per model ({name: {T: s}}), against the
    floor of specdec.measure.roofline ({T: s}): left the times in ms, right
    v(T) = time(T) / time(1). `mark_v` draws a target on the v(T) panel."""
    Ts = sorted(floors)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    styles = {"plain": ("tab:gray", "o"), "fast path": ("tab:blue", "s")}
    for name, per_T in curves.items():
        color, marker = styles.get(name, ("tab:green", "^"))
        ms = np.array([per_T[T] for T in Ts]) * 1e3
        left.plot(Ts, ms, marker=marker, color=color, label=name)
        right.plot(Ts, ms / ms[0], marker=marker, color=color, label=name)
    floor_ms = np.array([floors[T] for T in Ts]) * 1e3
    left.plot(Ts, floor_ms, "k--", label="floor: max(bytes / bandwidth, FLOPs / FLOP rate)")
    right.plot(Ts, floor_ms / floor_ms[0], "k--", label="floor")
    if mark_v is not None:
        right.axhline(mark_v, color="tab:red", lw=0.8, ls=":", label=f"target v(8) <= {mark_v}")
    left.set(xlabel="new positions T", ylabel="ms per pass", title="Target pass over T rows")
    right.set(xlabel="new positions T", ylabel="v(T) = time(T) / time(1)", title="v(T)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    return save(fig, path)


def plot_causal_mask(T: int, S: int, path) -> Path:
    """`reference.model.causal_mask(T, S)`: T new rows after S - T cached positions."""
    from matplotlib.colors import ListedColormap

    mask = causal_mask(T, S)
    start = S - T
    fig, ax = plt.subplots(figsize=(0.45 * S + 1.5, 0.45 * T + 1.3))
    ax.imshow(mask, cmap=ListedColormap(["white", "#5cb85c"]), aspect="equal")
    ax.set_xticks(range(S))
    ax.set_yticks(range(T))
    ax.set_yticklabels([f"new {i} (pos {start + i})" for i in range(T)], fontsize=8)
    ax.set_xticklabels(range(S), fontsize=8)
    ax.set_xticks(np.arange(-0.5, S), minor=True)
    ax.set_yticks(np.arange(-0.5, T), minor=True)
    ax.grid(which="minor", color="#999999", lw=0.5)
    ax.tick_params(which="minor", length=0)
    ax.axvline(start - 0.5, color="#d62728", lw=2)
    ax.text(
        start / 2 - 0.5, -0.9, f"{start} cached positions", ha="center", color="#444444", fontsize=9
    )
    ax.text(
        start + T / 2 - 0.5, -0.9, f"{T} new positions", ha="center", color="#d62728", fontsize=9
    )
    ax.set_xlabel("key position (slot) attended to")
    ax.set_title(f"causal_mask(T={T}, S={S}): new position i sees slots ≤ {start} + i", pad=22)
    return save(fig, path)


def plot_speedup_theory(profile, alphas, path, max_k: int | None = None) -> Path:
    """Leviathan's predicted speedup E(alpha, k) / (k c + v) against k, for several alphas,
    with c from a CostProfile: v = 1 (the paper's assumption, close to a GPU) on the left,
    v = v(k+1) measured on this machine on the right. Dots mark each curve's best k."""
    max_k = max_k or max(profile.target_append) - 1
    ks = np.arange(1, max_k + 1)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.0), sharey=True)
    cmap = plt.get_cmap("viridis")
    for ax, measured_v in zip(axes, (False, True), strict=True):
        for j, a in enumerate(alphas):
            v = [profile.verify_cost(k + 1) if measured_v else 1.0 for k in ks]
            s = np.array(
                [predicted_speedup(a, k, profile.c, vk) for k, vk in zip(ks, v, strict=True)]
            )
            colour = cmap(j / max(1, len(alphas) - 1) * 0.85)
            ax.plot(ks, s, marker=".", color=colour, label=f"α = {a:.2f}")
            best = int(np.argmax(s))
            ax.plot(ks[best], s[best], "o", ms=9, mfc="none", mec=colour, mew=2)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("draft length k")
        ax.set_xticks(ks)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("predicted speedup")
    axes[0].set_title(f"verify costs one step (v = 1), c = {profile.c:.3f}")
    axes[1].set_title(f"verify cost v(k+1) measured here, c = {profile.c:.3f}")
    axes[1].legend(fontsize=8)
    fig.suptitle("Leviathan's prediction E(α, k) / (k·c + v): circles mark the best k")
    fig.tight_layout()
    return save(fig, path)

"""Ragged batches (reference/batch.py): how many drafts each sequence kept in each round,
and what one batched verification pass computes for each row."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap

from specdec.figures.style import CACHE_COLOURS, FATE_COLOURS, legend_patches, save

# what a cell of the batched pass is, in `pass_layout`'s arrays
PAD, REAL, HISTORY, NEW, UNUSED = 0, 1, 2, 3, 4
PASS_COLOURS = {
    PAD: "#f2f2f2",  # a padding position: computed, thrown away
    REAL: FATE_COLOURS["draft"],  # a real new token of this row
    HISTORY: CACHE_COLOURS["committed"],  # a committed slot this row reads
    NEW: CACHE_COLOURS["kept"],  # a slot this pass writes for this row
    UNUSED: "#ffffff",  # a key column this row never wrote: masked, still in the product
}


def acceptance_grid(accepted: Sequence[Sequence[int]]) -> np.ndarray:
    # B lists of per-round accepted counts (a finished row's list is shorter)
    # -> [B, R] float, NaN where the row had already finished
    n_rounds = max((len(a) for a in accepted), default=0)
    grid = np.full((len(accepted), n_rounds), np.nan)
    for b, row in enumerate(accepted):
        grid[b, : len(row)] = row
    return grid


def plot_batch_acceptance(
    accepted: Sequence[Sequence[int]],
    drafted: Sequence[Sequence[int]],
    path,
    row_labels: Sequence[str] | None = None,
    title: str = "",
) -> Path:
    """Accepted drafts per sequence (row) and round (column) of one batched run, as a heat
    map: a cell reads "a/k", a accepted of the k the row drafted that round; blank once the
    row has finished (it rides along, feeding nothing). `accepted[b]` and `drafted[b]` are
    `SpeculativeStats.accepted_per_round` and `drafted_per_round` of sequence b."""
    grid = acceptance_grid(accepted)
    B, R = grid.shape
    k_max = max((max(d) for d in drafted if len(d)), default=1)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.42 * R + 2.4), 0.5 * B + 1.6))
    cmap = plt.get_cmap("Greens").with_extremes(bad="#f2f2f2")  # finished: light grey
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=k_max, aspect="auto")
    for b in range(B):
        for r in range(len(accepted[b])):
            a, k = int(accepted[b][r]), int(drafted[b][r])
            ax.text(
                r,
                b,
                f"{a}/{k}",
                ha="center",
                va="center",
                fontsize=7,
                color="white" if a > 0.6 * k_max else "black",
            )
    ax.set_xticks(range(R), [str(r + 1) for r in range(R)], fontsize=7)
    labels = row_labels if row_labels is not None else [f"row {b}" for b in range(B)]
    ax.set_yticks(range(B), labels, fontsize=8)
    ax.set_xlabel("round (one batched target pass each)")
    bar = fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    bar.set_label("drafts accepted", fontsize=8)
    ax.set_title(
        title or "accepted / drafted, per sequence and round (blank: finished)", fontsize=9
    )
    return save(fig, path)


def pass_layout(start, n_new) -> tuple[np.ndarray, np.ndarray]:
    # start [B], n_new [B] of one batched pass -> (tokens [B, T]: REAL or PAD,
    # slots [B, S]: HISTORY, NEW or UNUSED), T = max n_new, S = max(start + n_new): the
    # shapes `batched_forward` computes on
    start, n_new = np.asarray(start), np.asarray(n_new)
    T, S = int(n_new.max(initial=0)), int((start + n_new).max(initial=0))
    tokens = np.where(np.arange(T)[None, :] < n_new[:, None], REAL, PAD)
    j = np.arange(S)[None, :]
    slots = np.where(j < start[:, None], HISTORY, UNUSED)
    slots = np.where((j >= start[:, None]) & (j < (start + n_new)[:, None]), NEW, slots)
    return tokens, slots


def plot_batch_pass(start, n_new, path, row_labels: Sequence[str] | None = None) -> Path:
    """One batched verification pass, row by row. Left, the input `tokens [B, T]`: each
    row's real tokens (its catch-up token and its drafts), then padding up to the longest
    row. Right, the key slots each row's attention spans, `[B, S]`: its committed history,
    the slots this pass writes for it, and the columns beyond, which it never wrote and
    masks, but which the padded product still multiplies. A finished row (n_new = 0)
    feeds padding only; its slots are counted as serving nothing."""
    tokens, slots = pass_layout(start, n_new)
    B, T = tokens.shape
    S = slots.shape[1]
    cmap = ListedColormap([PASS_COLOURS[c] for c in (PAD, REAL, HISTORY, NEW, UNUSED)])
    fig, (left, right) = plt.subplots(
        1,
        2,
        figsize=(min(14.0, 0.06 * S + 0.3 * T + 4.2), 0.45 * B + 1.9),
        gridspec_kw={"width_ratios": [max(T, 1) * 4, max(S, 1)]},
    )
    labels = row_labels if row_labels is not None else [f"row {b}" for b in range(B)]
    for ax, grid in ((left, tokens), (right, slots)):
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=4.5, aspect="auto", interpolation="nearest")
    left.set_yticks(range(B), labels, fontsize=8)
    right.set_yticks(range(B), [])  # the same rows as on the left
    for b in range(B):
        for i in range(T):
            label = "pad" if tokens[b, i] == PAD else str(int(start[b]) + i)
            left.text(i, b, label, ha="center", va="center", fontsize=6.5, color="#444444")
    left.set_xticks(range(T), [str(i) for i in range(T)], fontsize=7)
    left.set_xlabel("position i in the pass (cell: its position id)", fontsize=8)
    real = int(np.asarray(n_new).sum())
    left.set_title(f"tokens [B, T] = [{B}, {T}]: {real} real of {B * T}", fontsize=9)
    right.set_xlabel("key slot j", fontsize=8)
    active = np.asarray(n_new) > 0  # a finished row's columns serve nothing
    needed = int(((np.asarray(start) + np.asarray(n_new)) * active).sum())
    right.set_title(
        f"key slots [B, S] = [{B}, {S}]: {needed} of {B * S} serve an unfinished row",
        fontsize=9,
    )
    fig.legend(
        handles=legend_patches(
            {
                "real token": PASS_COLOURS[REAL],
                "padding": PASS_COLOURS[PAD],
                "committed slot": PASS_COLOURS[HISTORY],
                "written by this pass": PASS_COLOURS[NEW],
                "never written by this row (masked)": PASS_COLOURS[UNUSED],
            }
        ),
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=5,
        fontsize=7,
        frameon=False,
    )
    return save(fig, path)

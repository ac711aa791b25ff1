"""Tree drafts (reference/tree/): one round's tree with every node's fate, and the
attention mask of its verification pass."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from reference.speculative import ACCEPTED, NEVER_EXAMINED, REJECTED
from reference.tree import ancestor_mask, depths_of, position_ids
from specdec.figures.style import FATE_COLOURS, box, display_token, legend_patches, save


def tree_fates(tree, path: Sequence[int]) -> list[str]:
    # -> [n]: "context" for the root, then ACCEPTED (on the path), REJECTED (tried and
    # refused: a sibling before the accepted child, or every child of the path's last node),
    # NEVER_EXAMINED (below a rejected node, or after the accepted sibling)
    fates = ["context"] + [NEVER_EXAMINED] * (tree.n_nodes - 1)
    for node, chosen in zip([0, *path], [*path, None], strict=True):
        for child in tree.children(node):
            if child == chosen:
                fates[child] = ACCEPTED
                break
            fates[child] = REJECTED
    return fates


def tree_layout(parents: np.ndarray) -> np.ndarray:  # [n] parents -> [n] x positions
    # leaves at 0, 1, 2, .. in depth-first order; a parent centred over its children
    parents = np.asarray(parents)
    x = np.zeros(len(parents))
    leaves = 0

    def place(node: int) -> float:
        nonlocal leaves
        kids = np.flatnonzero(parents == node)
        if len(kids) == 0:
            x[node], leaves = leaves, leaves + 1
        else:
            x[node] = np.mean([place(int(c)) for c in kids])
        return x[node]

    place(0)
    return x


def plot_tree(
    tree, path: Sequence[int], token: int, out, captions: dict | None = None, token_label=None
) -> Path:
    """One round's tree: a box per node (its token) at its depth, coloured by its fate; the
    accepted path's edges in bold; under the path's end, the token sampled after it
    (a correction when that node's children were all rejected, a bonus at a leaf).
    `captions`: node -> text printed under its box (p, q, ..)."""
    fates = tree_fates(tree, path)
    depth = tree.depths
    x = tree_layout(tree.parents)
    gap = 1.0 if captions else 0.0  # room under a box for its caption
    dy = 1.8 + gap
    end = path[-1] if len(path) else 0
    kind = "correction" if tree.children(end) else "bonus"
    size = (max(5.0, 0.95 * (x.max() + 2)), 0.55 * dy * (depth.max() + 1) + 1.8)
    fig, ax = plt.subplots(figsize=size)
    on_path = {0, *path}
    for node in range(1, tree.n_nodes):
        parent = int(tree.parents[node])
        bold = node in on_path and parent in on_path
        ax.plot(
            [x[parent], x[node]],
            [
                -depth[parent] * dy - 0.4 - (gap if parent in (captions or {}) else 0.0),
                -depth[node] * dy + 0.4,
            ],
            color="#2e7d32" if bold else "#aaaaaa",
            lw=2.4 if bold else 1.0,
            zorder=0,
        )
    for node in range(tree.n_nodes):
        box(
            ax,
            x[node],
            -depth[node] * dy,
            display_token(tree.tokens[node], token_label),
            FATE_COLOURS[fates[node]],
            size=11,
        )
        ax.text(
            x[node] + 0.45,
            -depth[node] * dy + 0.42,
            str(node),
            fontsize=7,
            color="#666666",
            ha="right",
            va="bottom",
        )
        if captions and node in captions:
            ax.text(
                x[node],
                -depth[node] * dy - 0.5,
                captions[node],
                ha="center",
                va="top",
                fontsize=6.5,
                family="DejaVu Sans Mono",
            )
    # the sampled token, one level below the path's end
    ye = -(depth[end] + 1) * dy
    xe = x[end] if not tree.children(end) else x.max() + 1.2
    box(
        ax,
        xe,
        ye,
        display_token(token, token_label),
        FATE_COLOURS[kind],
        ls="--",
        size=11,
        weight="bold",
        colour="white",
    )
    ax.annotate(
        "",
        xy=(xe, ye + 0.42),
        xytext=(x[end], -depth[end] * dy - 0.42 - (gap if end in (captions or {}) else 0.0)),
        arrowprops=dict(arrowstyle="-|>", color="#555555", lw=1, ls="--"),
    )
    ax.text(xe + 0.55, ye, kind, fontsize=7, va="center", color="#555555")
    for d in range(int(depth.max()) + 1):
        ax.text(-1.3, -d * dy, f"depth {d}", fontsize=8, va="center", color="#444444")
    ax.set_xlim(-1.6, max(x.max(), xe) + 1.4)
    ax.set_ylim(ye - 0.9, 0.9)
    ax.axis("off")
    colours = {
        "root (last committed token)": FATE_COLOURS["context"],
        "accepted": FATE_COLOURS[ACCEPTED],
        "rejected": FATE_COLOURS[REJECTED],
        "never examined": FATE_COLOURS[NEVER_EXAMINED],
        kind: FATE_COLOURS[kind],
    }
    ax.legend(
        handles=legend_patches(colours),
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        ncol=5,
        fontsize=7,
        frameon=False,
    )
    ax.set_title(
        f"a tree of {tree.n_nodes} nodes, depth {tree.depth}: {len(path)} accepted + 1 {kind}",
        fontsize=10,
        pad=20,
    )
    return save(fig, out)


def plot_tree_mask(tree, length: int, out, n_committed: int = 3, token_label=None) -> Path:
    """The verification pass's mask over a tree fed right after `length` committed slots:
    row i (node i, position length + depth) sees every committed slot (the last
    `n_committed` drawn) and its own ancestors among the tree's slots, nothing else."""
    from matplotlib.colors import ListedColormap

    n = tree.n_nodes
    mask = np.concatenate(
        [np.ones((n, n_committed), dtype=bool), ancestor_mask(tree.parents)], axis=1
    )
    depth, pos = depths_of(tree.parents), position_ids(tree.parents, length)
    fig, ax = plt.subplots(figsize=(0.36 * (n + n_committed) + 2.6, 0.36 * n + 1.6))
    ax.imshow(mask, cmap=ListedColormap(["white", "#5cb85c"]), aspect="equal")
    ax.set_yticks(range(n))
    ax.set_yticklabels(
        [
            f"{i} '{display_token(t, token_label)}'  d={d} pos {p}"
            for i, (t, d, p) in enumerate(zip(tree.tokens, depth, pos, strict=True))
        ],
        fontsize=7,
        family="DejaVu Sans Mono",
    )
    ax.set_xticks(range(n + n_committed))
    ax.set_xticklabels(
        [f"{length - n_committed + j}" for j in range(n_committed)] + [str(i) for i in range(n)],
        fontsize=7,
    )
    ax.set_xticks(np.arange(-0.5, n + n_committed), minor=True)
    ax.set_yticks(np.arange(-0.5, n), minor=True)
    ax.grid(which="minor", color="#bbbbbb", lw=0.5)
    ax.tick_params(which="minor", length=0)
    ax.axvline(n_committed - 0.5, color="#d62728", lw=2)
    ax.text(
        n_committed / 2 - 0.5,
        -1.0,
        "committed\n(all seen)",
        ha="center",
        fontsize=7,
        color="#444444",
    )
    ax.text(
        n_committed + n / 2 - 0.5,
        -1.0,
        "tree nodes (temporary slots, by index)",
        ha="center",
        fontsize=7,
        color="#d62728",
    )
    ax.set_xlabel("key attended to: committed slot, then tree node")
    ax.set_title(
        "tree mask: each node sees the committed context and its ancestors;\n"
        "position id = committed length + depth",
        fontsize=9,
        pad=26,
    )
    return save(fig, out)

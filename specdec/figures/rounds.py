"""Rounds and pipeline: the k draft rows, one verification pass, real rounds drawn as a
pipeline (draft → verify → accept / correct → commit / roll back), and every generated token
coloured by its fate."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from reference.speculative import ACCEPTED, NEVER_EXAMINED, REJECTED
from specdec.figures.cache import committed_sequence, written_token
from specdec.figures.style import (
    CACHE_COLOURS,
    FATE_COLOURS,
    FATE_MARKS,
    box,
    display_token,
    legend_patches,
    probability_text,
    save,
    subscript,
)
from specdec.report import fates  # of the emitted tokens: accepted, correction or bonus


def drafts_before(i: int) -> str:
    # the drafts x₁ .. x_i, written out up to two and as a range beyond
    if i <= 2:
        return " ".join(f"x{subscript(j)}" for j in range(1, i + 1))
    return f"x₁…x{subscript(i)}"


def plot_draft_rows(
    tokens, q_rows, path, token_label=None, top: int = 8, context_text: str = ""
) -> Path:
    """A Draft's k sequential proposals: for each position i, the top of q_i and the token
    x_i that was sampled from it (highlighted)."""
    tokens, q_rows = np.asarray(tokens), np.asarray(q_rows)
    k = len(tokens)
    fig, axes = plt.subplots(1, k, figsize=(2.7 * k + 0.6, 3.8), squeeze=False)
    drafted = ""
    for i, ax in enumerate(axes[0]):
        order = np.argsort(-q_rows[i], kind="stable")[:top]
        if tokens[i] not in order:
            order = np.append(order[:-1], tokens[i])
        vals = q_rows[i, order]
        colours = ["#7b61c4" if t == tokens[i] else FATE_COLOURS["draft"] for t in order]
        ax.barh(np.arange(len(order)), vals, color=colours, edgecolor="#555555", lw=0.6)
        ax.set_yticks(np.arange(len(order)))
        ax.set_yticklabels(
            [f"'{display_token(t, token_label)}'" for t in order], family="DejaVu Sans Mono"
        )
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_xlabel("probability")
        # q_{i+1} is conditioned on the drafts before it: none, x₁, x₁ x₂, x₁…x₃, ...
        given = "context" + ("" if i == 0 else ", " + drafts_before(i))
        ax.set_title(
            f"q{subscript(i + 1)}(· | {given})\nx{subscript(i + 1)} = "
            f"'{display_token(tokens[i], token_label)}'  "
            f"(q = {probability_text(q_rows[i, tokens[i]])})",
            fontsize=9,
        )
        ax.grid(True, axis="x", alpha=0.3)
        drafted += display_token(tokens[i], token_label)
    head = f"The draft model proposes k = {k} tokens one after another"
    if context_text:
        head += f" after '{context_text}'"
    fig.suptitle(head + f"  →  '{drafted}'", fontsize=11)
    fig.tight_layout()
    return save(fig, path)


def plot_verification(rnd, path, last_context_token: int, token_label=None) -> Path:
    """One RoundTrace's verification: the k+1 inputs of the single target pass, the k+1
    output rows, and which row scores which candidate (row i sits one position *before*
    the candidate it judges). Right: p_i(x_j) for every row/candidate pair; verify reads
    only the diagonal."""
    k = len(rnd.draft_tokens)
    fig = plt.figure(figsize=(max(9.0, 1.55 * (k + 1) + 5.2), 4.8))
    ax = fig.add_axes([0.02, 0.05, 0.62, 0.82])
    inputs = [last_context_token] + [int(t) for t in rnd.draft_tokens]
    fates = rnd.draft_fates  # [k]
    probs = rnd.acceptance_probabilities
    x0 = 0.0
    ax.set_xlim(-1.6, k + 0.8)
    ax.set_ylim(-0.9, 3.3)
    ax.axis("off")
    ax.text(-1.0, 2.6, "input", ha="center", va="center", fontsize=10, weight="bold")
    ax.text(-1.0, 0.6, "output\nrow", ha="center", va="center", fontsize=10, weight="bold")
    for j, tok in enumerate(inputs):
        x = x0 + j
        if j == 0:
            face, label = FATE_COLOURS["context"], "last\ncontext"
        else:
            face, label = FATE_COLOURS[fates[j - 1]], f"x{subscript(j)}"
        box(ax, x, 2.6, display_token(tok, token_label), face, size=12)
        ax.text(x, 3.15, label, ha="center", va="center", fontsize=8, color="#444444")
        # the output row at this position and the model's arrow through the layers
        ax.annotate(
            "",
            xy=(x, 0.95),
            xytext=(x, 2.15),
            arrowprops=dict(arrowstyle="-|>", color="#999999", lw=1),
        )
        bonus = j == k
        box(
            ax,
            x,
            0.6,
            f"p{subscript(j + 1)}",
            "#fde6c8" if not bonus else "#cfe3f7",
            size=11,
            family="DejaVu Sans",
        )
        if not bonus:
            # row j scores the *next* input: the candidate one column to the right
            verdict = FATE_MARKS[fates[j]]
            ax.annotate(
                "",
                xy=(x + 1 - 0.3, 2.2),
                xytext=(x + 0.3, 0.95),
                arrowprops=dict(
                    arrowstyle="-|>", color="#d62728", lw=1.6, connectionstyle="arc3,rad=-0.15"
                ),
            )
            ax.text(
                x + 0.5,
                -0.2,
                f"p={probability_text(rnd.p_of_drafts[j])}\n"
                f"q={probability_text(rnd.q_of_drafts[j])}\n"
                f"a={probability_text(probs[j])} {verdict}",
                ha="center",
                va="top",
                fontsize=8,
                family="DejaVu Sans Mono",
            )
        else:
            used = rnd.token_kind == "bonus"
            ax.text(
                x,
                -0.2,
                "bonus row\n"
                + (f"→ '{display_token(rnd.token, token_label)}'" if used else "(unused)"),
                ha="center",
                va="top",
                fontsize=8,
                color="#1f5fa8",
            )
    kind = rnd.token_kind
    ax.set_title(
        f"One target pass over {k + 1} positions: row i scores x_i, one position to its right\n"
        f"accepted {rnd.accepted}/{k}, then {kind} '{display_token(rnd.token, token_label)}'",
        fontsize=10,
    )

    # right: p_i(x_j) for all i, j — the diagonal is what verify uses
    ax2 = fig.add_axes([0.70, 0.16, 0.27, 0.62])
    M = rnd.p_rows[:, rnd.draft_tokens]  # [k+1, k]
    im = ax2.imshow(M, cmap="Oranges", vmin=0, vmax=1, aspect="auto")
    for i in range(k + 1):
        for j in range(k):
            ax2.text(
                j,
                i,
                f"{M[i, j]:.2f}",
                ha="center",
                va="center",
                fontsize=7,
                color="black" if M[i, j] < 0.6 else "white",
                weight="bold" if i == j else "normal",
            )
            if i == j:
                ax2.add_patch(
                    plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#d62728", lw=2)
                )
    ax2.set_xticks(range(k))
    ax2.set_xticklabels(
        [
            f"x{subscript(j + 1)}\n'{display_token(t, token_label)}'"
            for j, t in enumerate(rnd.draft_tokens)
        ],
        fontsize=8,
    )
    ax2.set_yticks(range(k + 1))
    ax2.set_yticklabels([f"p{subscript(i + 1)}" for i in range(k + 1)], fontsize=8)
    ax2.set_title("p_i(x_j): verify uses the boxed\ndiagonal i = j", fontsize=9)
    fig.colorbar(im, ax=ax2, fraction=0.05)
    return save(fig, path)


def plot_pipeline(
    trace, prompt, path, rounds=None, token_label=None, context_chars: int = 8
) -> Path:
    """The round pipeline drawn from real rounds: committed context → k drafts (with q) →
    one target pass (min(1, p/q) per draft) → accepted prefix + correction or bonus →
    what each cache keeps and rolls back."""
    rounds = list(range(min(3, len(trace)))) if rounds is None else list(rounds)
    seq = committed_sequence(prompt, trace)
    k_max = max(len(trace[r].draft_tokens) for r in rounds)
    stages = [
        "committed context",
        f"draft k = {k_max}\n(q(x) below)",
        "verify once\n(a = min(1, p/q) below)",
        "accept prefix / correct",
        "commit / roll back\n(target cache, K/V written)",
    ]
    widths = [context_chars, k_max, k_max, k_max + 1, k_max + 1]
    gap = 1.6
    starts = np.cumsum([0] + [w + gap for w in widths[:-1]])
    total = starts[-1] + widths[-1]
    fig, ax = plt.subplots(figsize=(0.5 * total + 1.0, 1.35 * len(rounds) + 1.4))
    for s, (name, x) in enumerate(zip(stages, starts, strict=True)):
        ax.text(
            x + widths[s] / 2 - 0.5, 0.95, name, ha="center", va="bottom", fontsize=9, weight="bold"
        )
    for row, r in enumerate(rounds):
        rnd = trace[r]
        y = -row * 1.35
        fates = rnd.draft_fates  # [k_round]
        ctx = seq[max(0, rnd.context_len - context_chars) : rnd.context_len]
        off = context_chars - len(ctx)
        for j, t in enumerate(ctx):
            box(
                ax,
                starts[0] + off + j,
                y,
                display_token(t, token_label),
                FATE_COLOURS["context"],
                size=9,
            )
        ax.text(starts[0] - 0.8, y, f"round {r + 1}", ha="right", va="center", fontsize=9)
        for i, (t, fate) in enumerate(zip(rnd.draft_tokens, fates, strict=True)):
            box(ax, starts[1] + i, y, display_token(t, token_label), FATE_COLOURS["draft"], size=9)
            ax.text(
                starts[1] + i,
                y - 0.55,
                probability_text(rnd.q_of_drafts[i]),
                ha="center",
                fontsize=6.5,
                color="#555555",
            )
            box(ax, starts[2] + i, y, display_token(t, token_label), FATE_COLOURS[fate], size=9)
            # no mark for a draft never examined: a dash after the number would read as a sign
            mark = "" if fate == NEVER_EXAMINED else FATE_MARKS[fate]
            ax.text(
                starts[2] + i,
                y - 0.55,
                f"{probability_text(rnd.acceptance_probabilities[i])}{mark}",
                ha="center",
                fontsize=6.5,
                color="#555555",
            )
        for i in range(rnd.accepted):
            box(
                ax,
                starts[3] + i,
                y,
                display_token(rnd.draft_tokens[i], token_label),
                FATE_COLOURS[ACCEPTED],
                size=9,
            )
        kind = rnd.token_kind
        box(
            ax,
            starts[3] + rnd.accepted,
            y,
            display_token(rnd.token, token_label),
            FATE_COLOURS[kind],
            size=9,
            colour="white",
            weight="bold",
        )
        ax.text(
            starts[3] + rnd.accepted, y - 0.55, kind, ha="center", fontsize=6.5, color="#555555"
        )
        before, end, after = rnd.target_cache
        kept, dropped = after - before, end - after
        for i in range(kept + dropped):
            rolled = i >= kept
            box(
                ax,
                starts[4] + i,
                y,
                display_token(written_token(seq, rnd, before + i), token_label),
                CACHE_COLOURS["rolled back" if rolled else "kept"],
                hatch="///" if rolled else None,
                size=9,
            )
        ax.text(
            starts[4] + (kept + dropped) / 2 - 0.5,
            y - 0.55,
            f"slots {before}–{end - 1}: {kept} kept, {dropped} rolled back",
            ha="center",
            fontsize=6.5,
            color="#555555",
        )
        for s in range(4):
            x_from = starts[s] + widths[s] - 0.4
            ax.annotate(
                "",
                xy=(starts[s + 1] - 0.6, y),
                xytext=(x_from, y),
                arrowprops=dict(arrowstyle="-|>", color="#888888", lw=1.2),
            )
    ax.set_xlim(starts[0] - 3.0, total + 0.2)
    ax.set_ylim(-(len(rounds) - 1) * 1.35 - 0.9, 1.5)
    ax.axis("off")
    handles = legend_patches(
        {
            "context": FATE_COLOURS["context"],
            "draft": FATE_COLOURS["draft"],
            "accepted": FATE_COLOURS[ACCEPTED],
            "rejected": FATE_COLOURS[REJECTED],
            "never judged": FATE_COLOURS[NEVER_EXAMINED],
            "correction": FATE_COLOURS["correction"],
            "bonus": FATE_COLOURS["bonus"],
            "K/V kept": CACHE_COLOURS["kept"],
        },
        **{
            "K/V rolled back": dict(
                facecolor=CACHE_COLOURS["rolled back"], hatch="///", edgecolor="#555555"
            )
        },
    )
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.02),
        ncol=9,
        fontsize=8,
        frameon=False,
    )
    ax.set_title(
        "Speculative decoding, real rounds: draft k → verify once → accept prefix / "
        "correct → commit / roll back",
        fontsize=11,
    )
    return save(fig, path)


def plot_token_fates(
    trace, prompt, path, token_label=None, line_width: float = 56.0, max_lines: int = 16
) -> Path:
    """The generated text token by token, coloured by fate: accepted draft, correction or
    bonus; the prompt in grey. A newline token ends the line, as in the text."""
    items = [(int(t), "context") for t in np.asarray(prompt)] + fates(trace)
    lines, line, used = [], [], 0.0
    for tok, fate in items:
        label = display_token(tok, token_label)
        w = max(1.0, 0.62 * len(label.replace("\\", "")))
        if used + w > line_width:
            lines.append(line)
            line, used = [], 0.0
        line.append((tok, fate, label, used, w))
        used += w
        if label == "↵":
            lines.append(line)
            line, used = [], 0.0
    if line:
        lines.append(line)
    lines = lines[:max_lines]
    fig, ax = plt.subplots(figsize=(0.24 * line_width + 1.0, 0.34 * len(lines) + 1.3))
    for row, line in enumerate(lines):
        for _tok, fate, label, x, w in line:
            bold = fate in ("correction", "bonus")
            box(ax, x + w / 2, -row, "", FATE_COLOURS[fate], w=w - 0.06, h=0.86, edge="none")
            ax.text(
                x + w / 2,
                -row,
                label,
                ha="center",
                va="center",
                fontsize=9,
                family="DejaVu Sans Mono",
                # whitespace markers stay faint so that the code itself reads first
                color="white" if bold else ("#8a8a8a" if label in ("␣", "↵", "⇥") else "black"),
                fontweight="bold" if bold else "normal",
            )
    ax.set_xlim(-0.2, line_width + 0.2)
    ax.set_ylim(-len(lines) + 0.4, 0.6)
    ax.axis("off")
    counts = {f: sum(1 for _, g in items if g == f) for f in ("accepted", "correction", "bonus")}
    handles = legend_patches(
        {
            "prompt": FATE_COLOURS["context"],
            f"accepted draft ({counts['accepted']})": FATE_COLOURS[ACCEPTED],
            f"correction ({counts['correction']})": FATE_COLOURS["correction"],
            f"bonus ({counts['bonus']})": FATE_COLOURS["bonus"],
        }
    )
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=4,
        fontsize=8,
        frameon=False,
    )
    ax.set_title(
        f"Generated tokens by fate: {sum(counts.values())} new tokens from "
        f"{len(trace)} target passes",
        fontsize=10,
    )
    return save(fig, path)

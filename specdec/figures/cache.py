"""The KV caches through rounds: which slots each round commits, writes and keeps, rolls
back, and which tokens are known but not cached yet. Also the two trace readings the cache
figures need (the committed sequence, the token written in a slot)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from specdec.figures.style import (
    CACHE_COLOURS,
    FATE_COLOURS,
    box,
    display_token,
    legend_patches,
    save,
)


def committed_sequence(prompt, trace) -> np.ndarray:  # [n_prompt + n_generated]
    """The prompt and every emitted token: slot s of a cache holds token s of this."""
    out = list(np.asarray(prompt).tolist())
    for r in trace:
        out.extend(r.emitted)
    return np.asarray(out, dtype=np.int64)


def written_token(seq, rnd, slot: int) -> int:
    """The token whose K/V a round wrote in `slot` (seq: the committed sequence)."""
    # slots [before, end) of a round hold context[before:context_len] + the drafts fed
    return (
        int(seq[slot]) if slot < rnd.context_len else int(rnd.draft_tokens[slot - rnd.context_len])
    )


def plot_cache_rounds(
    trace, prompt, path, first_round: int = 1, n_rounds: int = 8, token_label=None
) -> Path:
    """Slots of the target and the draft KV cache, one row per round of a real trace:
    committed before the round (grey), written and kept (green), written and rolled back
    (red, hatched), and the slots whose token is known but whose K/V is in no cache yet —
    the correction or bonus token (and, after k acceptances, the draft's catch-up) —
    outlined in orange: the next round's pass writes them first."""
    rounds = trace[first_round : first_round + n_rounds]
    if not rounds:
        raise ValueError(f"the trace has {len(trace)} rounds; nothing from round {first_round}")
    seq = committed_sequence(prompt, trace)
    panels = [("target cache (p)", "target_cache")]
    if rounds[0].draft_cache is not None:
        panels.append(("draft cache (q)", "draft_cache"))
    lo = min(getattr(r, attr)[0] for r in rounds for _, attr in panels) - 2
    hi = (
        max(
            max(getattr(r, attr)[1], r.context_len + len(r.emitted))
            for r in rounds
            for _, attr in panels
        )
        + 1
    )
    lo = max(lo, 0)
    width = hi - lo
    fig, axes = plt.subplots(
        len(panels),
        1,
        squeeze=False,
        figsize=(0.36 * width + 3.5, (0.5 * len(rounds) + 1.0) * len(panels) + 0.8),
    )
    for ax, (name, attr) in zip(axes[:, 0], panels, strict=True):
        for row, rnd in enumerate(rounds):
            before, end, after = getattr(rnd, attr)
            known = rnd.context_len + len(rnd.emitted)  # committed tokens after the round
            y = -row
            for s in range(lo, hi):
                if s < before:
                    face, hatch, text = CACHE_COLOURS["committed"], None, seq[s]
                elif s < after:
                    face, hatch, text = CACHE_COLOURS["kept"], None, written_token(seq, rnd, s)
                elif s < end:
                    face, hatch = CACHE_COLOURS["rolled back"], "///"
                    text = written_token(seq, rnd, s)
                elif s < known:
                    face, hatch, text = "white", None, seq[s]
                else:
                    continue
                pending = after <= s < known
                box(
                    ax,
                    s,
                    y,
                    display_token(text, token_label),
                    face,
                    w=0.92,
                    h=0.78,
                    hatch=hatch,
                    size=8,
                    edge=FATE_COLOURS["pending"] if pending else "#777777",
                    ls="--" if pending else "-",
                )
                if pending:
                    # a second, thicker dashed outline so it reads at a glance
                    from matplotlib.patches import Rectangle

                    ax.add_patch(
                        Rectangle(
                            (s - 0.5, y - 0.44),
                            1.0,
                            0.88,
                            fill=False,
                            edgecolor=FATE_COLOURS["pending"],
                            lw=1.8,
                            ls="--",
                        )
                    )
            n_round = first_round + row + 1
            ax.text(lo - 1.0, y, f"round {n_round}", ha="right", va="center", fontsize=8)
            ax.text(
                hi - 0.2,
                y,
                f" {before}→{end}, keep {after}",
                ha="left",
                va="center",
                fontsize=7,
                color="#444444",
                family="DejaVu Sans Mono",
            )
        ax.set_xlim(lo - 4.2, hi + 3.2)
        ax.set_ylim(-len(rounds) + 0.4, 0.9)
        ax.set_yticks([])
        ax.set_xticks(range(lo, hi, 2))
        ax.tick_params(axis="x", labelsize=7)
        ax.set_xlabel("cache slot = position in the sequence")
        ax.set_title(name)
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
    handles = legend_patches(
        {
            "committed earlier": CACHE_COLOURS["committed"],
            "written, committed": CACHE_COLOURS["kept"],
        },
        **{
            "written, rolled back": dict(
                facecolor=CACHE_COLOURS["rolled back"], hatch="///", edgecolor="#777777"
            ),
            "token known, K/V not cached yet": dict(
                facecolor="white", ls="--", lw=1.8, edgecolor=FATE_COLOURS["pending"]
            ),
        },
    )
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(
        "KV cache slots round by round\n(right: committed before → written end, committed after)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return save(fig, path)

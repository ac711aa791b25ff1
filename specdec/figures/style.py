"""Shared named styles of the figures: the colours of temperatures, token fates and cache
slots, the verdict marks, and the small drawing helpers every topic uses (token labels,
subscripts, boxes, legend patches, saving a PNG).

A colour that means one thing (a rejected draft, a rolled-back slot) is named here once, so
that the same fact looks the same in every figure.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from reference.speculative import ACCEPTED, NEVER_EXAMINED, REJECTED
from reference.tokenizer import token_text

TEMPERATURE_COLOURS = {0.0: "#1f77b4", 0.8: "#d62728"}


def colour_for(temperature: float) -> str:
    return TEMPERATURE_COLOURS.get(temperature, "#2ca02c")


def save(fig, path) -> Path:
    """Write the figure as a PNG (folders created), close it, return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


# Keyed by fate: a draft's (RoundTrace.draft_fates) or an emitted token's (specdec.report.fates,
# whose "accepted" is ACCEPTED), plus the roles a token plays before it has a fate.
FATE_COLOURS = {
    "context": "#e6e6e6",  # committed before the round
    "draft": "#d9d2f0",  # proposed by the drafter, not judged yet
    ACCEPTED: "#8fd18f",  # draft accepted by verify (RoundTrace.draft_fates)
    REJECTED: "#f4a6a6",  # the first rejected draft
    NEVER_EXAMINED: "#f2f2f2",  # drafts after the rejection: never judged
    "correction": "#e0524f",  # residual sample after a rejection
    "bonus": "#4a90d9",  # sample from the bonus row after k acceptances
    "pending": "#f5a623",  # token known, its K/V in no cache yet
}
# the verdict next to a draft's acceptance probability
FATE_MARKS = {ACCEPTED: "✓", REJECTED: "✗", NEVER_EXAMINED: "–"}
CACHE_COLOURS = {
    "committed": "#cfcfcf",  # committed in an earlier round
    "kept": "#5cb85c",  # written as temporary this round and committed
    "rolled back": "#f4a6a6",  # written as temporary this round and dropped
}


def probability_text(x: float) -> str:
    """A probability short enough for a box's caption that never reads as zero when it is
    not: two decimals from 0.01 up, one significant digit below (a drafted token can have
    q = 0.003, which two decimals would print as 0.00)."""
    if x >= 0.01 or x == 0.0:
        return f"{x:.2f}"
    return f"{x:.0e}".replace("e-0", "e-")


def display_token(tok: int, token_label=None) -> str:
    """A token as a short, visible label for a figure: space as ␣, newline as ↵, `$` escaped
    so that matplotlib does not read it as mathtext."""
    if token_label is None:
        token_label = token_text
    text = token_label(int(tok))
    text = {" ": "␣", "\\n": "↵", "\\t": "⇥"}.get(text, text)
    return text.replace("$", r"\$")


def box(
    ax,
    x,
    y,
    text,
    face,
    w=0.9,
    h=0.8,
    edge="#555555",
    ls="-",
    hatch=None,
    size=10,
    weight="normal",
    colour="black",
    family="DejaVu Sans Mono",
):
    """A rounded box centred on (x, y) in data units, with `text` inside: one token or slot."""
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle="round,pad=0,rounding_size=0.08",
            facecolor=face,
            edgecolor=edge,
            linestyle=ls,
            hatch=hatch,
            linewidth=1.0,
        )
    )
    if text:
        if len(text) > 2:  # escaped bytes such as \xc3: shrink to fit the box
            size = size * min(1.0, 2.6 / len(text))
        ax.text(
            x,
            y,
            text,
            ha="center",
            va="center",
            fontsize=size,
            fontweight=weight,
            color=colour,
            family=family,
        )


def legend_patches(colours: dict, **extra):
    """Legend handles: one patch per name -> colour, then name -> Patch kwargs (hatches,
    dashed outlines)."""
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=c, edgecolor="#555555", label=name) for name, c in colours.items()]
    for name, kwargs in extra.items():
        handles.append(Patch(label=name, **kwargs))
    return handles


def subscript(n: int) -> str:
    """12 -> "₁₂", for labels such as x₁ and p₄."""
    return str(n).translate(str.maketrans("0123456789+", "₀₁₂₃₄₅₆₇₈₉₊"))

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


# ---------------------------------------------------------------------------------------
# Course figures (notebooks/, docs/figures/). Each one is drawn from objects a real run
# produced: timings, a CostProfile, a Draft, RoundTrace lists, SpeculativeStats, laws.
# ---------------------------------------------------------------------------------------

FATE_COLOURS = {
    "context": "#e6e6e6",  # committed before the round
    "draft": "#d9d2f0",  # proposed by the drafter, not judged yet
    "accepted": "#8fd18f",  # draft accepted by verify
    "rejected": "#f4a6a6",  # the first rejected draft
    "discarded": "#f2f2f2",  # drafts after the rejection: never judged
    "correction": "#e0524f",  # residual sample after a rejection
    "bonus": "#4a90d9",  # sample from the bonus row after k acceptances
    "pending": "#f5a623",  # token known, its K/V in no cache yet
}
CACHE_COLOURS = {
    "committed": "#cfcfcf",  # committed in an earlier round
    "kept": "#5cb85c",  # written as temporary this round and committed
    "rolled back": "#f4a6a6",  # written as temporary this round and dropped
}


def display_token(tok: int, token_label=None) -> str:
    """A token as a short, visible label for a figure: space as ␣, newline as ↵, `$` escaped
    so that matplotlib does not read it as mathtext."""
    if token_label is None:
        from reference.tokenizer import token_text as token_label
    text = token_label(int(tok))
    text = {" ": "␣", "\\n": "↵", "\\t": "⇥"}.get(text, text)
    return text.replace("$", r"\$")


def _box(
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


def _legend_patches(colours: dict, **extra):
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=c, edgecolor="#555555", label=name) for name, c in colours.items()]
    for name, kwargs in extra.items():
        handles.append(Patch(label=name, **kwargs))
    return handles


def plot_matmul_times(times: dict, path) -> Path:
    """times[H][k] = median seconds of one [k, H] @ [H, H] product (measured by the caller).

    Left: seconds per call; right: seconds per row. A flat left curve means the k rows came
    almost for free: the product is bound by reading the [H, H] weights, not by arithmetic.
    """
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    cmap = plt.get_cmap("viridis")
    Hs = sorted(times)
    for j, H in enumerate(Hs):
        ks = sorted(times[H])
        t = np.array([times[H][k] for k in ks])
        colour = cmap(j / max(1, len(Hs) - 1) * 0.85)
        ax1.plot(ks, t * 1e6, marker="o", color=colour, label=f"H = {H}")
        ax2.plot(ks, t / np.array(ks) * 1e6, marker="o", color=colour, label=f"H = {H}")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("rows k in [k, H] @ [H, H]")
        ax.grid(True, which="both", alpha=0.3)
    ax1.set_ylabel("µs per product")
    ax1.set_title("Time of one product")
    ax2.set_ylabel("µs per row (product time / k)")
    ax2.set_title("Time per row: the k rows share one read of the weights")
    ax2.legend(fontsize=8)
    fig.suptitle("Matrix-vector (k = 1, decoding) vs matrix-matrix (k > 1, verification)")
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


def plot_causal_mask(T: int, S: int, path) -> Path:
    """`reference.model.causal_mask(T, S)`: T new rows after S - T cached positions."""
    from matplotlib.colors import ListedColormap

    from reference.model import causal_mask

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
        colours = ["#7b61c4" if t == tokens[i] else "#d9d2f0" for t in order]
        ax.barh(np.arange(len(order)), vals, color=colours, edgecolor="#555555", lw=0.6)
        ax.set_yticks(np.arange(len(order)))
        ax.set_yticklabels(
            [f"'{display_token(t, token_label)}'" for t in order], family="DejaVu Sans Mono"
        )
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_xlabel("probability")
        given = "context" + ("" if i == 0 else f", x₁…x{_sub(i)}")
        ax.set_title(
            f"q{_sub(i + 1)}(· | {given})\nx{_sub(i + 1)} = "
            f"'{display_token(tokens[i], token_label)}'  (q = {q_rows[i, tokens[i]]:.2f})",
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


def _sub(n: int) -> str:
    return str(n).translate(str.maketrans("0123456789+", "₀₁₂₃₄₅₆₇₈₉₊"))


def plot_verification(rnd, path, last_context_token: int, token_label=None) -> Path:
    """One RoundTrace's verification: the k+1 inputs of the single target pass, the k+1
    output rows, and which row scores which candidate (row i sits one position *before*
    the candidate it judges). Right: p_i(x_j) for every row/candidate pair; verify reads
    only the diagonal."""
    k = len(rnd.draft_tokens)
    fig = plt.figure(figsize=(max(9.0, 1.55 * (k + 1) + 5.2), 4.8))
    ax = fig.add_axes([0.02, 0.05, 0.62, 0.82])
    inputs = [last_context_token] + [int(t) for t in rnd.draft_tokens]
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
            i = j - 1
            face = (
                FATE_COLOURS["accepted"]
                if i < rnd.accepted
                else (FATE_COLOURS["rejected"] if i == rnd.accepted else FATE_COLOURS["discarded"])
            )
            label = f"x{_sub(j)}"
        _box(ax, x, 2.6, display_token(tok, token_label), face, size=12)
        ax.text(x, 3.15, label, ha="center", va="center", fontsize=8, color="#444444")
        # the output row at this position and the model's arrow through the layers
        ax.annotate(
            "",
            xy=(x, 0.95),
            xytext=(x, 2.15),
            arrowprops=dict(arrowstyle="-|>", color="#999999", lw=1),
        )
        bonus = j == k
        _box(
            ax,
            x,
            0.6,
            f"p{_sub(j + 1)}",
            "#fde6c8" if not bonus else "#cfe3f7",
            size=11,
            family="DejaVu Sans",
        )
        if not bonus:
            # row j scores the *next* input: the candidate one column to the right
            verdict = "✓" if j < rnd.accepted else "✗" if j == rnd.accepted else "–"
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
                f"p={rnd.p_of_drafts[j]:.2f}\nq={rnd.q_of_drafts[j]:.2f}\n"
                f"a={probs[j]:.2f} {verdict}",
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
            f"x{_sub(j + 1)}\n'{display_token(t, token_label)}'"
            for j, t in enumerate(rnd.draft_tokens)
        ],
        fontsize=8,
    )
    ax2.set_yticks(range(k + 1))
    ax2.set_yticklabels([f"p{_sub(i + 1)}" for i in range(k + 1)], fontsize=8)
    ax2.set_title("p_i(x_j): verify uses the boxed\ndiagonal i = j", fontsize=9)
    fig.colorbar(im, ax=ax2, fraction=0.05)
    return save(fig, path)


def plot_acceptance_example(p, q, path, labels=None, sampled=None, n_samples: int = 0) -> Path:
    """One position, small vocabulary: q, p, and how the output law is assembled —
    accepted mass min(p, q) plus rejection mass P(reject) · norm(max(0, p - q)) — against p.
    `sampled` (optional): output frequencies measured by running `verify`."""
    from reference.verification import residual_distribution

    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    V = len(p)
    labels = labels or [str(i) for i in range(V)]
    accepted = np.minimum(p, q)
    reject = 1.0 - accepted.sum()
    residual = reject * residual_distribution(p, q)
    x = np.arange(V)
    fig, ax = plt.subplots(figsize=(max(6.5, 1.7 * V + 3), 4.3))
    w = 0.2
    ax.bar(x - 1.5 * w, q, w, color="#d9d2f0", edgecolor="#555555", label="draft q")
    ax.bar(
        x - 0.5 * w,
        accepted,
        w,
        color=FATE_COLOURS["accepted"],
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
    rest = np.setdiff1d(np.arange(len(target)), order)

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
        [f"'{display_token(t, token_label)}'" for t in order] + ["others"],
        family="DejaVu Sans Mono",
    )
    ax.set_ylabel("probability of the emitted token")
    ax.set_xlabel(f"the {len(order)} most likely tokens under the target, then all others")
    ax.set_title(title or "Exact output law of verify (verify_law) vs the target's law")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return save(fig, path)


def _sequence(prompt, trace) -> np.ndarray:
    out = list(np.asarray(prompt).tolist())
    for r in trace:
        out.extend(r.emitted)
    return np.asarray(out, dtype=np.int64)


def _written_token(seq, rnd, slot: int) -> int:
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
    seq = _sequence(prompt, trace)
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
                    face, hatch, text = CACHE_COLOURS["kept"], None, _written_token(seq, rnd, s)
                elif s < end:
                    face, hatch = CACHE_COLOURS["rolled back"], "///"
                    text = _written_token(seq, rnd, s)
                elif s < known:
                    face, hatch, text = "white", None, seq[s]
                else:
                    continue
                pending = after <= s < known
                _box(
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
    handles = _legend_patches(
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


def _round_fates(rnd) -> list[str]:
    k = len(rnd.draft_tokens)
    fates = []
    for i in range(k):
        fates.append(
            "accepted" if i < rnd.accepted else "rejected" if i == rnd.accepted else "discarded"
        )
    return fates


def plot_pipeline(
    trace, prompt, path, rounds=None, token_label=None, context_chars: int = 8
) -> Path:
    """The round pipeline drawn from real rounds: committed context → k drafts (with q) →
    one target pass (min(1, p/q) per draft) → accepted prefix + correction or bonus →
    what each cache keeps and rolls back."""
    rounds = list(range(min(3, len(trace)))) if rounds is None else list(rounds)
    seq = _sequence(prompt, trace)
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
        len(rnd.draft_tokens)
        fates = _round_fates(rnd)
        ctx = seq[max(0, rnd.context_len - context_chars) : rnd.context_len]
        off = context_chars - len(ctx)
        for j, t in enumerate(ctx):
            _box(
                ax,
                starts[0] + off + j,
                y,
                display_token(t, token_label),
                FATE_COLOURS["context"],
                size=9,
            )
        ax.text(starts[0] - 0.8, y, f"round {r + 1}", ha="right", va="center", fontsize=9)
        for i, t in enumerate(rnd.draft_tokens):
            _box(ax, starts[1] + i, y, display_token(t, token_label), FATE_COLOURS["draft"], size=9)
            ax.text(
                starts[1] + i,
                y - 0.55,
                f"{rnd.q_of_drafts[i]:.2f}",
                ha="center",
                fontsize=6.5,
                color="#555555",
            )
            face = FATE_COLOURS[fates[i]]
            _box(ax, starts[2] + i, y, display_token(t, token_label), face, size=9)
            mark = "✓" if fates[i] == "accepted" else "✗" if fates[i] == "rejected" else ""
            ax.text(
                starts[2] + i,
                y - 0.55,
                f"{rnd.acceptance_probabilities[i]:.2f}{mark}",
                ha="center",
                fontsize=6.5,
                color="#555555",
            )
        for i in range(rnd.accepted):
            _box(
                ax,
                starts[3] + i,
                y,
                display_token(rnd.draft_tokens[i], token_label),
                FATE_COLOURS["accepted"],
                size=9,
            )
        kind = rnd.token_kind
        _box(
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
            _box(
                ax,
                starts[4] + i,
                y,
                display_token(_written_token(seq, rnd, before + i), token_label),
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
    handles = _legend_patches(
        {
            "context": FATE_COLOURS["context"],
            "draft": FATE_COLOURS["draft"],
            "accepted": FATE_COLOURS["accepted"],
            "rejected": FATE_COLOURS["rejected"],
            "never judged": FATE_COLOURS["discarded"],
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
    from lab.report import fates

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
    face = {
        "context": FATE_COLOURS["context"],
        "accepted": FATE_COLOURS["accepted"],
        "correction": FATE_COLOURS["correction"],
        "bonus": FATE_COLOURS["bonus"],
    }
    for row, line in enumerate(lines):
        for _tok, fate, label, x, w in line:
            bold = fate in ("correction", "bonus")
            _box(ax, x + w / 2, -row, "", face[fate], w=w - 0.06, h=0.86, edge="none")
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
    handles = _legend_patches(
        {
            "prompt": FATE_COLOURS["context"],
            f"accepted draft ({counts['accepted']})": FATE_COLOURS["accepted"],
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


def plot_acceptance_vs_k(report, path) -> Path:
    """A BenchReport (lab.bench.run_bench): per temperature, the measured alpha against
    k (left) and the measured tokens per target pass against Leviathan's
    E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha) computed from that alpha (right)."""
    from lab.costs import expected_tokens_per_round

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


def plot_speedup_theory(profile, alphas, path, max_k: int | None = None) -> Path:
    """Leviathan's predicted speedup E(alpha, k) / (k c + v) against k, for several alphas,
    with c from a CostProfile: v = 1 (the paper's assumption, close to a GPU) on the left,
    v = v(k+1) measured on this machine on the right. Dots mark each curve's best k."""
    from lab.costs import predicted_speedup

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


def plot_per_position_acceptance(stats_by_label: dict, path, title: str = "") -> Path:
    """label -> SpeculativeStats (or list, pooled): P(accept x_i | x_i examined) per draft
    position i, with alpha and mean tokens per round in the legend."""
    fig, ax = plt.subplots(figsize=(6.8, 4.0))
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    for j, (label, runs) in enumerate(stats_by_label.items()):
        runs = runs if isinstance(runs, (list, tuple)) else [runs]
        reached = sum(s.reached for s in runs)
        acc = sum(s.accepted_at for s in runs)
        rate = np.where(reached > 0, acc / np.maximum(reached, 1), np.nan)
        accepted = sum(s.accepted for s in runs)
        alpha = accepted / (accepted + sum(s.rejections for s in runs))
        tpr = sum(s.emitted for s in runs) / sum(s.rounds for s in runs)
        pos = np.arange(1, len(rate) + 1)
        ax.plot(
            pos,
            rate,
            marker="o",
            color=palette[j % len(palette)],
            label=f"{label}: α = {alpha:.2f}, {tpr:.2f} tokens/round",
        )
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("draft position i")
    ax.set_xticks(pos)
    ax.set_ylabel("P(accept x_i | x_i examined)")
    ax.set_title(title or "Acceptance per draft position")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
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

"""Text renderings of a speculative run: the per-round account, the coloured output and
the statistics table. Pure functions returning strings; the CLI decides where they go."""

from __future__ import annotations

from reference.speculative import RoundTrace, SpeculativeStats
from reference.tokenizer import token_text

ANSI = {"accepted": "\033[32m", "correction": "\033[31;1m", "bonus": "\033[34;1m", "end": "\033[0m"}
PLAIN = {"accepted": ("", ""), "correction": ("[", "]"), "bonus": ("{", "}")}
# Without colour the fates go on a second line under the text, one mark per character, so
# that code's own brackets are never mistaken for a marker.
MARKS = {"prompt": " ", "accepted": ".", "correction": "^", "bonus": "+"}
MARKS_LEGEND = (
    "under each line: '.' accepted draft, '^' correction (drawn by the target after a "
    "rejection), '+' bonus (the target's extra token after k acceptances)"
)
COLOUR_LEGEND = "green = accepted draft, red = correction, blue = bonus"


def fates(trace: list[RoundTrace]) -> list[tuple[int, str]]:
    """Every emitted token with its fate: 'accepted' draft, 'correction' or 'bonus'."""
    out = []
    for r in trace:
        for j, tok in enumerate(r.emitted):
            out.append((tok, "accepted" if j < r.accepted else r.token_kind))
    return out


def byte_piece(tok: int) -> str:
    # a byte-level token as running text: newlines and tabs stay real so code keeps its
    # layout; other bytes print readably
    return chr(tok) if tok in (9, 10) or 32 <= tok < 127 else token_text(tok)


def render_tokens(trace: list[RoundTrace], colour: bool, piece=byte_piece) -> str:
    """The generated text with each token marked by fate (colour, or [ ] / { } markers).
    `piece(id) -> str` is the tokenizer's text of one token (bytes by default)."""
    pieces = []
    for tok, fate in fates(trace):
        text = piece(tok)
        if colour:
            pieces.append(f"{ANSI[fate]}{text}{ANSI['end']}")
        else:
            left, right = PLAIN[fate]
            pieces.append(f"{left}{text}{right}")
    return "".join(pieces)


def render_marked(prompt: str, trace: list[RoundTrace], piece=byte_piece) -> str:
    """Prompt + generated text, each line followed by a line of fate marks (MARKS) under
    the generated characters; no colour and no brackets inside the text."""
    segments = [(prompt, "prompt")] + [(piece(tok), fate) for tok, fate in fates(trace)]
    out, line, marks = [], [], []
    for text, fate in segments:
        for ch in text.expandtabs(4) if "\t" in text else text:
            if ch == "\n":  # the newline's own mark sits just after the line's end
                marks.append(MARKS[fate])
                out += ["".join(line), "".join(marks).rstrip()]
                line, marks = [], []
            else:
                line.append(ch)
                marks.append(MARKS[fate])
    out += ["".join(line), "".join(marks).rstrip()]
    # a mark line of blanks (prompt only, or an empty line) is dropped
    return "\n".join(text for i, text in enumerate(out) if i % 2 == 0 or text)


def quoted(tok: int) -> str:
    return "'" + token_text(tok) + "'"


def describe_round(n: int, r: RoundTrace, show=quoted) -> str:
    """One line per round: drafts with p, q and min(1, p/q), the verdict, the cache pointers.
    `show(id) -> str` quotes one token (bytes by default; the CLI passes its tokenizer's)."""
    lines = [f"round {n:3d}  context={r.context_len}"]
    for i, tok in enumerate(r.draft_tokens):
        verdict = "accept" if i < r.accepted else ("REJECT" if i == r.accepted else "-")
        lines.append(
            f"    x{i + 1}={show(int(tok)):8} p={r.p_of_drafts[i]:.3f} "
            f"q={r.q_of_drafts[i]:.3f} min(1,p/q)={r.acceptance_probabilities[i]:.3f}  {verdict}"
        )
    t0, t1, t2 = r.target_cache
    line = f"    -> {r.token_kind} {show(r.token)}; target cache {t0}->{t1} written, {t2} kept"
    if r.draft_cache is not None:
        d0, d1, d2 = r.draft_cache
        line += f"; draft cache {d0}->{d1} written, {d2} kept"
    lines.append(line)
    return "\n".join(lines)


def stats_table(
    stats: SpeculativeStats, timings: dict[str, float] | None = None, tree: str | None = None
) -> str:
    """The run's statistics, one per line. `tree` (the shape, in words) marks a tree run:
    its rows count depths, nodes and accepted paths instead of a chain's drafts."""
    rows = tree_rows(stats, tree) if tree is not None else chain_rows(stats)
    if timings:
        ar, sd = timings["autoregressive_tps"], timings["speculative_tps"]
        rows += [
            ("autoregressive tokens/s", f"{ar:.1f}"),
            ("speculative tokens/s", f"{sd:.1f}"),
            ("measured speedup", f"{sd / ar:.2f}x"),
        ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"  {name:<{width}}  {value}" for name, value in rows)


def chain_rows(stats: SpeculativeStats) -> list[tuple[str, str]]:
    return [
        ("draft length k", f"{stats.k}"),
        ("rounds (target passes)", f"{stats.rounds}"),
        ("tokens emitted", f"{stats.emitted}"),
        ("drafted / accepted", f"{stats.drafted} / {stats.accepted}"),
        ("acceptance rate (accepted/drafted)", f"{stats.acceptance_rate:.3f}"),
        ("alpha (accepted/examined)", f"{stats.alpha:.3f}"),
        ("mean tokens per round", f"{stats.mean_tokens_per_round:.2f}"),
        ("per-position acceptance 1..k", per_position_text(stats)),
        (f"full rounds (all {stats.k} drafted) by drafts accepted 0..k", histogram_text(stats)),
        ("stopped by", stats.stop_reason),
    ]


def tree_rows(stats: SpeculativeStats, shape: str) -> list[tuple[str, str]]:
    # A tree's positions are its depths (1..k, k = its depth): alpha and the per-depth rates
    # count them as a chain counts its positions (docs/algorithm.md, "Tree drafts")
    return [
        ("tree shape", shape),
        ("depth k", f"{stats.k}"),
        ("rounds (target passes)", f"{stats.rounds}"),
        ("tokens emitted", f"{stats.emitted}"),
        ("nodes verified per round", f"{stats.mean_nodes_per_round:.2f} ({stats.nodes} in all)"),
        ("accepted path length per round", f"{stats.mean_accepted_per_round:.2f}"),
        ("mean tokens per round", f"{stats.mean_tokens_per_round:.2f}"),
        ("alpha (accepted/examined depths)", f"{stats.alpha:.3f}"),
        ("per-depth acceptance 1..k", per_position_text(stats)),
        (f"full-depth rounds (depth {stats.k}) by path length 0..k", histogram_text(stats)),
        ("stopped by", stats.stop_reason),
    ]


def per_position_text(stats: SpeculativeStats) -> str:
    # P(accept draft i | draft i was examined); "n/a" where no draft ever got that far
    rates = stats.per_position_acceptance
    text = " ".join("n/a" if rate != rate else f"{rate:.2f}" for rate in rates)
    if any(rate != rate for rate in rates):  # NaN: the position was never examined
        text += "  (n/a: never examined, an earlier draft was always rejected first)"
    return text


def histogram_text(stats: SpeculativeStats) -> str:
    # the histogram counts full-length rounds only; say how many rounds it leaves out
    counts = stats.accepted_histogram
    text = " ".join(str(c) for c in counts)
    left_out = stats.rounds - int(counts.sum())
    if left_out:
        text += f"  (not counted: {left_out} shorter rounds, at the length limit or stopped early)"
    return text

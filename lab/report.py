"""Text renderings of a speculative run: the per-round account, the coloured output and
the statistics table. Pure functions returning strings; the CLI decides where they go."""

from __future__ import annotations

from reference.speculative import RoundTrace, SpeculativeStats
from reference.tokenizer import token_text

ANSI = {"accepted": "\033[32m", "correction": "\033[31;1m", "bonus": "\033[34;1m", "end": "\033[0m"}
PLAIN = {"accepted": ("", ""), "correction": ("[", "]"), "bonus": ("{", "}")}


def fates(trace: list[RoundTrace]) -> list[tuple[int, str]]:
    """Every emitted token with its fate: 'accepted' draft, 'correction' or 'bonus'."""
    out = []
    for r in trace:
        for j, tok in enumerate(r.emitted):
            out.append((tok, "accepted" if j < r.accepted else r.token_kind))
    return out


def render_tokens(trace: list[RoundTrace], colour: bool) -> str:
    """The generated text with each token marked by fate (colour, or [ ] / { } markers)."""
    pieces = []
    for tok, fate in fates(trace):
        # newlines and tabs stay real so code keeps its layout; other bytes print readably
        text = chr(tok) if tok in (9, 10) or 32 <= tok < 127 else token_text(tok)
        if colour:
            pieces.append(f"{ANSI[fate]}{text}{ANSI['end']}")
        else:
            left, right = PLAIN[fate]
            pieces.append(f"{left}{text}{right}")
    return "".join(pieces)


def quoted(tok: int) -> str:
    return "'" + token_text(tok) + "'"


def describe_round(n: int, r: RoundTrace) -> str:
    """One line per round: drafts with p, q and min(1, p/q), the verdict, the cache pointers."""
    lines = [f"round {n:3d}  context={r.context_len}"]
    for i, tok in enumerate(r.draft_tokens):
        verdict = "accept" if i < r.accepted else ("REJECT" if i == r.accepted else "-")
        lines.append(
            f"    x{i + 1}={quoted(int(tok)):8} p={r.p_of_drafts[i]:.3f} "
            f"q={r.q_of_drafts[i]:.3f} min(1,p/q)={r.acceptance_probabilities[i]:.3f}  {verdict}"
        )
    t0, t1, t2 = r.target_cache
    line = f"    -> {r.token_kind} {quoted(r.token)}; target cache {t0}->{t1} written, {t2} kept"
    if r.draft_cache is not None:
        d0, d1, d2 = r.draft_cache
        line += f"; draft cache {d0}->{d1} written, {d2} kept"
    lines.append(line)
    return "\n".join(lines)


def stats_table(stats: SpeculativeStats, timings: dict[str, float] | None = None) -> str:
    rows = [
        ("draft length k", f"{stats.k}"),
        ("rounds (target passes)", f"{stats.rounds}"),
        ("tokens emitted", f"{stats.emitted}"),
        ("drafted / accepted", f"{stats.drafted} / {stats.accepted}"),
        ("acceptance rate (accepted/drafted)", f"{stats.acceptance_rate:.3f}"),
        ("alpha (accepted/examined)", f"{stats.alpha:.3f}"),
        ("mean tokens per round", f"{stats.mean_tokens_per_round:.2f}"),
        ("per-position acceptance", " ".join(f"{a:.2f}" for a in stats.per_position_acceptance)),
        ("accepted-count histogram 0..k", " ".join(str(c) for c in stats.accepted_histogram)),
        ("stopped by", stats.stop_reason),
    ]
    if timings:
        ar, sd = timings["autoregressive_tps"], timings["speculative_tps"]
        rows += [
            ("autoregressive tokens/s", f"{ar:.1f}"),
            ("speculative tokens/s", f"{sd:.1f}"),
            ("measured speedup", f"{sd / ar:.2f}x"),
        ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"  {name:<{width}}  {value}" for name, value in rows)

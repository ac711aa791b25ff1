"""What the grader expects, and how it compares a sample with it.

Every expected law here is derived on its own, in float64, from a hand-written statement of
the rule or from the target's autoregressive process; nothing is imported from the code a
submission could share with the reference (no `verify_law`, `residual_distribution`,
`probabilities`, `emitted_tokens` or `round_draft_length`), so a bug in one of those helpers
cannot move the expectation along with the output.

Notation: p = target, q = draft; k drafts; row i of p and q scores draft i, row k of p is the
bonus row. A law is a dict {outcome: probability}.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

Law = dict
Context = tuple  # tuple[int, ...]: the tokens a row is conditioned on
Rows = Callable[[Context], np.ndarray]  # context -> [V] float64 distribution

MIN_EXPECTED = 20.0  # chi-square cells are merged until each expects this many draws (the
# oracle's figure: below it the chi-square tail is anti-conservative for these laws)


# --------------------------------------------------------------------------------------------
# The rule of one verification, written from the definition
# --------------------------------------------------------------------------------------------


def leftover(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    # [V], [V] -> [V]: the law of the token after a rejection, norm(max(0, p - q)).
    # When p == q a rejection has probability 0 and any law would do; p is used.
    gap = np.clip(p - q, 0.0, None)
    return gap / gap.sum() if gap.sum() > 0 else p / p.sum()


def verify_joint_law(P: np.ndarray, Q: np.ndarray, drafts: tuple[int, ...]) -> Law:
    """P [k+1, V], Q [k, V], fixed drafts [k] -> {(accepted, token): probability}.

    P(reach i) = prod_{j<i} min(1, p_j(x_j)/q_j(x_j)); at i the draft is rejected with
    1 - min(1, p_i/q_i) and the token follows norm(max(0, p_i - q_i)); after k acceptances
    the token follows row k.
    """
    law: Law = {}
    reach = 1.0
    for i, x in enumerate(drafts):
        keep = min(1.0, P[i, x] / Q[i, x])
        for y, r in enumerate(leftover(P[i], Q[i])):
            if reach * (1 - keep) * r > 0:
                law[(i, y)] = reach * (1 - keep) * r
        reach *= keep
    k = len(drafts)
    for y, r in enumerate(P[k]):
        if reach * r > 0:
            law[(k, y)] = reach * r
    return law


def target_joint_law(p_rows: Rows, context: Context, length: int) -> Law:
    """The target's own law of its next `length` tokens: {tokens: probability}.

    An independent source for any round fed drafts drawn from q: the emitted tokens, completed
    by the target's own samples up to `length` tokens, must follow this law exactly.
    """
    law: Law = {}

    def extend(out: Context, w: float) -> None:
        if len(out) == length:
            law[out] = w
            return
        row = p_rows(context + out)
        for y in np.flatnonzero(row > 0):
            extend(out + (int(y),), w * float(row[y]))

    extend((), 1.0)
    return law


# --------------------------------------------------------------------------------------------
# The whole loop: the target's law, and the law of the accepted counts under a round policy
# --------------------------------------------------------------------------------------------


def generation_law(p_rows: Rows, prompt: Context, max_new_tokens: int, eos_id: int | None) -> Law:
    """The target's autoregressive law of the generated tokens (stop at EOS or the limit)."""
    law: Law = {}

    def extend(out: Context, w: float) -> None:
        if len(out) == max_new_tokens or (out and out[-1] == eos_id):
            law[out] = law.get(out, 0.0) + w
            return
        row = p_rows(prompt + out)
        for y in np.flatnonzero(row > 0):
            extend(out + (int(y),), w * float(row[y]))

    extend((), 1.0)
    return law


def draft_length(policy: str, k: int, remaining: int) -> int:
    # "shrink": never draft what could not be emitted (k_round = min(k, remaining - 1));
    # "full": always draft k and cut what overshoots the limit
    return min(k, remaining - 1) if policy == "shrink" else k


def drafts_with_weight(q_rows: Rows, context: Context, k: int) -> Iterator[tuple[Context, float]]:
    """Every draft x_1..x_k with its probability prod_i q(x_i | context, x_<i)."""
    if k == 0:
        yield (), 1.0
        return
    for head, w in drafts_with_weight(q_rows, context, k - 1):
        row = q_rows(context + head)
        for x in np.flatnonzero(row > 0):
            yield head + (int(x),), w * float(row[x])


def cut(tokens: Context, eos_id: int | None, remaining: int) -> Context:
    # what a round emits: everything up to and including the first EOS, at most `remaining`
    if eos_id is not None and eos_id in tokens:
        tokens = tokens[: tokens.index(eos_id) + 1]
    return tokens[:remaining]


def loop_joint_law(
    p_rows: Rows,
    q_rows: Rows,
    prompt: Context,
    *,
    k: int,
    max_new_tokens: int,
    eos_id: int | None,
    policy: str = "shrink",
) -> Law:
    """Law of (tokens, accepted per round) of the speculative loop, rounds chained."""
    frontier: Law = {((), ()): 1.0}
    done: Law = {}
    while frontier:
        (out, accepts), w = frontier.popitem()
        remaining = max_new_tokens - len(out)
        k_round = draft_length(policy, k, remaining)
        context = prompt + out
        for drafts, wq in drafts_with_weight(q_rows, context, k_round):
            P = np.stack([p_rows(context + drafts[:i]) for i in range(k_round + 1)])
            Q = (
                np.stack([q_rows(context + drafts[:i]) for i in range(k_round)])
                if k_round
                else P[:0]
            )
            for (accepted, token), pv in verify_joint_law(P, Q, drafts).items():
                emitted = cut(drafts[:accepted] + (token,), eos_id, remaining)
                state = (out + emitted, accepts + (accepted,))
                finished = len(state[0]) >= max_new_tokens or emitted[-1] == eos_id
                bucket = done if finished else frontier
                bucket[state] = bucket.get(state, 0.0) + w * wq * pv
    return done


def marginal(law: Law, key: Callable) -> Law:
    out: Law = {}
    for o, w in law.items():
        out[key(o)] = out.get(key(o), 0.0) + w
    return out


# --------------------------------------------------------------------------------------------
# Rows of tiny models: the model's conditional under a sampling transform, computed here
# --------------------------------------------------------------------------------------------


def transformed(
    logits: np.ndarray, temperature: float, top_k: int | None, top_p: float = 1.0
) -> np.ndarray:
    # [V] float64 logits -> [V] distribution: argmax at T = 0; else softmax(z / T) on the
    # top_k largest logits, then the nucleus: going down from the likeliest token, keep each
    # token whose predecessors hold less than top_p of the mass, renormalised
    z = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        row = np.zeros_like(z)
        row[int(np.argmax(z))] = 1.0
        return row
    z = (z - z.max()) / temperature
    if top_k is not None and top_k < len(z):
        z = np.where(z >= np.sort(z)[-top_k], z, -np.inf)
    row = np.exp(z) / np.exp(z).sum()
    if top_p < 1.0:
        kept = np.zeros_like(row)
        before = 0.0
        for token in sorted(range(len(row)), key=lambda t: -row[t]):  # ties: lower id first
            if before >= top_p:
                break
            kept[token] = row[token]
            before += row[token]
        row = kept / kept.sum()
    return row


class ModelRows:
    """p(. | context) of a GPT: the last row of an uncached forward of the context (no cache
    that could be wrong), in float64, through `transformed`. Memoised per context."""

    def __init__(
        self, model, temperature: float, top_k: int | None = None, top_p: float = 1.0
    ) -> None:
        self.model, self.temperature, self.top_k, self.top_p = model, temperature, top_k, top_p
        self._rows: dict[Context, np.ndarray] = {}

    def __call__(self, context: Context) -> np.ndarray:
        if context not in self._rows:
            logits = self.model.forward(np.asarray(context, dtype=np.int64))[-1]
            row = transformed(logits, self.temperature, self.top_k, self.top_p)
            self._rows[context] = row
        return self._rows[context]


# --------------------------------------------------------------------------------------------
# Comparing a sample with a law
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """A sample held against its exact law: the p-value and the cells that explain it."""

    p_value: float
    n: int
    impossible: dict  # {outcome: count} seen although the law gives it probability 0
    cells: list  # [(outcomes, observed, expected)] sorted by contribution, largest first
    distance: float  # total variation between the observed frequencies and the law

    def worst(self, how_many: int = 3) -> str:
        if self.impossible:
            shown = sorted(self.impossible.items(), key=lambda oc: -oc[1])[:how_many]
            return ", ".join(f"{o!r} seen {c} times (expected never)" for o, c in shown)
        parts = []
        for group, observed, expected in self.cells[:how_many]:
            name = repr(group[0]) if len(group) == 1 else f"{len(group)} rare outcomes"
            parts.append(f"{name}: {observed} observed, {expected:.0f} expected")
        return "; ".join(parts)


def merged_cells(law: Law, n: int) -> list[list]:
    # Group outcomes, smallest first, until each group expects MIN_EXPECTED of n draws. The
    # grouping depends on the law and n only, never on the data, so the test stays valid.
    order = sorted(law, key=lambda o: (law[o], repr(o)))
    groups, pool, mass = [], [], 0.0
    for o in order:
        pool.append(o)
        mass += law[o]
        if n * mass >= MIN_EXPECTED:
            groups.append(pool)
            pool, mass = [], 0.0
    if pool and groups:
        groups[-1].extend(pool)  # a last pool that falls short joins the group before it
    elif pool:
        groups.append(pool)
    return groups


def compare(counts: Counter, law: Law) -> Comparison:
    """Pearson chi-square of `counts` against `law`; an impossible outcome gives p = 0."""
    return pearson(counts, law)[0]


def pearson(counts: Counter, law: Law) -> tuple[Comparison, float, int]:
    """`compare`'s comparison, with Pearson's statistic and its degrees of freedom (0 when
    there is nothing to test: one merged cell, or an impossible outcome, p = 0)."""
    from scipy import stats  # imported here: `specdec` starts without scipy

    n = sum(counts.values())
    distance = total_variation(counts, law)
    impossible = {o: c for o, c in counts.items() if law.get(o, 0.0) <= 0.0}
    if impossible:
        return Comparison(0.0, n, impossible, [], distance), math.inf, 0
    groups = merged_cells(law, n)
    if len(groups) < 2:
        return Comparison(1.0, n, {}, [], distance), 0.0, 0
    expected = np.array([n * math.fsum(law[o] for o in g) for g in groups])
    observed = np.array([sum(counts.get(o, 0) for o in g) for g in groups])
    terms = (observed - expected) ** 2 / expected
    p = float(stats.chi2.sf(terms.sum(), len(groups) - 1))
    order = np.argsort(-terms)
    cells = [(groups[i], int(observed[i]), float(expected[i])) for i in order]
    return Comparison(p, n, {}, cells, distance), float(terms.sum()), len(groups) - 1


def compare_cases(samples: list[tuple[Counter, Law]]) -> tuple[float, list[Comparison]]:
    """Independent samples, each against its own law -> one p-value for them all, and each
    sample's own comparison (for the story). The p-value is the chi-square tail of the sum of
    their Pearson statistics, at the sum of their degrees of freedom (each sample's cells
    merged as `compare` merges them): one test, at one threshold, however many cases."""
    from scipy import stats

    done = [pearson(counts, law) for counts, law in samples]
    if any(cmp.impossible for cmp, _, _ in done):
        return 0.0, [cmp for cmp, _, _ in done]
    statistic = math.fsum(s for _, s, _ in done)
    dof = sum(d for _, _, d in done)
    p = float(stats.chi2.sf(statistic, dof)) if dof else 1.0
    return p, [cmp for cmp, _, _ in done]


def binomial_p(successes: int, n: int, rate: float) -> float:
    """Two-sided exact binomial p-value of `successes` in n trials at `rate`."""
    from scipy import stats

    return float(stats.binomtest(int(successes), int(n), rate).pvalue)


def total_variation(counts: Counter, law: Law) -> float:
    # half the L1 distance between the observed frequencies and the exact law; with many rare
    # outcomes sampling noise alone makes it positive, so read it next to the p-value
    n = sum(counts.values())
    outcomes = set(counts) | set(law)
    return 0.5 * math.fsum(abs(counts.get(o, 0) / n - law.get(o, 0.0)) for o in outcomes)

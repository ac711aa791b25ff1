"""The verify's law on drawn drafts: drafts from context-dependent tables, from a point-mass
drafter and against a greedy target; the emitted tokens, completed by the target's own
samples to k + 1 tokens, must follow the target's own law of k + 1 tokens.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from specdec.grading.engine.core import Check, Outcome, Runs
from specdec.grading.engine.laws import (
    Context,
    Rows,
    compare,
    target_joint_law,
)
from specdec.grading.engine.submission import CHUNK, Submission, call_verify_each, streams
from specdec.grading.exercises.verify.exact import draw

# --------------------------------------------------------------------------------------------
# 4. Drafts drawn from q, emitted tokens completed by the target: the target's own law
# --------------------------------------------------------------------------------------------


class RandomTable:
    """A "table model": one random row per context, fixed by (seed, context). Dirichlet rows
    with some entries forced to 0; a fraction one-hot; a fraction copying another table
    (p = q there: a refusal is impossible and the residual empty).

    `salt` and `keep_likeliest` (the token spared from the zeros: a random one, or the row's
    likeliest) only choose which rows a seed gives: each family's seeds were chosen on its
    rows, for power."""

    def __init__(
        self,
        n_vocab: int,
        seed: int,
        *,
        zeros: float = 0.25,
        one_hot: float = 0.1,
        copy: Rows | None = None,
        copy_frac: float = 0.0,
        salt: int = 7,
        keep_likeliest: bool = False,
    ) -> None:
        self.n_vocab, self.seed, self.zeros, self.one_hot = n_vocab, seed, zeros, one_hot
        self.copy, self.copy_frac = copy, copy_frac
        self.salt, self.keep_likeliest = salt, keep_likeliest
        self._rows: dict[Context, np.ndarray] = {}

    def __call__(self, context: Context) -> np.ndarray:
        if context not in self._rows:
            self._rows[context] = self.make(context)
        return self._rows[context]

    def make(self, context: Context) -> np.ndarray:
        V = self.n_vocab
        rng = np.random.default_rng([self.seed, self.salt + len(context), *context])
        u = rng.random()
        if self.copy is not None and u < self.copy_frac:
            return self.copy(context).copy()
        if u < self.copy_frac + self.one_hot:
            return np.eye(V)[rng.integers(V)]
        row = rng.dirichlet(np.ones(V))
        dropped = rng.random(V) < self.zeros
        kept = np.argmax(row) if self.keep_likeliest else rng.integers(V)
        dropped[kept] = False  # keep at least one token
        row = np.where(dropped, 0.0, row)
        return row / row.sum()


class PointMass:
    """A deterministic drafter's q (n-gram style): one-hot on a token fixed by the context."""

    def __init__(self, n_vocab: int, seed: int) -> None:
        self.n_vocab = n_vocab
        self.table = np.random.default_rng(seed).integers(n_vocab, size=(n_vocab, n_vocab))

    def __call__(self, context: Context) -> np.ndarray:
        a, b = ((0, 0) + tuple(context))[-2:]
        return np.eye(self.n_vocab)[self.table[a, b]]


def target_law_check(
    name: str, what: str, p_rows, q_rows, k: int, n_runs: int, seed: int, hint: str
) -> Check:
    """Drafts x ~ q, verify, emit x[:accepted] + [token], complete with the target to k + 1
    tokens: the result must follow the target's own law of k + 1 tokens (an independent
    source: it knows nothing of acceptance or residuals)."""

    def outcomes(sub: Submission):
        # the grader's draws (drafts, completions) and the verify's come from two streams of
        # one seed, so that a chunk's calls can be made in one request (CHUNK divides looks)
        grader, rng = streams(seed)
        while True:
            calls = []
            for _ in range(CHUNK):
                x: Context = ()
                for _ in range(k):
                    x += (draw(q_rows(x), grader),)
                P = np.stack([p_rows(x[:i]) for i in range(k + 1)])
                Q = np.stack([q_rows(x[:i]) for i in range(k)])
                calls.append((P, Q, x))
            for (_, _, x), (accepted, token) in zip(
                calls, call_verify_each(sub, calls, rng), strict=True
            ):
                out = x[:accepted] + (token,)
                while len(out) < k + 1:
                    out += (draw(p_rows(out), grader),)
                yield out

    runs = Runs(outcomes, n_runs)

    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        counts = runs.counts(sub, look)
        n = counts.total()
        law = target_joint_law(p_rows, (), k + 1)
        cmp = compare(counts, law)
        ok = cmp.p_value >= threshold
        summary = f"{len(law)} sequences of {k + 1} tokens, p = {cmp.p_value:.2g}"
        if ok:
            return Outcome(True, summary, p_value=cmp.p_value, n=n)
        first = Counter()
        for seq, c in counts.items():
            first[seq[0]] += c
        first_law = {t: w for t, w in enumerate(p_rows(())) if w > 0}
        first_ok = compare(first, first_law).p_value >= 1e-6
        story = [
            f"{n} rounds with k = {k}, drafts drawn from q, the emitted tokens completed by the "
            f"target's own samples; expected: the target's law of {k + 1} tokens",
            f"largest deviations: {cmp.worst()}; total variation {cmp.distance:.3f}",
            "the first token's law is "
            + ("right: the error is in later positions" if first_ok else "already off"),
        ]
        return Outcome(False, summary, story, hint, cmp.p_value, n, generic=True)

    return Check(f"verify/{name}", what, True, run)


def table_checks() -> list[Check]:
    table_p = RandomTable(4, seed=301)
    table_q = RandomTable(4, seed=302, copy=table_p, copy_frac=0.2)
    return [
        target_law_check(
            "tables-k3",
            "drafts from context-dependent tables (zeros, one-hot, p = q): the target's law",
            table_p,
            table_q,
            k=3,
            n_runs=20_000,
            seed=3,
            hint="rows with zeros, one-hot rows and rows where p = q are all here: guard the "
            "division p(x)/q(x) and the residual's normalisation (when p = q, fall back to p)",
        ),
        target_law_check(
            "point-mass-k3",
            "one-hot drafts (n-gram style), soft target: the target's law",
            RandomTable(5, seed=401, one_hot=0.0),
            PointMass(5, seed=402),
            k=3,
            n_runs=10_000,
            seed=4,
            hint="with a one-hot q, a draft is kept with probability p(x) and the residual is p "
            "with the draft's token removed, renormalised",
        ),
        target_law_check(
            "greedy-target-k2",
            "one-hot target rows (greedy), soft drafts: the target's law",
            RandomTable(5, seed=501, one_hot=1.0),
            RandomTable(5, seed=502, one_hot=0.0),
            k=2,
            n_runs=10_000,
            seed=5,
            hint="with a one-hot p, a draft is kept iff it is the target's token, and after a "
            "rejection the token is the target's own choice",
        ),
    ]

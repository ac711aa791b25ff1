"""The checks of a submitted `verify(p_target, q_draft, draft_tokens, rng) -> (accepted, token)`.

Cheapest and most telling first:

1. exact cases (a few calls each, zero variance): one-hot rows where the draft matches the
   target, one-hot rows where it does not, a draft the target gives probability 0, p = q;
2. the article's A/B example: output law (0.6, 0.4) and acceptance rate 0.8;
3. fixed rows, k = 3: the joint law of (accepted, token), read position by position to say
   which decision or which row is off;
4. drafts drawn from context-dependent tables (zeros, one-hot rows, p = q rows), from a
   point-mass drafter, and against a greedy target: the emitted tokens, completed by the
   target's own samples to k + 1 tokens, must follow the target's own law of k + 1 tokens.

Then, in a family of its own, the submission runs inside the reference loop on a tiny GPT pair.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from lab.grading.core import Check, Family, Outcome, Runs
from lab.grading.laws import (
    Context,
    Rows,
    binomial_p,
    compare,
    leftover,
    target_joint_law,
    verify_joint_law,
)
from lab.grading.submission import Submission, call_verify

# --------------------------------------------------------------------------------------------
# The grader's own rows and draws
# --------------------------------------------------------------------------------------------


def draw(row: np.ndarray, rng: np.random.Generator) -> int:
    # [V] -> one index by inverting the CDF (the grader's own sampler, not the reference's)
    cdf = np.cumsum(row)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(row) - 1))


def one_hot_rows(V: int, *ids: int) -> np.ndarray:
    return np.eye(V)[list(ids)]


# --------------------------------------------------------------------------------------------
# 1. Exact cases: the outcome is certain
# --------------------------------------------------------------------------------------------

CALLS_PER_EXACT_CASE = 25  # every call must give the certain outcome


def exact_case(
    name: str,
    what: str,
    P: np.ndarray,
    Q: np.ndarray,
    drafts: Context,
    expected: tuple[int, int],
    explain: Callable[[tuple[int, int], Counter], str],
) -> Check:
    """A case with one possible outcome; `explain(most common wrong outcome, all outcomes)`
    is the hint."""

    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        rng = np.random.default_rng(7)
        seen = Counter(call_verify(sub, P, Q, drafts, rng) for _ in range(CALLS_PER_EXACT_CASE))
        wrong = [o for o in seen if o != expected]
        if not wrong:
            return Outcome(True, f"always {expected} as it must be", n=CALLS_PER_EXACT_CASE)
        with np.printoptions(precision=3, suppress=True):
            story = [
                f"inputs: p_target = {P.tolist()}",
                f"        q_draft  = {Q.tolist()}, draft_tokens = {list(drafts)}",
                f"expected (accepted, token) = {expected} on every call (it is certain here)",
                "observed " + ", ".join(f"{o} x{c}" for o, c in seen.most_common()),
                f"total variation from the certain outcome: "
                f"{1 - seen[expected] / CALLS_PER_EXACT_CASE:.2f}",
            ]
        worst = max(wrong, key=lambda o: seen[o])
        return Outcome(
            False,
            f"returned {worst} {seen[worst]} times out of {CALLS_PER_EXACT_CASE}; "
            f"only {expected} is possible",
            story,
            explain(worst, seen),
            n=CALLS_PER_EXACT_CASE,
        )

    return Check(f"verify/{name}", what, False, run)


def greedy_match_hint(outcome: tuple[int, int], seen: Counter) -> str:
    accepted, token = outcome
    if accepted < 2:
        return (
            f"draft {accepted + 1} is the target's own choice (p(x) = q(x) = 1), so it is "
            f"accepted with probability min(1, p/q) = 1: nothing may be rejected here. "
            f"Accept draft i when u < min(1, p_i(x)/q_i(x)): row i of p and of q, read at the "
            f"draft's token."
        )
    if token == 2:  # the argmax of row k-1
        return (
            "all k drafts were accepted, so the extra token is the bonus, drawn from the last "
            "row of p (p_target[k]); yours is the choice of row k-1 (p_target[k-1] or "
            "q_draft[k-1])"
        )
    return "all k drafts were accepted: the extra token must be drawn from p_target[k]"


def greedy_mismatch_hint(outcome: tuple[int, int], seen: Counter) -> str:
    accepted, token = outcome
    kept = sum(c for (a, t), c in seen.items() if a == 2 and t != 3)
    if 0 < kept < seen.total():
        return (
            f"draft 2 has p(x) = 0 under the target, so it must always be rejected, yet it was "
            f"kept in {kept} of {seen.total()} calls: your acceptance probability is positive "
            f"where p(x) = 0. A relaxed rule (mixing q into p, a lenient threshold) makes "
            f"decoding faster but no longer samples from the target; accept with "
            f"min(1, p(x)/q(x))"
        )
    if accepted == 0:
        return "draft 1 matches the target (p = q = 1): it must be accepted"
    if accepted == 2 and token == 3:
        return (
            "you returned the correction token of draft 2 (3) but counted draft 2 as accepted: "
            "`accepted` is the number of drafts *before* the first rejection"
        )
    if accepted == 2:
        return (
            "draft 2 has p(x) = 0 under the target, so min(1, p(x)/q(x)) = 0 and it must be "
            "rejected; accepting it suggests the ratio is upside down (q/p: DeepMind's paper "
            "and gpt-fast swap the letters; here p = target, q = draft)"
        )
    if token == 2:
        return (
            "after rejecting draft 2 you returned the rejected draft itself (token 2). The "
            "residual norm(max(0, p_i - q_i)) gives it probability 0, since q >= p there; a "
            "residual built from |p - q| does not"
        )
    if token == 0:
        return (
            "the token after a rejection at position i must come from row i of p and q "
            "(here row 1); yours matches row i + 1 (p_target[2]): check the row index"
        )
    return "after a rejection at position i, draw from norm(max(0, p_i - q_i)), here token 3"


def impossible_draft_hint(outcome: tuple[int, int], seen: Counter) -> str:
    accepted, token = outcome
    if accepted == 1:
        return (
            "the draft has p(x) = 0, so min(1, p(x)/q(x)) = 0 and it must be rejected; "
            "accepting it suggests the ratio is upside down (q/p)"
        )
    if token == 1:
        return (
            "token 1 has p = q = 0.5, so max(0, p - q) = 0 there: after a rejection, draw from "
            "the residual norm(max(0, p - q)), not from p itself"
        )
    return (
        "after a rejection the residual is max(0, p - q), normalised: it is 0 wherever "
        "q >= p (here tokens 0 and 1). |p - q| or q - p gives mass to those tokens."
    )


def equal_rows_hint(outcome: tuple[int, int], seen: Counter) -> str:
    accepted, token = outcome
    if accepted < 3:
        return (
            f"p = q at every position, so each draft is accepted with min(1, p/q) = 1 - yet "
            f"draft {accepted + 1} was rejected. The acceptance probability is min(1, p(x)/q(x)) "
            f"(not p(x), not a comparison of argmaxes), with p and q read at the draft's token."
        )
    return (
        "all 3 drafts were accepted (p = q), so the extra token is the bonus, drawn from "
        "p_target[k] (here a point mass on token 2)"
    )


def exact_checks() -> list[Check]:
    soft = np.array([0.1, 0.4, 0.3, 0.2])
    equal = np.stack([soft, np.roll(soft, 1), np.roll(soft, 2)])  # [3, 4], q = p
    return [
        exact_case(
            "greedy-match",
            "one-hot rows, every draft is the target's choice: accept all, bonus from row k",
            one_hot_rows(4, 1, 2, 3),
            one_hot_rows(4, 1, 2),
            (1, 2),
            (2, 3),
            greedy_match_hint,
        ),
        exact_case(
            "greedy-mismatch",
            "one-hot rows, the target disagrees at draft 2: reject it, correct from row 1",
            one_hot_rows(4, 1, 3, 0),
            one_hot_rows(4, 1, 2),
            (1, 2),
            (1, 3),
            greedy_mismatch_hint,
        ),
        exact_case(
            "impossible-draft",
            "a draft with p(x) = 0 is rejected; the residual max(0, p - q) has one token",
            np.array([[0.0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]]),
            np.array([[0.5, 0.5, 0.0]]),
            (0,),
            (0, 2),
            impossible_draft_hint,
        ),
        exact_case(
            "p-equals-q",
            "p = q at every position: never reject; the bonus row is a point mass",
            np.vstack([equal, one_hot_rows(4, 2)]),
            equal,
            (1, 3, 0),
            (3, 2),
            equal_rows_hint,
        ),
    ]


# --------------------------------------------------------------------------------------------
# 2. The article's A/B example
# --------------------------------------------------------------------------------------------

# q = (0.8, 0.2) over {A, B}, p = (0.6, 0.4): A is kept with min(1, 0.6/0.8) = 0.75, B always;
# a rejected A is replaced by norm(max(0, p - q)) = B. So P(first token = A) = 0.8 * 0.75 =
# 0.6, and P(accept) = 0.8 * 0.75 + 0.2 = 0.8. Hand-derived, not computed by code.
AB_P = np.array([[0.6, 0.4], [0.3, 0.7]])  # row 1: the bonus row (any law would do)
AB_Q = np.array([[0.8, 0.2]])
AB_N = 20_000


def ab_outcomes(sub: Submission):
    # -> an endless stream of (draft, accepted, token): drafts drawn from q by the grader
    rng = np.random.default_rng(1)
    while True:
        x = draw(AB_Q[0], rng)
        yield (x, *call_verify(sub, AB_P, AB_Q, (x,), rng))


def ab_story(counts: Counter) -> tuple[list[str], str]:
    """Expected vs observed on the A/B example, and the hint its pattern points to."""
    n = counts.total()
    drafted_a = sum(c for (x, _, _), c in counts.items() if x == 0)
    kept_a = sum(c for (x, a, _), c in counts.items() if x == 0 and a == 1)
    kept_b = sum(c for (x, a, _), c in counts.items() if x == 1 and a == 1)
    drafted_b = n - drafted_a
    after_reject = Counter(t for (x, a, t), c in counts.items() if a == 0 for _ in range(c))
    first_a = sum(c for (x, a, t), c in counts.items() if (x if a else t) == 0)
    rate_a = kept_a / max(drafted_a, 1)
    rate_b = kept_b / max(drafted_b, 1)
    story = [
        "q = (0.8, 0.2), p = (0.6, 0.4) over {A = 0, B = 1}, k = 1",
        f"first token A: expected 0.600, observed {first_a / n:.3f} (total variation "
        f"{abs(first_a / n - 0.6):.3f} from the target's law)",
        f"draft A kept: expected min(1, 0.6/0.8) = 0.750, observed {rate_a:.3f}",
        f"draft B kept: expected min(1, 0.4/0.2) = 1.000, observed {rate_b:.3f}",
        "after a rejection: expected always B (norm(max(0, p - q)) = (0, 1)), observed "
        + (", ".join(f"{'AB'[t]} x{c}" for t, c in sorted(after_reject.items())) or "none"),
    ]
    sd = np.sqrt(0.75 * 0.25 / max(drafted_a, 1))
    if abs(rate_a - 0.75) > 5 * sd and abs(rate_a - 1.0) < 0.01:
        hint = (
            "draft A is always kept: that is min(1, q/p) = min(1, 0.8/0.6) = 1, the ratio upside "
            "down. Accept with min(1, p(x)/q(x)), p = target, q = draft."
        )
    elif abs(rate_a - 0.75) > 5 * sd:
        hint = (
            f"draft A is kept at rate {rate_a:.3f} instead of min(1, p(A)/q(A)) = 0.75: check "
            f"the acceptance probability (read p and q at the draft token, one fresh uniform)"
        )
    elif after_reject.get(0, 0):
        hint = (
            "after rejecting A you sometimes return A: the residual max(0, p - q) is 0 where "
            "q >= p; it is not |p - q| and not p"
        )
    else:
        hint = "the acceptance looks right; check the token you return after a rejection"
    return story, hint


def ab_checks() -> list[Check]:
    runs = Runs(ab_outcomes, AB_N)

    def output(sub: Submission, threshold: float, look: int) -> Outcome:
        counts = runs.counts(sub, look)
        n = counts.total()
        first = Counter()
        for (x, a, t), c in counts.items():
            first[x if a else t] += c
        cmp = compare(first, {0: 0.6, 1: 0.4})
        ok = cmp.p_value >= threshold
        summary = f"first token A {first[0] / n:.3f} (expected 0.600), p = {cmp.p_value:.2g}"
        story, hint = ([], "") if ok else ab_story(counts)
        return Outcome(ok, summary, story, hint, cmp.p_value, n)

    def acceptance(sub: Submission, threshold: float, look: int) -> Outcome:
        counts = runs.counts(sub, look)
        n = counts.total()
        kept = sum(c for (_, a, _), c in counts.items() if a == 1)
        p = binomial_p(kept, n, 0.8)
        ok = p >= threshold
        summary = f"acceptance rate {kept / n:.3f} (expected 0.800), p = {p:.2g}"
        story, hint = ([], "") if ok else ab_story(counts)
        return Outcome(ok, summary, story, hint, p, n)

    return [
        Check(
            "verify/ab-output", "the article's A/B example: first token (0.6, 0.4)", True, output
        ),
        Check("verify/ab-acceptance", "the A/B example: acceptance rate 0.8", True, acceptance),
    ]


# --------------------------------------------------------------------------------------------
# 3. Fixed rows, k = 3: the joint law of (accepted, token), read position by position
# --------------------------------------------------------------------------------------------

FIXED_N = 20_000


def fixed_rows() -> tuple[np.ndarray, np.ndarray, Context]:
    """P [4, 5], Q [3, 5] written by hand, and drafts (0, 1, 2).

    Each draft is kept with min(1, p/q) = 0.6, so every accepted count is common (0.4, 0.24,
    0.144, 0.216); each residual has two or three tokens; q > p on the last token id at every
    position, so a residual sampled without normalising shows up there; and the rows differ
    enough that a wrong row (i + 1 for a residual, k - 1 for the bonus) is visible.
    """
    P = np.array(
        [
            [0.30, 0.25, 0.20, 0.15, 0.10],
            [0.10, 0.36, 0.24, 0.25, 0.05],
            [0.35, 0.05, 0.18, 0.30, 0.12],
            [0.15, 0.25, 0.30, 0.20, 0.10],  # the bonus row
        ]
    )
    Q = np.array(
        [
            [0.50, 0.10, 0.10, 0.10, 0.20],
            [0.20, 0.60, 0.05, 0.05, 0.10],
            [0.10, 0.20, 0.30, 0.15, 0.25],
        ]
    )
    return P, Q, (0, 1, 2)


def fixed_outcomes(P, Q, drafts, seed: int):
    def outcomes(sub: Submission):
        rng = np.random.default_rng(seed)
        while True:
            yield call_verify(sub, P, Q, drafts, rng)

    return outcomes


def diagnose_joint(counts: Counter, P, Q, drafts) -> tuple[list[str], str]:
    """Read a failed joint law position by position: which decision, which row is off."""
    k, V = len(drafts), P.shape[1]
    story, hints = [], []
    reached = counts.total()
    for i, x in enumerate(drafts):
        kept = sum(c for (a, _), c in counts.items() if a > i)
        keep = min(1.0, P[i, x] / Q[i, x])
        rate = kept / max(reached, 1)
        p = binomial_p(kept, reached, keep) if reached else 1.0
        story.append(
            f"draft {i + 1} (token {x}): kept {rate:.3f} of the {reached} times it was "
            f"examined, expected min(1, p/q) = {keep:.3f}" + ("  <- off" if p < 1e-6 else "")
        )
        if p < 1e-6 and not hints:
            swapped = min(1.0, Q[i, x] / P[i, x]) if P[i, x] > 0 else 1.0
            sd = np.sqrt(keep * (1 - keep) / max(reached, 1)) + 1e-3
            if i == 0 and rate > 0.999:
                hints.append(
                    f"draft 1 is always counted as kept although min(1, p/q) = {keep:.3f}: "
                    f"either the ratio is upside down (min(1, q/p) = {swapped:.3f}; p = target, "
                    f"q = draft) or a rejected draft is counted in `accepted`"
                )
            elif i == 0 and abs(rate - swapped) < 4 * sd:
                hints.append(
                    f"draft 1 is kept at {rate:.3f}, that is min(1, q/p) = {swapped:.3f}: the "
                    f"ratio is upside down (p = target, q = draft)"
                )
            elif i == 0 and abs(rate - P[i, x]) < 4 * sd:
                hints.append(
                    f"draft 1 is kept at {rate:.3f}, that is p(x) = {P[i, x]:.3f} alone: the "
                    f"acceptance probability is min(1, p(x)/q(x)) = {keep:.3f}"
                )
            elif i == 0:
                hints.append(
                    f"draft 1 is kept at {rate:.3f} instead of min(1, p(x)/q(x)) = {keep:.3f}: "
                    f"check the acceptance probability"
                )
            else:
                hints.append(
                    f"draft 1 is decided correctly but draft {i + 1} is kept at {rate:.3f} "
                    f"instead of {keep:.3f} once the drafts before it were kept: the decisions "
                    f"are not independent, or read the wrong row. Draw a fresh uniform for each "
                    f"position, and decide draft i with row i of p and q."
                )
        reached = kept
    for a in range(k + 1):
        group = Counter({t: c for (g, t), c in counts.items() if g == a})
        if not group:
            continue
        law = leftover(P[a], Q[a]) if a < k else P[k]
        cmp = compare(group, {t: w for t, w in enumerate(law) if w > 0})
        if cmp.p_value >= 1e-6:
            continue
        where = f"after rejecting draft {a + 1}" if a < k else "after all k drafts were kept"
        story.append(f"the token {where}: {cmp.worst()}")
        if hints:
            continue
        extra = set(cmp.impossible)
        shifted = a < k and fits(group, leftover(P[a + 1], Q[a]))
        if a == k:
            hints.append(
                "every outcome where all k drafts were accepted is off: the bonus token is drawn "
                "from the last row of p, p_target[k]"
                + (" (yours follows row k-1)" if fits(group, P[k - 1]) else "")
            )
        elif extra and extra <= {V - 1}:
            hints.append(
                f"after a rejection the last token id ({V - 1}) comes out although "
                f"max(0, p - q) = 0 there: the residual is sampled as if it summed to 1. "
                f"Normalise it (divide by its sum) before sampling."
            )
        elif shifted:
            hints.append(
                f"the token after rejecting draft {a + 1} follows row {a + 1} of p instead of "
                f"row {a}: the residual uses the same row i as the rejected draft"
            )
        elif extra:
            hints.append(
                f"after rejecting draft {a + 1} you return tokens where p <= q, which "
                f"norm(max(0, p - q)) never gives: not |p - q|, not p, not q"
            )
        else:
            hints.append(
                f"the token after rejecting draft {a + 1} does not follow norm(max(0, p_i - q_i))"
                f" with i = {a}"
            )
    return story, hints[0] if hints else "the joint law of (accepted, token) is off"


def fits(counts: Counter, row: np.ndarray) -> bool:
    # does a token sample look like a draw from `row`? (used to name an alternative, not to pass)
    law = {t: w for t, w in enumerate(row) if w > 0}
    return compare(counts, law).p_value > 1e-4


def fixed_check() -> Check:
    P, Q, drafts = fixed_rows()
    law = verify_joint_law(P, Q, drafts)

    runs = Runs(fixed_outcomes(P, Q, drafts, 2), FIXED_N)

    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        counts = runs.counts(sub, look)
        n = counts.total()
        cmp = compare(counts, law)
        ok = cmp.p_value >= threshold
        summary = f"{len(law)} outcomes, p = {cmp.p_value:.2g}"
        if ok:
            return Outcome(True, summary, p_value=cmp.p_value, n=n)
        story, hint = diagnose_joint(counts, P, Q, drafts)
        with np.printoptions(precision=3, suppress=True):
            head = [f"rows: p_target =\n{P}\nq_draft =\n{Q}\ndraft_tokens = {list(drafts)}"]
        head.append(f"total variation from the exact law: {cmp.distance:.3f} ({n} calls)")
        return Outcome(False, summary + f"; {cmp.worst(2)}", head + story, hint, cmp.p_value, n)

    return Check("verify/fixed-k3", "fixed rows, k = 3: joint law of (accepted, token)", True, run)


# --------------------------------------------------------------------------------------------
# 4. Drafts drawn from q, emitted tokens completed by the target: the target's own law
# --------------------------------------------------------------------------------------------


class RandomTable:
    """A "table model": one random row per context, fixed by (seed, context). Dirichlet rows
    with some entries forced to 0; a fraction one-hot; a fraction copying another table."""

    def __init__(
        self,
        n_vocab: int,
        seed: int,
        *,
        zeros: float = 0.25,
        one_hot: float = 0.1,
        copy: Rows | None = None,
        copy_frac: float = 0.0,
    ) -> None:
        self.n_vocab, self.seed, self.zeros, self.one_hot = n_vocab, seed, zeros, one_hot
        self.copy, self.copy_frac = copy, copy_frac
        self._rows: dict[Context, np.ndarray] = {}

    def __call__(self, context: Context) -> np.ndarray:
        if context not in self._rows:
            self._rows[context] = self.make(context)
        return self._rows[context]

    def make(self, context: Context) -> np.ndarray:
        V = self.n_vocab
        rng = np.random.default_rng([self.seed, 7 + len(context), *context])
        u = rng.random()
        if self.copy is not None and u < self.copy_frac:
            return self.copy(context).copy()
        if u < self.copy_frac + self.one_hot:
            return np.eye(V)[rng.integers(V)]
        row = rng.dirichlet(np.ones(V))
        dropped = rng.random(V) < self.zeros
        dropped[rng.integers(V)] = False  # keep at least one token
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
        rng = np.random.default_rng(seed)
        while True:
            x: Context = ()
            for _ in range(k):
                x += (draw(q_rows(x), rng),)
            P = np.stack([p_rows(x[:i]) for i in range(k + 1)])
            Q = np.stack([q_rows(x[:i]) for i in range(k)])
            accepted, token = call_verify(sub, P, Q, x, rng)
            out = x[:accepted] + (token,)
            while len(out) < k + 1:
                out += (draw(p_rows(out), rng),)
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
        return Outcome(False, summary, story, hint, cmp.p_value, n)

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


# --------------------------------------------------------------------------------------------
# The families
# --------------------------------------------------------------------------------------------


def verify_families() -> list[Family]:
    from lab.grading.loop_checks import verify_in_loop_family  # the loop needs the model code

    checks = exact_checks() + ab_checks() + [fixed_check()] + table_checks()
    return [
        Family("verify", "your verify on its own", checks),
        verify_in_loop_family(),
    ]

"""The checks of a submitted `verify(p_target, q_draft, draft_tokens, rng) -> (accepted, token)`.

In four families, each scored on its own (core.py):

* law: does the output follow the target's law? Drafts drawn from q (or q one-hot), the
  emitted tokens held against the target's own law: true of *every* exact rule.
* rule: is the rule the contract's, min(1, p/q) with the residual norm(max(0, p - q)), whose
  acceptance is the optimum sum(min(p, q))? Fixed drafts and the acceptance rate: an exact
  rule that keeps fewer drafts (accept with p(x), resample from p without x) fails only here,
  and is reported as exact but slower, with its acceptance against the optimum.
* randomness: two runs with one seed agree, and repeated calls draw fresh numbers.
* in-loop: the verify inside the reference loop (runs once the law family passed).

The checks, cheapest and most telling first:

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


SOFTMAX_HINT = (
    "after a rejection, tokens come out where max(0, p - q) = 0, each about equally often, "
    "and the right ones most often: that is a softmax of the residual (exp(0) = 1 gives "
    "every zero entry weight). Normalise max(0, p - q) by dividing it by its sum, not with a "
    "softmax"
)


def spread_like_softmax(seen: Counter, expected: tuple[int, int]) -> bool:
    # after the certain rejection, three or more tokens, the right one the most common: a
    # softmax of a residual with one (or few) nonzero entries spreads over every token
    accepted = expected[0]
    after_rejection = {t for (a, t) in seen if a == accepted}
    return len(after_rejection) >= 3 and seen[expected] == max(seen.values())


def greedy_mismatch_hint(outcome: tuple[int, int], seen: Counter) -> str:
    accepted, token = outcome
    if spread_like_softmax(seen, (1, 3)):
        return SOFTMAX_HINT  # the residual one-hot on 3, spread over every token
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
    if spread_like_softmax(seen, (0, 2)):
        return SOFTMAX_HINT
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
    elif abs(rate_a - 0.75) > 5 * sd and abs(rate_a - 0.6) < 5 * sd:
        hint = (
            f"draft A is kept at rate {rate_a:.3f}, that is p(A) = 0.6 alone, not "
            f"min(1, p(A)/q(A)) = 0.75. Keeping x with p(x) is exact only if a rejection then "
            f"samples from p with x removed; with the residual max(0, p - q) it is biased. "
            f"The contract's rule: accept with min(1, p(x)/q(x))"
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
        return Outcome(ok, summary, story, hint, p, n, measure=kept / n)

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
        gap = np.clip(P[a] - Q[a], 0.0, None) if a < k else None
        if a < k and extra and fits(group, np.exp(gap) / np.exp(gap).sum()):
            hints.append(SOFTMAX_HINT)
        elif a < k and fits(group, reused_uniform_law(P[a], Q[a], drafts[a])):
            hints.append(
                f"after rejecting draft {a + 1} only the tokens at the top of the residual's "
                f"CDF come out: the token is drawn with the same uniform that rejected the "
                f"draft (given a rejection it is >= min(1, p/q), so it never reaches the "
                f"bottom of the CDF). Draw a fresh uniform (or rng.choice) for the residual"
            )
        elif a == k:
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
    if hints:
        return story, hints[0], hints[0].startswith("the token after rejecting draft")
    return story, "the joint law of (accepted, token) is off", True


def reused_uniform_law(p: np.ndarray, q: np.ndarray, x: int) -> np.ndarray:
    # [V] the token law after a rejection when the rejecting uniform u (u >= keep, uniform on
    # [keep, 1)) also inverts the residual's CDF: each token gets the part of its CDF step
    # that lies above keep
    keep = min(1.0, p[x] / q[x])
    cdf = np.cumsum(leftover(p, q))
    low = np.concatenate([[0.0], cdf[:-1]])
    share = np.clip(np.minimum(cdf, 1.0) - np.maximum(low, keep), 0.0, None)
    return share / share.sum() if share.sum() > 0 else leftover(p, q)


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
        story, hint, generic = diagnose_joint(counts, P, Q, drafts)
        with np.printoptions(precision=3, suppress=True):
            head = [f"rows: p_target =\n{P}\nq_draft =\n{Q}\ndraft_tokens = {list(drafts)}"]
        head.append(f"total variation from the exact law: {cmp.distance:.3f} ({n} calls)")
        summary += f"; {cmp.worst(2)}"
        return Outcome(False, summary, head + story, hint, cmp.p_value, n, generic=generic)

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


# --------------------------------------------------------------------------------------------
# The families
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# 5. Zero drafts: the contract's k = 0
# --------------------------------------------------------------------------------------------

ZERO_P = np.array([[0.1, 0.2, 0.3, 0.4]])  # [1, V]: the only row is the bonus row
ZERO_N = 4_000


def zero_drafts_check() -> Check:
    """k = 0 (the loop asks so when one token is left): (0, a sample of p_target[0])."""

    def outcomes(sub: Submission):
        rng = np.random.default_rng(6)
        Q = np.zeros((0, ZERO_P.shape[1]))
        while True:
            yield call_verify(sub, ZERO_P, Q, (), rng)

    runs = Runs(outcomes, ZERO_N)

    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        counts = runs.counts(sub, look)
        n = counts.total()
        tokens = Counter({t: c for (_, t), c in counts.items()})
        cmp = compare(tokens, {t: w for t, w in enumerate(ZERO_P[0])})
        ok = cmp.p_value >= threshold
        summary = f"{len(tokens)} tokens in {n} calls, p = {cmp.p_value:.2g}"
        if ok:
            return Outcome(True, summary, p_value=cmp.p_value, n=n)
        story = [
            f"inputs: p_target = {ZERO_P.tolist()}, q_draft of shape [0, 4], draft_tokens = []",
            f"expected (0, t) with t ~ p_target[0]; observed {cmp.worst()}",
        ]
        hint = (
            "with k = 0 there is nothing to accept: return (0, a token drawn from p_target[0]) "
            "with rng (the bonus row is row k = 0)"
        )
        return Outcome(False, summary, story, hint, cmp.p_value, n)

    return Check("verify/zero-drafts", "k = 0 (no drafts): (0, a sample of p_target[0])", True, run)


# --------------------------------------------------------------------------------------------
# 6. Randomness: from rng, fresh on every call
# --------------------------------------------------------------------------------------------

RNG_CALLS = 100  # calls per run
# k = 2 rows where the decisions are random under the contract's rule and under the usual
# wrong ones: draft 1 has p < q (kept with 0.5; always under an upside-down ratio), draft 2
# has q < p (always kept; with 0.5 upside down), p(x) < 1 for both. So only a constant
# uniform repeats one accepted count 100 times; a correct verify does so with probability
# 2 * 0.5 ** 100 < 1e-29: these checks are exact in practice.
RNG_P = np.array([[0.3, 0.4, 0.3], [0.5, 0.2, 0.3], [0.2, 0.3, 0.5]])
RNG_Q = np.array([[0.6, 0.2, 0.2], [0.25, 0.5, 0.25]])
RNG_DRAFTS = (0, 0)


def randomness_checks() -> list[Check]:
    P, Q, drafts = RNG_P, RNG_Q, RNG_DRAFTS
    memo: dict = {}

    def sequence(sub: Submission, run: int) -> list[tuple[int, int]]:
        # run 0 and run 1: each from a generator seeded with 21
        if memo.get("sub") is not sub:
            memo.clear()
            memo["sub"] = sub
        if run not in memo:
            rng = np.random.default_rng(21)
            memo[run] = [call_verify(sub, P, Q, drafts, rng) for _ in range(RNG_CALLS)]
        return memo[run]

    def same_seed(sub: Submission, threshold: float, look: int) -> Outcome:
        first, second = sequence(sub, 0), sequence(sub, 1)
        if first == second:
            return Outcome(True, f"{RNG_CALLS} calls, the same outcomes twice", n=2 * RNG_CALLS)
        i = next(j for j, (a, b) in enumerate(zip(first, second, strict=True)) if a != b)
        story = [
            f"two runs of {RNG_CALLS} calls on the same k = 2 rows, each with "
            f"np.random.default_rng(21): they first differ at call {i + 1}, "
            f"{first[i]} then {second[i]}"
        ]
        hint = (
            "two runs with generators seeded alike gave different outcomes: your verify takes "
            "randomness from a source other than `rng` (np.random's global functions such as "
            "np.random.rand or np.random.choice, the random module, torch's global generator "
            "as in torch.rand or torch.multinomial without generator=). Draw every random "
            "number from rng; for torch, seed a torch.Generator from it (docs/oracle.md)"
        )
        return Outcome(
            False, f"the two runs differ from call {i + 1}", story, hint, n=2 * RNG_CALLS
        )

    def fresh(sub: Submission, threshold: float, look: int) -> Outcome:
        outcomes = sequence(sub, 0)
        kept = Counter(a for a, _ in outcomes)
        if len(kept) > 1:
            return Outcome(True, f"{len(kept)} accepted counts in {RNG_CALLS} calls", n=RNG_CALLS)
        (a,) = kept
        story = [
            f"{RNG_CALLS} calls on the same k = 2 rows with one generator: accepted = {a} "
            f"every time, although draft 1 is kept with probability min(1, 0.3/0.6) = 0.5",
            "outcomes: " + ", ".join(f"{o} x{c}" for o, c in Counter(outcomes).most_common(3)),
        ]
        return Outcome(
            False, f"accepted = {a} on all {RNG_CALLS} calls", story, CONSTANT_HINT, n=RNG_CALLS
        )

    return [
        Check("rng/same-seed", "two runs with one seed give the same outcomes", False, same_seed),
        Check("rng/fresh-draws", "repeated calls draw fresh numbers from rng", False, fresh),
    ]


CONSTANT_HINT = (
    "your verify makes the same accept/reject decision on every call with the same rows: its "
    "uniform is the same number every time — a generator re-seeded before each draw "
    "(np.random.default_rng(0).random()), or a seed fixed inside verify. Take every uniform "
    "from the `rng` argument and never re-seed it"
)


# --------------------------------------------------------------------------------------------
# The families, and the hints read from the whole pattern
# --------------------------------------------------------------------------------------------

LAW_CHECKS = (
    "verify/greedy-match",
    "verify/greedy-mismatch",
    "verify/zero-drafts",
    "verify/ab-output",
    "verify/tables-k3",
    "verify/point-mass-k3",
    "verify/greedy-target-k2",
)
RULE_CHECKS = (
    "verify/ab-acceptance",
    "verify/impossible-draft",
    "verify/p-equals-q",
    "verify/fixed-k3",
)
OPTIMAL_ACCEPTANCE = 0.8  # the A/B example: sum(min(p, q)) = min(0.6, 0.8) + min(0.4, 0.2)


def verify_families() -> list[Family]:
    from lab.grading.loop_checks import verify_in_loop_family  # the loop needs the model code

    checks = exact_checks() + ab_checks() + [fixed_check()] + table_checks()
    checks.append(zero_drafts_check())
    by_name = {c.name: c for c in checks}
    return [
        Family(
            "law",
            "your verify's output follows the target's law",
            [by_name[n] for n in LAW_CHECKS],
        ),
        Family(
            "rule",
            "the rule is the contract's: min(1, p/q), with the optimal acceptance",
            [by_name[n] for n in RULE_CHECKS],
        ),
        Family("randomness", "your verify takes fresh randomness from rng", randomness_checks()),
        verify_in_loop_family(),
    ]


def revise_verify_hints(results: dict) -> dict[str, str]:
    """Choose hints from the whole pattern of passed and failed checks, and say what the
    law and rule families' verdicts mean together. -> {family: verdict line}."""

    def status(name: str) -> str:
        r = results.get(name)
        return "absent" if r is None else r.status

    failed = [r for r in results.values() if r.status == "fail" and r.outcome is not None]
    constant = status("rng/fresh-draws") == "fail"
    ratio_cleared = status("verify/greedy-mismatch") == status("verify/impossible-draft") == "pass"
    # what the exact cases where an upside-down ratio shows say, when they name another mistake
    exact_name, exact_says = next(
        (
            (n, results[n].outcome.hint)
            for n in ("verify/greedy-mismatch", "verify/impossible-draft")
            if status(n) == "fail"
            and results[n].outcome is not None
            and "upside down" not in results[n].outcome.hint
        ),
        ("", ""),
    )
    fixed = results.get("verify/fixed-k3")
    diagnosis = (
        fixed.outcome.hint
        if fixed is not None
        and fixed.status == "fail"
        and fixed.outcome
        and not fixed.outcome.generic
        else ""
    )
    for r in failed:
        o = r.outcome
        if r.check.name.startswith("rng/"):
            continue
        if constant and r.check.sampled:
            o.hint = "every call decides alike (rng/fresh-draws failed): " + CONSTANT_HINT
        elif "upside down" in o.hint and exact_says:
            o.hint = f"{exact_says} (the same mistake as {exact_name})"
        elif "upside down" in o.hint and ratio_cleared:
            o.hint = (
                "drafts are kept more often than min(1, p/q) allows, yet the exact cases that an "
                "upside-down ratio fails (verify/greedy-mismatch, verify/impossible-draft) "
                "passed, so the ratio is not the problem: check that each decision compares a "
                "fresh uniform from rng with min(1, p(x)/q(x))"
            )
        elif o.generic and diagnosis and r.check.name != "verify/fixed-k3":
            o.hint = f"{diagnosis} (read on the fixed rows of verify/fixed-k3)"
    verdicts: dict[str, str] = {}
    law_names = [n for n in LAW_CHECKS if n in results]
    law_ok = bool(law_names) and all(status(n) == "pass" for n in law_names)
    acceptance = results.get("verify/ab-acceptance")
    alpha = acceptance.outcome.measure if acceptance and acceptance.outcome else None
    if law_ok and any(status(n) == "fail" for n in RULE_CHECKS) and alpha is not None:
        share = alpha / OPTIMAL_ACCEPTANCE
        verdicts["rule"] = (
            f"exact, but not the contract's rule: your output follows the target's law, with "
            f"acceptance {alpha:.3f} on the A/B example where min(1, p/q) reaches the optimum "
            f"sum(min(p, q)) = {OPTIMAL_ACCEPTANCE:.3f} ({share:.0%} of it)"
            + ("" if alpha < OPTIMAL_ACCEPTANCE - 0.02 else "; its residual or decisions differ")
        )
        if acceptance.status == "fail":
            acceptance.outcome.hint = (
                f"your verify is exact (the law family passed) but keeps fewer drafts than it "
                f"could: acceptance {alpha:.3f} instead of {OPTIMAL_ACCEPTANCE}. Exact rules "
                f"can keep fewer drafts — keeping x with probability p(x) and resampling from p "
                f"without x (EAGLE's evaluate_posterior, transformers 4.36) is exact for any q — "
                f"but the contract's rule, keep x with min(1, p(x)/q(x)) and resample from "
                f"norm(max(0, p - q)), keeps the most"
            )
    elif law_ok and alpha is not None and status("verify/ab-acceptance") == "pass":
        verdicts["rule"] = (
            f"the contract's rule, min(1, p/q): acceptance {alpha:.3f} on the A/B example, the "
            f"optimum being sum(min(p, q)) = {OPTIMAL_ACCEPTANCE:.3f}"
        )
    return verdicts

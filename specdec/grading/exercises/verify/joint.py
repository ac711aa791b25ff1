"""The verify's rule on fixed inputs: the article's A/B example (output law and acceptance
rate) and fixed rows with k = 3, whose joint law of (accepted, token) is read position by
position to say which decision or which row is off.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from specdec.grading.engine.core import Check, Outcome, Runs
from specdec.grading.engine.laws import (
    Context,
    binomial_p,
    compare,
    leftover,
    verify_joint_law,
)
from specdec.grading.engine.submission import (
    CHUNK,
    Submission,
    call_verify_each,
    call_verify_many,
    streams,
)
from specdec.grading.exercises.verify.exact import SOFTMAX_HINT, draw

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
    # -> an endless stream of (draft, accepted, token): drafts drawn from q by the grader,
    # from this grading's secret; the verify's generator is a stream of its own, so that the
    # calls of a chunk can be made in one request (submission.CHUNK divides both looks)
    drafting, rng = streams(1)
    while True:
        xs = [draw(AB_Q[0], drafting) for _ in range(CHUNK)]
        answers = call_verify_each(sub, [(AB_P, AB_Q, (x,)) for x in xs], rng)
        yield from ((x, a, t) for x, (a, t) in zip(xs, answers, strict=True))


def ab_pattern(counts: Counter) -> str:
    """'never-keeps' (no draft kept, not even B, which min(1, 0.4/0.2) = 1 keeps for sure),
    'keeps-all' (every A and every B kept: a rule that always keeps, or a uniform that is the
    same number below 0.75 on every call), or ''."""
    if not counts.total():
        return ""
    kept = {x: set() for x in (0, 1)}
    for x, a, _ in counts:
        kept[x].add(a)
    if kept[0] | kept[1] == {0}:
        return "never-keeps"
    return "keeps-all" if kept[0] == {1} and kept[1] == {1} else ""


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
    if ab_pattern(counts) == "never-keeps":
        hint = (
            "your verify never keeps a draft, not even B, where p(B) = 0.4 > q(B) = 0.2 makes "
            "keeping certain (min(1, 0.4/0.2) = 1). Always returning (0, a sample of "
            "p_target[0]) follows the target's law, but it is no verification: keep draft i "
            "when a fresh uniform from rng is below min(1, p_i(x_i)/q_i(x_i))"
        )
    elif ab_pattern(counts) == "keeps-all":
        hint = (
            "every draft is kept, A as well as B, although min(1, p(A)/q(A)) = 0.75: either "
            "your verify keeps every draft, or its uniform is the same number (below 0.75) on "
            "every call. Keep draft i when a fresh uniform from rng is below "
            "min(1, p_i(x_i)/q_i(x_i))"
        )
    elif abs(rate_a - 0.75) > 5 * sd and abs(rate_a - 1.0) < 0.01:
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
        pattern = "" if ok else ab_pattern(counts)
        return Outcome(ok, summary, story, hint, cmp.p_value, n, pattern=pattern)

    def acceptance(sub: Submission, threshold: float, look: int) -> Outcome:
        counts = runs.counts(sub, look)
        n = counts.total()
        kept = sum(c for (_, a, _), c in counts.items() if a == 1)
        p = binomial_p(kept, n, 0.8)
        ok = p >= threshold
        summary = f"acceptance rate {kept / n:.3f} (expected 0.800), p = {p:.2g}"
        story, hint = ([], "") if ok else ab_story(counts)
        pattern = "" if ok else ab_pattern(counts)
        return Outcome(ok, summary, story, hint, p, n, measure=kept / n, pattern=pattern)

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
        while True:  # in chunks that end where the looks end: the calls of n call_verify
            yield from call_verify_many(sub, P, Q, drafts, rng, CHUNK)

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

"""The verify's exact checks: inputs whose outcome is certain (one-hot rows, p(x) = 0,
p = q, zero drafts), so one wrong call is proof; and the grader's own rows and draws.

The families that use them are put together in checks.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from specdec.grading.engine.core import Check, Outcome, Runs
from specdec.grading.engine.laws import (
    Context,
    compare,
)
from specdec.grading.engine.submission import CHUNK, Submission, call_verify_many

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
        seen = Counter(call_verify_many(sub, P, Q, drafts, rng, CALLS_PER_EXACT_CASE))
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
# 5. Zero drafts: the contract's k = 0
# --------------------------------------------------------------------------------------------

ZERO_P = np.array([[0.1, 0.2, 0.3, 0.4]])  # [1, V]: the only row is the bonus row
ZERO_N = 4_000


def zero_drafts_check() -> Check:
    """k = 0 (the loop asks so when one token is left): (0, a sample of p_target[0])."""

    def outcomes(sub: Submission):
        rng = np.random.default_rng(6)
        Q = np.zeros((0, ZERO_P.shape[1]))
        while True:  # in chunks that end where the looks end: the calls of n call_verify
            yield from call_verify_many(sub, ZERO_P, Q, (), rng, CHUNK)

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

"""The checks of a submitted `plan_k(alpha, c, v, k_max) -> (best_k, expected_tokens, speedups)`.

One family, every check exact (to a relative 1e-9): the function is arithmetic, so each of
its three answers is held against the grader's, computed with `specdec.costs` (the formulas the
notebooks use):

    E(alpha, k)  = 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)   (k + 1 at 1)
    speedup(k)   = E(alpha, k) / (k c + v(k+1))        for k = 0 .. k_max
    best_k       = the k with the highest speedup, the smallest on ties

The cases: alpha = 0.8 (best k inside the range), alpha = 0 (no draft is ever kept: plain
decoding, k = 0, is best), alpha = 1 (every draft kept: the formula's 0/0), measured
v(k+1) given as an array, exact ties (alpha = 0, c = 0) and k_max = 0, then a few hundred
seeded random (alpha, c, v, k_max). A failure names the first wrong answer on its case and
says which known mistake reproduces it (the exponent off by one, the target's token forgotten
or counted only as the bonus, the pass priced at v(k) for k positions instead of v(k+1), v
ignored, the argmax taken over tokens instead of speedups, ties, k = 0 left out). The skeleton
gives the contract only (what a round emits and costs); the formulas above are the student's
to derive, so the hints name a mistake and a case to check by hand rather than hand them out
when no known mistake matches.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from specdec.grading.engine.core import Check, Family, Outcome
from specdec.grading.engine.quoting import one_line, shown_value
from specdec.grading.engine.replies import whole_number
from specdec.grading.engine.submission import (
    Submission,
    SubmissionCrash,
    call_safely,
    show_inputs,
)
from specdec.grading.project import expected_tokens_per_round, predicted_speedup

RTOL, ATOL = 1e-9, 1e-12
COMMAND = "plan_k"


@dataclass(frozen=True)
class Case:
    alpha: float  # per-draft acceptance, in [0, 1]
    c: float  # a draft step, in target steps
    v: float | tuple[float, ...]  # the verification pass: one figure, or v[k] = v(k+1)
    k_max: int

    def costs(self) -> np.ndarray:  # -> [k_max + 1]: v(k+1) for k = 0 .. k_max
        return np.broadcast_to(np.asarray(self.v, dtype=np.float64), (self.k_max + 1,))

    def v_argument(self):
        # what the submission receives: a float, or a fresh [k_max + 1] float64 array
        return float(self.v) if np.isscalar(self.v) else np.array(self.v, dtype=np.float64)

    def describe(self) -> str:
        v = f"{self.v:g}" if np.isscalar(self.v) else f"[{self.k_max + 1}] float64"
        return f"{COMMAND}(alpha={self.alpha:g}, c={self.c:g}, v={v}, k_max={self.k_max})"


@dataclass(frozen=True)
class Plan:
    best_k: int
    tokens: np.ndarray  # [k_max + 1] E(alpha, k)
    speedups: np.ndarray  # [k_max + 1]


def expected(case: Case) -> Plan:
    """The grader's plan, from specdec.costs (k = 0 .. k_max; ties: np.argmax's first)."""
    ks = range(case.k_max + 1)
    v = case.costs()
    tokens = np.array([expected_tokens_per_round(case.alpha, k) for k in ks])
    speedups = np.array([predicted_speedup(case.alpha, k, case.c, v[k]) for k in ks])
    return Plan(int(np.argmax(speedups)), tokens, speedups)


# --------------------------------------------------------------------------------------------
# Calling the submission and reading its plan
# --------------------------------------------------------------------------------------------


class Breach(Exception):
    """The answer is not (int, [k_max + 1] array, [k_max + 1] array)."""


def call_student(sub: Submission, case: Case) -> Plan:
    shown = {"alpha": case.alpha, "c": case.c, "v": case.v_argument(), "k_max": case.k_max}
    args = (case.alpha, case.c, case.v_argument(), case.k_max)
    try:
        result = call_safely(sub, args, {}, shown, COMMAND)
    except SubmissionCrash as crash:
        crash.call = case.describe()  # call_safely's wording is a verify's
        crash.hint = crash.hint or crash_hint(crash.error, case)
        raise
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        said = shown_value(result)
        raise Breach(f"it returned {said}, not a tuple (best_k, expected_tokens, speedups)")
    best, tokens, speedups = result
    n = case.k_max + 1
    arrays = []
    for name, values in (("expected_tokens", tokens), ("speedups", speedups)):
        if isinstance(values, (list, tuple)) and len(values) != n:  # before it is converted
            raise Breach(f"{name} has {len(values):,} entries; the contract is [k_max + 1] = [{n}]")
        try:
            array = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError, OverflowError) as error:
            said = one_line(f"{type(error).__name__}: {error}")
            raise Breach(f"{name} holds something other than numbers ({said})") from None
        if array.shape != (n,):
            raise Breach(
                f"{name} has shape {list(array.shape)}; the contract is [k_max + 1] = [{n}] "
                f"(one entry per k = 0 .. k_max)"
            )
        arrays.append(array)
    try:  # an int anywhere near 0..k_max (out of it: a wrong plan, with its hint)
        best = whole_number(best, "best_k", -LARGEST_K, LARGEST_K)
    except ValueError as error:
        raise Breach(f"best_k must be an int (the k, not its speedup): {error}") from None
    return Plan(best, *arrays)


LARGEST_K = 10**6  # a best_k beyond this is refused as not a k (not shown in full either)


def crash_hint(error: BaseException, case: Case) -> str:
    if case.alpha == 1.0 and isinstance(error, (ZeroDivisionError, FloatingPointError)):
        return HINTS["alpha-1"]
    if isinstance(error, IndexError) and not np.isscalar(case.v):
        return HINTS["v-index"]
    if isinstance(error, TypeError) and not np.isscalar(case.v):
        return "v may be an array of k_max + 1 figures (v[k] = v(k+1)), not only a number"
    return ""


HINTS = {
    "alpha-1": (
        "alpha = 1 divides by zero: (1 - alpha^(k+1)) / (1 - alpha) is 0 / 0 there. Every "
        "draft is then accepted, so a round yields all k drafts plus the bonus: E = k + 1 "
        "(the formula's limit) — treat alpha = 1 on its own"
    ),
    "exponent-low": (
        "E is off by one in the exponent: (1 - alpha^k) / (1 - alpha) counts k terms; a round "
        "yields 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)"
    ),
    "exponent-high": (
        "E has one term too many: (1 - alpha^(k+2)) / (1 - alpha); a round yields "
        "1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)"
    ),
    "no-bonus": (
        "E is one token short: it counts the accepted drafts alone. Every round also emits "
        "one token of the target's (the correction after a rejection, or the bonus when all "
        "k drafts are kept), so E = 1 + alpha + ... + alpha^k: at alpha = 0 a round still "
        "yields 1 token"
    ),
    "bonus-only": (
        "E counts the target's token only when all k drafts are kept (the bonus): a rejection "
        "also ends with one token of the target's, the correction drawn from the residual, so "
        "every round emits exactly one target token after its accepted drafts (E = 1 + "
        "alpha + ... + alpha^k; at alpha = 0 a round still yields 1 token whatever k is)"
    ),
    "v-ignored": (
        "the speedups divide by k c + 1: the verification pass costs v (v(k+1)) target "
        "steps, not 1 — speedup = E / (k c + v)"
    ),
    "k-plus-1-drafts": (
        "the speedups charge k + 1 draft steps: a round drafts k tokens, so k c + v"
    ),
    "v-index": (
        "v[k] is v(k+1), the cost of the pass over k + 1 positions that verifies k drafts: "
        "the speedup of k uses v[k] (index k, not k + 1 or k - 1)"
    ),
    "v-k-rows": (
        "the speedups price the verification pass at v(k) (v[k - 1]): k rows judge the k "
        "drafts, but the round's last token needs one more — the bonus row after the k-th "
        "draft — so the pass covers k + 1 positions and costs v(k+1) = v[k]"
    ),
    "v-first": "the speedups use v[0] for every k: the speedup of k uses v[k] = v(k+1)",
    "upside-down": "the speedups are upside down: speedup = E / (k c + v), tokens per cost",
    "best-of-tokens": (
        "best_k maximises the tokens per round, which only grow with k: it must maximise "
        "the speedup, which pays for the drafts"
    ),
    "ties": (
        "on ties, the smallest k: several k share the highest speedup here (np.argmax returns "
        "the first)"
    ),
    "no-zero": (
        "k = 0 (plain decoding, no draft) is a candidate too: when no k pays for its drafts, "
        "as at alpha = 0, the best plan is not to draft"
    ),
}


# --------------------------------------------------------------------------------------------
# The diagnosis of a wrong plan
# --------------------------------------------------------------------------------------------


def close(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=RTOL, atol=ATOL))


def tokens_hint(case: Case, tokens: np.ndarray) -> str:
    a, k = case.alpha, np.arange(case.k_max + 1)
    if case.alpha == 1.0 and not np.all(np.isfinite(tokens)):
        return HINTS["alpha-1"]
    if case.alpha < 1.0:
        power = a ** k.astype(np.float64)
        known = {
            "exponent-low": (1 - power) / (1 - a),
            "exponent-high": (1 - power * a * a) / (1 - a),
            "no-bonus": (1 - power * a) / (1 - a) - 1,
            "bonus-only": (1 - power * a) / (1 - a) - 1 + power,  # alpha + .. + alpha^k + alpha^k
        }
    else:  # (the bonus-only mistake is right at alpha = 1: every round keeps all k)
        known = {"exponent-low": k * 1.0, "exponent-high": k + 2.0, "no-bonus": k * 1.0}
    for name, wrong in known.items():
        if close(tokens, wrong):
            return HINTS[name]
    return (
        "expected_tokens[k] is the expected number of tokens a round emits: its A accepted "
        "drafts plus the target's one token, E[A + 1]. Check it where you know the answer: 1 "
        "at alpha = 0, k + 1 at alpha = 1, and 1 + alpha at k = 1 (2 tokens exactly when the "
        "one draft is accepted)"
    )


def speedups_hint(case: Case, want: Plan, speedups: np.ndarray) -> str:
    k, v, E = np.arange(case.k_max + 1), case.costs(), want.tokens
    known = {
        "v-ignored": E / (k * case.c + 1.0),
        "k-plus-1-drafts": E / ((k + 1) * case.c + v),
        "upside-down": (k * case.c + v) / E,
    }
    if not np.isscalar(case.v):
        known["v-first"] = E / (k * case.c + v[0])
        known["v-k-rows"] = E / (k * case.c + np.r_[1.0, v[:-1]])  # v[k - 1] (v(0) read as 1)
    for name, wrong in known.items():
        if close(speedups, wrong):
            return HINTS[name]
    if not np.isscalar(case.v) and case.k_max > 0:  # v(k) = v[k - 1] for k >= 1, k = 0 aside
        if close(speedups[1:], E[1:] / (k[1:] * case.c + v[:-1])):
            return HINTS["v-k-rows"]
    if not np.isscalar(case.v) and case.k_max > 0:  # v[k + 1]: as far as it exists
        if close(speedups[:-1], E[:-1] / (k[:-1] * case.c + v[1:])):
            return HINTS["v-index"]
    return (
        "speedups[k] is expected_tokens[k] divided by the round's cost in target steps: its k "
        "draft steps (c each) and its one verification pass (v for as many positions as the "
        "round needs rows)"
    )


def best_hint(case: Case, want: Plan, best: int) -> str:
    S, E = want.speedups, want.tokens
    top = np.flatnonzero(S == S.max())
    if best in top and len(top) > 1:
        return HINTS["ties"]
    if not 0 <= best < len(S):
        return f"best_k must be a k in 0..k_max = 0..{case.k_max}"
    if want.best_k == 0 and best == 1 + int(np.argmax(S[1:])):
        return HINTS["no-zero"]
    if best in np.flatnonzero(E == E.max()):
        return HINTS["best-of-tokens"]
    return "best_k is the k whose speedup is the highest (the smallest such k)"


# --------------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------------

MEASURED_V = (1.0, 1.1, 1.2, 1.6, 1.7, 2.5, 2.6)  # v(1..7): a made-up machine, not monotone gaps
CASES: dict[str, tuple[str, list[Case]]] = {
    "alpha-0.8": ("alpha = 0.8, c = 0.1, v = 1: best k inside the range", [Case(0.8, 0.1, 1.0, 8)]),
    "alpha-0": (
        "alpha = 0: one token per round, plain decoding best",
        [Case(0.0, 0.1, 1.0, 5), Case(0.0, 0.3, 1.4, 3)],
    ),
    "alpha-1": (
        "alpha = 1: E = k + 1 (the formula's 0/0), the largest k best",
        [Case(1.0, 0.2, 1.5, 6)],
    ),
    "measured-v": (
        "v as measured, v[k] = v(k+1) for each k",
        [Case(0.7, 0.05, MEASURED_V, 6), Case(0.9, 0.02, MEASURED_V, 6)],
    ),
    "ties": (
        "exact ties (alpha = 0, c = 0): the smallest k; k_max = 0",
        [Case(0.0, 0.0, 1.0, 4), Case(0.9, 0.1, 1.0, 0)],
    ),
}
N_RANDOM = 200


@cache
def random_cases(n: int = N_RANDOM, seed: int = 808) -> tuple[Case, ...]:
    """Seeded (alpha, c, v, k_max), alpha = 0 and 1 among them, v a figure or an array;
    cases whose two best speedups are within 1e-6 of each other are left out (which k wins
    there is rounding's choice)."""
    rng = np.random.default_rng(seed)
    cases = []
    while len(cases) < n:
        k_max = int(rng.integers(0, 13))
        alpha = float(rng.choice([0.0, 1.0, rng.uniform(0.0, 0.98)], p=[0.1, 0.1, 0.8]))
        c = float(rng.uniform(0.0, 1.0))
        if rng.random() < 0.5:
            v: float | tuple[float, ...] = float(rng.uniform(0.5, 3.0))
        else:  # v(1) = 1, then steps that mostly grow
            v = tuple(float(x) for x in np.cumsum(np.r_[1.0, rng.uniform(-0.1, 0.5, k_max)]))
        case = Case(alpha, c, v, k_max)
        S = np.sort(expected(case).speedups)
        if len(S) == 1 or S[-1] - S[-2] > 1e-6 * S[-1]:
            cases.append(case)
    return tuple(cases)


# --------------------------------------------------------------------------------------------
# The checks and the family
# --------------------------------------------------------------------------------------------


def judge(case: Case, want: Plan, got: Plan) -> tuple[str, str] | None:
    """(what is wrong, the hint), or None when the plan is right."""
    if not close(got.tokens, want.tokens):
        return "expected_tokens differs", tokens_hint(case, got.tokens)
    if not close(got.speedups, want.speedups):
        return "speedups differ", speedups_hint(case, want, got.speedups)
    if got.best_k != want.best_k:
        return f"best_k = {got.best_k}, expected {want.best_k}", best_hint(case, want, got.best_k)
    return None


def story_of(case: Case, want: Plan, got: Plan) -> list[str]:
    def show(a: np.ndarray) -> str:
        return np.array2string(a, precision=6, suppress_small=True, separator=", ")

    lines = [case.describe()]
    if not np.isscalar(case.v):
        lines.append(show_inputs(v=case.v_argument()).strip())
    return lines + [
        f"expected_tokens, expected {show(want.tokens)}",
        f"                 yours    {show(got.tokens)}",
        f"speedups,        expected {show(want.speedups)}",
        f"                 yours    {show(got.speedups)}",
        f"best_k,          expected {want.best_k}; yours {got.best_k}",
    ]


def case_check(name: str, what: str, cases) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        all_cases = cases() if callable(cases) else cases
        for i, case in enumerate(all_cases):
            want = expected(case)
            try:
                got = call_student(sub, case)
            except Breach as breach:
                story = [case.describe(), f"{COMMAND} broke its contract: {breach}"]
                hint = (
                    "return a tuple (best_k, expected_tokens, speedups): an int and two arrays "
                    "of k_max + 1 floats, for k = 0 .. k_max"
                )
                return Outcome(False, f"case {i + 1}: not a plan", story, hint, n=i + 1)
            verdict = judge(case, want, got)
            if verdict is not None:
                wrong, hint = verdict
                summary = f"case {i + 1} of {len(all_cases)}: {wrong}"
                return Outcome(False, summary, story_of(case, want, got), hint, n=i + 1)
        n = len(all_cases)
        return Outcome(True, f"{n} plan{'s' * (n > 1)} equal to the formula's", n=n)

    return Check(f"speedup/{name}", what, False, run)


def speedup_families(policy: str = "shrink") -> list[Family]:
    """The speedup exercise's one family (`policy` is a loop's; unused here)."""
    checks = [case_check(name, what, cases) for name, (what, cases) in CASES.items()]
    checks.append(
        case_check("random", f"{N_RANDOM} seeded random (alpha, c, v, k_max)", random_cases)
    )
    return [Family("speedup", "your plan_k gives the formula's E, speedups and best k", checks)]

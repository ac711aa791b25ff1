"""The checks of a submitted `plan_k(alpha, c, v, k_max) -> (best_k, expected_tokens, speedups)`.

One family, every check exact (to a relative 1e-9): the function is arithmetic, so each of
its three answers is held against the grader's. The rates are per position: alpha[j] is the
chance that a round's draft j + 1 is accepted given that the j drafts before it were (one
float: the same rate everywhere, `specdec.costs`' E(alpha, k), the notebooks' model); the unit
of cost is one target forward over one new position, so plain decoding (k = 0) costs 1 and
its speedup is 1 whatever the passes over 2 or more positions cost:

    P(A >= i)    = alpha[0] alpha[1] ... alpha[i - 1]      A: the drafts a round accepts
    E(k)         = 1 + P(A >= 1) + ... + P(A >= k)          the accepted drafts and one more
    speedup(k)   = E(k) / (k c + v(k + 1)),  v(1) = 1       for k = 0 .. k_max
    best_k       = the k with the highest speedup, the smallest on ties

The shown cases: one rate (alpha = 0.8, a pass that costs more than a step), alpha = 0 (plain
decoding best), alpha = 1 (one rate: the closed form's 0/0), rates by position (falling ones,
and notebook 08's alpha = [1, 0.5]), measured v(1..k_max + 1) as an array, exact ties and
k_max = 0. Then N_RANDOM fresh cases drawn for each grading from its secret
(engine/secret.py): a plan_k that answers the shown cases from a table fails them. A failure
names the first wrong answer on its case and the known mistake that reproduces it (a term too
few or too many, the target's token forgotten or counted only as the bonus, the rates added
instead of chained, one pooled rate, plain decoding priced at v, the pass priced for k
positions, v ignored, the argmax over tokens, ties, k = 0 left out). The skeleton gives the
contract only; the formulas above are the student's to derive, so the hints name a mistake
and a case to check by hand rather than hand them out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from specdec.grading.engine.core import Check, Family, Outcome
from specdec.grading.engine.quoting import one_line, shown_value
from specdec.grading.engine.replies import whole_number
from specdec.grading.engine.secret import grader_rng, grading_secret
from specdec.grading.engine.submission import (
    Submission,
    SubmissionCrash,
    call_safely,
    show_inputs,
)
from specdec.grading.project import expected_tokens_per_round

RTOL, ATOL = 1e-9, 1e-12
COMMAND = "plan_k"
Figures = float | tuple[float, ...]  # one figure, or one per position


@dataclass(frozen=True)
class Case:
    alpha: Figures  # acceptance: one rate, or alpha[j] for the round's draft j + 1
    c: float  # a draft step, in target steps
    v: Figures  # a pass over 2 or more positions: one figure, or v[j] = v(j + 1), v[0] = 1
    k_max: int

    @property
    def one_rate(self) -> bool:
        return np.isscalar(self.alpha)

    @property
    def one_pass(self) -> bool:
        return np.isscalar(self.v)

    def rates(self) -> np.ndarray:  # -> [k_max]: the rate of draft j + 1, j = 0 .. k_max - 1
        return np.broadcast_to(np.asarray(self.alpha, dtype=np.float64), (self.k_max,))

    def passes(self) -> np.ndarray:  # -> [k_max + 1]: v(k + 1), the pass of a round of k drafts
        if self.one_pass:
            return np.where(np.arange(self.k_max + 1) == 0, 1.0, float(self.v))
        return np.array(self.v, dtype=np.float64)

    def arguments(self) -> dict:
        # what the submission receives: floats, or fresh float64 arrays
        def handed(x: Figures):
            return float(x) if np.isscalar(x) else np.array(x, dtype=np.float64)

        return {"alpha": handed(self.alpha), "c": self.c, "v": handed(self.v), "k_max": self.k_max}

    def describe(self) -> str:
        def said(x: Figures, n: int) -> str:
            return f"{x:g}" if np.isscalar(x) else f"[{n}] float64"

        alpha, v = said(self.alpha, self.k_max), said(self.v, self.k_max + 1)
        return f"{COMMAND}(alpha={alpha}, c={self.c:g}, v={v}, k_max={self.k_max})"


@dataclass(frozen=True)
class Plan:
    best_k: int
    tokens: np.ndarray  # [k_max + 1] E(k)
    speedups: np.ndarray  # [k_max + 1]


def chained(rates: np.ndarray) -> np.ndarray:
    """[k_max] rates -> [k_max + 1]: 1 + P(A >= 1) + ... + P(A >= k) for k = 0 .. k_max."""
    return 1.0 + np.concatenate([[0.0], np.cumsum(np.cumprod(rates))])


def expected(case: Case) -> Plan:
    """The grader's plan (k = 0 .. k_max; ties: np.argmax's first). One rate: specdec.costs'
    E(alpha, k), the notebooks' formula; rates by position: the chain of them."""
    k = np.arange(case.k_max + 1)
    if case.one_rate:
        tokens = np.array([expected_tokens_per_round(float(case.alpha), int(j)) for j in k])
    else:
        tokens = chained(case.rates())
    speedups = tokens / (k * case.c + case.passes())
    return Plan(int(np.argmax(speedups)), tokens, speedups)


# --------------------------------------------------------------------------------------------
# Calling the submission and reading its plan
# --------------------------------------------------------------------------------------------


class Breach(Exception):
    """The answer is not (int, [k_max + 1] array, [k_max + 1] array)."""


LARGEST_K = 10**6  # a best_k beyond this is refused as not a k (not shown in full either)


def call_student(sub: Submission, case: Case) -> Plan:
    shown = case.arguments()
    args = tuple(case.arguments().values())  # fresh arrays: what the submission may overwrite
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


def crash_hint(error: BaseException, case: Case) -> str:
    if case.alpha == 1.0 and isinstance(error, (ZeroDivisionError, FloatingPointError)):
        return HINTS["alpha-1"]
    if isinstance(error, IndexError) and not case.one_pass:
        return HINTS["v-index"]
    if isinstance(error, IndexError) and not case.one_rate:
        return HINTS["alpha-index"]
    if isinstance(error, TypeError) and not (case.one_rate and case.one_pass):
        return (
            "alpha may be an array of k_max rates, one per draft position, and v an array of "
            "k_max + 1 costs (v[j] = v(j + 1)), not only numbers"
        )
    return ""


HINTS = {
    "alpha-1": (
        "alpha = 1 divides by zero: the closed form for one rate is 0 / 0 there. Every draft "
        "is then accepted, so a round of k drafts yields k + 1 tokens — treat alpha = 1 on its "
        "own, or sum the terms instead of using the closed form"
    ),
    "term-short": (
        "expected_tokens is one term short (with one rate: the exponent of the closed form "
        "off by one): a round of k drafts can yield k + 1 tokens, and the chance that it "
        "yields the (k + 1)-th is that all k drafts were accepted"
    ),
    "term-extra": (
        "expected_tokens has one term too many (with one rate: the exponent of the closed form "
        "off by one): a round of k drafts yields at most k + 1 tokens"
    ),
    "no-target-token": (
        "expected_tokens is one token short: it counts the accepted drafts alone. Every round "
        "also emits one token of the target's (the correction after a rejection, or the bonus "
        "when all k drafts are kept): at alpha = 0 a round still yields 1 token"
    ),
    "bonus-only": (
        "expected_tokens counts the target's token only when all k drafts are kept (the "
        "bonus): a rejection also ends with one token of the target's, the correction drawn "
        "from the residual, so every round emits exactly one target token after its accepted "
        "drafts (at alpha = 0 a round still yields 1 token whatever k is)"
    ),
    "sum-of-rates": (
        "expected_tokens adds the rates as if every draft were judged: a draft is judged only "
        "when every draft before it in the round was accepted (the first rejection ends the "
        "round), and alpha[j] is its rate given that. Check k = 2 by hand: the second draft "
        "counts only in the rounds that kept the first"
    ),
    "pooled-rate": (
        "expected_tokens uses one rate, the mean of alpha[0..k-1], for every position: the "
        "rates differ by position, and the chance to reach draft i is built from the rates of "
        "the drafts before it, each its own (notebook 08's alpha = [1, 0.5], k = 2: the round "
        "yields 2.5 tokens on average, not the mean rate's 2.31)"
    ),
    "alpha-index": (
        "alpha has k_max entries, one per draft position: alpha[0] is the first draft's rate, "
        "alpha[k - 1] the k-th's (index j, not j + 1)"
    ),
    "plain-at-v": (
        "speedups[0] prices plain decoding at v: k = 0 is one target forward over one new "
        "position, the unit of cost itself, so it costs exactly 1 and its speedup is 1. v "
        "prices the passes over 2 or more positions"
    ),
    "v-ignored": (
        "the speedups price every verification pass at 1: a pass over several positions costs "
        "v target steps (a figure, or v[j] for a pass over j + 1 positions)"
    ),
    "k-plus-1-drafts": "the speedups charge k + 1 draft steps: a round of k drafts drafts k",
    "v-index": (
        "v[j] is v(j + 1), the cost of a pass over j + 1 positions: the speedup of k drafts "
        "reads the entry of the pass the round needs — check how many positions that is, and "
        "the index (not one more or one less)"
    ),
    "v-k-rows": (
        "the speedups price the verification pass for k positions: k rows judge the k drafts, "
        "but the round's last token needs one more row — the bonus row after the k-th draft — "
        "so the pass covers k + 1 positions"
    ),
    "upside-down": "the speedups are upside down: tokens per unit of cost, not cost per token",
    "best-of-tokens": (
        "best_k maximises the tokens per round, which only grow with k: it must maximise the "
        "speedup, which pays for the drafts"
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


def pooled(rates: np.ndarray) -> np.ndarray:
    # [k_max] -> [k_max + 1]: E with the mean of the first k rates at every position
    tokens = [1.0]
    for k in range(1, len(rates) + 1):
        mean = rates[:k].mean()
        tokens.append(float(np.sum(mean ** np.arange(k + 1.0))))
    return np.array(tokens)


def tokens_hint(case: Case, want: Plan, tokens: np.ndarray) -> str:
    if case.alpha == 1.0 and not np.all(np.isfinite(tokens)):
        return HINTS["alpha-1"]
    rates, E = case.rates(), want.tokens
    all_kept = np.concatenate([[1.0], np.cumprod(rates)])  # [k_max + 1]: P(A >= k)
    known = {
        "no-target-token": E - 1,
        "bonus-only": E - 1 + all_kept,
        "term-short": E - all_kept,
        "sum-of-rates": 1 + np.concatenate([[0.0], np.cumsum(rates)]),
    }
    if case.one_rate:
        known["term-extra"] = E + all_kept * float(case.alpha)
    else:
        known["pooled-rate"] = pooled(rates)
    for name, wrong in known.items():
        if close(tokens, wrong):
            return HINTS[name]
    return (
        "expected_tokens[k] is the expected number of tokens a round of k drafts emits: its "
        "accepted drafts plus the target's one token. Check it where you know the answer: 1 "
        "at k = 0 or when no draft is ever accepted, k + 1 when every draft is, and at k = 1 "
        "1 plus the first draft's rate (2 tokens exactly when that draft is accepted)"
    )


def speedups_hint(case: Case, want: Plan, speedups: np.ndarray) -> str:
    k, E, passes = np.arange(case.k_max + 1), want.tokens, case.passes()
    known = {
        "v-ignored": E / (k * case.c + 1.0),
        "k-plus-1-drafts": E / ((k + 1) * case.c + passes),
        "upside-down": (k * case.c + passes) / E,
    }
    if case.one_pass:
        known["plain-at-v"] = E / (k * case.c + float(case.v))
        known["v-k-rows"] = E / (k * case.c + np.where(k <= 1, 1.0, float(case.v)))
    else:
        known["v-k-rows"] = E / (k * case.c + passes[k - 1])  # v[k - 1], numpy's v[-1] at 0
    for name, wrong in known.items():
        if close(speedups, wrong):
            return HINTS[name]
    if case.k_max > 0 and not close(speedups[:1], want.speedups[:1]):
        if close(speedups[1:], want.speedups[1:]):  # only plain decoding wrong
            return HINTS["plain-at-v"]
    if not case.one_pass and case.k_max > 0:
        if close(speedups[1:], E[1:] / (k[1:] * case.c + passes[:-1])):  # v[k - 1], k >= 1
            return HINTS["v-k-rows"]
        if close(speedups[:-1], E[:-1] / (k[:-1] * case.c + passes[1:])):  # v[k + 1]
            return HINTS["v-index"]
    return (
        "speedups[k] is expected_tokens[k] divided by the round's cost in target steps: its k "
        "draft steps (c each) and its one verification pass (v for as many positions as the "
        "round needs rows; a pass over one position is the unit, 1)"
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
FALLING = (0.9, 0.85, 0.8, 0.7, 0.6, 0.5)  # rates that fall with the position
FIRST_LOWEST = (0.6, 0.9, 0.85, 0.9, 0.8, 0.85)  # the first lowest, as notebook 08 measures
CASES: dict[str, tuple[str, list[Case]]] = {
    "one-rate": (
        "one rate alpha = 0.8, c = 0.1, v = 1.25: best k inside the range",
        [Case(0.8, 0.1, 1.25, 8)],
    ),
    "alpha-0": (
        "alpha = 0: one token per round, plain decoding best",
        [Case(0.0, 0.1, 1.0, 5), Case((0.0, 0.0, 0.0), 0.3, 1.4, 3)],
    ),
    "alpha-1": ("alpha = 1: every draft kept, the largest k best", [Case(1.0, 0.2, 1.5, 6)]),
    "by-position": (
        "rates by position: falling, the first lowest, notebook 08's [1, 0.5]",
        [
            Case(FALLING, 0.05, 1.2, 6),
            Case(FIRST_LOWEST, 0.1, 1.3, 6),
            Case((1.0, 0.5), 0.0, 1.0, 2),
        ],
    ),
    "measured-v": (
        "v as measured, v[j] = v(j + 1) (v[0] = 1), one rate and rates by position",
        [Case(0.7, 0.05, MEASURED_V, 6), Case(FALLING, 0.02, MEASURED_V, 6)],
    ),
    "ties": (
        "exact ties (alpha = 0, c = 0, v = 1): the smallest k; k_max = 0",
        [Case(0.0, 0.0, 1.0, 4), Case((), 0.1, 1.3, 0)],
    ),
}
N_RANDOM = 200
RANDOM_SEED = 808  # the grader's stream (from the grading's secret) of the random cases


def random_case(rng: np.random.Generator) -> Case:
    k_max = int(rng.integers(0, 13))
    kind = rng.choice(["zero", "one", "rate", "rates"], p=[0.05, 0.05, 0.4, 0.5])
    if kind == "rates":  # some fall, some rise, some wander; 0 and 1 among them
        rates = rng.uniform(0.0, 1.0, k_max) ** rng.uniform(0.2, 1.0)
        rates[rng.random(k_max) < 0.05] = rng.choice([0.0, 1.0])
        alpha: Figures = tuple(float(x) for x in rates)
    else:
        alpha = {"zero": 0.0, "one": 1.0}.get(str(kind), float(rng.uniform(0.0, 0.98)))
    c = float(rng.uniform(0.0, 1.0))
    if rng.random() < 0.5:
        v: Figures = float(rng.uniform(0.8, 3.0))  # a pass may even cost less than a step
    else:  # v(1) = 1, then steps that mostly grow
        v = tuple(float(x) for x in np.cumsum(np.r_[1.0, rng.uniform(-0.1, 0.5, k_max)]))
    return Case(alpha, c, v, k_max)


@lru_cache(maxsize=4)
def random_cases(secret: int, n: int = N_RANDOM) -> tuple[Case, ...]:
    """n fresh cases of one grading, from its secret: (alpha, c, v, k_max) with one rate or
    rates by position, v a figure or an array; cases whose two best speedups are within 1e-6
    of each other are left out (which k wins there is rounding's choice)."""
    rng = grader_rng(RANDOM_SEED, secret)
    cases: list[Case] = []
    while len(cases) < n:
        case = random_case(rng)
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
        return "expected_tokens differs", tokens_hint(case, want, got.tokens)
    if not close(got.speedups, want.speedups):
        return "speedups differ", speedups_hint(case, want, got.speedups)
    if got.best_k != want.best_k:
        return f"best_k = {got.best_k}, expected {want.best_k}", best_hint(case, want, got.best_k)
    return None


def story_of(case: Case, want: Plan, got: Plan) -> list[str]:
    def show(a: np.ndarray) -> str:
        return np.array2string(a, precision=6, suppress_small=True, separator=", ")

    lines = [case.describe()]
    arrays = {name: x for name, x in case.arguments().items() if isinstance(x, np.ndarray)}
    if arrays:
        lines.append(show_inputs(**arrays).strip())
    return lines + [
        f"expected_tokens, expected {show(want.tokens)}",
        f"                 yours    {show(got.tokens)}",
        f"speedups,        expected {show(want.speedups)}",
        f"                 yours    {show(got.speedups)}",
        f"best_k,          expected {want.best_k}; yours {got.best_k}",
    ]


def case_check(name: str, what: str, cases) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        all_cases = cases(grading_secret()) if callable(cases) else cases
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
        return Outcome(True, f"{n} plan{'s' * (n > 1)} equal to the grader's", n=n)

    return Check(f"speedup/{name}", what, False, run)


def speedup_families(policy: str = "shrink") -> list[Family]:
    """The speedup exercise's one family (`policy` is a loop's; unused here)."""
    checks = [case_check(name, what, cases) for name, (what, cases) in CASES.items()]
    what = f"{N_RANDOM} random (alpha, c, v, k_max), drawn afresh for each grading"
    checks.append(case_check("random", what, random_cases))
    return [Family("speedup", "your plan_k gives the expected tokens, speedups and best k", checks)]

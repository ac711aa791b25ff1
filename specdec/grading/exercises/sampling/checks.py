"""The checks of a submitted `sampling_distribution(logits, temperature, top_k, top_p) -> [V]`.

One family, every check exact: the function is deterministic, so its output is held against
`reference.sampling.probabilities` (float64) on each case, to a tight tolerance, and one
wrong row is proof. The cases, most telling first:

1. temperature alone (T = 1, 0.5, 2);
2. greedy (T = 0): the one-hot argmax, top-k and top-p ignored; then ties at the maximum;
3. top-k, then ties at the k-th largest logit (every tied token survives);
4. top-p: the token that crosses p is kept; a case where the first token alone reaches p;
5. top-k and top-p together, on a case where their order changes the answer;
6. large and very negative logits, and a tiny temperature (the max must be subtracted);
7. a few hundred random cases (temperature, top-k, top-p, greedy, mixed), drawn afresh for
   each grading from its secret (engine/secret.py): a table of the shown cases fails them.

A failure is explained on its case (the logits, the expected row, yours), with a hint read
from the row itself: the row matches a known mistake (temperature ignored, top-p before
top-k, the crossing token cut), is proportional to the right one (not renormalised), keeps
too few tied tokens, or holds NaN (an overflow).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from specdec.grading.engine.core import Check, Family, Outcome
from specdec.grading.engine.quoting import one_line, shown_value
from specdec.grading.engine.secret import grader_rng, grading_secret
from specdec.grading.engine.submission import Submission, SubmissionCrash, call_safely, show_inputs
from specdec.grading.project import SamplingParams, probabilities

RTOL, ATOL = 1e-6, 1e-9  # float64 arithmetic in another order stays far inside these
COMMAND = "sampling_distribution"


@dataclass(frozen=True)
class Case:
    logits: tuple[float, ...]  # [V]
    temperature: float  # 0 = greedy
    top_k: int | None  # None or 0: off
    top_p: float | None  # None or 1.0: off

    @property
    def z(self) -> np.ndarray:  # -> [V] float64, a fresh copy for every call
        return np.array(self.logits, dtype=np.float64)

    @property
    def k_on(self) -> bool:
        return bool(self.top_k) and self.top_k < len(self.logits)

    @property
    def p_on(self) -> bool:
        return self.top_p is not None and self.top_p < 1.0

    def describe(self) -> str:
        return (
            f"{COMMAND}(logits [{len(self.logits)}] float64, temperature={self.temperature:g}, "
            f"top_k={self.top_k!r}, top_p={self.top_p!r})"
        )


def logits_of(probs: list[float]) -> tuple[float, ...]:
    # [V] probabilities -> logits whose softmax gives them back (to rounding)
    return tuple(float(x) for x in np.log(probs))


# --------------------------------------------------------------------------------------------
# The expectation, and the rows a few known mistakes give
# --------------------------------------------------------------------------------------------


def expected(case: Case) -> np.ndarray:
    # -> [V] float64: the reference's processed distribution (top_k 0 and top_p None mean off)
    top_p = 1.0 if case.top_p is None else case.top_p
    params = SamplingParams(case.temperature, case.top_k or None, top_p)
    return probabilities(case.z, params)


def softmax(z: np.ndarray) -> np.ndarray:  # [V] -> [V]
    e = np.exp(z - z.max())
    return e / e.sum()


def keep_largest(probs: np.ndarray, k: int) -> np.ndarray:
    # [V] -> [V]: the k largest probabilities (ties at the k-th kept), renormalised
    kth = np.sort(probs)[-k]
    kept = np.where(probs >= kth, probs, 0.0)
    return kept / kept.sum()


def nucleus(probs: np.ndarray, top_p: float, keep_crossing: bool = True) -> np.ndarray:
    # [V] -> [V]: top-p, keeping the token that crosses top_p (the contract) or cutting it
    # (a mistake: keep while the mass *including* the token is <= top_p)
    order = np.argsort(-probs, kind="stable")
    mass = np.cumsum(probs[order])
    keep = (mass - probs[order] < top_p) if keep_crossing else (mass <= top_p)
    kept = np.zeros_like(probs)
    kept[order[keep]] = probs[order[keep]]
    return kept / kept.sum() if kept.sum() > 0 else kept


def mistaken_rows(case: Case) -> list[tuple[np.ndarray, str]]:
    """[(the row a known mistake gives on this case, its hint)], for the cases it differs on."""
    z, T = case.z, case.temperature
    top_p = 1.0 if case.top_p is None else case.top_p
    rows = []
    if T not in (0.0, 1.0):
        for wrong_t, hint in ((1.0, HINTS["temperature-ignored"]), (1 / T, HINTS["times-t"])):
            params = SamplingParams(wrong_t, case.top_k or None, top_p)
            rows.append((probabilities(z, params), hint))
    if T > 0 and case.p_on:
        p = probabilities(z, SamplingParams(T, case.top_k or None))
        with np.errstate(invalid="ignore"):
            rows.append((nucleus(p, top_p, keep_crossing=False), HINTS["crossing-cut"]))
        if case.k_on:  # top-p on the whole softmax, then top-k
            wrong = keep_largest(nucleus(softmax((z - z.max()) / T), top_p), case.top_k)
            rows.append((wrong, HINTS["order"]))
    return rows


HINTS = {
    "temperature-ignored": (
        "this is the row of temperature 1: the temperature was ignored, or applied after the "
        "softmax (dividing probabilities by T and renormalising cancels T). Divide the logits "
        "by T before the softmax: softmax(z / T)"
    ),
    "times-t": "the logits were multiplied by T; the contract divides them: softmax(z / T)",
    "crossing-cut": (
        "top-p cut the token that crosses top_p: keep a token while the mass of the tokens "
        "*before* it is < top_p, so the kept set reaches top_p (the most likely token always "
        "survives)"
    ),
    "order": (
        "top-p ran before top-k: the contract applies top-k to the logits first, takes the "
        "softmax, then applies top-p to that renormalised distribution"
    ),
    "unnormalised": (
        "your row is proportional to the right one but does not sum to 1: after cutting tokens, "
        "divide by the mass that is left (a softmax over the kept logits does it for top-k; "
        "top-p needs its own division)"
    ),
    "overflow": (
        "your row holds NaN or inf: exp overflowed (or 0 / 0 from exp underflowing on every "
        "logit). Subtract the largest logit before exp — softmax(z) = softmax(z - max z) — "
        "and before dividing by a small T"
    ),
}


# --------------------------------------------------------------------------------------------
# Calling the submission and reading its row
# --------------------------------------------------------------------------------------------


class Breach(Exception):
    """The row is not a [V] array of numbers: the contract, not the arithmetic, is broken."""


def call_student(sub: Submission, case: Case) -> np.ndarray:
    # -> the submission's row [V] as float64 (Breach when it is not one)
    z = case.z
    shown = {
        "logits": z,
        "temperature": case.temperature,
        "top_k": case.top_k,
        "top_p": case.top_p,
    }
    args = (z.copy(), case.temperature, case.top_k, case.top_p)
    try:
        row = call_safely(sub, args, {}, shown, COMMAND)
    except SubmissionCrash as crash:
        crash.call = case.describe()  # call_safely's wording is a verify's
        crash.hint = crash.hint or crash_hint(crash.error, case)
        raise
    if isinstance(row, (list, tuple)) and len(row) != len(z):  # before it is converted
        raise Breach(f"it returned {len(row):,} numbers; the contract is [V] = [{len(z)}]")
    try:
        row = np.asarray(row, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as error:
        said = one_line(f"{type(error).__name__}: {error}")
        raise Breach(f"it returned {shown_value(row)}, not an array of numbers ({said})") from None
    if row.shape != z.shape:
        raise Breach(f"it returned shape {list(row.shape)}; the contract is [V] = [{len(z)}]")
    return row


def crash_hint(error: BaseException, case: Case) -> str:
    if case.temperature == 0 and isinstance(error, (ZeroDivisionError, FloatingPointError)):
        return "temperature 0 means greedy: return the one-hot argmax row before dividing by T"
    if isinstance(error, (OverflowError, FloatingPointError)):
        return HINTS["overflow"]
    if isinstance(error, IndexError) and case.top_k and case.top_k > len(case.logits):
        return f"top_k = {case.top_k} exceeds V = {len(case.logits)}: then every token is kept"
    return ""


# --------------------------------------------------------------------------------------------
# The diagnosis of a wrong row
# --------------------------------------------------------------------------------------------


def close(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=RTOL, atol=ATOL))


def row_hint(case: Case, row: np.ndarray, want: np.ndarray) -> str:
    """The likely mistake, read from the wrong row against the right one."""
    if case.temperature == 0:  # (dividing by T = 0 gives NaN too: greedy comes first)
        return greedy_hint(case, row)
    if not np.all(np.isfinite(row)):
        return HINTS["overflow"]
    for wrong, hint in mistaken_rows(case):
        if close(row, wrong):
            return hint
    total = row.sum()
    if total > 0 and not np.isclose(total, 1.0, atol=1e-9) and close(row / total, want):
        return HINTS["unnormalised"]
    kept, want_kept = row > ATOL, want > ATOL
    if case.k_on and not case.p_on and kept.sum() != want_kept.sum():
        return top_k_hint(case, kept, want_kept)
    if case.p_on and (kept != want_kept).any():
        missing, extra = want_kept & ~kept, kept & ~want_kept
        if missing.any() and not extra.any():
            return (
                f"your row drops token(s) {np.flatnonzero(missing).tolist()} that the contract "
                f"keeps: {HINTS['crossing-cut']}"
            )
        if extra.any() and not missing.any():
            return (
                f"your row keeps token(s) {np.flatnonzero(extra).tolist()} that the contract "
                f"cuts: once the kept mass reaches top_p, stop (a token whose mass-before is "
                f">= top_p is cut){'; top-k comes first' if case.k_on else ''}"
            )
    if not np.isclose(total, 1.0, atol=1e-9):
        return f"your row sums to {total:.6g}, not 1"
    return (
        "the row differs from the contract's: the steps are z = (logits - max) / T, then "
        "top-k on z (ties at the k-th kept), softmax, then top-p (the crossing token kept) "
        "and renormalise"
    )


def greedy_hint(case: Case, row: np.ndarray) -> str:
    z = case.z
    tied = np.flatnonzero(z == z.max())
    one_hot = np.count_nonzero(row) == 1 and np.isclose(row.max(), 1.0)
    if one_hot and int(row.argmax()) in tied and len(tied) > 1:
        return (
            f"the logits tie at the maximum (tokens {tied.tolist()}): greedy takes the lowest "
            f"index, {tied[0]} (np.argmax's rule, the reference's)"
        )
    if one_hot:
        return "temperature 0 is greedy: the one-hot row at argmax(logits)"
    return (
        "temperature 0 means greedy: return the one-hot row at argmax(logits) (all the mass on "
        "one token, even when logits tie), whatever top_k and top_p say"
    )


def top_k_hint(case: Case, kept: np.ndarray, want_kept: np.ndarray) -> str:
    z, k = case.z, case.top_k
    kth = np.sort(z)[-k]
    ties = int((z == kth).sum())
    if ties > 1 and kept.sum() < want_kept.sum():
        return (
            f"the k-th largest logit ({kth:g}) is shared by {ties} tokens: the contract keeps "
            f"every token whose logit is >= the k-th largest, so all of them survive "
            f"({want_kept.sum()} tokens kept for k = {k}, yours kept {kept.sum()})"
        )
    return (
        f"top-k kept {kept.sum()} tokens where the contract keeps {want_kept.sum()} (k = {k}): "
        f"keep the logits >= the k-th largest, np.sort(z)[-k]"
    )


# --------------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------------

Z5 = (2.0, 1.0, 0.5, -1.0, 0.0)
Z6 = (0.4, 2.2, -1.3, 1.1, 0.0, 1.7)
CASES: dict[str, tuple[str, list[Case]]] = {
    "temperature": (
        "temperature alone: softmax(logits / T)",
        [Case(Z5, t, None, None) for t in (1.0, 0.5, 2.0)],
    ),
    "greedy": (
        "T = 0: the one-hot argmax, top-k and top-p ignored",
        [Case((0.3, 2.0, -1.0, 1.5), 0.0, None, None), Case((0.3, 2.0, -1.0, 1.5), 0.0, 2, 0.5)],
    ),
    "greedy-ties": (
        "T = 0, the maximum tied: the lowest index",
        [Case((1.0, 3.0, 3.0, 0.0, 3.0), 0.0, None, None)],
    ),
    "top-k": (
        "top-k: the k largest logits, renormalised; 0, None and k >= V are off",
        [
            Case(Z6, 1.0, 3, None),
            Case(Z6, 0.7, 1, None),
            Case(Z6, 1.3, 6, None),
            Case(Z6, 1.0, 0, None),
            Case(Z6, 1.0, None, 1.0),
        ],
    ),
    "top-k-ties": (
        "top-k, the k-th largest logit tied: every tied token kept",
        [Case((3.0, 1.0, 2.0, 2.0, 0.0), 1.0, 2, None)],
    ),
    "top-p": (
        "top-p: the token that crosses p is kept, the rest cut, renormalised",
        [
            Case(logits_of([0.15, 0.5, 0.05, 0.3]), 1.0, None, 0.7),
            Case(logits_of([0.15, 0.5, 0.05, 0.3]), 1.0, None, 0.9),
        ],
    ),
    "top-p-one-token": (
        "top-p where the first token alone reaches p: a one-hot row",
        [Case(logits_of([0.1, 0.6, 0.3]), 1.0, None, 0.5)],
    ),
    "top-k-and-top-p": (
        "top-k first, softmax, then top-p on the renormalised row",
        [
            Case(logits_of([0.2, 0.5, 0.3]), 1.0, 2, 0.6),
            Case(Z6, 0.8, 4, 0.8),
        ],
    ),
    "large-logits": (
        "large and very negative logits, a tiny T: no overflow",
        [
            Case((1000.0, 999.0, 998.0, -1000.0), 1.0, None, None),
            Case((-1000.0, -1001.0, -1002.5), 1.0, 2, None),
            Case((10.0, 9.5, 0.0, -3.0), 0.01, None, None),
            Case((800.0, 799.0, 790.0), 0.5, None, 0.9),
        ],
    ),
}
N_RANDOM = 300  # random cases: temperature, top-k, top-p, greedy, mixed
RANDOM_SEED = 2024  # the grader's stream (from the grading's secret) of the random cases


@lru_cache(maxsize=4)
def random_cases(secret: int, n: int = N_RANDOM) -> tuple[Case, ...]:
    """n fresh cases of one grading, from its secret, away from the conventions' knife edges:
    no logit ties (they are the dedicated cases' business) and no token's mass-before within
    1e-9 of top_p."""
    rng = grader_rng(RANDOM_SEED, secret)
    cases = []
    while len(cases) < n:
        V = int(rng.integers(2, 41))
        z = rng.normal(0.0, 3.0, V)
        T = 0.0 if rng.random() < 0.1 else float(rng.choice([1.0, rng.uniform(0.2, 2.5)]))
        top_k = [None, 0, int(rng.integers(1, V + 2))][int(rng.integers(3))]
        top_p = [None, 1.0, float(rng.uniform(0.05, 0.99))][int(rng.integers(3))]
        case = Case(tuple(float(x) for x in z), T, top_k, top_p)
        if len(set(case.logits)) == V and not on_knife_edge(case):
            cases.append(case)
    return tuple(cases)


def on_knife_edge(case: Case) -> bool:
    # is some token's mass-before within rounding of top_p (where the order of the sums
    # could decide whether it is kept)?
    if case.temperature == 0 or not case.p_on:
        return False
    p = probabilities(case.z, SamplingParams(case.temperature, case.top_k or None))
    sorted_p = np.sort(p)[::-1]
    before = np.cumsum(sorted_p) - sorted_p
    return bool(np.any(np.abs(before - case.top_p) < 1e-9))


# --------------------------------------------------------------------------------------------
# The checks and the family
# --------------------------------------------------------------------------------------------


def case_check(name: str, what: str, cases) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        all_cases = cases(grading_secret()) if callable(cases) else cases
        for i, case in enumerate(all_cases):
            want = expected(case)
            try:
                row = call_student(sub, case)
            except Breach as breach:
                story = [case.describe(), f"{COMMAND} must return a [V] float64 array: {breach}"]
                hint = "return the probabilities as a numpy array of shape [V] (float64)"
                return Outcome(False, f"case {i + 1}: not a [V] array", story, hint, n=i + 1)
            if not close(row, want):
                summary = f"case {i + 1} of {len(all_cases)}: the row differs"
                story, hint = story_of(case, row, want), row_hint(case, row, want)
                return Outcome(False, summary, story, hint, n=i + 1)
        n = len(all_cases)
        return Outcome(True, f"{n} row{'s' * (n > 1)} equal to the contract's", n=n)

    return Check(f"sampling/{name}", what, False, run)


def story_of(case: Case, row: np.ndarray, want: np.ndarray) -> list[str]:
    with np.printoptions(precision=4, suppress=True, linewidth=90):
        return [
            f"temperature = {case.temperature:g}, top_k = {case.top_k!r}, top_p = {case.top_p!r}",
            show_inputs(logits=case.z).strip(),
            f"expected {np.array2string(want, separator=', ')}",
            f"yours    {np.array2string(row, separator=', ')}",
        ]


def sampling_checks() -> list[Check]:
    checks = [case_check(name, what, cases) for name, (what, cases) in CASES.items()]
    what = f"{N_RANDOM} random cases, every option mixed, drawn afresh for each grading"
    checks.append(case_check("random", what, random_cases))
    return checks


def sampling_families(policy: str = "shrink") -> list[Family]:
    """The sampling exercise's one family (`policy` is a loop's; unused here)."""
    what = "your sampling_distribution equals the contract's on every case"
    return [Family("sampling", what, sampling_checks())]

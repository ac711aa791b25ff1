"""Checks, families, and the run that scores each family on its own.

A check is one law of the submission's output, held against an exact expectation. Two kinds:

* exact checks (zero variance): inputs whose outcome is certain (one-hot rows, p = q,
  p(x) = 0); any other outcome is impossible, so one wrong call is proof. No false alarm.
* sampled checks: n calls with a fixed seed, a chi-square or binomial test. A family of m
  sampled checks tests each at ALPHA / m (Bonferroni), so a correct submission fails any
  check of a family with probability at most ALPHA. Bonferroni, unlike Holm, lets a family
  stop at its first failure: that failure is already decisive whatever the others say.

Sampled checks look at their data twice: after a fifth of the runs (the quick look), then
after all of them, each look at half the check's share, ALPHA / (2 m). A grossly wrong
submission is rejected at the quick look, in a fifth of the time; the union bound over the
2 m tests keeps the family's false-alarm rate at most ALPHA.

Families are independent: each runs whatever another found (unless it declares that it
confirms one, `requires`), and each is scored as a whole, so no score depends on the order
of the checks.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from specdec.grading.engine.submission import Submission, SubmissionCrash

ALPHA = 1e-3  # false-alarm rate of each family of sampled checks


@dataclass
class Outcome:
    """What one check found: the one-line verdict and, on failure, the plain-words story."""

    passed: bool
    summary: str  # one line: what was compared and how it came out
    story: list[str] = field(default_factory=list)  # expected vs observed, on the smallest case
    hint: str = ""  # the likely mistake, read from the pattern of the deviation
    p_value: float | None = None  # None for an exact check
    n: int = 0  # calls or runs of the submission
    generic: bool = False  # the hint is a fallback: another check's diagnosis may replace it
    measure: float | None = None  # a figure the verdict quotes (the acceptance rate)
    pattern: str = ""  # what the outcomes showed as a whole ("never-keeps", "keeps-all"),
    # for the hints an exercise reads from every check's outcome


@dataclass(frozen=True)
class Check:
    name: str  # "family/law", shown on the report's line
    what: str  # the law, in a few words
    sampled: bool  # a statistical test (False: an exact, zero-variance check)
    run: Callable[[Submission, float, int], Outcome]  # (submission, threshold, look)
    # -> Outcome; look 0 is the quick look, look 1 the full one (exact checks: look 0 only)


@dataclass
class Result:
    """A check as reported: its outcome, or why it did not run."""

    check: Check
    family: str
    status: str  # "pass", "fail" or "not run"
    outcome: Outcome | None
    threshold: float | None  # the p-value a sampled check had to stay above
    seconds: float
    reason: str = ""  # for "not run"
    crash: SubmissionCrash | None = None  # the check failed because the submission raised


@dataclass
class Family:
    name: str
    what: str  # shown on the verdict line when the family passes
    checks: list[Check]
    requires: tuple[str, ...] = ()  # families that must pass first (a costly confirmation
    # adds nothing to a submission those have already shown wrong)

    @property
    def threshold(self) -> float:
        # the p-value each look of each sampled check must stay above
        m = sum(c.sampled for c in self.checks)
        return ALPHA / (2 * max(m, 1))


@dataclass
class Grade:
    """Everything the report needs."""

    submission: Submission
    results: list[Result]
    crashes: list[SubmissionCrash]  # each distinct crash once, in the order met
    seconds: float
    families: list[Family] = field(default_factory=list)
    verdicts: dict[str, str] = field(default_factory=dict)  # family -> a line that replaces
    # its default verdict (e.g. "exact, but not the contract's rule: ...")
    counted: frozenset[str] | None = None  # the families that decide `passed` (None: all)

    @property
    def crash(self) -> SubmissionCrash | None:
        return self.crashes[0] if self.crashes else None

    def family_status(self, name: str) -> str:
        """'pass', 'fail' or 'not run' for a family as a whole."""
        statuses = {r.status for r in self.results if r.family == name}
        if "fail" in statuses:
            return "fail"
        return "pass" if statuses == {"pass"} else "not run"

    @property
    def passed(self) -> bool:
        names = dict.fromkeys(r.family for r in self.results)
        counted = [n for n in names if self.counted is None or n in self.counted]
        return all(self.family_status(n) == "pass" for n in counted)


Revise = Callable[[dict[str, Result]], dict[str, str]]


def run_families(
    submission: Submission, families: list[Family], revise: Revise | None = None
) -> Grade:
    """Run every family; a family stops at its own first failure, and no other family cares.

    Within a family every check runs at the quick look first (exact checks are final there),
    then the sampled checks that passed it run to their full sample. A failure is decisive
    for its family (the false-alarm rate is the family's), so the family is scored as a whole
    and what follows its failure is left out, not counted as failed: a score never depends on
    the order of the checks. A crash fails the check that met it and stops that family only.

    `revise(results by check name)` sees the whole pattern at the end: it may rewrite hints
    and returns verdict lines for families whose default verdict would mislead.
    """
    start = time.perf_counter()
    results: list[Result] = []
    crashes: dict[tuple, SubmissionCrash] = {}
    status: dict[str, str] = {}
    for family in families:
        missing = [name for name in family.requires if status.get(name) != "pass"]
        if missing:
            reason = f"runs once the {' and '.join(missing)} family passed"
            results += [not_run(c, family, reason) for c in family.checks]
            status[family.name] = "not run"
            continue
        done: dict[str, Result] = {}
        stopped = ""
        for look in (0, 1):
            for check in family.checks:
                if look == 1 and not check.sampled:
                    continue  # exact checks are final at look 0
                if stopped:
                    if check.name in done and done[check.name].status == "pass":
                        del done[check.name]  # a passed quick look alone is no verdict
                    continue
                result = run_one(submission, check, family, look)
                if result.crash is not None:
                    crashes.setdefault(result.crash.key(), result.crash)
                if check.name in done:  # the full look: report the time of both looks
                    result.seconds += done[check.name].seconds
                done[check.name] = result
                if result.status == "fail":
                    stopped = (
                        f"{family.name} already failed at {check.name} (a failure is decisive "
                        f"for the family; these would not change its score)"
                    )
        for check in family.checks:
            results.append(done.get(check.name) or not_run(check, family, stopped))
        failed = any(r.status == "fail" for r in results if r.family == family.name)
        status[family.name] = "fail" if failed else "pass"
    verdicts = revise({r.check.name: r for r in results}) if revise else {}
    seconds = time.perf_counter() - start
    return Grade(submission, results, list(crashes.values()), seconds, families, verdicts)


def run_one(submission: Submission, check: Check, family: Family, look: int) -> Result:
    threshold = family.threshold if check.sampled else None
    t0 = time.perf_counter()
    try:
        outcome = check.run(submission, threshold or 0.0, look)
    except SubmissionCrash as crash:
        seconds = time.perf_counter() - t0
        return Result(check, family.name, "fail", None, threshold, seconds, crash=crash)
    status = "pass" if outcome.passed else "fail"
    seconds = time.perf_counter() - t0
    return Result(check, family.name, status, outcome, threshold, seconds)


def not_run(check: Check, family: Family, reason: str) -> Result:
    threshold = family.threshold if check.sampled else None
    return Result(check, family.name, "not run", None, threshold, 0.0, reason)


class Runs:
    """The runs of one sampled case, drawn in two looks from one stream of outcomes.

    `outcomes(submission)` is a generator of outcomes (it owns its seeded generator); the
    quick look sees its first `quick` outcomes, the full look all `n` of them. Several checks
    of the same case share the runs.
    """

    def __init__(self, outcomes: Callable, n: int, quick_fraction: float = 0.2) -> None:
        self.outcomes, self.n = outcomes, n
        self.quick = looks_of(n, quick_fraction)[0]
        self.submission: Submission | None = None

    def size(self, look: int) -> int:
        return self.quick if look == 0 else self.n

    def counts(self, submission: Submission, look: int) -> Counter:
        if self.submission is not submission:
            self.submission, self.stream = submission, self.outcomes(submission)
            self.seen: Counter = Counter()
            self.snapshots: dict[int, Counter] = {}
            self.crash: SubmissionCrash | None = None
        if self.crash is not None:  # the stream ended in a crash: so does every later look
            raise self.crash
        want = self.size(look)
        if want not in self.snapshots:
            try:
                for _ in range(want - self.seen.total()):
                    self.seen[next(self.stream)] += 1
            except SubmissionCrash as crash:
                self.crash = crash
                raise
            self.snapshots[want] = Counter(self.seen)
        return self.snapshots[want]


def looks_of(n: int, quick_fraction: float) -> tuple[int, int]:
    """The outcomes a sampled case's quick look and full look read (n: the full look's)."""
    return max(1, int(n * quick_fraction)), n

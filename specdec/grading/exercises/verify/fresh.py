"""The verify's checks on fresh inputs: rows and drafts drawn for each grading from its secret
(engine/secret.py), so that a verify that answers the shown cases from a table of their
inputs passes none of these. The expected laws are written here, from the contract's
definition (laws.verify_joint_law), on the rows exactly as the verify is handed them.

* verify/keeps-drafts (law family, exact): 40 calls where keeping is free or likely; not one
  draft kept fails. An exact rule that never keeps (always (0, a sample of p_target[0])) passes
  every law, but it is no verification: this is what stops it collecting the law family.
* verify/fresh-accepted, verify/fresh-joint (rule family, sampled): 10 cases of random rows
  (k = 1..4, V = 3..6, p and q of every overlap, zeros, p = q), drafts drawn from q, 1 000
  calls each: the law of the accepted count, then the joint law of (accepted, token), one
  chi-square over the cases (the sum of their statistics, engine/laws.compare_cases).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from specdec.grading.engine.core import Check, Outcome, Runs
from specdec.grading.engine.laws import Context, Law, compare_cases, marginal, verify_joint_law
from specdec.grading.engine.secret import grader_rng, grading_secret
from specdec.grading.engine.submission import (
    CHUNK,
    Submission,
    call_verify_each,
    streams,
    verify_inputs,
)
from specdec.grading.exercises.verify.exact import draw
from specdec.grading.exercises.verify.joint import diagnose_joint

FRESH_SEED = 41  # the grader's streams (from the secret) of the fresh cases and of the gate
GATE_SEED = 42
FRESH_CASES = 10
FRESH_N = 10_000  # calls in all, in turn over the cases: 1 000 each (200 at the quick look)
GATE_CALLS = 40  # half with p = q at every draft; p(x) >= 0.5 at the first draft in all


@dataclass(frozen=True)
class FreshCase:
    P: np.ndarray  # [k+1, V] as the verify is handed it (float64, rows summing to 1)
    Q: np.ndarray  # [k, V]
    drafts: Context  # [k]
    law: Law  # the contract's joint law of (accepted, token) on these rows
    accepted: Law  # its marginal: P(accepted = a), with P(accepted >= i) = prod_{j<i} min(1,
    # p_j(x_j)/q_j(x_j))

    @property
    def k(self) -> int:
        return len(self.drafts)

    def shown(self) -> list[str]:
        with np.printoptions(precision=3, suppress=True):
            return [
                f"p_target =\n{self.P}",
                f"q_draft =\n{self.Q}",
                f"draft_tokens = {list(self.drafts)}",
            ]


def handed(P: np.ndarray, Q: np.ndarray, drafts: Context) -> FreshCase:
    # the rows as call_verify hands them over, and the contract's law on exactly those
    rows = verify_inputs(P, Q, drafts)
    P, Q = rows["p_target"], rows["q_draft"]
    law = verify_joint_law(P, Q, tuple(drafts))
    return FreshCase(P, Q, tuple(drafts), law, marginal(law, lambda o: o[0]))


def sparse_row(V: int, rng: np.random.Generator, zeros: float) -> np.ndarray:
    # [V] a Dirichlet row (flat or peaked) with some entries set to 0, at least one kept
    row = rng.dirichlet(np.full(V, rng.choice((0.5, 1.0, 2.0))))
    dropped = rng.random(V) < zeros
    dropped[rng.integers(V)] = False
    row = np.where(dropped, 0.0, row)
    return row / row.sum()


def fresh_rows(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, Context]:
    """One random case: P [k+1, V], Q [k, V], drafts drawn from Q. Each position's p is q
    itself (a fifth: keeping is free), an unrelated row (little overlap, p(x) = 0 likely), or
    a mixture w q + (1 - w) r (any overlap in between)."""
    k, V = int(rng.integers(1, 5)), int(rng.integers(3, 7))
    P, Q, drafts = [], [], []
    for _ in range(k):
        q = sparse_row(V, rng, 0.2)
        style = rng.random()
        if style < 0.2:
            p = q.copy()
        elif style < 0.35:
            p = sparse_row(V, rng, 0.4)
        else:
            w = rng.random()
            p = w * q + (1 - w) * sparse_row(V, rng, 0.3)
        P.append(p)
        Q.append(q)
        drafts.append(draw(q, rng))
    P.append(sparse_row(V, rng, 0.2))  # the bonus row
    return np.array(P), np.array(Q), tuple(drafts)


@lru_cache(maxsize=4)
def fresh_cases(secret: int) -> tuple[FreshCase, ...]:
    rng = grader_rng(FRESH_SEED, secret)
    return tuple(handed(*fresh_rows(rng)) for _ in range(FRESH_CASES))


# --------------------------------------------------------------------------------------------
# The law family's gate: some draft is kept where keeping is free or likely
# --------------------------------------------------------------------------------------------


def gate_rows(rng: np.random.Generator, free: bool) -> tuple[np.ndarray, np.ndarray, Context]:
    """k = 1..4, V = 3..6; at each draft x, p(x) >= 0.5; q = p (free: the contract keeps every
    draft) or q = (p + r) / 2 (then the contract keeps draft 1 with min(1, p/q) >= p(x))."""
    k, V = int(rng.integers(1, 5)), int(rng.integers(3, 7))
    P, Q, drafts = [], [], []
    for _ in range(k):
        x = int(rng.integers(V))
        mass = rng.uniform(0.5, 0.9)
        p = rng.dirichlet(np.ones(V)) * (1 - mass)
        p[x] += mass
        P.append(p)
        Q.append(p.copy() if free else 0.5 * (p + rng.dirichlet(np.ones(V))))
        drafts.append(x)
    P.append(rng.dirichlet(np.ones(V)))
    return np.array(P), np.array(Q), tuple(drafts)


NEVER_KEEPS_HINT = (
    "your verify never keeps a draft, even where p = q makes keeping free (min(1, p(x)/q(x)) = "
    "1: the contract keeps every draft there). Always returning (0, a sample of p_target[0]) "
    "follows the target's law, but it is no verification: one token a round, no speedup. "
    "Keep draft i when a fresh uniform from rng is below min(1, p_i(x_i)/q_i(x_i)); these "
    "inputs are drawn afresh for each grading"
)
ALWAYS_KEEPS_HINT = (
    "your verify keeps every draft, even where p(x) < q(x) (min(1, p/q) < 1) or p(x) = 0 (a "
    "token the target never emits): keep draft i only when a fresh uniform from rng is below "
    "min(1, p_i(x_i)/q_i(x_i)), p = target, q = draft"
)


def keeps_drafts_check() -> Check:
    """Exact in practice: on the p = q calls the contract keeps every draft (its chance of
    keeping none is 0); any rule that keeps draft 1 with probability at least p(x) (the
    p(x)-acceptor, exact for any q) keeps none of the 40 with probability <= 0.5 ** 40 < 1e-12."""

    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        grader, rng = grader_rng(GATE_SEED), streams(GATE_SEED)[1]
        calls = [gate_rows(grader, free=i % 2 == 0) for i in range(GATE_CALLS)]
        answers = call_verify_each(sub, calls, rng)
        kept = sum(a > 0 for a, _ in answers)
        if kept:
            return Outcome(True, f"drafts kept in {kept} of {GATE_CALLS} calls", n=GATE_CALLS)
        case = handed(*calls[0])
        story = [
            f"{GATE_CALLS} calls on fresh rows (drawn for this grading): in half of them p = q at "
            f"every draft, where the contract keeps all k; in all, p(x) >= 0.5 at the first "
            f"draft. Not one draft was kept (accepted = 0 every time)",
            "one of them (p = q, so the contract returns accepted = k):",
            *case.shown(),
            f"observed {answers[0]}",
        ]
        summary = f"not one draft kept in {GATE_CALLS} calls where keeping is free or likely"
        return Outcome(False, summary, story, NEVER_KEEPS_HINT, n=GATE_CALLS, pattern="never-keeps")

    return Check(
        "verify/keeps-drafts",
        "fresh rows where keeping is free (p = q) or likely: some draft is kept",
        False,
        run,
    )


# --------------------------------------------------------------------------------------------
# The rule family's fresh cases: the accepted count's law, then the joint law
# --------------------------------------------------------------------------------------------


def fresh_checks() -> list[Check]:
    memo: dict = {}

    def runs_now() -> tuple[Runs, tuple[FreshCase, ...]]:
        # a grading's runs: new ones if the secret changed (the same submission graded again)
        secret = grading_secret()
        if memo.get("secret") != secret:
            cases = fresh_cases(secret)

            def outcomes(sub: Submission):
                # -> (case, accepted, token), the cases in turn; the verify's generator is a
                # stream of its own, never derived from the secret
                rng = streams(FRESH_SEED)[1]
                calls = [(c.P, c.Q, c.drafts) for c in cases] * (CHUNK // len(cases))
                while True:
                    answers = call_verify_each(sub, calls, rng)
                    yield from ((i % len(cases), a, t) for i, (a, t) in enumerate(answers))

            memo.update(secret=secret, cases=cases, runs=Runs(outcomes, FRESH_N))
        return memo["runs"], memo["cases"]

    def by_case(counts: Counter, m: int) -> list[Counter]:
        split = [Counter() for _ in range(m)]
        for (c, a, t), n in counts.items():
            split[c][(a, t)] += n
        return split

    def check(accepted_only: bool):
        def run(sub: Submission, threshold: float, look: int) -> Outcome:
            runs, cases = runs_now()
            counts = runs.counts(sub, look)
            n = counts.total()
            joint = by_case(counts, len(cases))
            if accepted_only:
                samples = [
                    (accepted_counts(s), f.accepted) for s, f in zip(joint, cases, strict=True)
                ]
            else:
                samples = [(s, f.law) for s, f in zip(joint, cases, strict=True)]
            p, comparisons = compare_cases(samples)
            what = "accepted counts" if accepted_only else "(accepted, token)"
            summary = f"{len(cases)} fresh cases, {what}, p = {p:.2g}"
            if p >= threshold:
                return Outcome(True, summary, p_value=p, n=n)
            story, hint, generic, pattern = fresh_failure(cases, joint, comparisons, n)
            return Outcome(False, summary, story, hint, p, n, generic=generic, pattern=pattern)

        return run

    return [
        Check(
            "verify/fresh-accepted",
            "fresh rows and drafts (this grading's): the accepted count's law",
            True,
            check(True),
        ),
        Check(
            "verify/fresh-joint",
            "fresh rows and drafts (this grading's): the joint law of (accepted, token)",
            True,
            check(False),
        ),
    ]


def accepted_counts(joint: Counter) -> Counter:
    # Counter{(accepted, token): n} -> Counter{accepted: n}
    out: Counter = Counter()
    for (a, _), c in joint.items():
        out[a] += c
    return out


def fresh_failure(
    cases: tuple[FreshCase, ...], joint: list[Counter], comparisons: list, n: int
) -> tuple[list[str], str, bool, str]:
    """-> (story, hint, generic, pattern): the whole pattern first (never or always keeps),
    else the case that deviates most, read position by position."""
    story = [
        f"fresh inputs, drawn for this grading only (the next one draws others): {len(cases)} "
        f"cases with k = 1..4 drafts over V = 3..6 tokens, {n // len(cases)} calls each"
    ]
    pairs = list(zip(joint, cases, strict=True))
    accepted = sum((accepted_counts(s) for s in joint), Counter())
    expected = sum(s.total() * mean_accepted(f) for s, f in pairs)
    refused = sum(s.total() * (1 - f.accepted.get(f.k, 0.0)) for s, f in pairs) / max(n, 1)
    always = all(a == f.k for s, f in pairs for (a, _) in s)
    if set(accepted) == {0}:
        story.append(
            f"accepted = 0 on every call; the contract's rule keeps {expected:.0f} drafts in "
            f"all on these calls (for sure wherever p(x) >= q(x))"
        )
        return story, NEVER_KEEPS_HINT, False, "never-keeps"
    if always and refused > 0:
        story.append(
            f"every draft kept on every call; the contract's rule refuses some draft on "
            f"{refused:.0%} of these calls"
        )
        return story, ALWAYS_KEEPS_HINT, False, "keeps-all"
    worst = int(np.argmin([c.p_value for c in comparisons]))
    case = cases[worst]
    story.append(f"the case that deviates most (case {worst + 1} of {len(cases)}):")
    story += case.shown()
    cmp = comparisons[worst]
    story.append(f"its largest deviations: {cmp.worst()}; total variation {cmp.distance:.3f}")
    lines, hint, generic = diagnose_joint(joint[worst], case.P, case.Q, case.drafts)
    return story + lines, hint, generic, ""


def mean_accepted(case: FreshCase) -> float:
    return sum(a * w for a, w in case.accepted.items())

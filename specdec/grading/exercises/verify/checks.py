"""The checks of a submitted `verify(p_target, q_draft, draft_tokens, rng) -> (accepted, token)`.

In four families, each scored on its own (engine/core.py):

* law: does the output follow the target's law? Drafts drawn from q (or q one-hot), the
  emitted tokens held against the target's own law: true of *every* exact rule that keeps
  drafts; one that never keeps any (always (0, a sample of p_target[0])) is exact too, and
  fails here only at the gate, verify/keeps-drafts (fresh rows where keeping is free).
* rule: is the rule the contract's, min(1, p/q) with the residual norm(max(0, p - q)), whose
  acceptance is the optimum sum(min(p, q))? Fixed drafts and the acceptance rate (the shown
  examples), then fresh rows and drafts drawn for this grading alone (fresh.py: what a table
  of the shown examples' answers cannot pass). An exact rule that keeps fewer drafts (accept
  with p(x), resample from p without x) fails only here, and is reported as exact but slower,
  with its acceptance against the optimum.
* randomness: two runs with one seed agree, and repeated calls draw fresh numbers (runs once
  the law family passed: random garbage is not credited for being random).
* in-loop: the verify inside the reference loop (runs once the law family passed): the
  tokens' law and, where the contract's rule is required, the accepted counts.

The shown examples' inputs are fixed and printed with the expected outcome when they fail;
every family's credit also needs its fresh checks (the gate, the rule's fresh cases, the
in-loop runs), whose inputs come from the grading's secret (engine/secret.py).

The checks, cheapest and most telling first:

1. exact cases (a few calls each, zero variance): one-hot rows where the draft matches the
   target, one-hot rows where it does not, a draft the target gives probability 0, p = q;
2. the article's A/B example: output law (0.6, 0.4) and acceptance rate 0.8;
3. fixed rows, k = 3: the joint law of (accepted, token), read position by position to say
   which decision or which row is off;
4. drafts drawn from context-dependent tables (zeros, one-hot rows, p = q rows), from a
   point-mass drafter, and against a greedy target: the emitted tokens, completed by the
   target's own samples to k + 1 tokens, must follow the target's own law of k + 1 tokens;
5. fresh cases (fresh.py): the gate (some draft kept where keeping is free) and random rows
   and drafts, whose laws of the accepted count and of (accepted, token) are the contract's.

Then, in a family of its own, the submission runs inside the reference loop on a tiny GPT pair.

The checks live in exact.py (1 and the zero-draft case), joint.py (2, 3), tables.py (4) and
fresh.py (5), beside this file; the in-loop family is the loop exercise's (loop/checks.py, its
tiny pair). This file holds the randomness family, the families themselves and the hints read
from the whole pattern.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from specdec.grading.engine.core import Check, Family, Outcome
from specdec.grading.engine.submission import Submission, call_verify_many
from specdec.grading.exercises.loop.checks import verify_in_loop_family
from specdec.grading.exercises.verify.exact import exact_checks, zero_drafts_check
from specdec.grading.exercises.verify.fresh import (
    ALWAYS_KEEPS_HINT,
    NEVER_KEEPS_HINT,
    fresh_checks,
    keeps_drafts_check,
)
from specdec.grading.exercises.verify.joint import ab_checks, fixed_check
from specdec.grading.exercises.verify.tables import table_checks

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
            memo[run] = call_verify_many(sub, P, Q, drafts, rng, RNG_CALLS)
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
    "verify/keeps-drafts",  # last: only a rule that never keeps fails it, and the exact cases
    # before it (p = q = 1 one-hot rows) tell such a rule as much, on inputs it is shown
)
RULE_CHECKS = (  # the shown examples first (their hints are the most telling), then fresh
    "verify/ab-acceptance",
    "verify/impossible-draft",
    "verify/p-equals-q",
    "verify/fixed-k3",
    "verify/fresh-accepted",
    "verify/fresh-joint",
)
OPTIMAL_ACCEPTANCE = 0.8  # the A/B example: sum(min(p, q)) = min(0.6, 0.8) + min(0.4, 0.2)


def verify_families(policy: str = "shrink", require_rule: bool = True) -> list[Family]:
    """`policy` is a loop's (a verify has none); `require_rule` (the config's): the in-loop
    family checks the accepted counts against the contract's only where its rule is scored."""
    checks = exact_checks() + ab_checks() + [fixed_check()] + table_checks()
    checks += [zero_drafts_check(), keeps_drafts_check(), *fresh_checks()]
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
        Family(
            "randomness",
            "your verify takes fresh randomness from rng",
            randomness_checks(),
            requires=("law",),
        ),
        verify_in_loop_family(require_rule),
    ]


def revise_verify_hints(results: dict) -> dict[str, str]:
    """Choose hints from the whole pattern of passed and failed checks, and say what the
    law and rule families' verdicts mean together. -> {family: verdict line}."""

    def status(name: str) -> str:
        r = results.get(name)
        return "absent" if r is None else r.status

    failed = [r for r in results.values() if r.status == "fail" and r.outcome is not None]
    # every draft kept, on the A/B example or on the fresh cases: a rule that always keeps
    # fails greedy-mismatch (its draft 2 has p(x) = 0); a uniform that is the same number on
    # every call (below min(1, p/q) there) passes it
    keeps_all = any(r.outcome.pattern == "keeps-all" for r in failed)
    never = any(r.outcome.pattern == "never-keeps" for r in failed)
    always = keeps_all and status("verify/greedy-mismatch") == "fail"
    alike = keeps_all and status("verify/greedy-mismatch") == "pass"
    constant = status("rng/fresh-draws") == "fail" or alike
    why_constant = (
        "rng/fresh-draws failed"
        if status("rng/fresh-draws") == "fail"
        else "every draft was kept, yet a draft with p(x) = 0 was refused"
    )
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
        if r.check.name.startswith("rng/") or o.pattern == "never-keeps":
            continue
        if never and r.check.name in ("verify/greedy-match", "verify/p-equals-q"):
            o.hint = NEVER_KEEPS_HINT  # (p = q there: keeping is certain)
            continue
        if always and ("upside down" in o.hint or o.pattern == "keeps-all"):
            o.hint = ALWAYS_KEEPS_HINT
        elif constant and r.check.sampled:
            o.hint = f"every call decides alike ({why_constant}): " + CONSTANT_HINT
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
    if never and any(r.family == "law" and r.outcome.hint == NEVER_KEEPS_HINT for r in failed):
        verdicts["law"] = (
            "your verify never keeps a draft, even where keeping is free: an exact answer, but "
            "no verification (see below)"
        )
    in_loop = results.get("in-loop/t1-k2:accepted")
    if in_loop is not None and in_loop.status == "fail" and in_loop.outcome is not None:
        share = in_loop.outcome.measure or 0.0
        verdicts["in-loop"] = (
            f"inside the reference loop your verify keeps {share:.0%} of the drafts that "
            f"min(1, p/q) keeps on the same rows: not the contract's rule (see below)"
        )
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

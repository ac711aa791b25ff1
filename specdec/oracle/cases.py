"""The sampled checks of the oracle: every setup, its sample size and seed, in one place.

Four families, each corrected with Holm at ALPHA = 1e-3:

  verify family   `verify` alone, fed fixed rows or random table models (6 checks)
  loop family     the whole `speculative_generate` on tiny random GPT pairs (15 checks)
  lookup family   the loop with prompt-lookup drafts and with the hybrid (9 checks)
  llama family    the loop on a tiny Llama-family pair (RoPE, GQA 2:1; 3 checks)

and, at the end, the spread batch (test_batch_law.py's second family, 7 checks): rows with
one prompt, far from point masses, for the independence of a batch's rows.

The real checks (test_sampled_*.py) and the power tests (test_power.py) call the same
functions below; the power tests only pass a broken implementation and a smaller n.

How the sample sizes were chosen. A chi-square test with n draws and d degrees of freedom
(after merging) at level alpha / m, Holm's strictest threshold for a family of m checks,
detects with power 0.9 any departure of Cohen's effect size w = sqrt(lambda / n) or more, where
w^2 = sum (p1 - p0)^2 / p0 and lambda is the noncentrality giving that power
(`oracle.detectable_effect`; test_statistics.py asserts these figures):

  verify family (m = 6, alpha/m = 1.7e-4): n = 20 000 -> w = 0.036 (A/B, d = 1), 0.046 (fixed
      k = 3, d = 12), 0.054 (table k = 3, d = 33); n = 10 000 -> w = 0.054 to 0.064; the
      binomial test of the A/B acceptance rate sees a shift of 0.014 from 0.8
  loop family (m = 15, alpha/m = 6.7e-5): n = 10 000 runs per setup -> w = 0.056 to 0.058 for
      the accepted-count laws (d = 2..3) and 0.065 to 0.085 for the token laws (d = 9..49)
  lookup family (m = 9, alpha/m = 1.1e-4): n = 4 000 runs per setup -> w = 0.081 to 0.089
      for the accepted-count laws (d = 1..3) and 0.11 to 0.13 for the token laws (d = 14..39)

For scale: moving 0.03 of probability between two cells of mass 0.3 is w = 0.077; the broken
variants of broken.py move their laws by w = 0.15 to 1 (or produce impossible outcomes), so
the power tests catch them with 1 000 to 8 000 samples. The budget: a loop run costs 1-2 ms,
so the loop family's 40 000 runs take about a minute on one core; a lookup run costs
0.5-1 ms (no draft model, or one only in fallback rounds), the lookup family's 12 000 about 8 s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from reference.drafters import ModelDrafter
from reference.sampling import SamplingParams
from reference.verification import verify_law
from specdec.oracle.laws import (
    CheckResult,
    LoopSetup,
    PointMassRows,
    Rows,
    TableRows,
    binomial_test,
    chi_square_test,
    emitted_counts,
    loop_checks,
    loop_laws,
    marginal,
    round_law,
    sample_loop,
    sample_rounds,
)
from specdec.oracle.self_drafting import SELF_DRAFT_SETUPS

# --------------------------------------------------------------------------------------------
# verify family
# --------------------------------------------------------------------------------------------


class FixedRows:
    """Rows that do not depend on the tokens: row i scores draft position i (context length i)."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = np.asarray(rows, dtype=np.float64)

    def __call__(self, context: tuple) -> np.ndarray:
        return self.rows[len(context)]


# The article's example: q = (0.8, 0.2) over {A, B}, p = (0.6, 0.4). Accepting A happens with
# probability min(1, 0.6/0.8) = 0.75, B always; a rejected A is replaced by the residual
# norm(max(0, p - q)) = B. P(first token = A) = 0.8 * 0.75 = 0.6, P(accept) = 0.6 + 0.2 = 0.8.
AB_P = np.array([[0.6, 0.4], [0.3, 0.7]])  # row 1 is the bonus row (any law would do)
AB_Q = np.array([[0.8, 0.2]])


def fixed_k3_rows() -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """P [4, 5], Q [3, 5] random rows and drafts whose acceptance probabilities are ~0.6.

    With a_i ~ 0.6 every outcome (accepted = 0..3) has mass >= 0.2: each position's residual
    law and the bonus row are all seen thousands of times in 20 000 samples.
    """
    rng = np.random.default_rng(20240)
    P = rng.dirichlet(np.ones(5), size=4)
    Q = rng.dirichlet(np.ones(5), size=3)
    drafts = []
    for i in range(3):
        ratio = np.where(Q[i] > 0, P[i] / Q[i], np.inf)
        drafts.append(int(np.argmin(np.abs(ratio - 0.6))))
    return P, Q, tuple(drafts)


@dataclass(frozen=True)
class VerifySetup:
    """A sampled check of `verify` alone: rows, k, and which laws are tested."""

    name: str
    p_rows: Rows
    q_rows: Rows
    k: int
    n: int
    seed: int
    drafts: tuple[int, ...] | None = None  # fixed drafts, or None to draw them from q

    def sample(self, verify_fn: Callable, n: int | None = None, seed: int | None = None):
        return sample_rounds(
            verify_fn,
            self.p_rows,
            self.q_rows,
            (),
            self.k,
            self.n if n is None else n,
            self.seed if seed is None else seed,
            self.drafts,
        )

    def laws(self) -> dict[str, dict]:
        """{member: exact law} of this setup's chi-square checks."""
        if self.name == "ab":
            return {"ab:output": {0: 0.6, 1: 0.4}}  # the first emitted token
        if self.drafts is not None:
            # fixed drafts: the joint law of (accepted, token), straight from verify_law
            law = verify_law(self.p_rows.rows, self.q_rows.rows, self.drafts)
            return {f"{self.name}:joint": {o: w for o, w in law.items() if w > 0}}
        # drafts drawn from q: the law of the emitted sequence drafts[:accepted] + [token]
        law = marginal(round_law(self.p_rows, self.q_rows, (), self.k), lambda o: o[1])
        return {f"{self.name}:emitted": law}

    def checks(self, counts: Counter) -> dict[str, CheckResult]:
        ((member, law),) = self.laws().items()
        if self.name == "ab":
            first = Counter()
            for (x, a, t), c in counts.items():
                first[x[0] if a >= 1 else t] += c
            accepted = sum(c for (_, a, _), c in counts.items() if a >= 1)
            return {
                member: chi_square_test(first, law, member),
                "ab:acceptance": binomial_test(accepted, counts.total(), 0.8, "ab:acceptance"),
            }
        if self.drafts is not None:
            observed = Counter({(a, t): c for (_, a, t), c in counts.items()})
        else:
            observed = emitted_counts(counts)
        return {member: chi_square_test(observed, law, member)}

    def run(self, verify_fn: Callable, n: int | None = None, seed: int | None = None):
        return self.checks(self.sample(verify_fn, n, seed))


def _verify_setups() -> dict[str, VerifySetup]:
    P3, Q3, drafts3 = fixed_k3_rows()
    table_p = TableRows(4, seed=301)
    # q copies p on 20% of the contexts (p == q: a rejection has probability 0 there)
    table_q = TableRows(4, seed=302, copy=table_p, copy_frac=0.2)
    setups = [
        VerifySetup("ab", FixedRows(AB_P), FixedRows(AB_Q), k=1, n=20_000, seed=1),
        VerifySetup(
            "fixed_k3", FixedRows(P3), FixedRows(Q3), k=3, n=20_000, seed=2, drafts=drafts3
        ),
        # context-dependent tables, zeros, one-hot rows and p == q rows: k = 3, V = 4
        VerifySetup("table_k3", table_p, table_q, k=3, n=20_000, seed=3),
        # a point-mass drafter (n-gram / prompt lookup): one-hot q rows, soft p
        VerifySetup(
            "pointmass_k3",
            TableRows(5, seed=401, one_hot_frac=0.0),
            PointMassRows(5, seed=402),
            k=3,
            n=10_000,
            seed=4,
        ),
        # greedy target: one-hot p rows, soft q
        VerifySetup(
            "greedy_target_k2",
            TableRows(5, seed=501, one_hot_frac=1.0),
            TableRows(5, seed=502, one_hot_frac=0.0),
            k=2,
            n=10_000,
            seed=5,
        ),
    ]
    return {s.name: s for s in setups}


VERIFY_SETUPS = _verify_setups()


def verify_family(verify_fn: Callable) -> dict[str, CheckResult]:
    results: dict[str, CheckResult] = {}
    for setup in VERIFY_SETUPS.values():
        results |= setup.run(verify_fn)
    return results


# --------------------------------------------------------------------------------------------
# loop family
# --------------------------------------------------------------------------------------------

# (n_embd, n_layer, n_head, std, seed): std 0.9 makes the rows depend strongly on the
# context, so a cache that holds the wrong history changes them visibly. One layer keeps a
# run cheap; prompts and EOS ids were picked so that every accepted count of rounds 1
# and 2 has real mass (printed by `loop_laws`), and every top-k / top-p / argmax choice is at
# least 3e-3 from a tie (LoopLaws.margin), far above float32 rounding.
TARGET = (16, 1, 2, 0.9, 11)
DRAFT = (0.4, 12)  # the target plus noise: per-token acceptance ~0.7, from 0.1 to 0.97

LOOP_SETUPS: dict[str, LoopSetup] = {
    s.name: s
    for s in [
        # plain sampling, no EOS; max_new_tokens = 5 is not a multiple of k + 1 = 3, and a
        # round 2 after a fully accepted round 1 needs the draft's catch-up
        LoopSetup(
            "t1_k2",
            5,
            TARGET,
            DRAFT,
            (3, 0),
            k=2,
            max_new_tokens=5,
            sampling=SamplingParams(1.0),
            eos_id=None,
            n=10_000,
            seed=101,
        ),
        # temperature + top-k, EOS (ends 11% of the runs in round 1)
        LoopSetup(
            "topk_k3_eos",
            5,
            TARGET,
            DRAFT,
            (4, 1),
            k=3,
            max_new_tokens=4,
            sampling=SamplingParams(0.7, top_k=3),
            eos_id=4,
            n=10_000,
            seed=102,
        ),
        # temperature + top-p, EOS
        LoopSetup(
            "topp_k2_eos",
            5,
            TARGET,
            DRAFT,
            (3, 0),
            k=2,
            max_new_tokens=4,
            sampling=SamplingParams(1.2, top_p=0.9),
            eos_id=0,
            n=10_000,
            seed=103,
        ),
        # everything at once, and max_new_tokens = 3 < k + 1 = 4
        LoopSetup(
            "mixed_k3_eos",
            5,
            TARGET,
            DRAFT,
            (3, 4),
            k=3,
            max_new_tokens=3,
            sampling=SamplingParams(1.4, top_k=4, top_p=0.9),
            eos_id=1,
            n=10_000,
            seed=104,
        ),
        # greedy: a point-mass law, any deviation from the argmax path fails at once; round 1
        # accepts both drafts, so round 2 runs on the draft's catch-up
        LoopSetup(
            "greedy_k2",
            5,
            TARGET,
            DRAFT,
            (0, 1),
            k=2,
            max_new_tokens=6,
            sampling=SamplingParams(0.0),
            eos_id=None,
            n=200,
            seed=105,
        ),
    ]
}


def run_loop_setup(
    generate: Callable,
    setup: LoopSetup,
    *,
    verify_fn: Callable | None = None,
    n: int | None = None,
    seed: int | None = None,
    record_errors: bool = False,
) -> dict[str, CheckResult]:
    counts = sample_loop(
        generate,
        setup,
        setup.n if n is None else n,
        setup.seed if seed is None else seed,
        verify_fn=verify_fn,
        record_errors=record_errors,
    )
    return loop_checks(setup, counts)


def loop_family(generate: Callable, verify_fn: Callable | None) -> dict[str, CheckResult]:
    results: dict[str, CheckResult] = {}
    for setup in LOOP_SETUPS.values():
        results |= run_loop_setup(generate, setup, verify_fn=verify_fn)
    return results


VERIFY_MEMBERS = [
    "ab:output",
    "ab:acceptance",
    "fixed_k3:joint",
    "table_k3:emitted",
    "pointmass_k3:emitted",
    "greedy_target_k2:emitted",
]
LOOP_MEMBERS = [f"{name}:{law}" for name in LOOP_SETUPS for law in ("tokens", "round1", "round2")]


# --------------------------------------------------------------------------------------------
# lookup family: the loop with drafts copied from the context (reference/lookup.py)
# --------------------------------------------------------------------------------------------

# The same tiny target as the loop family. Prompts were picked (by the exact laws) so that
# the lookup matches in round 1 and its drafts are accepted with real probability, and so
# that every accepted count of rounds 1 and 2 has mass; in the hybrid setup round 1 is a
# lookup round and round 2 mostly a draft-model round, which must first catch up on the
# tokens accepted in round 1.
LOOKUP_SETUPS: dict[str, LoopSetup] = {
    s.name: s
    for s in [
        # temperature + top-k, EOS; n = 3..1, the most recent occurrence
        LoopSetup(
            "lookup_topk_k3_eos",
            5,
            TARGET,
            DRAFT,
            (4, 2, 2, 0, 0, 4),
            k=3,
            max_new_tokens=5,
            sampling=SamplingParams(0.7, top_k=3),
            eos_id=1,
            n=4_000,
            seed=201,
            lookup=(3, 1, "recent"),
        ),
        # temperature + top-p, EOS; n = 2..1, the longest continuation
        LoopSetup(
            "lookup_topp_k2_eos",
            5,
            TARGET,
            DRAFT,
            (4, 2, 3, 2),
            k=2,
            max_new_tokens=5,
            sampling=SamplingParams(1.2, top_p=0.9),
            eos_id=0,
            n=4_000,
            seed=202,
            lookup=(2, 1, "longest"),
        ),
        # the hybrid: lookup on n = 2 only, else the draft model; plain sampling, length 5
        LoopSetup(
            "hybrid_t1_k2",
            5,
            TARGET,
            DRAFT,
            (4, 2, 2, 2),
            k=2,
            max_new_tokens=5,
            sampling=SamplingParams(1.0),
            eos_id=None,
            n=4_000,
            seed=203,
            lookup=(2, 2, "longest"),
            hybrid=True,
        ),
    ]
}
ALL_LOOP_SETUPS = (
    LOOP_SETUPS | LOOKUP_SETUPS | SELF_DRAFT_SETUPS
)  # where a broken variant's check may live


def lookup_family(generate: Callable, verify_fn: Callable | None) -> dict[str, CheckResult]:
    results: dict[str, CheckResult] = {}
    for setup in LOOKUP_SETUPS.values():
        results |= run_loop_setup(generate, setup, verify_fn=verify_fn)
    return results


LOOKUP_MEMBERS = [
    f"{name}:{law}" for name in LOOKUP_SETUPS for law in ("tokens", "round1", "round2")
]


# --------------------------------------------------------------------------------------------
# batch independence: rows with one prompt, far from point masses (test_batch_law.py)
# --------------------------------------------------------------------------------------------

# SPREAD_ROWS sequences with the SAME prompt, at T = 1.5 on the loop family's pair: the first
# token's law is (0.09, 0.12, 0.15, 0.64, 0) and a draft is kept with probability 0.68, so
# whatever couples two rows' randomness -- shared drafting uniforms (the rows then draft the
# same tokens), shared acceptance uniforms (they accept together) -- moves the joint law of
# two rows' tokens far from the product of their laws. Computed exactly before choosing:
# the first tokens' joint law of rows 0 and 1 moves by w = 0.45 - 0.56 (cells merged as at
# n = 500 - 1 000) with shared drafting uniforms, by w = 0.22 - 0.27 with shared acceptance
# uniforms; 2 000 batches detect either with power > 0.99 at the family's Holm level.
SPREAD_ROWS = 3
BATCH_SPREAD_SETUPS = {
    "spread": LoopSetup(
        "spread",
        5,
        TARGET,
        DRAFT,
        (2,),
        k=2,
        max_new_tokens=3,
        sampling=SamplingParams(1.5),
        eos_id=None,
        n=2_000,
        seed=903,
    )
}
ROW_PAIRS = [(0, 1), (0, 2), (1, 2)]
SPREAD_MEMBERS = (
    [f"spread:seq{b}:tokens" for b in range(SPREAD_ROWS)]
    + [f"spread:first{a}{b}" for a, b in ROW_PAIRS]
    + ["spread:accepted01"]
)


def independent(*laws: dict) -> dict:
    """The law of independent outcomes: {(o_1, o_2, ...): prod_i law_i[o_i]}."""
    out = {(): 1.0}
    for law in laws:
        out = {key + (o,): w * law[o] for key, w in out.items() for o in law}
    return out


def sample_spread_batches(generate: Callable, n: int, seed: int) -> list[tuple]:
    # -> n batches, each SPREAD_ROWS of (tokens, accepted per round)
    setup = BATCH_SPREAD_SETUPS["spread"]
    rng = np.random.default_rng(seed)
    target = setup.target_model()
    drafters = [ModelDrafter(setup.draft_model()) for _ in range(SPREAD_ROWS)]
    samples = []
    for _ in range(n):
        results = generate(
            target,
            drafters,
            [list(setup.prompt) for _ in range(SPREAD_ROWS)],
            k=setup.k,
            max_new_tokens=setup.max_new_tokens,
            rng=rng,
            sampling=setup.sampling,
            eos_id=setup.eos_id,
        )
        samples.append(tuple((tuple(r.tokens), tuple(r.stats.accepted_per_round)) for r in results))
    return samples


def spread_checks(
    generate: Callable, n: int | None = None, seed: int | None = None
) -> dict[str, CheckResult]:
    """Each row's tokens against the target's law, and independence: the joint law of two
    rows' first tokens (every pair) and of rows 0 and 1's round-1 accepted counts against
    the product of their exact laws (the oracle's evaluator; nothing from the batch code)."""
    setup = BATCH_SPREAD_SETUPS["spread"]
    samples = sample_spread_batches(generate, n or setup.n, seed or setup.seed)
    laws = loop_laws(setup)  # the same for every row: one prompt
    first = marginal(laws.tokens, lambda o: o[0])
    results = {}
    for b in range(SPREAD_ROWS):
        name = f"spread:seq{b}:tokens"
        results[name] = chi_square_test(Counter(s[b][0] for s in samples), laws.tokens, name)
    for a, b in ROW_PAIRS:
        name = f"spread:first{a}{b}"
        joint = Counter((s[a][0][0], s[b][0][0]) for s in samples)
        results[name] = chi_square_test(joint, independent(first, first), name)
    joint = Counter((s[0][1][0], s[1][1][0]) for s in samples)
    both = independent(laws.round1, laws.round1)
    results["spread:accepted01"] = chi_square_test(joint, both, "spread:accepted01")
    return results


# --------------------------------------------------------------------------------------------
# the Llama family: the loop on a tiny RoPE + GQA pair (tests/distribution/test_llama_laws.py)
# --------------------------------------------------------------------------------------------

# laws.tiny_llama's (n_embd, n_layer, n_head, std, seed): 4 query heads sharing 2 key/value
# heads, rope_theta 10; std 0.7 rather than the GPT pair's 0.9: RMSNorm's gains are
# 1 + N(0, std), and at 0.9 most rows sit near a point mass. V = 4 keeps the token law's
# merged cells at 47 (df 46: w = 0.079 at n = 10 000, within the loop family's 0.085; V = 5
# gave df 172, w = 0.10). From prompt (1, 2, 3) the first token's law is (0.03, 0.41, 0.55,
# 0.01); round 1 keeps 0, 1, 2 drafts with probability (0.39, 0.21, 0.40), round 2 (0.60,
# 0.33, 0.07), and max_new_tokens = 5 makes round 2 after a full round 1 draft one token
# after the draft's catch-up. One setup at the loop family's n, in a family of its own: a run
# costs ~2.7 ms, ~28 s for the 10 000. Power, tried while writing it (1 000 runs, a Llama
# whose cache class is broken.py's): the target's cache keeping the first rejected slot gives
# p = 0 on the tokens, the draft's p ~ 1e-19 on round 2; committing one slot too many, p = 0.
LLAMA_TARGET = (16, 1, 4, 0.7, 41)
LLAMA_DRAFT = (0.2, 42)  # the target plus noise
LLAMA_LOOP_SETUPS: dict[str, LoopSetup] = {
    s.name: s
    for s in [
        LoopSetup(
            "llama_t1_k2",
            4,
            LLAMA_TARGET,
            LLAMA_DRAFT,
            (1, 2, 3),
            k=2,
            max_new_tokens=5,
            sampling=SamplingParams(1.0),
            eos_id=None,
            n=10_000,
            seed=111,
            family="llama",
        )
    ]
}
LLAMA_MEMBERS = [
    f"{name}:{law}" for name in LLAMA_LOOP_SETUPS for law in ("tokens", "round1", "round2")
]


def llama_family(generate: Callable, verify_fn: Callable | None) -> dict[str, CheckResult]:
    results: dict[str, CheckResult] = {}
    for setup in LLAMA_LOOP_SETUPS.values():
        results |= run_loop_setup(generate, setup, verify_fn=verify_fn)
    return results

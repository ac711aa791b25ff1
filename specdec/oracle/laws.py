"""The oracle's machinery, shared by the real checks and by the power tests.

Three parts, each small enough to read on its own:

1. Statistics: a Pearson chi-square goodness-of-fit test whose cells are merged until every
   expected count is >= MIN_EXPECTED = 20, a binomial test, and Holm's step-down correction.
   One rule comes before any statistic: an outcome that the exact law gives probability 0 (a
   token after EOS, a token that top-k removed, a crash) is impossible under the null
   hypothesis, so seeing it even once gives p = 0.
2. Exact laws (float64, zero variance): conditional rows p(. | context) and q(. | context)
   from a tiny GPT's *uncached* forward of the context, or from random tables keyed by the
   context; the law of one speculative round by enumerating the drafts with their q
   probabilities and verify's outcomes with `reference.verification.verify_law`; the law of the
   whole speculative procedure by chaining rounds; the target's own autoregressive law. A
   prompt-lookup drafter is a proposer object (LookupProposals, HybridProposals): one
   deterministic draft per context with one-hot q rows, its rule written here on its own.
   The emission step is the real `reference.speculative.emitted_tokens` and the draft length
   of a round the real `round_draft_length`, so the evaluator follows the loop's policy.
3. Samplers: run an implementation of `verify` or of `speculative_generate` n times with a
   fixed seed and count what came out.

Every number here is float64; every random choice takes an explicit, seeded generator.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy import optimize, stats

from reference.config import GPTConfig, LlamaConfig
from reference.drafters import Draft, ModelDrafter
from reference.llama import Llama, init_llama_params
from reference.lookup import HybridDrafter, LookupDrafter
from reference.model import GPT, init_params
from reference.sampling import SamplingParams, probabilities
from reference.speculative import emitted_tokens, round_draft_length
from reference.verification import Verification, verify_law
from specdec import standins
from specdec.grading.engine.laws import drafts_with_weight as draft_paths  # shared with the grader
from specdec.grading.engine.laws import marginal
from specdec.oracle import optional

# --------------------------------------------------------------------------------------------
# Thresholds (the numbers docs/oracle.md states)
# --------------------------------------------------------------------------------------------

ALPHA = 1e-3  # family-wise false-alarm rate of each family of sampled checks (Holm)
POWER_P = 1e-6  # a broken variant counts as caught only if its raw p-value is below this,
# which is below alpha / m for every family here (m <= 28), so Holm rejects it whatever the
# other members of its family say
MIN_EXPECTED = 20.0  # smallest expected count of a chi-square cell after merging: the
# textbook 5 makes the chi-square tail anti-conservative here (many cells near 5 -> 1.7x the
# nominal rate at p = 1e-4); from 20 on, the simulated rate matches the nominal one
# (test_statistics.py checks it for every real check)
EXACT_ATOL = 1e-12  # tolerance of the exact-law comparisons (float64)

Outcome = Hashable
Law = dict  # {outcome: probability}, probabilities summing to 1


# --------------------------------------------------------------------------------------------
# 1. Statistics
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """One statistical check: its p-value and enough detail to see what went wrong."""

    name: str
    p_value: float
    statistic: float
    df: int
    n: int
    detail: str

    def describe(self) -> str:
        return (
            f"{self.name}: p = {self.p_value:.3g} (statistic {self.statistic:.4g}, "
            f"df {self.df}, n {self.n}); {self.detail}"
        )


def check_law(law: Law) -> None:
    total = math.fsum(law.values())
    if abs(total - 1.0) > 1e-9 or min(law.values()) < 0:
        raise ValueError(f"not a probability law: total mass {total!r}")


def merge_cells(law: Law, n: int, min_expected: float = MIN_EXPECTED) -> list[list[Outcome]]:
    """Group the outcomes of `law` so that every group expects >= min_expected of n draws.

    The grouping depends on the law and n only, never on the data (so the test stays valid):
    outcomes are sorted by probability, smallest first, and pooled until a pool reaches the
    threshold; a last pool that falls short joins the group before it.
    """
    check_law(law)
    order = sorted(law, key=lambda o: (law[o], repr(o)))
    groups: list[list[Outcome]] = []
    pool: list[Outcome] = []
    mass = 0.0
    for o in order:
        pool.append(o)
        mass += law[o]
        if n * mass >= min_expected:
            groups.append(pool)
            pool, mass = [], 0.0
    if pool:
        if groups:
            groups[-1].extend(pool)
        else:
            groups.append(pool)
    return groups


def chi_square_test(counts: Counter, law: Law, name: str) -> CheckResult:
    """Pearson goodness of fit of observed `counts` to the exact `law`, cells merged.

    Outcomes outside the law's support (probability exactly 0) are impossible under the
    null hypothesis: observing one gives p = 0 outright; merging would hide them.
    """
    n = sum(counts.values())
    if n == 0:
        raise ValueError(f"{name}: no samples")
    impossible = {o: c for o, c in counts.items() if law.get(o, 0.0) <= 0.0}
    if impossible:
        worst = sorted(impossible.items(), key=lambda oc: -oc[1])[:3]
        shown = ", ".join(f"{o!r} x{c}" for o, c in worst)
        return CheckResult(
            name,
            0.0,
            math.inf,
            0,
            n,
            f"{sum(impossible.values())} of {n} samples are impossible under the exact law "
            f"(probability 0), e.g. {shown}",
        )
    groups = merge_cells(law, n)
    if len(groups) < 2:
        # A point mass (greedy), or n too small to split: only the support could be tested.
        return CheckResult(name, 1.0, 0.0, 0, n, "a single cell; every sample was possible")
    expected = np.array([n * math.fsum(law[o] for o in g) for g in groups])
    observed = np.array([sum(counts.get(o, 0) for o in g) for g in groups], dtype=np.float64)
    terms = (observed - expected) ** 2 / expected
    statistic = float(terms.sum())
    df = len(groups) - 1
    p = float(stats.chi2.sf(statistic, df))
    worst = np.argsort(-terms)[:3]
    cells = "; ".join(
        f"{show_group(groups[i])}: observed {int(observed[i])}, expected {expected[i]:.1f}"
        for i in worst
    )
    return CheckResult(
        name,
        p,
        statistic,
        df,
        n,
        f"{len(law)} outcomes in {df + 1} cells; largest deviations: {cells}",
    )


def show_group(group: list[Outcome]) -> str:
    return repr(group[0]) if len(group) == 1 else f"[{len(group)} merged cells]"


def binomial_test(successes: int, n: int, p: float, name: str) -> CheckResult:
    """Two-sided exact binomial test of a rate against its exact value p."""
    result = stats.binomtest(int(successes), int(n), p)
    return CheckResult(
        name,
        float(result.pvalue),
        successes / n,
        1,
        n,
        f"observed rate {successes / n:.4f}, exact rate {p:.4f}",
    )


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values: reject member j iff adjusted[j] < alpha.

    Sort the m p-values ascending; the i-th smallest (i = 0..m-1) is multiplied by m - i, and
    the running maximum keeps the adjusted values monotone. This controls the probability of
    any false alarm in the family at alpha, with no assumption on how the tests depend on
    each other (the members of a family here share samples).
    """
    m = len(p_values)
    adjusted: dict[str, float] = {}
    running = 0.0
    for i, name in enumerate(sorted(p_values, key=lambda key: (p_values[key], key))):
        running = max(running, min(1.0, (m - i) * p_values[name]))
        adjusted[name] = running
    return adjusted


def detectable_effect(n: int, df: int, alpha: float, power: float = 0.9) -> float:
    """Cohen's w that a chi-square test with n samples and df degrees of freedom detects at
    level alpha with the given power: w^2 = sum (p1 - p0)^2 / p0, noncentrality n w^2."""
    critical = stats.chi2.isf(alpha, df)
    lam = optimize.brentq(lambda nc: stats.ncx2.sf(critical, df, nc) - power, 1e-6, 1e6)
    return math.sqrt(lam / n)


def max_abs_difference(a: Law, b: Law) -> float:
    return max((abs(a.get(o, 0.0) - b.get(o, 0.0)) for o in set(a) | set(b)), default=0.0)


# --------------------------------------------------------------------------------------------
# 2. Exact laws
# --------------------------------------------------------------------------------------------

Context = tuple  # tuple[int, ...]: the tokens a row is conditioned on
Rows = Callable[[Context], np.ndarray]  # context -> [V] float64 probability row


class ModelRows:
    """p(. | context) of a GPT under a sampling transform, float64, from the uncached forward.

    Each row is the last row of `model.forward(context)` with no cache, cast to float64 and
    turned into a distribution by the real `reference.sampling.probabilities`: the definition
    of the model's conditional, with no cache that could be wrong. `margin` records how far
    the discrete choices of the transform (argmax, the top-k cut, the top-p cut) were from a
    tie, over every row computed: the sampled checks need it well above float32 rounding, or
    the real (float32, cached) code could make another choice than this evaluator.
    """

    def __init__(self, model: GPT, sampling: SamplingParams) -> None:
        self.model = model
        self.sampling = sampling
        self.n_vocab = model.n_vocab
        self.margin = math.inf
        self._rows: dict[Context, np.ndarray] = {}

    def __call__(self, context: Context) -> np.ndarray:
        row = self._rows.get(context)
        if row is None:
            logits = self.model.forward(np.asarray(context, dtype=np.int64))[-1]
            logits = logits.astype(np.float64)  # [V]
            self.margin = min(self.margin, decision_margin(logits, self.sampling))
            row = probabilities(logits, self.sampling)
            self._rows[context] = row
        return row


def decision_margin(logits: np.ndarray, sampling: SamplingParams) -> float:
    # [V] float64 -> distance of the transform's discrete choices from a tie (inf: none made)
    z = np.sort(logits)[::-1]
    if sampling.greedy:
        return float(z[0] - z[1])
    z = z / sampling.temperature
    margin = math.inf
    V = len(z)
    if sampling.top_k is not None and sampling.top_k < V:
        margin = float(z[sampling.top_k - 1] - z[sampling.top_k])
        z = z[: sampling.top_k]
    if sampling.top_p < 1.0:
        p = np.exp(z - z[0])
        p /= p.sum()
        mass_before = np.cumsum(p) - p
        margin = min(margin, float(np.min(np.abs(mass_before - sampling.top_p))))
        kept = int(np.sum(mass_before < sampling.top_p))
        if kept < len(p):  # the last kept token and the first dropped one must not tie
            margin = min(margin, float(p[kept - 1] - p[kept]))
    return margin


class TableRows:
    """A "table model": one random conditional row per context, fixed by (seed, context).

    Rows are Dirichlet draws with some entries forced to 0 (tokens a row cannot produce);
    a fraction of rows are one-hot (greedy / point-mass); with `copy` set, a fraction of rows
    equal copy(context) exactly (p == q, the case where the residual is empty).
    """

    def __init__(
        self,
        n_vocab: int,
        seed: int,
        *,
        zero_frac: float = 0.25,
        one_hot_frac: float = 0.1,
        copy: Rows | None = None,
        copy_frac: float = 0.0,
        concentration: float = 1.0,
    ) -> None:
        self.n_vocab = n_vocab
        self.seed = seed
        self.zero_frac = zero_frac
        self.one_hot_frac = one_hot_frac
        self.copy = copy
        self.copy_frac = copy_frac
        self.concentration = concentration
        self._rows: dict[Context, np.ndarray] = {}

    def __call__(self, context: Context) -> np.ndarray:
        row = self._rows.get(context)
        if row is None:
            row = self._make(context)
            self._rows[context] = row
        return row

    def _make(self, context: Context) -> np.ndarray:
        V = self.n_vocab
        rng = np.random.default_rng([self.seed, len(context), *context])
        u = rng.random()
        if self.copy is not None and u < self.copy_frac:
            return self.copy(context).copy()
        if u < self.copy_frac + self.one_hot_frac:
            row = np.zeros(V)
            row[rng.integers(V)] = 1.0
            return row
        row = rng.dirichlet(np.full(V, self.concentration))
        dropped = rng.random(V) < self.zero_frac
        dropped[rng.integers(V)] = False  # keep at least one token
        row = np.where(dropped, 0.0, row)
        return row / row.sum()


class PointMassRows:
    """A deterministic drafter's q (n-gram / prompt lookup style): a one-hot row whose token
    is a fixed function of the last two context tokens."""

    def __init__(self, n_vocab: int, seed: int) -> None:
        self.n_vocab = n_vocab
        self.table = np.random.default_rng(seed).integers(n_vocab, size=(n_vocab, n_vocab))

    def __call__(self, context: Context) -> np.ndarray:
        a, b = ((0, 0) + tuple(context))[-2:]  # the empty context reads as (0, 0)
        row = np.zeros(self.n_vocab)
        row[self.table[a, b]] = 1.0
        return row


def lookup_draft(context: Context, k: int, max_ngram: int, min_ngram: int, prefer: str) -> Context:
    """Prompt lookup's rule, written here on its own (not reference/lookup.py's code): for
    n = max_ngram .. min_ngram, the earlier occurrences of the last n tokens that end before
    the last token; the first n with one wins; copy up to k tokens after the most recent
    occurrence ("recent") or after the one with the longest continuation, capped at k, the
    more recent on a tie ("longest"). Nothing when no n matches."""
    T = len(context)
    for n in range(max_ngram, min_ngram - 1, -1):
        if k == 0 or n > T - 1:
            continue
        starts = [i for i in range(T - n) if context[i : i + n] == context[T - n :]]
        if starts:
            if prefer == "recent":
                i = max(starts)
            else:
                i = max(starts, key=lambda i: (min(k, T - n - i), i))
            return tuple(context[i + n : i + n + k])
    return ()


class LookupProposals:
    """A prompt-lookup drafter as the exact laws see it: at each context ONE draft, with
    probability 1, judged with one-hot q rows (the law of a token that was chosen)."""

    margin = math.inf  # no discrete choice on float rows

    def __init__(self, n_vocab: int, max_ngram: int, min_ngram: int, prefer: str) -> None:
        self.n_vocab = n_vocab
        self.rule = (max_ngram, min_ngram, prefer)

    def draft(self, context: Context, k: int) -> Context:
        return lookup_draft(context, k, *self.rule)

    def outcomes(self, context: Context, k: int) -> Iterator[tuple[Context, np.ndarray, float]]:
        drafts = self.draft(context, k)
        yield drafts, np.eye(self.n_vocab)[np.asarray(drafts, dtype=np.int64)], 1.0


class HybridProposals:
    """The hybrid drafter: the lookup's one draft when it matches, else every draft of the
    fallback's q rows, each with its probability."""

    def __init__(self, lookup: LookupProposals, fallback: Rows) -> None:
        self.lookup = lookup
        self.fallback = fallback

    @property
    def margin(self) -> float:
        return getattr(self.fallback, "margin", math.inf)

    def outcomes(self, context: Context, k: int) -> Iterator[tuple[Context, np.ndarray, float]]:
        if self.lookup.draft(context, k):
            yield from self.lookup.outcomes(context, k)
        else:
            yield from draft_outcomes(self.fallback, context, k)


def draft_outcomes(q_rows, context: Context, k: int) -> Iterator[tuple[Context, np.ndarray, float]]:
    """Every draft the drafter can propose at `context` (k_round = k), the q rows it reports
    and its probability: (drafts [m], Q [m, V], w). Rows: x_i ~ q(. | context, x_<i), m = k;
    a proposer object (LookupProposals, HybridProposals): its own outcomes, m <= k."""
    if hasattr(q_rows, "outcomes"):
        yield from q_rows.outcomes(context, k)
        return
    for drafts, w in draft_paths(q_rows, context, k):
        yield drafts, round_rows(q_rows, q_rows, context, drafts)[1], w


def round_rows(
    p_rows: Rows, q_rows: Rows, context: Context, drafts: Context
) -> tuple[np.ndarray, np.ndarray]:
    # -> (P [k+1, V], Q [k, V]): row i of each is conditioned on context + drafts[:i]
    k = len(drafts)
    P = np.stack([p_rows(context + drafts[:i]) for i in range(k + 1)])
    Q = np.stack([q_rows(context + drafts[:i]) for i in range(k)]) if k else P[:0]
    return P, Q


def round_law(
    p_rows: Rows,
    q_rows: Rows,
    context: Context,
    k: int,
    eos_id: int | None = None,
    remaining: int | None = None,
    law_fn: Callable = verify_law,
) -> Law:
    """Exact law of one round: {(accepted, emitted tokens): probability}.

    Drafts are enumerated with their q probabilities (or, for a proposer object such as
    LookupProposals, taken from its outcomes), verify's outcome comes from the real
    `verify_law` (or `law_fn`, to show that a wrong rule fails), and the emitted tokens from
    the real `emitted_tokens` (EOS and length cut).
    """
    remaining = k + 1 if remaining is None else remaining
    law: dict = {}
    for drafts, Q, w in draft_outcomes(q_rows, context, k):
        P = np.stack([p_rows(context + drafts[:i]) for i in range(len(drafts) + 1)])
        tokens = np.asarray(drafts, dtype=np.int64)
        for (accepted, token), pv in law_fn(P, Q, drafts).items():
            v = Verification(accepted, token)
            out = tuple(emitted_tokens(v, Draft(tokens, Q), eos_id, remaining))
            if w * pv > 0:  # verify_law also lists unreachable outcomes, with mass 0
                law[(accepted, out)] = law.get((accepted, out), 0.0) + w * pv
    return law


def speculative_law(
    p_rows: Rows,
    q_rows: Rows,
    prompt: Iterable[int],
    *,
    k: int,
    max_new_tokens: int,
    eos_id: int | None = None,
    law_fn: Callable = verify_law,
) -> Law:
    """Exact law of the whole speculative procedure: {(tokens, accepted per round): prob}.

    Rounds are chained as the loop does: draft round_draft_length(k, remaining) tokens,
    verify, emit; stop after an emitted EOS or at max_new_tokens.
    """
    prompt = tuple(int(t) for t in prompt)
    frontier: dict = {((), ()): 1.0}
    done: dict = {}
    while frontier:
        (out, accepts), w = frontier.popitem()
        remaining = max_new_tokens - len(out)
        k_round = round_draft_length(k, remaining)
        for (accepted, emitted), pv in round_law(
            p_rows, q_rows, prompt + out, k_round, eos_id, remaining, law_fn
        ).items():
            state = (out + emitted, accepts + (accepted,))
            finished = (eos_id is not None and emitted[-1] == eos_id) or len(state[0]) >= (
                max_new_tokens
            )
            bucket = done if finished else frontier
            bucket[state] = bucket.get(state, 0.0) + w * pv
    return done


def target_law(
    p_rows: Rows, prompt: Iterable[int], *, max_new_tokens: int, eos_id: int | None = None
) -> Law:
    """The target's own autoregressive law of the generated tokens: {tokens: probability}."""
    prompt = tuple(int(t) for t in prompt)
    law: dict = {}

    def extend(out: Context, w: float) -> None:
        if len(out) == max_new_tokens or (out and eos_id is not None and out[-1] == eos_id):
            law[out] = law.get(out, 0.0) + w
            return
        row = p_rows(prompt + out)
        for y in np.flatnonzero(row > 0):
            extend(out + (int(y),), w * float(row[y]))

    extend((), 1.0)
    return law


# --------------------------------------------------------------------------------------------
# 3. Samplers
# --------------------------------------------------------------------------------------------


def as_outcome(result, k: int, n_vocab: int) -> tuple[int, int]:
    """Read (accepted, token) from what an implementation of `verify` returned."""
    if hasattr(result, "accepted") and hasattr(result, "token"):
        accepted, token = result.accepted, result.token
    elif isinstance(result, (tuple, list)) and len(result) == 2:
        accepted, token = result
    else:
        raise TypeError(
            "verify must return an object with .accepted and .token, or a tuple "
            f"(accepted, token); got {result!r}"
        )
    accepted, token = int(accepted), int(token)
    if not 0 <= accepted <= k:
        raise ValueError(f"verify returned accepted = {accepted}; it must be in 0..k = 0..{k}")
    if not 0 <= token < n_vocab:
        raise ValueError(f"verify returned token = {token}; it must be in 0..{n_vocab - 1}")
    return accepted, token


def as_reference_verify(verify_fn: Callable) -> Callable:
    """Wrap a plug-in `verify` so that it returns a reference `Verification`, as the loop needs."""

    def wrapped(p_target, q_draft, draft_tokens, rng) -> Verification:
        k, V = len(draft_tokens), p_target.shape[1]
        return Verification(*as_outcome(verify_fn(p_target, q_draft, draft_tokens, rng), k, V))

    wrapped.__name__ = getattr(verify_fn, "__name__", "verify")
    return wrapped


def sample_rounds(
    verify_fn: Callable,
    p_rows: Rows,
    q_rows: Rows,
    context: Context,
    k: int,
    n: int,
    seed: int,
    drafts: Context | None = None,
) -> Counter:
    """Run `verify_fn` n times: Counter{(drafts, accepted, token): count}.

    Drafts are drawn here, from q_rows, with numpy's own sampler (not the reference's), unless
    fixed `drafts` are given; one seeded generator feeds the drafts and `verify_fn`.
    """
    rng = np.random.default_rng(seed)
    V = len(p_rows(context))
    rows_of: dict[Context, tuple[np.ndarray, np.ndarray]] = {}
    counts: Counter = Counter()
    for _ in range(n):
        x = drafts
        if x is None:
            x = ()
            for _ in range(k):
                x += (int(rng.choice(V, p=q_rows(context + x))),)
        if x not in rows_of:
            rows_of[x] = round_rows(p_rows, q_rows, context, x)
        P, Q = rows_of[x]
        accepted, token = as_outcome(verify_fn(P, Q, np.asarray(x, dtype=np.int64), rng), k, V)
        counts[(x, accepted, token)] += 1
    return counts


def emitted_counts(round_counts: Counter) -> Counter:
    """(drafts, accepted, token) counts -> emitted-sequence counts (drafts[:accepted] + token)."""
    out: Counter = Counter()
    for (x, accepted, token), c in round_counts.items():
        out[x[:accepted] + (token,)] += c
    return out


@dataclass(frozen=True)
class LoopSetup:
    """One configuration of the whole loop: a target / draft pair of tiny random models of
    one family (`family`: "gpt2", or "llama" for `tiny_llama`'s RoPE + GQA models)."""

    name: str
    n_vocab: int
    target: tuple[int, int, int, float, int]  # (n_embd, n_layer, n_head, std, seed)
    draft: tuple  # the same for an independent draft model, or (noise, seed): the target's
    # weights plus noise * std * N(0, 1), a stand-in for a distilled draft (acceptance ~0.7)
    prompt: tuple[int, ...]
    k: int
    max_new_tokens: int
    sampling: SamplingParams
    eos_id: int | None
    n: int  # samples of the real check
    seed: int  # seed of the real check's generator
    n_ctx: int = 16
    lookup: tuple | None = None  # (max_ngram, min_ngram, prefer): draft by prompt lookup
    hybrid: bool = False  # with `lookup`: the lookup when it matches, else the draft model
    fast: bool = False  # the draft model's sampled draws through the compiled draw
    family: str = "gpt2"  # "llama": both models are tiny_llama's, same sizes

    def __post_init__(self) -> None:
        if self.family not in TINY_MODELS:
            raise ValueError(f"{self.name}: family must be one of {sorted(TINY_MODELS)}")

    def target_model(self) -> GPT:
        return TINY_MODELS[self.family](self.n_vocab, self.n_ctx, *self.target)

    def make_drafter(self):
        """The drafter the real loop runs: a ModelDrafter (FastModelDrafter: its compiled
        draw, specdec/fast_cpu/draw.py), a LookupDrafter or a hybrid."""
        if self.fast:
            FastModelDrafter = optional.compiled_draw().FastModelDrafter

            return FastModelDrafter(self.draft_model())
        if self.lookup is None:
            return ModelDrafter(self.draft_model())
        lookup = LookupDrafter(self.n_vocab, self.n_ctx, *self.lookup)
        return HybridDrafter(lookup, ModelDrafter(self.draft_model())) if self.hybrid else lookup

    def draft_law(self, sampling: SamplingParams):
        """What the exact laws enumerate for this drafter (oracle code, not the drafter's)."""
        model_rows = ModelRows(self.draft_model(), sampling)
        if self.lookup is None:
            return model_rows
        lookup = LookupProposals(self.n_vocab, *self.lookup)
        return HybridProposals(lookup, model_rows) if self.hybrid else lookup

    def draft_model(self) -> GPT:
        if len(self.draft) == 2:
            noise, seed = self.draft
            return noisy_copy(self.target_model(), noise * self.target[3], seed)
        return TINY_MODELS[self.family](self.n_vocab, self.n_ctx, *self.draft)


@cache
def tiny_gpt(
    n_vocab: int, n_ctx: int, n_embd: int, n_layer: int, n_head: int, std: float, seed: int
) -> GPT:
    """A tiny GPT with large random weights, so that every row depends on the context."""
    cfg = GPTConfig(n_vocab=n_vocab, n_ctx=n_ctx, n_embd=n_embd, n_head=n_head, n_layer=n_layer)
    return GPT(cfg, init_params(cfg, np.random.default_rng(seed), std=std))


@cache
def tiny_llama(
    n_vocab: int, n_ctx: int, n_embd: int, n_layer: int, n_head: int, std: float, seed: int
) -> Llama:
    """tiny_gpt's Llama-family twin (RMSNorm, RoPE, SwiGLU), from the same five numbers.

    GQA 2:1 (n_head / 2 key/value heads, so a head-sharing slip shows), and rope_theta 10
    instead of 10 000: with a head of 4 to 8 features and a 16-token context, 10 000 would
    leave every pair but the first nearly still, and a wrong position would hardly change a
    row; at 10 every pair turns by 0.1 to 1 radian per position."""
    if n_head % 2:
        raise ValueError(f"tiny_llama shares each key/value head by two: n_head {n_head} is odd")
    cfg = LlamaConfig(
        n_vocab=n_vocab,
        n_ctx=n_ctx,
        n_embd=n_embd,
        n_head=n_head,
        n_layer=n_layer,
        n_kv_head=n_head // 2,
        n_inner=2 * n_embd,
        rope_theta=10.0,
    )
    return Llama(cfg, init_llama_params(cfg, np.random.default_rng(seed), std=std))


TINY_MODELS = {"gpt2": tiny_gpt, "llama": tiny_llama}  # LoopSetup.family -> its builder


@cache
def noisy_copy(model: GPT, scale: float, seed: int) -> GPT:
    """specdec.standins.noisy_copy, built once per (model, scale, seed): the model's weight
    matrices plus scale * N(0, 1) noise (norm gains and biases kept)."""
    return standins.noisy_copy(model, scale, seed)


@dataclass(frozen=True)
class LoopLaws:
    tokens: Law  # the target's autoregressive law of the generated tokens
    joint: Law  # the speculative procedure's law of (tokens, accepted per round)
    round1: Law  # accepted drafts in round 1
    round2: Law  # accepted drafts in round 2 (None: there was no round 2)
    margin: float  # smallest decision margin over every row used (see ModelRows)


@cache
def loop_laws(setup: LoopSetup) -> LoopLaws:
    p_rows = ModelRows(setup.target_model(), setup.sampling)
    q_rows = setup.draft_law(setup.sampling)
    kw = dict(max_new_tokens=setup.max_new_tokens, eos_id=setup.eos_id)
    joint = speculative_law(p_rows, q_rows, setup.prompt, k=setup.k, **kw)
    return LoopLaws(
        tokens=target_law(p_rows, setup.prompt, **kw),
        joint=joint,
        round1=marginal(joint, lambda o: o[1][0]),
        round2=marginal(joint, lambda o: o[1][1] if len(o[1]) > 1 else None),
        margin=min(p_rows.margin, q_rows.margin),
    )


def sample_loop(
    generate: Callable,
    setup: LoopSetup,
    n: int,
    seed: int,
    *,
    verify_fn: Callable | None = None,
    record_errors: bool = False,
) -> Counter:
    """Run an implementation of `speculative_generate` n times on `setup`.

    Returns Counter{(tokens, accepted per round): count}. One drafter is built and reused
    (the loop's contract is to reset it). An exception propagates, naming the run, unless
    `record_errors` is set (the power tests): then the run's tokens and accepted counts all
    read "raised <type>", an outcome that every exact law gives probability 0.
    """
    rng = np.random.default_rng(seed)
    target, drafter = setup.target_model(), setup.make_drafter()
    kwargs = dict(
        k=setup.k,
        max_new_tokens=setup.max_new_tokens,
        rng=rng,
        sampling=setup.sampling,
        eos_id=setup.eos_id,
    )
    if verify_fn is not None:
        kwargs["verify_fn"] = verify_fn
    counts: Counter = Counter()
    for i in range(n):
        try:
            result = generate(target, drafter, list(setup.prompt), **kwargs)
            tokens = tuple(int(t) for t in result.tokens)
            accepts = tuple(int(a) for a in result.stats.accepted_per_round)
        except Exception as error:
            if not record_errors:
                raise AssertionError(
                    f"{setup.name}: run {i} of {n} (seed {seed}) raised "
                    f"{type(error).__name__}: {error}"
                ) from error
            raised = f"raised {type(error).__name__}"
            tokens, accepts = (raised,), (raised, raised)
        counts[(tokens, accepts)] += 1
    return counts


def loop_checks(setup: LoopSetup, counts: Counter) -> dict[str, CheckResult]:
    """The three checks of one loop setup, from one set of samples."""
    laws = loop_laws(setup)

    def count(key: Callable) -> Counter:
        out: Counter = Counter()
        for o, c in counts.items():
            out[key(o)] += c
        return out

    name = setup.name
    return {
        f"{name}:tokens": chi_square_test(count(lambda o: o[0]), laws.tokens, f"{name}:tokens"),
        f"{name}:round1": chi_square_test(count(lambda o: o[1][0]), laws.round1, f"{name}:round1"),
        f"{name}:round2": chi_square_test(
            count(lambda o: o[1][1] if len(o[1]) > 1 else None), laws.round2, f"{name}:round2"
        ),
    }

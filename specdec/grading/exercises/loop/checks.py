"""The checks of a submitted loop, `speculative_generate(target, drafter, prompt, *, k,
max_new_tokens, rng, sampling, eos_id)` returning an object with .tokens and
.stats.accepted_per_round (the contract of `pytest -m distribution --speculative`).

It runs on a tiny context-dependent GPT pair (V = 5, one layer; the draft is the target plus
noise, so drafts are kept ~70% of the time and rejections are common):

1. greedy runs, exact (a point mass): one where round 1 keeps every draft (round 2 needs the
   draft's catch-up on x_k) and one where the target disagrees with the draft (the correction
   token at greedy);
2. sampled runs, T = 1 and T = 0.7 with top-k and EOS: the law of the generated tokens against
   the target's own autoregressive law, and the law of the number of drafts kept in rounds 1
   and 2 (the draft's cache shows only there) under the declared round policy. The generator
   `rng` the runs are handed is fresh for each grading (engine/secret.py).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from specdec.grading.engine.core import Check, Family, Outcome, Runs, looks_of
from specdec.grading.engine.laws import (
    ModelRows,
    compare,
    draft_length,
    generation_law,
    loop_joint_law,
    marginal,
)
from specdec.grading.engine.quoting import one_line, type_name
from specdec.grading.engine.replies import whole_numbers
from specdec.grading.engine.sandbox import RemoteFunction
from specdec.grading.engine.secret import submission_rng
from specdec.grading.engine.submission import (
    CHUNK,
    Submission,
    SubmissionCrash,
    call_safely,
    call_verify,
    show_inputs,
    streams,
    verify_inputs,
)
from specdec.grading.project import (
    GPT,
    GPTConfig,
    ModelDrafter,
    SamplingParams,
    Verification,
    init_params,
    noisy_copy,
    speculative_generate,
)

V = 5  # vocabulary of the tiny pair


@cache
def tiny_pair():
    """(target, draft): a one-layer GPT with large random weights, so that every row depends
    on the context, and a noisy copy of it as the draft (the oracle's pair)."""
    cfg = GPTConfig(n_vocab=V, n_ctx=16, n_embd=16, n_head=2, n_layer=1)
    target = GPT(cfg, init_params(cfg, np.random.default_rng(11), std=0.9))
    return target, noisy_copy(target, 0.4 * 0.9, 12)


@dataclass(frozen=True)
class LoopCase:
    name: str
    prompt: tuple[int, ...]
    k: int
    max_new_tokens: int
    temperature: float  # 0 = greedy
    top_k: int | None
    eos_id: int | None
    n: int  # runs
    seed: int


GREEDY_CATCH_UP = LoopCase("greedy-catch-up", (0, 1), 2, 6, 0.0, None, None, 3, 105)
GREEDY_CORRECTION = LoopCase("greedy-correction", (0, 2), 2, 6, 0.0, None, None, 3, 106)
# Runs per sampled case: every broken loop of the oracle's catalogue and of the exercises'
# (tests/grader) is still rejected, with its hint, at 4 000 (it was 10 000), and a correct
# loop is graded in under 20 s; the false-alarm rate does not depend on n
# (tests/grader/test_false_alarms.py)
LOOP_RUNS = 4_000
# the quick look at 30 % of the runs (1 200): the subtlest broken loop of the catalogue
# (draft_q_without_temperature) is rejected there, in 7.5 s, where a fifth (800) was not
# enough and cost it the full look (18.5 s); a correct loop pays 4 000 runs either way
QUICK_LOOK = 0.3
SAMPLED = [
    LoopCase("t1-k2", (3, 0), 2, 5, 1.0, None, None, LOOP_RUNS, 101),
    LoopCase("topk-k3-eos", (4, 1), 3, 4, 0.7, 3, 4, LOOP_RUNS, 102),
]


@cache
def case_laws(case: LoopCase, policy: str) -> dict:
    """{'tokens', 'round1', 'round2', 'joint', 'p_rows'} for one case, enumerated here."""
    target, draft = tiny_pair()
    p_rows = ModelRows(target, case.temperature, case.top_k)
    q_rows = ModelRows(draft, case.temperature, case.top_k)
    kw = dict(max_new_tokens=case.max_new_tokens, eos_id=case.eos_id)
    joint = loop_joint_law(p_rows, q_rows, case.prompt, k=case.k, policy=policy, **kw)
    return {
        "tokens": generation_law(p_rows, case.prompt, **kw),
        "round1": marginal(joint, lambda o: o[1][0]),
        "round2": marginal(joint, lambda o: o[1][1] if len(o[1]) > 1 else None),
        "joint": joint,
        "p_rows": p_rows,
    }


def run_loops(
    sub: Submission, case: LoopCase, rng: np.random.Generator, drafter, verify_fn, n: int
) -> list[tuple[tuple, tuple]]:
    """n runs of the loop, one after the other with the one rng -> n (tokens, accepted per
    round): a loop in a worker makes them in one request, the same runs as one by one."""
    target, _ = tiny_pair()
    sampling = SamplingParams(case.temperature, case.top_k)
    kwargs = dict(
        k=case.k, max_new_tokens=case.max_new_tokens, rng=rng, sampling=sampling, eos_id=case.eos_id
    )
    if verify_fn is not None:
        kwargs["verify_fn"] = verify_fn
    shown = {"prompt": list(case.prompt), **{n: v for n, v in kwargs.items() if n != "rng"}}
    args = (target, drafter, list(case.prompt))
    try:
        if n > 1 and isinstance(sub.function, RemoteFunction):
            results = call_safely(sub, args, kwargs, shown, repeat=n)
        else:
            results = [
                call_safely(sub, (target, drafter, list(case.prompt)), kwargs, shown)
                for _ in range(n)
            ]
    except SubmissionCrash as crash:
        if verify_fn is None and not crash.hint:  # the submission is the loop: its caches
            crash.hint = loop_crash_hint(crash.error)
        raise
    return [loop_outcome(result, shown) for result in results]


LOOP_MOST = 1000  # tokens (and rounds) a loop may return: far more than max_new_tokens


def loop_outcome(result, shown: dict) -> tuple[tuple, tuple]:
    """What a loop returned -> (tokens, accepted per round), or the contract it broke: token
    ids in 0..V-1 and counts in 0..k, each list at most LOOP_MOST long (checked before an
    item is read: it may hold millions, or inf, or an int of 5,000 digits)."""
    try:  # reading an attribute of an object the worker keeps asks the worker: any raise
        tokens = whole_numbers(result.tokens, "tokens", LOOP_MOST, 0, V - 1)
        accepts = whole_numbers(
            result.stats.accepted_per_round, "accepted_per_round", LOOP_MOST, 0, shown["k"]
        )
    except Exception as error:
        said = f"{type_name(type(error).__name__)}: {one_line(str(error))}"
        raise SubmissionCrash(
            ValueError(
                f"the loop must return an object with .tokens (token ids) and "
                f".stats.accepted_per_round (drafts kept per round, in 0..k) ({said})"
            ),
            "the value your loop returned",
            show_inputs(**shown),
        ) from None
    return tuple(tokens), tuple(accepts)


def loop_crash_hint(error: BaseException) -> str:
    """A hint for the crashes a loop's cache bookkeeping leads to (read from the message of
    the library's own checks, which the loop's mistake trips a step later)."""
    text = str(error)
    if "q_draft must have shape" in text or "draft_tokens must have length" in text:
        return (
            "the target's pass gave another number of rows than k + 1 (p and q no longer "
            "match): feed it the committed tokens its cache lacks, context[cache.length:], "
            "then the k drafts. If that catch-up is empty or too long, the target's cache "
            "kept or dropped the wrong slots last round: commit the catch-up token and the "
            "accepted drafts (accepted + 1 slots), then roll back the rest"
        )
    if "commit(n)" in text:
        return (
            "a cache was told to commit more slots than this round wrote: the target wrote its "
            "catch-up token and all k drafts; the draft model wrote its catch-up tokens and "
            "x_1..x_{k-1} (x_k is never fed), so it keeps catch-up + min(accepted, k - 1)"
        )
    if "KV cache full" in text or "sequence too long" in text:
        return (
            "a cache filled up: after each round commit only what was kept and roll back "
            "the rest (cache.rollback()), or the rejected drafts' slots pile up"
        )
    return ""


def case_runs(case: LoopCase, verify_fn=None, looks: tuple[int, ...] = ()):
    """-> outcomes(submission): an endless stream of (tokens, accepted per round). `looks`:
    the runs each look of the check reads, which a loop in a worker's chunks divide."""

    def outcomes(sub: Submission):
        _, draft = tiny_pair()
        drafter = ModelDrafter(draft)  # one drafter, reused: the loop's contract is to reset it
        rng = submission_rng(case.seed)  # fresh for each grading (engine/secret.py)
        # a loop in a worker: in chunks that end where the looks end, so that no look makes a
        # run it does not read (the runs of n run_loop, in fewer requests); here: one by one
        remote = isinstance(sub.function, RemoteFunction)
        chunk = math.gcd(CHUNK, *looks) if remote and looks else 1
        while True:
            yield from run_loops(sub, case, rng, drafter, verify_fn, chunk)

    return outcomes


# --------------------------------------------------------------------------------------------
# Exact (greedy) cases
# --------------------------------------------------------------------------------------------


def greedy_check(case: LoopCase, what: str, policy: str) -> Check:
    runs = Runs(case_runs(case, looks=(case.n,)), case.n, quick_fraction=1.0)

    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        ((expected, w),) = case_laws(case, policy)["joint"].items()  # a point mass
        seen = runs.counts(sub, look)
        if set(seen) == {expected}:
            return Outcome(True, f"tokens {list(expected[0])}, kept {list(expected[1])}", n=case.n)
        tokens, accepts = max((o for o in seen if o != expected), key=seen.get)
        story = [
            f"greedy, prompt {list(case.prompt)}, k = {case.k}, max_new_tokens = "
            f"{case.max_new_tokens}",
            f"expected tokens {list(expected[0])} (the target's own argmax path), drafts kept "
            f"per round {list(expected[1])}",
            f"observed tokens {list(tokens)}, drafts kept per round {list(accepts)}",
        ]
        if len(seen) > 1:
            story.append(f"{len(seen)} different outcomes in {case.n} runs with other seeds")
            hint = (
                "at greedy your loop gives different outputs for different seeds: at T = 0 both "
                "the target's and the draft's rows must be the one-hot argmax (the sampling "
                "transform applied on both sides), so that every run is the same"
            )
        else:
            hint = greedy_hint(tokens, accepts, expected, case, policy)
        summary = (
            f"tokens {list(tokens)}, kept {list(accepts)}; expected tokens "
            f"{list(expected[0])}, kept {list(expected[1])}"
        )
        return Outcome(False, summary, story, hint, n=case.n)

    return Check(f"loop/{case.name}", what, False, run)


def first_difference(a: tuple, b: tuple) -> int:
    # the first index where two sequences differ (the shorter one's length if one is a prefix)
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def greedy_hint(tokens, accepts, expected, case: LoopCase, policy: str) -> str:
    want_tokens, want_accepts = expected
    if tokens == want_tokens:
        first = first_difference(accepts, want_accepts)
        if first < len(want_accepts) and first > 0 and want_accepts[first - 1] == case.k:
            return (
                f"the tokens are right but round {first + 1} keeps a different number of drafts "
                f"({list(accepts)} instead of {list(want_accepts)}), after a round that kept all "
                f"k: the draft "
                f"model never saw its own last draft x_k (the catch-up) or its cache is off"
            )
        return (
            "the tokens are right but the number of drafts kept per round is not: the draft "
            "model's cache or history is off (or the round drafts another number of tokens; "
            "declare --policy full if yours always drafts k)"
        )
    wrong = first_difference(tokens, want_tokens)
    starts, rejected = round_starts(want_accepts, case.k, case.max_new_tokens, policy)
    if wrong in starts[1:]:  # the first token of a later round: the cache it inherited
        r = starts.index(wrong)  # 0-based: the round before it is r - 1
        after = "rejected a draft" if rejected[r - 1] else "kept every draft (nothing to roll back)"
        return (
            f"token {wrong + 1} is the first of round {r + 1}, and round {r} {after}: after "
            f"it, the target's cache holds more or less than the committed tokens. Commit the "
            f"catch-up token and the accepted drafts (accepted + 1 slots), roll back the rest "
            f"(the rejected drafts' K/V), and start the next pass at context[cache.length:]"
        )
    return (
        f"token {wrong + 1} differs from the target's argmax: at greedy, every emitted token is "
        f"the target's own choice (a rejected draft is replaced by the target's argmax at that "
        f"position); check which of the k + 1 rows scores which draft, the correction token, "
        f"and what the target's cache holds after a rejection"
    )


def round_starts(accepts, k: int, max_new_tokens: int, policy: str) -> tuple[list, list]:
    # expected drafts kept per round -> (index of each round's first token, did it reject)
    starts, rejected, emitted = [], [], 0
    for a in accepts:
        k_round = draft_length(policy, k, max_new_tokens - emitted)
        starts.append(emitted)
        rejected.append(a < k_round)
        emitted += a + 1
    return starts, rejected


# --------------------------------------------------------------------------------------------
# Sampled cases
# --------------------------------------------------------------------------------------------


def sampled_checks(case: LoopCase, policy: str) -> list[Check]:
    runs = Runs(case_runs(case, looks=looks_of(case.n, QUICK_LOOK)), case.n, QUICK_LOOK)

    def law_check(law_name: str, key, what: str) -> Check:
        def run(sub: Submission, threshold: float, look: int) -> Outcome:
            laws = case_laws(case, policy)
            counts = runs.counts(sub, look)
            n = counts.total()
            observed = Counter()
            for o, c in counts.items():
                observed[key(o)] += c
            cmp = compare(observed, laws[law_name])
            ok = cmp.p_value >= threshold
            summary = f"{len(laws[law_name])} outcomes, p = {cmp.p_value:.2g}"
            if ok:
                return Outcome(True, summary, p_value=cmp.p_value, n=n)
            story = [
                f"{n} runs: prompt {list(case.prompt)}, k = {case.k}, max_new_tokens = "
                f"{case.max_new_tokens}, T = {case.temperature:g}"
                + (f", top-k {case.top_k}" if case.top_k else "")
                + (f", EOS = {case.eos_id}" if case.eos_id is not None else ""),
                f"largest deviations: {cmp.worst()}; total variation {cmp.distance:.3f}",
            ]
            hint = loop_hint(law_name, case, counts, cmp, laws, policy)
            return Outcome(False, summary, story, hint, cmp.p_value, n)

        return Check(f"loop/{case.name}:{law_name}", what, True, run)

    return [
        law_check("tokens", lambda o: o[0], "generated tokens vs the target's own law"),
        law_check("round1", lambda o: o[1][0], "drafts kept in round 1"),
        law_check("round2", lambda o: o[1][1] if len(o[1]) > 1 else None, "drafts kept in round 2"),
    ]


def impossible_run_hint(case: LoopCase, cmp, laws: dict, zero_mass: str) -> str:
    """A hint read from a generated sequence the target's law cannot produce ('' when there is
    none): tokens after EOS, too many tokens, a run stopped early, or a token the target gives
    probability 0 there (`zero_mass` says what that points to)."""
    for seq in cmp.impossible:
        if case.eos_id is not None and case.eos_id in seq[:-1]:
            return f"tokens come after EOS ({case.eos_id}): cut a round's tokens after EOS"
        if len(seq) > case.max_new_tokens:
            return "more than max_new_tokens tokens: cut the last round at the limit"
        if len(seq) < case.max_new_tokens and seq[-1:] != (case.eos_id,):
            return "a run stopped early, before max_new_tokens and without EOS"
        for i, t in enumerate(seq):
            if laws["p_rows"](case.prompt + seq[:i])[t] == 0:
                return f"token {t} at position {i + 1} has probability 0 {zero_mass}"
    return ""


def first_token_is_off(counts: Counter, laws: dict) -> bool:
    """Is the law of the first generated token off? (counts: Counter{(tokens, ...): runs})"""
    first = Counter()
    for outcome, c in counts.items():
        first[outcome[0][0]] += c
    # a cache or position mistake leaves the first token's law exact (its p-value is
    # uniform): below 1e-3 it names the wrong mistake once in a thousand
    return compare(first, marginal(laws["tokens"], lambda seq: seq[0])).p_value < 1e-3


def loop_hint(law_name: str, case: LoopCase, counts: Counter, cmp, laws: dict, policy: str) -> str:
    """A hint from the pattern of a failed loop law."""
    if law_name == "tokens":
        zero_mass = (
            f"under the target's sampling transform (top-k {case.top_k}): apply temperature and "
            f"top-k to the target's rows too, not only to the draft's"
        )
        impossible = impossible_run_hint(case, cmp, laws, zero_mass)
        if impossible:
            return impossible
        if first_token_is_off(counts, laws):
            return (
                "already the first token's law is off: check that p and q are computed with the "
                "same temperature / top-k, and that q is the law the drafts were drawn from"
            )
        return (
            "the first token is right but later tokens are not: the target's cache after a "
            "rejection (commit exactly the accepted tokens, roll back the rest) or the "
            "positions of the next round's tokens"
        )
    policy_hint = (
        (
            "a round kept more drafts than the 'shrink' round policy lets it draft, "
            "min(k, remaining - 1): a round emits up to k_round + 1 tokens, so near the limit "
            "it drafts fewer (none when one token is left). If your loop always drafts k on "
            "purpose and cuts at the length limit, grade it with --policy full"
        )
        if policy == "shrink"
        else (
            "a round kept more drafts than the 'full' round policy lets it draft (k): check "
            "how many tokens each round drafts"
        )
    )
    if law_name == "round1":
        if any(
            a is not None and a > max(x for x in laws["round1"] if x is not None)
            for a in cmp.impossible
        ):
            return policy_hint
        return (
            "the tokens are right but the number of drafts kept in round 1 is not: the drafts "
            "may be judged with a q other than the law they came from, or your round drafts "
            f"another number of tokens than the {policy!r} policy says (--policy)"
        )
    # round 2: after a round that kept every draft, or after a rejection?
    joint = laws["joint"]
    verdicts = []
    for after_full in (True, False):
        law = marginal(
            {o: w for o, w in joint.items() if len(o[1]) > 1 and (o[1][0] == case.k) == after_full},
            lambda o: o[1][1],
        )
        seen = Counter()
        for (_, accepts), c in counts.items():
            if len(accepts) > 1 and (accepts[0] == case.k) == after_full:
                seen[accepts[1]] += c
        total = sum(law.values())
        if seen and total > 0 and max(seen) > max(law):
            return policy_hint
        if total > 0 and seen:
            law = {a: w / total for a, w in law.items()}
            verdicts.append(unmerged_p(seen, law) < 1e-4)
        else:
            verdicts.append(False)
    if verdicts[0] and not verdicts[1]:
        return (
            "round 2 is off only after a round 1 that kept all k drafts: the draft model must "
            "first catch up on its own last draft x_k, which it never fed (the catch-up)"
        )
    return (
        "round 2's accepted count is off while the tokens are right: the draft model reads the "
        "wrong history after round 1 (its cache must keep exactly the accepted drafts and drop "
        "the rejected ones)"
    )


def unmerged_p(seen: Counter, law: dict) -> float:
    """Pearson's p-value over every outcome, no cells merged: for a diagnosis only (which of
    two subsets deviates), where `compare`'s merging of small cells would hide a few-cell
    law's deviation in one cell (and an impossible outcome gives 0)."""
    from scipy import stats

    if any(law.get(o, 0.0) <= 0 for o in seen):
        return 0.0
    n = sum(seen.values())
    cells = [o for o in law if law[o] > 0]
    if len(cells) < 2:
        return 1.0
    statistic = sum((seen.get(o, 0) - n * law[o]) ** 2 / (n * law[o]) for o in cells)
    return float(stats.chi2.sf(statistic, len(cells) - 1))


# --------------------------------------------------------------------------------------------
# The families
# --------------------------------------------------------------------------------------------


def loop_families(policy: str = "shrink", runs: int | None = None) -> list[Family]:
    """The family; `runs` replaces the sampled cases' LOOP_RUNS runs (a quick test: fewer runs,
    less power, the same false-alarm rate)."""
    exact = [
        greedy_check(GREEDY_CATCH_UP, "greedy, round 1 keeps every draft: catch-up", policy),
        greedy_check(GREEDY_CORRECTION, "greedy, the target disagrees: correction", policy),
    ]
    cases = [replace(case, n=runs) if runs else case for case in SAMPLED]
    sampled = [c for case in cases for c in sampled_checks(case, policy)]
    return [Family("loop", "your loop on a tiny GPT pair", exact + sampled)]


IN_LOOP = LoopCase("t1-k2", (3, 0), 2, 5, 1.0, None, None, 3_000, 111)


def accepted_moments(p_target, q_draft, drafts: tuple[int, ...]) -> tuple[float, float]:
    """The mean and variance of one call's accepted count under the contract, on the rows as
    the verify is handed them: P(accepted >= i) = prod_{j<i} min(1, p_j(x_j)/q_j(x_j)),
    E = sum_i P(>= i), E[accepted^2] = sum_i (2i - 1) P(>= i)."""
    rows = verify_inputs(p_target, q_draft, drafts)
    P, Q = rows["p_target"], rows["q_draft"]
    reach, mean, square = 1.0, 0.0, 0.0
    for i, x in enumerate(drafts, 1):
        reach *= min(1.0, P[i - 1, x] / Q[i - 1, x])
        mean += reach
        square += (2 * i - 1) * reach
    return mean, square - mean**2


def verify_in_loop_family(require_rule: bool = True) -> Family:
    """The submitted verify inside the reference loop (float32 rows of a real model): the law
    of the tokens and, where the contract's rule is required, the drafts it keeps, call by
    call, against what min(1, p/q) keeps on the very rows it was handed. The loop's draws
    come from the grading's secret; the verify's generator is a stream of its own."""

    def outcomes(sub: Submission):
        # -> (tokens, drafts kept, expected under the contract, its variance, verify calls)
        calls: list[tuple[int, float, float]] = []  # this run's calls: (kept, mean, variance)
        loop_rng, verify_rng = streams(IN_LOOP.seed)

        def verify_fn(p_target, q_draft, draft_tokens, rng):
            drafts = tuple(int(t) for t in draft_tokens)
            accepted, token = call_verify(sub, p_target, q_draft, drafts, verify_rng)
            calls.append((accepted, *accepted_moments(p_target, q_draft, drafts)))
            return Verification(accepted, token)

        loop = Submission("reference loop", speculative_generate, "loop", "", None)
        drafter = ModelDrafter(tiny_pair()[1])
        while True:
            ((tokens, _),) = run_loops(loop, IN_LOOP, loop_rng, drafter, verify_fn, 1)
            kept, mean, var = (math.fsum(c[j] for c in calls) for j in range(3))
            yield tokens, int(kept), mean, var, len(calls)
            calls.clear()

    runs = Runs(outcomes, IN_LOOP.n)

    def tokens_run(sub: Submission, threshold: float, look: int) -> Outcome:
        counts = runs.counts(sub, look)
        n = counts.total()
        observed = Counter()
        for o, c in counts.items():
            observed[o[0]] += c
        law = case_laws(IN_LOOP, "shrink")["tokens"]
        cmp = compare(observed, law)
        ok = cmp.p_value >= threshold
        summary = f"{len(law)} token sequences, p = {cmp.p_value:.2g}"
        if ok:
            return Outcome(True, summary, p_value=cmp.p_value, n=n)
        story = [
            f"{n} runs of the reference loop with your verify, T = 1, k = 2, 5 tokens",
            f"largest deviations: {cmp.worst()}; total variation {cmp.distance:.3f}",
        ]
        hint = (
            "your verify passed on its own rows but not inside the loop, on a real model's rows "
            "(handed over as float64 rows that sum to 1, like the others): do not keep state "
            "between calls, and do not assume a particular dtype or type of draft_tokens"
        )
        return Outcome(False, summary, story, hint, cmp.p_value, n)

    def accepted_run(sub: Submission, threshold: float, look: int) -> Outcome:
        # the standardized sum over every call: (kept - E) / sqrt(sum of variances), normal
        # by the central limit theorem (thousands of independent, bounded calls)
        from scipy import stats

        counts = runs.counts(sub, look)
        n = counts.total()
        kept = sum(o[1] * c for o, c in counts.items())
        mean = math.fsum(o[2] * c for o, c in counts.items())
        var = math.fsum(o[3] * c for o, c in counts.items())
        n_calls = sum(o[4] * c for o, c in counts.items())
        z = (kept - mean) / math.sqrt(var) if var > 0 else (0.0 if kept == mean else math.inf)
        p = float(2 * stats.norm.sf(abs(z)))
        summary = (
            f"{kept} drafts kept in {n_calls} calls, the contract's rule {mean:.0f} on the same "
            f"rows (z = {z:.2g}), p = {p:.2g}"
        )
        if p >= threshold:
            return Outcome(True, summary, p_value=p, n=n, measure=kept / max(mean, 1e-9))
        story = [
            f"{n} runs of the reference loop with your verify, T = 1, k = 2, 5 tokens: "
            f"{n_calls} calls of your verify",
            f"drafts kept: {kept}; min(1, p/q) on the rows each call was handed keeps "
            f"{mean:.1f} on average (sd {math.sqrt(var):.1f})",
        ]
        if kept == 0:
            hint = (
                "inside the loop your verify never keeps a draft, where the contract's rule "
                f"keeps {mean / n_calls:.2f} a call: keep draft i when a fresh uniform from rng "
                "is below min(1, p_i(x_i)/q_i(x_i))"
            )
        elif kept < mean:
            hint = (
                f"inside the loop your verify keeps fewer drafts ({kept / mean:.0%} of what "
                f"min(1, p/q) keeps on the same rows): an exact rule that keeps less (keep x "
                f"with p(x), resample p without x) is not the contract's, which keeps the most"
            )
        else:
            hint = (
                f"inside the loop your verify keeps more drafts than min(1, p/q) allows "
                f"({kept / mean:.0%} of what it keeps on the same rows): read p and q at the "
                f"draft's token, in row i for draft i, with a fresh uniform for each"
            )
        return Outcome(False, summary, story, hint, p, n, measure=kept / max(mean, 1e-9))

    checks = [
        Check("in-loop/t1-k2:tokens", "your verify inside the reference loop", True, tokens_run)
    ]
    if require_rule:
        checks.append(
            Check(
                "in-loop/t1-k2:accepted",
                "inside the loop: the drafts kept, against min(1, p/q) on the same rows",
                True,
                accepted_run,
            )
        )
    return Family("in-loop", "your verify inside the reference loop", checks, requires=("law",))

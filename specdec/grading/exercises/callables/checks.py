"""The checks of a loop written against another library (transformers, a course's own model),
graded through two next-token callables:

    speculative_sample(target_next, draft_next, prompt, *, k, max_new_tokens, rng,
                       eos_id=None) -> list of generated ids, or an object with .tokens
                       (and optionally .accepted_per_round: then the rounds' laws count too)

    target_next(tokens) -> [V] float64: p(. | tokens), the target's next-token distribution
                           after the token ids `tokens` (the prompt included), with the
                           sampling transform already applied; draft_next likewise gives q.

The callables are the tiny GPT pair of loop/checks.py (V = 5; the draft is the target plus
noise), read through `ModelRows` (an uncached forward per context, memoised), so the
expectations are the loop exercise's: the target's own autoregressive law of the tokens and,
when the loop reports them, the exact laws of the drafts kept in rounds 1 and 2.

1. greedy runs, exact (point-mass rows): every draft kept; a correction; EOS inside a round;
   the length limit with one token left;
2. sampled runs, T = 1 and T = 0.7 with top-k and EOS, 4 000 each: the tokens' law by
   chi-square, and the rounds' laws if reported. The generator `rng` every run is handed is
   fresh for each grading (engine/secret.py), so no table of one grading's draws serves another;
3. the calls, exact on every run of the quick looks: with plain callables there is no
   batching, so a pass over k drafts is k + 1 calls, and one call per emitted token is the
   floor (a lazy loop asks row i only once drafts 1..i-1 are kept), not a fault. What is
   checkable: the draft is asked at all (else this is plain sampling), no context is asked
   twice in a run (a real pass computes each position once, as a KV cache does), and, when
   the rounds are reported, at most k + 1 new target rows per round (and k + 1 draft rows:
   k drafts, plus one catch-up row after a round that kept every draft, which a loop that
   re-reads the whole sequence asks for). The target rows per emitted token are reported.
"""

from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from specdec.grading.engine.core import Check, Family, Outcome, Runs
from specdec.grading.engine.laws import ModelRows, compare, draft_length
from specdec.grading.engine.quoting import one_line, shown_value, type_name
from specdec.grading.engine.replies import whole_numbers
from specdec.grading.engine.secret import submission_rng
from specdec.grading.engine.submission import (
    Submission,
    SubmissionCrash,
    call_safely,
    show_inputs,
)
from specdec.grading.exercises.loop.checks import (
    LOOP_MOST,
    QUICK_LOOK,
    SAMPLED,
    LoopCase,
    V,
    case_laws,
    first_difference,
    first_token_is_off,
    impossible_run_hint,
    tiny_pair,
)

N_CTX = 16  # the tiny pair's context length: the longest `tokens` a callable accepts

GREEDY = [  # (case, what it shows); n = 3 runs with different draws, all must agree
    (LoopCase("greedy-all-kept", (0, 1), 2, 6, 0.0, None, None, 3, 205), "every draft kept"),
    (LoopCase("greedy-correction", (0, 2), 2, 6, 0.0, None, None, 3, 206), "a correction"),
    (LoopCase("greedy-eos", (0, 1), 2, 6, 0.0, None, 2, 3, 207), "EOS inside a round"),
    (LoopCase("greedy-limit", (0, 1), 2, 4, 0.0, None, None, 3, 208), "one token left"),
]


# --------------------------------------------------------------------------------------------
# The callables the submission receives, and one run
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Calls:
    """What one run asked of the callables."""

    target_new: int  # distinct target contexts at least as long as the prompt
    target_repeats: int  # target calls on a context already asked in this run
    draft_calls: int
    draft_new: int  # distinct draft contexts at least as long as the prompt
    draft_repeats: int


class NextToken:
    """One model's next-token rows as a callable, counting what a run asks of it."""

    def __init__(self, rows: ModelRows, name: str, prompt_len: int) -> None:
        self.rows, self.name, self.prompt_len = rows, name, prompt_len
        self.calls = self.new = self.repeats = 0
        self.seen: set[tuple[int, ...]] = set()

    def __call__(self, tokens) -> np.ndarray:
        # tokens [n] ids -> [V] float64, a fresh copy (the submission may edit it freely)
        context = as_context(tokens, self.name)
        self.calls += 1
        if context in self.seen:
            self.repeats += 1
        else:
            self.seen.add(context)
            self.new += len(context) >= self.prompt_len
        return self.rows(context).copy()


def as_context(tokens, name: str) -> tuple[int, ...]:
    # a list, tuple, 1-D NumPy array or torch tensor of ids -> a tuple of ints, or a clear error
    # (what the worker hands over: its length is checked before its items are read)
    if hasattr(tokens, "__len__") and len(tokens) > N_CTX:
        raise ValueError(
            f"{name}(tokens): {len(tokens)} tokens, more than the grader's models read "
            f"({N_CTX}); the longest context a round needs is prompt + max_new_tokens + k"
        )
    try:
        context = tuple(operator.index(t) for t in tokens)
    except TypeError as error:
        raise TypeError(
            f"{name}(tokens): tokens must be a flat sequence of int token ids (a list, or a "
            f"1-D array or tensor), got {type(tokens).__name__} ({error})"
        ) from None
    if not context:
        raise ValueError(f"{name}(tokens): tokens is empty; pass the prompt and what follows it")
    if min(context) < 0 or max(context) >= V:
        raise ValueError(
            f"{name}(tokens): ids must be in 0..{V - 1}, got {shown_value(list(context))}"
        )
    if len(context) > N_CTX:
        raise ValueError(
            f"{name}(tokens): {len(context)} tokens, more than the grader's models read "
            f"({N_CTX}); the longest context a round needs is prompt + max_new_tokens + k"
        )
    return context


@cache
def rows_of(case: LoopCase) -> tuple[ModelRows, ModelRows]:
    # (p rows, q rows) of the tiny pair under the case's sampling transform
    _, draft = tiny_pair()
    p_rows = case_laws(case, "shrink")["p_rows"]  # the laws' own memo: rows computed once
    return p_rows, ModelRows(draft, case.temperature, case.top_k)


def run_sample(sub: Submission, case: LoopCase, rng: np.random.Generator):
    """One run -> (tokens, accepted per round or None, Calls)."""
    p_rows, q_rows = rows_of(case)
    target_next = NextToken(p_rows, "target_next", len(case.prompt))
    draft_next = NextToken(q_rows, "draft_next", len(case.prompt))
    kwargs = dict(k=case.k, max_new_tokens=case.max_new_tokens, rng=rng, eos_id=case.eos_id)
    shown = {"prompt": list(case.prompt), **{n: v for n, v in kwargs.items() if n != "rng"}}
    args = (target_next, draft_next, list(case.prompt))
    result = call_safely(sub, args, kwargs, shown, "speculative_sample")
    tokens, accepts = read_result(result, case, shown)
    calls = Calls(
        target_next.new, target_next.repeats, draft_next.calls, draft_next.new, draft_next.repeats
    )
    return tokens, accepts, calls


def read_result(result, case: LoopCase, shown: dict) -> tuple[tuple, tuple | None]:
    # a list of ids, or .tokens (and optionally .accepted_per_round) -> (tokens, accepts):
    # token ids in 0..V-1, counts whole numbers, each list at most LOOP_MOST long
    try:  # reading an attribute of an object the worker keeps asks the worker: any raise
        tokens = getattr(result, "tokens", result)
        accepts = getattr(result, "accepted_per_round", None)
        tokens = tuple(whole_numbers(tokens, "tokens", LOOP_MOST, 0, V - 1))
        if accepts is not None:
            accepts = tuple(whole_numbers(accepts, "accepted_per_round", LOOP_MOST))
    except Exception as error:
        said = f"{type_name(type(error).__name__)}: {one_line(str(error))}"
        raise breach(
            f"speculative_sample must return a list of token ids, or an object with .tokens "
            f"(and optionally .accepted_per_round, one int per round); got "
            f"{type_name(type(result).__name__, 'object')} ({said})",
            shown,
        ) from None
    if accepts is not None and not (accepts and all(0 <= a <= case.k for a in accepts)):
        emitted = accepts and max(accepts) == case.k + 1
        raise breach(
            f"accepted_per_round = {shown_value(list(accepts))}: one count per round, each the "
            f"number of drafts kept, 0..k = 0..{case.k}",
            shown,
            "a count of k + 1: accepted_per_round counts the tokens each round emitted "
            "(accepted + 1); count the drafts kept instead"
            if emitted
            else "",
        )
    return tokens, accepts


def breach(message: str, shown: dict, hint: str = "") -> SubmissionCrash:
    where = "the value your loop returned"
    return SubmissionCrash(ValueError(message), where, show_inputs(**shown), hint=hint)


def case_runs(case: LoopCase):
    def outcomes(sub: Submission):
        rng = submission_rng(case.seed)  # fresh for each grading (engine/secret.py)
        while True:
            yield run_sample(sub, case, rng)

    return outcomes


def rounds_reported(counts: Counter) -> bool:
    return all(accepts is not None for (_, accepts, _) in counts)


# --------------------------------------------------------------------------------------------
# Exact (greedy) cases
# --------------------------------------------------------------------------------------------


def greedy_check(case: LoopCase, what: str, policy: str, runs: Runs) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        ((expected, _),) = case_laws(case, policy)["joint"].items()  # a point mass
        want_tokens, want_accepts = expected
        seen = Counter()
        for (tokens, accepts, _), c in runs.counts(sub, look).items():
            seen[(tokens, accepts)] += c
        tokens, accepts = max(seen, key=seen.get)
        if len(seen) == 1 and tokens == want_tokens and accepts in (None, want_accepts):
            kept = "" if accepts is None else f", kept {list(accepts)}"
            return Outcome(True, f"tokens {list(tokens)}{kept}", n=case.n)
        eos = f", EOS = {case.eos_id}" if case.eos_id is not None else ""
        story = [
            f"greedy (one-hot rows), prompt {list(case.prompt)}, k = {case.k}, max_new_tokens "
            f"= {case.max_new_tokens}{eos}",
            f"expected tokens {list(want_tokens)} (the target's own argmax path), drafts kept "
            f"per round {list(want_accepts)}",
            f"observed tokens {list(tokens)}"
            + (f", drafts kept per round {list(accepts)}" if accepts is not None else ""),
        ]
        if len(seen) > 1:
            story.append(f"{len(seen)} different outcomes in {case.n} runs with other seeds")
            hint = (
                "with one-hot rows your loop gives different outputs for different seeds: a "
                "draft drawn from a one-hot q is certain, and so is its acceptance; draw every "
                "token from the row it is judged by, and take randomness only from rng"
            )
        else:
            hint = greedy_hint(tokens, accepts, expected, case, policy)
        kept = "" if accepts is None else f", kept {list(accepts)}"
        summary = f"tokens {list(tokens)}{kept}; expected {list(want_tokens)}" + (
            "" if accepts is None else f", kept {list(want_accepts)}"
        )
        return Outcome(False, summary, story, hint, n=case.n)

    return Check(f"loop-callables/{case.name}", what, False, run)


def greedy_hint(tokens, accepts, expected, case: LoopCase, policy: str) -> str:
    want_tokens, want_accepts = expected
    if tokens == want_tokens:
        if accepts is not None and len(accepts) == len(want_accepts):
            if [a - 1 for a in accepts] == list(want_accepts):
                return (
                    "accepted_per_round counts the tokens each round emitted (accepted + 1); "
                    "it must count the drafts kept, 0..k"
                )
        emitted = 0
        for r, a in enumerate(accepts or ()):
            remaining = case.max_new_tokens - emitted
            if a > draft_length(policy, case.k, remaining):
                return (
                    f"round {r + 1} kept {a} drafts with {remaining} token(s) left to "
                    f"generate: a round drafts min(k, remaining - 1) tokens, since it emits up "
                    f"to k_round + 1 (declare --policy full if yours always drafts k and cuts "
                    f"at the limit)"
                )
            emitted += a + 1
        return (
            "the tokens are right but accepted_per_round is not: one entry per round, the "
            "number of drafts kept; a round drafts min(k, remaining - 1) tokens (declare "
            "--policy full if yours always drafts k and cuts at the limit)"
        )
    if case.eos_id is not None and case.eos_id in tokens[:-1]:
        return f"tokens come after EOS ({case.eos_id}): cut a round's tokens just after EOS, stop"
    if len(tokens) > case.max_new_tokens:
        return f"{len(tokens)} tokens, more than max_new_tokens: cut the last round at the limit"
    if tokens == want_tokens[: len(tokens)]:
        return "the run stopped early, before max_new_tokens and without EOS"
    wrong = first_difference(tokens, want_tokens)
    starts = round_starts(want_accepts)
    if wrong in starts[1:]:
        r = starts.index(wrong)
        return (
            f"token {wrong + 1} is the first of round {r + 1}: the context the next round "
            f"drafts and verifies after is the prompt plus every token emitted so far (the "
            f"kept drafts and the new token), never the rejected drafts"
        )
    return (
        f"token {wrong + 1} differs from the target's argmax: draft i is judged by "
        f"target_next(context + drafts[:i]), the target's row *before* it, and the token after "
        f"a rejection is the target's own choice there (the residual of one-hot rows)"
    )


def round_starts(accepts) -> list[int]:
    # drafts kept per round -> the index of each round's first token (a round emits a + 1)
    return [sum(a + 1 for a in accepts[:r]) for r in range(len(accepts))]


# --------------------------------------------------------------------------------------------
# Sampled cases
# --------------------------------------------------------------------------------------------


def sampled_checks(case: LoopCase, policy: str, runs: Runs) -> list[Check]:
    def law_check(law_name: str, key, what: str) -> Check:
        def run(sub: Submission, threshold: float, look: int) -> Outcome:
            laws = case_laws(case, policy)
            counts = runs.counts(sub, look)
            n = counts.total()
            if law_name != "tokens" and not rounds_reported(counts):
                return Outcome(True, "not checked: no accepted_per_round returned (optional)", n=n)
            observed = Counter()
            for o, c in counts.items():
                observed[key(o)] += c
            cmp = compare(observed, laws[law_name])
            summary = f"{len(laws[law_name])} outcomes, p = {cmp.p_value:.2g}"
            if cmp.p_value >= threshold:
                return Outcome(True, summary, p_value=cmp.p_value, n=n)
            story = [
                f"{n} runs: prompt {list(case.prompt)}, k = {case.k}, max_new_tokens = "
                f"{case.max_new_tokens}, T = {case.temperature:g}"
                + (f", top-k {case.top_k}" if case.top_k else "")
                + (f", EOS = {case.eos_id}" if case.eos_id is not None else ""),
                f"largest deviations: {cmp.worst()}; total variation {cmp.distance:.3f}",
            ]
            hint = (
                tokens_hint(case, counts, cmp, laws)
                if law_name == "tokens"
                else rounds_hint(law_name, case, cmp, laws, policy)
            )
            return Outcome(False, summary, story, hint, cmp.p_value, n)

        return Check(f"loop-callables/{case.name}:{law_name}", what, True, run)

    return [
        law_check("tokens", lambda o: o[0], "generated tokens vs the target's own law"),
        law_check("round1", lambda o: o[1][0], "drafts kept in round 1"),
        law_check("round2", lambda o: o[1][1] if len(o[1]) > 1 else None, "drafts kept in round 2"),
    ]


def tokens_hint(case: LoopCase, counts: Counter, cmp, laws: dict) -> str:
    zero_mass = (
        "under the target's row there: a draft was emitted without being judged by the "
        "target's row before it, or the token after a rejection was drawn from a row with mass "
        "where p = 0 (the residual is max(0, p - q), normalised)"
    )
    impossible = impossible_run_hint(case, cmp, laws, zero_mass)
    if impossible:
        return impossible
    if first_token_is_off(counts, laws):
        return (
            "already the first token's law is off: accept draft i with min(1, p_i(x) / q_i(x)), "
            "where q_i is the row it was drawn from (draft_next's) and p_i = target_next(context "
            "+ drafts[:i]); after a rejection draw from norm(max(0, p_i - q_i)); after k "
            "acceptances draw the bonus from target_next(context + drafts)"
        )
    return (
        "the first token is right but later ones are not: each round must start from the prompt "
        "plus every token emitted so far (not the rejected drafts), and judge draft i with the "
        "target's row after the drafts before it"
    )


def rounds_hint(law_name: str, case: LoopCase, cmp, laws: dict, policy: str) -> str:
    allowed = {a for a in laws[law_name] if a is not None}
    if any(a is not None and a > max(allowed) for a in cmp.impossible):
        return (
            "a round kept more drafts than it may draft: with the 'shrink' policy a round drafts "
            "min(k, remaining - 1) tokens (none when one token is left); if yours always drafts "
            "k and cuts at the limit, grade it with --policy full"
            if policy == "shrink"
            else "a round kept more than k drafts: accepted_per_round counts the drafts kept"
        )
    return (
        f"the tokens are right but the drafts kept in {law_name.replace('round', 'round ')} are "
        f"not: accepted_per_round must count the drafts kept (not the tokens emitted), and each "
        f"draft's q must be the row it was drawn from; or your round drafts another number "
        f"of tokens than the {policy!r} policy says (--policy)"
    )


# --------------------------------------------------------------------------------------------
# The calls
# --------------------------------------------------------------------------------------------


def calls_check(cases: list[tuple[LoopCase, Runs]]) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        rows = tokens = rounds = 0
        for case, runs in cases:
            counts = runs.counts(sub, 0)  # the quick looks: already drawn by the law checks
            for (out, accepts, calls), c in counts.items():
                problem = calls_problem(case, out, accepts, calls)
                if problem:
                    story = [
                        f"a run of {case.name}: prompt {list(case.prompt)}, k = {case.k}, "
                        f"tokens {list(out)}"
                        + (f", drafts kept per round {list(accepts)}" if accepts else ""),
                        f"target_next: {calls.target_new} rows asked (contexts as long as "
                        f"the prompt or longer), {calls.target_repeats} asked again; "
                        f"draft_next: {calls.draft_calls} calls, {calls.draft_repeats} again",
                    ]
                    return Outcome(False, problem[0], story, problem[1], n=counts.total())
                rows += c * calls.target_new
                tokens += c * len(out)
                rounds += c * len(accepts) if accepts else 0
        per_round = f", {rows / rounds:.2f} per round" if rounds else ""
        summary = f"target rows: {rows / tokens:.2f} per emitted token{per_round}; none asked twice"
        return Outcome(True, summary, n=tokens, measure=rows / tokens)

    what = "the draft is asked, no row asked twice, at most k + 1 target rows per round"
    return Check("loop-callables/calls", what, False, run)


def calls_problem(case: LoopCase, out, accepts, calls: Calls) -> tuple[str, str] | None:
    """(summary, hint) of what one run asked wrongly of the callables, or None."""
    if calls.draft_calls == 0:
        return (
            "draft_next was never called",
            "your loop never asks draft_next: that is plain sampling from the target, not "
            "speculative decoding (draft k tokens from q, then judge them with p)",
        )
    if calls.target_repeats or calls.draft_repeats:
        who = "target_next" if calls.target_repeats else "draft_next"
        return (
            f"{who} was asked the same context twice in one run",
            f"your loop asks {who} again for a context it already had the row of: a real "
            f"pass computes each position once (that is what a KV cache is for). Keep the rows "
            f"you computed (a dict memo around the callable will do), and do not recompute "
            f"the whole sequence each round",
        )
    if accepts and calls.target_new > (case.k + 1) * len(accepts):
        return (
            f"{calls.target_new} target rows in {len(accepts)} rounds",
            f"more target rows than one verification pass per round gives (k + 1 = "
            f"{case.k + 1}: one row per draft and the bonus row); a round asks the target only "
            f"about context + drafts[:i], i = 0..k",
        )
    if accepts and calls.draft_new > (case.k + 1) * len(accepts):
        return (
            f"{calls.draft_new} draft rows in {len(accepts)} rounds",
            f"more draft rows than k + 1 = {case.k + 1} per round (k drafts, and one catch-up "
            f"row after a round that kept every draft): q_{{k+1}} is never needed",
        )
    return None


# --------------------------------------------------------------------------------------------
# The family
# --------------------------------------------------------------------------------------------


def callables_families(policy: str = "shrink", runs: int | None = None) -> list[Family]:
    """The family; `runs` replaces the sampled cases' LOOP_RUNS runs (a quick test of an
    adapter: fewer runs, less power, the same false-alarm rate)."""
    exact = [
        greedy_check(case, f"greedy: {what}", policy, Runs(case_runs(case), case.n, 1.0))
        for case, what in GREEDY
    ]
    cases = [replace(case, n=runs) if runs else case for case in SAMPLED]
    sampled_runs = [(case, Runs(case_runs(case), case.n, QUICK_LOOK)) for case in cases]
    sampled = [c for case, runs in sampled_runs for c in sampled_checks(case, policy, runs)]
    family = Family(
        "loop-callables",
        "your loop through two next-token callables",
        exact + sampled + [calls_check(sampled_runs)],
    )
    return [family]

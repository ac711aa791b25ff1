"""The checks of a submitted prompt-lookup drafter,
`propose_lookup(context, k, n_vocab, max_ngram=3) -> (draft_tokens [m], q_rows [m, V])`.

One family, "lookup". A proposal is a function of the context (nothing is drawn), so every
check is exact: one wrong proposal is proof, and a correct drafter never fails. In order:

1. the length bound: never more than k tokens, on every context below;
2. no match: where the last token occurs nowhere earlier (its only occurrence is the end
   itself), when k = 0, and for a one-token context, the proposal is empty and q is [0, V];
3. q rows: row i is one-hot at draft i (a copied token is chosen, not drawn: its law is a
   point mass, which is what makes `verify` exact);
4. fixed contexts, one per convention: the longest n first, the most recent occurrence, an
   occurrence that overlaps the end, a copy cut short by the end of the text;
5. 300 random contexts over V = 3 (so matches are common), k in 0..4, max_ngram 1..4, drawn
   afresh for each grading from its secret (engine/secret.py): a table of the shown contexts
   fails them;
6. in the loop: wrapped in a drafter, inside the reference loop on the tiny GPT pair at
   greedy, the output must be the target's own greedy text, with the drafts kept per round
   that the contract's proposals get.

Each failure shows the shortest context that shows it. The hint comes from the evidence: the
submission's answers are held against the usual mistakes, each written below as a variant of
the rule, on every context where the submission and the contract differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np

from specdec.grading.engine.core import Check, Family, Outcome
from specdec.grading.engine.laws import ModelRows, generation_law
from specdec.grading.engine.quoting import one_line, shown_value
from specdec.grading.engine.replies import whole_numbers
from specdec.grading.engine.secret import grader_rng, grading_secret
from specdec.grading.engine.submission import (
    Submission,
    SubmissionCrash,
    call_safely,
    show_inputs,
)
from specdec.grading.exercises.loop.checks import V as LOOP_V
from specdec.grading.exercises.loop.checks import tiny_pair
from specdec.grading.project import Draft, Drafter, SamplingParams, speculative_generate

Context = tuple  # tuple[int, ...]
Answer = tuple  # (draft tokens as a tuple of ints, q rows as a float64 array)

# --------------------------------------------------------------------------------------------
# The rule, written here from its statement, and the usual mistakes as switches away from it
# --------------------------------------------------------------------------------------------


def match_ends(context: Context, n: int, *, itself: bool, overlap: bool) -> list[int]:
    # the ends e of the occurrences context[e-n:e] of the last n tokens, newest first.
    # The contract: e <= T - 1 (at least one token follows), overlapping the end allowed.
    # itself: e = T counts too (the last n tokens match themselves); overlap False: the
    # occurrence must end before the last n tokens start (e <= T - n)
    T = len(context)
    last = T if itself else (T - 1 if overlap else T - n)
    suffix = context[T - n :]
    return [e for e in range(last, n - 1, -1) if context[e - n : e] == suffix]


@dataclass(frozen=True)
class Rule:
    """Prompt lookup: for n = min(max_ngram, T - 1) down to 1, the first n whose last n
    tokens occur earlier wins; copy up to k tokens after its most recent occurrence."""

    oldest: bool = False  # copy after the first occurrence instead of the most recent
    itself: bool = False  # the last n tokens count as an occurrence of themselves
    overlap: bool = True  # an occurrence may overlap the last n tokens
    copy_ngram: bool = False  # copy the matched n tokens instead of what follows them
    extra: int | None = 0  # tokens copied beyond k (None: everything up to the end)
    shortest_first: bool = False  # try n = 1 first

    def propose(self, context: Context, k: int, max_ngram: int) -> Context:
        T = len(context)
        if self.extra is not None and k + self.extra <= 0:
            return ()
        ns = list(range(min(max_ngram, T - 1), 0, -1))
        for n in reversed(ns) if self.shortest_first else ns:
            ends = match_ends(context, n, itself=self.itself, overlap=self.overlap)
            if ends:
                e = ends[-1] if self.oldest else ends[0]
                start = e - n if self.copy_ngram else e
                stop = None if self.extra is None else start + k + self.extra
                return tuple(context[start:stop])
        return ()


CONTRACT = Rule()

ITSELF_HINT = (
    "The last n tokens always occur at the end of the context: that occurrence is the "
    "suffix itself, with nothing after it, so it is no match. Search only the occurrences "
    "context[e-n:e] that end at e <= T - 1 (at least one token follows them); an "
    "occurrence that merely overlaps the suffix is fine"
)
MISTAKES = (  # (the mistake, its hint), in the order they are tried
    (
        Rule(itself=True),
        "you propose nothing where an earlier occurrence exists: most likely your search "
        "finds the last n tokens themselves first. " + ITSELF_HINT,
    ),
    (
        Rule(itself=True, copy_ngram=True),
        "you copy the last n tokens themselves: your search matched the suffix with itself "
        "and copied the matched tokens. " + ITSELF_HINT,
    ),
    (
        Rule(oldest=True),
        "you copy after the oldest occurrence of the last n tokens; the contract copies after "
        "the most recent one (the largest end e: scan from the end of the context backwards "
        "and stop at the first hit)",
    ),
    (
        Rule(copy_ngram=True),
        "off by n: you copy the matched n tokens themselves (context[e-n : e-n+k]) instead of "
        "the tokens that follow them, context[e : e+k]",
    ),
    (
        Rule(extra=1),
        "you copy k + 1 tokens: the proposal is context[e : e + k], at most k tokens",
    ),
    (
        Rule(extra=None),
        "you copy everything after the occurrence: cut the proposal at k tokens, "
        "context[e : e + k]",
    ),
    (
        Rule(shortest_first=True),
        "you try n = 1 first: the contract tries the longest n first (n = min(max_ngram, "
        "T - 1) down to 1) and the first n that occurs earlier wins, since a longer match is "
        "better evidence",
    ),
    (
        Rule(overlap=False),
        "you skip occurrences that overlap the last n tokens; the contract allows them (any "
        "end e <= T - 1): in 'a b a b a', the last 'a b a' occurs at the start, overlapping",
    ),
)


# --------------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LookupCase:
    context: Context
    k: int
    max_ngram: int
    n_vocab: int
    about: str = ""  # the convention this case shows, for the story


FIXED_V = 4
FIXED = (
    LookupCase((0, 1, 2, 3, 0, 1), 3, 3, FIXED_V, "'0 1' occurs once earlier: copy what follows"),
    LookupCase((0, 1, 2, 0, 1, 3, 0, 1), 3, 3, FIXED_V, "'0 1' occurs twice: the most recent"),
    LookupCase((0, 1, 2, 3, 1, 2, 0, 1, 2), 3, 3, FIXED_V, "'0 1 2' (n = 3) beats a newer '1 2'"),
    LookupCase((1, 0, 1, 0, 1), 3, 3, FIXED_V, "'1 0 1' occurs at the start, overlapping"),
    LookupCase((3, 2, 2, 2), 3, 3, FIXED_V, "'2 2' ends one before the end: one token follows"),
    LookupCase((2, 0, 1, 3, 2), 2, 1, FIXED_V, "max_ngram = 1: the last token alone"),
    LookupCase((1, 2, 3, 1, 2, 0, 1, 2), 4, 2, FIXED_V, "max_ngram = 2, k = 4"),
    LookupCase((0, 3, 1, 0, 3), 1, 3, FIXED_V, "k = 1: one token"),
)
NO_MATCH = (
    LookupCase((0, 1, 2, 3), 3, 3, FIXED_V, "the last token occurs only at the end"),
    LookupCase((2, 1, 0, 2, 1, 0, 3), 3, 2, FIXED_V, "'0 3' and '3' occur only at the end"),
    LookupCase((3,), 3, 3, FIXED_V, "one token: nothing comes before it"),
    LookupCase((0, 1, 0, 1, 0), 0, 3, FIXED_V, "k = 0: nothing is asked for"),
)
RANDOM_V = 3
RANDOM_COUNT = 300
RANDOM_SEED = 2024  # the grader's stream (from the grading's secret) of the random contexts


@lru_cache(maxsize=4)
def random_cases(secret: int) -> tuple[LookupCase, ...]:
    # RANDOM_COUNT distinct (context, k, max_ngram) of one grading, from its secret
    rng = grader_rng(RANDOM_SEED, secret)
    cases: dict[LookupCase, None] = {}
    while len(cases) < RANDOM_COUNT:
        T = int(rng.integers(1, 13))
        context = tuple(int(t) for t in rng.integers(0, RANDOM_V, size=T))
        k, max_ngram = int(rng.integers(0, 5)), int(rng.integers(1, 5))
        cases[LookupCase(context, k, max_ngram, RANDOM_V)] = None
    return tuple(cases)


def all_cases() -> tuple[LookupCase, ...]:
    return NO_MATCH + FIXED + random_cases(grading_secret())


# --------------------------------------------------------------------------------------------
# Calling the submission
# --------------------------------------------------------------------------------------------


def describe(case: LookupCase) -> str:
    return (
        f"propose_lookup(context={list(case.context)}, k={case.k}, n_vocab={case.n_vocab}, "
        f"max_ngram={case.max_ngram})"
    )


def breach(message: str, case: LookupCase, shown: dict) -> SubmissionCrash:
    crash = SubmissionCrash(
        ValueError(message), "the value your propose_lookup returned", show_inputs(**shown)
    )
    crash.call = describe(case)
    return crash


def call_lookup(sub: Submission, case: LookupCase) -> Answer:
    """One call on a fresh copy of the context -> (tokens, q [m, V] float64 or as returned).

    A raise is reported at the student's line; a value that is not (tokens, q) is a breach
    of the contract. What the checks judge (length, rows, tokens) is left to them."""
    context = np.array(case.context, dtype=np.int64)
    shown = {"context": context.copy(), "k": case.k, "n_vocab": case.n_vocab}
    shown["max_ngram"] = case.max_ngram
    args = (context, case.k, case.n_vocab, case.max_ngram)
    try:
        result = call_safely(sub, args, {}, shown, "propose_lookup")
    except SubmissionCrash as crash:
        if not crash.call or crash.call.startswith("propose_lookup("):
            crash.call = describe(case)  # its own call, without the verify's `rng`
        raise
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        said = shown_value(result)
        raise breach(f"must return (draft_tokens, q_rows); it returned {said}", case, shown)
    try:  # ints a report can print (an int of 5,000 digits cannot be), at most LOOKUP_MOST
        tokens = whole_numbers(result[0], "draft_tokens", LOOKUP_MOST, -(2**63), 2**63 - 1)
    except ValueError as error:
        said = shown_value(result[0])
        message = f"draft_tokens must be a 1-D array of ints, got {said} ({error})"
        raise breach(message, case, shown) from None
    if isinstance(result[1], (list, tuple)) and len(result[1]) > LOOKUP_MOST:
        message = f"q_rows has {len(result[1]):,} rows, one per proposed token (at most k)"
        raise breach(message, case, shown)
    try:
        q = np.asarray(result[1], dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as error:
        said = f"{shown_value(result[1])} ({one_line(f'{type(error).__name__}: {error}')})"
        raise breach(f"q_rows must be an array of floats, got {said}", case, shown) from None
    return tuple(tokens), q


LOOKUP_MOST = 1000  # tokens (and q rows) an answer may hold: far more than any case's k


ANSWERS: dict = {}  # the answers of the last submission graded: {case: Answer}, "sub"


def answers(sub: Submission, cases) -> dict[LookupCase, Answer]:
    """The submission's answer on each case, each computed once per submission."""
    if ANSWERS.get("sub") is not sub:
        ANSWERS.clear()
        ANSWERS["sub"] = sub
    for case in cases:
        if case not in ANSWERS:
            ANSWERS[case] = call_lookup(sub, case)
    return {case: ANSWERS[case] for case in cases}


# --------------------------------------------------------------------------------------------
# The hint, read from every context where the submission and the contract differ
# --------------------------------------------------------------------------------------------


def diagnose(wrong: dict[LookupCase, Context]) -> str:
    """{case: the submission's tokens} on the cases it got wrong -> the mistake they fit."""
    for rule, hint in MISTAKES:
        if all(rule.propose(c.context, c.k, c.max_ngram) == got for c, got in wrong.items()):
            return hint
    case = shortest(wrong)
    got, want = wrong[case], CONTRACT.propose(case.context, case.k, case.max_ngram)
    return (
        f"on {list(case.context)} (k = {case.k}, max_ngram = {case.max_ngram}) you propose "
        f"{list(got)}, the contract {list(want)}. Step by step: for n = min(max_ngram, T - 1) "
        f"down to 1, take the last n tokens; find their most recent earlier occurrence "
        f"context[e-n:e] with e <= T - 1; if there is one, return context[e : e + k]"
    )


def evidence(sub: Submission, wrong: dict[LookupCase, Context]) -> dict[LookupCase, Context]:
    """Every context, of all the checks', where the submission differs from the contract: a
    mistake must explain all of them (a few cases alone may fit several)."""
    try:
        seen = answers(sub, all_cases())
    except SubmissionCrash:  # it crashes on another check's context: judge on these alone
        return wrong
    more = {
        c: a[0] for c, a in seen.items() if a[0] != CONTRACT.propose(c.context, c.k, c.max_ngram)
    }
    return {**more, **wrong}


def shortest(cases) -> LookupCase:
    return min(cases, key=lambda c: (len(c.context), c.k, c.context))


def proposal_story(case: LookupCase, got: Context) -> list[str]:
    want = CONTRACT.propose(case.context, case.k, case.max_ngram)
    lines = [
        f"the shortest context that shows it: {describe(case)}"
        + (f"  ({case.about})" if case.about else ""),
        f"expected draft_tokens {list(want)}; yours {list(got)}",
    ]
    return lines


# --------------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------------


def length_check() -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        seen = answers(sub, all_cases())
        long = {c: a[0] for c, a in seen.items() if len(a[0]) > c.k}
        if not long:
            return Outcome(True, f"at most k tokens on {len(seen)} contexts", n=len(seen))
        case = shortest(long)
        story = [
            f"{describe(case)} proposed {len(long[case])} tokens, {list(long[case])}; at most "
            f"k = {case.k} are allowed (the loop asks for k and verifies no more)",
            f"{len(long)} of {len(seen)} contexts got more than k tokens",
        ]
        hint = next(
            (h for r, h in MISTAKES if r.extra != 0 and fits(r, long)),
            "a proposal has at most k tokens: return context[e : e + k], which the end of "
            "the context may cut shorter",
        )
        summary = f"{len(long)} of {len(seen)} proposals longer than k"
        return Outcome(False, summary, story, hint, n=len(seen))

    return Check("lookup/length", "never more than k tokens", False, run)


def fits(rule: Rule, wrong: dict[LookupCase, Context]) -> bool:
    return all(rule.propose(c.context, c.k, c.max_ngram) == got for c, got in wrong.items())


def no_match_check() -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        seen = answers(sub, NO_MATCH)
        wrong = {c: a[0] for c, a in seen.items() if a[0]}
        if not wrong:
            return Outcome(True, f"nothing proposed on {len(seen)} contexts", n=len(seen))
        case = next(c for c in NO_MATCH if c in wrong)  # in the order above: simplest first
        story = [
            f"{describe(case)}: {case.about}, so nothing may be proposed (an empty array, "
            f"and q of shape [0, {case.n_vocab}]); yours {list(wrong[case])}",
        ]
        tail = case.context[len(case.context) - len(wrong[case]) :]
        if case.k == 0:
            hint = "with k = 0 nothing is asked for: return no tokens (at most k)"
        elif wrong[case] == tail or fits(MISTAKES[1][0], wrong):
            hint = MISTAKES[1][1]
        else:
            hint = diagnose(wrong)
        summary = f"proposed {list(wrong[case])} where nothing matches"
        return Outcome(False, summary, story, hint, n=len(seen))

    return Check(
        "lookup/no-match", "no earlier occurrence (the end itself is none): no tokens", False, run
    )


POINT_MASS_HINT = (
    "q must be the law each draft was drawn from. A copied token is chosen, not drawn, so "
    "its law is the point mass one-hot(x). Then verify keeps x with min(1, p(x)/1) = p(x), and "
    "after a refusal samples norm(max(0, p - one-hot(x))) = p without x, renormalised: token "
    "y comes out with p(x)[y = x] + (1 - p(x)) p(y)/(1 - p(x)) = p(y), the target's law. The "
    "proof needs P(x proposed) = q(x); with a soft q (uniform, a softmax over counts of what "
    "followed) that is false: x is proposed with probability 1, kept with "
    "min(1, p(x)/q(x)) > p(x) whenever q(x) < 1, and the output leans toward the copied "
    "token. Return np.eye(n_vocab)[draft_tokens]"
)


def q_rows_check() -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        seen = answers(sub, all_cases())
        bad = {c: a for c, a in seen.items() if not point_masses(c, *a)}
        if not bad:
            return Outcome(True, f"one-hot rows at the drafts on {len(seen)} contexts", n=len(seen))
        case = min(bad, key=lambda c: (len(bad[c][0]) == 0, len(c.context), c.k))
        tokens, q = bad[case]
        V = case.n_vocab
        with np.printoptions(precision=3, suppress=True):
            story = [
                f"{describe(case)} -> draft_tokens {list(tokens)}",
                f"expected q_rows = np.eye({V})[draft_tokens], shape [{len(tokens)}, {V}]",
                f"yours, shape {list(q.shape)}:\n{q}",
            ]
        if q.shape != (len(tokens), V):
            hint = (
                f"q_rows must have shape [m, V] = [{len(tokens)}, {V}]: one row per proposed "
                f"token, even with no token (np.zeros((0, V)))"
            )
        elif np.allclose(q.sum(axis=1), 1.0) and np.all(q >= 0) and is_one_hot(q):
            hint = (
                "your rows are one-hot but not at the drafts: row i must be one-hot at "
                "draft_tokens[i] (the point mass of the i-th copied token)"
            )
        elif np.allclose(q.sum(axis=1), 1.0) and np.all(q >= 0):
            hint = POINT_MASS_HINT
        else:
            hint = "each row of q_rows is a distribution over V tokens: one-hot at its draft"
        summary = f"{len(bad)} of {len(seen)} contexts: q is not one-hot at the drafts"
        return Outcome(False, summary, story, hint, n=len(seen))

    return Check("lookup/q-rows", "q rows one-hot at the drafts (a point mass)", False, run)


def is_one_hot(q: np.ndarray) -> bool:
    return bool(np.all((q == 0) | (q == 1)) and np.all(q.sum(axis=1) == 1))


def point_masses(case: LookupCase, tokens: Context, q: np.ndarray) -> bool:
    # q [m, V] is exactly one-hot at each token
    if q.shape != (len(tokens), case.n_vocab) or any(not 0 <= t < case.n_vocab for t in tokens):
        return False
    return bool(np.array_equal(q, np.eye(case.n_vocab)[list(tokens)].reshape(q.shape)))


def proposals_check(name: str, what: str, cases) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        seen = answers(sub, cases())
        wrong = {
            c: a[0]
            for c, a in seen.items()
            if a[0] != CONTRACT.propose(c.context, c.k, c.max_ngram)
        }
        if not wrong:
            return Outcome(True, f"the contract's proposal on {len(seen)} contexts", n=len(seen))
        case = shortest(wrong)
        story = proposal_story(case, wrong[case])
        story.append(f"{len(wrong)} of {len(seen)} contexts differ")
        summary = f"{len(wrong)} of {len(seen)} proposals differ"
        return Outcome(False, summary, story, diagnose(evidence(sub, wrong)), n=len(seen))

    return Check(f"lookup/{name}", what, False, run)


# --------------------------------------------------------------------------------------------
# In the loop: the submission as a drafter, at greedy
# --------------------------------------------------------------------------------------------

LOOP_PROMPTS = ((3, 2, 1, 1, 3), (1, 4, 1, 1, 3))  # rounds that keep 0 to 3 drafts
LOOP_K, LOOP_NEW_TOKENS, LOOP_NGRAM = 3, 10, 3  # 15 tokens: the tiny pair's n_ctx is 16


def plugin(propose, n_vocab: int, n_ctx: int):
    """A drafter for the reference loop around `propose(context, k) -> (tokens, q)`: no
    state, so reset / prefill / commit / rollback have nothing to do."""

    class LookupPlugin(Drafter):
        def __init__(self) -> None:
            self.n_vocab, self.n_ctx = n_vocab, n_ctx

        def reset(self) -> None:
            pass

        def prefill(self, tokens) -> None:
            pass

        def propose(self, context, k, sampling, rng):
            tokens, q = propose(tuple(int(t) for t in context), k)
            return Draft(np.asarray(tokens, dtype=np.int64), np.asarray(q, dtype=np.float64))

        def commit(self, n_accepted: int) -> None:
            pass

        def rollback(self) -> None:
            pass

    return LookupPlugin()


def greedy_run(propose, prompt: Context) -> tuple[Context, Context]:
    """One greedy run of the reference loop with `propose` as the drafter -> (tokens, kept)."""
    target, _ = tiny_pair()
    drafter = plugin(propose, target.n_vocab, target.config.n_ctx)
    result = speculative_generate(
        target,
        drafter,
        list(prompt),
        k=LOOP_K,
        max_new_tokens=LOOP_NEW_TOKENS,
        rng=np.random.default_rng(0),  # greedy: nothing is drawn, so the seed cannot matter
        sampling=SamplingParams(0.0),
    )
    return tuple(result.tokens), tuple(result.stats.accepted_per_round)


@cache
def expected_run(prompt: Context) -> tuple[Context, Context]:
    """The target's greedy text (from its own rows) and the drafts the contract's proposals
    get kept per round."""
    target, _ = tiny_pair()
    ((greedy, _),) = generation_law(ModelRows(target, 0.0), prompt, LOOP_NEW_TOKENS, None).items()

    def contract(context: Context, k: int):
        tokens = CONTRACT.propose(context, k, LOOP_NGRAM)
        return tokens, np.eye(target.n_vocab)[list(tokens)].reshape(len(tokens), target.n_vocab)

    tokens, kept = greedy_run(contract, prompt)
    assert tokens == greedy, "the reference loop with the contract's lookup is not greedy"
    return greedy, kept


def in_loop_check() -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        def propose(context: Context, k: int):
            return call_lookup(sub, LookupCase(context, k, LOOP_NGRAM, LOOP_V))

        for prompt in LOOP_PROMPTS:
            want_tokens, want_kept = expected_run(prompt)
            try:
                tokens, kept = greedy_run(propose, prompt)
            except SubmissionCrash:
                raise
            except (TypeError, ValueError) as error:  # the loop refused a proposal
                story = [f"greedy, prompt {list(prompt)}, k = {LOOP_K}: the loop raised {error}"]
                hint = (
                    "the reference loop refused one of your proposals: draft_tokens must be "
                    "ints in 0..V-1, at most k of them, with q_rows of shape [m, V] whose rows "
                    "are distributions giving each draft a positive probability"
                )
                return Outcome(False, "the loop refused a proposal", story, hint, n=1)
            if (tokens, kept) == (want_tokens, want_kept):
                continue
            story = [
                f"greedy, prompt {list(prompt)}, k = {LOOP_K}, {LOOP_NEW_TOKENS} new tokens",
                f"expected tokens {list(want_tokens)} (the target's greedy text), drafts kept "
                f"per round {list(want_kept)}",
                f"observed tokens {list(tokens)}, drafts kept per round {list(kept)}",
            ]
            if tokens != want_tokens:
                hint = (
                    "at greedy the loop emits the target's own argmax whatever a drafter "
                    "proposes (a refused draft is replaced by the target's choice), unless q "
                    "gives a draft mass where the target's does not: return one-hot q rows at "
                    "the drafts"
                )
            else:
                hint = (
                    "the text is right, but your drafts inside the loop are kept a different "
                    "number of times than the contract's: your function answers the loop "
                    "otherwise than the grader's own contexts. Keep no state between calls, "
                    "do not modify `context`, and accept any int array for it"
                )
            return Outcome(False, f"prompt {list(prompt)}: differs", story, hint, n=1)
        kept_total = sum(sum(expected_run(p)[1]) for p in LOOP_PROMPTS)
        return Outcome(
            True,
            f"the target's greedy text on {len(LOOP_PROMPTS)} prompts, {kept_total} drafts kept",
            n=len(LOOP_PROMPTS),
        )

    return Check(
        "lookup/in-loop-greedy",
        "as a drafter in the reference loop, greedy: the target's own text",
        False,
        run,
    )


# --------------------------------------------------------------------------------------------
# The family
# --------------------------------------------------------------------------------------------


def lookup_families(policy: str = "shrink") -> list[Family]:
    # `policy` is the loop's round policy; the in-loop check runs the reference loop, whose
    # policy is the default one, so it does not change what is expected here
    checks = [
        length_check(),
        no_match_check(),
        q_rows_check(),
        proposals_check(
            "fixed", "one context per convention: the contract's proposals", lambda: FIXED
        ),
        proposals_check(
            "random",
            f"{RANDOM_COUNT} random contexts, V = 3, drawn afresh for each grading",
            lambda: random_cases(grading_secret()),
        ),
        in_loop_check(),
    ]
    return [
        Family("lookup", "your prompt lookup proposes the contract's point-mass drafts", checks)
    ]

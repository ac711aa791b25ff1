"""The EAGLE alignment exercise's contract, its cases, and the call of a submitted
`catch_up_pairs(context, features, cached) -> (tokens, feats)` on them, each case asked once
per submission and its answer read as two arrays (checks.py judges them). The hand-made groups
are the same in every grading; the random contexts are drawn afresh for each grading from its
secret (engine/secret.py).

The rule, written here from its statement (the reference's EagleDrafter applies it inline, in
its prefill and at the start of each proposal; tests/grader/test_exercise_eagle_align.py
holds the two equal):

    ready = min(n - 1, m)             positions t whose feature f(t) is known AND whose next
                                      token x(t + 1) is committed
    t     = cached, cached + 1, ..., ready - 1     (the cache already holds t < cached)
    tokens[i] = context[t_i + 1]      feats[i] = features[t_i]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from specdec.grading.engine.answers import AskedOnce, give_hint
from specdec.grading.engine.quoting import shown_value
from specdec.grading.engine.secret import grader_rng, grading_secret
from specdec.grading.engine.submission import (
    Submission,
    SubmissionCrash,
    call_each_safely,
    show_inputs,
)

COMMAND = "catch_up_pairs"
C = 4  # the features' width in the cases (the target's n_embd; small, to be read in a story)
V = 1000  # token ids are drawn without repeats from this many, so x(j) names one token


@dataclass(frozen=True)
class Case:
    context: tuple[int, ...]  # x(0..n-1), the committed tokens
    m: int  # features known: f(0..m-1); m = n - 1 in a round, m = n at prefill
    cached: int  # pairs the drafter's cache already holds (t = 0..cached-1)
    about: str = ""  # what the case shows, for the story

    @property
    def n(self) -> int:
        return len(self.context)

    @property
    def ready(self) -> int:  # pairs known in all: t < min(n - 1, m)
        return min(self.n - 1, self.m)

    def features(self) -> np.ndarray:
        # [m, C] float32, the same on every call: distinct rows, so each names its position
        rng = np.random.default_rng([self.m, self.cached, *self.context])
        return rng.standard_normal((self.m, C)).astype(np.float32).round(3)

    def arguments(self) -> tuple:
        # what the submission receives: context [n] int64, features [m, C] float32, an int
        return np.array(self.context, dtype=np.int64), self.features(), self.cached

    def describe(self) -> str:
        return describe_call(np.array(self.context, dtype=np.int64), self.m, self.cached)

    def size(self) -> tuple:  # the smallest case shows a mistake best
        return self.n, self.ready - self.cached, self.m, self.cached, self.context


def describe_call(context: np.ndarray, m: int, cached: int) -> str:
    n = len(context)
    shown = f"f(0..{m - 1})" if m else "none"
    return (
        f"{COMMAND}(context={context.tolist()} (n = {n}), features [{m}, C] ({shown}), "
        f"cached={cached})"
    )


@dataclass(frozen=True)
class Answer:
    tokens: np.ndarray  # as returned, read as an array
    feats: np.ndarray


def rule(context: np.ndarray, features: np.ndarray, cached: int) -> Answer:
    """The contract: (x(t + 1), f(t)) for t = cached .. min(n - 1, m) - 1, in order."""
    t = np.arange(cached, min(len(context) - 1, len(features)))
    return Answer(context[t + 1].astype(np.int64), features[t])


def expected(case: Case) -> Answer:
    return rule(*case.arguments())


def same(got: Answer, want: Answer) -> bool:
    """Exact: the same tokens, and the same feature rows value for value (any dtype that
    holds them: float64 copies of the float32 rows are the same rows)."""
    return (
        got.tokens.shape == want.tokens.shape
        and got.feats.shape == want.feats.shape
        and bool(np.array_equal(got.tokens, want.tokens))
        and bool(np.array_equal(got.feats.astype(np.float64), want.feats.astype(np.float64)))
    )


# --------------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------------


def distinct_tokens(n: int, seed: int) -> tuple[int, ...]:
    return tuple(int(x) for x in np.random.default_rng(seed).choice(V, size=n, replace=False))


def after_a_round(n: int, kept: int, seed: int, about: str = "") -> Case:
    # a round that kept `kept` drafts emitted kept + 1 tokens: that many pairs are new
    return Case(distinct_tokens(n, seed), n - 1, n - 2 - kept, about)


GROUPS: dict[str, tuple[str, tuple[Case, ...]]] = {
    "nothing": (
        "nothing to feed: a one-token context, or every pair already cached",
        (
            Case(distinct_tokens(1, 1), 0, 0, "one token, no feature yet: nothing to pair"),
            Case(
                distinct_tokens(1, 2),
                1,
                0,
                "prefill of a two-token prompt: f(0) is known, "
                "but its next token is not in the context handed over",
            ),
            Case(distinct_tokens(4, 3), 3, 3, "the cache already holds every pair, t = 0..2"),
            Case(distinct_tokens(9, 4), 8, 8, "the cache already holds every pair, t = 0..7"),
        ),
    ),
    "one": (
        "a one-pair catch-up: the round before kept no draft",
        (
            after_a_round(2, 0, 5, "the first round after a two-token prompt"),
            after_a_round(5, 0, 6, "a round that kept no draft: its correction, x(4)"),
            after_a_round(11, 0, 7, "a round that kept no draft: its correction, x(10)"),
        ),
    ),
    "full": (
        "after a full acceptance: k drafts and the bonus, k + 1 pairs",
        tuple(
            after_a_round(n, k, 10 + k, f"k = {k}, every draft kept: {k + 1} pairs")
            for n, k in ((5, 1), (8, 3), (9, 4), (14, 5), (7, 5))
        ),
    ),
    "prefill": (
        "a prefill: nothing cached, one feature more than the tokens can pair (m = n)",
        tuple(
            Case(distinct_tokens(n, 20 + n), n, 0, f"a prompt of {n + 1} tokens, less its last")
            for n in (2, 3, 6, 10)
        ),
    ),
}
N_RANDOM = 300
RANDOM_SEED = 3232  # the grader's stream (from the grading's secret) of the random cases


@lru_cache(maxsize=4)
def random_cases(secret: int, count: int = N_RANDOM) -> tuple[Case, ...]:
    """count contexts of one grading, from its secret, of 1 to 24 tokens: three in four after
    a round (m = n - 1, any number of pairs cached, 0 to n - 1), one in four a prefill (m = n,
    nothing cached)."""
    rng = grader_rng(RANDOM_SEED, secret)
    cases: dict[Case, None] = {}
    while len(cases) < count:
        n = int(rng.integers(1, 25))
        context = distinct_tokens(n, int(rng.integers(2**31)))
        if rng.random() < 0.25:
            cases[Case(context, n, 0)] = None
        else:
            cases[Case(context, n - 1, int(rng.integers(0, n)))] = None
    return tuple(cases)


def group_cases(group: str) -> tuple[Case, ...]:
    return random_cases(grading_secret()) if group == "random" else GROUPS[group][1]


def all_cases() -> tuple[Case, ...]:
    return tuple(c for g in [*GROUPS, "random"] for c in group_cases(g))


# --------------------------------------------------------------------------------------------
# Calling the submission and reading its answer
# --------------------------------------------------------------------------------------------


def shown_of(context: np.ndarray, features: np.ndarray, cached: int) -> dict:
    return {"context": context, "features": features, "cached": cached}


def breach(message: str, call: tuple) -> SubmissionCrash:
    context, features, cached = call
    crash = SubmissionCrash(
        ValueError(message),
        f"the value your {COMMAND} returned",
        show_inputs(**shown_of(*call)),
    )
    crash.call = describe_call(context, len(features), cached)
    crash.hint = (
        "return a tuple (tokens, feats): tokens a 1-D array of token ids [r], feats the "
        "feature rows [r, C] (see the skeleton's docstring)"
    )
    return crash


def read_answer(result, call: tuple) -> Answer:
    """What the submission returned -> two arrays, or the contract it broke. Lengths, shapes
    and values are left to the checks (a wrong length is a mistake they can name), within
    bounds: at most ANSWER_MOST entries and 2 dimensions each (the stories name each pair)."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise breach(f"must return (tokens, feats); it returned {shown_value(result)}", call)
    arrays = []
    for name, value in zip(("tokens", "feats"), result, strict=True):
        if isinstance(value, (list, tuple)) and len(value) > ANSWER_MOST:  # before converting
            raise breach(f"{name} has {len(value):,} rows, one per pair to feed", call)
        try:
            array = np.asarray(value)
        except (TypeError, ValueError, OverflowError):
            raise breach(f"{name} is not an array: {shown_value(value)}", call) from None
        if array.dtype.kind not in "iuf":  # (not bool, object, str, complex)
            raise breach(f"{name} must hold numbers, got {shown_value(value)}", call)
        if array.size > ANSWER_MOST or array.ndim > 2:
            raise breach(
                f"{name} has shape {list(array.shape)}; tokens is 1-D [r] and feats 2-D [r, C]",
                call,
            )
        arrays.append(array)
    return Answer(*arrays)


ANSWER_MOST = 4096  # entries of one returned array: the cases' are a few dozen


def crash_hint(call: tuple, error: BaseException) -> str:
    """Why a correct idea may crash on this call."""
    context, features, cached = call
    n, m = len(context), len(features)
    if isinstance(error, IndexError) and m == n:
        return (
            f"at prefill the drafter knows one feature more than the tokens pair (m = n = {n}): "
            f"f({n - 1}) scored the token after context[-1], not in the context yet. Pair "
            f"t = cached .. min(n - 1, m) - 1 only"
        )
    if isinstance(error, IndexError) and min(n - 1, m) - cached >= 1:
        return (
            f"features holds f(0..{m - 1}) and context x(0..{n - 1}): the last pair is "
            f"(x({min(n - 1, m)}), f({min(n - 1, m) - 1})). Reading f(t + 1) or x(t + 2) "
            f"runs past them: row t pairs the token x(t + 1) with the feature f(t)"
        )
    if min(n - 1, m) <= cached:
        return (
            "nothing to feed here: return an empty tokens array and feats of shape [0, C] "
            "(features[cached:cached] is one)"
        )
    return ""


def call_pairs(sub: Submission, calls: list[tuple]) -> list[Answer]:
    """The submission's answers to calls [(context, features, cached)], in one request when it
    runs in a worker; a raise names the call that raised, with a hint."""
    try:
        results = call_each_safely(
            sub,
            calls,
            (),
            lambda i: shown_of(*calls[i]),
            COMMAND,
            lambda i: describe_call(calls[i][0], len(calls[i][1]), calls[i][2]),
            lambda args: (args[0].copy(), args[1].copy(), args[2]),
        )
    except SubmissionCrash as crash:
        give_hint(crash, calls, lambda c: describe_call(c[0], len(c[1]), c[2]), crash_hint)
        raise
    return [read_answer(r, c) for r, c in zip(results, calls, strict=True)]


# the submission's answer on each case {case: Answer}, asked once per submission and grading
answers = AskedOnce(
    lambda sub, cases: call_pairs(sub, [c.arguments() for c in cases]), grading_secret
)

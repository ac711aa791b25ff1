"""The EAGLE alignment exercise's known mistakes: each rebuilds, from a call's inputs, the
answer a usual slip gives (the feature one position off, the tokens not shifted, the cached
pairs fed again, the last pair dropped, ...), with the hint that names it in the student's
terms. A mistake is named only when it gives the submission's answer on every wrong call.

Each rebuild is written as a student would write the slip, with NumPy's own indexing: a slice
that runs past the end is cut short, an index of -1 reads the last row, an index past the end
raises (that rebuild then fits no call)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specdec.grading.exercises.eagle_align.cases import Answer, rule, same

Call = tuple  # (context [n] int64, features [m, C], cached)


def ready(context: np.ndarray, features: np.ndarray) -> int:
    return min(len(context) - 1, len(features))


def indexed(context, features, t: np.ndarray, token_shift: int = 1, feature_shift: int = 0):
    # (x(t + token_shift), f(t + feature_shift)) for the positions t, by fancy indexing
    return Answer(context[t + token_shift], features[t + feature_shift])


def feature_ahead(context, features, cached) -> Answer:
    return indexed(context, features, np.arange(cached, ready(context, features)), 1, 1)


def feature_ahead_sliced(context, features, cached) -> Answer:
    n = len(context)
    return Answer(context[cached + 1 : n], features[cached + 1 : n])


def feature_behind(context, features, cached) -> Answer:
    return indexed(context, features, np.arange(cached, ready(context, features)), 1, -1)


def tokens_not_shifted(context, features, cached) -> Answer:
    return indexed(context, features, np.arange(cached, ready(context, features)), 0, 0)


def token_two_ahead(context, features, cached) -> Answer:
    # by slices (indexed, x(t + 2) runs past the context at the last pair and raises)
    r = max(ready(context, features) - cached, 0)
    return Answer(context[cached + 2 : cached + 2 + r], features[cached : cached + r])


def cached_fed_again(context, features, cached) -> Answer:
    return rule(context, features, 0)


def one_cached_fed_again(context, features, cached) -> Answer:
    return rule(context, features, max(cached - 1, 0))


def first_pair_skipped(context, features, cached) -> Answer:
    return indexed(context, features, np.arange(cached + 1, ready(context, features)))


def last_pair_dropped(context, features, cached) -> Answer:
    return indexed(context, features, np.arange(cached, ready(context, features) - 1))


def every_feature(context, features, cached) -> Answer:
    # t up to m - 1: at prefill (m = n) the last feature has no next token in the context
    return Answer(context[cached + 1 :], features[cached:])


def reversed_order(context, features, cached) -> Answer:
    want = rule(context, features, cached)
    return Answer(want.tokens[::-1], want.feats[::-1])


Mistake = tuple[str, Callable[..., Answer], str]

FEATURE_AHEAD_HINT = (
    "your feature is one position ahead: you pair x(t + 1) with f(t + 1). f(t) is the "
    "target's feature at position t, the row its output layer read to score x(t + 1): the "
    "pair is (x(t + 1), f(t)), and from it the drafter predicts f(t + 1), which it must "
    "guess, not read. In a round the last pair is (x(n - 1), f(n - 2)): features has no "
    "row n - 1 yet"
)

MISTAKES: list[Mistake] = [
    (
        "cached-fed-again",
        cached_fed_again,
        "you feed again the pairs the drafter's cache already holds: t = 0..cached - 1 were "
        "fed in earlier rounds (or at prefill), and their keys and values sit in the cache's "
        "first `cached` slots. Start at t = cached, or the block would see those positions "
        "twice and the cache would drift away from a fresh prefill",
    ),
    (
        "one-cached-fed-again",
        one_cached_fed_again,
        "you start one pair early, at t = cached - 1: the cache holds t = 0..cached - 1 "
        "(`cached` pairs, slots 0..cached - 1), so pair t = cached - 1 is already in it. "
        "Start at t = cached",
    ),
    (
        "first-pair-skipped",
        first_pair_skipped,
        "you start one pair late, at t = cached + 1: `cached` counts the pairs the cache "
        "holds, t = 0..cached - 1, so the first new one is t = cached itself",
    ),
    ("feature-ahead", feature_ahead, FEATURE_AHEAD_HINT),
    ("feature-ahead-sliced", feature_ahead_sliced, FEATURE_AHEAD_HINT),
    (
        "feature-behind",
        feature_behind,
        "your feature is one position behind: you pair x(t + 1) with f(t - 1). The token "
        "x(t + 1) goes with f(t), the feature that scored it (the target's state after "
        "reading x(0..t)): the drafter reads the token just drawn together with the state "
        "it was drawn from. (At t = 0, f(t - 1) = features[-1] silently reads the last row)",
    ),
    (
        "tokens-not-shifted",
        tokens_not_shifted,
        "your tokens are not shifted: you pair x(t) with f(t). f(t) already holds x(t) (it is "
        "the target's state after reading x(0..t)); what the drafter needs beside it is the "
        "token f(t) scored, the one drawn from its row: x(t + 1). Take tokens = "
        "context[t + 1]",
    ),
    (
        "token-two-ahead",
        token_two_ahead,
        "your tokens are one too far: you pair x(t + 2) with f(t). f(t) scored x(t + 1), the "
        "very next token: the pair is (x(t + 1), f(t))",
    ),
    (
        "last-pair-dropped",
        last_pair_dropped,
        "you drop the last pair, (x(n - 1), f(n - 2)) in a round. It is the one that matters "
        "most: x(n - 1) is the token just committed (the round's correction or bonus), and "
        "the drafter's first guess f^(n - 1) comes out of the block's row for it. The pairs "
        "run t = cached .. min(n - 1, m) - 1, both ends counted",
    ),
    (
        "every-feature",
        every_feature,
        "you pair every known feature, but at prefill the drafter knows one more feature "
        "than the tokens can pair (m = n): f(n - 1) scored the token after context[-1], which "
        "the context handed over does not hold yet. A pair needs both its feature f(t) and its "
        "token x(t + 1): t stops at min(n - 1, m) - 1",
    ),
    (
        "reversed",
        reversed_order,
        "your pairs are in reverse order: the block reads them as a sequence, position by "
        "position, each attending to the ones before it: t = cached first, the newest last",
    ),
]


def rebuilt(rebuild: Callable[..., Answer], call: Call) -> Answer | None:
    # the mistake's answer on this call, or None where the slip itself would raise
    try:
        return rebuild(*call)
    except IndexError:
        return None


def fitting(wrong: list[tuple[Call, Answer]]) -> str:
    """The hint of the first mistake that gives exactly the submission's answer on every
    wrong call, or ''."""
    for _, rebuild, hint in MISTAKES:
        if all((r := rebuilt(rebuild, call)) is not None and same(got, r) for call, got in wrong):
            return hint
    return ""


# --------------------------------------------------------------------------------------------
# Naming what a submission returned: x(j) for a token, f(t) for a feature row
# --------------------------------------------------------------------------------------------


def token_name(context: np.ndarray, value) -> str:
    where = np.flatnonzero(context == value)
    return f"x({where[0]})" if len(where) == 1 else f"token {value}"


def feature_name(features: np.ndarray, row: np.ndarray) -> str:
    row = np.asarray(row, dtype=np.float64)
    if row.shape != features.shape[1:]:
        return f"a row of shape {list(row.shape)}"
    where = [t for t in range(len(features)) if np.array_equal(features[t], row)]
    return f"f({where[0]})" if where else "a row that is none of the features"


def pairs_text(call: Call, answer: Answer) -> str:
    """'(x(3), f(2)), (x(4), f(3))': the pairs an answer feeds, named by position."""
    context, features, _ = call
    tokens, feats = np.atleast_1d(answer.tokens), answer.feats
    rows = feats if feats.ndim == 2 else np.zeros((0, features.shape[1]))
    count = max(len(tokens), len(rows))
    if count == 0:
        return "none"
    parts = []
    for i in range(count):
        token = token_name(context, tokens[i]) if i < len(tokens) else "-"
        feature = feature_name(features, rows[i]) if i < len(rows) else "-"
        parts.append(f"({token}, {feature})")
    return ", ".join(parts)


def generic_hint(call: Call, got: Answer) -> str:
    """No catalogued mistake fits: what the contract wants on this call, and the first row
    that differs."""
    context, features, cached = call
    want = rule(*call)
    first, last = cached, ready(context, features) - 1
    span = f"t = {first}..{last}" if last >= first else "no t at all"
    if got.tokens.ndim != 1 or len(got.tokens) != len(want.tokens):
        return (
            f"one pair per position t = cached .. min(n - 1, m) - 1, here {span}: "
            f"{len(want.tokens)} token{'s' * (len(want.tokens) != 1)}, not "
            f"{len(np.atleast_1d(got.tokens))}"
        )
    if got.feats.shape != want.feats.shape:
        return (
            f"feats holds one feature row per pair, shape [r, C] = {list(want.feats.shape)} "
            f"(also when r = 0), not {list(got.feats.shape)}"
        )
    for i, t in enumerate(range(first, last + 1)):
        pair = Answer(got.tokens[i : i + 1], got.feats[i : i + 1])
        if not same(pair, Answer(want.tokens[i : i + 1], want.feats[i : i + 1])):
            return (
                f"row {i} is position t = cached + {i} = {t}: the pair (x({t + 1}), f({t})); "
                f"yours is {pairs_text(call, pair)}. Row i pairs the token x(t + 1) with the "
                f"feature f(t), the target's state that scored it"
            )
    return ""

"""Drafting without a second model: prompt lookup (n-gram) drafts, and a hybrid.

Text often repeats itself: code repeats names and lines, a summary repeats its source, a
chat repeats the question. `LookupDrafter` bets on that. It takes the last n tokens of the
committed context (prompt + generated text), finds an earlier place where the same n
tokens occur, and proposes the tokens that followed them there:

    context  ... a b c d ...... x a b c   <- the last n = 3 tokens, "a b c"
                       ^^^^^^^^             proposed: "d ..." (at most k tokens)

It tries n = max_ngram first and goes down to min_ngram; the first n that occurs wins
(a longer match is better evidence). Among the occurrences of that n, `prefer` picks one:
"recent" the last one before the end, "longest" the one followed by the most tokens, up to
k (ties go to the more recent). When nothing matches it proposes nothing, and the round is
a plain target step (k_round = 0: the bonus token from p_1 alone).

Its q is a point mass. The proposal is a function of the committed context, not a sample,
so the law its tokens came from is q_i = one-hot(x_i), and that is what it reports. `verify`
needs nothing else: with q = one-hot(x),

    accept x with probability  min(1, p(x) / q(x)) = p(x)
    on a rejection, sample     norm(max(0, p - one-hot(x))) = p with x removed, renormalised:
                               r(y) = p(y) / (1 - p(x)) for y != x, r(x) = 0
    so  P(emit y) = [y == x] p(x) + (1 - p(x)) r(y) = p(y)    for every y: exact.

Judging such a draft with a soft q (say, the draft model's row for the same token) would
not be exact: q must be the law the token was really drawn from.

Only committed tokens are read. The `context` the loop passes to `propose` is exactly the
committed tokens; the drafter keeps no copy of it and none of its own proposals, so a draft
that was rejected can never be matched later. Hence commit and rollback have nothing to do.

`HybridDrafter(lookup, fallback)` uses the lookup when it matches and a fallback drafter
(e.g. `ModelDrafter(draft)`) otherwise.
"""

from __future__ import annotations

import numpy as np

from reference.checks import as_token_array, check_generator, check_number, check_positive_int
from reference.drafters import (
    Draft,
    Drafter,
    check_drafter,
    drafter_feature_layers,
    proposals_checked,
)
from reference.sampling import SamplingParams, check_sampling, one_hot

PREFERENCES = ("recent", "longest")


def check_preference(prefer) -> str:
    if not isinstance(prefer, str):
        raise TypeError(f"prefer must be a str, one of {PREFERENCES}, got {type(prefer).__name__}")
    if prefer not in PREFERENCES:
        raise ValueError(
            f"prefer must be 'recent' (the last earlier occurrence) or 'longest' (the "
            f"occurrence followed by the most tokens), got {prefer!r}"
        )
    return prefer


def match_end(context: np.ndarray, n: int, k: int, prefer: str) -> int | None:
    # context [T] -> e, where an earlier occurrence context[e-n:e] of the last n tokens ends
    # (its continuation starts at e, with e <= T - 1 so at least one token follows), or None.
    # A plain scan from the end: O(T * n). "recent" stops at the first hit; "longest" keeps
    # the hit with the most tokens after it, min(k, T - e), and stops once that is k.
    T = len(context)
    suffix = context[T - n :]
    best, best_len = None, 0
    for e in range(T - 1, n - 1, -1):  # the occurrence may overlap the suffix itself
        if not np.array_equal(context[e - n : e], suffix):
            continue
        if prefer == "recent":
            return e
        available = min(k, T - e)
        if available > best_len:  # strictly longer: a tie keeps the more recent hit
            best, best_len = e, available
            if best_len == k:
                break
    return best


def lookup_continuation(
    context: np.ndarray, k: int, max_ngram: int, min_ngram: int, prefer: str
) -> np.ndarray:
    # context [T] committed tokens -> [m], 0 <= m <= k: the tokens after the chosen earlier
    # occurrence of the last n tokens, n = max_ngram .. min_ngram (the first n found wins);
    # empty when no n matches (or k == 0). Cost: O(T * max_ngram^2) per call.
    if k > 0:
        for n in range(min(max_ngram, len(context) - 1), min_ngram - 1, -1):
            e = match_end(context, n, k, prefer)
            if e is not None:
                return context[e : e + k].copy()
    return context[:0].copy()


def point_mass_rows(tokens: np.ndarray, n_vocab: int) -> np.ndarray:
    # tokens [m] -> q [m, V]: q_i = one-hot(x_i), the law of a token that was chosen, not drawn
    return one_hot(tokens, n_vocab, np.float32)


class LookupDrafter(Drafter):
    """Prompt lookup: drafts by copying what followed an earlier occurrence of the last n
    tokens of the committed context, with one-hot q rows (see the module docstring)."""

    library_checked = True  # its tokens come from the checked context, its rows are one-hot

    def __init__(
        self,
        n_vocab: int,
        n_ctx: int,
        max_ngram: int = 3,
        min_ngram: int = 1,
        prefer: str = "recent",
    ) -> None:
        # n_vocab: V, the target's; n_ctx: the longest context the loop may pass (the
        # target's); max_ngram >= min_ngram >= 1: the match lengths tried, longest first;
        # prefer: which occurrence of a match to copy from, "recent" or "longest"
        self.n_vocab = check_positive_int(n_vocab, "n_vocab")
        self.n_ctx = check_positive_int(n_ctx, "n_ctx")
        self.max_ngram = check_positive_int(max_ngram, "max_ngram")
        self.min_ngram = check_number(
            min_ngram,
            "min_ngram",
            integer=True,
            allowed=lambda n: 1 <= n <= self.max_ngram,
            where=f"an int in 1..max_ngram = 1..{self.max_ngram}",
        )
        self.prefer = check_preference(prefer)

    def reset(self) -> None:
        pass  # no state: every proposal reads the context it is given

    def prefill(self, tokens) -> None:
        # tokens [n] -> None: nothing to precompute (a scan of the context is cheap enough)
        as_token_array(tokens, self.n_vocab, "tokens", allow_empty=True)

    def propose(
        self, context: np.ndarray, k: int, sampling: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        # context [T] committed tokens -> Draft(tokens [m <= k], q [m, V] one-hot)
        # sampling and rng are not used: a copied token is chosen, not drawn, whatever the
        # temperature, and the point mass q is exactly the law it came from.
        context = as_token_array(context, self.n_vocab, "context")
        k = check_positive_int(k, "k", minimum=0)
        check_sampling(sampling)
        check_generator(rng)
        tokens = lookup_continuation(context, k, self.max_ngram, self.min_ngram, self.prefer)
        return Draft(tokens, point_mass_rows(tokens, self.n_vocab))

    def commit(self, n_accepted: int) -> None:
        pass  # nothing cached: the next context holds the accepted drafts

    def rollback(self) -> None:
        pass  # nothing cached: the rejected drafts were never stored


class HybridDrafter(Drafter):
    """The lookup when it matches, otherwise the fallback drafter (e.g. a ModelDrafter).

    Which one drafts a round is decided from the committed context alone, before the target
    sees anything, so the output law stays the target's (each round is exact for whatever
    drafter proposed it, as for `min_confidence` in docs/algorithm.md).

    Cache discipline. commit(n) and rollback() go to the drafter that proposed this round,
    and only to it. After a lookup round the fallback did not propose: its counters still
    describe its own last round, so a commit(n) that refers to the lookup round would keep
    slots it never wrote (or raise). It is left untouched instead: its cache stays a prefill
    of a prefix of the committed tokens, with nothing temporary. The next time it proposes,
    `catch_up_tokens` feeds every committed token it has not seen, the ones accepted in lookup
    rounds included, in its first forward call of that round; its commit then keeps them.
    So after every round its committed cache equals a fresh prefill of the committed tokens
    it holds (tests/unit/test_lookup.py checks this after every round).
    """

    def __init__(self, lookup: LookupDrafter, fallback: Drafter) -> None:
        check_drafter(fallback)  # every part it will be asked for, optional ones included
        if lookup.n_vocab != fallback.n_vocab:
            raise ValueError(
                f"the lookup and the fallback drafter must share one vocabulary: the lookup "
                f"has {lookup.n_vocab} ids, the fallback {fallback.n_vocab}"
            )
        self.lookup = lookup
        self.fallback = fallback
        self.proposer: Drafter | None = None  # who proposed the current round
        # the layers an EAGLE fallback reads: the loops hand them over (None: none)
        self.feature_layers = drafter_feature_layers(fallback)

    @property
    def n_vocab(self) -> int:
        return self.lookup.n_vocab

    @property
    def n_ctx(self) -> int:
        return min(self.lookup.n_ctx, self.fallback.n_ctx)

    @property
    def library_checked(self) -> bool:  # its drafts are its parts': checked as theirs are
        return proposals_checked(self.lookup) and proposals_checked(self.fallback)

    @property
    def cache(self):  # the fallback's cache (None if it has none): its spans per round
        return self.fallback.cache

    def reset(self) -> None:
        self.lookup.reset()
        self.fallback.reset()
        self.proposer = None

    def prefill(self, tokens) -> None:
        self.lookup.prefill(tokens)
        self.fallback.prefill(tokens)

    def propose(
        self, context: np.ndarray, k: int, sampling: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        # context [T] committed tokens -> Draft(tokens [m <= k], q [m, V])
        draft = self.lookup.propose(context, k, sampling, rng)
        self.proposer = self.lookup
        if len(draft.tokens) == 0:  # no match: the fallback drafts (and catches up)
            self.proposer = self.fallback
            draft = self.fallback.propose(context, k, sampling, rng)
        return draft

    def commit(self, n_accepted: int) -> None:
        if self.proposer is not None:
            self.proposer.commit(n_accepted)

    def rollback(self) -> None:
        if self.proposer is not None:
            self.proposer.rollback()
        self.proposer = None  # the round is over: no later commit may refer to it

    def observe(self, h: np.ndarray) -> None:
        # a fallback that drafts from the target's state (extra heads) needs it after every
        # round, whoever proposed: the next round may be its (a Drafter's default ignores it)
        self.fallback.observe(h)

    def observe_features(self, x: np.ndarray) -> None:
        # the same for the target's features (an EAGLE fallback catches up on them)
        self.fallback.observe_features(x)

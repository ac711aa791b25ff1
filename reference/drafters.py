"""Drafters: whatever proposes k candidate tokens and the distributions q they came from.

Every drafter answers three calls per round:

    propose(context, k, sampling, rng) -> Draft(tokens [k], q [k, V])
    commit(n_accepted)                 -> keep the state of the accepted prefix
    rollback()                         -> forget the state of everything else

and two per prompt, before the first round: reset() forgets the previous prompt, and
prefill(tokens) may read the prompt (all but its last token) ahead of time -- a drafter
with nothing to precompute does nothing there; `propose` must work either way.

`q` must be the exact distribution each token was drawn from. A drafter that proposes
deterministically (n-gram / prompt lookup) returns one-hot rows; `verify` needs nothing else.

Optional parts, declared by `Drafter` with defaults (a drafter subclasses `Drafter` and
overrides only what it has):
  * `cache` (default None): its own KV cache; the loop reports its spans per round;
  * `observe(h)` (default: nothing): after every round and after prefill, the target's final
    hidden state h [C] at the last position whose successor has been sampled -- all extra
    heads need to draft the next round (reference/heads.py);
  * `observe_features(x)` (default: nothing): after every round and after prefill, the
    target's features x [m, C] (the residual stream after its last block, BEFORE ln_f) of
    the m positions it has just committed, in order -- what an EAGLE drafter reads
    (reference/eagle.py). A drafter with a `feature_layers` attribute (block counts, the
    last n_layer; default None: the top feature only, nothing extra computed) gets
    x [m, len(feature_layers) * C] instead, the residual stream after each of those blocks
    side by side (GPT.layer_features); the chain, batch and tree loops all ask for it
    (`drafter_feature_layers`), and the tree loop hands features over, after its rounds,
    only to a drafter that declares them;
  * a Draft may carry `shared` (SharedLayers): the target's own lower layers already ran
    over the round's rows while drafting (early exit), so the verification pass starts
    those rows at the exit layer instead of recomputing them (`SharedLayers.continue_in`);
  * `library_checked` (default False): True only for this library's drafters, whose
    proposals are valid by construction (their tests check it); the round checks every
    other drafter's proposal before the target reads it -- a subclass that writes its own
    `propose` included (`proposals_checked`).
None of them can change the output law: q stays the distribution each token was drawn from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from reference.checks import (
    as_token_array,
    check_finite,
    check_generator,
    check_number,
    check_positive_int,
)
from reference.kv_cache import KVCache, catch_up_tokens
from reference.model import GPT, causal_placement
from reference.sampling import SamplingParams, check_sampling, draw_token


@dataclass(frozen=True)
class SharedLayers:
    """Rows the target's own first `n_layer` blocks already computed while drafting.

    Row j of `hidden` is the residual stream after block n_layer-1 at absolute position
    start + j, and `cache` holds those rows' K/V for blocks 0..n_layer-1 in slots
    start + j: exactly what the target's verification pass would compute for them."""

    target: GPT  # whose blocks these are (the round refuses rows of another model)
    n_layer: int  # L': the exit layer
    start: int  # absolute position of hidden[0]
    hidden: np.ndarray  # [m, C]
    cache: KVCache  # the drafter's cache of blocks 0..L'-1

    def continue_in(self, target: GPT, cache: KVCache, tokens: np.ndarray) -> np.ndarray:
        # tokens [T] at slots cache.end.. -> x [T, C] after the target's last block, written
        # into the target cache as T temporary entries, reusing these rows where they exist
        start, L1, L = cache.end, self.n_layer, target.config.n_layer
        offset = start - self.start  # rows the drafter fed before the target's first row
        if offset < 0:
            raise ValueError(
                f"the drafter's shared rows start at position {self.start}, after the "
                f"target's first uncached position {start}: they cannot stand for its rows"
            )
        r = int(np.clip(len(self.hidden) - offset, 0, len(tokens)))  # rows the drafter fed
        for i in range(L1):  # 1. their K/V of blocks 0..L'-1, from the drafter's cache
            k = self.cache.k[i, :, start : start + r]
            cache.write(i, start, k, self.cache.v[i, :, start : start + r])
        # 2. blocks 0..L'-1 for the rows it never fed (x_k), attending to the copied slots
        late = causal_placement(start + r, len(tokens) - r)
        rest = target.blocks(target.embed(tokens[r:], late), cache, late, 0, L1)
        x = np.concatenate([self.hidden[offset : offset + r], rest])  # [T, C]: x_L' of each
        x = target.blocks(x, cache, causal_placement(start, len(tokens)), L1, L)  # 3. L'..L-1
        cache.mark_written(len(tokens))
        return x


@dataclass(frozen=True)
class Draft:
    tokens: np.ndarray  # [k] int: the candidates, in order
    q: np.ndarray  # [k, V]: row i is the distribution tokens[i] was sampled from
    shared: SharedLayers | None = None  # lower-layer rows the verification pass may reuse


class DrafterParts(Protocol):
    """The optional parts every kind of drafter may have, with their defaults."""

    cache: KVCache | None = None  # its own KV cache (the loop reports its spans)
    library_checked: bool = False  # True only for this library's own drafters

    def observe(self, h: np.ndarray) -> None:  # h [C], the target's last hidden state
        return None

    def observe_features(self, x: np.ndarray) -> None:  # x [m, C], the committed positions'
        return None  # pre-norm features, in order

    # the target blocks whose features observe_features reads (GPT.layer_features); None:
    # the top feature only, from the plain forward, at no extra cost (every drafter but EAGLE)
    feature_layers: tuple[int, ...] | None = None


class Drafter(DrafterParts, Protocol):
    """What the loop asks of a drafter. Subclass it: the optional parts get their defaults."""

    n_vocab: int  # V: must equal the target's
    n_ctx: int  # longest context the drafter can read

    def reset(self) -> None: ...

    def prefill(self, tokens: np.ndarray) -> None: ...

    def propose(
        self, context: np.ndarray, k: int, sampling: SamplingParams, rng: np.random.Generator
    ) -> Draft: ...

    def commit(self, n_accepted: int) -> None: ...

    def rollback(self) -> None: ...


# what each kind of loop calls (a tree drafter's are in reference/tree/drafters.py)
CHAIN_PARTS = ("n_vocab", "n_ctx", "reset", "prefill", "propose", "commit", "rollback")
OPTIONAL_PARTS = ("cache", "observe", "observe_features", "library_checked")


def proposals_checked(drafter) -> bool:
    # True when the classes that wrote this drafter's propose (and its draw, where it has one)
    # declare library_checked themselves (the library's own): a subclass that overrides
    # either is a plug-in, checked each round
    parts = ("propose", "draw") if callable(getattr(drafter, "draw", None)) else ("propose",)
    return all(written_by_the_library(drafter, p) for p in parts) and bool(drafter.library_checked)


def written_by_the_library(drafter, part: str) -> bool:
    # the class in drafter's MRO that defines `part` declares library_checked itself
    owner = next((c for c in type(drafter).__mro__ if part in vars(c)), None)
    return owner is not None and "library_checked" in vars(owner)


def drafter_feature_layers(drafter) -> tuple[int, ...] | None:
    # the layers whose features a loop computes and hands to this drafter: its
    # `feature_layers` (None, the default: the top feature only, nothing extra computed); a
    # drafter written before the part existed (duck-typed, not subclassing Drafter) reads none
    return getattr(drafter, "feature_layers", None)


def check_drafter(drafter, required: tuple[str, ...] = CHAIN_PARTS) -> None:
    """Raise a TypeError naming what is missing unless `drafter` has every part the loop
    calls (checked once, at the loop's entry, so that the round calls them plainly)."""
    missing = [name for name in required if not hasattr(drafter, name)]
    if missing:
        raise TypeError(f"the drafter {type(drafter).__name__} lacks {', '.join(missing)}")
    optional = [name for name in OPTIONAL_PARTS if not hasattr(drafter, name)]
    if optional:
        raise TypeError(
            f"the drafter {type(drafter).__name__} lacks {', '.join(optional)}: subclass "
            f"reference.drafters.Drafter, which gives its optional parts their defaults"
        )


def check_confidence(value) -> float | None:
    return check_number(
        value,
        "min_confidence",
        optional=True,
        allowed=lambda c: 0.0 <= c <= 1.0,
        where="in [0, 1] (or None)",
    )


class ModelDrafter(Drafter):
    """An independent, smaller GPT that drafts autoregressively with its own KV cache.

    Cache discipline per round (context = committed tokens, last one not cached yet):
      * feed catch_up_tokens(cache, context) -- the last committed token, or two tokens
        after a round where all k drafts were accepted (the draft never saw its own k-th
        token: the "catch-up"), or the whole prompt if `prefill` was not called;
      * then feed d_1 .. d_{k-1} one at a time (d_k is never fed: nobody needs q_{k+1});
      * commit the fed context tokens plus the accepted drafts among those fed, then roll
        back the rest; the correction / bonus token is cached by neither model until the
        next round.

    With `min_confidence`, a round may stop after n < k drafts: d_1 .. d_n were then all
    fed (q_{n+1} was computed to decide to stop), so no catch-up follows such a round.
    """

    library_checked = True  # q rows from `probabilities`, each token sampled from its row

    def __init__(self, model: GPT, min_confidence: float | None = None) -> None:
        # min_confidence: stop a round's drafting early, before position i > 1, when the
        # draft's own top probability there (softmax at temperature 1) is below it. The
        # decision reads only the draft's state, so the output law stays the target's; it
        # saves the draft steps and verification rows a likely rejection would waste.
        self.model = model
        self.min_confidence = check_confidence(min_confidence)
        self.cache = model.new_cache()
        self._fed_context = 0  # context tokens fed in the current round
        self._fed_drafts = 0  # draft tokens fed in the current round (k-1, or 0 if k == 0)

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    @property
    def n_ctx(self) -> int:
        return self.model.config.n_ctx

    def reset(self) -> None:
        self.cache.reset()
        self._fed_context = self._fed_drafts = 0

    def prefill(self, tokens) -> None:
        # tokens [n] -> None: cache them as the start of a new context (after reset()),
        # so that the first proposal only reads the prompt's last token
        tokens = as_token_array(tokens, self.n_vocab, "tokens", allow_empty=True)
        if self.cache.length or self.cache.pending:
            raise ValueError(
                f"prefill starts a new context, but the drafter's cache already holds "
                f"{self.cache.length} committed and {self.cache.pending} temporary tokens; "
                f"call reset() first"
            )
        if len(tokens) > self.cache.capacity:
            raise ValueError(
                f"prefill of {len(tokens)} tokens exceeds the drafter's cache of "
                f"{self.cache.capacity} slots"
            )
        if len(tokens):
            self.model.forward_unchecked(tokens, self.cache)
            self.cache.commit(len(tokens))

    def propose(
        self, context: np.ndarray, k: int, sampling: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        # context [n] -> Draft(tokens [k], q [k, V])
        # Every check runs before the cache is touched: a refused call leaves it as it was.
        context = as_token_array(context, self.n_vocab, "context")
        k = check_positive_int(k, "k", minimum=0)
        check_sampling(sampling)
        check_generator(rng)
        if k > 0:
            self.check_room(len(context), k)
        self.cache.rollback()  # a proposal never builds on an earlier, unverified one
        V = self.n_vocab
        tokens = np.zeros(k, dtype=np.int64)
        q = np.zeros((k, V), dtype=np.float32)
        self._fed_context = self._fed_drafts = 0
        if k == 0:
            return Draft(tokens, q)
        new = catch_up_tokens(self.cache, context)
        # checked above: the tokens and the room; the per-token calls below trust them
        logits = self.step(new)  # [V]: q_1(. | context)
        self._fed_context = len(new)
        for i in range(k):
            if i > 0 and self.unsure(logits):
                return Draft(tokens[:i], q[:i])  # a shorter round: the target takes over
            # the library's own rows: logits of its own model (finite, checked in `step`), so
            # the per-token checks of `probabilities` and `sample_token` are skipped
            tokens[i] = self.draw(logits, sampling, rng, q[i])  # x_i ~ q_i(. | context, x_<i)
            if i < k - 1:
                logits = self.step(tokens[i : i + 1])
                self._fed_drafts += 1
        return Draft(tokens, q)

    def draw(
        self, logits: np.ndarray, sampling: SamplingParams, rng: np.random.Generator, out
    ) -> int:
        # logits [V] (finite), out [V] -> one draft token x ~ q; out receives q, the row it was
        # drawn from (one uniform of rng, as sample_token spends). Its own method so that a
        # faster computation of the same law can take its place (specdec/fast_cpu/draw.py);
        # a subclass that replaces it must declare library_checked itself to stay trusted.
        return draw_token(logits, sampling, rng, out)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        # tokens [T] -> logits [V] after the last of them; their K/V stay in the draft's cache
        logits = self.model.forward_unchecked(tokens, self.cache)[-1]
        check_finite(logits, "the draft model's logits")  # a broken model fails here, loudly
        return logits

    def unsure(self, logits: np.ndarray) -> bool:
        # logits [V] -> True if max softmax(logits) < min_confidence (never without one)
        if self.min_confidence is None:
            return False
        top = 1.0 / float(np.exp(logits - logits.max()).sum())  # max_x softmax(logits)_x
        return top < self.min_confidence

    def check_room(self, n_context: int, k: int) -> None:
        # A proposal feeds context[length:] and then d_1 .. d_{k-1}: n_context + k - 1 slots.
        committed, capacity = self.cache.length, self.cache.capacity
        if n_context <= committed:
            raise ValueError(
                f"context has {n_context} tokens but the drafter has already committed "
                f"{committed}: the context must end with a token the drafter has not seen "
                f"(for a new prompt, call reset() first)"
            )
        if n_context + k - 1 > capacity:
            raise ValueError(
                f"drafting k={k} tokens after a context of {n_context} tokens needs "
                f"{n_context + k - 1} cache slots, but the drafter's cache has {capacity}; "
                f"lower k or shorten the context"
            )

    def commit(self, n_accepted: int) -> None:
        # keep the fed context tokens and the accepted drafts that were fed (at most k-1)
        self.cache.commit(self._fed_context + min(n_accepted, self._fed_drafts))

    def rollback(self) -> None:
        # forget the drafts that were fed but not accepted
        self.cache.rollback()

"""Speculative decoding of a batch of B sequences: the bookkeeping of ragged batches.

The B sequences of a batch differ in everything a single run takes for granted:

* their prompts have different lengths, so their caches hold different numbers of slots;
* each round accepts a different number of drafts in each sequence, so the committed
  lengths drift further apart every round;
* they finish at different times (EOS, length limit), and a finished sequence stops
  drafting while the others go on.

What stays shared is the expensive part: ONE target forward per round verifies every
unfinished sequence at once. Everything else is per sequence (per row b):

    BatchKVCache            slots [B, L, nh, N, hs]; pointers length[B] and pending[B]
    batched_forward         row b feeds its first n_new[b] tokens after its own end[b];
                            positions and the attention mask are per row
    batched_verification_pass   [catch-up tokens of b, drafts of b], right-padded, one pass
    batched_round           draft (per drafter) -> one pass -> verify (per row) ->
                            commit n[b] / roll back, per row
    speculative_generate_batch  prefill, then rounds; each sequence a `Run` (speculative.py)
                            with its own stop rules, statistics and trace

Ragged rows are right-padded to the longest one: row b of `tokens [B, T]` holds n_new[b]
real tokens then padding. Padding is never written to a cache and never attended to, so
each sequence's logits, cache slots and tokens are exactly what a single-sequence run
gives (to float32 rounding): its law is the target's own, whatever the other rows do.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from reference.autoregressive import check_length_budget
from reference.checks import as_token_array, check_clock, check_positive_int
from reference.drafters import (
    Draft,
    Drafter,
    check_drafter,
    drafter_feature_layers,
    proposals_checked,
)
from reference.kv_cache import KVCache, catch_up_tokens
from reference.model import GPT, Placement, check_cache_fits
from reference.records import CacheSpan, Round, SpeculativeResult
from reference.sampling import SamplingParams, probabilities
from reference.speculative import (
    Run,
    RunSetup,
    cache_span_start,
    check_draft,
    plugin_verification,
    run_keywords,
)
from reference.verification import Verification, verify_unchecked

# ------------------------------------------------------------------------------ the cache


def as_row_counts(n, batch_size: int, name: str, upper: np.ndarray, where: str) -> np.ndarray:
    # n: B ints with 0 <= n[b] <= upper[b] -> int64 [B]; the error names the first bad row
    arr = np.asarray(n)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold one int per sequence, got dtype {arr.dtype}")
    if arr.shape != (batch_size,):
        raise ValueError(
            f"{name} must have one count per sequence, shape ({batch_size},), got {arr.shape}"
        )
    bad = np.flatnonzero((arr < 0) | (arr > upper))
    if bad.size:
        b = int(bad[0])
        raise ValueError(
            f"{name}[{b}] must be in 0..{int(upper[b])} ({where} of row {b}), got {int(arr[b])}"
        )
    return arr.astype(np.int64)


class BatchKVCache:
    """B preallocated KV caches side by side, each with its own commit pointer.

    Row b is a `KVCache` (reference/kv_cache.py) of its own: slots [0, length[b]) are
    committed, [length[b], end[b]) temporary, the rest free. What makes it a batch is only
    that one forward call writes every row at once; each row's pointers move by its own count.

        commit(n)    row b keeps its first n[b] temporary slots (the rest stay temporary)
        rollback()   every row drops its temporary slots
    """

    def __init__(
        self,
        batch_size: int,
        n_layer: int,
        n_head: int,
        head_size: int,
        capacity: int,
        dtype=np.float32,
    ) -> None:
        check_positive_int(batch_size, "batch_size")
        if capacity < 1:
            raise ValueError(f"BatchKVCache capacity must be >= 1, got {capacity}")
        # [B, L, nh, N, hs]: row b, layer i is laid out exactly like a KVCache's layer i
        shape = (batch_size, n_layer, n_head, capacity, head_size)
        self.k = np.zeros(shape, dtype=dtype)
        self.v = np.zeros(shape, dtype=dtype)
        self.length = np.zeros(batch_size, dtype=np.int64)  # [B] committed slots per row
        self.pending = np.zeros(batch_size, dtype=np.int64)  # [B] temporary slots per row

    @property
    def batch_size(self) -> int:  # B
        return self.k.shape[0]

    @property
    def capacity(self) -> int:  # N
        return self.k.shape[3]

    @property
    def end(self) -> np.ndarray:  # [B]: first free slot of each row, where it writes next
        return self.length + self.pending

    def check_room(self, n_new) -> None:
        """Raise before anything is written if row b has no room for n_new[b] more slots."""
        full = np.flatnonzero(self.end + np.asarray(n_new) > self.capacity)
        if full.size:
            b = int(full[0])
            raise ValueError(
                f"KV cache row {b} full: {self.length[b]} committed + {self.pending[b]} "
                f"temporary + {int(np.asarray(n_new)[b])} new slots exceed its capacity of "
                f"{self.capacity}"
            )

    def write(
        self, layer: int, start: np.ndarray, n_new: np.ndarray, k: np.ndarray, v: np.ndarray
    ) -> None:
        # start [B], n_new [B], k/v [B, nh, T, hs]: row b's first n_new[b] positions go to
        # its slots [start[b], start[b] + n_new[b]) of this layer; its padding goes nowhere
        for b, (s, n) in enumerate(zip(start, n_new, strict=True)):
            self.k[b, layer, :, s : s + n] = k[b, :, :n]
            self.v[b, layer, :, s : s + n] = v[b, :, :n]

    def write_at(self, layer: int, at: Placement, k: np.ndarray, v: np.ndarray):
        # k/v [B, nh, T, hs] -> (keys, values) [B, nh, S, hs]: each row's real positions of
        # one pass at the slots its Placement names, then the history the rows attend to
        self.write(layer, at.start, at.n_new, k, v)
        return self.keys(layer, at.stop), self.values(layer, at.stop)

    def mark_written_at(self, at: Placement) -> None:
        """Called by the model after all layers wrote the pass placed at `at`."""
        self.mark_written(at.n_new)

    def keys(self, layer: int, stop: int) -> np.ndarray:  # -> [B, nh, stop, hs] (a view)
        return self.k[:, layer, :, :stop]

    def values(self, layer: int, stop: int) -> np.ndarray:  # -> [B, nh, stop, hs] (a view)
        return self.v[:, layer, :, :stop]

    def mark_written(self, n_new: np.ndarray) -> None:
        """Called by the model after all layers wrote n_new[b] positions of row b."""
        self.pending += n_new

    def commit(self, n) -> None:
        """Row b makes its first n[b] temporary slots permanent, in every layer at once.

        Each row keeps its own count: the accepted prefix differs from sequence to
        sequence. The temporary slots after them stay temporary until `rollback()`."""
        n = as_row_counts(n, self.batch_size, "commit(n): n", self.pending, "the temporary slots")
        self.length += n
        self.pending -= n

    def rollback(self) -> None:
        """Every row drops its temporary slots, by moving its pointer; no data moves."""
        self.pending[:] = 0

    def reset(self) -> None:
        """Forget every row (a new batch of prompts). O(1): the slots are overwritten later."""
        self.length[:] = 0
        self.pending[:] = 0

    def row(self, b: int) -> KVCache:
        """Row b as a single-sequence `KVCache`, for reading: its slots are views of this
        batch's, its pointers a copy of row b's. `catch_up_tokens`, `committed()` and the
        tests' comparisons with a fresh prefill then work on it unchanged; driving it
        (commit, rollback) would not move the batch's pointers."""
        L, nh, N, hs = self.k.shape[1:]
        view = KVCache(L, nh, hs, capacity=1)  # its own tiny buffers are replaced just below
        view.k, view.v = self.k[b], self.v[b]  # [L, nh, N, hs] views: no copy
        view.length, view.pending = int(self.length[b]), int(self.pending[b])
        return view

    def __repr__(self) -> str:
        return (
            f"BatchKVCache(length={self.length.tolist()}, pending={self.pending.tolist()}, "
            f"capacity={self.capacity}, layers={self.k.shape[1]})"
        )


def new_batch_cache(model: GPT, batch_size: int, capacity: int | None = None) -> BatchKVCache:
    # `model.new_cache()` for B sequences: slots sized for this model's layers and heads
    cfg = model.config
    capacity = cfg.n_ctx if capacity is None else capacity
    if capacity > cfg.n_ctx:
        raise ValueError(f"cache capacity {capacity} exceeds the model's n_ctx {cfg.n_ctx}")
    # n_kv_head: the heads that have keys and values (all of GPT-2's; fewer with GQA)
    return BatchKVCache(batch_size, cfg.n_layer, cfg.n_kv_head, cfg.head_size, capacity)


# ------------------------------------------------------------------------------ the forward


def pad_right(rows: list[np.ndarray], pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    # B token lists of different lengths -> (tokens [B, T] right-padded, n_new [B]);
    # T = the longest row (0 if every row is empty)
    n_new = np.array([len(r) for r in rows], dtype=np.int64)
    tokens = np.full((len(rows), int(n_new.max(initial=0))), pad_id, dtype=np.int64)
    for b, r in enumerate(rows):
        tokens[b, : len(r)] = r
    return tokens, n_new


def batch_attention_mask(start: np.ndarray, n_new: np.ndarray, T: int, S: int) -> np.ndarray:
    # start [B], n_new [B] -> [B, T, S] bool, True = may attend.
    # Row b's new position i sits at slot start[b] + i (causal_mask's offset, one per row);
    # it may see key slot j iff  j <= start[b] + i  (causality)  and  j < start[b] + n_new[b]
    # (a slot row b really wrote: its history, or one of its real new tokens). For a real
    # position (i < n_new[b]) the first rule implies the second; the second keeps padding
    # positions off slots their row never wrote (stale data, or another row's length), so
    # that even the rows thrown away read nothing but this sequence.
    j = np.arange(S)[None, None, :]
    i = np.arange(T)[None, :, None]
    s, n = start[:, None, None], n_new[:, None, None]
    return (j <= s + i) & (j < s + n)


def batch_placement(start: np.ndarray, n_new: np.ndarray, T: int) -> Placement:
    # start [B], n_new [B] -> where a right-padded [B, T] pass sits: row b's position i at
    # start[b] + i (padding reads position 0, always in range, and is discarded), written at
    # row b's slots from start[b] (real positions only), each row with its own mask
    # [B, 1, T, S] (shared by its heads), S = the longest history any row attends to
    S = int((start + n_new).max(initial=0))
    real = np.arange(T)[None, :] < n_new[:, None]  # [B, T]
    positions = np.where(real, start[:, None] + np.arange(T)[None, :], 0)
    mask = batch_attention_mask(start, n_new, T, S)[:, None]
    return Placement((len(start), T), positions, mask, start, n_new, S)


def batched_forward(model: GPT, tokens, n_new, cache: BatchKVCache) -> np.ndarray:
    """tokens [B, T] right-padded, n_new [B] -> logits [B, T, V]; row b, position i < n_new[b]
    is what `model.forward(tokens[b, :n_new[b]], row b's cache)` gives at position i.

    Row b continues after its own last written slot, cache.end[b], and its K/V become
    temporary entries of row b. Padding (positions i >= n_new[b]; any int, it is not read)
    writes nothing and its logits are NaN, so that reading one by mistake fails loudly.
    n_new[b] = 0 is allowed: a finished sequence rides along untouched. Every check runs
    before anything is written."""
    tokens, n_new = check_batched_forward(model, tokens, n_new, cache)
    return batched_forward_unchecked(model, tokens, n_new, cache)


def check_batched_forward(
    model: GPT, tokens, n_new, cache: BatchKVCache
) -> tuple[np.ndarray, np.ndarray]:
    # the checks of `batched_forward` -> (tokens [B, T] int64, n_new [B] int64); nothing
    # is written, and a refused call leaves every row of the cache as it was
    if not isinstance(cache, BatchKVCache):
        raise TypeError(
            f"cache must be a BatchKVCache (new_batch_cache(model, B)), got {type(cache).__name__}"
        )
    cfg = model.config
    tokens = np.asarray(tokens)
    if tokens.ndim != 2:
        raise ValueError(
            f"tokens must be 2-D [B, T] (one right-padded row per sequence), "
            f"got shape {tokens.shape}"
        )
    if tokens.dtype == bool or not np.issubdtype(tokens.dtype, np.integer):
        raise TypeError(f"tokens must hold integer token ids, got dtype {tokens.dtype}")
    B, T = tokens.shape
    if B != cache.batch_size:
        raise ValueError(f"tokens has {B} rows but the cache holds {cache.batch_size} sequences")
    n_new = as_row_counts(n_new, B, "n_new", np.full(B, T), "the columns of tokens")
    for b in range(B):  # only the real tokens are token ids; padding is never read
        as_token_array(tokens[b, : n_new[b]], cfg.n_vocab, f"tokens[{b}]", allow_empty=True)
    too_long = np.flatnonzero(cache.end + n_new > cfg.n_ctx)
    if too_long.size:
        b = int(too_long[0])
        raise ValueError(
            f"sequence {b} too long: {cache.end[b]} cached + {n_new[b]} new "
            f"positions exceed n_ctx={cfg.n_ctx}"
        )
    check_cache_fits(cache.row(0), cfg)
    cache.check_room(n_new)
    return tokens.astype(np.int64), n_new


def batched_forward_unchecked(
    model: GPT, tokens: np.ndarray, n_new: np.ndarray, cache: BatchKVCache
) -> np.ndarray:
    # tokens [B, T] int64, n_new [B] int64 -> logits [B, T, V]: `batched_forward` without
    # its checks, for the batched loop, whose entry point checked what it feeds.
    return batched_pass(model, tokens, n_new, cache)[0]


def batched_pass(
    model: GPT, tokens: np.ndarray, n_new: np.ndarray, cache: BatchKVCache, layers=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # tokens [B, T] int64, n_new [B] -> (logits [B, T, V], h [B, T, C], x [B, T, F]): the
    # final hidden states and the features before ln_f too, for drafters that read the
    # target's state (extra heads, EAGLE); F = C, or with `layers` the residual streams
    # after those blocks side by side (GPT.layer_features), the top last. Padding: NaN.
    V, C = model.n_vocab, model.config.n_embd
    F = C if layers is None else len(layers) * C
    B, T = tokens.shape
    at = batch_placement(cache.end, n_new, T)  # cache.end: a new array, moved by mark_written
    logits = np.full((B, T, V), np.nan, dtype=np.float32)
    h = np.full((B, T, C), np.nan, dtype=np.float32)
    x = np.full((B, T, F), np.nan, dtype=np.float32)
    if at.stop == 0:
        return logits, h, x  # nothing cached, nothing new: no row has anything to compute
    real = np.arange(T)[None, :] < n_new[:, None]  # [B, T]
    # the model's one forward over the B*T positions (padding reads token 0 and is dropped)
    features = model.layer_features(np.where(real, tokens, 0), cache, at, layers)  # [B*T, F]
    final = model.norm(features[:, -C:], "ln_f")  # [B*T, C]
    x[real] = features.reshape(B, T, F)[real]
    h[real] = final.reshape(B, T, C)[real]
    logits[real] = model.logits(final).reshape(B, T, V)[real]
    return logits, h, x


def batch_feature_layers(drafters) -> tuple[int, ...] | None:
    # the union of the layers the batch's drafters read (`drafter_feature_layers`), in
    # order; None when none reads more than the top feature: the plain pass, nothing extra
    asked = [drafter_feature_layers(d) for d in drafters]
    union = sorted({layer for layers in asked if layers is not None for layer in layers})
    return tuple(union) if len(union) > 1 else None


def feature_columns(layers, union, C: int):
    # the columns of a pass over `union` (batch_feature_layers) that hold `layers` (a
    # drafter's; None: the top feature only) -> a slice, or an int array when they are apart
    if union is None or layers == union:  # the pass computed exactly what it reads
        return slice(None)
    if layers is None:  # the top feature: the last C columns
        return slice(-C, None)
    index = [union.index(layer) for layer in layers]
    return np.concatenate([np.arange(i * C, (i + 1) * C) for i in index])


# ------------------------------------------------------------------------------ one round


def batched_verification_pass(
    target: GPT,
    cache: BatchKVCache,
    contexts: list[np.ndarray],
    drafts: list[Draft | None],
    sampling: SamplingParams,
    layers=None,
) -> tuple[list[np.ndarray | None], list[int], np.ndarray, np.ndarray]:
    # -> (p[b] [k_b+1, V] or None, catch-up tokens fed per row, h [B, T, C] the pass's final
    # hidden states by row and position, x [B, T, F] its features before ln_f: F = C, or the
    # residual streams after the blocks `layers` side by side, batch_feature_layers). ONE target
    # forward over [catch-up tokens of b, x_1..x_{k_b} of b] for every row with a draft
    # (ragged: k_b and the catch-up differ), none for a finished row (drafts[b] None:
    # n_new[b] = 0). Row b's last k_b + 1 real rows score its drafts and its bonus position,
    # as in `verification_pass`.
    rows, n_catch_up = [], []
    for b, draft in enumerate(drafts):
        if draft is None:
            rows.append(np.zeros(0, dtype=np.int64))
            n_catch_up.append(0)
            continue
        new = catch_up_tokens(cache.row(b), contexts[b])
        rows.append(np.concatenate([new, draft.tokens]))
        n_catch_up.append(len(new))
    tokens, n_new = pad_right(rows)
    logits, h, x = batched_pass(target, tokens, n_new, cache, layers)  # [B,T,V], [B,T,C], [B,T,F]
    p: list[np.ndarray | None] = []
    for b, draft in enumerate(drafts):
        if draft is None:
            p.append(None)
            continue
        k_b, n_b = len(draft.tokens), int(n_new[b])
        p.append(probabilities(logits[b, n_b - (k_b + 1) : n_b], sampling))
    return p, n_catch_up, h, x


def batched_round(
    target: GPT,
    cache: BatchKVCache,
    drafters: list[Drafter],
    contexts: list[np.ndarray],
    k_rounds: list[int | None],
    sampling: SamplingParams,
    rng: np.random.Generator,
    verify_fn: Callable[..., Verification] | None = None,
    clock=None,
) -> list[Round | None]:
    # contexts[b] [n_b] committed tokens of sequence b; k_rounds[b] its draft length this
    # round, or None for a finished sequence -> one Round per sequence (None: finished).
    # `verify_fn` None is the reference's verify; `clock` is charged "draft", "target" and
    # "verify", as in `speculative_round`, which this is for B sequences at once:
    #   1. draft            drafters[b].propose, for b = 0..B-1 in order
    #   2. one pass         batched_verification_pass: every row verified in ONE forward
    #   3. verify           verify_unchecked on row b, for b = 0..B-1 in order
    #   4. commit/rollback  target row b keeps its catch-up + accepted drafts, drafter b
    #                       its own; then every row drops the rest
    # The rng is read in exactly that order, so a batch is reproducible from its seed.
    clock = check_clock(clock)
    B = len(drafters)
    draft_caches = [d.cache for d in drafters]
    t_before = cache.length.copy()
    d_before = [cache_span_start(c)[0] for c in draft_caches]

    drafts: list[Draft | None] = [None] * B
    for b in range(B):  # 1. draft, sequence by sequence
        if k_rounds[b] is not None:
            drafts[b] = drafters[b].propose(contexts[b], k_rounds[b], sampling, rng)
            if not proposals_checked(drafters[b]):  # a plug-in's proposal, as in the round
                check_draft(drafts[b], k_rounds[b], target.n_vocab)
    clock.mark("draft")
    layers, C = batch_feature_layers(drafters), target.config.n_embd  # what any drafter reads
    p, n_catch_up, h, x = batched_verification_pass(  # 2.
        target, cache, contexts, drafts, sampling, layers
    )
    clock.mark("target")
    t_written = cache.end
    d_written = [cache_span_start(c)[1] for c in draft_caches]

    verifications = [None] * B
    keep = np.zeros(B, dtype=np.int64)
    for b in range(B):  # 3. verify, sequence by sequence
        if drafts[b] is None:
            continue
        if verify_fn is None:
            verifications[b] = verify_unchecked(p[b], drafts[b].q, drafts[b].tokens, rng)
        else:  # another implementation's answer, checked before any cache moves
            verifications[b] = plugin_verification(verify_fn, p[b], drafts[b], rng, target.n_vocab)
        keep[b] = n_catch_up[b] + verifications[b].accepted
    clock.mark("verify")

    cache.commit(keep)  # 4. row b keeps its catch-up tokens and its accepted drafts
    cache.rollback()  # ... and every row drops its rejected drafts' slots
    rounds: list[Round | None] = [None] * B
    for b in range(B):
        if drafts[b] is None:
            continue
        drafters[b].commit(verifications[b].accepted)
        drafters[b].rollback()
        last = n_catch_up[b] + verifications[b].accepted - 1  # row of the last kept token
        drafters[b].observe(h[b, last])  # the target's row that scored the round's last token
        columns = feature_columns(drafter_feature_layers(drafters[b]), layers, C)
        drafters[b].observe_features(x[b, : last + 1][:, columns])  # the kept positions' features
        dc = draft_caches[b]
        rounds[b] = Round(
            draft=drafts[b],
            p=p[b],
            verification=verifications[b],
            n_catch_up=n_catch_up[b],
            target_cache=CacheSpan(int(t_before[b]), int(t_written[b]), int(cache.length[b])),
            draft_cache=CacheSpan(d_before[b], d_written[b], dc.length) if dc else None,
        )
    return rounds


# ------------------------------------------------------------------------------ the loop


def batched_prefill(
    target: GPT, cache: BatchKVCache, drafters: list[Drafter], prompts: list[np.ndarray]
) -> None:
    # `prefill` for B prompts: one ragged target pass caches every prompt but its last token
    # (a one-token prompt feeds nothing: n_new[b] = 0); each drafter prefills its own.
    tokens, n_new = pad_right([prompt[:-1] for prompt in prompts])
    layers = batch_feature_layers(drafters)
    _, h, x = batched_pass(target, tokens, n_new, cache, layers)  # [B, T, C], [B, T, F]
    cache.commit(n_new)
    C = target.config.n_embd
    for b, (drafter, prompt) in enumerate(zip(drafters, prompts, strict=True)):
        drafter.reset()
        if n_new[b]:
            drafter.observe(h[b, n_new[b] - 1])  # the row that scored the prompt's last token
            columns = feature_columns(drafter_feature_layers(drafter), layers, C)
            drafter.observe_features(x[b, : n_new[b]][:, columns])
        drafter.prefill(prompt[:-1])


def check_batch(target: GPT, drafters, prompts, max_new_tokens: int) -> list[np.ndarray]:
    # The batch's own checks, naming the sequence at fault -> the prompts as int64 arrays
    if isinstance(prompts, (str, bytes)) or not hasattr(prompts, "__len__"):
        raise TypeError(
            f"prompts must be a list of token lists (one per sequence), got "
            f"{type(prompts).__name__}"
        )
    if len(prompts) == 0:
        raise ValueError("prompts must hold at least one prompt")
    prompts = [as_token_array(p, target.n_vocab, f"prompts[{b}]") for b, p in enumerate(prompts)]
    if isinstance(drafters, (str, bytes)) or not hasattr(drafters, "__len__"):
        raise TypeError(
            f"drafters must be a list with one drafter per prompt, got {type(drafters).__name__}"
        )
    if len(drafters) != len(prompts):
        raise ValueError(
            f"one drafter per prompt: got {len(drafters)} drafters for {len(prompts)} prompts"
        )
    seen: dict[int, int] = {}
    for b, drafter in enumerate(drafters):
        if id(drafter) in seen:
            raise ValueError(
                f"drafters[{b}] is the same object as drafters[{seen[id(drafter)]}]; a drafter "
                f"holds one sequence's state, so give each prompt its own, e.g. "
                f"[ModelDrafter(draft) for _ in prompts]"
            )
        seen[id(drafter)] = b
        check_drafter(drafter)
        if drafter.n_vocab != target.n_vocab:
            raise ValueError(
                f"draft and target must share one vocabulary: target has {target.n_vocab} "
                f"ids, drafters[{b}] has {drafter.n_vocab}"
            )
    for b, prompt in enumerate(prompts):
        check_length_budget(
            len(prompt), max_new_tokens, target.config.n_ctx, f"target (prompts[{b}])"
        )
        check_length_budget(len(prompt), max_new_tokens, drafters[b].n_ctx, f"drafters[{b}]")
    return prompts


@run_keywords
def speculative_generate_batch(
    target: GPT, drafters: list[Drafter], prompts, setup: RunSetup
) -> list[SpeculativeResult]:
    """`speculative_generate` for B prompts at once, with its keywords (RunSetup's fields):
    one result per prompt, in order.

    drafters[b] drafts for prompts[b] (one drafter per sequence: a drafter holds one
    sequence's state, e.g. ``[ModelDrafter(draft) for _ in prompts]``). Each round, every
    unfinished sequence drafts k_b = min(k, remaining_b - 1) tokens with its own drafter,
    then ONE target pass verifies them all (`batched_round`). Each sequence is a `Run` of
    its own, as a single run is: it stops after an emitted eos_id or at max_new_tokens,
    and its statistics and trace are its own. `verify_fn` and `clock` are the single
    loop's: another verify for every row, and a clock charged per round for the batch.

    Randomness: the single generator `rng` is read in a fixed order each round: the drafts
    of sequences 0, 1, ..., B-1 (unfinished ones only), then their verifications in the
    same order. With one prompt this is exactly `speculative_generate`'s order, so a batch
    of one reproduces it token for token from the same seed. Each sequence's tokens follow
    the target's own law for its prompt, and sequences are independent of each other.
    """
    prompts, setup = check_batch_inputs(target, drafters, prompts, setup)
    sampling, rng, verify_fn, clock = setup.sampling, setup.rng, setup.verify_fn, setup.clock
    clock.restart()
    cache = new_batch_cache(target, len(prompts))
    batched_prefill(target, cache, drafters, prompts)
    clock.mark("prefill")
    runs = [Run.of(prompt, setup) for prompt in prompts]
    while not all(run.finished for run in runs):  # a finished sequence drafts nothing: None
        k_rounds = [None if run.finished else run.next_k() for run in runs]
        contexts = [run.context for run in runs]
        rounds = batched_round(
            target, cache, drafters, contexts, k_rounds, sampling, rng, verify_fn, clock
        )
        record_rounds(runs, rounds)
        clock.mark("other")
    return [run.result() for run in runs]


def record_rounds(runs: list[Run], rounds: list[Round | None], traced=None) -> None:
    # each unfinished sequence's Run records its own round (None: it had finished)
    for run, rnd in zip(runs, rounds, strict=True):
        if rnd is not None:
            run.record(rnd, traced)


def check_batch_inputs(
    target, drafters, prompts, setup: RunSetup
) -> tuple[list[np.ndarray], RunSetup]:
    # every check of `speculative_generate_batch`, before any drafter is reset
    # -> (prompts as int64 arrays, the checked setup)
    setup = setup.checked(target.n_vocab)
    return check_batch(target, drafters, prompts, setup.max_new_tokens), setup

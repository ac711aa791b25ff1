"""The twin's ragged batch: B sequences per round, one target pass, one transfer back.

What differs from reference/batch.py, and why:
* The slots, the padded [B, T] inputs, the masks and every row's p and q live on the device;
  the per-row pointers (length[B], pending[B]) stay on the host, as in the single-sequence
  twin: the host learns each row's accepted count from the round's transfer anyway.
* Drafting aside, a round's device operations do not grow with B: every row's drafts come
  as one padded `DraftBatch` (tokens [B, K], q [B, K, V]), the verification pass scatters
  them after the rows' catch-up tokens, the p rows of every row are gathered and processed
  in one call, and `decide_rows` settles every row at once. Cache writes are one scatter
  per layer for all rows (`BatchKVCache.write`).
* Drafting (gpu/device/batch_drafting.py decides how, once per run):
  - every row's drafter the twin's ModelDrafter of one draft model, and at least
    BATCHED_FROM_ROWS (2) rows: ONE draft pass per step for all rows (`BatchModelDrafter`,
    the rows' draft caches side by side in one BatchKVCache);
  - any other mix (lookup, hybrid, early exit, heads, plug-ins, several draft models,
    min_confidence), or a batch of one row: row by row, each row's own drafter
    (`RowDrafting`). The proposals made on the host (lookup, plug-ins) are packed and
    copied over together, one copy for their tokens and one for their q rows, not one per
    row.
* ONE device -> host transfer per batched round, not one per sequence: every row's
  (accepted n, token, drafts padded to the longest, p and q rows finite) is packed into one
  int64 array [B, 3 + K]. A row that has finished rides along with n_new = 0 and sends nothing.
* The uniforms are drawn from the numpy Generator in the reference's order: every row's
  drafts (b = 0..B-1, k_b each), then every row's verification (k_b + 1 each); each phase's
  are copied over at once (row by row when each row's own drafter draws its own). Greedy
  batches equal the reference's token for token.
* The pass is the model's one forward (`GPT.residual`) with the reference's
  `batch_placement`; up to 16 positions in all, its blocks run the model's fused kernels,
  the attention kernel reading each row's (start, n_new), copied over once per pass
  (`BatchKVCache.rows_on_device`); longer passes copy the placement's mask over once.
* Every row's drafter is handed, after prefill and after each round, the target's device
  row that scored its last kept token (`observe`) and its features before ln_f of the
  positions it kept (`observe_features`: what EAGLE reads), as the reference's batch does;
  the pass's features are its residual rows, kept on the device (no extra launch).
The bookkeeping (prefill, stop rules, statistics), the input checks and the result types are
the reference's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpu.device.backend import to_device, to_host, xp
from gpu.device.batch_drafting import (
    BATCHED_FROM_ROWS,
    BatchModelDrafter,
    DraftBatch,
    drafts_in_one_pass,
)
from gpu.drafters import as_twin_drafter
from gpu.model import GPT, as_twin_model
from gpu.sampling import probabilities
from gpu.speculative import check_rows_finite, checked_draft, host_round
from gpu.verification import decide_rows
from reference import batch as reference_batch
from reference.batch import (
    batch_feature_layers,
    batch_placement,
    check_batch_inputs,
    check_batched_forward,
    feature_columns,
    pad_right,
    record_rounds,
)
from reference.checks import check_clock
from reference.drafters import Draft, Drafter, drafter_feature_layers
from reference.records import CacheSpan, Round, SpeculativeResult
from reference.sampling import SamplingParams
from reference.speculative import Run, RunSetup, plugin_verification, run_keywords
from reference.verification import Verification

__all__ = [
    "BatchKVCache",
    "DraftBatch",
    "RowDrafting",
    "batch_drafting",
    "batched_forward",
    "batched_round",
    "batched_verification_pass",
    "new_batch_cache",
    "speculative_generate_batch",
]


class BatchKVCache(reference_batch.BatchKVCache):
    """The reference's BatchKVCache with its slots [B, L, nh, N, hs] in device memory."""

    kernel_layout = "batch"  # gpu/device/kernels.cu's cached_attention reads these slots so

    def __init__(
        self,
        batch_size: int,
        n_layer: int,
        n_head: int,
        head_size: int,
        capacity: int,
        dtype=np.float32,
    ) -> None:
        super().__init__(batch_size, n_layer, n_head, head_size, 1, dtype)  # checks, pointers
        if capacity < 1:
            raise ValueError(f"BatchKVCache capacity must be >= 1, got {capacity}")
        shape = (batch_size, n_layer, n_head, capacity, head_size)
        self.k = xp.zeros(shape, dtype=dtype)
        self.v = xp.zeros(shape, dtype=dtype)
        self._per_pass: dict[str, tuple[bytes, object]] = {}  # the last pass's, by name

    def write(self, layer: int, start, n_new, k, v) -> None:
        # start [B], n_new [B] on the host; k/v [B, nh, T, hs] on the device: every row's
        # real positions in ONE scatter per array, whatever B is (padding goes nowhere)
        index = self.scatter_index(start, n_new)
        if index is None:
            return
        row, slot, column = index[0], index[1], index[2]  # [n] each: views of one copy
        self.k[row, layer, :, slot] = k[row, :, column]
        self.v[row, layer, :, slot] = v[row, :, column]

    def rows_on_device(self, start: np.ndarray, n_new: np.ndarray):
        # -> [2, B] int64 on the device: (start, n_new) of every row, what the fused attention
        # kernel reads (gpu/device/fused.py)
        return self.once_per_pass(
            "rows", start, n_new, lambda: to_device(np.stack([start, n_new]).astype(np.int64))
        )

    def scatter_index(self, start: np.ndarray, n_new: np.ndarray):
        # -> [3, n] on the device, (row b, slot start[b] + i, column i) for every real
        # position i < n_new[b], or None when no row writes
        def build():
            row, column = ragged_positions(n_new)
            return to_device(np.stack([row, start[row] + column, column])) if len(row) else None

        return self.once_per_pass("scatter", start, n_new, build)

    def once_per_pass(self, name: str, start: np.ndarray, n_new: np.ndarray, build):
        # build() for this pass's (start, n_new), once: every layer of a pass writes the same
        # slots, so what describes them is built and copied over once per pass, not per layer
        key = start.tobytes() + n_new.tobytes()
        if name not in self._per_pass or self._per_pass[name][0] != key:
            self._per_pass[name] = (key, build())
        return self._per_pass[name][1]


def ragged_positions(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # n [B] counts -> (row [N], column [N]), N = sum(n): (b, i) for every i < n[b], in order
    row = np.repeat(np.arange(len(n)), n)
    return row, np.arange(len(row)) - np.repeat(np.cumsum(n) - n, n)


def new_batch_cache(model: GPT, batch_size: int, capacity: int | None = None) -> BatchKVCache:
    cfg = model.config
    capacity = cfg.n_ctx if capacity is None else capacity
    if capacity > cfg.n_ctx:
        raise ValueError(f"cache capacity {capacity} exceeds the model's n_ctx {cfg.n_ctx}")
    # n_kv_head: the heads that have keys and values (all of GPT-2's; fewer with GQA)
    return BatchKVCache(batch_size, cfg.n_layer, cfg.n_kv_head, cfg.head_size, capacity)


def batched_forward_unchecked(model: GPT, tokens, n_new: np.ndarray, cache: BatchKVCache):
    # tokens [B, T] (device), n_new [B] (host) -> logits [B, T, V] on the device
    return batched_pass(model, tokens, n_new, cache)[0]


def batched_pass(model: GPT, tokens, n_new: np.ndarray, cache: BatchKVCache, layers=None):
    # tokens [B, T] (device), n_new [B] (host) -> (logits [B, T, V], h [B, T, C], x [B, T, F])
    # on the device: the reference's placement and the model's one forward; x are the
    # features before ln_f (what an EAGLE drafter reads: F = C, or with `layers` the residual
    # streams after those blocks side by side, GPT.layer_features, the top last). Padding
    # rows of logits and h are NaN; x's are left as the pass computed them (a view, no
    # launch: the loop hands a drafter only its kept positions, never a padding row)
    V, C = model.n_vocab, model.config.n_embd
    F = C if layers is None else len(layers) * C
    B, T = tokens.shape
    at = batch_placement(cache.end, n_new, T)  # on the host: pointers and mask
    logits = xp.full((B, T, V), np.nan, dtype=np.float32)
    h = xp.full((B, T, C), np.nan, dtype=np.float32)
    if at.stop == 0 or B * T == 0:  # nothing cached and nothing new, or no position at all:
        # nothing to compute (and no kernel may be launched over zero rows)
        return logits, h, xp.full((B, T, F), np.nan, dtype=np.float32)
    real = xp.arange(T)[None, :] < to_device(n_new)[:, None]  # [B, T]
    features = model.layer_features(xp.where(real, tokens, 0), cache, at, layers)  # [B*T, F]
    final = model.norm(features[:, -C:], "ln_f")  # [B*T, C]
    out = model.logits(final).reshape(B, T, V)
    h = xp.where(real[..., None], final.reshape(B, T, C), h)
    return xp.where(real[..., None], out, logits), h, features.reshape(B, T, F)


def kept_features(x, b: int, stop: int, drafter, layers, C: int):
    # x [B, T, F] (a pass over the batch's `layers`) -> row b's first `stop` positions, the
    # columns this row's drafter reads (the reference's `feature_columns`; an index array of
    # columns is copied over, a slice is a view)
    columns = feature_columns(drafter_feature_layers(drafter), layers, C)
    if not isinstance(columns, slice):
        columns = to_device(columns)
    return x[b, :stop, columns]


def batched_forward(model: GPT, tokens, n_new, cache: BatchKVCache):
    """tokens [B, T] right-padded (host), n_new [B] -> logits [B, T, V] on the device: the
    reference's `batched_forward`, with the reference's checks, run on the device."""
    model = as_twin_model(model)
    if not isinstance(cache, BatchKVCache):
        raise TypeError(
            f"cache must be the twin's BatchKVCache (gpu.new_batch_cache(model, B)), got "
            f"{type(cache).__name__}"
        )
    tokens, n_new = check_batched_forward(model, tokens, n_new, cache)
    return batched_forward_unchecked(model, to_device(tokens), n_new, cache)


# ------------------------------------------------------------------------------ the drafts


def pack_drafts(drafts: list[Draft | None], there: list[bool], n_vocab: int) -> DraftBatch:
    # drafts[b] (None: a finished row), there[b]: True if it is on the device -> DraftBatch.
    # The host proposals go over in one copy for their tokens and one for their q rows; a
    # device proposal is written in place (two device copies, row by row: the per-row path).
    B = len(drafts)
    live = np.array([d is not None for d in drafts], dtype=bool)
    k = np.array([0 if d is None else len(d.tokens) for d in drafts], dtype=np.int64)
    K = int(k.max(initial=0))
    host_rows = [b for b in range(B) if live[b] and not there[b] and k[b]]
    tokens = np.zeros((B, K), dtype=np.int64)
    q = np.zeros((B, K, n_vocab), dtype=np.float32)
    for b in host_rows:
        tokens[b, : k[b]], q[b, : k[b]] = drafts[b].tokens, drafts[b].q
    make = to_device if host_rows else (lambda a: xp.zeros(a.shape, dtype=a.dtype))
    tokens, q = make(tokens), make(q)  # the round's host proposals: one copy each
    for b in range(B):
        if live[b] and there[b] and k[b]:
            tokens[b, : k[b]], q[b, : k[b]] = drafts[b].tokens, drafts[b].q
    return DraftBatch(tokens, q, k, live)


class RowDrafting:
    """Each row's own drafter, row after row: any mix of drafters. A proposal made on the
    device stays there; the host proposals of a round (lookup, plug-ins) are checked on the
    host and copied over together (`pack_drafts`)."""

    def __init__(self, drafters: list[Drafter]) -> None:
        self.drafters = drafters

    def prefill(self, prompts: list[np.ndarray], h, n_new: np.ndarray, x=None, layers=None):
        # h [B, T, C]: the target's prefill pass; row n_new[b] - 1 scored prompt b's last
        # token; x [B, T, F]: its features before ln_f over `layers` (batch_feature_layers),
        # row b's first n_new[b] handed over, the columns its drafter reads
        for b, (drafter, prompt) in enumerate(zip(self.drafters, prompts, strict=True)):
            drafter.reset()
            if n_new[b]:
                drafter.observe(h[b, n_new[b] - 1])
                if x is not None:
                    C = h.shape[-1]
                    drafter.observe_features(kept_features(x, b, n_new[b], drafter, layers, C))
            drafter.prefill(prompt[:-1])

    def pointers(self) -> list[tuple[int, int] | None]:
        # (committed, end) of each row's draft cache; None for a drafter without one
        return [None if d.cache is None else (d.cache.length, d.cache.end) for d in self.drafters]

    def propose(self, contexts, k_rounds, sampling, rng, n_vocab: int) -> DraftBatch:
        drafts: list[Draft | None] = []
        there: list[bool] = []
        for drafter, context, k in zip(self.drafters, contexts, k_rounds, strict=True):
            if k is None:  # a finished row drafts nothing
                drafts.append(None)
                there.append(False)
                continue
            draft, on_device = checked_draft(
                drafter, drafter.propose(context, k, sampling, rng), k, n_vocab
            )
            drafts.append(draft)
            there.append(on_device)
        return pack_drafts(drafts, there, n_vocab)

    def settle(self, accepted: list[int | None], h, last: np.ndarray, x=None, layers=None):
        # every drafter keeps its accepted prefix and sees the target's row that scored its
        # sequence's last kept token (a device row: extra heads draft from it on the device)
        # and the features before ln_f of the positions it kept (x [B, T, F] over `layers`:
        # the columns its drafter reads, EAGLE's)
        for b, drafter in enumerate(self.drafters):
            if accepted[b] is not None:
                drafter.commit(accepted[b])
                drafter.rollback()
                drafter.observe(h[b, last[b]])
                if x is not None:
                    C = h.shape[-1]
                    drafter.observe_features(kept_features(x, b, last[b] + 1, drafter, layers, C))


def batch_drafting(drafters: list[Drafter], from_rows: int = BATCHED_FROM_ROWS):
    """Who drafts for a run's rows: one `BatchModelDrafter` (gpu/device/batch_drafting.py)
    when they can draft together and there are at least `from_rows` of them, else each row's
    own drafter (`RowDrafting`)."""
    if drafts_in_one_pass(drafters, from_rows):
        cache = new_batch_cache(drafters[0].model, len(drafters))
        return BatchModelDrafter(drafters, cache)
    return RowDrafting(drafters)


# ------------------------------------------------------------------------------ one round


def verification_rows(
    target: GPT, cache: BatchKVCache, contexts, drafts: DraftBatch, sampling, layers=None
):
    # -> (p [B, K+1, V] on the device, catch-up tokens fed per row [B] (host), h [B, T, C],
    # x [B, T, F] the features before ln_f, over `layers`):
    # ONE target pass over [catch-up tokens of b, drafts of b] for every live row; row b's
    # last k_b + 1 real positions score its drafts and its bonus position: p[b, :k_b + 1]
    B, K = drafts.tokens.shape
    none = np.zeros(0, dtype=np.int64)
    catch_up = [contexts[b][cache.length[b] :] if drafts.live[b] else none for b in range(B)]
    n_catch_up = np.array([len(c) for c in catch_up], dtype=np.int64)
    n_new = n_catch_up + drafts.k
    tokens = np.zeros((B, int(n_new.max())), dtype=np.int64)
    for b, c in enumerate(catch_up):
        tokens[b, : len(c)] = c
    tokens = to_device(tokens)  # the catch-up tokens of every row: one copy
    # every row's drafts after its own catch-up: one gather, one scatter
    row, column = ragged_positions(drafts.k)
    if len(row):
        at = to_device(np.stack([row, n_catch_up[row] + column, column]))
        tokens[at[0], at[1]] = drafts.tokens[at[0], at[2]]
    logits, h, x = batched_pass(target, tokens, n_new, cache, layers)  # [B,T,V], [B,T,C], [B,T,F]
    # row b's scoring positions n_new[b] - (k_b + 1) + j, j <= k_b; padding reads a finite 0
    j = np.arange(K + 1)[None, :]
    scoring = (j <= drafts.k[:, None]) & drafts.live[:, None]  # [B, K + 1]
    position = np.where(scoring, (n_new - drafts.k - 1)[:, None] + j, 0)
    picked = logits[xp.arange(B)[:, None], to_device(position)]  # [B, K + 1, V]
    picked = xp.where(to_device(scoring)[..., None], picked, 0)
    return probabilities(picked, sampling), n_catch_up, h, x


def batched_verification_pass(
    target: GPT, cache: BatchKVCache, contexts, drafts, sampling, layers=None
):
    # drafts[b]: Draft on the device or None -> (p[b] [k_b + 1, V] on the device or None,
    # catch-up tokens fed per row, h [B, T, C], x [B, T, F] the features before ln_f over
    # `layers`): the reference's signature, on the device
    batch = pack_drafts(drafts, [True] * len(drafts), target.n_vocab)
    p, n_catch_up, h, x = verification_rows(target, cache, contexts, batch, sampling, layers)
    rows = [None if d is None else p[b, : int(batch.k[b]) + 1] for b, d in enumerate(drafts)]
    return rows, n_catch_up.tolist(), h, x


def settle_rows(p, drafts: DraftBatch, rng: np.random.Generator) -> np.ndarray:
    # -> [B, 3 + K] int64 on the host, row b: (accepted n, token, p and q rows finite,
    # drafts...): every row decided on the device, brought back in the round's ONE transfer.
    # Row b's k_b + 1 uniforms are drawn in row order (the reference's), copied over at once.
    B, K = drafts.tokens.shape
    u = np.zeros((B, K + 1))
    for b in np.flatnonzero(drafts.live):
        u[b, : drafts.k[b] + 1] = rng.random(drafts.k[b] + 1)
    decided = decide_rows(p, drafts.q, drafts.tokens, to_device(u), to_device(drafts.k))
    # one flag for p and q: a broken model's NaN would otherwise pass for an accept (the
    # padding is finite, so it flags real rows only)
    finite = xp.all(xp.isfinite(p), axis=(1, 2)) & xp.all(xp.isfinite(drafts.q), axis=(1, 2))
    packed = xp.concatenate([decided, finite[:, None].astype(np.int64), drafts.tokens], axis=1)
    return to_host(packed)


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
    # the reference's batched round, each row drafting with its own drafter; its
    # verifications come back in ONE transfer
    drafting = RowDrafting(drafters)
    return drafted_round(
        drafting, target, cache, drafters, contexts, k_rounds, sampling, rng, verify_fn, clock
    )


def settle_rows_with(verify_fn, p, drafts: DraftBatch, rng, n_vocab: int) -> np.ndarray:
    # `settle_rows` with another verify (a plug-in runs on the host): p, q and the drafts
    # copied over once, then row b's Verification, checked, in row order -> [B, 3 + K]
    p, q, tokens = to_host(p), to_host(drafts.q), to_host(drafts.tokens)
    packed = np.zeros((tokens.shape[0], 3 + tokens.shape[1]), dtype=np.int64)
    packed[:, 3:] = tokens
    for b in np.flatnonzero(drafts.live):
        k_b = int(drafts.k[b])
        draft = Draft(tokens[b, :k_b], q[b, :k_b])
        v = plugin_verification(verify_fn, p[b, : k_b + 1], draft, rng, n_vocab)
        finite = np.isfinite(p[b]).all() and np.isfinite(q[b]).all()
        packed[b, :3] = v.accepted, v.token, finite
    return packed


def drafted_round(
    drafting,
    target,
    cache,
    drafters,
    contexts,
    k_rounds,
    sampling,
    rng,
    verify_fn=None,
    clock=None,
) -> list[Round | None]:
    # `batched_round` with who drafts for the rows given: `batch_drafting`'s choice for a run
    # (one BatchModelDrafter, or each row's own drafter: RowDrafting)
    clock = check_clock(clock)
    B = len(drafters)
    t_before, d_before = cache.length.copy(), drafting.pointers()

    drafts = drafting.propose(contexts, k_rounds, sampling, rng, target.n_vocab)  # 1. draft
    clock.mark("draft")
    layers = batch_feature_layers(drafters)  # what any row's drafter reads
    p, n_catch_up, h, x = verification_rows(  # 2.
        target, cache, contexts, drafts, sampling, layers
    )
    clock.mark("target")
    t_written, d_written = cache.end, drafting.pointers()
    if verify_fn is None:  # 3. verify every row; the round's one transfer
        outcome = settle_rows(p, drafts, rng)
    else:  # another verify: on host copies, row by row, as the reference runs it
        outcome = settle_rows_with(verify_fn, p, drafts, rng, target.n_vocab)
    clock.mark("verify")

    verifications: list[Verification | None] = [None] * B
    for b in np.flatnonzero(drafts.live):
        check_rows_finite(bool(outcome[b, 2]))
        verifications[b] = Verification(int(outcome[b, 0]), int(outcome[b, 1]))
    accepted = [None if v is None else v.accepted for v in verifications]
    keep = n_catch_up + np.array([a or 0 for a in accepted], dtype=np.int64)
    cache.commit(keep)  # 4. per-row commit, then every row's rollback
    cache.rollback()
    drafting.settle(accepted, h, keep - 1, x, layers)  # keep - 1: the last kept token's row
    d_after = drafting.pointers()
    rounds: list[Round | None] = [None] * B
    for b in np.flatnonzero(drafts.live):
        k_b, dc = int(drafts.k[b]), d_before[b]
        rounds[b] = Round(
            draft=Draft(outcome[b, 3 : 3 + k_b].copy(), drafts.q[b, :k_b]),
            p=p[b, : k_b + 1],
            verification=verifications[b],
            n_catch_up=int(n_catch_up[b]),
            target_cache=CacheSpan(int(t_before[b]), int(t_written[b]), int(cache.length[b])),
            draft_cache=CacheSpan(dc[0], d_written[b][1], d_after[b][0]) if dc else None,
        )
    return rounds


def batched_prefill(target: GPT, cache: BatchKVCache, drafters, prompts, drafting=None) -> None:
    # the reference's batched prefill: one ragged pass over every prompt but its last token;
    # then the drafters' own (`drafting`, as in `batched_round`)
    drafting = RowDrafting(drafters) if drafting is None else drafting
    tokens, n_new = pad_right([prompt[:-1] for prompt in prompts])
    layers = batch_feature_layers(drafters)
    _, h, x = batched_pass(target, to_device(tokens), n_new, cache, layers)
    cache.commit(n_new)
    drafting.prefill(prompts, h, n_new, x, layers)


@run_keywords
def speculative_generate_batch(
    target: GPT, drafters: list[Drafter], prompts, setup: RunSetup
) -> list[SpeculativeResult]:
    """The reference's `speculative_generate_batch` on the device: one target pass and one
    device -> host transfer per round for the whole batch, and one draft pass per drafting
    step when every row drafts with the same draft model. Reference models and drafters
    are accepted (copied to the device once and remembered). The loop is the reference's:
    a `Run` per sequence, around the twin's round."""
    target = as_twin_model(target)
    if not isinstance(drafters, (str, bytes)) and hasattr(drafters, "__len__"):
        drafters = [as_twin_drafter(d) for d in drafters]
    prompts, setup = check_batch_inputs(target, drafters, prompts, setup)
    sampling, rng, verify_fn, clock = setup.sampling, setup.rng, setup.verify_fn, setup.clock
    drafting = batch_drafting(drafters)  # after the checks: it builds a cache
    clock.restart()
    cache = new_batch_cache(target, len(prompts))
    batched_prefill(target, cache, drafters, prompts, drafting)
    clock.mark("prefill")
    runs = [Run.of(prompt, setup) for prompt in prompts]
    while not all(run.finished for run in runs):
        k_rounds = [None if run.finished else run.next_k() for run in runs]
        contexts = [run.context for run in runs]
        rounds = drafted_round(
            drafting, target, cache, drafters, contexts, k_rounds, sampling, rng, verify_fn, clock
        )
        record_rounds(runs, rounds, traced=host_round)
        clock.mark("other")
    return [run.result() for run in runs]

"""Batched drafting: one draft pass per step for every row of the twin's ragged batch.

No reference counterpart: the reference drafts row by row (`drafters[b].propose`), and so
does the twin's `RowDrafting` (gpu/batch.py) for any mix of drafters. Row by row, a round
of B rows costs B draft forwards per step, and on a device each forward is a few hundred
kernel launches whatever its size: the draft model, not the target, then prices a batched
round. (gpu/batch.py's `batch_drafting` chooses between the two once per run. `DraftBatch`,
the padded proposal both return, is defined here, and a `BatchModelDrafter` is handed the
batch cache it drafts in: this module never imports gpu/batch.py.)

When every row drafts with the library's twin `ModelDrafter` of ONE draft model (no
`min_confidence`: its early stop needs a host sync per row and step), the rows differ only
in their contexts and caches, so they draft together (`BatchModelDrafter`), from
BATCHED_FROM_ROWS (2) rows on:

    prefill     one ragged pass over every prompt but its last token (as the target's)
    step 0      one ragged pass: row b catches its cache up on its context (1 or 2
                tokens; more after rounds in which it drafted nothing)
    steps 1..   one pass of T = 1 for all rows: row b feeds its draft d_i while i < k_b - 1
    each step   q_i of every row in one `probabilities` call, every row's x_i by inverse CDF
                at its own uniform, all on the device
    commit      row b keeps its fed context and its accepted drafts among those fed

Row b's caches and draws are exactly what its own ModelDrafter would have: the same tokens
fed at the same slots, the same k_b uniforms drawn in row order, so the results equal the
per-row path: the same tokens, and q rows equal to float32 rounding (a padded pass sums
over more masked-out keys) -- tests/twin/test_batch_drafting.py holds both.
A finished row (k_b None) and a row drafting 0 tokens (at the length limit) feed nothing;
rows drafting fewer than K = max k_b tokens stop feeding early and carry padding.

The rows' own ModelDrafter objects are reset at the run's prefill and left unused: the
batch's cache holds their state during the run, and every `Round` reports its row's spans of
that cache, equal to what the row's own drafter would have reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu.device.backend import to_device, xp
from gpu.drafters import ModelDrafter
from gpu.sampling import pick
from reference.batch import batch_placement, pad_right
from reference.drafters import Drafter

__all__ = [
    "BATCHED_FROM_ROWS",
    "BatchModelDrafter",
    "DraftBatch",
    "drafts_in_one_pass",
    "drafts_together",
]


def drafts_together(drafters: list[Drafter]) -> bool:
    # True when every row's drafter is the twin's own ModelDrafter (its exact type: a
    # subclass may draft differently) of one draft model object, never stopping early
    model = getattr(drafters[0], "model", None)
    return all(
        type(d) is ModelDrafter and d.model is model and d.min_confidence is None for d in drafters
    )


# From two rows on, one batched pass costs fewer device operations than the rows' own
# passes: both run the fused block (gpu/model.py, 5 launches a block; a batch's attention is
# the same kernel, reading each row's pointers). Counted on the stand-in (the bundled pair,
# greedy, k=5, launches a round): row by row 231 / 354 / 423 at B = 2 / 3 / 4, batched 204 /
# 258 / 258. One row keeps its own drafter: a batch of one gains nothing by the padding.
BATCHED_FROM_ROWS = 2


def drafts_in_one_pass(drafters: list[Drafter], from_rows: int = BATCHED_FROM_ROWS) -> bool:
    # True when a run's rows draft together: `from_rows` or more rows that can
    return len(drafters) >= from_rows and drafts_together(drafters)


@dataclass(frozen=True)
class DraftBatch:
    """Every row's proposal of one round, right-padded to the longest (K = max k_b).

    Padding is finite and in range (token ids, q rows of zeros or of a padding distribution),
    never read as a draft: `decide_rows` stops each row at its own k_b."""

    tokens: object  # [B, K] int64 on the device: row b's drafts in [:k[b]]
    q: object  # [B, K, V] float32 on the device: row b's q rows in [:k[b]]
    k: np.ndarray  # [B] int64 on the host: drafts per row (0 for a finished row)
    live: np.ndarray  # [B] bool on the host: False for a finished row (no draft, no verify)


class BatchModelDrafter:
    """B rows of one draft model drafting together, their caches side by side in one
    BatchKVCache; the cache discipline of each row is the reference ModelDrafter's."""

    def __init__(self, drafters: list[ModelDrafter], cache) -> None:
        # cache: an empty gpu.batch.BatchKVCache of the draft model, one row per drafter
        # (gpu.batch.new_batch_cache(drafters[0].model, len(drafters)))
        if not drafters or not drafts_together(drafters):
            raise ValueError(
                "BatchModelDrafter drafts for ModelDrafters of one draft model without "
                "min_confidence; use RowDrafting (gpu.batch) for any other drafters"
            )
        if len(cache.length) != len(drafters):
            raise ValueError(
                f"BatchModelDrafter: a cache of {len(cache.length)} rows for "
                f"{len(drafters)} drafters; make it with new_batch_cache(model, len(drafters))"
            )
        self.drafters = drafters
        self.model = drafters[0].model
        self.cache = cache
        B = len(drafters)
        self.fed_context = np.zeros(B, dtype=np.int64)  # [B] context tokens fed this round
        self.fed_drafts = np.zeros(B, dtype=np.int64)  # [B] drafts fed this round (k_b - 1)

    def prefill(self, prompts: list[np.ndarray], h, n_new: np.ndarray, x=None, layers=None):
        # prompts[b] [n_b] -> None: every prompt but its last token cached in one pass (h, x,
        # n_new and layers, the target's, are not read: a draft model reads tokens only)
        for drafter in self.drafters:
            drafter.reset()  # their state lives in this batch's cache until the run ends
        self.cache.reset()
        self.fed_context[:] = self.fed_drafts[:] = 0
        tokens, fed = pad_right([prompt[:-1] for prompt in prompts])
        at = batch_placement(self.cache.end, fed, tokens.shape[1])
        if at.stop:  # 0 when every prompt is one token long: nothing to cache
            self.model.residual(to_device(tokens), self.cache, at)  # writes K/V only
        self.cache.commit(fed)

    def pointers(self) -> list[tuple[int, int]]:
        # (committed, end) of each row's part of the cache, as a row's own drafter reports
        return list(zip(self.cache.length.tolist(), self.cache.end.tolist(), strict=True))

    def propose(self, contexts, k_rounds, sampling, rng, n_vocab: int) -> DraftBatch:
        # contexts[b] [n_b] committed tokens, k_rounds[b] drafts (None: finished) -> every
        # row's Draft(tokens [k_b], q [k_b, V]), padded to K = max k_b, on the device
        B = len(contexts)
        live = np.array([k is not None for k in k_rounds], dtype=bool)
        k = np.array([k or 0 for k in k_rounds], dtype=np.int64)
        K = int(k.max(initial=0))
        self.cache.rollback()  # a proposal never builds on an earlier, unverified one
        u = np.zeros((B, K))  # each row's k_b uniforms, in row order: what its drafter draws
        for b in np.flatnonzero(k):
            u[b, : k[b]] = rng.random(k[b])
        # a row that drafts catches up on the context its cache has not seen; one that
        # drafts nothing (finished, or at the length limit) feeds nothing, as its drafter
        none = np.zeros(0, dtype=np.int64)
        catch_up = [contexts[b][self.cache.length[b] :] if k[b] else none for b in range(B)]
        tokens, self.fed_context = pad_right(catch_up)
        self.fed_drafts = np.maximum(k - 1, 0)
        if K == 0:
            empty = xp.zeros((B, 0), dtype=np.int64), xp.zeros((B, 0, n_vocab), np.float32)
            return DraftBatch(*empty, k, live)
        u = to_device(np.ascontiguousarray(u.T))  # [K, B]: step i's uniforms side by side
        logits = self.last_logits(to_device(tokens), self.fed_context)  # [B, V]: q_1's
        drafted, rows = [], []
        for i in range(K):
            rows.append(xp.empty((B, n_vocab), dtype=np.float32))  # q_i of every row
            drafted.append(xp.empty(B, dtype=np.int64))  # x_i ~ q_i of every row
            pick(logits, sampling, u[i], probs=rows[-1], tokens=drafted[-1])  # one launch
            if i < K - 1:  # row b feeds x_i while it has drafts left to score (i < k_b - 1)
                feeding = (i < k - 1).astype(np.int64)
                logits = self.last_logits(drafted[-1][:, None], feeding)
        tokens = xp.stack(drafted, axis=1).astype(np.int64)  # [B, K]
        return DraftBatch(tokens, xp.stack(rows, axis=1), k, live)  # q [B, K, V]

    def last_logits(self, tokens, n_new: np.ndarray):
        # tokens [B, T] (device, padding any valid id), n_new [B] (host) -> [B, V]: each
        # row's logits after its last fed token, their K/V left in the cache. Only those B
        # rows go through LN_f and the output layer. A row that fed nothing gets zeros
        # (finite padding, never drafted from; a broken model's NaN still shows in real rows).
        B, T = tokens.shape
        at = batch_placement(self.cache.end, n_new, T)
        x = self.model.residual(tokens, self.cache, at).reshape(B, T, -1)  # [B, T, C]
        if T == 1:
            last = x[:, 0]  # a view
        else:
            last = x[xp.arange(B), to_device(np.maximum(n_new - 1, 0))]
        logits = self.model.output(last)  # [B, V]: LN_f and the output layer, one launch
        return xp.where(to_device(n_new > 0)[:, None], logits, 0)

    def settle(self, accepted: list[int | None], h, last, x=None, layers=None) -> None:
        # row b keeps its fed context and the accepted drafts among those it fed; the rest of
        # every row is dropped (h, last, x, layers: the target's, not read by a draft model)
        keep = [
            0 if a is None else int(self.fed_context[b]) + min(a, int(self.fed_drafts[b]))
            for b, a in enumerate(accepted)
        ]
        self.cache.commit(np.array(keep, dtype=np.int64))
        self.cache.rollback()

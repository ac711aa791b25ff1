"""The twin's ragged batch: B sequences per round, one target pass, one transfer back.

What differs from reference/batch.py, and why:
* The slots, the padded [B, T] inputs, the masks and every row's p and q live on the device;
  the per-row pointers (length[B], pending[B]) stay on the host, as in the single-sequence
  twin: the host learns each row's accepted count from the round's transfer anyway.
* ONE device -> host transfer per batched round, not one per sequence: every row's
  (accepted n, token, drafts padded to the longest, p and q rows finite) is packed into one
  int64 array [B, 3 + k]. A row that has finished rides along with n_new = 0 and sends nothing.
* Each row's `decide` (gpu/verification.py) runs on the device with its k_b + 1 uniforms,
  drawn from the numpy Generator in the reference's order: every row's drafts (b = 0..B-1),
  then every row's verification. Greedy batches equal the reference's token for token.
* The pass is the model's one forward (`GPT.residual_at`) with the reference's
  `batch_placement`, whose mask the twin model copies over once per pass; cache writes go
  row by row (B small copies per layer; a scatter kernel would make it one, not done here).
The bookkeeping (prefill, stop rules, statistics), the input checks and the result types are
the reference's.
"""

from __future__ import annotations

import numpy as np

from gpu.backend import to_device, to_host, xp
from gpu.drafters import as_twin_drafter
from gpu.model import GPT, as_twin_model
from gpu.sampling import probabilities
from gpu.speculative import check_rows_finite, device_draft
from gpu.verification import decide
from reference import batch as reference_batch
from reference.batch import (
    batch_placement,
    check_batch_inputs,
    check_batched_forward,
    pad_right,
    run_batch_rounds,
)
from reference.drafters import Draft, Drafter
from reference.kv_cache import catch_up_tokens
from reference.sampling import SamplingParams
from reference.speculative import (
    CacheSpan,
    Round,
    SpeculativeResult,
    cache_span_start,
)
from reference.verification import Verification

__all__ = [
    "BatchKVCache",
    "batched_forward",
    "batched_round",
    "batched_verification_pass",
    "new_batch_cache",
    "speculative_generate_batch",
]


class BatchKVCache(reference_batch.BatchKVCache):
    """The reference's BatchKVCache with its slots [B, L, nh, N, hs] in device memory."""

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

    def write(self, layer: int, start, n_new, k, v) -> None:
        # start [B], n_new [B] on the host; k/v [B, nh, T, hs] on the device
        for b, (s, n) in enumerate(zip(start.tolist(), n_new.tolist(), strict=True)):
            if n:
                self.k[b, layer, :, s : s + n] = k[b, :, :n]
                self.v[b, layer, :, s : s + n] = v[b, :, :n]


def new_batch_cache(model: GPT, batch_size: int, capacity: int | None = None) -> BatchKVCache:
    cfg = model.config
    capacity = cfg.n_ctx if capacity is None else capacity
    if capacity > cfg.n_ctx:
        raise ValueError(f"cache capacity {capacity} exceeds the model's n_ctx {cfg.n_ctx}")
    return BatchKVCache(batch_size, cfg.n_layer, cfg.n_head, cfg.head_size, capacity)


def batched_forward_unchecked(model: GPT, tokens, n_new: np.ndarray, cache: BatchKVCache):
    # tokens [B, T] (device), n_new [B] (host) -> logits [B, T, V] on the device
    return batched_pass(model, tokens, n_new, cache)[0]


def batched_pass(model: GPT, tokens, n_new: np.ndarray, cache: BatchKVCache):
    # tokens [B, T] (device), n_new [B] (host) -> (logits [B, T, V], h [B, T, C]) on the
    # device: the reference's placement and the model's one forward; padding rows are NaN
    V, C = model.n_vocab, model.config.n_embd
    B, T = tokens.shape
    at = batch_placement(cache.end, n_new, T)  # on the host: pointers and mask
    logits = xp.full((B, T, V), np.nan, dtype=np.float32)
    h = xp.full((B, T, C), np.nan, dtype=np.float32)
    if at.stop == 0:
        return logits, h
    real = xp.arange(T)[None, :] < to_device(n_new)[:, None]  # [B, T]
    x = model.norm(model.residual_at(xp.where(real, tokens, 0), at, cache), "ln_f")  # [B*T, C]
    out = model.logits(x).reshape(B, T, V)
    return xp.where(real[..., None], out, logits), xp.where(real[..., None], x.reshape(B, T, C), h)


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


def batched_verification_pass(target: GPT, cache: BatchKVCache, contexts, drafts, sampling):
    # -> (p[b] [k_b + 1, V] on the device or None, catch-up tokens fed per row, h [B, T, C])
    B = len(drafts)
    rows, n_catch_up = [], []
    for b, draft in enumerate(drafts):
        if draft is None:
            rows.append(None)
            n_catch_up.append(0)
            continue
        new = to_device(catch_up_tokens(cache.row(b), contexts[b]), dtype=np.int64)
        rows.append(xp.concatenate([new, draft.tokens]))
        n_catch_up.append(int(new.shape[0]))
    n_new = np.array([0 if r is None else int(r.shape[0]) for r in rows], dtype=np.int64)
    tokens = xp.zeros((B, int(n_new.max(initial=0))), dtype=np.int64)
    for b, r in enumerate(rows):
        if r is not None:
            tokens[b, : n_new[b]] = r
    logits, h = batched_pass(target, tokens, n_new, cache)
    p = []
    for b, draft in enumerate(drafts):
        if draft is None:
            p.append(None)
            continue
        k_b, n_b = int(draft.tokens.shape[0]), int(n_new[b])
        p.append(probabilities(logits[b, n_b - (k_b + 1) : n_b], sampling))
    return p, n_catch_up, h


def batched_round(
    target: GPT,
    cache: BatchKVCache,
    drafters: list[Drafter],
    contexts: list[np.ndarray],
    k_rounds: list[int | None],
    sampling: SamplingParams,
    rng: np.random.Generator,
) -> list[Round | None]:
    # the reference's batched round; its verifications come back in ONE transfer
    B = len(drafters)
    draft_caches = [d.cache for d in drafters]
    t_before = cache.length.copy()
    d_before = [cache_span_start(c)[0] for c in draft_caches]

    drafts: list[Draft | None] = [None] * B
    for b in range(B):  # 1. draft, sequence by sequence
        if k_rounds[b] is not None:
            drafts[b] = device_draft(
                drafters[b], contexts[b], k_rounds[b], sampling, rng, target.n_vocab
            )
    p, n_catch_up, h = batched_verification_pass(target, cache, contexts, drafts, sampling)
    t_written = cache.end
    d_written = [cache_span_start(c)[1] for c in draft_caches]

    width = 3 + max((int(d.tokens.shape[0]) for d in drafts if d is not None), default=0)
    packed = xp.zeros((B, width), dtype=np.int64)  # row b: n, token, finite, drafts...
    for b in range(B):  # 3. verify on the device, sequence by sequence
        if drafts[b] is None:
            continue
        k_b = int(drafts[b].tokens.shape[0])
        u = to_device(rng.random(k_b + 1))
        packed[b, :2] = decide(p[b], drafts[b].q, drafts[b].tokens, u)
        finite = xp.all(xp.isfinite(p[b])) & xp.all(xp.isfinite(drafts[b].q))  # p and q
        packed[b, 2] = finite.astype(np.int64)
        packed[b, 3 : 3 + k_b] = drafts[b].tokens
    outcome = to_host(packed)  # the round's one transfer

    verifications: list[Verification | None] = [None] * B
    keep = np.zeros(B, dtype=np.int64)
    for b in range(B):
        if drafts[b] is not None:
            check_rows_finite(bool(outcome[b, 2]))
            verifications[b] = Verification(int(outcome[b, 0]), int(outcome[b, 1]))
            keep[b] = n_catch_up[b] + verifications[b].accepted
    cache.commit(keep)  # 4. per-row commit, then every row's rollback
    cache.rollback()
    rounds: list[Round | None] = [None] * B
    for b in range(B):
        if drafts[b] is None:
            continue
        drafters[b].commit(verifications[b].accepted)
        drafters[b].rollback()
        last = n_catch_up[b] + verifications[b].accepted - 1  # row of the last kept token
        drafters[b].observe(h[b, last])  # a device row: extra heads draft from it on the device
        k_b, dc = int(drafts[b].tokens.shape[0]), draft_caches[b]
        rounds[b] = Round(
            draft=Draft(outcome[b, 3 : 3 + k_b].copy(), drafts[b].q),
            p=p[b],
            verification=verifications[b],
            n_catch_up=n_catch_up[b],
            target_cache=CacheSpan(int(t_before[b]), int(t_written[b]), int(cache.length[b])),
            draft_cache=CacheSpan(d_before[b], d_written[b], dc.length) if dc else None,
        )
    return rounds


def batched_prefill(target: GPT, cache: BatchKVCache, drafters, prompts) -> None:
    # the reference's batched prefill: one ragged pass over every prompt but its last token
    tokens, n_new = pad_right([prompt[:-1] for prompt in prompts])
    h = batched_pass(target, to_device(tokens), n_new, cache)[1]
    cache.commit(n_new)
    for b, (drafter, prompt) in enumerate(zip(drafters, prompts, strict=True)):
        drafter.reset()
        if n_new[b]:
            drafter.observe(h[b, n_new[b] - 1])  # the row that scored the prompt's last token
        drafter.prefill(prompt[:-1])


def speculative_generate_batch(
    target: GPT,
    drafters: list[Drafter],
    prompts,
    *,
    k: int,
    max_new_tokens: int,
    rng: np.random.Generator,
    sampling: SamplingParams = SamplingParams(),
    eos_id: int | None = None,
) -> list[SpeculativeResult]:
    """The reference's `speculative_generate_batch` on the device: one target pass and one
    device -> host transfer per round for the whole batch. Reference models and drafters
    are accepted (copied to the device once and remembered)."""
    target = as_twin_model(target)
    if not isinstance(drafters, (str, bytes)) and hasattr(drafters, "__len__"):
        drafters = [as_twin_drafter(d) for d in drafters]
    prompts, k, max_new_tokens, eos_id = check_batch_inputs(
        target, drafters, prompts, k, max_new_tokens, rng, sampling, eos_id
    )
    return run_batch_rounds(
        target,
        drafters,
        prompts,
        k,
        max_new_tokens,
        rng,
        sampling,
        eos_id,
        new_cache=new_batch_cache,
        prefill=batched_prefill,
        round_fn=batched_round,
    )

"""The twin's speculative loop: every round on the device, one transfer back per round.

What differs from reference/speculative.py, and why:
* The round's data never visits the host: the drafts and their q rows come from the device
  drafter, the verification pass writes the device cache and leaves p there, and `decide`
  (gpu/verification.py) settles accept / reject, residual and bonus there.
* ONE device -> host transfer per round brings back, packed in one int64 array,
  (accepted n, token, the k drafted ids, a flag saying the rows were finite): the host needs
  exactly these to move the cache pointers, emit tokens and apply EOS / length. Checking the
  logits for NaN the reference's way would be one more sync per call; the flag replaces it.
* The uniforms of a round (k for drafting, k + 1 for `decide`) come from the numpy
  Generator `rng` in two host calls and are copied to the device with the round's inputs.
  Same law as the reference, not the same stream: greedy runs are token-for-token equal,
  sampled runs equal in law (the oracle checks it: `make oracle-gpu`).
* A plug-in `verify_fn`, a drafter that is not the twin's, or `trace=True` are served too,
  at the price of more transfers (a plug-in or a host drafter works on host arrays; a trace
  copies every round's p and q rows to the host).
* Drafters made of the target itself (early exit, extra heads, or a hybrid falling back on
  them) are refused with NotImplementedError: sharing the lower blocks' rows and handing
  the hidden state over are not in the twin yet. Its verification pass returns the hidden
  rows like the reference's.
The loop around the round (prefill, stop rules, statistics, trace) and every result type are
the reference's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpu.backend import to_device, to_host, xp
from gpu.drafters import ModelDrafter, as_twin_drafter
from gpu.kv_cache import KVCache
from gpu.model import GPT, as_twin_model
from gpu.sampling import probabilities
from gpu.verification import decide
from reference.checks import check_clock
from reference.drafters import Draft, Drafter
from reference.early_exit import EarlyExitDrafter
from reference.heads import HeadsDrafter
from reference.kv_cache import catch_up_tokens
from reference.lookup import HybridDrafter
from reference.sampling import SamplingParams
from reference.speculative import (
    CacheSpan,
    Round,
    RoundTrace,
    RunSetup,
    SpeculativeResult,
    SpeculativeStats,
    cache_span_start,
    check_draft,
    check_loop_inputs,
    run_rounds,
)
from reference.verification import Verification

__all__ = [
    "Round",
    "RoundTrace",
    "SpeculativeResult",
    "SpeculativeStats",
    "speculative_generate",
    "speculative_round",
    "verification_pass",
]


def verification_pass(target: GPT, cache: KVCache, context, draft_tokens, sampling, shared=None):
    # -> (p [k+1, V] on the device, number of catch-up tokens fed, h [k+1, C] on the device):
    # ONE target forward. The twin has no early-exit drafter yet, so no rows to share.
    if shared is not None:
        raise NotImplementedError("the GPU twin does not reuse an early-exit drafter's rows (yet)")
    new = to_device(catch_up_tokens(cache, np.asarray(context)), dtype=np.int64)
    tokens = xp.concatenate([new, to_device(draft_tokens, dtype=np.int64)])
    k = int(draft_tokens.shape[0])
    h = target.norm(target.residual_unchecked(tokens, cache)[-(k + 1) :], "ln_f")
    return probabilities(target.logits(h), sampling), int(new.shape[0]), h


def on_device(array) -> bool:
    return hasattr(array, "__cuda_array_interface__")


def drafts_from_the_target(drafter) -> bool:
    # early exit and extra heads (alone, or as a hybrid's fallback) share the target's
    # layers or read its state: not implemented in the twin yet
    if isinstance(drafter, HybridDrafter):
        return drafts_from_the_target(drafter.fallback)
    return isinstance(drafter, (EarlyExitDrafter, HeadsDrafter))


def device_draft(drafter: Drafter, context, k: int, sampling, rng, n_vocab: int) -> Draft:
    # the drafter's proposal on the device. A twin drafter's (or one that wraps it, e.g. a
    # hybrid) is already there: shapes only, nothing to copy. A host drafter's is checked
    # on the host like the reference's, then copied over.
    if drafts_from_the_target(drafter):
        raise NotImplementedError(
            f"{type(drafter).__name__} drafts from the target's own layers or state, which "
            f"the GPU twin does not implement yet; use the reference backend"
        )
    draft = drafter.propose(context, k, sampling, rng)
    if isinstance(drafter, ModelDrafter) or on_device(draft.tokens):
        if draft.tokens.shape[0] > k or draft.q.shape != (draft.tokens.shape[0], n_vocab):
            raise ValueError(
                f"the drafter proposed {draft.tokens.shape[0]} tokens with q of shape "
                f"{draft.q.shape}; at most {k} tokens and q [k, {n_vocab}] were expected"
            )
        return draft
    check_draft(draft, k, n_vocab)
    return Draft(to_device(draft.tokens, dtype=np.int64), to_device(draft.q))


def settle(p, draft: Draft, rng: np.random.Generator, verify_fn) -> tuple[Verification, np.ndarray]:
    # -> (the verification, the drafted ids on the host), with ONE transfer when verify_fn
    # is None: (n, token, drafts..., rows finite) packed in one int64 array
    k = int(draft.tokens.shape[0])
    if verify_fn is not None:  # a plug-in decides on host copies
        p_host, q_host, tokens = to_host(p), to_host(draft.q), to_host(draft.tokens)
        check_rows_finite(bool(np.all(np.isfinite(p_host))))
        answer = verify_fn(p_host, q_host, tokens, rng)  # checked before a cache moves
        return Verification.from_plugin(answer, k, p_host.shape[-1], verify_fn), tokens
    u = to_device(rng.random(k + 1))
    finite = xp.all(xp.isfinite(p)).astype(np.int64).reshape(1)
    packed = to_host(xp.concatenate([decide(p, draft.q, draft.tokens, u), draft.tokens, finite]))
    check_rows_finite(bool(packed[-1]))
    return Verification(int(packed[0]), int(packed[1])), packed[2 : 2 + k]


def check_rows_finite(finite: bool) -> None:
    if not finite:
        raise ValueError("logits contains NaN or inf; it must be finite (a broken model?)")


def speculative_round(
    target: GPT,
    cache: KVCache,
    drafter: Drafter,
    context,
    k: int,
    sampling: SamplingParams,
    rng: np.random.Generator,
    verify_fn: Callable[..., Verification] | None = None,
    clock=None,
) -> Round:
    # context [n] committed tokens (host) -> Round, with its draft tokens on the host and its
    # q and p rows on the device. Same steps as the reference's round.
    clock = check_clock(clock)
    draft_cache = drafter.cache
    t_before, d_before = cache.length, cache_span_start(draft_cache)[0]

    draft = device_draft(drafter, context, k, sampling, rng, target.n_vocab)  # 1. draft
    clock.mark("draft")
    p, n_catch_up, _ = verification_pass(target, cache, context, draft.tokens, sampling)  # 2.
    clock.mark("target")
    t_written, d_written = cache.end, cache_span_start(draft_cache)[1]
    v, drafted = settle(p, draft, rng, verify_fn)  # 3. verify, and the round's one transfer
    clock.mark("verify")

    cache.commit(n_catch_up + v.accepted)  # 4. keep the catch-up tokens and accepted drafts
    cache.rollback()  # ... and drop the rejected drafts' slots
    drafter.commit(v.accepted)
    drafter.rollback()
    return Round(
        draft=Draft(drafted.astype(np.int64), draft.q),
        p=p,
        verification=v,
        n_catch_up=n_catch_up,
        target_cache=CacheSpan(t_before, t_written, cache.length),
        draft_cache=CacheSpan(d_before, d_written, draft_cache.length) if draft_cache else None,
    )


def host_round(rnd: Round) -> Round:
    # the same round with its rows copied to the host (for a trace: two more transfers)
    draft = Draft(rnd.draft.tokens, to_host(rnd.draft.q))
    return Round(
        draft, to_host(rnd.p), rnd.verification, rnd.n_catch_up, rnd.target_cache, rnd.draft_cache
    )


def speculative_generate(
    target: GPT,
    drafter: Drafter,
    prompt,
    *,
    k: int,
    max_new_tokens: int,
    rng: np.random.Generator,
    sampling: SamplingParams = SamplingParams(),
    eos_id: int | None = None,
    trace: bool = False,
    verify_fn: Callable[..., Verification] | None = None,
    clock=None,
) -> SpeculativeResult:
    # prompt [n] -> SpeculativeResult(tokens [<= max_new_tokens], stats, trace): the
    # reference's checks and loop (`run_rounds`) around the twin's round. A reference GPT or
    # ModelDrafter is accepted too: its weights are copied to the device once (and
    # remembered), so the oracle can hand the twin its own models.
    target, drafter = as_twin_model(target), as_twin_drafter(drafter)
    prompt, k, max_new_tokens, eos_id, clock = check_loop_inputs(
        target, drafter, prompt, k, max_new_tokens, rng, sampling, eos_id, verify_fn, clock
    )
    setup = RunSetup(
        target, drafter, sampling, rng, verify_fn, clock, speculative_round, host_round
    )
    return run_rounds(setup, prompt, k, max_new_tokens, eos_id, trace)

"""The twin's speculative loop: every round on the device, one transfer back per round.

What differs from reference/speculative.py, and why:
* The round's data never visits the host: the drafts and their q rows come from the device
  drafter, the verification pass writes the device cache and leaves p there, and `decide`
  (gpu/verification.py) settles accept / reject, residual and bonus there.
* ONE device -> host transfer per round brings back, packed in one int64 array,
  (accepted n, token, the k drafted ids, a flag saying the p and q rows were finite): the
  host needs exactly these to move the cache pointers, emit tokens and apply EOS / length.
  Checking the logits for NaN the reference's way would be one more sync per call (per
  drafted token, for the draft model); the flag replaces it.
* The uniforms of a round (k for drafting, k + 1 for `decide`) come from the numpy
  Generator `rng` in two host calls and are copied to the device with the round's inputs.
  Same law as the reference, not the same stream: greedy runs are token-for-token equal,
  sampled runs equal in law (the oracle checks it: `make oracle-gpu`).
* Every drafter runs. The twin's own (ModelDrafter, EarlyExitDrafter, HeadsDrafter,
  EagleDrafter, and a HybridDrafter's fallback when it is one of them) draft on the device:
  their proposal is only shape-checked, and the round still makes ONE transfer. A host
  drafter (LookupDrafter, a hybrid's lookup rounds, a plug-in) drafts on the host; its
  proposal is checked there as in the reference and copied over, which is a host -> device
  copy, not a transfer back.
  A reference drafter is swapped for its twin once (`as_twin_drafter`).
* Drafters made of the target work as in the reference: an early-exit draft's shared rows
  (device arrays) start the verification pass at the exit layer (`verification_pass` takes
  `shared`), and the round hands the target's last hidden row, a device row, to
  `drafter.observe` (extra heads draft from it), and its pre-norm features of the kept
  positions, device rows, to `drafter.observe_features` (EAGLE drafts from them), as
  prefill does (the reference's `prefill`, run on the twin target).
* Where every launch of it is a fused kernel (a plain pass of up to 16 rows: no early-exit
  rows, no extra feature layers), the verification pass is one CUDA graph per (k,
  catch-up count, sampling), captured at its first round and replayed after one copy of its
  slot and catch-up tokens and one device write of the drafts (`replayed_verification`,
  gpu/device/graphs.py); its p, h and x are then the graph's buffers, rewritten each round.
* A plug-in `verify_fn` or `trace=True` are served too, at the price of more transfers (a
  plug-in decides on host copies; a trace copies every round's p and q rows to the host).
The loop around the round (prefill, stop rules, statistics, trace) and every result type are
the reference's.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np

from gpu.device.backend import copy_into, on_device, to_device, to_host, xp
from gpu.device.fused import pick_fits
from gpu.device.graphs import StepGraph, graphs_on, slot_from
from gpu.device.kernels import MAX_HS, MAX_ROWS, MAX_S
from gpu.drafters import ModelDrafter, as_twin_drafter
from gpu.eagle import EagleDrafter
from gpu.heads import HeadsDrafter
from gpu.kv_cache import KVCache
from gpu.model import GPT, as_twin_model
from gpu.sampling import pick, probabilities
from gpu.verification import decide_packed
from reference.checks import check_clock
from reference.drafters import (
    Draft,
    Drafter,
    SharedLayers,
    drafter_feature_layers,
    proposals_checked,
)
from reference.kv_cache import catch_up_tokens
from reference.lookup import HybridDrafter
from reference.records import CacheSpan, Round, RoundTrace, SpeculativeResult, SpeculativeStats
from reference.sampling import SamplingParams
from reference.speculative import (
    RunSetup,
    cache_span_start,
    check_draft,
    check_loop_inputs,
    check_shared,
    run_keywords,
    start_run,
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


def verification_pass(
    target: GPT, cache: KVCache, context, draft_tokens, sampling, shared: SharedLayers | None = None
):
    # context [n] (host), draft_tokens [k] (device) -> (p [k+1, V] on the device, number of
    # catch-up tokens fed, h [k+1, C] on the device): ONE target forward, as the reference's,
    # in the reference's two halves (`target_features`, `scored_rows`)
    x, n_catch_up = target_features(target, cache, context, draft_tokens, shared)
    p, h = scored_rows(target, x, int(draft_tokens.shape[0]), sampling)
    return p, n_catch_up, h


def target_features(target: GPT, cache: KVCache, context, draft_tokens, shared=None, layers=None):
    # -> (x [n_catch_up + k, F] on the device, n_catch_up): the pass's forward, stopped
    # before the final norm (what an EAGLE drafter reads); F = C, or with `layers` the
    # residual streams after those blocks side by side (GPT.layer_features), the top last.
    # With `shared` (an early-exit drafter's device rows) the rows it ran start at its exit
    # layer: the reference's SharedLayers.continue_in, on device arrays.
    new = to_device(catch_up_tokens(cache, np.asarray(context)), dtype=np.int64)
    tokens = xp.concatenate([new, to_device(draft_tokens, dtype=np.int64)])
    if shared is not None:
        if layers is not None and len(layers) > 1:
            raise ValueError(
                "a drafter that shares the target's lower-layer rows (early exit) cannot also "
                f"read features of several layers (feature_layers={layers})"
            )
        x = shared.continue_in(target, cache, tokens)
    elif layers is None:
        x = target.residual(tokens, cache)
    else:
        x = target.layer_features(tokens, cache, None, layers)
    return x, int(new.shape[0])


def scored_rows(target: GPT, x, k: int, sampling):
    # features x [T, F] (device) -> (p [k+1, V], h [k+1, C]) on the device: the last k+1
    # rows' top feature (the last C columns, a view) through ln_f (kept: extra heads read
    # it) and the output layer, then processed
    h = target.norm(x[-(k + 1) :, -target.config.n_embd :], "ln_f")
    return probabilities(target.logits(h), sampling), h


# ---------------------------------------------------------------- the pass as a CUDA graph

MAX_CATCH_UP = 2  # catch-up tokens a graphed pass takes (1, or 2 after a full accept)


class VerificationGraph:
    """The verification pass of one (k, catch-up count, sampling) for one target cache: a
    graph (gpu/device/graphs.py) whose device array `steps.args` holds, int64,
    [slot, MAX_CATCH_UP catch-up token places, k drafts]: the pass's first cache slot and its
    input tokens (args[1 + MAX_CATCH_UP - n_catch_up:]), all read by the kernels at each
    replay. p [k + 1, V] is allocated once; x and h are the captured pass's own outputs."""

    def __init__(self, k: int, n_vocab: int) -> None:
        self.steps = StepGraph(1 + MAX_CATCH_UP + k)
        self.p = xp.zeros((k + 1, n_vocab), dtype=np.float32)
        self.x = self.h = None  # set by each run of the pass (the capture's, on a device)


# target cache -> {(k, n_catch_up, sampling): VerificationGraph}; weak keys: a run's cache
# lives as long as its run, and its graphs with it
_verification_graphs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def verification_by_graph(
    target: GPT, cache: KVCache, context, draft: Draft, sampling, layers
) -> bool:
    # True when this round's verification pass can be one captured graph: graphs on, a plain
    # pass (no early-exit rows to continue, no extra feature layers), rows within the fused
    # kernels' limits (every launch a kernel), a sampling mode the fused draw serves
    k, n_catch_up = int(draft.tokens.shape[0]), len(context) - cache.length
    cfg = target.config
    return (
        graphs_on()
        and target.fused_steps  # a twin Llama's pass runs bodies: no graph holds it
        and draft.shared is None
        and (layers is None or len(layers) == 1)
        and k >= 1
        and 1 <= n_catch_up <= MAX_CATCH_UP
        and n_catch_up + k <= MAX_ROWS
        and isinstance(cache, KVCache)
        and cache.capacity <= MAX_S
        and cfg.n_embd // cfg.n_head <= MAX_HS
        and pick_fits(sampling)
    )


def replayed_verification(target: GPT, cache: KVCache, context, draft: Draft, sampling):
    # -> (x [n_catch_up + k, C], p [k + 1, V], h [k + 1, C], n_catch_up) on the device, as
    # `target_features` and `scored_rows` compute them, from one replay of this shape's graph
    # (captured at its first round): the slot and the catch-up tokens in one copy, the drafts
    # written into the graph's array on the device
    k = int(draft.tokens.shape[0])
    new = catch_up_tokens(cache, np.asarray(context))
    n = len(new)
    graphs = _verification_graphs.setdefault(cache, {})
    if (k, n, sampling) not in graphs:
        graphs[k, n, sampling] = VerificationGraph(k, target.n_vocab)
    graph = graphs[k, n, sampling]
    graph.steps.args[1 + MAX_CATCH_UP :] = draft.tokens  # one launch, device to device
    captured = graph.steps.run is not None or graph.steps.capture(
        lambda: graphed_pass(target, cache, graph, k, n, sampling)
    )
    head = np.zeros(1 + MAX_CATCH_UP, dtype=np.int64)  # [slot, catch-up places]
    head[0], head[1 + MAX_CATCH_UP - n :] = cache.end, new
    if not captured:  # the device refused the capture (graphs off from now on): launched
        copy_into(graph.steps.args[: len(head)], head)
        pass_rows(target, cache, graph, k, n, sampling, None)
        return graph.x, graph.p, graph.h, n
    graph.steps.replay(head)
    cache.mark_written(n + k)  # the pointer moves the graph's writes: the host's
    return graph.x, graph.p, graph.h, n


def graphed_pass(target: GPT, cache: KVCache, graph: VerificationGraph, k: int, n: int, sampling):
    # what the graph holds: the pass reading its slot and tokens from the graph's array; the
    # cache's pointers left as found (the host moves them after each replay)
    pending = cache.pending
    try:
        pass_rows(target, cache, graph, k, n, sampling, graph.steps.args[0:1])
    finally:
        cache.pending = pending


def pass_rows(target: GPT, cache: KVCache, graph: VerificationGraph, k, n, sampling, slot):
    # the pass of the n catch-up tokens and k drafts in graph.steps.args -> graph.x, graph.h
    # and graph.p (the processed rows, written in place: one fused draw with no uniforms);
    # slot [1] (device): the first slot read from it (a graph's), or None: the host's
    tokens = graph.steps.args[1 + MAX_CATCH_UP - n :]
    with slot_from(slot):
        x = target.residual(tokens, cache)
    h = target.norm(x[-(k + 1) :, -target.config.n_embd :], "ln_f")
    pick(target.logits(h), sampling, probs=graph.p)
    graph.x, graph.h = x, h


def proposer(drafter: Drafter) -> Drafter:
    # who wrote this round's proposal: a hybrid's lookup or its fallback, else the drafter
    return drafter.proposer if isinstance(drafter, HybridDrafter) else drafter


def drafts_on_device(drafter: Drafter) -> bool:
    # True when this round's proposal is a twin drafter's own: on the device, valid by
    # construction (a subclass that writes its own `propose` is a plug-in: checked)
    who = proposer(drafter)
    return isinstance(who, (ModelDrafter, HeadsDrafter, EagleDrafter)) and proposals_checked(who)


def device_draft(drafter: Drafter, context, k: int, sampling, rng, n_vocab: int) -> Draft:
    # the drafter's proposal on the device. A twin drafter's is already there: shapes only,
    # nothing copied. Any other's is checked on the host like the reference's, then copied over.
    draft, there = checked_draft(drafter, drafter.propose(context, k, sampling, rng), k, n_vocab)
    if there:
        return draft
    return Draft(to_device(draft.tokens, dtype=np.int64), to_device(draft.q), draft.shared)


def checked_draft(drafter: Drafter, draft: Draft, k: int, n_vocab: int) -> tuple[Draft, bool]:
    # -> (the proposal, True when it is on the device). A twin drafter's stays there, its
    # shapes checked; any other's comes back as host arrays checked like the reference's (a
    # plug-in's device proposal is brought back for that), for the caller to copy over --
    # one row at a time (`device_draft`), or a batch's rows together (gpu/batch.py)
    if drafts_on_device(drafter):
        if draft.tokens.shape[0] > k or draft.q.shape != (draft.tokens.shape[0], n_vocab):
            raise ValueError(
                f"the drafter proposed {draft.tokens.shape[0]} tokens with q of shape "
                f"{draft.q.shape}; at most {k} tokens and q [k, {n_vocab}] were expected"
            )
        return draft, True
    host = Draft(*(to_host(a) if on_device(a) else a for a in (draft.tokens, draft.q)))
    check_draft(host, k, n_vocab)
    return Draft(host.tokens, host.q, draft.shared), False


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
    # (n, token, drafts, one flag for p and q: a broken draft model's NaN would otherwise
    # pass for an accept) decided and packed in one launch (gpu/verification.py `decide_packed`)
    packed = to_host(decide_packed(p, draft.q, draft.tokens, u))
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
    check_shared(draft.shared, target)
    clock.mark("draft")
    # 2. the verification pass, in the reference's two halves: the target's features x of
    # every row it feeds (what an EAGLE drafter reads), then the rows p (and h) that score
    layers = drafter_feature_layers(drafter)
    if verification_by_graph(target, cache, context, draft, sampling, layers):  # a replay
        x, p, h, n_catch_up = replayed_verification(target, cache, context, draft, sampling)
    else:
        x, n_catch_up = target_features(target, cache, context, draft.tokens, draft.shared, layers)
        p, h = scored_rows(target, x, int(draft.tokens.shape[0]), sampling)
    clock.mark("target")
    t_written, d_written = cache.end, cache_span_start(draft_cache)[1]
    v, drafted = settle(p, draft, rng, verify_fn)  # 3. verify, and the round's one transfer
    clock.mark("verify")

    cache.commit(n_catch_up + v.accepted)  # 4. keep the catch-up tokens and accepted drafts
    cache.rollback()  # ... and drop the rejected drafts' slots
    drafter.commit(v.accepted)
    drafter.rollback()
    drafter.observe(h[v.accepted])  # the target's device row that scored the last token
    drafter.observe_features(x[: n_catch_up + v.accepted])  # kept positions' device rows
    # (every layer the drafter reads, side by side: [n_catch_up + accepted, F])
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


@run_keywords
def speculative_generate(
    target: GPT, drafter: Drafter, prompt, setup: RunSetup
) -> SpeculativeResult:
    # prompt [n] -> SpeculativeResult(tokens [<= max_new_tokens], stats, trace), with the
    # reference's keywords (RunSetup's fields): the reference's checks and loop (a `Run` per
    # sequence) around the twin's round. A reference GPT or drafter is accepted too: its twin
    # is built once (weights copied to the device) and remembered, so the oracle can hand
    # the twin its own models and drafters.
    target, drafter = as_twin_model(target), as_twin_drafter(drafter)
    prompt, setup = check_loop_inputs(target, drafter, prompt, setup)
    cache, run = start_run(target, drafter, prompt, setup)
    sampling, rng, verify_fn, clock = setup.sampling, setup.rng, setup.verify_fn, setup.clock
    while not run.finished:  # the reference's loop, with the twin's round
        rnd = speculative_round(
            target, cache, drafter, run.context, run.next_k(), sampling, rng, verify_fn, clock
        )
        run.record(rnd, traced=host_round)
        clock.mark("other")
    return run.result()

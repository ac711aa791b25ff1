"""Broken loops for the loop exercise (notebooks/exercises/my_loop.py): each is the worked
solution with one small mistake a student makes while writing the round, marked
`# the mistake`. They reuse the solution's helpers wherever the mistake is not in them.
Signature: speculative_generate(target, drafter, prompt, *, k, max_new_tokens, rng,
sampling, eos_id) -> an object with .tokens and .stats.accepted_per_round."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from reference.sampling import SamplingParams, probabilities, sample_token
from reference.verification import verify

SOLUTION = Path(__file__).resolve().parents[2] / "notebooks/exercises/solutions/loop_solution.py"


def load_solution(name: str = "_loop_solution_for_variants"):
    # the solution file is no package: load it by path (registered first, for its dataclasses)
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SOLUTION)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


sol = load_solution()
LoopResult, LoopStats = sol.LoopResult, sol.LoopStats


def start(target, drafter, prompt):
    # -> (target cache, draft model, draft cache, context): both caches prefilled
    draft_model = drafter.model
    target_cache, draft_cache = target.new_cache(), draft_model.new_cache()
    context = np.asarray(prompt, dtype=np.int64)
    sol.prefill(target, target_cache, context)
    sol.prefill(draft_model, draft_cache, context)
    return target_cache, draft_model, draft_cache, context


def no_target_rollback(
    target, drafter, prompt, *, k, max_new_tokens, rng, sampling=SamplingParams(), eos_id=None
):
    """Commits the target's catch-up token and accepted drafts but never rolls back the
    rejected drafts' slots: the next pass writes after them and attends to them."""
    target_cache, draft_model, draft_cache, context = start(target, drafter, prompt)
    out, stats = [], LoopStats()
    while True:
        remaining = max_new_tokens - len(out)
        k_round = min(k, remaining - 1)
        drafts, q, draft_fed = sol.draft(draft_model, draft_cache, context, k_round, sampling, rng)
        p, target_fed = sol.target_rows(target, target_cache, context, drafts, sampling)
        v = verify(p, q, drafts, rng)
        target_cache.commit(target_fed + v.accepted)  # the mistake: no target_cache.rollback()
        sol.end_round(draft_cache, draft_fed + min(v.accepted, max(k_round - 1, 0)))
        new = sol.emitted(drafts, v.accepted, v.token, eos_id, remaining)
        stats.accepted_per_round.append(v.accepted)
        out += new
        context = np.concatenate([context, np.asarray(new, dtype=np.int64)])
        if len(out) >= max_new_tokens or (eos_id is not None and new[-1] == eos_id):
            return LoopResult(out, stats)


def target_commits_k(
    target, drafter, prompt, *, k, max_new_tokens, rng, sampling=SamplingParams(), eos_id=None
):
    """Commits k slots of the target's cache every round instead of the catch-up token plus
    the accepted drafts (accepted + 1): after a rejection it keeps a rejected draft's K/V."""
    target_cache, draft_model, draft_cache, context = start(target, drafter, prompt)
    out, stats = [], LoopStats()
    while True:
        remaining = max_new_tokens - len(out)
        k_round = min(k, remaining - 1)
        drafts, q, draft_fed = sol.draft(draft_model, draft_cache, context, k_round, sampling, rng)
        p, target_fed = sol.target_rows(target, target_cache, context, drafts, sampling)
        v = verify(p, q, drafts, rng)
        sol.end_round(target_cache, k_round)  # the mistake: k, not target_fed + accepted
        sol.end_round(draft_cache, draft_fed + min(v.accepted, max(k_round - 1, 0)))
        new = sol.emitted(drafts, v.accepted, v.token, eos_id, remaining)
        stats.accepted_per_round.append(v.accepted)
        out += new
        context = np.concatenate([context, np.asarray(new, dtype=np.int64)])
        if len(out) >= max_new_tokens or (eos_id is not None and new[-1] == eos_id):
            return LoopResult(out, stats)


def draft_without_catch_up(draft_model, cache, context, k, sampling, rng):
    # the solution's draft, but it feeds only the last committed token
    drafts = np.zeros(k, dtype=np.int64)
    q = np.zeros((k, draft_model.n_vocab))
    if k == 0:
        return drafts, q, 0
    new = context[-1:]  # the mistake: context[cache.length:] (two tokens after a full round)
    logits = draft_model.forward(new, cache)[-1]
    for i in range(k):
        q[i] = probabilities(logits, sampling)
        drafts[i] = sample_token(q[i], rng)
        if i < k - 1:
            logits = draft_model.forward(drafts[i : i + 1], cache)[-1]
    return drafts, q, len(new)


def no_draft_catch_up(
    target, drafter, prompt, *, k, max_new_tokens, rng, sampling=SamplingParams(), eos_id=None
):
    """The draft model is fed only the last committed token each round: after a round that
    kept all k drafts it never sees x_k (no catch-up), so its positions slip by one."""
    target_cache, draft_model, draft_cache, context = start(target, drafter, prompt)
    out, stats = [], LoopStats()
    while True:
        remaining = max_new_tokens - len(out)
        k_round = min(k, remaining - 1)
        drafts, q, draft_fed = draft_without_catch_up(  # the mistake (see above)
            draft_model, draft_cache, context, k_round, sampling, rng
        )
        p, target_fed = sol.target_rows(target, target_cache, context, drafts, sampling)
        v = verify(p, q, drafts, rng)
        sol.end_round(target_cache, target_fed + v.accepted)
        sol.end_round(draft_cache, draft_fed + min(v.accepted, max(k_round - 1, 0)))
        new = sol.emitted(drafts, v.accepted, v.token, eos_id, remaining)
        stats.accepted_per_round.append(v.accepted)
        out += new
        context = np.concatenate([context, np.asarray(new, dtype=np.int64)])
        if len(out) >= max_new_tokens or (eos_id is not None and new[-1] == eos_id):
            return LoopResult(out, stats)


def drafts_k_to_the_end(
    target, drafter, prompt, *, k, max_new_tokens, rng, sampling=SamplingParams(), eos_id=None
):
    """Drafts k tokens every round, even when one token is left to generate (the contract
    says min(k, remaining - 1)); the emitted tokens are cut at the limit."""
    target_cache, draft_model, draft_cache, context = start(target, drafter, prompt)
    out, stats = [], LoopStats()
    while True:
        remaining = max_new_tokens - len(out)
        k_round = k  # the mistake: min(k, remaining - 1)
        drafts, q, draft_fed = sol.draft(draft_model, draft_cache, context, k_round, sampling, rng)
        p, target_fed = sol.target_rows(target, target_cache, context, drafts, sampling)
        v = verify(p, q, drafts, rng)
        sol.end_round(target_cache, target_fed + v.accepted)
        sol.end_round(draft_cache, draft_fed + min(v.accepted, max(k_round - 1, 0)))
        new = sol.emitted(drafts, v.accepted, v.token, eos_id, remaining)
        stats.accepted_per_round.append(v.accepted)
        out += new
        context = np.concatenate([context, np.asarray(new, dtype=np.int64)])
        if len(out) >= max_new_tokens or (eos_id is not None and new[-1] == eos_id):
            return LoopResult(out, stats)


def ignores_eos(
    target, drafter, prompt, *, k, max_new_tokens, rng, sampling=SamplingParams(), eos_id=None
):
    """Neither cuts a round's tokens after EOS nor stops there: it runs to max_new_tokens."""
    target_cache, draft_model, draft_cache, context = start(target, drafter, prompt)
    out, stats = [], LoopStats()
    while True:
        remaining = max_new_tokens - len(out)
        k_round = min(k, remaining - 1)
        drafts, q, draft_fed = sol.draft(draft_model, draft_cache, context, k_round, sampling, rng)
        p, target_fed = sol.target_rows(target, target_cache, context, drafts, sampling)
        v = verify(p, q, drafts, rng)
        sol.end_round(target_cache, target_fed + v.accepted)
        sol.end_round(draft_cache, draft_fed + min(v.accepted, max(k_round - 1, 0)))
        new = sol.emitted(drafts, v.accepted, v.token, None, remaining)  # the mistake: eos_id
        stats.accepted_per_round.append(v.accepted)
        out += new
        context = np.concatenate([context, np.asarray(new, dtype=np.int64)])
        if len(out) >= max_new_tokens:  # the mistake: no stop at EOS either
            return LoopResult(out, stats)


VARIANTS = (
    no_target_rollback,
    target_commits_k,
    no_draft_catch_up,
    drafts_k_to_the_end,
    ignores_eos,
)

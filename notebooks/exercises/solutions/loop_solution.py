"""A solution to notebooks/exercises/my_loop.py: the speculative loop, round by round.

Grade it like your own:

    .venv/bin/specdec grade notebooks/exercises/solutions/loop_solution.py:speculative_generate

It takes the pieces the exercise lends (the GPT's forward with a KV cache, `probabilities`,
`sample_token` and `verify`) and writes the loop itself: prefill, the draft with its
catch-up, one target pass, verify, commit and roll back both caches, EOS and the length limit.
Notation: p = target, q = draft, k drafts per round; `context` is every committed token
(prompt + output), and its last token is in neither cache when a round starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from reference.sampling import SamplingParams, probabilities, sample_token
from reference.verification import verify


@dataclass
class LoopStats:
    accepted_per_round: list[int] = field(default_factory=list)  # drafts kept, per round


@dataclass
class LoopResult:
    tokens: list[int]  # the generated tokens, prompt excluded
    stats: LoopStats


def prefill(model, cache, prompt: np.ndarray) -> None:
    # prompt [n] -> None: cache every prompt token but the last (the first round feeds it)
    if len(prompt) > 1:
        model.forward(prompt[:-1], cache)
        cache.commit(len(prompt) - 1)


def draft(draft_model, cache, context: np.ndarray, k: int, sampling, rng):
    # context [n] -> (drafts [k] int64, q [k, V], tokens fed before the drafts)
    # The catch-up: feed every committed token the draft's cache lacks -- one token, or two
    # after a round that kept all k drafts (x_k was drawn but never fed).
    drafts = np.zeros(k, dtype=np.int64)
    q = np.zeros((k, draft_model.n_vocab))
    if k == 0:  # the last token of the run: the target alone samples it
        return drafts, q, 0
    new = context[cache.length :]
    logits = draft_model.forward(new, cache)[-1]  # [V]: scores x_1
    for i in range(k):
        q[i] = probabilities(logits, sampling)  # q_i(. | context, x_1..x_{i-1})
        drafts[i] = sample_token(q[i], rng)  # x_i ~ q_i
        if i < k - 1:  # x_k is never fed: nobody needs q_{k+1}
            logits = draft_model.forward(drafts[i : i + 1], cache)[-1]
    return drafts, q, len(new)


def target_rows(target, cache, context: np.ndarray, drafts: np.ndarray, sampling):
    # -> (p [k+1, V], tokens fed before the drafts). ONE forward over [catch-up, x_1..x_k]:
    # row i of the last k+1 scores x_{i+1} (it sees x_1..x_i); the last one is the bonus row.
    new = context[cache.length :]
    logits = target.forward(np.concatenate([new, drafts]), cache)
    return probabilities(logits[-(len(drafts) + 1) :], sampling), len(new)


def end_round(cache, keep: int) -> None:
    # keep the first `keep` temporary slots, forget the rest (the rejected drafts' K/V)
    cache.commit(keep)
    cache.rollback()


def emitted(drafts: np.ndarray, accepted: int, token: int, eos_id, remaining: int) -> list[int]:
    # x_1..x_a + [token], cut just after the first EOS and at the length budget
    out = [int(t) for t in drafts[:accepted]] + [int(token)]
    if eos_id is not None and eos_id in out:
        out = out[: out.index(eos_id) + 1]
    return out[:remaining]


def speculative_generate(
    target,
    drafter,
    prompt,
    *,
    k: int,
    max_new_tokens: int,
    rng: np.random.Generator,
    sampling: SamplingParams = SamplingParams(),
    eos_id: int | None = None,
) -> LoopResult:
    # prompt [n] -> LoopResult(tokens [<= max_new_tokens], stats.accepted_per_round)
    draft_model = drafter.model  # a ModelDrafter: its GPT, with a cache of our own
    target_cache, draft_cache = target.new_cache(), draft_model.new_cache()
    context = np.asarray(prompt, dtype=np.int64)
    prefill(target, target_cache, context)
    prefill(draft_model, draft_cache, context)
    out, stats = [], LoopStats()
    while True:
        remaining = max_new_tokens - len(out)
        k_round = min(k, remaining - 1)  # a round emits up to k_round + 1 tokens
        drafts, q, draft_fed = draft(draft_model, draft_cache, context, k_round, sampling, rng)
        p, target_fed = target_rows(target, target_cache, context, drafts, sampling)
        v = verify(p, q, drafts, rng)  # v.accepted drafts kept, then v.token
        accepted, token = v.accepted, v.token
        end_round(target_cache, target_fed + accepted)  # the target fed every draft
        end_round(draft_cache, draft_fed + min(accepted, max(k_round - 1, 0)))  # it fed k - 1
        new = emitted(drafts, accepted, token, eos_id, remaining)
        stats.accepted_per_round.append(int(accepted))
        out += new
        context = np.concatenate([context, np.asarray(new, dtype=np.int64)])
        if len(out) >= max_new_tokens or (eos_id is not None and new[-1] == eos_id):
            return LoopResult(out, stats)

"""A solution to notebooks/exercises/my_callables_loop.py: speculative sampling over two
next-token callables, numpy only.

Grade it like your own:

    .venv/bin/specdec grade \
        notebooks/exercises/solutions/callables_loop_solution.py:speculative_sample

With callables there are no caches to keep: a round's context is a plain list, and the
target's row for a position is one call. Row i is asked only once drafts 1..i-1 are kept
(lazily), so a round asks the target between accepted + 1 and k + 1 rows, never one twice.
Notation: p = target, q = draft.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Sampled:
    tokens: list[int] = field(default_factory=list)  # the generated ids, prompt excluded
    accepted_per_round: list[int] = field(default_factory=list)  # drafts kept, per round


def sample(weights: np.ndarray, rng: np.random.Generator) -> int:
    # [V] non-negative weights -> one id, drawn in proportion to them
    return int(rng.choice(len(weights), p=weights / weights.sum()))


def draft(draft_next, context: list[int], k: int, rng) -> tuple[list[int], list[np.ndarray]]:
    # -> (x_1..x_k, q_1..q_k): x_i ~ q_i = q(. | context, x_1..x_{i-1})
    drafts, q = [], []
    for _ in range(k):
        q.append(draft_next(context + drafts))
        drafts.append(sample(q[-1], rng))
    return drafts, q


def judge(target_next, context: list[int], drafts: list[int], q, rng) -> tuple[int, int]:
    # -> (accepted, token): keep x_i with probability min(1, p_i(x_i) / q_i(x_i)); at the
    # first rejection draw from norm(max(0, p_i - q_i)); after k kept, the bonus from p_{k+1}
    for i, x in enumerate(drafts):
        p = target_next(context + drafts[:i])  # the target's row before x_i scores it
        if rng.random() < min(1.0, p[x] / q[i][x]):
            continue
        residual = np.maximum(p - q[i], 0.0)
        return i, sample(residual if residual.sum() > 0 else p, rng)
    return len(drafts), sample(target_next(context + drafts), rng)


def speculative_sample(
    target_next, draft_next, prompt, *, k: int, max_new_tokens: int, rng, eos_id=None
) -> Sampled:
    # prompt [n] ids -> Sampled(tokens [<= max_new_tokens], accepted_per_round)
    context, out = [int(t) for t in prompt], Sampled()
    while True:
        remaining = max_new_tokens - len(out.tokens)
        drafts, q = draft(draft_next, context, min(k, remaining - 1), rng)
        accepted, token = judge(target_next, context, drafts, q, rng)
        new = drafts[:accepted] + [token]
        if eos_id is not None and eos_id in new:
            new = new[: new.index(eos_id) + 1]  # nothing after EOS
        new = new[:remaining]
        out.accepted_per_round.append(accepted)
        out.tokens += new
        context += new
        if len(out.tokens) >= max_new_tokens or new[-1] == eos_id:
            return out

"""Real-world speculative samplers behind the project's `verify` contract, for the grader.

    verify(p_target [k+1, V], q_draft [k, V], draft_tokens [k], rng) -> (accepted, token)

Two adapters:

* `transformers_verify`: Hugging Face transformers' `_speculative_sampling` (the function its
  assisted generation calls on sampled rounds), fed logits log(p), log(q) and the drafts in the
  shapes it expects ([1, k, V], [1, k+1, V], [1, n + k]). `transformers_ensemble_verify(w)`
  turns on its `assistant_ensemble_weight` option, lossy by design: it accepts with
  v(x)/q(x), v = w p + (1 - w) q.
* `gpt_fast_verify`: a torch verify written here in the style of gpt-fast's
  `speculative_decode` (tensors in, tensors out; its letters are swapped: there p names the
  draft and q the target; the rejection found with `nonzero`; tokens sampled by an
  exponential race, argmax(probs / E) with E ~ Exp(1)).

Both take their randomness from torch's global generator (transformers' function takes no
generator argument), so each call seeds it from the grader's numpy `rng`: the runs stay
reproducible, and every call gets fresh numbers.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.generation.utils import _speculative_sampling


def seed_torch_from(rng: np.random.Generator) -> None:
    # one integer from the grader's generator: reproducible, and fresh on every call. The CPU
    # generator only: torch.manual_seed also seeds every accelerator and costs ~200x more.
    torch.random.default_generator.manual_seed(int(rng.integers(2**62)))


def as_logits(rows: np.ndarray) -> torch.Tensor:
    # [..., V] probabilities -> float64 logits whose softmax gives them back (log 0 = -inf)
    with np.errstate(divide="ignore"):
        return torch.from_numpy(np.log(np.asarray(rows, dtype=np.float64)))


# --------------------------------------------------------------------------------------------
# transformers
# --------------------------------------------------------------------------------------------


def transformers_round(p_target, q_draft, draft_tokens, rng, weight: float | None = None):
    k = len(draft_tokens)
    seed_torch_from(rng)
    if k == 0:  # assisted generation never calls it without candidates: the plain next token
        return 0, int(torch.multinomial(torch.from_numpy(np.asarray(p_target[0], float)), 1))
    candidates = torch.as_tensor(np.asarray(draft_tokens, dtype=np.int64))[None, :]  # [1, k]
    new_logits = as_logits(p_target)[None]  # [1, k+1, V]: the target's rows, bonus row last
    candidate_logits = as_logits(q_draft)[None]  # [1, k, V]: the assistant's rows
    tokens, n_matches = _speculative_sampling(
        candidates, candidate_logits, k, new_logits, assistant_ensemble_weight=weight
    )
    # tokens [1, n_matches + 1]: the accepted drafts, then the residual or bonus token
    return int(n_matches), int(tokens[0, -1])


def transformers_verify(p_target, q_draft, draft_tokens, rng):
    """transformers' `_speculative_sampling`, lossless mode."""
    return transformers_round(p_target, q_draft, draft_tokens, rng)


def transformers_ensemble_verify(weight: float):
    """transformers' `_speculative_sampling` with assistant_ensemble_weight = weight."""

    def verify(p_target, q_draft, draft_tokens, rng):
        return transformers_round(p_target, q_draft, draft_tokens, rng, weight)

    verify.__name__ = f"transformers_ensemble_verify_w{weight:g}"
    return verify


# --------------------------------------------------------------------------------------------
# gpt-fast style
# --------------------------------------------------------------------------------------------


def race_sample(probs: torch.Tensor) -> torch.Tensor:
    # [V] -> [1]: argmax of probs / E with E ~ Exp(1) picks index i with probability probs[i]
    # (the smallest of independent Exp(probs[i]) clocks), without a host sync
    clocks = torch.empty_like(probs).exponential_(1)
    return torch.argmax(probs / clocks, dim=-1, keepdim=True)


def gpt_fast_style(draft_tokens: torch.Tensor, draft_probs, target_probs) -> torch.Tensor:
    # draft_tokens [k], draft_probs [k, V], target_probs [k+1, V] -> the emitted tokens [n+1].
    # gpt-fast's letters: p = the draft's probability of each draft, q = the target's.
    k = draft_tokens.shape[0]
    positions = torch.arange(k)
    p = draft_probs[positions, draft_tokens]
    q = target_probs[positions, draft_tokens]
    keep = torch.minimum(torch.ones(()), q / p)
    rejected = (torch.rand_like(keep) > keep).nonzero()
    if rejected.shape[0] == 0:  # every draft kept: the bonus token from the last target row
        return torch.cat([draft_tokens, race_sample(target_probs[-1])])
    n = int(rejected[0])
    leftover = torch.clamp(target_probs[n] - draft_probs[n], min=0.0)
    return torch.cat([draft_tokens[:n], race_sample(leftover / leftover.sum())])


def gpt_fast_verify(p_target, q_draft, draft_tokens, rng):
    """The gpt-fast-style torch verify behind the contract (float64 tensors)."""
    seed_torch_from(rng)
    tokens = torch.as_tensor(np.asarray(draft_tokens, dtype=np.int64))
    emitted = gpt_fast_style(
        tokens,
        torch.from_numpy(np.asarray(q_draft, dtype=np.float64)),
        torch.from_numpy(np.asarray(p_target, dtype=np.float64)),
    )
    return len(emitted) - 1, int(emitted[-1])

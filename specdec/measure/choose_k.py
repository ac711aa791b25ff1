"""Choosing the draft length k on this machine: measure, then apply Leviathan's formula.

The best k depends on the machine: on one AMD EPYC the same pair ran 2.60x faster at k = 7
with OpenBLAS's SkylakeX kernels, but only 1.02x at k = 3 (0.91x at T = 0.8) with its
Haswell kernels, where a verification pass of k + 1 rows costs far more one-row steps. A
fixed default k therefore loses somewhere. So when the user gives none, the demo measures
the three numbers the speedup formula needs, here and now, and takes the k it predicts best:

    alpha     acceptance of the pair: E[sum_x min(p(x), q(x))] over positions of text the
              target itself wrote (with the run's sampling), the probability that a draft
              token drawn from q is accepted (article §7; Leviathan et al., 2023)
    c         draft step / target step
    v(k+1)    a target pass over k + 1 positions / one step
              (both from specdec.costs.measure_costs: every T in turn, the fastest of 15
              passes kept, so that load on the machine moves no T more than another)

    speedup(k) = E(alpha, k) / (k c + v(k+1)),   E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha)

The choice is a prediction: it assumes independent acceptances and ignores the loop's own
overhead. `KChoice.explain()` says what was measured and predicted, so the user can check it
against the run's measured speedup.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reference.autoregressive import generate
from reference.model import GPT
from reference.sampling import SamplingParams, probabilities
from specdec.costs import CostProfile, measure_costs, predicted_speedup

ALPHA_TOKENS = 48  # target tokens the acceptance is estimated on: a few rounds' worth
COST_PASSES = 15  # passes per cost figure, the fastest kept (specdec.costs.measure_costs)


@dataclass(frozen=True)
class KChoice:
    k: int
    alpha: float
    costs: CostProfile
    predicted: dict[int, float]  # k -> predicted speedup, every k considered

    def explain(self) -> str:
        best = self.predicted[self.k]
        v = self.costs.verify_cost(self.k + 1)
        verdict = (
            "predicted faster than plain decoding"
            if best > 1
            else "no k is predicted to beat plain decoding here; this is the least slow"
        )
        others = ", ".join(f"k={k}: {s:.2f}x" for k, s in self.predicted.items())
        return (
            f"k={self.k} chosen on this machine (no -k given): measured alpha = {self.alpha:.2f}, "
            f"c = {self.costs.c:.3f}, v({self.k + 1}) = {v:.2f}; predicted speedup "
            f"E/(k c + v) = {best:.2f}x, {verdict} (considered {others})"
        )


def acceptance_rate(
    target: GPT, draft: GPT, prompt: np.ndarray, sampling: SamplingParams, rng, n_tokens: int
) -> float:
    """alpha = mean over positions of sum_x min(p(x), q(x)), on n_tokens the target writes
    after `prompt` (teacher-forced: both models score the same text in one pass each)."""
    tokens = generate(target, prompt, max_new_tokens=n_tokens, rng=rng, sampling=sampling)
    text = np.concatenate([prompt, np.asarray(tokens, dtype=np.int64)])
    rows = slice(len(prompt) - 1, len(text) - 1)  # the rows that predicted each new token
    p = probabilities(target.forward(text)[rows], sampling)  # [n, V]
    q = probabilities(draft.forward(text)[rows], sampling)
    return float(np.minimum(p, q).sum(axis=-1).mean())


def best_k(alpha: float, costs: CostProfile, k_max: int) -> KChoice:
    """The k in 1..k_max with the highest predicted speedup E(alpha, k) / (k c + v(k+1))."""
    predicted = {
        k: predicted_speedup(alpha, k, costs.c, costs.verify_cost(k + 1))
        for k in range(1, k_max + 1)
    }
    k = max(predicted, key=predicted.get)
    return KChoice(k, alpha, costs, predicted)


def choose_k(
    target: GPT,
    draft: GPT,
    prompt: np.ndarray,
    sampling: SamplingParams,
    k_max: int,
    rng: np.random.Generator,
) -> KChoice:
    """Measure alpha, c and v(2..k_max+1) for this pair here, and pick k (see module doc).
    The prompt must leave room in n_ctx for ALPHA_TOKENS more tokens and a k_max+1 pass."""
    n_ctx = target.config.n_ctx
    room = n_ctx - len(prompt) - 1
    n_tokens = max(1, min(ALPHA_TOKENS, room))
    alpha = acceptance_rate(target, draft, prompt, sampling, rng, n_tokens)
    # costs over a context like the one the run will see: the prompt (at least a few tokens)
    context = np.resize(prompt, min(max(len(prompt), 32), n_ctx - k_max - 1))
    costs = measure_costs(target, draft, context, k_max + 1, COST_PASSES)
    return best_k(alpha, costs, k_max)

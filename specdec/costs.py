"""What a forward pass costs on this machine, and what the theory predicts from it.

Leviathan et al. (2023) predict, for per-token acceptance alpha, draft length k and a draft
step costing c target steps,

    expected tokens per round  E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha)
    speedup                    E(alpha, k) / (k c + 1)

The "+ 1" assumes that verifying k+1 positions costs one single-token step. On a CPU it
costs more (small matrix products run far below the matrix-vector rate), so we also use
v(k+1) = time(forward over k+1 new positions) / time(forward over 1), measured:

    corrected speedup          E(alpha, k) / (k c + v(k+1))
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from reference.model import GPT
from reference.tree import tree_forward


def expected_tokens_per_round(alpha: float, k: int) -> float:
    # E = 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, k: int, c: float, verify_cost: float = 1.0) -> float:
    # E(alpha, k) / (k c + v(k+1)); verify_cost = 1 gives Leviathan's formula
    return expected_tokens_per_round(alpha, k) / (k * c + verify_cost)


def time_append(model: GPT, context: np.ndarray, T: int, repeats: int) -> float:
    """Median seconds of one forward over T new positions after `context` is cached.

    The cache is rolled back after each pass, so every repeat sees the same state: this is
    exactly the temporary-write / rollback cycle of verification.
    """
    cache = model.new_cache()
    model.forward(context, cache)
    cache.commit(len(context))
    new = context[:T]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.forward(new, cache)
        times.append(time.perf_counter() - start)
        cache.rollback()
    return float(np.median(times))


def time_tree_pass(model: GPT, context: np.ndarray, parents, repeats: int) -> float:
    """Median seconds of one tree pass (reference.tree.tree_forward) after `context` is
    cached: the root and the nodes below it, `parents` [n] (-1 for the root), rolled back
    after each pass as a verification pass is. Comparable with `time_append` (both give
    logits for every new row)."""
    parents = np.asarray(parents, dtype=np.int64)
    cache = model.new_cache()
    model.forward(context[:-1], cache)
    cache.commit(len(context) - 1)
    tokens = np.resize(context[-len(parents) :], len(parents))  # any ids: cost, not content
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        tree_forward(model, tokens, parents, cache)
        times.append(time.perf_counter() - start)
        cache.rollback()
    return float(np.median(times))


@dataclass
class CostProfile:
    target_step: float  # seconds: target forward of 1 position with a warm cache
    draft_step: float  # seconds: draft forward of 1 position
    target_append: dict[int, float]  # T -> seconds for T new positions (verification)

    @property
    def c(self) -> float:
        """Draft step cost relative to a target step."""
        return self.draft_step / self.target_step

    def verify_cost(self, T: int) -> float:
        """v(T): a T-position target pass relative to a 1-position step."""
        return self.target_append[T] / self.target_step


DRAFT_RUN = 3  # draft steps timed back to back in each pass, as a round drafts k in a row


def measure_costs(
    target: GPT, draft: GPT, context: np.ndarray, max_T: int, repeats: int = 30
) -> CostProfile:
    # c and v(1..max_T) on this machine: the cycle of time_append (context cached once, then
    # a timed pass over T new positions and a rollback, so every pass sees the same cache),
    # but with the T's taken in turn, pass by pass, and the fastest pass of each kept: other
    # work on the machine can only add time, and taking turns spreads a change of load over
    # every T instead of landing on a few. The draft steps DRAFT_RUN times
    # in a row, as it drafts: its first step after a target pass finds its small weights
    # pushed out of the CPU caches by the target's, the next ones find them there.
    time_append(target, context, 1, 3)  # warm-up: a process's first BLAS calls are slower
    caches = {}
    for model in (target, draft):
        caches[id(model)] = cache = model.new_cache()
        model.forward(context, cache)
        cache.commit(len(context))
    runs = [(target, T) for T in range(1, max_T + 1)] + [(draft, 1)] * DRAFT_RUN
    best = {}  # (model, T) -> seconds
    for _ in range(repeats):
        for model, T in runs:
            cache = caches[id(model)]
            start = time.perf_counter()
            model.forward(context[:T], cache)
            seconds = time.perf_counter() - start
            cache.rollback()
            best[id(model), T] = min(best.get((id(model), T), math.inf), seconds)
    appends = {T: best[id(target), T] for T in range(1, max_T + 1)}
    return CostProfile(target_step=appends[1], draft_step=best[id(draft), 1], target_append=appends)

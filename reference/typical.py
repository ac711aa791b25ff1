"""Typical acceptance (Medusa): a LOSSY verification rule, kept here as the contrast.

Everything else in this package is exact: the output follows the target's law p, whatever
the drafts were. The rule below is NOT. It is what Medusa (Cai et al., 2024) uses to accept
more of its heads' guesses when sampling: a candidate x, proposed at a node whose target
row is p, is accepted when

    p(x) > min(epsilon, delta * exp(-H(p)))        H(p) = -sum_y p(y) log p(y)  (nats)

that is, when the target finds x "typical enough": a fixed bar epsilon, lowered where p is
flat (high entropy), so that a guess from a spread-out row needs less mass to pass. No coin
is tossed and q is never looked at. That is why it is lossy: a token that passes is emitted
with probability 1 instead of p(x). One line shows it: p = (0.6, 0.4) at the first position
and a draft that always proposes token 1; with epsilon = 0.09, 0.4 > 0.09, so token 1 comes
out every time, where the target emits it 40 % of the time.

Medusa's defaults (its `medusa_generate`): posterior_threshold = epsilon = 0.09 and
posterior_alpha = delta = 0.3, recommended as sqrt(epsilon); `TypicalThreshold()` uses these,
and `TypicalThreshold(epsilon)` sets delta = sqrt(epsilon). Medusa computes H with
log(p + 1e-5); here 0 log 0 = 0 exactly. Medusa's p is softmax(logits / T); here p is the
row the loop samples from (reference.sampling.probabilities: temperature, top-k, top-p).

Choices this file makes (and Medusa's, where they differ):

* Several children of a node may pass. The walk descends into the LIKELIEST accepted child
  under p (ties: the one tried first), then repeats at that child. Medusa instead scores
  whole candidate paths and keeps the longest accepted prefix (ties: the largest product of
  p along it); on a tree with one child per node (a chain) both are the same.
* When no child passes, or at a leaf, one token is SAMPLED from the current row p (the
  target's row at the last accepted node, not a residual: there was no draw to correct).
  Greedy decoding is this code with one-hot rows: H = 0, the bar is min(epsilon, delta), and
  only the argmax (p = 1) can pass when epsilon < 1 -- so at temperature 0 typical
  acceptance emits exactly the greedy sequence, the one case where it is not lossy.

The exact law of one such round (`typical_verify_tree_law`) is simple because the walk is
deterministic given the tree and the rows: the path is fixed, and only the final token is
random. The oracle (tests/distribution/test_typical_law.py) compares it with the target's
own law and must reject it; specdec/measure/typical.py measures how far it is from p
against the speed it buys (docs/algorithm.md, "Typical acceptance").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from reference.checks import (
    as_token_array,
    check_generator,
    check_number,
    check_probability_rows,
)
from reference.sampling import SamplingParams, sample_token
from reference.speculative import SpeculativeResult
from reference.tree import (
    Tree,
    TreeRound,
    TreeVerification,
    check_tree,
    tree_round,
    tree_speculative_generate,
)
from reference.verification import ROW_SUM_ATOL, Verification

# Medusa's defaults (posterior_threshold, posterior_alpha = its sqrt)
MEDUSA_EPSILON = 0.09
MEDUSA_DELTA = 0.3


@dataclass(frozen=True)
class TypicalThreshold:
    """The two knobs of typical acceptance: bar(p) = min(epsilon, delta * exp(-H(p)))."""

    epsilon: float = MEDUSA_EPSILON  # the fixed bar, in [0, 1]; 0 accepts any p(x) > 0
    delta: float | None = None  # the entropy-scaled bar, >= 0; None -> sqrt(epsilon)
    # exp(-H(p)) lies in [1/V, max p]: epsilon = 1 with delta >= V makes the bar 1 (nothing
    # passes: plain autoregressive decoding); delta = 1 still lets a peaked row's mode pass

    def __post_init__(self) -> None:
        eps = check_number(
            self.epsilon, "epsilon", allowed=lambda e: 0.0 <= e <= 1.0, where="in [0, 1]"
        )
        delta = math.sqrt(eps) if self.delta is None else self.delta
        delta = check_number(delta, "delta", allowed=lambda d: d >= 0.0, where=">= 0")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", delta)


def check_threshold(threshold) -> TypicalThreshold:
    if not isinstance(threshold, TypicalThreshold):
        raise TypeError(
            f"threshold must be a reference.typical.TypicalThreshold (e.g. "
            f"TypicalThreshold(epsilon=0.09)), got {type(threshold).__name__}"
        )
    return threshold


# ------------------------------------------------------------------------------------------
# 1. The rule at one node
# ------------------------------------------------------------------------------------------


def entropy(p: np.ndarray) -> float:  # [V] -> H(p) in nats, float64, 0 log 0 = 0
    p = np.asarray(p, dtype=np.float64)
    nz = p[p > 0]
    return float(-np.sum(nz * np.log(nz)))


def typical_bar(p: np.ndarray, threshold: TypicalThreshold) -> float:  # [V] -> the bar
    # min(epsilon, delta * exp(-H(p))): a flat row (large H) lowers the bar
    return min(threshold.epsilon, threshold.delta * math.exp(-entropy(p)))


def typically_accepted(p: np.ndarray, x: int, threshold: TypicalThreshold) -> bool:
    # [V], token -> does x pass at a node whose target row is p? (strictly above the bar)
    return bool(float(p[x]) > typical_bar(p, threshold))


def typical_child(p: np.ndarray, tree: Tree, node: int, threshold: TypicalThreshold):
    # the likeliest child of `node` (under p = its row) that passes; ties: the first tried.
    # -> child id, or None when no child passes (or `node` is a leaf)
    best, best_p = None, -1.0
    for child in tree.children(node):
        x = int(tree.tokens[child])
        if typically_accepted(p, x, threshold) and float(p[x]) > best_p:
            best, best_p = child, float(p[x])
    return best


def typical_path(p_rows: np.ndarray, tree: Tree, threshold: TypicalThreshold) -> tuple:
    # p_rows [n, V] -> the accepted node ids from depth 1 down: deterministic, no coin
    node, path = 0, []
    while (child := typical_child(p_rows[node], tree, node, threshold)) is not None:
        path.append(child)
        node = child
    return tuple(path)


# ------------------------------------------------------------------------------------------
# 2. Trees: the LOSSY verifier and its exact law
# ------------------------------------------------------------------------------------------


def check_typical_tree_inputs(p_rows, tree: Tree, threshold) -> np.ndarray:
    check_threshold(threshold)
    check_tree(tree, np.asarray(p_rows).shape[-1])
    p_rows = check_probability_rows(p_rows, "p_rows", ROW_SUM_ATOL)
    if p_rows.shape != tree.q.shape:
        raise ValueError(
            f"p_rows must have shape {tree.q.shape} (one row per node), got {p_rows.shape}"
        )
    return p_rows


def typical_verify_tree(
    p_rows, tree: Tree, threshold: TypicalThreshold, rng: np.random.Generator
) -> TreeVerification:
    """LOSSY: Medusa's typical acceptance on a tree. NOT the target's law.

    p_rows [n, V] (row i = target after the path to node i), tree -> TreeVerification.
    Walks down the tree, at each node taking the likeliest child x with
    p(x) > min(epsilon, delta exp(-H(p))), then samples one token from the last accepted
    node's row. An accepted token is emitted with probability 1 rather than p(x), so the
    output law differs from the target's (except for one-hot rows: greedy decoding).
    Use reference.tree.verify_tree for exact verification."""
    check_generator(rng)
    p_rows = check_typical_tree_inputs(p_rows, tree, threshold)
    return typical_verify_tree_unchecked(p_rows, tree, threshold, rng)


def typical_verify_tree_unchecked(
    p_rows: np.ndarray, tree: Tree, threshold: TypicalThreshold, rng: np.random.Generator
) -> TreeVerification:
    # LOSSY (see typical_verify_tree); no input checks, for the loop
    path = typical_path(p_rows, tree, threshold)
    end = path[-1] if path else 0
    return TreeVerification(path, sample_token(p_rows[end], rng))


def typical_verify_tree_law(
    p_rows, tree: Tree, threshold: TypicalThreshold
) -> dict[tuple[tuple[int, ...], int], float]:
    """Exact law of typical_verify_tree's output for a given tree: {(path, token): prob}.

    float64. The path is deterministic; the token after it follows the end node's row. The
    oracle holds this law (extended by the target's rows) against the target's own law."""
    p_rows = check_typical_tree_inputs(p_rows, tree, threshold)
    p64 = np.asarray(p_rows, dtype=np.float64)
    path = typical_path(p64, tree, threshold)
    row = p64[path[-1] if path else 0]
    row = row / row.sum()
    return {(path, int(y)): float(row[y]) for y in np.flatnonzero(row > 0)}


# ------------------------------------------------------------------------------------------
# 3. Chains: the same rule with verify's signature (pluggable as a loop's verify_fn)
# ------------------------------------------------------------------------------------------


def check_typical_chain_inputs(p_target, draft_tokens, threshold) -> tuple[np.ndarray, np.ndarray]:
    check_threshold(threshold)
    p_target = check_probability_rows(p_target, "p_target", ROW_SUM_ATOL)
    if p_target.ndim != 2:
        raise ValueError(f"p_target must be [k+1, V], got shape {p_target.shape}")
    tokens = as_token_array(draft_tokens, p_target.shape[1], "draft_tokens", allow_empty=True)
    if len(p_target) != len(tokens) + 1:
        raise ValueError(
            f"p_target must have k+1 = {len(tokens) + 1} rows for {len(tokens)} draft tokens "
            f"(the last is the bonus row), got {len(p_target)}"
        )
    return p_target, tokens


def typical_accepted_count(p_target: np.ndarray, tokens: np.ndarray, threshold) -> int:
    # [k+1, V], [k] -> how many drafts pass in a row, from the first
    n = 0
    while n < len(tokens) and typically_accepted(p_target[n], int(tokens[n]), threshold):
        n += 1
    return n


def typical_verify(
    p_target,
    q_draft,
    draft_tokens,
    rng: np.random.Generator,
    threshold: TypicalThreshold = TypicalThreshold(),
) -> Verification:
    """LOSSY: typical acceptance on a chain draft. NOT the target's law.

    p_target [k+1, V], q_draft [k, V] (ignored: the rule never looks at q), draft_tokens [k]
    -> Verification(accepted, token): the drafts that pass in a row, then one token sampled
    from the next row p_target[accepted]. Same signature as reference.verification.verify,
    so `typical_verify_fn(threshold)` can be passed to speculative_generate(verify_fn=...)
    to watch the law move."""
    del q_draft  # the whole point: q is never used, which is why the law is not p's
    check_generator(rng)
    p_target, tokens = check_typical_chain_inputs(p_target, draft_tokens, threshold)
    n = typical_accepted_count(p_target, tokens, threshold)
    return Verification(n, sample_token(p_target[n], rng))


def typical_verify_fn(threshold: TypicalThreshold):
    # -> a verify_fn(p_target, q_draft, draft_tokens, rng) with this threshold, for the loop
    check_threshold(threshold)
    return partial(typical_verify, threshold=threshold)


def typical_verify_law(p_target, draft_tokens, threshold: TypicalThreshold) -> dict:
    """Exact law of typical_verify's outcome: {(accepted, token): probability}, float64."""
    p_target, tokens = check_typical_chain_inputs(p_target, draft_tokens, threshold)
    p64 = np.asarray(p_target, dtype=np.float64)
    n = typical_accepted_count(p64, tokens, threshold)
    row = p64[n] / p64[n].sum()
    return {(n, int(y)): float(row[y]) for y in np.flatnonzero(row > 0)}


def total_variation(a: dict, b: dict) -> float:
    # two laws {outcome: probability} -> (1/2) sum_o |a(o) - b(o)|, in [0, 1]
    keys = set(a) | set(b)
    return 0.5 * math.fsum(abs(a.get(o, 0.0) - b.get(o, 0.0)) for o in keys)


# ------------------------------------------------------------------------------------------
# 4. The loop with typical acceptance (tree_round with the lossy rule)
# ------------------------------------------------------------------------------------------


def typical_tree_round(
    target,
    cache,
    drafter,
    context: np.ndarray,
    k: int,
    sampling: SamplingParams,
    rng: np.random.Generator,
    *,
    threshold: TypicalThreshold,
    clock=None,
) -> TreeRound:
    # LOSSY. reference.tree.tree_round with typical_verify_tree_unchecked in place of the
    # exact verify_tree: the same draft, one-pass verification, compaction and commit
    rule = typical_rule(threshold)
    return tree_round(target, cache, drafter, context, k, sampling, rng, rule, clock)


def typical_rule(threshold: TypicalThreshold):
    # -> (p [n, V], tree, rng) -> TreeVerification: the lossy step, as tree_round takes it
    check_threshold(threshold)

    def rule(p_rows: np.ndarray, tree: Tree, rng: np.random.Generator) -> TreeVerification:
        return typical_verify_tree_unchecked(p_rows, tree, threshold, rng)

    return rule


def typical_tree_speculative_generate(
    target,
    drafter,
    prompt,
    *,
    max_new_tokens: int,
    rng: np.random.Generator,
    threshold: TypicalThreshold,
    k: int | None = None,
    sampling: SamplingParams = SamplingParams(),
    eos_id: int | None = None,
    trace: bool = False,
    clock=None,
) -> SpeculativeResult:
    """LOSSY: tree_speculative_generate with typical acceptance. Its output does NOT follow
    the target's law (except greedy); it trades that for longer accepted paths.

    prompt [n] -> SpeculativeResult; the trace keeps each round's accepted path (and the
    first child of the node where the walk stopped), as the exact tree loop's does."""
    return tree_speculative_generate(
        target,
        drafter,
        prompt,
        max_new_tokens=max_new_tokens,
        rng=rng,
        k=k,
        sampling=sampling,
        eos_id=eos_id,
        trace=trace,
        clock=clock,
        verify_fn=typical_rule(threshold),
    )


def round_total_variation(p_path: Sequence[float]) -> float:
    # [m] the target's probability of each accepted token given the ones before it ->
    # TV between one typical round's output law (extended by the target) and the target's:
    # the round puts mass 1 on its deterministic path where the target puts prod p_path,
    # and both continue with the target's rows after it, so TV = 1 - prod p_path
    return 1.0 - math.prod(float(x) for x in p_path)


__all__ = [
    "MEDUSA_DELTA",
    "MEDUSA_EPSILON",
    "TypicalThreshold",
    "entropy",
    "round_total_variation",
    "total_variation",
    "typical_bar",
    "typical_tree_round",
    "typical_tree_speculative_generate",
    "typical_verify",
    "typical_verify_fn",
    "typical_verify_law",
    "typical_verify_tree",
    "typical_verify_tree_law",
    "typically_accepted",
]

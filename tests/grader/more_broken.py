"""Broken `verify`s beyond the oracle's catalogue (tests/distribution/broken.py), each one
small mistake, to test that the grader's hints come from the pattern of the deviation and
not from knowing the catalogue. Signature: verify(p_target [k+1, V], q_draft [k, V],
draft_tokens [k], rng) -> (accepted, token)."""

from __future__ import annotations

import numpy as np


def pick(weights: np.ndarray, rng: np.random.Generator) -> int:
    # [V] non-negative weights -> one index in proportion to them
    return int(rng.choice(len(weights), p=weights / weights.sum()))


def leftover(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    gap = np.maximum(p - q, 0.0)
    return gap if gap.sum() > 0 else p


def residual_is_p(p_target, q_draft, draft_tokens, rng):
    """After a rejection, resamples from the target row p_i itself (q not subtracted)."""
    for i, x in enumerate(draft_tokens):
        if rng.random() >= min(1.0, p_target[i, x] / q_draft[i, x]):
            return i, pick(p_target[i], rng)
    return len(draft_tokens), pick(p_target[-1], rng)


def accept_with_p(p_target, q_draft, draft_tokens, rng):
    """Accepts a draft with probability p(x) instead of min(1, p(x) / q(x))."""
    for i, x in enumerate(draft_tokens):
        if rng.random() >= p_target[i, x]:
            return i, pick(leftover(p_target[i], q_draft[i]), rng)
    return len(draft_tokens), pick(p_target[-1], rng)


def counts_the_rejected_draft(p_target, q_draft, draft_tokens, rng):
    """Returns accepted = i + 1 when draft i is rejected (counts the rejected draft)."""
    for i, x in enumerate(draft_tokens):
        if rng.random() >= min(1.0, p_target[i, x] / q_draft[i, x]):
            return i + 1, pick(leftover(p_target[i], q_draft[i]), rng)
    return len(draft_tokens), pick(p_target[-1], rng)


def correction_is_the_draft(p_target, q_draft, draft_tokens, rng):
    """Returns the rejected draft itself as the token after a rejection."""
    for i, x in enumerate(draft_tokens):
        if rng.random() >= min(1.0, p_target[i, x] / q_draft[i, x]):
            return i, int(x)
    return len(draft_tokens), pick(p_target[-1], rng)


def bonus_from_draft_row(p_target, q_draft, draft_tokens, rng):
    """After k acceptances, samples the bonus from the draft's last row q_{k-1}."""
    for i, x in enumerate(draft_tokens):
        if rng.random() >= min(1.0, p_target[i, x] / q_draft[i, x]):
            return i, pick(leftover(p_target[i], q_draft[i]), rng)
    k = len(draft_tokens)
    return k, pick(q_draft[k - 1] if k else p_target[0], rng)


def later_rows_shifted(p_target, q_draft, draft_tokens, rng):
    """Decides draft i >= 1 with row i - 1 of p (an off-by-one in the acceptance test only)."""
    for i, x in enumerate(draft_tokens):
        row = max(i - 1, 0)
        if rng.random() >= min(1.0, p_target[row, x] / q_draft[i, x]):
            return i, pick(leftover(p_target[i], q_draft[i]), rng)
    return len(draft_tokens), pick(p_target[-1], rng)


def uniforms_for_two_drafts(p_target, q_draft, draft_tokens, rng):
    """Draws the uniforms up front for at most two drafts: crashes when k = 3."""
    u = rng.random(2)
    for i, x in enumerate(draft_tokens):
        if u[i] >= min(1.0, p_target[i, x] / q_draft[i, x]):
            return i, pick(leftover(p_target[i], q_draft[i]), rng)
    return len(draft_tokens), pick(p_target[-1], rng)

"""Broken `verify`s beyond the oracle's catalogue (specdec/oracle/broken.py), each one
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


def reseeded_uniform(p_target, q_draft, draft_tokens, rng):
    """Re-seeds a generator before every uniform: u is the same number (0.637) on every call."""
    for i, x in enumerate(draft_tokens):
        u = np.random.default_rng(0).random()
        if u >= min(1.0, p_target[i, x] / q_draft[i, x]):
            return i, pick(leftover(p_target[i], q_draft[i]), rng)
    return len(draft_tokens), pick(p_target[-1], rng)


def softmax_residual(p_target, q_draft, draft_tokens, rng):
    """Normalises the clamped residual max(0, p - q) with a softmax instead of its sum."""
    for i, x in enumerate(draft_tokens):
        if rng.random() >= min(1.0, p_target[i, x] / q_draft[i, x]):
            gap = np.maximum(p_target[i] - q_draft[i], 0.0)
            return i, pick(np.exp(gap) / np.exp(gap).sum(), rng)
    return len(draft_tokens), pick(p_target[-1], rng)


def uniform_reused_for_residual(p_target, q_draft, draft_tokens, rng):
    """Inverts the residual's CDF with the uniform that rejected the draft (u >= keep)."""
    for i, x in enumerate(draft_tokens):
        u = rng.random()
        if u >= min(1.0, p_target[i, x] / q_draft[i, x]):
            r = leftover(p_target[i], q_draft[i])
            cdf = np.cumsum(r / r.sum())
            return i, int(min(np.searchsorted(cdf, u, side="right"), len(r) - 1))
    return len(draft_tokens), pick(p_target[-1], rng)


def ignores_rng(p_target, q_draft, draft_tokens, rng):
    """The right rule, but every random number from np.random's global state, not `rng`."""
    for i, x in enumerate(draft_tokens):
        if np.random.random() >= min(1.0, p_target[i, x] / q_draft[i, x]):  # noqa: NPY002
            r = leftover(p_target[i], q_draft[i])
            return i, int(np.random.choice(len(r), p=r / r.sum()))  # noqa: NPY002
    return len(draft_tokens), int(np.random.choice(p_target.shape[1], p=p_target[-1]))  # noqa: NPY002


def vectorised_without_k0(p_target, q_draft, draft_tokens, rng):
    """Vectorised decisions; np.argmax of an empty array raises when k = 0."""
    k = len(draft_tokens)
    x = np.asarray(draft_tokens)
    keep = np.minimum(1.0, p_target[np.arange(k), x] / q_draft[np.arange(k), x])
    rejected = rng.random(k) >= keep
    first = int(np.argmax(rejected))
    if not rejected[first]:
        return k, pick(p_target[k], rng)
    return first, pick(leftover(p_target[first], q_draft[first]), rng)

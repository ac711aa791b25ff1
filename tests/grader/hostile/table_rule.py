"""Hostile: answers the grader's shown examples from a table and never keeps a draft anywhere
else. The rows below are the fixed inputs the verify checks print when they fail (the exact
cases, the A/B example, the fixed k = 3 rows, the randomness rows): on exactly those arrays
it applies the contract's rule; on any other input it returns (0, a sample of p_target[0]),
which follows the target's law but keeps nothing.

The grader must answer: 0 (the law family fails at verify/keeps-drafts, whose rows are drawn
fresh for each grading; the rule family at its fresh cases; randomness and in-loop run only
once the law family passed)."""

import numpy as np


def one_hot(V, *ids):
    return np.eye(V)[list(ids)]


SOFT = np.array([0.1, 0.4, 0.3, 0.2])
EQUAL = np.stack([SOFT, np.roll(SOFT, 1), np.roll(SOFT, 2)])

SHOWN = [  # (p_target, q_draft) of every shown example
    (one_hot(4, 1, 2, 3), one_hot(4, 1, 2)),  # greedy-match
    (one_hot(4, 1, 3, 0), one_hot(4, 1, 2)),  # greedy-mismatch
    (np.array([[0.0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]]), np.array([[0.5, 0.5, 0.0]])),
    (np.vstack([EQUAL, one_hot(4, 2)]), EQUAL),  # p-equals-q
    (np.array([[0.6, 0.4], [0.3, 0.7]]), np.array([[0.8, 0.2]])),  # the A/B example
    (  # fixed-k3
        np.array(
            [
                [0.30, 0.25, 0.20, 0.15, 0.10],
                [0.10, 0.36, 0.24, 0.25, 0.05],
                [0.35, 0.05, 0.18, 0.30, 0.12],
                [0.15, 0.25, 0.30, 0.20, 0.10],
            ]
        ),
        np.array(
            [
                [0.50, 0.10, 0.10, 0.10, 0.20],
                [0.20, 0.60, 0.05, 0.05, 0.10],
                [0.10, 0.20, 0.30, 0.15, 0.25],
            ]
        ),
    ),
    (  # the randomness family's rows
        np.array([[0.3, 0.4, 0.3], [0.5, 0.2, 0.3], [0.2, 0.3, 0.5]]),
        np.array([[0.6, 0.2, 0.2], [0.25, 0.5, 0.25]]),
    ),
]


def shown(p, q):
    return any(
        p.shape == P.shape and q.shape == Q.shape and np.allclose(p, P) and np.allclose(q, Q)
        for P, Q in SHOWN
    )


def pick(weights, rng):
    return int(rng.choice(len(weights), p=weights / weights.sum()))


def contract(p_target, q_draft, draft_tokens, rng):
    for i, x in enumerate(draft_tokens):
        x = int(x)
        if rng.random() >= min(1.0, p_target[i, x] / q_draft[i, x]):
            gap = np.maximum(p_target[i] - q_draft[i], 0.0)
            return i, pick(gap if gap.sum() > 0 else p_target[i], rng)
    k = len(draft_tokens)
    return k, pick(p_target[k], rng)


def verify(p_target, q_draft, draft_tokens, rng):
    if shown(p_target, q_draft):
        return contract(p_target, q_draft, draft_tokens, rng)
    return 0, pick(p_target[0], rng)

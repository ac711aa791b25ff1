"""Hostile: answers an accepted count of float('inf') (int() of it raises OverflowError, not
ValueError).

The grader must answer: 0, the contract broken: accepted is inf, not an int; no traceback of
the grader's."""


def verify(p_target, q_draft, draft_tokens, rng):
    return float("inf"), 0

"""Hostile: answers an accepted count of 10**5000 (str() of an int of more than 4,300 digits
raises ValueError, which a grader may take for its own "could not be loaded").

The grader must answer: 0, the contract broken: accepted out of range, shown as an int of
5001 digits, not written out."""


def verify(p_target, q_draft, draft_tokens, rng):
    return 10**5000, 0

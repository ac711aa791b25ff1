"""Hostile: answers a 10-million-character string as the accepted count (on its first call;
then (0, 0), so that the other families fail fast), to bloat every report that quotes what
it returned.

The grader must answer: 0, the contract broken: accepted is a str, shown cut to a few hundred
characters; results.json stays under its bound."""

ANSWER = "9" * 10_000_000
CALLS = [0]


def verify(p_target, q_draft, draft_tokens, rng):
    CALLS[0] += 1
    return (ANSWER, 0) if CALLS[0] == 1 else (0, 0)

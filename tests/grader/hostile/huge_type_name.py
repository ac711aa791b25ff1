"""Hostile: raises an exception whose class name is 5 million characters long (the worker cuts
an exception's message, not its type's name), to bloat every report that names it.

The grader must answer: 0; the name is replaced (it is cut to 100 characters on the grading
side) and results.json stays under its bound."""

Huge = type("E" * 5_000_000, (Exception,), {})


def verify(p_target, q_draft, draft_tokens, rng):
    raise Huge("a class with a long name")

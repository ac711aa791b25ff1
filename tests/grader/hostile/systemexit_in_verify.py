"""Hostile: verify raises SystemExit(0) (what sys.exit does), which an `except Exception`
does not catch, hoping to stop the grading with success.

The grader must answer: 0, saying the process running the code ended with exit code 0."""


def verify(p_target, q_draft, draft_tokens, rng):
    raise SystemExit(0)

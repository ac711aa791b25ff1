"""Hostile: verify raises KeyboardInterrupt, as if someone pressed Ctrl-C, hoping the grader
stops and keeps what it had (nothing failed yet).

The grader must answer: 0, saying the process running the code ended (Python ends on an
uncaught KeyboardInterrupt by killing itself with SIGINT)."""


def verify(p_target, q_draft, draft_tokens, rng):
    raise KeyboardInterrupt

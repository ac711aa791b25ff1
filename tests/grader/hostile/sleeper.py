"""Hostile: verify sleeps for eleven days, hoping the grader waits (or gives up kindly).

The grader must answer: 0, saying grading was stopped after its time limit."""

import time


def verify(p_target, q_draft, draft_tokens, rng):
    time.sleep(10**6)
    return 0, 0

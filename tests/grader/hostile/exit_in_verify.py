"""Hostile: verify ends the process with os._exit(0), hoping that an exit code 0 reads as
"all passed".

The grader must answer: 0, saying the process running the code ended with exit code 0."""

import os


def verify(p_target, q_draft, draft_tokens, rng):
    os._exit(0)

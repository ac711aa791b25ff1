"""Hostile: calls sys.exit(0) while it is imported, before any check can run.

The grader must answer: 0, saying that importing the file ended the process running it
(exit code 0)."""

import sys

sys.exit(0)


def verify(p_target, q_draft, draft_tokens, rng):
    return 0, 0

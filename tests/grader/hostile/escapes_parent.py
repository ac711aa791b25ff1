"""Hostile: tries to outlive its grading. While imported it clears the signal that kills it
with its parent (prctl(PR_SET_PDEATHSIG, 0)) and leaves the grader's session and process
group (os.setsid()), then sleeps in verify until it is stopped, hoping that only the grading
process is killed at the time limit and that it lives on (as a worker's user, able to signal
another grading's worker of the same user).

The grader must answer: 0, saying grading was stopped after its time limit, and no process of
the worker's user may be left afterwards."""

import ctypes
import os
import time

PR_SET_PDEATHSIG = 1

try:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0)
    os.setsid()
    print("left the grader's session; no signal at the parent's death")
except OSError as error:  # a worker already leading its own session
    print(f"could not leave the session: {error}")


def verify(p_target, q_draft, draft_tokens, rng):
    time.sleep(10**6)
    return 0, 0

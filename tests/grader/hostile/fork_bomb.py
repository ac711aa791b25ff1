"""Hostile: forks without end while it is imported, to exhaust the machine's processes.

Made safe for the machine running the tests: a child that is ever born exits at once, the
parent reaps it, and the loop stops after 10 000 forks, so a limit that failed shows as a
wrong answer, not as a fork bomb.

The grader must answer: 0, saying fork failed (BlockingIOError: Resource temporarily
unavailable): the worker may start no process."""

import os

for _ in range(10_000):
    child = os.fork()  # the worker's RLIMIT_NPROC of 0: BlockingIOError here
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
raise RuntimeError("10 000 forks succeeded: the worker's process limit is missing")


def verify(p_target, q_draft, draft_tokens, rng):
    return 0, 0

"""Hostile: rewrites the worker's handler of repeated calls so that the randomness family's
runs (100 calls each) come back empty: with nothing to compare, two runs "agree" and no call
repeats an outcome. Every other request is answered honestly; its verify is wrong.

The grader must answer: 0, "the worker answered 0 results for 100 calls"."""

import sys

worker = sys.modules["__main__"]
honest = worker.Worker.op_repeat


def op_repeat(self, handle, args, kwargs, n):
    return [] if n == 100 else honest(self, handle, args, kwargs, n)


worker.Worker.op_repeat = op_repeat


def verify(p_target, q_draft, draft_tokens, rng):
    return 0, 0

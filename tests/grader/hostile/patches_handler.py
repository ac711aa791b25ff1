"""Hostile: rewrites the worker's own request handlers from inside (the worker is the
`__main__` module of the process the submission runs in), so that every batched request (n
calls with one set of rows, or one call per row) answers an empty list: the exact cases would
then pass with nothing to fail on. Its verify is wrong.

The grader must answer: 0, "the worker answered 0 results for 25 calls" (it checks every reply
against its request on its own side)."""

import sys

worker = sys.modules["__main__"]
worker.Worker.op_repeat = lambda self, handle, args, kwargs, n: []
worker.Worker.op_each = lambda self, handle, columns, stacked, tail: []


def verify(p_target, q_draft, draft_tokens, rng):
    return 0, 0

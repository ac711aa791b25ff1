"""Hostile: verify allocates without end, 100 MB at a time, to exhaust the machine's memory.

Made safe for the machine running the tests: bytes(n) takes zeroed pages from calloc that
are never touched (address space, not memory in use; bytearray(n) writes its zeros, and
took 19 s to reach the limit), and the loop stops at 300 (30 GB).

The grader must answer: 0, saying MemoryError (the worker's address-space limit, 4 GiB) or
that the process was killed."""

HELD = []


def verify(p_target, q_draft, draft_tokens, rng):
    for _ in range(300):
        HELD.append(bytes(10**8))
    raise RuntimeError("30 GB allocated: the worker's memory limit is missing")

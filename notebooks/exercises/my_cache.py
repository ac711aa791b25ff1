"""Exercise: write a KV cache with a commit pointer — temporary writes, commit, rollback —
then let the grader check it.

Grade your class from the repository root (about a second):

    .venv/bin/specdec grade notebooks/exercises/my_cache.py:SlotCache

The grader drives a new cache through scripts of calls (fixed ones, then seeded random
ones) and, after every call, compares `length`, `pending` and `committed()` with its own
model of the contract. Each row it writes holds distinct random numbers, so a wrong state is
proof, and the report names every row (w2.1 = row 1 of the 2nd write) to show where yours
went.

Why it matters for speculative decoding: a verification pass writes the K/V of k + 1 new
positions, but only the accepted ones may stay. Writing them as *temporary* rows, keeping
the accepted prefix with commit(n) and forgetting the rest with rollback() costs no copy:
two integers move (reference/kv_cache.py's KVCache does this for every layer at once; here
one layer is enough).

The contract (one layer; nh = n_head, hs = head_size, N = capacity):

    slot:  0 ........... length ........... length + pending ........ N
           [  committed   |   temporary (this round)   |     free       ]

    cache = SlotCache(capacity, n_head, head_size)
        preallocates K and V storage, [nh, N, hs] float64 each (the grader compares the
        rows you return with the rows it wrote exactly: float32 storage would round them);
        a new cache has length 0 and pending 0

    cache.length    int attribute: the committed rows, slots [0, length)
    cache.pending   int attribute: the temporary rows, slots [length, length + pending)

    cache.write(k, v)    k, v: [nh, T, hs] float64 arrays (T >= 1 new positions)
        copies them into slots [length + pending, length + pending + T) — right after the
        last row written, committed or temporary — and adds T to pending. If the rows do
        not fit (length + pending + T > capacity) it raises ValueError and changes nothing;
        a write that fills the cache exactly is allowed.

    cache.commit(n)      n: an int, 0 <= n <= pending
        the first n temporary rows become committed (length += n, pending -= n). The rows
        after them stay temporary: commit never drops anything; rollback() does. If
        n > pending it raises ValueError and changes nothing.

    cache.rollback()
        drops every temporary row: pending = 0. Nothing is copied or zeroed: the next write
        lands at slot length and overwrites them.

    cache.committed() -> (keys, values)
        the committed rows only, [nh, length, hs] each (views or copies).

A round of speculative decoding ends with commit(accepted + 1) then rollback() on the
target's cache; a drafter writes one row per step and commits the accepted ones.

Things the grader catches (each a small mistake it was tested on):

* commit(n) that keeps every temporary row instead of the first n;
* rollback() that resets pending but not the write position, so the next round's rows land
  after the dropped ones instead of right after the committed ones;
* write() that lands at slot length (overwriting this round's earlier temporary rows)
  instead of length + pending;
* committed() that returns the temporary rows too;
* an overflow (or a commit of more than was written) that raises but leaves the counters
  moved: check first, then write and move;
* float32 storage.

You may use numpy only; do not import `reference.kv_cache` (that would grade the reference).
A worked solution is in solutions/cache_solution.py — try first.
"""

from __future__ import annotations

import numpy as np

GRADE = (
    "write SlotCache in notebooks/exercises/my_cache.py, then grade it with: "
    ".venv/bin/specdec grade notebooks/exercises/my_cache.py:SlotCache"
)


class SlotCache:
    def __init__(self, capacity: int, n_head: int, head_size: int) -> None:
        # K and V storage [nh, N, hs] float64; length = pending = 0
        raise NotImplementedError(GRADE)

    def write(self, k: np.ndarray, v: np.ndarray) -> None:
        # k, v [nh, T, hs] -> slots [length + pending, length + pending + T), temporary
        raise NotImplementedError(GRADE)

    def commit(self, n: int) -> None:
        # the first n temporary rows become committed
        raise NotImplementedError(GRADE)

    def rollback(self) -> None:
        # drop every temporary row
        raise NotImplementedError(GRADE)

    def committed(self) -> tuple[np.ndarray, np.ndarray]:
        # -> (keys, values), [nh, length, hs] each
        raise NotImplementedError(GRADE)

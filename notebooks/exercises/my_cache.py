"""Exercise: write a KV cache with a commit pointer — temporary writes, commit, rollback —
then let the grader check it.

Read first: notebook 02 (§2 and §5: what a forward pass with a cache writes, what commit and
rollback mean) and notebook 06 (the same cache through many rounds). They say what the
operations do; working out where each row goes, and what each call moves, is yours.

Grade your class from the repository root (about a second):

    .venv/bin/specdec grade notebooks/exercises/my_cache.py:SlotCache

The grader drives a new cache through scripts of calls (fixed ones, then random ones drawn
afresh for each grading) and, after every call, compares `length`, `pending` and
`committed()` with its own model of the contract. Each row it writes holds distinct random
numbers, so a wrong state is proof, and the report names every row (w2.1 = row 1 of the 2nd
write) to show where yours went.

Why it matters for speculative decoding: a verification pass writes the K/V of k + 1 new
positions, but only the accepted ones may stay. Writing them as *temporary* rows, keeping
the accepted prefix with commit(n) and forgetting the rest with rollback() costs no copy:
only bookkeeping moves (reference/kv_cache.py's KVCache does this for every layer at once;
here one layer is enough).

The interface (one layer; nh = n_head, hs = head_size, N = capacity):

    cache = SlotCache(capacity, n_head, head_size)
        preallocates K and V storage for N rows of [nh, hs] each, in float64 (the grader
        compares the rows you return with the rows it wrote exactly: float32 would round
        them); a new cache holds no row, committed or temporary
    cache.length      int attribute: how many rows are committed
    cache.pending     int attribute: how many rows are temporary (written, not yet committed)
    cache.write(k, v) k, v: [nh, T, hs] float64 arrays, T >= 1 new positions, written as
                      temporary rows; returns None
    cache.commit(n)   n: an int; the first n temporary rows (in the order they were
                      written) become committed; returns None
    cache.rollback()  every temporary row is forgotten; returns None
    cache.committed() -> (keys, values), each [nh, length, hs]: the committed rows, oldest
                      first (views or copies)

What a correct cache keeps true after every call (what the grader checks):

* committed() holds exactly the rows of the committed positions, in the order they were
  written, and never a temporary or forgotten row;
* the rows of one write stay together and in order, and the temporary rows of a round
  follow one another in the order they were written: a later write never overwrites a row
  that is still temporary or committed;
* commit(n) never drops a temporary row: the ones after the first n stay temporary, and
  only rollback() forgets them; after a rollback, the next write reuses the room the
  forgotten rows took (nothing is copied or zeroed: writing over them is enough);
* storage is fixed: a write that does not fit in the capacity, counting every committed and
  temporary row, raises ValueError; so does commit(n) with n larger than what is temporary
  (or negative). A refused call changes nothing at all (length, pending, the rows). A write
  that fills the cache exactly is allowed.

A worked example (capacity 6; a row written as a1 is the first row of write a):

    write(a: 3 rows)   length 0, pending 3
    commit(1)          length 1, pending 2    committed(): a1
    rollback()         length 1, pending 0    committed(): a1
    write(b: 2 rows)   length 1, pending 2
    commit(2)          length 3, pending 0    committed(): a1 b1 b2
    write(c: 4 rows)   ValueError (3 committed + 4 > 6): still length 3, pending 0
    write(c: 3 rows)   length 3, pending 3    (fills the cache exactly)
    commit(4)          ValueError (only 3 are temporary): still length 3, pending 3

A round of speculative decoding ends with a commit of what was accepted, then a rollback,
on the target's cache; a drafter writes one row per step and commits the accepted ones.

Things the grader catches (each a small mistake it was tested on):

* commit(n) that keeps every temporary row instead of the first n;
* rollback() that forgets the temporary rows in the counters but leaves the next write
  landing after them;
* a second write of a round that overwrites the round's first one;
* committed() that returns the temporary rows too;
* an overflow (or a commit of more than was written) that raises but leaves the counters
  moved;
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
        # K and V storage for N rows of [nh, hs], float64; no row yet
        raise NotImplementedError(GRADE)

    def write(self, k: np.ndarray, v: np.ndarray) -> None:
        # k, v [nh, T, hs] -> T temporary rows, or ValueError if they do not fit
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

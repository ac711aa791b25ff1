"""Exercise: lay out one ragged batched pass (notebook 13), then let the grader check it.

Grade your function from the repository root (about a second):

    .venv/bin/specdec grade notebooks/exercises/my_batch.py:ragged_pass

A layout is a function of its inputs (nothing is drawn), so every check is exact: your three
arrays are held against the contract's on hand-made batches (a prefill, an offset, padding,
an idle row) and on 200 seeded random ragged batches. Three families are scored apart, one
per array; each failure shows the smallest batch that shows it, expected next to yours, with
a hint read from your answers.

The setting. B sequences share one target pass, but each continues its own sequence: row b
has start[b] tokens in its cache already (slots 0..start[b]-1) and feeds n_new[b] new ones.
The rows are right-padded to T columns, so column i of row b is a real token when
i < n_new[b] and padding otherwise; a row with n_new[b] = 0 (a finished sequence) is idle:
padding only. Padding is computed and thrown away: it is never written to a cache, and it
must not read a slot its row did not write.

The contract (the same as `reference.batch.batch_placement`, and the slots that
`BatchKVCache.write` fills):

    ragged_pass(start, n_new, T) -> (positions, mask, writes)

    start      [B] int64 array, >= 0: each row's cache end, where its first new token goes
    n_new      [B] int64 array, 0 <= n_new[b] <= T: each row's real new tokens
    T          int >= 1: the columns of the padded pass (T >= max(n_new); may be wider)
    S          = max(start + n_new): the key slots the pass reads, the longest row after it
               (an idle row's history counts too)
    positions  [B, T] int64: positions[b, i] = start[b] + i for a real column; 0 for padding
               (the position-embedding row it reads: 0 is always in range)
    mask       [B, T, S] bool, True = may attend:
               mask[b, i, j] = (j <= start[b] + i) and (j < start[b] + n_new[b])
               a real token sees its row's history and itself (causal, with its row's own
               offset); a padding column sees what its row's last real token sees (an idle
               row: its history, nothing at all if its cache is empty)
    writes     [B, S] bool: writes[b, j] = start[b] <= j < start[b] + n_new[b], the slots the
               pass writes in row b (its real tokens' keys and values; an idle row none)

An example: start = [4, 2, 6], n_new = [2, 0, 3], T = 3, so S = 9

    positions = [[4, 5, 0],        row 0: 2 tokens at 4, 5, then padding
                 [0, 0, 0],        row 1: idle
                 [6, 7, 8]]        row 2: 3 tokens at 6, 7, 8

    mask (x: may see), slots 0 1 2 3 4 5 6 7 8          writes
    row 0  column 0 (real)    x x x x x . . . .         . . . . x x . . .
           column 1 (real)    x x x x x x . . .
           column 2 (pad)     x x x x x x . . .         (= column 1's)
    row 1  columns 0..2 (pad) x x . . . . . . .         . . . . . . . . .
    row 2  column 0 (real)    x x x x x x x . .         . . . . . . x x x
           column 1 (real)    x x x x x x x x .
           column 2 (real)    x x x x x x x x x

Things the grader catches (each a small mistake it was tested on):

* positions, or the mask, not offset by start (0, 1, 2, ... in every row), or offset by one
  row's start for every row;
* off by one: a token that cannot see itself, or sees the next slot; the first new token at
  start + 1;
* padding that continues the positions (past n_ctx near the length limit), or that sees
  slots past its row's end (stale keys), every slot, or none;
* padding written to the cache, an idle row that writes a slot, S that forgets an idle row.

You may use numpy only; do not import `reference.batch` (that would grade the reference).
A worked solution is in solutions/batch_solution.py — try first.
"""

from __future__ import annotations

import numpy as np


def ragged_pass(start: np.ndarray, n_new: np.ndarray, T: int):
    # start [B], n_new [B], T -> (positions [B, T] int64, mask [B, T, S] bool, writes [B, S] bool)
    raise NotImplementedError(
        "write ragged_pass() in notebooks/exercises/my_batch.py, then grade it with: "
        ".venv/bin/specdec grade notebooks/exercises/my_batch.py:ragged_pass"
    )

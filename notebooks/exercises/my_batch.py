"""Exercise: lay out one ragged batched pass (notebook 13), then let the grader check it.

Grade your function from the repository root (about a second):

    .venv/bin/specdec grade notebooks/exercises/my_batch.py:ragged_pass

When: after notebook 13 §1 (a real batch, round by round) and before its §2, which lays one
pass out row by row: §2 is the place to check your reasoning afterwards. What you need from
before: notebook 02 §4, the causal mask of an append to a cache that already holds some
slots (the offset), and the cache's temporary writes.

A layout is a function of its inputs (nothing is drawn), so every check is exact: your three
arrays are held against the contract's on hand-made batches (a prefill, an offset, padding,
an idle row) and on 200 random ragged batches drawn afresh for each grading. Three families
are scored apart, one per array; each failure shows the smallest batch that shows it,
expected next to yours, with a hint read from your answers.

The setting. B sequences share one target pass, but each continues its own sequence: row b
has start[b] tokens in its cache already (slots 0..start[b]-1, one slot per position) and
feeds n_new[b] new ones, which the pass writes to its cache. The rows are right-padded to T
columns: the first n_new[b] columns of row b are its real new tokens, the rest padding; a
row with n_new[b] = 0 (a finished sequence) is idle: padding only. Padding is computed and
thrown away.

The contract (the same as `reference.batch.batch_placement`, and the slots that
`BatchKVCache.write` fills):

    ragged_pass(start, n_new, T) -> (positions, mask, writes)

    start      [B] int64 array, >= 0: each row's cache end, where its first new token goes
    n_new      [B] int64 array, 0 <= n_new[b] <= T: each row's real new tokens
    T          int >= 1: the columns of the padded pass (T >= max(n_new); may be wider)
    S          the key slots the pass reads: as many as the longest row holds once the pass
               has written (an idle row's history counts too)
    positions  [B, T] int64: the position id each column is fed at (the position-embedding
               row it reads). A padding column is fed at position 0 (always in range).
    mask       [B, T, S] bool, True = column i of row b may attend to key slot j
    writes     [B, S] bool: True where the pass writes row b's slot j

What a right answer keeps (each is what one family checks):

* a real token is fed at the position it has in its own sequence, and sees exactly what it
  would see if its row were run alone: its row's history, the new tokens before it, itself;
  nothing later;
* no column, real or padding, may read a slot its row did not write (in this pass or
  before): the key dimension is S for every row, and the slots past a row's end hold
  another row's length or stale keys;
* a padding column sees exactly what its row's last real token sees (its attention row is
  then well defined and harmless); a padding column of an idle row sees its row's history,
  and nothing at all if that history is empty;
* the pass writes a row's real tokens, each at its own slot, and nothing else: no padding
  column and no idle row writes a slot.

An example: start = [4, 2, 6], n_new = [2, 0, 3], T = 3, so S = 9

    positions = [[4, 5, 0],        row 0: 2 tokens, then padding
                 [0, 0, 0],        row 1: idle
                 [6, 7, 8]]        row 2: 3 tokens

    mask (x: may see), slots 0 1 2 3 4 5 6 7 8          writes
    row 0  column 0 (real)    x x x x x . . . .         . . . . x x . . .
           column 1 (real)    x x x x x x . . .
           column 2 (pad)     x x x x x x . . .         (= column 1's)
    row 1  columns 0..2 (pad) x x . . . . . . .         . . . . . . . . .
    row 2  column 0 (real)    x x x x x x x . .         . . . . . . x x x
           column 1 (real)    x x x x x x x x .
           column 2 (real)    x x x x x x x x x

Things the grader catches (each a small mistake it was tested on):

* positions, or the mask, not offset by the row's own history (0, 1, 2, ... in every row),
  or offset by one row's history for every row;
* off by one: a token that cannot see itself, or sees the next slot; the first new token one
  slot too far;
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

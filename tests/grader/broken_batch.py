"""Broken submissions of the ragged-batch exercise,
`ragged_pass(start [B], n_new [B], T) -> (positions [B, T], mask [B, T, S], writes [B, S])`
(notebooks/exercises/my_batch.py), each one small mistake a student makes on top of a correct
layout, to test that the grader rejects it and that its hint names the mistake."""

from __future__ import annotations

import numpy as np


def layout(
    start,
    n_new,
    T,
    *,
    pos_base=None,
    pos_shift=0,
    pad_pos=None,
    reach=0,
    pad_mask="last",
    idle_writes=False,
    write_padding=False,
    S=None,
):
    # the contract's layout with one switch turned -> (positions, mask, writes)
    s = np.asarray(start, dtype=np.int64)
    n = np.asarray(n_new, dtype=np.int64)
    S = int((s + n).max()) if S is None else S
    i, j = np.arange(T), np.arange(S)
    real = i[None, :] < n[:, None]  # [B, T]
    base = s if pos_base is None else pos_base(s)
    pad = 0 if pad_pos is None else pad_pos(s[:, None], i[None, :])
    positions = np.where(real, base[:, None] + i[None, :] + pos_shift, pad)
    causal = j[None, None, :] <= s[:, None, None] + i[None, :, None] + reach  # [B, T, S]
    held = j[None, None, :] < (s + n)[:, None, None]
    if pad_mask == "last":
        mask = causal & held
    elif pad_mask == "causal":
        mask = causal
    else:  # padding sees nothing
        mask = np.where(real[:, :, None], causal & held, False)
    count = np.full_like(n, T) if write_padding else np.maximum(n, 1) if idle_writes else n
    writes = (j[None, :] >= s[:, None]) & (j[None, :] < (s + count)[:, None])
    return positions.astype(np.int64), mask, writes


def positions_not_offset(start, n_new, T):
    """Numbers the new tokens 0, 1, 2, ... in every row, as a single prefill would."""
    return layout(start, n_new, T, pos_base=np.zeros_like)


def positions_from_one_past_start(start, n_new, T):
    """Puts the first new token at start + 1, as if start were the last filled slot."""
    return layout(start, n_new, T, pos_shift=1)


def padding_continues_positions(start, n_new, T):
    """Gives padding the positions start + i too (past n_ctx near the length limit)."""
    return layout(start, n_new, T, pad_pos=lambda s, i: s + i)


def mask_not_offset(start, n_new, T):
    """causal_mask(T, S) for every row: j <= i, the history forgotten."""
    positions, _, writes = layout(start, n_new, T)
    S = writes.shape[1]
    mask = np.arange(S)[None, None, :] <= np.arange(T)[None, :, None]
    return positions, np.broadcast_to(mask, (len(start), T, S)).copy(), writes


def mask_strictly_causal(start, n_new, T):
    """j < start + i: a token cannot see itself."""
    return layout(start, n_new, T, reach=-1)


def padding_sees_past_the_row(start, n_new, T):
    """The causal rule alone: padding sees slots its row did not write in this pass."""
    return layout(start, n_new, T, pad_mask="causal")


def padding_sees_nothing(start, n_new, T):
    """Masks every slot of a padding column: an attention row with no key."""
    return layout(start, n_new, T, pad_mask="none")


def idle_row_writes(start, n_new, T):
    """max(n_new, 1): an idle row still writes the slot at its start."""
    return layout(start, n_new, T, idle_writes=True)


def padding_written(start, n_new, T):
    """Writes T slots in every row, padding included."""
    return layout(start, n_new, T, write_padding=True)


def s_without_idle_rows(start, n_new, T):
    """S from the rows that feed tokens only: an idle row's history is cut off."""
    s, n = np.asarray(start), np.asarray(n_new)
    S = int(max([a + b for a, b in zip(s, n, strict=True) if b] or [0]))
    return layout(start, n_new, T, S=S)


BATCH_VARIANTS = {
    "positions_not_offset": positions_not_offset,
    "positions_from_one_past_start": positions_from_one_past_start,
    "padding_continues_positions": padding_continues_positions,
    "mask_not_offset": mask_not_offset,
    "mask_strictly_causal": mask_strictly_causal,
    "padding_sees_past_the_row": padding_sees_past_the_row,
    "padding_sees_nothing": padding_sees_nothing,
    "idle_row_writes": idle_row_writes,
    "padding_written": padding_written,
    "s_without_idle_rows": s_without_idle_rows,
}

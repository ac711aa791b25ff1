"""KV compaction: the accepted path's entries, scattered over a tree's temporary slots,
gathered right after the committed ones (then committed as a chain's would be)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from reference.kv_cache import KVCache


def compact(cache: KVCache, slots) -> None:
    # slots [r], increasing temporary-slot indices (0 = the first slot after the committed
    # ones) -> their K/V copied, in every layer, to temporary slots 0..r-1. A node's K/V
    # were computed at position length + depth seeing only its ancestors: once the path
    # sits contiguously, each entry is what a prefill of the path would have written.
    slots = np.asarray(slots, dtype=np.int64)
    if len(slots) and (np.any(np.diff(slots) <= 0) or slots[0] < 0 or slots[-1] >= cache.pending):
        raise ValueError(
            f"compact: slots must be increasing indices of the {cache.pending} temporary "
            f"slots, got {slots.tolist()}"
        )
    k, v = cache.gather(cache.length + slots)  # [L, nh, r, hs]: copies, then the writes
    for layer in range(k.shape[0]):
        cache.write(layer, cache.length, k[layer], v[layer])


def kept_slots(n_catch_up: int, path: Sequence[int]) -> np.ndarray:
    # -> the target's temporary slots to keep: the catch-up chain 0..m-1 (the root is m-1),
    # then node a at slot m-1+a
    return np.concatenate([np.arange(n_catch_up), n_catch_up - 1 + np.asarray(path, np.int64)])

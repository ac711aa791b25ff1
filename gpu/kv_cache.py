"""The twin's KV cache: the reference's `KVCache`, with its slots in device memory.

What differs from reference/kv_cache.py, and why: only where the slots live. The pointers
(`length`, `pending`) stay plain host integers: the loop learns the accepted count from the
round's one device -> host transfer anyway, so moving a pointer never waits for the device.
Writes, views, commit and rollback are the reference's own methods.
"""

from __future__ import annotations

import numpy as np

from gpu.device.backend import to_device, xp
from reference import kv_cache as reference_kv_cache
from reference.kv_cache import catch_up_tokens

__all__ = ["KVCache", "catch_up_tokens"]


class KVCache(reference_kv_cache.KVCache):
    kernel_layout = "sequence"  # [L, nh, N, hs] on the device: gpu/device/kernels.cu reads it so

    def __init__(
        self, n_layer: int, n_head: int, head_size: int, capacity: int, dtype=np.float32
    ) -> None:
        super().__init__(n_layer, n_head, head_size, 1, dtype)  # checks, pointers
        if capacity < 1:
            raise ValueError(f"KVCache capacity must be >= 1, got {capacity}")
        # [L, nh, N, hs] in device memory, as in the reference
        self.k = xp.zeros((n_layer, n_head, capacity, head_size), dtype=dtype)
        self.v = xp.zeros((n_layer, n_head, capacity, head_size), dtype=dtype)

    def gather(self, slots):
        # slots [r] host ints -> [L, nh, r, hs] copies, gathered on the device in one go
        src = to_device(slots)
        return self.k[:, :, src], self.v[:, :, src]

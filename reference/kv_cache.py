"""A preallocated key/value cache with a commit pointer.

Layout of one cache (the same for every layer):

    slot:   0 ............ length ............ length+pending ........ capacity
            [   committed   |   temporary (this round)   |      free       ]

* ``forward`` writes the K/V of its T new positions into the slots right after the
  last written one (committed or temporary) and marks them temporary.
* ``commit(n)`` makes the first n temporary slots permanent in *every* layer at once,
  because ``length`` is a single pointer shared by all layers.
* ``rollback()`` forgets the remaining temporary slots by moving the pointer; nothing is
  copied and nothing is zeroed: the next write simply overwrites them.
* ``catch_up_tokens(cache, context)`` names the committed tokens this cache has not seen
  yet: what the next forward call must feed before anything new.

A speculative round ends with ``commit(accepted)`` then ``rollback()`` on both caches.

Invariant (tested): after any history of rounds, slots [0, length) hold exactly what a
fresh prefill of the committed tokens would produce.
"""

from __future__ import annotations

import numpy as np

from reference.checks import check_number


class KVCache:
    def __init__(
        self, n_layer: int, n_head: int, head_size: int, capacity: int, dtype=np.float32
    ) -> None:
        if capacity < 1:
            raise ValueError(f"KVCache capacity must be >= 1, got {capacity}")
        # [L, nh, N, hs]: slot-major inside a head so that one slice reads a whole history
        self.k = np.zeros((n_layer, n_head, capacity, head_size), dtype=dtype)
        self.v = np.zeros((n_layer, n_head, capacity, head_size), dtype=dtype)
        self.length = 0  # committed slots
        self.pending = 0  # temporary slots written after the committed ones

    @property
    def capacity(self) -> int:  # N
        return self.k.shape[2]

    @property
    def end(self) -> int:
        """First free slot: where the next forward call writes."""
        return self.length + self.pending

    def check_room(self, n_new: int) -> None:
        """Raise before anything is written if n_new more slots do not fit."""
        if self.end + n_new > self.capacity:
            raise ValueError(
                f"KV cache full: {self.length} committed + {self.pending} temporary + "
                f"{n_new} new slots exceed its capacity of {self.capacity}"
            )

    def write(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        # k, v: [nh, T, hs] -> stored in slots [start, start+T) of this layer
        self.check_slots(layer, start, k, v)
        stop = start + k.shape[1]
        self.k[layer, :, start:stop] = k
        self.v[layer, :, start:stop] = v

    def check_slots(self, layer: int, start: int, k, v) -> None:
        # Before anything is written: a write outside [length, capacity) would overwrite a
        # committed slot (corrupting the state the invariant promises) or fall off the end.
        # Plain comparisons: this runs once per layer per forward call.
        L, nh, N, hs = self.k.shape
        if k.shape != v.shape or len(k.shape) != 3 or (k.shape[0], k.shape[2]) != (nh, hs):
            raise ValueError(
                f"KVCache.write: k and v must both have shape [nh, T, hs] = [{nh}, T, {hs}], "
                f"got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        T = k.shape[1]
        if not is_index(layer) or not 0 <= layer < L:
            raise ValueError(f"KVCache.write: layer must be an int in 0..{L - 1}, got {layer!r}")
        if not is_index(start) or not (self.length <= start and start + T <= N):
            raise ValueError(
                f"KVCache.write: start must be an int in {self.length}..{N - T} to write {T} "
                f"slots (after the {self.length} committed ones, inside the capacity of {N}), "
                f"got {start!r}"
            )

    def keys(self, layer: int, stop: int) -> np.ndarray:  # -> [nh, stop, hs] (a view)
        return self.k[layer, :, :stop]

    def values(self, layer: int, stop: int) -> np.ndarray:  # -> [nh, stop, hs] (a view)
        return self.v[layer, :, :stop]

    def write_at(self, layer: int, at, k: np.ndarray, v: np.ndarray):
        # k/v [nh, T, hs] -> (keys, values) [nh, S, hs]: one pass's temporary write at the
        # slots its Placement (reference/model.py) names, then the history it attends to
        self.write(layer, int(at.start[0]), k, v)
        return self.keys(layer, at.stop), self.values(layer, at.stop)

    def mark_written_at(self, at) -> None:
        """Called by the model after all layers wrote the pass placed at `at`."""
        self.mark_written(int(at.n_new[0]))

    def gather(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # slots [r] host ints -> copies of those slots' K and V in every layer, [L, nh, r, hs]
        # each (the GPU twin's cache gathers on its device)
        return self.k[:, :, slots], self.v[:, :, slots]

    def mark_written(self, n_new: int) -> None:
        """Called by the model after all layers wrote n_new positions."""
        n_new = check_number(
            n_new,
            "mark_written(n_new): n_new",
            integer=True,
            allowed=lambda n: 0 <= n <= self.capacity - self.end,
            where=f"in 0..{self.capacity - self.end} (the free slots)",
        )
        self.pending += n_new

    def commit(self, n: int) -> None:
        """Make the first n temporary slots permanent, in every layer at once.

        The temporary slots after them stay temporary: the caller drops them with
        `rollback()`, so every rejected draft is forgotten by a visible call."""
        n = check_number(
            n,
            "commit(n): n",
            integer=True,
            allowed=lambda n: 0 <= n <= self.pending,
            where=f"in 0..{self.pending} (the temporary slots)",
        )
        self.length += n
        self.pending -= n

    def rollback(self) -> None:
        """Drop every temporary slot by moving the pointer; the data stays and is overwritten."""
        self.pending = 0

    def reset(self) -> None:
        """Forget everything (a new prompt). O(1): the slots are overwritten later."""
        self.length = 0
        self.pending = 0

    def committed(self) -> tuple[np.ndarray, np.ndarray]:  # -> ([L, nh, length, hs], same)
        """Copies of the committed part, for comparisons in tests and plots."""
        return self.k[:, :, : self.length].copy(), self.v[:, :, : self.length].copy()

    def __repr__(self) -> str:
        return (
            f"KVCache(length={self.length}, pending={self.pending}, capacity={self.capacity}, "
            f"layers={self.k.shape[0]})"
        )


def is_index(x) -> bool:
    # a Python or NumPy int, not a bool
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def catch_up_tokens(cache: KVCache, context: np.ndarray) -> np.ndarray:
    # context [n] committed tokens -> [n - cache.length]: the ones this cache has not seen.
    # Usually one token (the last one emitted, whose K/V nobody computed yet); two for the
    # drafter after a round where every draft was accepted (it never fed its own last draft).
    return context[cache.length :]

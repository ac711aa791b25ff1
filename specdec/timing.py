"""Where a decoding loop spends its time: wall-clock seconds per named stage.

Both loops (`generate`, `speculative_generate`) accept a `StageClock` and mark the end of
each stage as they go, e.g. for one speculative round

    draft   -> target   -> verify  -> other
    (propose)  (one pass,  (accept /   (commit, emit, bookkeeping)
               k+1 rows)   correct)

so the benchmark can compare each term of the speedup formula with what the run really
spent, instead of trusting costs measured in isolation. A mark is one perf_counter() call.
"""

from __future__ import annotations

import time
from collections import defaultdict


class StageClock:
    """Accumulates seconds per stage: `mark(name)` charges the time since the last mark."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._last = time.perf_counter()

    def restart(self) -> None:
        # start timing from now (the time since the last mark is charged to nothing)
        self._last = time.perf_counter()

    def mark(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] += now - self._last
        self.calls[stage] += 1
        self._last = now

    def total(self, *stages: str) -> float:
        """Seconds spent in the given stages (all stages if none are named)."""
        return sum(self.seconds.get(s, 0.0) for s in (stages or tuple(self.seconds)))

    def merge(self, other: StageClock) -> None:
        for stage, seconds in other.seconds.items():
            self.seconds[stage] += seconds
            self.calls[stage] += other.calls[stage]

"""The compiled draft draw (specdec/fast_cpu/draw.py) on rows whose tail carries mass.

A draw that never returns the ids of small probability, while the q it hands over keeps
them, breaks exactness by exactly the mass it skips. A chi-square whose cells are merged
smallest first hides that mass among the small cells, and on a row whose tail below some
level holds almost nothing (the oracle's six-logit row) there is nothing to see. So here:

* rows with fat tails: the bundled draft's real rows at T = 1.3 after two prompts (their
  ids below 1e-3 hold 1.0 and 1.5 % of the mass, spread over ~190 ids), and two synthetic
  rows -- one with a head of five ids (50 %) and 15 % of the mass around each of 3e-3,
  3e-4 and 3e-5, 5 % around 3e-6; one flattened (4 096 logits ~ N(0, 1): every id between
  ~5e-6 and ~2e-3);
* cells by decade: every id of probability >= HEAD is a cell of its own, and the ids below
  it are pooled by decade, (1e-3, 1e-2], (1e-4, 1e-3], ..., so a tail the draw skips is a
  cell that comes out empty, not a few counts short in many merged cells.

Power, stated: a cell of expected mass M that comes out empty adds n M to the chi-square's
noncentrality (its term (0 - n M)^2 / (n M) alone), so a draw that never returns the ids of
one or more whole decades of total mass M is detected with power 0.9 once M >= lambda / n,
lambda the noncentrality that gives the chi-square that power at its level and degrees of
freedom (`detectable_tail`). The expected laws are written here in float64 from the logits,
q(x) = exp(z_x / T) / sum_y exp(z_y / T), with nothing from the package.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy import optimize, stats

from reference.sampling import SamplingParams
from reference.tokenizer import encode
from specdec.bundled import bundled_pair_available, load_bundled_pair
from specdec.oracle import optional
from specdec.oracle.laws import CheckResult, LoopSetup, chi_square_test

HEAD = 1e-2  # ids at least this likely are cells of their own; the rest pooled by decade
TAIL_T = 1.3  # the temperature of every row: the bundled rows' tail carries visible mass
# draws per row: the bundled rows' tails below 1e-3 hold ~1 %, so a missing 0.3 % must show;
# the synthetic rows' decades hold 5-15 % each, and 5 000 draws see 1 % (detectable_tail)
BUNDLED_N, SYNTHETIC_N = 20_000, 5_000

Draw = Callable  # (logits [V] float32, temperature, rng, out [V] float32) -> token


def softmax_law(z: np.ndarray, temperature: float) -> np.ndarray:
    # [V] logits -> [V] float64 q = exp(z / T) / sum exp(z / T), written out here
    w = np.exp((np.asarray(z, dtype=np.float64) - float(np.max(z))) / temperature)
    return w / math.fsum(w)


def cell_of(q: np.ndarray) -> list:
    # [V] -> the cell of each id: the id itself from HEAD on, else its decade, the ids of
    # 10^-(d+1) < q <= 10^-d together; an id of probability 0 gets none (it cannot come out)
    cells = []
    for x, p in enumerate(q):
        if p >= HEAD:
            cells.append(x)
        elif p > 0:
            d = int(math.floor(-math.log10(p)))
            cells.append(f"ids in (1e-{d + 1}, 1e-{d}]")
        else:
            cells.append(None)
    return cells


def cell_law(q: np.ndarray) -> dict:
    law: dict = {}
    for cell, p in zip(cell_of(q), q, strict=True):
        if cell is not None:
            law[cell] = law.get(cell, 0.0) + float(p)
    return law


@dataclass(frozen=True)
class TailRow:
    """A row of logits and the temperature it is drawn at."""

    name: str
    logits: np.ndarray  # [V] float32
    temperature: float
    n: int  # draws of its check

    @property
    def q(self) -> np.ndarray:
        return softmax_law(self.logits, self.temperature)


def bundled_rows() -> list[TailRow]:
    # the bundled draft's rows after three prompts, at TAIL_T (None when it is not installed)
    if not bundled_pair_available():
        return []
    _, draft = load_bundled_pair()
    rows = []
    for name, text in [("prose", "Once upon a time, "), ("code", "def f(x):\n    return ")]:
        z = draft.forward(np.asarray(encode(text), dtype=np.int64))[-1]
        z = np.ascontiguousarray(z, np.float32)
        rows.append(TailRow(f"bundled {name}", z, TAIL_T, BUNDLED_N))
    return rows


def decades_row() -> TailRow:
    # a head of five ids (50 %), then 15 % in each of the decades around 3e-3 (50 ids), 3e-4
    # (500) and 3e-5 (5 000), and 5 % around 3e-6 (16 667): logits = T log q, so that
    # softmax(z / T) = q
    tail = [np.full(m, p) for m, p in [(50, 3e-3), (500, 3e-4), (5_000, 3e-5), (16_667, 3e-6)]]
    q = np.concatenate([[0.2, 0.12, 0.08, 0.06, 0.04], *tail])
    q = q / q.sum()
    return TailRow("decades", (TAIL_T * np.log(q)).astype(np.float32), TAIL_T, SYNTHETIC_N)


def flat_row() -> TailRow:
    # 4 096 logits ~ N(0, 1) at T = 1.3: every id between ~5e-6 and ~2e-3
    z = np.random.default_rng(1301).standard_normal(4_096)
    return TailRow("flat", z.astype(np.float32), TAIL_T, SYNTHETIC_N)


@cache
def tail_rows() -> dict[str, TailRow]:
    rows = [*bundled_rows(), decades_row(), flat_row()]
    return {row.name: row for row in rows}


def tail_counts(draw: Draw, row: TailRow, n: int, seed: int) -> Counter:
    # n draws from the row -> counts per cell
    rng = np.random.default_rng(seed)
    out = np.empty(len(row.logits), np.float32)
    cells = cell_of(row.q)
    counts: Counter = Counter()
    for _ in range(n):
        counts[cells[draw(row.logits, row.temperature, rng, out)]] += 1
    return counts


def tail_check(draw: Draw, name: str, n: int | None = None, seed: int = 0) -> CheckResult:
    """n draws of `draw` (default: the row's own n) from the row `name`, counted per cell
    (ids above HEAD alone, the rest by decade), against the softmax's law of those cells."""
    row = tail_rows()[name]
    seed = seed or 1300 + sorted(tail_rows()).index(name)
    counts = tail_counts(draw, row, row.n if n is None else n, seed)
    return chi_square_test(counts, cell_law(row.q), f"{name}:tail")


def detectable_tail(n: int, df: int, alpha: float, power: float = 0.9) -> float:
    """The smallest total mass M of cells that, coming out empty, the chi-square at level
    alpha with df degrees of freedom detects with the given power from n draws: n M = lambda."""
    critical = stats.chi2.isf(alpha, df)
    lam = optimize.brentq(lambda nc: stats.ncx2.sf(critical, df, nc) - power, 1e-6, 1e6)
    return lam / n


def compiled_draw(z: np.ndarray, temperature: float, rng, out) -> int:
    """FastModelDrafter.draw's computation: one uniform, the compiled row and inverse CDF."""
    sampled_draw = optional.compiled_draw().sampled_draw

    return int(sampled_draw(z, np.float64(temperature), rng.random(), out))


# The loop through the compiled draw: the loop family's tiny pair, with the draft a
# FastModelDrafter (its sampled draws one compiled call: T > 0, no top-k or top-p); 4 000
# runs, as the lookup and self-drafting families: w = 0.08 - 0.12 detected with power 0.9
# at alpha / 3 (the accepted counts, then the 125-outcome token law).
FAST_LOOP_SETUP = LoopSetup(
    "fast_t13_k2",
    5,
    (16, 1, 2, 0.9, 11),
    (0.4, 12),
    (3, 0),
    k=2,
    max_new_tokens=3,
    sampling=SamplingParams(1.3),
    eos_id=None,
    n=4_000,
    seed=107,
    fast=True,
)

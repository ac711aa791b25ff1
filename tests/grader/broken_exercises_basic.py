"""Broken submissions of three exercises — the cache (SlotCache), sampling
(sampling_distribution) and speedup (plan_k) — each one small, realistic mistake on top of
otherwise correct code, to test that the graders reject them and that their hints name the
mistake. Contracts: notebooks/exercises/my_cache.py, my_sampling.py, my_speedup.py."""

from __future__ import annotations

import numpy as np

# --------------------------------------------------------------------------------------------
# The cache: SlotCache(capacity, n_head, head_size), write / commit / rollback / committed
# --------------------------------------------------------------------------------------------


class GoodCache:
    """Correct, the base every broken cache changes one method of."""

    def __init__(self, capacity: int, n_head: int, head_size: int) -> None:
        self.k = np.zeros((n_head, capacity, head_size))  # [nh, N, hs]
        self.v = np.zeros((n_head, capacity, head_size))
        self.length, self.pending = 0, 0

    def start(self) -> int:  # where the next write lands
        return self.length + self.pending

    def write(self, k: np.ndarray, v: np.ndarray) -> None:  # k, v [nh, T, hs]
        s, T = self.start(), k.shape[1]
        if s + T > self.k.shape[1]:
            raise ValueError("cache full")
        self.k[:, s : s + T], self.v[:, s : s + T] = k, v
        self.pending += T

    def commit(self, n: int) -> None:
        if not 0 <= n <= self.pending:
            raise ValueError(f"cannot commit {n} of {self.pending} rows")
        self.length, self.pending = self.length + n, self.pending - n

    def rollback(self) -> None:
        self.pending = 0

    def committed(self):  # -> ([nh, length, hs], [nh, length, hs])
        return self.k[:, : self.length], self.v[:, : self.length]


class CommitsEverything(GoodCache):
    """commit(n) keeps every temporary row, whatever n."""

    def commit(self, n: int) -> None:
        if not 0 <= n <= self.pending:
            raise ValueError(f"cannot commit {n} of {self.pending} rows")
        self.length, self.pending = self.length + self.pending, 0


class CommitDropsTheRest(GoodCache):
    """commit(n) keeps the first n and forgets the other temporary rows at once."""

    def commit(self, n: int) -> None:
        if not 0 <= n <= self.pending:
            raise ValueError(f"cannot commit {n} of {self.pending} rows")
        self.length, self.pending = self.length + n, 0


class RollbackKeepsWritePosition(GoodCache):
    """Keeps its own write position, which rollback() does not move back."""

    def __init__(self, capacity: int, n_head: int, head_size: int) -> None:
        super().__init__(capacity, n_head, head_size)
        self.end = 0

    def start(self) -> int:
        return self.end

    def write(self, k: np.ndarray, v: np.ndarray) -> None:
        super().write(k, v)
        self.end += k.shape[1]


class WritesAtLength(GoodCache):
    """Writes at slot `length`, over this round's earlier temporary rows."""

    def start(self) -> int:
        return self.length


class ViewIncludesTemporary(GoodCache):
    """committed() returns every row written, temporary ones included."""

    def committed(self):
        end = self.length + self.pending
        return self.k[:, :end], self.v[:, :end]


class OverflowMovesCounters(GoodCache):
    """Counts the rows before copying them, and never checks the room: numpy raises a
    ValueError on the overflow, but pending has already moved."""

    def write(self, k: np.ndarray, v: np.ndarray) -> None:
        s, T = self.start(), k.shape[1]
        self.pending += T
        self.k[:, s : s + T], self.v[:, s : s + T] = k, v


class CommitUnchecked(GoodCache):
    """commit(n) trusts n: committing more than was written goes through."""

    def commit(self, n: int) -> None:
        self.length, self.pending = self.length + n, max(self.pending - n, 0)


class RefusesExactFit(GoodCache):
    """Refuses a write that fills the cache exactly (>= where > belongs)."""

    def write(self, k: np.ndarray, v: np.ndarray) -> None:
        if self.start() + k.shape[1] >= self.k.shape[1]:
            raise ValueError("cache full")
        super().write(k, v)


class Float32Storage(GoodCache):
    """Stores K and V in float32."""

    def __init__(self, capacity: int, n_head: int, head_size: int) -> None:
        super().__init__(capacity, n_head, head_size)
        self.k, self.v = self.k.astype(np.float32), self.v.astype(np.float32)


# --------------------------------------------------------------------------------------------
# Sampling: sampling_distribution(logits [V], temperature, top_k, top_p) -> [V]
# --------------------------------------------------------------------------------------------


def softmax(z: np.ndarray) -> np.ndarray:  # [V] -> [V]
    e = np.exp(z - z.max())
    return e / e.sum()


def keep_top_k(z: np.ndarray, k) -> np.ndarray:  # logits [V] -> [V], -inf outside the top k
    if not k or k >= len(z):
        return z
    return np.where(z >= np.sort(z)[-k], z, -np.inf)


def keep_top_p(p: np.ndarray, top_p, renormalise: bool = True) -> np.ndarray:  # [V] -> [V]
    if top_p is None or top_p >= 1.0:
        return p
    order = np.argsort(-p, kind="stable")
    before = np.cumsum(p[order]) - p[order]
    kept = np.zeros_like(p)
    kept[order[before < top_p]] = p[order[before < top_p]]
    return kept / kept.sum() if renormalise else kept


def temperature_after_softmax(logits, temperature, top_k=None, top_p=None):
    """Divides the probabilities by T (then renormalises, which cancels T)."""
    z = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return np.eye(len(z))[np.argmax(z)]
    p = softmax(keep_top_k(z, top_k)) / temperature
    return keep_top_p(p / p.sum(), top_p)


def top_p_cuts_crossing_token(logits, temperature, top_k=None, top_p=None):
    """Keeps a token while the mass up to and *including* it is <= top_p."""
    z = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return np.eye(len(z))[np.argmax(z)]
    p = softmax(keep_top_k((z - z.max()) / temperature, top_k))
    if top_p is None or top_p >= 1.0:
        return p
    order = np.argsort(-p, kind="stable")
    keep = order[np.cumsum(p[order]) <= top_p]
    kept = np.zeros_like(p)
    kept[keep] = p[keep]
    return kept / kept.sum()


def filters_without_renormalising(logits, temperature, top_k=None, top_p=None):
    """Zeroes the tokens top-k and top-p cut, but never divides by the mass left."""
    z = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return np.eye(len(z))[np.argmax(z)]
    p = softmax((z - z.max()) / temperature)
    p = np.where(np.isfinite(keep_top_k(z, top_k)), p, 0.0)
    return keep_top_p(p, top_p, renormalise=False)


def top_p_before_top_k(logits, temperature, top_k=None, top_p=None):
    """Applies top-p to the full softmax, then top-k."""
    z = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return np.eye(len(z))[np.argmax(z)]
    p = keep_top_p(softmax((z - z.max()) / temperature), top_p)
    if top_k and top_k < len(z):
        p = np.where(p >= np.sort(p)[-top_k], p, 0.0)
        p = p / p.sum()
    return p


def no_max_subtraction(logits, temperature, top_k=None, top_p=None):
    """Takes exp of the raw logits / T: overflows for large logits or a tiny T."""
    z = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return np.eye(len(z))[np.argmax(z)]
    e = np.exp(keep_top_k(z / temperature, top_k))
    return keep_top_p(e / e.sum(), top_p)


def top_k_exactly_k(logits, temperature, top_k=None, top_p=None):
    """Keeps exactly k tokens (by sorted position), dropping tokens tied with the k-th."""
    z = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return np.eye(len(z))[np.argmax(z)]
    z = (z - z.max()) / temperature
    if top_k and top_k < len(z):
        cut = np.argsort(-z, kind="stable")[top_k:]
        z = z.copy()
        z[cut] = -np.inf
    return keep_top_p(softmax(z), top_p)


def greedy_ties_to_last(logits, temperature, top_k=None, top_p=None):
    """Greedy picks the *last* of the tied maxima."""
    z = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return np.eye(len(z))[len(z) - 1 - np.argmax(z[::-1])]
    return keep_top_p(softmax(keep_top_k((z - z.max()) / temperature, top_k)), top_p)


def greedy_by_tiny_temperature(logits, temperature, top_k=None, top_p=None):
    """Treats T = 0 as a tiny T: tied maxima share the mass instead of a one-hot row."""
    z = np.asarray(logits, dtype=np.float64)
    temperature = max(temperature, 1e-6)
    return keep_top_p(softmax(keep_top_k((z - z.max()) / temperature, top_k)), top_p)


# --------------------------------------------------------------------------------------------
# Speedup: plan_k(alpha, c, v, k_max) -> (best_k, expected_tokens, speedups)
# alpha: one rate or [k_max] rates by position; v: one figure for a pass over 2 or more
# positions, or [k_max + 1] with v[j] = v(j + 1), v[0] = 1
# --------------------------------------------------------------------------------------------


def rates(alpha, k_max: int) -> np.ndarray:  # -> [k_max]: the rate of draft j + 1
    return np.broadcast_to(np.asarray(alpha, dtype=np.float64), (k_max,))


def passes(v, k_max: int) -> np.ndarray:  # -> [k_max + 1]: v(k + 1) for each k, v(1) = 1
    if np.ndim(v) == 0:
        return np.where(np.arange(k_max + 1) == 0, 1.0, float(v))
    return np.asarray(v, dtype=np.float64)


def good_tokens(alpha, k_max: int) -> np.ndarray:  # -> [k_max + 1]
    return 1.0 + np.concatenate([[0.0], np.cumsum(np.cumprod(rates(alpha, k_max)))])


def plan(tokens, c, cost, k_max):
    k = np.arange(k_max + 1)
    speedups = tokens / (k * c + cost)
    return int(np.argmax(speedups)), tokens, speedups


def exponent_off_by_one(alpha, c, v, k_max):
    """One rate: E = (1 - alpha^k) / (1 - alpha); by position: the last term dropped."""
    k = np.arange(k_max + 1)
    if np.ndim(alpha) == 0:
        tokens = k * 1.0 if alpha == 1.0 else (1 - alpha ** k.astype(float)) / (1 - alpha)
    else:
        tokens = good_tokens(alpha, k_max) - np.r_[1.0, np.cumprod(rates(alpha, k_max))]
    return plan(tokens, c, passes(v, k_max), k_max)


def forgets_bonus_token(alpha, c, v, k_max):
    """Counts the accepted drafts only: E - 1."""
    return plan(good_tokens(alpha, k_max) - 1, c, passes(v, k_max), k_max)


def ignores_v(alpha, c, v, k_max):
    """Leviathan's k c + 1 whatever v says."""
    return plan(good_tokens(alpha, k_max), c, 1.0, k_max)


def prices_plain_decoding_at_v(alpha, c, v, k_max):
    """k = 0 priced at v, as the exercise once did: plain decoding's 'speedup' is 1 / v."""
    cost = passes(v, k_max).copy()
    if np.ndim(v) == 0:
        cost[0] = v
    return plan(good_tokens(alpha, k_max), c, cost, k_max)


def adds_the_rates(alpha, c, v, k_max):
    """Every draft counted with its own rate, as if each were judged: 1 + alpha[0] + ..."""
    tokens = 1.0 + np.concatenate([[0.0], np.cumsum(rates(alpha, k_max))])
    return plan(tokens, c, passes(v, k_max), k_max)


def pools_the_rates(alpha, c, v, k_max):
    """The closed form for one rate, with the mean of the first k rates."""
    r, tokens = rates(alpha, k_max), [1.0]
    for k in range(1, k_max + 1):
        mean = r[:k].mean()
        tokens.append(k + 1.0 if mean == 1.0 else (1 - mean ** (k + 1)) / (1 - mean))
    return plan(np.array(tokens), c, passes(v, k_max), k_max)


def reads_rates_one_late(alpha, c, v, k_max):
    """alpha[i] read for the i-th draft (1-based): alpha[1] for the first."""
    if np.ndim(alpha) == 0:
        return plan(good_tokens(alpha, k_max), c, passes(v, k_max), k_max)
    tokens, reach = [1.0], 1.0
    for i in range(1, k_max + 1):
        reach *= alpha[i]
        tokens.append(tokens[-1] + reach)
    return plan(np.array(tokens), c, passes(v, k_max), k_max)


def alpha_one_zero_division(alpha, c, v, k_max):
    """The closed form in Python floats for one rate, alpha = 1 not set apart."""
    if np.ndim(alpha) != 0:
        return plan(good_tokens(alpha, k_max), c, passes(v, k_max), k_max)
    tokens = [(1 - alpha ** (k + 1)) / (1 - alpha) for k in range(k_max + 1)]
    return plan(np.array(tokens), c, passes(v, k_max), k_max)


def alpha_one_nan(alpha, c, v, k_max):
    """The closed form in numpy for one rate, alpha = 1 not set apart (0 / 0 = NaN)."""
    if np.ndim(alpha) != 0:
        return plan(good_tokens(alpha, k_max), c, passes(v, k_max), k_max)
    k = np.arange(k_max + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        tokens = (1 - np.float64(alpha) ** (k + 1)) / (1 - np.float64(alpha))
    speedups = tokens / (k * c + passes(v, k_max))
    return int(np.nanargmax(speedups)) if np.isfinite(speedups).any() else 0, tokens, speedups


def best_of_tokens(alpha, c, v, k_max):
    """Picks the k with the most tokens per round."""
    _, tokens, speedups = plan(good_tokens(alpha, k_max), c, passes(v, k_max), k_max)
    return int(np.argmax(tokens)), tokens, speedups


def ties_to_largest_k(alpha, c, v, k_max):
    """Keeps the last of equal speedups (>= in the running maximum)."""
    _, tokens, speedups = plan(good_tokens(alpha, k_max), c, passes(v, k_max), k_max)
    best = 0
    for j in range(k_max + 1):
        if speedups[j] >= speedups[best]:
            best = j
    return best, tokens, speedups


def skips_k_zero(alpha, c, v, k_max):
    """Looks for the best k in 1..k_max only (plain decoding is no candidate)."""
    _, tokens, speedups = plan(good_tokens(alpha, k_max), c, passes(v, k_max), k_max)
    return (1 + int(np.argmax(speedups[1:])) if k_max else 0), tokens, speedups


def v_read_at_k_plus_1(alpha, c, v, k_max):
    """Reads a measured v's entry for k at index k + 1 (v(k+1) taken as v[k+1])."""
    tokens = good_tokens(alpha, k_max)
    if np.ndim(v) == 0:
        return plan(tokens, c, passes(v, k_max), k_max)
    speedups = np.array([tokens[j] / (j * c + v[j + 1]) for j in range(k_max + 1)])
    return int(np.argmax(speedups)), tokens, speedups


def bonus_only_when_all_kept(alpha, c, v, k_max):
    """Counts the target's token only as the bonus (all k kept), not the correction after a
    rejection: E - 1 + P(all k kept)."""
    reach = np.r_[1.0, np.cumprod(rates(alpha, k_max))]
    return plan(good_tokens(alpha, k_max) - 1 + reach, c, passes(v, k_max), k_max)


def verify_pass_over_k_positions(alpha, c, v, k_max):
    """Prices the verification pass for k positions (rows for the k drafts only, none for the
    bonus): v(k), so 1 at k = 1; numpy reads v[k - 1] as v[-1] at k = 0."""
    k = np.arange(k_max + 1)
    if np.ndim(v) == 0:
        cost = np.where(k <= 1, 1.0, float(v))
    else:
        cost = np.asarray(v, dtype=np.float64)[k - 1]
    return plan(good_tokens(alpha, k_max), c, cost, k_max)

"""Logits -> the processed distribution a token is actually drawn from.

One function, `probabilities`, serves *both* models. Speculative sampling is exact only
if the q used in min(1, p/q) is the distribution the draft token was really drawn from,
and p is the distribution the target would really sample from: so temperature, top-k and
top-p are applied on both sides, by the same code.

Greedy decoding (temperature 0) is the same machinery with a one-hot distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reference.checks import check_finite, check_generator, check_number


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # divide logits by it; 0 means greedy (one-hot argmax)
    top_k: int | None = None  # keep only the top_k most likely tokens (None: all)
    top_p: float = 1.0  # keep the smallest set of most likely tokens with mass >= top_p

    def __post_init__(self) -> None:
        check_number(
            self.temperature,
            "temperature",
            allowed=lambda t: np.isfinite(t) and t >= 0,
            where="a finite number >= 0 (0 = greedy)",
        )
        check_number(
            self.top_k,
            "top_k",
            integer=True,
            optional=True,
            allowed=lambda k: k >= 1,
            where=">= 1 (or None for no limit)",
        )
        check_number(self.top_p, "top_p", allowed=lambda p: 0.0 < p <= 1.0, where="in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def describe(self) -> str:
        if self.greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top-k={self.top_k}")
        if self.top_p < 1.0:
            parts.append(f"top-p={self.top_p:g}")
        return ", ".join(parts)


GREEDY = SamplingParams(temperature=0.0)


def check_sampling(sampling) -> SamplingParams:
    if not isinstance(sampling, SamplingParams):
        raise TypeError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
    return sampling


def one_hot(index: np.ndarray, n: int, dtype) -> np.ndarray:  # [...] ints -> [..., n]
    out = np.zeros(np.shape(index) + (n,), dtype=dtype)
    if out.ndim == 1:  # one row (a drafter's per-token step): plain indexing, 5x faster
        out[index] = 1
    else:
        np.put_along_axis(out, np.asarray(index)[..., None], 1, axis=-1)
    return out


def top_k_filter(z: np.ndarray, k: int) -> np.ndarray:  # [..., V] -> [..., V]
    # keep logits >= the k-th largest; the rest get -inf so softmax gives them 0
    if k >= z.shape[-1]:
        return z
    kth = np.partition(z, -k, axis=-1)[..., -k, None]
    return np.where(z >= kth, z, -np.inf)


def top_p_filter(probs: np.ndarray, top_p: float) -> np.ndarray:  # [..., V] -> [..., V]
    # Nucleus: sort by probability, keep a token while the mass *before* it is < top_p,
    # so the most likely token always survives and the kept set reaches top_p.
    if top_p >= 1.0:
        return probs
    order = np.argsort(-probs, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(probs, order, axis=-1)
    mass_before = np.cumsum(sorted_p, axis=-1) - sorted_p
    keep_sorted = mass_before < top_p
    keep = np.empty_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    kept = np.where(keep, probs, 0)
    return kept / kept.sum(axis=-1, keepdims=True)


def probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    # logits [..., V] -> probabilities [..., V], same float dtype (float32 unless given float64)
    z = np.asarray(logits)
    if not np.issubdtype(z.dtype, np.floating):
        z = z.astype(np.float32)
    check_finite(z, "logits")
    return probabilities_unchecked(z, params)


def probabilities_unchecked(z: np.ndarray, params: SamplingParams) -> np.ndarray:
    # float logits [..., V], known finite -> probabilities [..., V]: `probabilities` without
    # its checks, for a drafter's own per-token rows (it checks its proposal once, whole)
    if params.greedy:
        return one_hot(np.argmax(z, axis=-1), z.shape[-1], z.dtype)
    # Shift by the max *before* dividing: every entry is then <= 0, so a temperature far
    # below the logit gaps sends the others to -inf (probability 0) instead of overflowing
    # to inf - inf = NaN. Divide in float64 so that a tiny T cannot round to 0 either.
    z = z - z.max(axis=-1, keepdims=True)
    with np.errstate(over="ignore"):
        z = (z / np.float64(params.temperature)).astype(z.dtype, copy=False)
    if params.top_k is not None:
        z = top_k_filter(z, params.top_k)
    e = np.exp(z - z.max(axis=-1, keepdims=True))  # softmax; exp(-inf) = 0 for filtered ids
    probs = e / e.sum(axis=-1, keepdims=True)
    return top_p_filter(probs, params.top_p)


def sample_token(probs: np.ndarray, rng: np.random.Generator) -> int:
    # probs [V] -> one token id, by inverting the CDF at a single uniform u ~ U[0, 1).
    # searchsorted(side="right") returns the first id whose cumulative mass exceeds u,
    # so an id with zero probability can never be returned.
    check_generator(rng)
    probs = np.asarray(probs)
    check_one_distribution(probs.shape)
    cdf = np.cumsum(probs, dtype=np.float64)
    check_total_mass(cdf[-1])
    return draw_from_cdf(cdf, rng)


def sample_token_unchecked(probs: np.ndarray, rng: np.random.Generator) -> int:
    # probs [V], a row the caller made (and checks) -> one token id: `sample_token` without
    # its checks, the same draw from the same uniform
    return draw_from_cdf(np.cumsum(probs, dtype=np.float64), rng)


def draw_from_cdf(cdf: np.ndarray, rng: np.random.Generator) -> int:
    # cdf [V] float64, total mass cdf[-1] -> the first id whose cumulative mass exceeds u
    u = rng.random() * cdf[-1]
    return min(int(cdf.searchsorted(u, side="right")), len(cdf) - 1)


def draw_token(
    logits: np.ndarray, params: SamplingParams, rng: np.random.Generator, out: np.ndarray
) -> int:
    # logits [V], known finite, out [V] -> one token id; out receives the row it was drawn
    # from: probabilities_unchecked's row and sample_token_unchecked's draw, from the same
    # uniform. Greedy takes a shortcut, because a drafter draws one row per draft step right
    # after a step that pushed NumPy's own code and data out of the CPU's caches, where each
    # small call costs about twice its usual (docs/benchmarks.md, "The draft inside the loop").
    if params.greedy:  # the one-hot row of the argmax, whose draw is the argmax for any u
        token = int(logits.argmax())
        out.fill(0)
        out[token] = 1
        rng.random()  # the uniform sample_token would spend: the stream stays the same
        return token
    out[:] = probabilities_unchecked(logits, params)
    return sample_token_unchecked(out, rng)


def check_one_distribution(shape: tuple) -> None:
    # a [k, V] array would be flattened by cumsum and give an id beyond one row
    if len(shape) != 1 or shape[0] == 0:
        raise ValueError(
            f"sample_token takes one distribution over ids, shape [V]; got shape {shape} "
            f"(sample each row of a [k, V] array on its own)"
        )


def check_total_mass(total: float) -> None:
    # an all-zero (or NaN) row has nothing to sample: inverting its CDF would return an
    # arbitrary id instead of failing
    if not (np.isfinite(total) and total > 0):
        raise ValueError(
            f"sample_token: the distribution's total mass is {float(total)}; it must be a "
            f"finite number > 0 (an all-zero row has no token to draw)"
        )

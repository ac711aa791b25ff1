"""The twin's sampling: processed distributions and draws, computed where the logits are.

What differs from reference/sampling.py, and why:
* `probabilities` runs on the device: one fused operation (`pick`, below; its plan in
  gpu/device/fused.py) for greedy and plain-temperature rows, `xp` operations otherwise
  (`processed`); the same transforms (temperature, top-k, top-p, greedy one-hot) in the
  same order, so p and q are processed alike on both sides.
  It does not check the logits for NaN: that would be a host sync per call. The loop folds a
  finiteness flag into its one transfer per round instead.
* A draw is `inverse_cdf(probs, u)` with a uniform u that is already on the device: the
  index comes back as a device scalar and the host is not asked. The public `sample_token`
  keeps the reference's signature (a numpy Generator in, an int out) and its checks (one
  row, a positive total mass), so it transfers once: the id and the row's mass together.
`SamplingParams`, `GREEDY` and the parameter checks are the reference's.
"""

from __future__ import annotations

import numpy as np

from gpu.device.backend import ON_DEVICE, to_device, to_host, xp
from gpu.device.fused import pick_fits, pick_plan
from gpu.device.kernels import fused
from reference.checks import check_generator
from reference.sampling import (
    GREEDY,
    SamplingParams,
    check_one_distribution,
    check_sampling,
    check_total_mass,
)

__all__ = [
    "GREEDY",
    "SamplingParams",
    "check_sampling",
    "inverse_cdf",
    "pick",
    "probabilities",
    "sample_token",
]


def one_hot(index, n: int, dtype):  # [...] ints -> [..., n]
    return (xp.arange(n) == index[..., None]).astype(dtype)


def top_k_filter(z, k: int):  # [..., V] -> [..., V]
    if k >= z.shape[-1]:
        return z
    kth = xp.sort(z, axis=-1)[..., -k, None]
    return xp.where(z >= kth, z, -xp.inf)


# ties in probability keep the reference's order (NumPy's stable sort; CuPy's sort is stable,
# and takes no `kind`; the stand-in sorts stably either way)
STABLE = {} if ON_DEVICE else {"kind": "stable"}


def top_p_filter(probs, top_p: float):  # [..., V] -> [..., V]
    # keep a token while the mass of the tokens more likely than it is < top_p
    if top_p >= 1.0:
        return probs
    order = xp.argsort(-probs, axis=-1, **STABLE)  # [..., V]: most likely first
    sorted_p = xp.take_along_axis(probs, order, axis=-1)
    keep_sorted = (xp.cumsum(sorted_p, axis=-1) - sorted_p) < top_p
    # back to vocabulary order: position j of the sorted rows holds id order[j]
    keep = xp.take_along_axis(keep_sorted, xp.argsort(order, axis=-1), axis=-1)
    kept = xp.where(keep, probs, 0)
    return kept / kept.sum(axis=-1, keepdims=True)


def probabilities(logits, params: SamplingParams):
    # logits [..., V] (host or device) -> probabilities [..., V] on the device: one fused
    # launch for float32 logits, greedy or plain temperature (`pick`)
    z = to_device(logits)
    if not np.issubdtype(z.dtype, np.floating):
        z = z.astype(np.float32)
    if z.dtype != np.float32 or z.ndim == 0 or not pick_fits(params):
        return processed(z, params)
    out = xp.empty(z.shape, dtype=np.float32)
    pick(z.reshape(-1, z.shape[-1]), params, probs=out.reshape(-1, z.shape[-1]))
    return out


def processed(z, params: SamplingParams):
    # z [..., V] float logits on the device -> probabilities [..., V]: the reference's
    # transforms with xp, one operation at a time (the fused kernel's body)
    if params.greedy:
        # + 0 * sum(z): NaN where a logit is NaN or inf, so the loop's finiteness flag on p
        # sees a broken model even though argmax would have picked an id anyway
        return one_hot(xp.argmax(z, axis=-1), z.shape[-1], z.dtype) + 0 * z.sum(-1, keepdims=True)
    z = z - z.max(axis=-1, keepdims=True)
    z = (z.astype(np.float64) / params.temperature).astype(z.dtype)
    if params.top_k is not None:
        z = top_k_filter(z, params.top_k)
    e = xp.exp(z - z.max(axis=-1, keepdims=True))
    probs = e / e.sum(axis=-1, keepdims=True)
    return top_p_filter(probs, params.top_p)


def inverse_cdf(probs, u):
    # probs [..., V] on the device, u [...] uniforms in [0, 1) -> ids [...] on the device:
    # in each row, the first id whose cumulative mass exceeds u * the row's total (an id of
    # probability 0 is never returned). The count of cumulative masses <= u * total is that
    # id (searchsorted's "right" side), and it takes rows: k drafts in one call, no loop.
    cdf = xp.cumsum(probs, axis=-1, dtype=np.float64)
    index = (cdf <= (u * cdf[..., -1])[..., None]).sum(axis=-1)
    return xp.minimum(index, probs.shape[-1] - 1)


def params_fit(logits, params, *args, **kwargs) -> bool:
    return pick_fits(params)  # greedy or plain temperature: the kernel's; else this body


@fused(pick_plan, kernel="pick_rows", fits=params_fit)
def pick(logits, params, u=None, *, probs=None, tokens=None, finite=None):
    """Row r of logits [R, V] -> its processed distribution into probs[r], the inverse-CDF draw
    at u[r] (a device array [R], or one float) into tokens[r], and 1 into finite[r] if every
    logit of the row is finite: one launch (gpu/device/fused.py `pick_plan`) when
    `pick_fits(params)`, else these lines. Any of probs, tokens, finite may be None. Returns
    probs (or, with probs None, the distribution the body computed: in NumPy mode only, else
    None)."""
    p = processed(logits, params)
    if probs is not None:
        probs[...] = p
    if tokens is not None:
        tokens[...] = inverse_cdf(p, u)
    if finite is not None:
        finite[...] = xp.all(xp.isfinite(logits), axis=-1)
    return p if probs is None else probs


def sample_token(probs, rng: np.random.Generator) -> int:
    # probs [V] -> one token id on the host: one uniform from rng, one transfer, which
    # brings the row's total mass back with the id (the reference's checks, no extra sync)
    check_generator(rng)
    probs = to_device(probs)
    check_one_distribution(probs.shape)
    index, total = to_host(
        xp.stack([inverse_cdf(probs, rng.random()).astype(np.float64), probs.sum(dtype=np.float64)])
    )
    check_total_mass(total)
    return int(index)

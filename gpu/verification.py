"""The twin's `verify`: the whole acceptance-rejection decision in a few device operations.

What differs from reference/verification.py, and why: the reference walks the drafts in a
Python loop, one uniform and one branch per position, which on a GPU would mean a host sync
per position. Here every position is decided at once:

    a_i      = min(1, p_i(x_i) / q_i(x_i))               for all i < k   (one gather)
    rejected = u_i >= a_i                                with k fresh uniforms u_0..u_{k-1}
    n        = the first rejected position, or k         (argmax over [rejected, True])
    row      = norm(max(0, p_n - q_n)) if n < k else p_k (the residual, or the bonus row)
    token    = inverse CDF of row at one more uniform u_k

It is the same law: decisions at positions after the first rejection are computed but never
used, and u_k is independent of u_0..u_n. `decide` returns (n, token) packed in one device
array, so a loop brings its outcome to the host in one transfer; `decide_packed` is a round's
whole decision and its packing as one fused kernel (its plan in gpu/device/fused.py). The
uniforms come from the numpy Generator the caller passes (drawn on the host, copied over with
the round's inputs).
`Verification`, `acceptance_probability`, `accepts` and the input checks are the reference's.
"""

from __future__ import annotations

import numpy as np

from gpu.device.backend import on_device, to_device, to_host, xp
from gpu.device.fused import decide_plan
from gpu.device.kernels import fused
from gpu.sampling import inverse_cdf
from reference.verification import (
    ROW_SUM_ATOL,
    Verification,
    acceptance_probability,
    accepts,
    check_verify_inputs,
)

__all__ = [
    "ROW_SUM_ATOL",
    "Verification",
    "acceptance_probability",
    "accepts",
    "bonus_token",
    "decide",
    "decide_packed",
    "decide_rows",
    "residual_distribution",
    "residual_token",
    "verify",
    "verify_unchecked",
]


def residual_distribution(p, q):
    # [..., V], [..., V] -> [..., V]: norm(max(0, p - q)), float64; p itself where p == q
    p64, q64 = to_device(p).astype(np.float64), to_device(q).astype(np.float64)
    r = xp.maximum(p64 - q64, 0.0)
    total = r.sum(axis=-1, keepdims=True)
    return xp.where(
        total > 0, r / xp.where(total > 0, total, 1.0), p64 / p64.sum(-1, keepdims=True)
    )


def residual_token(p, q, rng: np.random.Generator) -> int:
    # [V], [V] -> the token after a rejection (one uniform, one transfer)
    return int(to_host(inverse_cdf(residual_distribution(p, q), rng.random())))


def bonus_token(p_bonus, rng: np.random.Generator) -> int:
    # [V] -> the extra token after k acceptances (one uniform, one transfer)
    return int(to_host(inverse_cdf(to_device(p_bonus), rng.random())))


def decide(p_target, q_draft, draft_tokens, u):
    # p [k+1, V], q [k, V], tokens [k], u [k+1] uniforms, all on the device
    # -> int64 [2] on the device: (accepted n, token): one row of `decide_rows`
    k = to_device(np.array([draft_tokens.shape[0]]))
    return decide_rows(p_target[None], q_draft[None], draft_tokens[None], u[None], k)[0]


def decide_rows(p, q, tokens, u, k):
    # p [B, K+1, V], q [B, K, V], tokens [B, K], u [B, K+1], k [B] drafts per row, all on the
    # device -> int64 [B, 2] on the device: (accepted n, token) of every row at once.
    # The decision above on each row: positions past a row's own k_b are padding, a forced
    # stop there as at k; row b's last uniform is u[b, k_b].
    B, K = tokens.shape
    drafted = xp.arange(K)[None, :] < k[:, None]  # [B, K]
    p_x = xp.take_along_axis(p[:, :K], tokens[..., None], axis=-1)[..., 0]  # p_i(x_i)
    q_x = xp.take_along_axis(q, tokens[..., None], axis=-1)[..., 0]  # q_i(x_i); padding: 1
    a = xp.minimum(1.0, p_x / xp.where(drafted, q_x, 1))
    rejected = xp.concatenate([(u[:, :K] >= a) | ~drafted, xp.ones((B, 1), dtype=bool)], axis=1)
    n = xp.argmax(rejected, axis=1)  # [B]: first rejection, or k_b
    p_n = xp.take_along_axis(p, n[:, None, None], axis=1)[:, 0]  # [B, V]
    q_ext = xp.concatenate([q, xp.zeros_like(p[:, :1])], axis=1)  # [B, K+1, V]
    q_n = xp.take_along_axis(q_ext, n[:, None, None], axis=1)[:, 0]
    q_n = xp.where((n < k)[:, None], q_n, 0)  # q_k = 0: the bonus row is p_k itself
    u_last = xp.take_along_axis(u, k[:, None], axis=1)[:, 0]
    token = inverse_cdf(residual_distribution(p_n, q_n), u_last)
    return xp.stack([n, token], axis=1).astype(np.int64)


@fused(decide_plan)
def decide_packed(p, q, tokens, u):
    """p [k+1, V], q [k, V], drafts [k], uniforms [k+1] (all on the device) -> int64 [k + 3]
    (accepted n, token, the drafts, a finiteness flag for p and q): a round's whole verification
    and its packing for the one transfer, in one launch on a device (the kernel
    `decide_packed`, planned by gpu/device/fused.py `decide_plan`); these lines elsewhere."""
    finite = (xp.all(xp.isfinite(p)) & xp.all(xp.isfinite(q))).astype(np.int64).reshape(1)
    return xp.concatenate([decide(p, q, tokens, u), tokens.astype(np.int64), finite])


def verify_unchecked(p_target, q_draft, draft_tokens, rng: np.random.Generator) -> Verification:
    # `verify` without its checks: k+1 uniforms from rng, the decision, one transfer
    tokens = to_device(draft_tokens, dtype=np.int64)
    u = to_device(rng.random(tokens.shape[0] + 1))
    n, token = to_host(decide(to_device(p_target), to_device(q_draft), tokens, u))
    return Verification(int(n), int(token))


def verify(p_target, q_draft, draft_tokens, rng: np.random.Generator) -> Verification:
    # p_target [k+1, V], q_draft [k, V], draft_tokens [k] -> Verification(accepted, token)
    # The checks of the reference run on host copies (a public call may take that time).
    p, q, x = (to_host(a) if on_device(a) else a for a in (p_target, q_draft, draft_tokens))
    tokens = check_verify_inputs(p, q, x, rng)
    return verify_unchecked(p_target, q_draft, tokens, rng)

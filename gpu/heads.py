"""The twin's extra heads: drafts read off the target's last hidden state, on the device.

What differs from reference/heads.py, and why:
* The heads' weights are copied to the device once; the hidden state h the round hands over
  (`observe`) is the twin target's device row, kept where it is.
* The n heads' rows and their tokens are computed on the device: the n uniforms come
  from the numpy Generator in one call per round, copied over, and all n tokens are one
  `inverse_cdf` over the n rows (the reference draws them one `sample_token` at a time). The
  proposal comes back as device arrays (tokens [n], q [n, V]); nothing is copied to the host.
Same law, not the same stream: the n draws use their uniforms in one call instead of n.
The heads' format and checks, and what a head computes, are the reference's.
"""

from __future__ import annotations

import numpy as np

from gpu.device.backend import to_device, xp
from gpu.drafters import register_twin
from gpu.model import GPT, as_twin_model
from gpu.sampling import inverse_cdf, probabilities
from reference import heads as reference_heads
from reference.checks import as_token_array, check_generator, check_positive_int
from reference.drafters import Draft
from reference.heads import head_names
from reference.sampling import SamplingParams, check_sampling

__all__ = ["HeadsDrafter"]


def silu(x):  # [...] -> [...]:  x * sigmoid(x), on the device
    return x / (1.0 + xp.exp(-x))


class HeadsDrafter(reference_heads.HeadsDrafter):
    """The reference's extra heads with their weights and state on the device."""

    library_checked = True  # q from `probabilities`, each token drawn from its row

    def __init__(self, target: GPT, heads: dict[str, np.ndarray]) -> None:
        # target: a twin GPT, or a reference one (its twin: weights copied once); heads are
        # checked on the host by the reference, then copied over once
        super().__init__(as_twin_model(target), heads)
        self.w_all, self.b = to_device(self.w_all), to_device(self.b)

    def observe(self, h) -> None:
        self.h = to_device(h, np.float32)  # [C]: the twin target's row stays on the device

    def head_logits(self, h, n: int):
        # h [C] -> [n, V] on the device: heads 0..n-1, all in two products
        C = h.shape[-1]
        a = (h @ self.w_all[:, : n * C]).reshape(n, C) + self.b[:n]  # row i = h W_i + b_i
        return self.target.logits(h + silu(a))  # z_i = h + SiLU(h W_i + b_i) -> [n, V]

    def propose(
        self, context: np.ndarray, k: int, sampling: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        # context [n] (host) -> Draft(tokens [min(k, h)], q [min(k, h), V]) on the device;
        # nothing before the first observe (a one-token prompt: a plain target step)
        as_token_array(context, self.n_vocab, "context")
        k = check_positive_int(k, "k", minimum=0)
        check_sampling(sampling)
        check_generator(rng)
        n = min(k, self.n_heads) if self.h is not None else 0
        if n == 0:
            return Draft(xp.zeros(0, dtype=np.int64), xp.zeros((0, self.n_vocab), np.float32))
        u = to_device(rng.random(n))  # one host draw per round, copied over once
        q = probabilities(self.head_logits(self.h, n), sampling)  # [n, V]
        return Draft(inverse_cdf(q, u).astype(np.int64), q)  # x_{i+1} ~ q_i, all at once


def twin_of(drafter: reference_heads.HeadsDrafter) -> HeadsDrafter:
    # a reference heads drafter -> the twin with the same heads (its state comes from the
    # next run's prefill, as the reference's does)
    heads = {}
    for i in range(drafter.n_heads):
        weight, bias = head_names(i)
        heads[weight], heads[bias] = drafter.head_weight(i), drafter.b[i]
    return HeadsDrafter(drafter.target, heads)


register_twin(reference_heads.HeadsDrafter, twin_of)

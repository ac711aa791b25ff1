"""The twin's draft model: k proposals without asking the host anything.

What differs from reference/drafters.py, and why: in the reference each drafted token is a
Python int, sampled on the host and fed back as the next input. Here it stays a device
scalar: the k uniforms are drawn from the numpy Generator in one call and copied over, each
token is `inverse_cdf(q_i, u_i)` on the device and goes straight into the next forward call,
and the proposal comes back as device arrays (tokens [k], q [k, V]). The host only moves
the cache pointers, which it knows without looking (it fed them). Stopping a round early
(`min_confidence`) needs the draft's confidence on the host, so it costs one transfer per
drafted token: the twin keeps the option for parity, and the bench does not use it on a GPU.
The protocol (`Drafter`, `Draft`) and the cache discipline are the reference's.
"""

from __future__ import annotations

import weakref

import numpy as np

from gpu.backend import to_device, to_host, xp
from gpu.model import GPT, as_twin_model
from gpu.sampling import inverse_cdf, probabilities
from reference import drafters as reference_drafters
from reference.checks import as_token_array, check_generator, check_positive_int
from reference.drafters import Draft, Drafter
from reference.kv_cache import catch_up_tokens
from reference.sampling import SamplingParams, check_sampling

__all__ = ["Draft", "Drafter", "ModelDrafter"]


class ModelDrafter(reference_drafters.ModelDrafter):
    """An independent draft GPT on the device, with its own device KV cache."""

    def __init__(self, model: GPT, min_confidence: float | None = None) -> None:
        model = as_twin_model(model)  # a reference model: its weights are copied over once
        super().__init__(model, min_confidence)

    def propose(self, context, k: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        # context [n] (host) -> Draft(tokens [k], q [k, V]) on the device
        context = as_token_array(context, self.n_vocab, "context")
        k = check_positive_int(k, "k", minimum=0)
        check_sampling(sampling)
        check_generator(rng)
        if k > 0:
            self.check_room(len(context), k)
        self.cache.rollback()
        self._fed_context = self._fed_drafts = 0
        if k == 0:
            return Draft(xp.zeros(0, dtype=np.int64), xp.zeros((0, self.n_vocab), np.float32))
        u = to_device(rng.random(k))  # one host draw per round, copied over once
        new = catch_up_tokens(self.cache, context)
        logits = self.model.forward_unchecked(new, self.cache)[-1]  # [V]: q_1(. | context)
        self._fed_context = len(new)
        tokens, rows = [], []
        for i in range(k):
            if i > 0 and self.unsure(logits):
                break  # a shorter round (one transfer per step to know it)
            rows.append(probabilities(logits, sampling))
            tokens.append(inverse_cdf(rows[-1], u[i]))  # x_i ~ q_i, a device scalar
            if i < k - 1:
                logits = self.model.forward_unchecked(tokens[-1].reshape(1), self.cache)[-1]
                self._fed_drafts += 1
        return Draft(xp.stack(tokens).astype(np.int64), xp.stack(rows))

    def unsure(self, logits) -> bool:
        if self.min_confidence is None:
            return False
        top = 1.0 / float(to_host(xp.exp(logits - logits.max()).sum()))
        return top < self.min_confidence


def as_twin_drafter(drafter):
    """The twin of a reference ModelDrafter (its model on the device, same min_confidence),
    or the drafter itself: the twin's own, or any other Drafter, used on the host."""
    if type(drafter) is not reference_drafters.ModelDrafter:
        return drafter
    if drafter not in _twin_drafters:  # its state is reset by every run's prefill
        _twin_drafters[drafter] = ModelDrafter(drafter.model, drafter.min_confidence)
    return _twin_drafters[drafter]


# reference drafter -> its twin; weak keys, so a twin lives as long as its drafter
_twin_drafters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

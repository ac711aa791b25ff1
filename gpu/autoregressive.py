"""The twin's baseline: one target step per token, the token sampled on the device.

What differs from reference/autoregressive.py, and why: the processed distribution and the
draw stay on the device (one uniform from the numpy Generator per token, passed to the
kernel as an argument: gpu/sampling.py `pick` draws and flags non-finite logits in one
launch); the token itself must come back every step, since the host decides on EOS and
feeds it to the next call: one device -> host transfer per generated token, the floor
speculative decoding divides by the tokens per round.
"""

from __future__ import annotations

import numpy as np

from gpu.device.backend import to_host, xp
from gpu.model import GPT, as_twin_model
from gpu.sampling import pick
from reference.autoregressive import check_generate_inputs
from reference.sampling import SamplingParams

__all__ = ["generate"]


def generate(
    model: GPT,
    prompt,
    *,
    max_new_tokens: int,
    rng: np.random.Generator,
    sampling: SamplingParams = SamplingParams(),
    eos_id: int | None = None,
    clock=None,
) -> list[int]:
    # prompt [n] -> new tokens [<= max_new_tokens]; stops after emitting eos_id
    model = as_twin_model(model)
    prompt, max_new_tokens, eos_id, clock = check_generate_inputs(
        model, prompt, max_new_tokens, rng, sampling, eos_id, clock
    )
    clock.restart()

    cache = model.new_cache()
    logits = model.forward_unchecked(prompt, cache)[-1:]  # [1, V]
    cache.commit(len(prompt))
    clock.mark("prefill")
    out: list[int] = []
    while True:
        picked = xp.empty(2, dtype=np.int64)  # (token, 1 if the logits are finite): one launch
        pick(logits, sampling, rng.random(), tokens=picked[:1], finite=picked[1:])
        token_id, ok = (int(x) for x in to_host(picked))
        if not ok:
            raise ValueError("logits contains NaN or inf; it must be finite (a broken model?)")
        out.append(token_id)
        clock.mark("sample")
        if token_id == eos_id or len(out) == max_new_tokens:
            return out
        logits = model.forward_unchecked(picked[:1], cache)  # the token, still on the device
        cache.commit(1)
        clock.mark("target")

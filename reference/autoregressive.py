"""The baseline: one target forward per generated token, with a KV cache."""

from __future__ import annotations

import numpy as np

from reference.checks import (
    as_token_array,
    check_clock,
    check_generator,
    check_number,
    check_positive_int,
)
from reference.model import GPT
from reference.sampling import SamplingParams, check_sampling, probabilities, sample_token


def check_eos(eos_id, n_vocab: int) -> int | None:
    return check_number(
        eos_id,
        "eos_id",
        integer=True,
        optional=True,
        allowed=lambda e: 0 <= e < n_vocab,
        where=f"in 0..{n_vocab - 1} or None",
    )


def check_length_budget(prompt_len: int, max_new_tokens: int, n_ctx: int, who: str) -> None:
    if prompt_len + max_new_tokens > n_ctx:
        raise ValueError(
            f"prompt ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
            f"{who}'s context of {n_ctx} positions; shorten the prompt or lower max_new_tokens"
        )


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
    # prompt [n] -> new tokens [<= max_new_tokens]; stops after emitting eos_id.
    # `clock` (e.g. specdec.timing.StageClock) is charged "prefill", then "sample" and
    # "target" per token.
    prompt, max_new_tokens, eos_id, clock = check_generate_inputs(
        model, prompt, max_new_tokens, rng, sampling, eos_id, clock
    )
    clock.restart()

    cache = model.new_cache()
    # the checks above cover every call below: the prompt, and room for every new token
    logits = model.forward_unchecked(prompt, cache)[-1]  # prefill; row -1: the 1st new token
    cache.commit(len(prompt))
    clock.mark("prefill")
    out: list[int] = []
    while True:
        token = sample_token(probabilities(logits, sampling), rng)
        out.append(token)
        clock.mark("sample")
        if token == eos_id or len(out) == max_new_tokens:
            return out
        logits = model.forward_unchecked(np.array([token]), cache)[-1]
        cache.commit(1)
        clock.mark("target")


def check_generate_inputs(model, prompt, max_new_tokens, rng, sampling, eos_id, clock):
    # every check of `generate`, before anything is written
    # -> (prompt [n] int64, max_new_tokens, eos_id, clock)
    prompt = as_token_array(prompt, model.n_vocab, "prompt")
    max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens")
    check_generator(rng)
    check_sampling(sampling)
    eos_id = check_eos(eos_id, model.n_vocab)
    check_length_budget(len(prompt), max_new_tokens, model.config.n_ctx, "model")
    return prompt, max_new_tokens, eos_id, check_clock(clock)

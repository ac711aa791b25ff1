"""A speculative loop written the way transformers-based tutorials write one, graded unchanged.

The loop (`speculative_generate_hf`) speaks transformers: models are called as
`model(input_ids).logits` on a [1, T] LongTensor and give [1, T, V] logits; distributions
come from `torch.softmax`; tokens from `torch.multinomial` with a `torch.Generator`. Nothing
in it knows about the grader.

The grader (`specdec grade FILE:speculative_sample`, docs/oracle.md, "Grading a loop written
against another library") hands out two next-token callables instead of models:
target_next(tokens) -> [V] float64 probabilities of the next token. The adapter
(`CallableLM`) wraps one as a transformers-style causal LM: its forward(input_ids) returns an
object with .logits [1, T, V], whose row t is log p(. | input_ids[0, :t+1]) -- the
log-probabilities of the callable, for every position, so softmax gives back the row
exactly (a zero probability becomes -inf, and softmax gives it 0 again). Rows are memoised
per context: the memo plays the KV cache, so a loop that re-reads the whole sequence each
round (no cache, like many tutorials) still asks the callable for each position once.

Grade it from the repository root (torch needed: pip install -e '.[dev]'):

    .venv/bin/specdec grade examples/transformers_style_loop.py:speculative_sample

Two things the adapter must get right, and why:

* temperature 1 in the loop: the grader's rows already carry the case's temperature and top-k,
  so softmax(log p / 1) = p. A temperature in the loop would apply it twice.
* randomness from the grader's rng: the torch.Generator is seeded from it once per run, so
  runs are independent and a graded run can be replayed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import torch

# --------------------------------------------------------------------------------------------
# The loop, as a transformers tutorial writes it (p = target, q = draft)
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def speculative_generate_hf(
    target,
    draft,
    input_ids: torch.Tensor,
    *,
    k: int,
    max_new_tokens: int,
    generator: torch.Generator,
    eos_token_id: int | None = None,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, list[int]]:
    # input_ids [1, n] -> (input_ids [1, n + generated], drafts kept per round)
    n_prompt, accepted_per_round = input_ids.shape[1], []
    while True:
        remaining = max_new_tokens - (input_ids.shape[1] - n_prompt)
        k_round = min(k, remaining - 1)  # never draft what could not be emitted

        # 1. draft k_round tokens, one draft forward each: x_i ~ q_i
        draft_ids, q = input_ids, []
        for _ in range(k_round):
            logits = draft(draft_ids).logits[:, -1, :]  # [1, V]
            q.append(torch.softmax(logits / temperature, dim=-1))
            x = torch.multinomial(q[-1], 1, generator=generator)  # [1, 1]
            draft_ids = torch.cat([draft_ids, x], dim=-1)
        drafts = draft_ids[0, input_ids.shape[1] :]  # [k_round]

        # 2. one target forward over the context and the drafts: the last k+1 rows
        logits = target(draft_ids).logits[0, -(k_round + 1) :, :]  # [k_round + 1, V]
        p = torch.softmax(logits / temperature, dim=-1)

        # 3. keep x_i with probability min(1, p_i(x_i) / q_i(x_i)), in order
        n = 0
        while n < k_round:
            x = drafts[n]
            ratio = p[n, x] / q[n][0, x]
            if torch.rand(1, generator=generator, dtype=p.dtype) >= ratio:
                break
            n += 1
        if n < k_round:  # rejected: the residual norm(max(0, p - q))
            residual = torch.clamp(p[n] - q[n][0], min=0)
            row = residual / residual.sum() if residual.sum() > 0 else p[n]
        else:  # every draft kept: the bonus token from the last row
            row = p[k_round]
        token = torch.multinomial(row, 1, generator=generator)  # [1]

        # 4. append the kept drafts and the new token; stop at EOS or the limit
        new = torch.cat([drafts[:n], token])[:remaining]
        if eos_token_id is not None and (new == eos_token_id).any():
            new = new[: int((new == eos_token_id).nonzero()[0]) + 1]
        input_ids = torch.cat([input_ids, new[None, :]], dim=-1)
        accepted_per_round.append(n)
        if input_ids.shape[1] - n_prompt >= max_new_tokens or new[-1] == eos_token_id:
            return input_ids, accepted_per_round


# --------------------------------------------------------------------------------------------
# The adapter: a next-token callable as a transformers-style causal LM
# --------------------------------------------------------------------------------------------


class CallableLM:
    """next_token(tokens) -> [V] probabilities, seen as model(input_ids).logits [1, T, V]."""

    def __init__(self, next_token) -> None:
        self.next_token = next_token
        self.memo: dict[tuple[int, ...], torch.Tensor] = {}  # context -> log p [V]

    def row(self, context: tuple[int, ...]) -> torch.Tensor:
        # context -> [V] log p(. | context); each context asked of the callable once
        if context not in self.memo:
            probs = np.asarray(self.next_token(list(context)), dtype=np.float64)
            self.memo[context] = torch.log(torch.from_numpy(probs))  # log 0 = -inf: fine
        return self.memo[context]

    def __call__(self, input_ids: torch.Tensor) -> SimpleNamespace:
        # input_ids [1, T] -> .logits [1, T, V]: row t scores the token after input_ids[0, t]
        ids = tuple(input_ids[0].tolist())
        rows = [self.row(ids[: t + 1]) for t in range(len(ids))]
        return SimpleNamespace(logits=torch.stack(rows)[None])


# --------------------------------------------------------------------------------------------
# The grader's contract, around the unchanged loop
# --------------------------------------------------------------------------------------------


@dataclass
class Sampled:
    tokens: list[int] = field(default_factory=list)  # the generated ids, prompt excluded
    accepted_per_round: list[int] = field(default_factory=list)  # drafts kept, per round


def speculative_sample(
    target_next,
    draft_next,
    prompt,
    *,
    k: int,
    max_new_tokens: int,
    rng: np.random.Generator,
    eos_id: int | None = None,
) -> Sampled:
    # prompt [n] ids -> Sampled(tokens [<= max_new_tokens], accepted_per_round)
    generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
    input_ids = torch.tensor([list(prompt)], dtype=torch.long)  # [1, n]
    out, accepted = speculative_generate_hf(
        CallableLM(target_next),
        CallableLM(draft_next),
        input_ids,
        k=k,
        max_new_tokens=max_new_tokens,
        generator=generator,
        eos_token_id=eos_id,
    )
    return Sampled(out[0, len(prompt) :].tolist(), accepted)

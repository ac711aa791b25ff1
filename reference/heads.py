"""Medusa-style extra heads: drafts read off the target's own last hidden state.

After a round, the target has sampled token t from the row whose final hidden state is h
(h sits at the position just before t). The output layer read h to score t; head i reads
the same h to guess the token i+1 places after t, i.e. i+2 places after h's position:

    z_i = h + SiLU(h W_i + b_i)                  a residual block per head   W_i [C, C]
    q_i = softmax(z_i @ wte^T)  (sampling transform applied)    the target's output layer

Drafting costs no target forward: the round's verification pass already produced h
(`observe(h)`, called by the round and by prefill). Draft x_{i+1} is sampled from q_i (or
is its argmax at greedy) and q_i is the row handed to `verify`: q_i depends only on
committed tokens, so the output law is exactly the target's whatever the heads learned.
Heads are trained on the frozen target (specdec/training/train_heads.py) and shipped small.
Nothing here is GPT-2's: h is what the target's output layer reads (after its final norm), and
the scores come from `target.logits`: the same code drafts for a Llama-family target (its
lm_head, tied or not), and the training script takes either family.
"""

from __future__ import annotations

import numpy as np

from reference.checks import as_token_array, check_generator, check_positive_int
from reference.drafters import Draft, Drafter
from reference.model import GPT
from reference.sampling import SamplingParams, check_sampling, probabilities, sample_token


def silu(x: np.ndarray) -> np.ndarray:  # [...] -> [...]:  x * sigmoid(x)
    return x / (1.0 + np.exp(-x))


def head_names(i: int) -> tuple[str, str]:
    return f"heads.{i}.weight", f"heads.{i}.bias"


def check_heads(heads, n_embd: int) -> tuple[np.ndarray, np.ndarray]:
    # {"heads.i.weight" [C, C], "heads.i.bias" [C]} for i = 0..h-1 -> (W [h, C, C], b [h, C])
    if not isinstance(heads, dict) or not heads:
        raise ValueError("heads must be a non-empty dict of arrays 'heads.{i}.weight' / '.bias'")
    n = len(heads) // 2
    expected = {name for i in range(n) for name in head_names(i)}
    if set(heads) != expected or len(heads) % 2:
        raise ValueError(
            f"heads must be named heads.0.weight, heads.0.bias, ..., heads.{n - 1}.bias with "
            f"no gap; got {sorted(heads)}"
        )
    w = np.stack([np.asarray(heads[head_names(i)[0]], np.float32) for i in range(n)])
    b = np.stack([np.asarray(heads[head_names(i)[1]], np.float32) for i in range(n)])
    if w.shape != (n, n_embd, n_embd) or b.shape != (n, n_embd):
        raise ValueError(
            f"each head needs weight [{n_embd}, {n_embd}] and bias [{n_embd}] (the target's "
            f"width); got {w.shape[1:]} and {b.shape[1:]}"
        )
    if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
        raise ValueError("the heads hold non-finite values")
    return w, b


class HeadsDrafter(Drafter):
    """h extra heads on the target's last hidden state; drafts up to h tokens per round."""

    library_checked = True  # q from `probabilities`, each token sampled from its row

    def __init__(self, target: GPT, heads: dict[str, np.ndarray]) -> None:
        self.target = target
        w, self.b = check_heads(heads, target.config.n_embd)  # [h, C, C], [h, C]
        # W_i side by side, [C, h*C]: the first n heads are one product with its first n*C
        # columns (one pass over the weights instead of n)
        self.w_all = np.ascontiguousarray(w.transpose(1, 0, 2).reshape(w.shape[1], -1))
        self.h: np.ndarray | None = None  # [C] the target's state after the last round

    @property
    def n_heads(self) -> int:
        return self.b.shape[0]

    def head_weight(self, i: int) -> np.ndarray:  # -> W_i [C, C] (a view)
        C = self.b.shape[1]
        return self.w_all[:, i * C : (i + 1) * C]

    @property
    def n_vocab(self) -> int:
        return self.target.n_vocab

    @property
    def n_ctx(self) -> int:
        return self.target.config.n_ctx

    def reset(self) -> None:
        self.h = None

    def prefill(self, tokens) -> None:
        pass  # nothing to precompute: the target's prefill hands over h through observe

    def observe(self, h: np.ndarray) -> None:
        self.h = np.asarray(h, dtype=np.float32)  # [C]

    def head_logits(self, h: np.ndarray, n: int) -> np.ndarray:
        # h [C] -> [n, V]: heads 0..n-1, all in two products
        C = h.shape[-1]
        a = (h @ self.w_all[:, : n * C]).reshape(n, C) + self.b[:n]  # [n, C]: row i = h W_i + b_i
        return self.target.logits(h + silu(a))  # z_i = h + SiLU(h W_i + b_i) -> [n, V]

    def propose(
        self, context: np.ndarray, k: int, sampling: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        # context [n] -> Draft(tokens [min(k, h)], q [min(k, h), V]); nothing before the
        # first observe (a one-token prompt: the round is then a plain target step)
        as_token_array(context, self.n_vocab, "context")
        k = check_positive_int(k, "k", minimum=0)
        check_sampling(sampling)
        check_generator(rng)
        n = min(k, self.n_heads) if self.h is not None else 0
        q = (
            probabilities(self.head_logits(self.h, n), sampling)
            if n
            else np.zeros((0, self.n_vocab), np.float32)
        )
        tokens = np.array([sample_token(q_i, rng) for q_i in q], dtype=np.int64)  # x_{i+1} ~ q_i
        return Draft(tokens, q)

    def commit(self, n_accepted: int) -> None:
        pass  # no cache: the next state arrives through observe

    def rollback(self) -> None:
        pass

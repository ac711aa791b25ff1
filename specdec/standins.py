"""Untrained stand-ins for the bundled pair: a random target and a draft that is the
target plus noise, so that drafts are accepted often but not always. Used where no trained
pair is on disk, and by tests that need a pair with a known relation."""

from __future__ import annotations

import numpy as np

from reference.config import GPTConfig
from reference.model import GPT, init_params
from reference.tokenizer import VOCAB_SIZE


def noisy_copy(model: GPT, noise: float, seed: int) -> GPT:
    """The same model with N(0, noise^2) added to every weight matrix (norm gains and biases
    kept): a draft that agrees with the target often, not always. Either family: the copy is
    of the model's own class (GPT or reference.llama.Llama)."""
    rng = np.random.default_rng(seed)
    params = {
        name: (w + noise * rng.standard_normal(w.shape)).astype(np.float32) if w.ndim == 2 else w
        for name, w in sorted(model.params.items())
    }
    return type(model)(model.config, params)


def random_pair(seed: int) -> tuple[GPT, GPT]:
    """(target, draft): a byte-level random GPT and its noisy copy. Untrained: its text is
    noise, but every mechanism (drafting, verification, caches) works on it."""
    cfg = GPTConfig(n_vocab=VOCAB_SIZE, n_ctx=512, n_embd=128, n_head=4, n_layer=4)
    target = GPT(cfg, init_params(cfg, np.random.default_rng(seed), std=0.1))
    return target, noisy_copy(target, noise=0.02, seed=seed + 1)


def random_exit_head(n_embd: int, seed: int, scale: float = 0.2) -> dict[str, np.ndarray]:
    """An exit head for reference/early_exit.py as training could leave it: a LayerNorm
    near the identity and a small residual adapter (names as the drafter reads them)."""
    rng = np.random.default_rng(seed)
    C = n_embd
    return {
        "exit.ln.weight": (1.0 + scale * rng.standard_normal(C)).astype(np.float32),
        "exit.ln.bias": (scale * rng.standard_normal(C)).astype(np.float32),
        "exit.proj.weight": (scale * rng.standard_normal((C, C)) / np.sqrt(C)).astype(np.float32),
        "exit.proj.bias": (scale * rng.standard_normal(C)).astype(np.float32),
    }


def random_heads(n_embd: int, n_heads: int, seed: int, scale: float = 0.3) -> dict[str, np.ndarray]:
    """Extra heads for reference/heads.py: residual blocks with random weights."""
    rng = np.random.default_rng(seed)
    C, heads = n_embd, {}
    for i in range(n_heads):
        heads[f"heads.{i}.weight"] = (scale * rng.standard_normal((C, C)) / np.sqrt(C)).astype(
            np.float32
        )
        heads[f"heads.{i}.bias"] = (scale * rng.standard_normal(C)).astype(np.float32)
    return heads

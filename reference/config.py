"""Model configuration and the dimension letters used in every shape comment.

Dimension letters (defined once, reused in every shape comment of the project):
    T   new positions fed to the model in one call (1 for decode, k+1 for verification)
    S   positions attended to: cached + new (S = start + T)
    C   embedding width, n_embd
    nh  number of attention heads, n_head
    hs  head size, C // nh
    L   number of transformer blocks, n_layer
    V   vocabulary size, n_vocab
    N   slots preallocated in a KV cache (its capacity), at most n_ctx
    k   number of drafted tokens per speculative round
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class GPTConfig:
    n_vocab: int  # V: number of token ids the model scores
    n_ctx: int  # longest sequence the learned position table covers
    n_embd: int  # C: width of the residual stream
    n_head: int  # nh: attention heads; C must be divisible by it
    n_layer: int  # L: transformer blocks
    layer_norm_epsilon: float = 1e-5  # GPT-2's LayerNorm epsilon

    def __post_init__(self) -> None:
        for name in ("n_vocab", "n_ctx", "n_embd", "n_head", "n_layer"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"GPTConfig.{name} must be a positive int, got {value!r}")
        eps = self.layer_norm_epsilon
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps < math.inf:
            # NaN fails 0 < eps too; a zero epsilon divides by zero on a constant row
            raise ValueError(
                f"GPTConfig.layer_norm_epsilon must be a positive finite number, got {eps!r}"
            )
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"GPTConfig.n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})"
            )

    @property
    def head_size(self) -> int:  # hs
        return self.n_embd // self.n_head

    def to_hf_dict(self) -> dict:
        """The keys a Hugging Face GPT-2 config.json uses."""
        return {
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
            "vocab_size": self.n_vocab,
            "n_positions": self.n_ctx,
            "n_embd": self.n_embd,
            "n_head": self.n_head,
            "n_layer": self.n_layer,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "activation_function": "gelu_new",
        }

    @classmethod
    def from_hf_dict(cls, d: dict) -> GPTConfig:
        """Read a Hugging Face GPT-2 config.json dictionary."""
        return cls(
            n_vocab=d["vocab_size"],
            n_ctx=d["n_positions"],
            n_embd=d["n_embd"],
            n_head=d["n_head"],
            n_layer=d["n_layer"],
            layer_norm_epsilon=d.get("layer_norm_epsilon", 1e-5),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

"""Model configuration and the dimension letters used in every shape comment.

Dimension letters (defined once, reused in every shape comment of the project):
    T   new positions fed to the model in one call (1 for decode, k+1 for verification)
    S   positions attended to: cached + new (S = start + T)
    C   embedding width, n_embd
    nh  number of attention heads, n_head
    nkv key/value heads, n_kv_head: nh for GPT-2; fewer for grouped-query attention (Llama)
    hs  head size, C // nh (a Llama config may set it apart: head_dim)
    I   width of the MLP's hidden layer, n_inner (4C for GPT-2)
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

    @property
    def n_kv_head(self) -> int:  # nkv: every GPT-2 head has its own keys and values
        # asked by the code both families share (the cache's shape), so it asks no family
        return self.n_head

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


# ----------------------------------------------------------------------------- the Llama family

LLAMA_TYPES = ("llama", "qwen2", "mistral")  # the model_type values LlamaConfig implements
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "mistral": "MistralForCausalLM",
}


@dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama 3.1's stretch of RoPE to a longer context (config.json's rope_scaling, type "llama3").

    Slow rotations (wavelength above original / low_freq_factor) turn `factor` times slower,
    fast ones (below original / high_freq_factor) are kept, the ones between are blended."""

    factor: float  # how much slower the slow rotations turn (8 for Llama 3.1)
    low_freq_factor: float  # 1 for Llama 3.1
    high_freq_factor: float  # 4 for Llama 3.1; must exceed low_freq_factor
    original_max_position_embeddings: int  # the context length of pre-training (8192)

    def __post_init__(self) -> None:
        for name in ("factor", "low_freq_factor", "high_freq_factor"):
            check_positive_number(f"rope_scaling.{name}", getattr(self, name))
        check_positive_int(
            "rope_scaling.original_max_position_embeddings", self.original_max_position_embeddings
        )
        if not self.low_freq_factor < self.high_freq_factor:
            raise ValueError(
                f"rope_scaling.low_freq_factor ({self.low_freq_factor}) must be below "
                f"high_freq_factor ({self.high_freq_factor}): the blend divides by their difference"
            )

    def to_hf_dict(self) -> dict:
        return {"rope_type": "llama3"} | asdict(self)


@dataclass(frozen=True)
class LlamaConfig:
    """Llama-family decoders: Llama 2 and 3, Qwen2 (q/k/v biases), Mistral (full attention).

    Shared fields have GPTConfig's names, so the code both families run asks either config
    the same questions (n_vocab, n_ctx, n_embd, n_head, n_layer, head_size, n_kv_head).
    The fields left None are filled in by __post_init__ (as Hugging Face does)."""

    n_vocab: int  # V: vocab_size
    n_ctx: int  # max_position_embeddings: the longest sequence (no position table: RoPE)
    n_embd: int  # C: hidden_size
    n_head: int  # nh: num_attention_heads (query heads)
    n_layer: int  # L: num_hidden_layers
    n_kv_head: int | None = None  # nkv: num_key_value_heads; divides nh. None: nh (no GQA)
    n_inner: int | None = None  # I: intermediate_size, the SwiGLU width. None: 4C
    rms_norm_eps: float = 1e-6  # RMSNorm's epsilon
    rope_theta: float = 10_000.0  # RoPE's base: pair j of a head turns by pos * theta^(-2j/hs)
    rope_scaling: Llama3RopeScaling | None = None  # Llama 3.1's long-context stretch, or none
    tie_word_embeddings: bool = False  # output layer = the token embedding (no lm_head.weight)
    attention_bias: bool | None = None  # q/k/v biases (o_proj never). None: qwen2 has them
    head_dim: int | None = None  # hs: each head's width. None: C // nh
    model_type: str = "llama"  # "llama" | "qwen2" | "mistral": what config.json says

    def __post_init__(self) -> None:
        if self.model_type not in LLAMA_TYPES:
            raise ValueError(
                f"LlamaConfig.model_type must be one of {LLAMA_TYPES}, got {self.model_type!r}"
            )
        for name in ("n_vocab", "n_ctx", "n_embd", "n_head", "n_layer"):
            check_positive_int(f"LlamaConfig.{name}", getattr(self, name))
        if self.head_dim is None and self.n_embd % self.n_head != 0:
            raise ValueError(
                f"LlamaConfig.n_embd ({self.n_embd}) must be divisible by n_head "
                f"({self.n_head}), or head_dim given"
            )
        # a frozen dataclass: the defaults that depend on other fields are set this way
        defaults = {
            "n_kv_head": self.n_head,
            "n_inner": 4 * self.n_embd,
            "head_dim": self.n_embd // self.n_head,
            "attention_bias": self.model_type == "qwen2",
        }
        for name, value in defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        for name in ("n_kv_head", "n_inner", "head_dim"):
            check_positive_int(f"LlamaConfig.{name}", getattr(self, name))
        if self.n_head % self.n_kv_head != 0:
            raise ValueError(
                f"LlamaConfig.n_head ({self.n_head}) must be divisible by n_kv_head "
                f"({self.n_kv_head}): each key/value head serves a whole group of query heads"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(
                f"LlamaConfig.head_dim must be even (RoPE turns pairs of features), got "
                f"{self.head_dim}"
            )
        check_positive_number("LlamaConfig.rms_norm_eps", self.rms_norm_eps)
        check_positive_number("LlamaConfig.rope_theta", self.rope_theta)
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, Llama3RopeScaling):
            raise ValueError(
                f"LlamaConfig.rope_scaling must be None or a Llama3RopeScaling, got "
                f"{self.rope_scaling!r}"
            )
        for name in ("tie_word_embeddings", "attention_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"LlamaConfig.{name} must be a bool, got {getattr(self, name)!r}")
        if self.attention_bias != (self.model_type == "qwen2"):
            # Qwen2 always has q/k/v biases; Mistral never; Llama's attention_bias would put
            # one on o_proj as well, which this code does not implement
            raise ValueError(
                f"LlamaConfig.attention_bias must be {self.model_type == 'qwen2'} for model_type "
                f"{self.model_type!r} (q/k/v biases are Qwen2's), got {self.attention_bias}"
            )

    @property
    def head_size(self) -> int:  # hs
        return self.head_dim

    def to_hf_dict(self) -> dict:
        """A Hugging Face config.json dictionary for this model_type (from_hf_dict reads it back).

        RoPE is written both ways transformers has used: rope_theta and rope_scaling (before
        v5) and rope_parameters (v5 on)."""
        rope = {"rope_type": "default", "rope_theta": self.rope_theta}
        if self.rope_scaling is not None:
            rope |= self.rope_scaling.to_hf_dict()
        d = {
            "model_type": self.model_type,
            "architectures": [ARCHITECTURES[self.model_type]],
            "vocab_size": self.n_vocab,
            "max_position_embeddings": self.n_ctx,
            "hidden_size": self.n_embd,
            "num_attention_heads": self.n_head,
            "num_key_value_heads": self.n_kv_head,
            "num_hidden_layers": self.n_layer,
            "intermediate_size": self.n_inner,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": None if self.rope_scaling is None else self.rope_scaling.to_hf_dict(),
            "rope_parameters": rope,
            "tie_word_embeddings": self.tie_word_embeddings,
        }
        if self.model_type == "llama":
            d |= {"attention_bias": False, "mlp_bias": False}
        elif self.model_type == "qwen2":
            d |= {"use_sliding_window": False, "sliding_window": None}
        else:
            d |= {"sliding_window": None}
        return d

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_hf_dict(cls, d: dict) -> LlamaConfig:
        """Read a Hugging Face config.json dictionary of model_type llama, qwen2 or mistral.

        What this code does not implement is refused by name, never silently run wrong."""
        model_type = d.get("model_type")
        if model_type not in LLAMA_TYPES:
            raise ValueError(
                f"config.json model_type {model_type!r} is not one this code implements: "
                f"{', '.join(LLAMA_TYPES)} (or gpt2, through GPTConfig)"
            )
        refuse_unimplemented(d, model_type)
        missing = [key for key in LLAMA_REQUIRED_KEYS if key not in d]
        if missing:
            raise ValueError(f"config.json of a {model_type} model lacks {missing}")
        rope = rope_dict(d)
        return cls(
            n_vocab=d["vocab_size"],
            n_ctx=d["max_position_embeddings"],
            n_embd=d["hidden_size"],
            n_head=d["num_attention_heads"],
            n_layer=d["num_hidden_layers"],
            n_kv_head=d.get("num_key_value_heads"),
            n_inner=d["intermediate_size"],
            rms_norm_eps=d.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", d.get("rope_theta", 10_000.0)),
            rope_scaling=rope_scaling_of(rope, d["max_position_embeddings"]),
            tie_word_embeddings=d.get("tie_word_embeddings", False),  # False in all three
            attention_bias=model_type == "qwen2",  # llama's true is refused above
            head_dim=d.get("head_dim"),
            model_type=model_type,
        )


LLAMA_REQUIRED_KEYS = (
    "vocab_size",
    "max_position_embeddings",
    "hidden_size",
    "num_attention_heads",
    "num_hidden_layers",
    "intermediate_size",
)


def refuse_unimplemented(d: dict, model_type: str) -> None:
    # a config.json key that would change the computation in a way this code does not follow
    act = d.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"config.json hidden_act {act!r} is not implemented (only silu)")
    # Mistral's sliding_window defaults to 4096 in transformers when the key is absent
    window = d.get("sliding_window", 4096) if model_type == "mistral" else None
    if model_type == "qwen2" and d.get("use_sliding_window", False):
        window = d.get("sliding_window")
    if window is not None or "sliding_attention" in (d.get("layer_types") or ()):
        raise ValueError(
            f"config.json asks for sliding-window attention (sliding_window={window}), which "
            f"this code does not implement: only full attention"
        )
    if model_type == "llama" and d.get("attention_bias", False):
        raise ValueError(
            "config.json attention_bias=true (a Llama with biases on q/k/v and o_proj) is not "
            "implemented: only Qwen2's q/k/v biases"
        )
    if d.get("rope_interleaved", False):  # SmolLM2's configs say false; true pairs 2j, 2j+1
        raise ValueError(
            "config.json rope_interleaved=true (RoPE on adjacent feature pairs) is not "
            "implemented: only Hugging Face's rotate-half pairs (j, j + head_dim/2)"
        )
    if d.get("mlp_bias", False):
        raise ValueError("config.json mlp_bias=true is not implemented (MLP layers without bias)")
    rope = rope_dict(d)
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ("default", "llama3"):
        raise ValueError(
            f"config.json rope scaling type {kind!r} is not implemented (only none or llama3)"
        )
    partial = rope.get("partial_rotary_factor", d.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        raise ValueError(
            f"config.json partial_rotary_factor {partial} is not implemented (RoPE on every "
            f"feature of a head)"
        )


def rope_dict(d: dict) -> dict:
    # config.json's RoPE settings as one dict: transformers v5 writes rope_parameters, earlier
    # versions rope_theta beside rope_scaling (None when there is no scaling)
    rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
    if not isinstance(rope, dict) or any(isinstance(v, dict) for v in rope.values()):
        raise ValueError(
            f"config.json RoPE settings must be one flat dict (not one per layer type), got "
            f"{rope!r}"
        )
    return rope


def rope_scaling_of(rope: dict, n_ctx: int) -> Llama3RopeScaling | None:
    # rope_dict's result -> the llama3 scaling it names, or None (without an original context
    # length, transformers takes max_position_embeddings: so do we)
    if rope.get("rope_type", rope.get("type", "default")) != "llama3":
        return None
    missing = [k for k in ("factor", "low_freq_factor", "high_freq_factor") if k not in rope]
    if missing:
        raise ValueError(f"config.json llama3 rope scaling lacks {missing}")
    return Llama3RopeScaling(
        factor=rope["factor"],
        low_freq_factor=rope["low_freq_factor"],
        high_freq_factor=rope["high_freq_factor"],
        original_max_position_embeddings=rope.get("original_max_position_embeddings", n_ctx),
    )


def check_positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def check_positive_number(name: str, value) -> None:
    # NaN fails 0 < value too
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")

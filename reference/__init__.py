"""specdec-lab reference: speculative decoding in pure NumPy.

Notation used everywhere (Leviathan et al., 2023):
    p = target model's distribution, q = draft model's distribution,
    k = number of drafted tokens per round.
Accept a draft token x with probability min(1, p(x) / q(x)); on rejection resample
from norm(max(0, p - q)); when all k drafts are accepted, sample a bonus token from
the target's row k.
"""

from reference.autoregressive import generate
from reference.batch import (
    BatchKVCache,
    batched_forward,
    batched_round,
    batched_verification_pass,
    new_batch_cache,
    speculative_generate_batch,
)
from reference.config import GPTConfig, LlamaConfig
from reference.drafters import Draft, Drafter, ModelDrafter
from reference.eagle import EagleDrafter
from reference.early_exit import EarlyExitDrafter
from reference.heads import HeadsDrafter
from reference.kv_cache import KVCache, catch_up_tokens
from reference.llama import Llama, init_llama_params
from reference.lookup import HybridDrafter, LookupDrafter
from reference.model import GPT, init_params
from reference.sampling import SamplingParams, probabilities, sample_token
from reference.speculative import (
    Round,
    RoundTrace,
    SpeculativeResult,
    SpeculativeStats,
    speculative_generate,
    speculative_round,
    verification_pass,
)
from reference.tree import EagleTreeDrafter
from reference.verification import (
    Verification,
    acceptance_probability,
    accepts,
    bonus_token,
    residual_distribution,
    residual_token,
    verify,
)

__all__ = [
    "GPT",
    "BatchKVCache",
    "Draft",
    "Drafter",
    "GPTConfig",
    "EarlyExitDrafter",
    "EagleDrafter",
    "EagleTreeDrafter",
    "HeadsDrafter",
    "HybridDrafter",
    "KVCache",
    "Llama",
    "LlamaConfig",
    "LookupDrafter",
    "ModelDrafter",
    "Round",
    "RoundTrace",
    "SamplingParams",
    "SpeculativeResult",
    "SpeculativeStats",
    "Verification",
    "acceptance_probability",
    "accepts",
    "batched_forward",
    "batched_round",
    "batched_verification_pass",
    "bonus_token",
    "catch_up_tokens",
    "generate",
    "init_llama_params",
    "init_params",
    "new_batch_cache",
    "probabilities",
    "residual_distribution",
    "residual_token",
    "sample_token",
    "speculative_generate",
    "speculative_generate_batch",
    "speculative_round",
    "verification_pass",
    "verify",
]

"""specdec-lab's GPU twin: the core of `reference/` in CuPy, with the same public names.

    import gpu                        # instead of `import reference`
    target = gpu.GPT(config, params)  # the same constructor; the weights go to the device

Every public name of `reference` is here with the same signature (tests/twin checks it).
Both families: `gpu.GPT` (GPT-2, gpu/model.py) and `gpu.Llama` (Llama 2 and 3, Qwen2,
Mistral: gpu/llama.py); `gpu.weights.load_model` reads a checkpoint folder of either.
Where the GPU changes the algorithm (where data lives, where the host waits, what is fused)
a file of its own mirrors the reference file and says, at its top, what differs and why;
everything that is host work (config, tokenizer, checkpoint reading, sampling parameters,
result types, input checks) is the reference's own code, imported, not copied.

Layout: every module at this level has a namesake in reference/ (gpu/tree.py mirrors the
package reference/tree/); what only a device needs, and the reference has no file for, is
in `gpu.device` -- the array module and the two doors between the memories (backend), the
counting stand-in for a device (counting), the CUDA kernels (kernels.cu, kernels, fused),
the layer functions with `xp` (layers) and the batch's one-pass drafting (batch_drafting).
tests/twin/test_layout.py holds the mirror; tests/unit/test_imports.py holds that no import
runs in a circle or hides inside a function.

Every drafter runs on the twin: the draft model, early exit (`gpu.EarlyExitDrafter`: the
verification pass starts the drafted rows at the exit layer), extra heads
(`gpu.HeadsDrafter`) and EAGLE (`gpu.EagleDrafter`: every loop hands it the target's
pre-norm features of the kept positions, device rows) draft on the device; prompt lookup
(`LookupDrafter`, the reference's own) drafts on the host and its proposal is copied over;
a hybrid runs whichever of its two proposed. A chain round makes ONE device -> host
transfer, whatever the drafter. Trees are in `gpu.tree` (the names of `reference.tree` the
loop uses: tree_speculative_generate, tree_round, tree_verification_pass, ModelTreeDrafter,
HeadsTreeDrafter, EagleTreeDrafter: EAGLE-2's dynamic tree, also `gpu.EagleTreeDrafter` as
in the reference). A reference model or drafter handed to a twin loop is swapped for its
twin once (`gpu.drafters.as_twin_drafter`).

Without a CUDA device the twin runs on NumPy (`gpu.device.backend.xp`), so CI tests the
twin's own code paths on any machine. Randomness: every function takes the same numpy Generator as
the reference; the twin draws its uniforms from it on the host, a round's worth at a time,
and copies them to the device.
"""

from gpu import tree as tree  # the tree loop and drafters: gpu.tree.tree_speculative_generate
from gpu.autoregressive import generate
from gpu.batch import (
    BatchKVCache,
    batched_forward,
    batched_round,
    batched_verification_pass,
    new_batch_cache,
    speculative_generate_batch,
)
from gpu.drafters import Draft, Drafter, ModelDrafter
from gpu.eagle import EagleDrafter
from gpu.early_exit import EarlyExitDrafter
from gpu.heads import HeadsDrafter
from gpu.kv_cache import KVCache, catch_up_tokens
from gpu.llama import Llama
from gpu.model import GPT, init_params
from gpu.sampling import SamplingParams, probabilities, sample_token
from gpu.speculative import (
    Round,
    RoundTrace,
    SpeculativeResult,
    SpeculativeStats,
    speculative_generate,
    speculative_round,
    verification_pass,
)
from gpu.tree import EagleTreeDrafter
from gpu.verification import (
    Verification,
    acceptance_probability,
    accepts,
    bonus_token,
    residual_distribution,
    residual_token,
    verify,
)
from reference.config import GPTConfig, LlamaConfig
from reference.llama import init_llama_params
from reference.lookup import HybridDrafter, LookupDrafter

__all__ = [
    "BatchKVCache",
    "GPT",
    "Draft",
    "Drafter",
    "GPTConfig",
    "EagleDrafter",
    "EagleTreeDrafter",
    "EarlyExitDrafter",
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

"""The opt-in CPU fast path: the same GPT (or Llama), computed in ways this machine runs faster.

    model.py     FastGPT, FastLlama and `fast(model)`: the tricks, each replacing one computation
    llama.py     the Llama block's own tricks: RMSNorm (compiled), SiLU and RoPE by products
    plan.py      which tricks pay here: whole passes measured, then chosen (`describe_plan`)
    step.py      a forward with a cache as one compiled call (the draft's step, a pass)
    llama_step.py  the same for the Llama block
    compiled.py  the few-row product and LayerNorm as compiled loops (numba, optional)
    draw.py      the draft's sampled draw as one compiled call (`FastModelDrafter`)
    sixteen.py   the weights in the 16 bits they were stored in, for the compiled passes

docs/fast-path.md says why each trick exists and what it measured; the measurement of what
each buys is specdec/measure/fast_path_report.py. Importing this package imports numba where
it is installed (about a second): the plain model never needs it.
"""

from specdec.fast_cpu.draw import FastModelDrafter
from specdec.fast_cpu.model import (
    TRICK_CHOICES,
    FastGPT,
    FastLlama,
    attention_keys_first,
    fast,
    future_keys,
    gelu_by_products,
    linear_few_rows,
    measure_passes,
    slice_rows,
)
from specdec.fast_cpu.plan import FEW_ROWS, MANY_ROWS, TrickPlan, describe_plan

__all__ = [
    "FEW_ROWS",
    "MANY_ROWS",
    "TRICK_CHOICES",
    "FastGPT",
    "FastLlama",
    "FastModelDrafter",
    "TrickPlan",
    "attention_keys_first",
    "describe_plan",
    "fast",
    "future_keys",
    "gelu_by_products",
    "linear_few_rows",
    "measure_passes",
    "slice_rows",
]

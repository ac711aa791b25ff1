"""Exercise: EAGLE's draft block, a token and a feature in, the next feature out (notebook 14).

Grade your function from the repository root (a few seconds):

    .venv/bin/specdec grade notebooks/exercises/my_eagle_block.py:eagle_block_forward

Your rows are held against the grader's own forward, to float32 rounding, on hand-made cases
(one position; several positions and one head; several heads; rows of a small spread) and on
40 cases drawn afresh for each grading (eagle-block). Then your function stands in for the
block of a real EagleDrafter run through the reference loop: at every step the drafter runs
its block (the prefill, each round's catch-up, each draft step), your rows over its whole
history must be the ones its block computed with its KV cache (eagle-block-round). Each
failure shows the smallest case that shows it, the expected rows next to yours, with a hint.

The setting. An EAGLE drafter guesses the target's next feature instead of its next token.
Its input at position t is a pair: the token x(t + 1) the target drew from its row t, and the
target's feature f(t) at that position (the residual stream after its last block: what its
output layer reads, once normed, to score the next token). Notebook 14, section 1, shows the
alignment; notebooks/exercises/my_eagle_align.py picks the pairs. This exercise is what the
drafter does with them: its block.

The contract:

    eagle_block_forward(tokens, features, params, n_head) -> rows

    tokens    [T] int64, T >= 1: the token of each position (ids into the target's vocabulary)
    features  [T, C] float32: the feature beside it, row t with tokens[t]. In notebook 14's
              notation, position t's pair is tokens[t] = x(t + 1) and features[t] = f(t)
              (or, in a draft step, the drafter's own guess f^(t) standing in for it)
    params    dict of float32 arrays, the tensors an EagleDrafter holds (V the vocabulary):
                the target's:  "wte.weight" [V, C], "wpe.weight" [n_ctx, C],
                               "ln_f.weight" [C], "ln_f.bias" [C]
                the fusion:    "fc.weight" [2C, C], "fc.bias" [C]
                one block, named as GPT-2 names its blocks' weights (reference/model.py):
                  "h.0.ln_1.weight" [C], "h.0.ln_1.bias" [C],
                  "h.0.attn.c_attn.weight" [C, 3C], "h.0.attn.c_attn.bias" [3C],
                  "h.0.attn.c_proj.weight" [C, C], "h.0.attn.c_proj.bias" [C],
                  "h.0.ln_2.weight" [C], "h.0.ln_2.bias" [C],
                  "h.0.mlp.c_fc.weight" [C, 4C], "h.0.mlp.c_fc.bias" [4C],
                  "h.0.mlp.c_proj.weight" [4C, C], "h.0.mlp.c_proj.bias" [C]
    n_head    int dividing C: the block's attention heads
    returns   [T, C] floats: row t is the block's output at position t, the drafter's guess
              of the target's next feature

What a correct answer keeps (what the grader's checks come down to):

* The block's input row at position t fuses the two halves of its pair: the target's
  embedding of tokens[t] (its own wte, the drafter has no embedding of its own) FIRST and
  features[t] SECOND, side by side (2C numbers), through the fusion layer fc, a linear layer
  from 2C to C (the same y = x W + b convention as every GPT-2 linear layer here).
* Those rows then go through ONE transformer block computed exactly as the target's blocks
  are (reference/model.py, `GPT.block`: read it; do not import it): GPT-2's LayerNorms
  (epsilon 1e-5), multi-head self-attention, the MLP with GPT-2's GELU (its tanh form), and
  the residual adds, in GPT-2's order.
* The T positions come from an empty cache, and attention is causal: the output at position
  t depends on positions 0..t only. Change tokens[j] or features[j] and no row before j may
  move; with T = 1 the single row attends to itself alone.
* The output is something the drafter can feed straight back in: its row t is fused with the
  next draft token as features[t + 1] in the drafter's next step, exactly where the target's
  own feature would stand. The drafter turns it into q only afterwards (the target's ln_f and
  output layer: not your job here).
* Not every tensor in params is read. Which of the target's tensors does the block need, and
  which would count something twice? Decide from what f(t) already is. Inside a real
  drafter the same rows are computed from a KV cache, starting at whatever slot the cache has
  reached: a row must come out the same whether its history is cached or recomputed, as
  here, from position 0.

A worked example (run this file: `python notebooks/exercises/my_eagle_block.py` prints your
rows next to these): C = 4, n_head = 2 (two heads of 2 columns), V = 3, T = 3, the params
made by example() below (LayerNorm gains 1, every other weight a small round number), tokens
[2, 0, 1] and the features in example(). The expected rows, to 4 decimals:

    [[0.6894, 0.9932, 0.9356, -0.0782],
     [1.1056, 2.2189, 2.174, -0.3057],
     [0.5085, 1.3116, 0.9771, 0.4363]]

Row 0 reads only itself: its attention weights are [1] in both heads, so its attention
output is its own value vector through c_proj. Row 1 and row 2 weigh the rows before them.

Things the grader catches (each a mistake it was tested on): the fusion's halves in the wrong
order; a tensor of the target read that the block does not read, or applied once too often; a
row that reads later rows; masked scores that still get weight; heads that mix positions or
columns; the wrong attention scale; a residual add forgotten; LayerNorm in the wrong place or
with the wrong epsilon; ReLU for GELU. (GELU's exact erf form is within the tolerance.)

You may use numpy only; do not import `reference` (that would grade the reference).
A worked solution is in solutions/eagle_block_solution.py — try first.
"""

from __future__ import annotations

import numpy as np


def eagle_block_forward(
    tokens: np.ndarray, features: np.ndarray, params: dict, n_head: int
) -> np.ndarray:
    # tokens [T], features [T, C], params, n_head -> [T, C]
    raise NotImplementedError(
        "write eagle_block_forward() in notebooks/exercises/my_eagle_block.py, then grade it "
        "with: .venv/bin/specdec grade notebooks/exercises/my_eagle_block.py:eagle_block_forward"
    )


# --------------------------------------------------------------------------------------------
# The worked example of the docstring, to compare your rows with by hand
# --------------------------------------------------------------------------------------------

EXAMPLE_ROWS = [  # the expected rows of example(), to 4 decimals
    [0.6894, 0.9932, 0.9356, -0.0782],
    [1.1056, 2.2189, 2.174, -0.3057],
    [0.5085, 1.3116, 0.9771, 0.4363],
]


def example() -> tuple:
    """(tokens, features, params, n_head) of the worked example: C = 4, V = 3, n_ctx = 8."""
    C, V, n_ctx = 4, 3, 8
    shapes = {
        "wte.weight": (V, C),
        "wpe.weight": (n_ctx, C),
        "ln_f.weight": (C,),
        "ln_f.bias": (C,),
        "fc.weight": (2 * C, C),
        "fc.bias": (C,),
        "h.0.ln_1.weight": (C,),
        "h.0.ln_1.bias": (C,),
        "h.0.attn.c_attn.weight": (C, 3 * C),
        "h.0.attn.c_attn.bias": (3 * C,),
        "h.0.attn.c_proj.weight": (C, C),
        "h.0.attn.c_proj.bias": (C,),
        "h.0.ln_2.weight": (C,),
        "h.0.ln_2.bias": (C,),
        "h.0.mlp.c_fc.weight": (C, 4 * C),
        "h.0.mlp.c_fc.bias": (4 * C,),
        "h.0.mlp.c_proj.weight": (4 * C, C),
        "h.0.mlp.c_proj.bias": (C,),
    }
    rng = np.random.default_rng(14)
    params = {}
    for name, shape in shapes.items():
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            params[name] = np.ones(shape, dtype=np.float32)
        else:  # N(0, 0.5), rounded to one decimal
            params[name] = (0.5 * rng.standard_normal(shape)).round(1).astype(np.float32)
    tokens = np.array([2, 0, 1], dtype=np.int64)
    features = np.array(
        [[1.0, -0.5, 0.0, 2.0], [0.5, 0.5, -1.0, 0.0], [-1.5, 1.0, 0.5, 0.5]], dtype=np.float32
    )
    return tokens, features, params, 2


if __name__ == "__main__":
    rows = eagle_block_forward(*example())
    print("yours:   ", np.round(np.asarray(rows, dtype=np.float64), 4).tolist())
    print("expected:", EXAMPLE_ROWS)

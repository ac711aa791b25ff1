"""The EAGLE block exercise's known mistakes: each is the forward of rule.py with one slip (the
fusion's halves swapped, a position embedding added, no causal mask, the feature normed
before the fusion, a residual forgotten, ...), with the hint that names it in the student's
terms. A mistake is named only when its forward gives the submission's answer, within the
tolerance, on every wrong call; else the hint says where the first wrong answer differs."""

from __future__ import annotations

import numpy as np

from specdec.grading.exercises.eagle_block.rule import TOL, Slip, forward, gap, rule

Call = tuple  # (tokens [T], features [T, C], params, n_head)
Mistake = tuple[str, Slip, str]

MISTAKES: list[Mistake] = [
    (
        "fusion-swapped",
        Slip(swapped=True),
        "your fused row reads the feature first: [f(t); e(x)] W + b. The fusion layer's "
        "first C inputs are the token's embedding and its last C the feature, as the "
        "drafter's checkpoint was trained (fc.weight [2C, C]: rows 0..C-1 weigh e, rows "
        "C..2C-1 weigh f)",
    ),
    (
        "positions-added",
        Slip(positions=True),
        "you add position embeddings (wpe) to the fused rows. The block reads no wpe: its "
        "input row already carries its position, through the target's feature f(t), which "
        "the target computed with its own position embedding. wpe is in params only because "
        "the drafter holds the target's tensors: added again, each position would be "
        "counted twice",
    ),
    (
        "feature-normed",
        Slip(feature_normed=True),
        "you pass the feature through the target's ln_f before the fusion. f(t) is the "
        "target's residual stream BEFORE ln_f (the same space as the block's output, the "
        "next feature): the fusion reads it as it is. ln_f comes after the block, when the "
        "drafter turns its output into q",
    ),
    (
        "output-normed",
        Slip(output_normed=True),
        "you apply the target's ln_f to the block's output. The output is the next feature "
        "f^, in the space of the target's features, before ln_f: the drafter applies ln_f "
        "and the output layer to it afterwards, to get q (applied here too, it would be "
        "applied twice)",
    ),
    (
        "no-causal-mask",
        Slip(mask="none"),
        "every row attends to all T positions, later ones included. Row t may read only "
        "rows 0..t: it stands for a draft step that has not seen what comes after it (a "
        "drafter feeding one row at a time could not). Mask the keys j > t",
    ),
    (
        "mask-zeroed",
        Slip(mask="zeroed"),
        "your mask sets the scores of later positions to 0, but exp(0) = 1 still gives them "
        "weight. A masked key must get no weight at all: its score must be -inf (or a very "
        "large negative number) before the softmax",
    ),
    (
        "heads-reshaped",
        Slip(heads="reshaped"),
        "your heads mix positions: q, k and v [T, C] were reshaped to [n_head, T, hs] "
        "directly. Head h reads columns h*hs..(h+1)*hs-1 of every row: reshape to "
        "[T, n_head, hs] first, then move the head axis to the front",
    ),
    (
        "scaled-by-width",
        Slip(scale="width"),
        "you scale the scores by 1/sqrt(C). Each head's dot products run over its own hs = "
        "C / n_head columns: the scale is 1/sqrt(hs) (the same as 1/sqrt(C) only for one "
        "head)",
    ),
    (
        "not-scaled",
        Slip(scale="none"),
        "your attention scores are not scaled: divide q k^T by sqrt(hs), hs = C / n_head, "
        "before the softmax (a row alone, T = 1, hides it: its one weight is 1 whatever the "
        "scale)",
    ),
    (
        "attention-residual-forgotten",
        Slip(residual="no-attn"),
        "the attention's output replaces the row instead of being added to it: x = g + "
        "Attention(LN_1(g)). The block is residual: each half adds to the stream it reads",
    ),
    (
        "mlp-residual-forgotten",
        Slip(residual="no-mlp"),
        "the MLP's output replaces the row instead of being added to it: out = x + "
        "MLP(LN_2(x)). The block is residual: each half adds to the stream it reads",
    ),
    (
        "post-norm",
        Slip(post_norm=True),
        "you normalise after each residual add (the original Transformer's order). GPT-2's "
        "block, and EAGLE's copy of it, is pre-norm: each half reads LN(x) and adds its "
        "output to x itself, which stays un-normalised",
    ),
    (
        "relu",
        Slip(gelu="relu"),
        "your MLP's activation is ReLU. GPT-2's is GELU (its tanh approximation, as in "
        "the target's blocks), negative inputs included: GELU(-1) is about -0.159, not 0",
    ),
    (
        "eps-outside-sqrt",
        Slip(eps_inside=False),
        "your LayerNorm adds epsilon outside the square root: (x - mean) / (sqrt(var) + "
        "eps). GPT-2's divides by sqrt(var + eps), eps = 1e-5; the two differ on rows of a "
        "small spread, like these",
    ),
    (
        "eps-missing",
        Slip(eps=0.0),
        "your LayerNorm has no epsilon (or a tiny one): GPT-2's divides by sqrt(var + eps) "
        "with eps = 1e-5, which counts on rows of a small spread, like these",
    ),
    (
        "eps-other",
        Slip(eps=1e-6),
        "your LayerNorm's epsilon is not GPT-2's: it divides by sqrt(var + eps) with eps = "
        "1e-5, which counts on rows of a small spread, like these",
    ),
]
FIT = TOL  # a mistake's forward fits an answer when it is this close to it


def rebuilt(slip: Slip, call: Call) -> np.ndarray | None:
    # the answer a mistake gives on a call (None: it cannot, e.g. more rows than wpe holds)
    try:
        return forward(*call, slip=slip)
    except (ValueError, IndexError):
        return None


def fitting(wrong: list[tuple[Call, np.ndarray]]) -> str:
    """The hint of the first mistake whose forward gives every one of these answers (the
    calls a submission got wrong), or ''."""
    for _, slip, hint in MISTAKES:
        if all(
            (made := rebuilt(slip, call)) is not None and gap(got, made) <= FIT
            for call, got in wrong
        ):
            return hint
    return ""


def generic_hint(call: Call, got: np.ndarray) -> str:
    """No catalogued mistake fits: where this answer first differs, and what that points to."""
    tokens, features, params, n_head = call
    want = rule(*call)
    if got.shape != want.shape:
        return (
            f"return one output row per position, shape [T, C] = {list(want.shape)}, not "
            f"{list(got.shape)}"
        )
    if not np.all(np.isfinite(got)):
        return (
            "your rows hold values that are not finite (inf or nan): a softmax whose scores "
            "were not shifted by their maximum, or -inf scores on a whole row?"
        )
    rows = [t for t in range(len(want)) if gap(got[t : t + 1], want[t : t + 1]) > TOL]
    first = rows[0]
    if first == 0 and len(want) == 1:
        return (
            "even a single position differs (T = 1, where attention returns the row's own "
            "value vector, whatever the mask and the scale): check what enters (the fused "
            "row: the token's embedding, then the feature), the two LayerNorms, the MLP, "
            "the two residual adds, and that nothing is applied to the output"
        )
    if first == 0:
        return (
            "row 0 already differs: it reads only itself (its one attention weight is 1), so "
            "neither the mask nor the scale can explain it: look at what enters (the fused "
            "row), the norms, the MLP, the residual adds and what comes out"
        )
    return (
        f"rows 0..{first - 1} are right and row {first} is not: a row reads the rows before "
        f"it only through attention. Check the causal mask (row t reads rows 0..t), the "
        f"scale 1/sqrt(hs), and which columns each head reads"
    )

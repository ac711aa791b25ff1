"""Early-exit self-speculation: the target's own first L' blocks draft, and the target's
verification pass does not compute those blocks again for the rows they already ran on.

The draft model is the target cut after block L'-1 plus an exit head:

    q(. | context) = softmax(LN_exit(x_L') @ wte^T)     x_L': the residual stream after L' blocks

(LN_exit is the target's final norm, or one trained on the frozen target, optionally
after a small residual adapter x + x W + b: see specdec/training/train_heads.py.) It shares every
array with the target: nothing is copied, and an edit of the target's weights is seen.
Either family runs it, with an exit norm of the family's kind: on GPT-2 a LayerNorm
("exit.ln.weight", "exit.ln.bias"), on a Llama-family target (reference/llama.py) an RMSNorm
("exit.norm.weight": a gain and no bias, with the target's rms_norm_eps) read by its own
output layer (lm_head, or the tied embedding). The adapter is the same for both. A head made
for the other family is refused in one line (`check_exit_head`).

Why the verification pass can start at layer L'. Blocks 0..L'-1 of the target, run over
the round's rows, give exactly the residual stream x_L' and the K/V that the drafter
computed for those rows while drafting (same weights, same inputs, same history). So the
pass only

    1. copies the K/V of blocks 0..L'-1 for the rows the drafter fed (the catch-up token
       and x_1..x_{k-1}) from the drafter's cache into the target's cache,
    2. runs blocks 0..L'-1 for the rows the drafter never fed (x_k, whose q was the last
       thing drafted), and
    3. runs blocks L'..L-1 over all k+1 rows.

Cache discipline (drawn in docs/kv-cache.md): the drafter's cache holds blocks 0..L'-1
only and follows the draft model's rules (ModelDrafter: commit the fed context and the
accepted drafts, roll back the rest). The copied slots are temporary entries of the target
cache like any other: commit(catch-up + accepted) keeps them, rollback() drops the rejected
ones. Committed slots of both caches hold what a fresh prefill would hold, so a rejected
draft's K/V can never reach a later round.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from reference.checks import check_finite, check_positive_int
from reference.config import LlamaConfig
from reference.drafters import Draft, ModelDrafter, SharedLayers
from reference.model import GPT

EXIT_ADAPTER = ("exit.proj.weight", "exit.proj.bias")  # optional: [C, C], [C]
EXIT_NORM = ("exit.ln.weight", "exit.ln.bias")  # optional: [C], [C] (default: the target's ln_f)
EXIT_RMS_NORM = ("exit.norm.weight",)  # a Llama-family target's: [C] (default: its model.norm)
# Where a parameter name says which block it belongs to: GPT-2's "h.{i}." and the Llama
# family's "model.layers.{i}." (reference/llama.py). Everything else (embeddings, the final
# norm, an untied lm_head) is shared by every cut of the model.
BLOCK_NAME = re.compile(r"^(?:h|model\.layers)\.(\d+)\.")
TRAIN_HEADS = "python -m specdec.training.train_heads"


def block_of(name: str) -> int | None:
    # "h.3.attn.c_attn.weight" or "model.layers.3.mlp.up_proj.weight" -> 3; "wte.weight" -> None
    match = BLOCK_NAME.match(name)
    return None if match is None else int(match.group(1))


def lower_layers(target: GPT, n_layer: int, exit_norm: dict | None = None) -> GPT:
    # -> a model of the target's family (GPT, Llama) made of its embeddings, blocks
    # 0..n_layer-1 and output layer (the same arrays, not copies), whose "ln_f" is the exit
    # norm: its forward is the draft's q, its cache holds n_layer blocks. Only the block
    # names differ between the families (`block_of`); the cut model asks its own class for
    # the rest (a Llama's "ln_f" is its model.norm). exit_norm: {final norm's parameter
    # name: array} replacing the target's (`exit_norm_params`), or None to keep it.
    L = target.config.n_layer
    n_layer = check_positive_int(n_layer, "n_layer (the exit layer L')")
    if n_layer >= L:
        raise ValueError(
            f"the exit layer L' must be below the target's {L} blocks, got {n_layer}: "
            f"drafting with every block is the target itself"
        )
    params = {
        name: w
        for name, w in target.params.items()
        if block_of(name) is None or block_of(name) < n_layer
    }
    if exit_norm is not None:
        params |= exit_norm
    return type(target)(replace(target.config, n_layer=n_layer), params)


class EarlyExitDrafter(ModelDrafter):
    """Drafts with the target's first L' blocks and an exit head; shares those blocks' work
    with the verification pass (`Draft.shared`).

    head: optional trained exit head, a dict with EXIT_NORM (GPT-2) or EXIT_RMS_NORM (the
    Llama family) arrays, and optionally EXIT_ADAPTER; without one, the exit is the target's
    own final norm and output layer.
    """

    library_checked = True  # ModelDrafter's proposal, with the rows it fed attached

    def __init__(
        self,
        target: GPT,
        n_layer: int,
        head: dict[str, np.ndarray] | None = None,
        min_confidence: float | None = None,
    ) -> None:
        head = check_exit_head(head, target.config)
        super().__init__(
            lower_layers(target, n_layer, exit_norm_params(head, target)), min_confidence
        )
        self.target = target
        self.n_layer = self.model.config.n_layer
        self.adapter = (
            (head[EXIT_ADAPTER[0]], head[EXIT_ADAPTER[1]]) if EXIT_ADAPTER[0] in head else None
        )
        self._start = 0  # absolute position of the first row fed this round
        self._rows: list[np.ndarray] = []  # residual streams x_L' of the rows fed this round

    def propose(self, context, k, sampling, rng) -> Draft:
        # context [n] -> Draft(tokens [k], q [k, V], shared = the rows fed this round)
        self._rows = []
        self._start = self.cache.length  # propose rolls back first: writes start here
        draft = super().propose(context, k, sampling, rng)
        if not self._rows:
            return draft
        shared = SharedLayers(
            target=self.target,
            n_layer=self.n_layer,
            start=self._start,
            hidden=np.concatenate(self._rows),
            cache=self.cache,
        )
        return Draft(draft.tokens, draft.q, shared)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        # tokens [T] -> logits [V] of the exit head after the last one; keeps x_L' [T, C]
        x = self.model.residual(tokens, self.cache)
        self._rows.append(x)
        logits = self.exit_logits(x[-1:])[0]
        check_finite(logits, "the exit head's logits")  # as ModelDrafter.step
        return logits

    def exit_logits(self, x: np.ndarray) -> np.ndarray:
        # x_L' [T, C] -> [T, V]:  LN_exit(x + x W + b) @ wte^T  (no adapter: LN_exit(x) @ wte^T)
        if self.adapter is not None:
            w, b = self.adapter
            x = x + x @ w + b
        return self.model.logits(self.model.norm(x, "ln_f"))


def exit_norm_params(head: dict, target: GPT) -> dict | None:
    # a checked head -> {the cut model's final-norm names: the trained norm}, None without one
    if EXIT_NORM[0] in head:  # GPT-2's LayerNorm
        return {"ln_f.weight": head[EXIT_NORM[0]], "ln_f.bias": head[EXIT_NORM[1]]}
    if EXIT_RMS_NORM[0] in head:  # the Llama family's RMSNorm: its final norm's one gain
        return {"model.norm.weight": head[EXIT_RMS_NORM[0]]}
    return None


def check_head_family(head: dict, config) -> None:
    # A trained exit norm belongs to one family: a LayerNorm (weight and bias) for GPT-2, an
    # RMSNorm (one gain) for the Llama family. The other family's is refused in one line.
    llama = isinstance(config, LlamaConfig)
    wrong = EXIT_NORM if llama else EXIT_RMS_NORM
    if any(name in head for name in wrong):
        made, kind = ("a GPT-2", "LayerNorm") if llama else ("a Llama-family", "RMSNorm")
        target = f"Llama-family ({config.model_type})" if llama else "GPT-2"
        right = EXIT_RMS_NORM if llama else EXIT_NORM
        raise ValueError(
            f"this exit head ({', '.join(n for n in wrong if n in head)}: a {kind}) was "
            f"trained for {made} target, but the target is {target}, whose exit norm is "
            f"{' and '.join(right)}: train one for it with `{TRAIN_HEADS} --target DIR`, or "
            f"draft without a head (the target's own final norm and output layer)"
        )


def check_exit_head(head, config) -> dict[str, np.ndarray]:
    # -> the head's arrays as float32, every name and shape checked against the target's
    # config (its family says which exit norm it has: `check_head_family`)
    if head is None:
        return {}
    if not isinstance(head, dict):
        raise TypeError(f"an exit head is a dict of arrays, got {type(head).__name__}")
    check_head_family(head, config)
    n_embd = config.n_embd
    norm = EXIT_RMS_NORM if isinstance(config, LlamaConfig) else EXIT_NORM
    shapes = {name: (n_embd,) for name in norm} | {
        EXIT_ADAPTER[0]: (n_embd, n_embd),
        EXIT_ADAPTER[1]: (n_embd,),
    }
    unknown = sorted(set(head) - set(shapes))
    if unknown:
        raise ValueError(f"unknown exit-head parameter(s) {unknown}; expected {sorted(shapes)}")
    for pair in (EXIT_NORM, EXIT_ADAPTER):
        if pair[0] in shapes and (pair[0] in head) != (pair[1] in head):
            raise ValueError(f"an exit head needs both {pair[0]!r} and {pair[1]!r}")
    out = {}
    for name, value in head.items():
        value = np.asarray(value, dtype=np.float32)
        if value.shape != shapes[name]:
            raise ValueError(
                f"exit-head parameter {name!r} has shape {value.shape}, needs {shapes[name]}"
            )
        if not np.all(np.isfinite(value)):
            raise ValueError(f"exit-head parameter {name!r} holds non-finite values")
        out[name] = value
    return out

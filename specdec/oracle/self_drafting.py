"""The oracle's view of drafters made of the target itself: early exit and extra heads.

What the exact laws enumerate is written here from the definitions, not imported from
reference/early_exit.py or reference/heads.py:

* ExitRows: q(. | context) = softmax(LN_exit(x + x W + b) @ wte^T), x = the residual stream
  of the target's first L' blocks at the context's last position (an uncached forward of a
  GPT holding only those blocks), LN written out in float64.
* HeadsProposals: at a context c with at least two tokens, h = the target's final hidden
  state at c[:-1]'s last position (uncached); head i's row is
  softmax((h + SiLU(h W_i + b_i)) @ wte^T); the m = min(k, heads) drafts are drawn
  independently, one from each head (they do not see each other); before any target row
  exists (a one-token context) there is no draft.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from reference.early_exit import EarlyExitDrafter
from reference.heads import HeadsDrafter
from reference.model import GPT
from reference.sampling import SamplingParams, probabilities
from specdec.oracle.laws import LoopSetup, decision_margin
from specdec.standins import random_exit_head, random_heads

# two blocks, so that an exit after block 0 leaves one block to the verification pass
SELF_TARGET = (16, 2, 2, 0.9, 41)


@cache
def first_blocks(target: GPT, n_layer: int) -> GPT:
    # a GPT holding the target's embeddings and blocks 0..n_layer-1 (its ln_f is unused here)
    keep = {name: w for name, w in target.params.items() if not name.startswith("h.")}
    keep |= {
        name: w
        for name, w in target.params.items()
        if name.startswith("h.") and int(name.split(".")[1]) < n_layer
    }
    return GPT(replace(target.config, n_layer=n_layer), keep)


def layer_norm64(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    return g * (x - x.mean()) / np.sqrt(x.var() + eps) + b


class ExitRows:
    """q(. | context) of an early-exit drafter, float64."""

    def __init__(self, target: GPT, n_layer: int, head: dict, sampling: SamplingParams) -> None:
        self.target, self.lower, self.head = target, first_blocks(target, n_layer), head
        self.sampling, self.n_vocab = sampling, target.n_vocab
        self.margin = math.inf
        self._rows: dict = {}

    def __call__(self, context) -> np.ndarray:
        row = self._rows.get(context)
        if row is None:
            x = self.lower.residual(np.asarray(context, dtype=np.int64))[-1].astype(np.float64)
            H = self.head
            x = x + x @ H["exit.proj.weight"] + H["exit.proj.bias"]
            z = layer_norm64(
                x, H["exit.ln.weight"], H["exit.ln.bias"], self.target.config.layer_norm_epsilon
            )
            logits = z @ self.target.params["wte.weight"].T.astype(np.float64)
            self.margin = min(self.margin, decision_margin(logits, self.sampling))
            row = self._rows[context] = probabilities(logits, self.sampling)
        return row


def silu64(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


class HeadsProposals:
    """Every draft of an extra-heads drafter at a context, with its probability."""

    def __init__(self, target: GPT, heads: dict, sampling: SamplingParams) -> None:
        self.target, self.heads, self.sampling = target, heads, sampling
        self.n_heads, self.n_vocab = len(heads) // 2, target.n_vocab
        self.margin = math.inf

    def rows(self, context, m: int) -> np.ndarray:  # -> [m, V]
        if m == 0:
            return np.zeros((0, self.n_vocab))
        h = self.target.norm(
            self.target.residual(np.asarray(context[:-1], dtype=np.int64)), "ln_f"
        )[-1].astype(np.float64)
        wte = self.target.params["wte.weight"].astype(np.float64)
        out = []
        for i in range(m):
            z = h + silu64(h @ self.heads[f"heads.{i}.weight"] + self.heads[f"heads.{i}.bias"])
            logits = z @ wte.T
            self.margin = min(self.margin, decision_margin(logits, self.sampling))
            out.append(probabilities(logits, self.sampling))
        return np.stack(out)

    def outcomes(self, context, k: int):
        m = min(k, self.n_heads) if len(context) >= 2 else 0
        Q = self.rows(context, m)
        for drafts in itertools.product(*(np.flatnonzero(row > 0) for row in Q)):
            w = math.prod(float(Q[i, x]) for i, x in enumerate(drafts))
            yield tuple(int(x) for x in drafts), Q, w


@dataclass(frozen=True)
class SelfDraftSetup(LoopSetup):
    """A loop setup whose drafter is the target's own: an exit after `exit_layer` blocks,
    or `n_heads` extra heads (random stand-ins for trained ones, seeded by `part_seed`)."""

    exit_layer: int = 0
    n_heads: int = 0
    part_seed: int = 0

    def exit_head(self) -> dict:
        return random_exit_head(self.target[0], self.part_seed)

    def heads(self) -> dict:
        return random_heads(self.target[0], self.n_heads, self.part_seed)

    def make_drafter(self):
        if self.exit_layer:
            return EarlyExitDrafter(self.target_model(), self.exit_layer, self.exit_head())
        return HeadsDrafter(self.target_model(), self.heads())

    def draft_law(self, sampling: SamplingParams):
        if self.exit_layer:
            return ExitRows(self.target_model(), self.exit_layer, self.exit_head(), sampling)
        return HeadsProposals(self.target_model(), self.heads(), sampling)


def self_setup(
    name,
    sampling,
    k,
    max_new_tokens,
    prompt,
    *,
    exit_layer=0,
    n_heads=0,
    eos_id=None,
    n=0,
    seed=0,
    part_seed=1,
):
    return SelfDraftSetup(
        name,
        5,
        SELF_TARGET,
        (0.0, 0),  # unused: the drafter is the target's own
        prompt,
        k=k,
        max_new_tokens=max_new_tokens,
        sampling=sampling,
        eos_id=eos_id,
        n=n,
        seed=seed,
        exit_layer=exit_layer,
        n_heads=n_heads,
        part_seed=part_seed,
    )


# The sampled family (real loop, chi-square, Holm): prompts, EOS ids and seeds picked with
# `loop_laws` so that every accepted count of round 1 has real mass and every top-k / top-p
# / argmax choice is at least 3e-3 from a tie (test_self_drafting_law.py checks both).
SELF_DRAFT_SETUPS = {
    s.name: s
    for s in [
        # exit after block 0 of 2, plain sampling; round 2 often follows a full acceptance,
        # so the drafter starts one token behind the target and shares from there
        self_setup(
            "exit_t1_k2",
            SamplingParams(1.0),
            2,
            5,
            (3, 0),
            exit_layer=1,
            n=4_000,
            seed=301,
            part_seed=2,
        ),
        self_setup(
            "exit_topk_k3_eos",
            SamplingParams(0.7, top_k=3),
            3,
            4,
            (4, 1),
            exit_layer=1,
            eos_id=4,
            n=4_000,
            seed=302,
        ),
        self_setup("heads_t1_k3", SamplingParams(1.0), 3, 5, (1, 3), n_heads=3, n=4_000, seed=303),
        self_setup(
            "heads_topp_k2_eos",
            SamplingParams(0.7, top_p=0.9),
            2,
            5,
            (1, 3),
            n_heads=2,
            eos_id=2,
            n=4_000,
            seed=304,
        ),
    ]
}
SELF_DRAFT_MEMBERS = [
    f"{name}:{law}" for name in SELF_DRAFT_SETUPS for law in ("tokens", "round1", "round2")
]

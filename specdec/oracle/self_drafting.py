"""The oracle's view of drafters made of the target itself: early exit, extra heads, EAGLE.

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
* EagleProposals: at a context c = x(0..n-1) with n >= 2, the target's features f(0..n-2) =
  its residual stream of c[:-1] before ln_f (uncached); fused rows g(t) = [wte[x(t+1)]; f(t)]
  W + b, written out in float64; the block (the EAGLE params' "h.0.*", run uncached over
  every fused row so far by a one-block GPT) gives f^, and row i is softmax(ln_f(f^) @
  wte^T) of the block's last output; draft i is drawn from it and fused with that f^ for
  row i+1 (drafts see each other, through the drafter's own features).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from reference.eagle import EagleDrafter, init_eagle_params
from reference.early_exit import EarlyExitDrafter
from reference.heads import HeadsDrafter
from reference.model import GPT, causal_placement
from reference.sampling import SamplingParams, probabilities
from reference.speculative import prefill, speculative_round
from specdec.oracle.laws import LoopSetup, decision_margin
from specdec.standins import random_exit_head, random_heads

# two blocks, so that an exit after block 0 leaves one block to the verification pass
SELF_TARGET = (16, 2, 2, 0.9, 41)
# The EAGLE stand-in (init_eagle_params, std 0.5) with two of its weights scaled, so that q
# reads all three of its inputs, as a trained drafter does. The target's features are about
# 35 times its embeddings in size (mean |f| ~ 22 here against 0.65): a random fusion would
# read the feature alone and ignore the token just sampled, which is the one thing EAGLE adds
# to extra heads. And the block's attention adds little next to the fused row it is added
# to, so q would hardly depend on the rows in the drafter's cache. Scaled, a token one
# position off and a cache that keeps the wrong rows each move q (and so the acceptance)
# enough for the sampled family to see with its 4 000 runs.
EAGLE_TOKEN_GAIN = 30.0  # on the embedding half of the fusion W (its first C rows)
EAGLE_ATTENTION_GAIN = 30.0  # on the block's attention output projection


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


# logits [V] float64, sampling -> the row a token is drawn from: the package's own transform
# by default; the proposal laws (proposals.py) pass the grader's, written on its own
Transform = Callable[[np.ndarray, SamplingParams], np.ndarray]


class ExitRows:
    """q(. | context) of an early-exit drafter, float64."""

    def __init__(
        self,
        target: GPT,
        n_layer: int,
        head: dict,
        sampling: SamplingParams,
        transform: Transform = probabilities,
    ) -> None:
        self.target, self.lower, self.head = target, first_blocks(target, n_layer), head
        self.sampling, self.n_vocab, self.transform = sampling, target.n_vocab, transform
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
            row = self._rows[context] = self.transform(logits, self.sampling)
        return row


def silu64(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


class HeadsProposals:
    """Every draft of an extra-heads drafter at a context, with its probability."""

    def __init__(
        self,
        target: GPT,
        heads: dict,
        sampling: SamplingParams,
        transform: Transform = probabilities,
    ) -> None:
        self.target, self.heads, self.sampling = target, heads, sampling
        self.n_heads, self.n_vocab, self.transform = len(heads) // 2, target.n_vocab, transform
        self.margin = math.inf

    def head_logits(self, context, m: int) -> np.ndarray:  # -> [m, V] float64
        # head i at the target's final hidden state h of context[:-1] (uncached)
        if m == 0:
            return np.zeros((0, self.n_vocab))
        h = self.target.norm(
            self.target.residual(np.asarray(context[:-1], dtype=np.int64)), "ln_f"
        )[-1].astype(np.float64)
        wte = self.target.params["wte.weight"].astype(np.float64)
        out = []
        for i in range(m):
            z = h + silu64(h @ self.heads[f"heads.{i}.weight"] + self.heads[f"heads.{i}.bias"])
            out.append(z @ wte.T)
        return np.stack(out)

    def rows(self, context, m: int) -> np.ndarray:  # -> [m, V]
        out = []
        for logits in self.head_logits(context, m):
            self.margin = min(self.margin, decision_margin(logits, self.sampling))
            out.append(self.transform(logits, self.sampling))
        return np.stack(out) if out else np.zeros((0, self.n_vocab))

    def outcomes(self, context, k: int):
        m = min(k, self.n_heads) if len(context) >= 2 else 0
        Q = self.rows(context, m)
        for drafts in itertools.product(*(np.flatnonzero(row > 0) for row in Q)):
            w = math.prod(float(Q[i, x]) for i, x in enumerate(drafts))
            yield tuple(int(x) for x in drafts), Q, w


def eagle_block(target: GPT, eagle: dict) -> GPT:
    # the EAGLE block as a one-block GPT (its "h.0.*" params; the rest is the target's, unused)
    keep = {name: w for name, w in target.params.items() if not name.startswith("h.")}
    keep |= {name: w for name, w in eagle.items() if name.startswith("h.")}
    return GPT(replace(target.config, n_layer=1), keep)


class EagleProposals:
    """Every draft of an EAGLE drafter at a context, with its q rows and probability."""

    def __init__(
        self,
        target: GPT,
        eagle: dict,
        sampling: SamplingParams,
        transform: Transform = probabilities,
    ) -> None:
        self.target, self.sampling, self.n_vocab = target, sampling, target.n_vocab
        self.transform = transform
        self.block = eagle_block(target, eagle)
        self.w = eagle["fc.weight"].astype(np.float64)
        self.b = eagle["fc.bias"].astype(np.float64)
        self.wte = target.params["wte.weight"].astype(np.float64)
        self.margin = math.inf

    def fused(self, token: int, f: np.ndarray) -> np.ndarray:  # [C] -> g [C]
        return np.concatenate([self.wte[token], f.astype(np.float64)]) @ self.w + self.b

    def row(self, g: list) -> tuple[np.ndarray, np.ndarray]:
        # fused rows g(0..t) -> (q row [V], f^(t+1) [C]) from the block's last output
        G = np.stack(g).astype(np.float32)
        f_hat = self.block.blocks(G, None, causal_placement(0, len(G)), 0, 1)[-1]
        eps = self.target.config.layer_norm_epsilon
        P = self.target.params
        z = layer_norm64(f_hat, P["ln_f.weight"], P["ln_f.bias"], eps)
        logits = z @ self.wte.T
        self.margin = min(self.margin, decision_margin(logits, self.sampling))
        return self.transform(logits, self.sampling), f_hat

    def outcomes(self, context, k: int):
        if len(context) < 2 or k == 0:
            yield (), np.zeros((0, self.n_vocab)), 1.0
            return
        f = self.target.residual(np.asarray(context[:-1], dtype=np.int64))  # f(0..n-2)
        g = [self.fused(context[t + 1], f[t]) for t in range(len(context) - 1)]
        yield from self.extend(g, (), [], 1.0, k)

    def extend(self, g: list, drafts: tuple, rows: list, w: float, k: int):
        q, f_hat = self.row(g)
        for x in np.flatnonzero(q > 0):
            x = int(x)
            if len(drafts) + 1 == k:
                yield drafts + (x,), np.stack([*rows, q]), w * float(q[x])
            else:
                g_next = [*g, self.fused(x, f_hat)]
                yield from self.extend(g_next, drafts + (x,), [*rows, q], w * float(q[x]), k)


def eagle_row_deviation(setup, drafter, rounds: int = 3, seed: int = 7) -> float:
    """The feature-alignment check, exact: run `rounds` real rounds of `drafter` (an EAGLE
    drafter built on `setup`'s target and weights) from the setup's prompt and return the
    largest |q - q_oracle| over every draft row, q_oracle being EagleProposals' row for the
    same context and drafts (its features from a plain forward of the target). Float32
    rounding (< 1e-5) for a drafter that fuses and caches as the definition says; inf when
    it drafts a token the oracle's row gives probability 0."""
    target, oracle = setup.target_model(), setup.draft_law(setup.sampling)
    context = np.asarray(setup.prompt, dtype=np.int64)
    cache, rng = target.new_cache(), np.random.default_rng(seed)
    prefill(target, cache, drafter, context)
    worst = 0.0
    for _ in range(rounds):
        rnd = speculative_round(target, cache, drafter, context, setup.k, setup.sampling, rng)
        drafts = tuple(int(x) for x in rnd.draft.tokens)
        rows = {d: Q for d, Q, _ in oracle.outcomes(tuple(int(t) for t in context), setup.k)}
        if drafts not in rows:
            return math.inf
        expected = rows[drafts] if drafts else np.zeros((0, setup.n_vocab))
        worst = max(worst, float(np.max(np.abs(rnd.draft.q - expected), initial=0.0)))
        context = np.concatenate([context, rnd.verification.emitted(rnd.draft.tokens)])
    return worst


@dataclass(frozen=True)
class SelfDraftSetup(LoopSetup):
    """A loop setup whose drafter is the target's own: an exit after `exit_layer` blocks,
    `n_heads` extra heads, or an EAGLE block (`eagle`) (random stand-ins for trained ones,
    seeded by `part_seed`)."""

    exit_layer: int = 0
    n_heads: int = 0
    part_seed: int = 0
    eagle: bool = False

    def eagle_params(self) -> dict:
        cfg = self.target_model().config
        params = init_eagle_params(cfg, np.random.default_rng(self.part_seed), std=0.5)
        C = cfg.n_embd
        params["fc.weight"][:C] *= EAGLE_TOKEN_GAIN  # the rows that read e(x(t+1))
        params["h.0.attn.c_proj.weight"] *= EAGLE_ATTENTION_GAIN
        return params

    def exit_head(self) -> dict:
        return random_exit_head(self.target[0], self.part_seed)

    def heads(self) -> dict:
        return random_heads(self.target[0], self.n_heads, self.part_seed)

    def make_drafter(self):
        if self.eagle:
            return EagleDrafter(self.target_model(), self.eagle_params())
        if self.exit_layer:
            return EarlyExitDrafter(self.target_model(), self.exit_layer, self.exit_head())
        return HeadsDrafter(self.target_model(), self.heads())

    def draft_law(self, sampling: SamplingParams):
        if self.eagle:
            return EagleProposals(self.target_model(), self.eagle_params(), sampling)
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
    eagle=False,
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
        eagle=eagle,
    )


# The sampled family (real loop, chi-square, Holm): prompts, EOS ids and seeds picked with
# `loop_laws` so that every accepted count of round 1 has real mass and every top-k / top-p
# / argmax choice is at least 3e-3 from a tie (test_self_drafting_law.py checks both); the
# EAGLE ones also so that each broken EAGLE drafter of broken.py is caught there with at most
# half the runs (its exact law of round 1, its bias at T = 0.5 computed before sampling).
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
        # EAGLE, plain sampling, k = 3: round 1 keeps at least one draft with probability
        # 0.93, so round 2 mostly starts from positions whose true features arrived after the
        # round (the catch-up of features, where a cache that kept the draft rows goes wrong)
        self_setup(
            "eagle_t1_k3",
            SamplingParams(1.0),
            3,
            5,
            (3, 0),
            eagle=True,
            n=4_000,
            seed=305,
            part_seed=2,
        ),
        # EAGLE at T = 0.5 with top-k 3 and EOS: low enough a temperature that q at T and at
        # T = 1 differ widely (a drafter that reports the latter is biased here)
        self_setup(
            "eagle_topk_k2_eos",
            SamplingParams(0.5, top_k=3),
            2,
            5,
            (1, 3),
            eagle=True,
            eos_id=0,
            n=4_000,
            seed=306,
            part_seed=2,
        ),
    ]
}
SELF_DRAFT_MEMBERS = [
    f"{name}:{law}" for name in SELF_DRAFT_SETUPS for law in ("tokens", "round1", "round2")
]

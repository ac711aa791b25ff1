"""The oracle's view of drafters made of the target itself: early exit, extra heads, EAGLE.

What the exact laws enumerate is written here from the definitions, not imported from
reference/early_exit.py or reference/heads.py. Either family: on GPT-2, LN is a LayerNorm
and the output layer the tied wte; on the Llama family (reference/llama.py), LN is an
RMSNorm (a gain, no centring, no bias) and the output layer its lm_head (or the tied token
embedding), both written out in float64 here:

* ExitRows: q(. | context) = softmax(LN_exit(x + x W + b) @ out^T), x = the residual stream
  of the target's first L' blocks at the context's last position (an uncached forward of a
  model holding only those blocks); LN_exit a trained head's norm or the target's own, the
  adapter W, b only when the head has one.
* HeadsProposals: at a context c with at least two tokens, h = the target's final hidden
  state at c[:-1]'s last position (uncached); head i's row is
  softmax((h + SiLU(h W_i + b_i)) @ out^T); the m = min(k, heads) drafts are drawn
  independently, one from each head (they do not see each other); before any target row
  exists (a one-token context) there is no draft.
* EagleProposals: at a context c = x(0..n-1) with n >= 2, the target's features f(0..n-2) =
  its residual stream of c[:-1] before its final norm (uncached; EAGLE-3: the streams after
  several block counts side by side, reduced by R, r); fused rows g(t) = [e(x(t+1)); f(t)]
  W + b, written out in float64; the block (the EAGLE params' block 0, run uncached over
  every fused row so far by a one-block model of the target's family: a Llama block rotates
  row t by position t) gives f^, and row i is softmax(LN(f^) @ out^T) of the block's last
  output; draft i is drawn from it and fused with that f^ for row i+1 (drafts see each
  other, through the drafter's own features).

loop_row_deviation holds a whole loop's rows (a run's trace) against these, round by round.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from reference.config import LlamaConfig
from reference.eagle import EagleDrafter, init_eagle_params
from reference.early_exit import EarlyExitDrafter
from reference.heads import HeadsDrafter
from reference.model import GPT, causal_placement
from reference.sampling import SamplingParams, probabilities
from reference.speculative import prefill, speculative_round
from specdec.oracle.laws import LoopSetup, ModelRows, decision_margin
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


def block_index(name: str) -> int | None:
    # the block a parameter belongs to: GPT-2's "h.{i}.", the Llama family's
    # "model.layers.{i}."; None for the embeddings, the final norm and the output layer
    parts = name.split(".")
    if parts[0] == "h":
        return int(parts[1])
    if parts[:2] == ["model", "layers"]:
        return int(parts[2])
    return None


@cache
def first_blocks(target: GPT, n_layer: int) -> GPT:
    # a model of the target's family holding its embeddings and blocks 0..n_layer-1 (its
    # final norm and output layer are unused here)
    keep = {
        name: w
        for name, w in target.params.items()
        if block_index(name) is None or block_index(name) < n_layer
    }
    return type(target)(replace(target.config, n_layer=n_layer), keep)


def is_llama(target: GPT) -> bool:
    return isinstance(target.config, LlamaConfig)


def layer_norm64(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    return g * (x - x.mean()) / np.sqrt(x.var() + eps) + b


def rms_norm64(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    # the Llama family's norm: no centring, no bias
    x = x.astype(np.float64)
    return g * x / np.sqrt(np.mean(x * x) + eps)


def final_norm64(target: GPT, x: np.ndarray, head: dict | None = None) -> np.ndarray:
    # x [C] -> the final norm of the target's family, float64: GPT-2's LayerNorm ln_f, a
    # Llama's RMSNorm model.norm; a trained exit head's norm (`head`) in its place if it has one
    P, cfg, head = target.params, target.config, head or {}
    if is_llama(target):
        g = head.get("exit.norm.weight", P["model.norm.weight"])
        return rms_norm64(x, g, cfg.rms_norm_eps)
    norm = "exit.ln" if "exit.ln.weight" in head else "ln_f"
    g, b = ({**P, **head}[f"{norm}.{part}"] for part in ("weight", "bias"))
    return layer_norm64(x, g, b, cfg.layer_norm_epsilon)


def token_embedding64(target: GPT) -> np.ndarray:  # [V, C]: e, what EAGLE fuses
    name = "model.embed_tokens.weight" if is_llama(target) else "wte.weight"
    return target.params[name].astype(np.float64)


def output_matrix64(target: GPT) -> np.ndarray:  # [V, C]: logits = h @ it^T
    # GPT-2's tied wte; a Llama's lm_head, or its token embedding when tied
    cfg = target.config
    if is_llama(target) and not cfg.tie_word_embeddings:
        return target.params["lm_head.weight"].astype(np.float64)
    return token_embedding64(target)


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
        self.target, self.lower, self.head = target, first_blocks(target, n_layer), head or {}
        self.sampling, self.n_vocab, self.transform = sampling, target.n_vocab, transform
        self.margin = math.inf
        self._rows: dict = {}

    def __call__(self, context) -> np.ndarray:
        row = self._rows.get(context)
        if row is None:
            x = self.lower.residual(np.asarray(context, dtype=np.int64))[-1].astype(np.float64)
            H = self.head
            if "exit.proj.weight" in H:  # the adapter, when the head has one
                x = x + x @ H["exit.proj.weight"] + H["exit.proj.bias"]
            logits = final_norm64(self.target, x, H) @ output_matrix64(self.target).T
            self.margin = min(self.margin, decision_margin(logits, self.sampling))
            row = self._rows[context] = self.transform(logits, self.sampling)
        return row

    def draft_rows(self, context, drafts: tuple) -> np.ndarray:  # [len(drafts), V]
        context = tuple(int(t) for t in context)
        rows = [self(context + drafts[:i]) for i in range(len(drafts))]
        return np.stack(rows) if rows else np.zeros((0, self.n_vocab))


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
        wte = output_matrix64(self.target)
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

    def draft_rows(self, context, drafts: tuple) -> np.ndarray:  # [len(drafts), V]
        # the heads' rows do not depend on the drafts, only on how many there are
        return self.rows(tuple(int(t) for t in context), len(drafts))


def eagle_block(target: GPT, eagle: dict) -> GPT:
    # the EAGLE block as a one-block model of the target's family (the EAGLE params named as
    # its block 0; the rest is the target's, unused: the block reads fused rows)
    keep = {name: w for name, w in target.params.items() if block_index(name) is None}
    keep |= {name: w for name, w in eagle.items() if block_index(name) == 0}
    return type(target)(replace(target.config, n_layer=1), keep)


class EagleProposals:
    """Every draft of an EAGLE drafter at a context, with its q rows and probability.

    feature_layers (EAGLE-3, more than one): the true feature of position t is the target's
    residual streams after those many blocks (the uncached forwards of its first blocks),
    side by side, reduced to C by the params' "reduce.*": g_true(t) = [f_l1(t); ...] R + r."""

    def __init__(
        self,
        target: GPT,
        eagle: dict,
        sampling: SamplingParams,
        transform: Transform = probabilities,
        feature_layers: tuple[int, ...] | None = None,
    ) -> None:
        self.target, self.sampling, self.n_vocab = target, sampling, target.n_vocab
        self.transform, self.feature_layers = transform, feature_layers
        self.block = eagle_block(target, eagle)
        self.w = eagle["fc.weight"].astype(np.float64)
        self.b = eagle["fc.bias"].astype(np.float64)
        self.reduce = None
        if feature_layers is not None and len(feature_layers) > 1:
            self.reduce = (eagle["reduce.weight"], eagle["reduce.bias"])
        self.wte, self.out = token_embedding64(target), output_matrix64(target)
        self.margin = math.inf

    def features(self, tokens: tuple) -> np.ndarray:  # x(0..m-1) -> f(0..m-1) [m, C] float64
        x = np.asarray(tokens, dtype=np.int64)
        if self.reduce is None:
            return self.target.residual(x).astype(np.float64)
        L = self.target.config.n_layer
        streams = [
            (self.target if n == L else first_blocks(self.target, n)).residual(x)
            for n in self.feature_layers
        ]
        R, r = (w.astype(np.float64) for w in self.reduce)
        return np.concatenate(streams, axis=1).astype(np.float64) @ R + r

    def fused(self, token: int, f: np.ndarray) -> np.ndarray:  # [C] -> g [C]
        return np.concatenate([self.wte[token], f.astype(np.float64)]) @ self.w + self.b

    def row(self, g: list) -> tuple[np.ndarray, np.ndarray]:
        # fused rows g(0..t) -> (q row [V], f^(t+1) [C]) from the block's last output; the
        # block runs uncached at positions 0..t (a Llama block rotates row t by t)
        G = np.stack(g).astype(np.float32)
        f_hat = self.block.blocks(G, None, causal_placement(0, len(G)), 0, 1)[-1]
        logits = final_norm64(self.target, f_hat) @ self.out.T
        self.margin = min(self.margin, decision_margin(logits, self.sampling))
        return self.transform(logits, self.sampling), f_hat

    def start(self, context) -> list:  # the catch-up's fused rows g(0..n-2)
        f = self.features(tuple(context[:-1]))  # f(0..n-2)
        return [self.fused(context[t + 1], f[t]) for t in range(len(context) - 1)]

    def outcomes(self, context, k: int):
        if len(context) < 2 or k == 0:
            yield (), np.zeros((0, self.n_vocab)), 1.0
            return
        yield from self.extend(self.start(context), (), [], 1.0, k)

    def extend(self, g: list, drafts: tuple, rows: list, w: float, k: int):
        q, f_hat = self.row(g)
        for x in np.flatnonzero(q > 0):
            x = int(x)
            if len(drafts) + 1 == k:
                yield drafts + (x,), np.stack([*rows, q]), w * float(q[x])
            else:
                g_next = [*g, self.fused(x, f_hat)]
                yield from self.extend(g_next, drafts + (x,), [*rows, q], w * float(q[x]), k)

    def draft_rows(self, context, drafts: tuple) -> np.ndarray:
        # the q rows of one drafted path [len(drafts), V] (the row check's, without the
        # enumeration of every other path)
        if len(context) < 2 or not drafts:
            return np.zeros((0, self.n_vocab))
        g, rows = self.start(context), []
        for x in drafts:
            q, f_hat = self.row(g)
            rows.append(q)
            g = [*g, self.fused(x, f_hat)]
        return np.stack(rows)


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


def loop_row_deviation(setup, generate, seed: int, *, drafter=None, verify_fn=None) -> float:
    """The row check of a whole loop, exact: run the loop under test (`generate`, the
    reference's speculative_generate or a plug-in such as the twin's) once on `setup` with
    a trace, and return the largest |q - q_oracle| and |p - p_oracle| over every round's
    rows: q_oracle the setup's draft law for the round's context and drafts (the oracle's
    definitions), p_oracle the target's uncached rows. Float32 rounding (< 1e-5) for a loop
    and drafter whose caches, positions and features are right; inf when a round's draft
    count or context does not match the oracle's bookkeeping. Every round of the run is
    checked, so what a rejection or a catch-up leaves in a cache shows in the next round's
    rows: the bugs that keep the output law (each q is still what its draft was drawn from)
    are seen here without sampling. `drafter`: another drafter for the setup (a broken one)."""
    target = setup.target_model()
    drafter = setup.make_drafter() if drafter is None else drafter
    q_law, p_rows = setup.draft_law(setup.sampling), ModelRows(target, setup.sampling)
    kwargs = dict(
        k=setup.k,
        max_new_tokens=setup.max_new_tokens,
        rng=np.random.default_rng(seed),
        sampling=setup.sampling,
        eos_id=setup.eos_id,
        trace=True,
    )
    if verify_fn is not None:
        kwargs["verify_fn"] = verify_fn
    result = generate(target, drafter, list(setup.prompt), **kwargs)
    context, worst = tuple(setup.prompt), 0.0
    for rnd in result.trace:
        drafts = tuple(int(x) for x in rnd.draft_tokens)
        Q = q_law.draft_rows(context, drafts)
        if rnd.context_len != len(context) or np.shape(rnd.q_rows) != Q.shape:
            return math.inf
        P = np.stack([p_rows(context + drafts[:i]) for i in range(len(drafts) + 1)])
        worst = max(
            worst,
            float(np.max(np.abs(np.asarray(rnd.q_rows) - Q), initial=0.0)),
            float(np.max(np.abs(np.asarray(rnd.p_rows) - P))),
        )
        context += tuple(int(t) for t in rnd.emitted)
    if context[len(setup.prompt) :] != tuple(int(t) for t in result.tokens):
        return math.inf
    return worst


@dataclass(frozen=True)
class SelfDraftSetup(LoopSetup):
    """A loop setup whose drafter is the target's own: an exit after `exit_layer` blocks,
    `n_heads` extra heads, or an EAGLE block (`eagle`) (random stand-ins for trained ones,
    seeded by `part_seed`), on a target of either family (`family`).

    own_exit_norm: the exit reads the target's own final norm (no head); otherwise a random
    exit head of the family's kind (GPT-2: a LayerNorm, Llama: an RMSNorm) and an adapter.
    feature_layers: EAGLE-3's (None: EAGLE-1, the top feature only)."""

    exit_layer: int = 0
    n_heads: int = 0
    part_seed: int = 0
    eagle: bool = False
    own_exit_norm: bool = False
    feature_layers: tuple[int, ...] | None = None

    def eagle_params(self) -> dict:
        cfg = self.target_model().config
        rng = np.random.default_rng(self.part_seed)
        params = init_eagle_params(cfg, rng, std=0.5, feature_layers=self.feature_layers)
        C = cfg.n_embd
        params["fc.weight"][:C] *= EAGLE_TOKEN_GAIN  # the rows that read e(x(t+1))
        if isinstance(cfg, LlamaConfig):
            params["model.layers.0.self_attn.o_proj.weight"] *= EAGLE_ATTENTION_GAIN
        else:
            params["h.0.attn.c_proj.weight"] *= EAGLE_ATTENTION_GAIN
        return params

    def exit_head(self) -> dict:
        if self.own_exit_norm:
            return {}
        head = random_exit_head(self.target[0], self.part_seed)
        if self.family == "llama":  # an RMSNorm: the stand-in LayerNorm's gain, no bias
            head["exit.norm.weight"] = head.pop("exit.ln.weight")
            del head["exit.ln.bias"]
        return head

    def heads(self) -> dict:
        return random_heads(self.target[0], self.n_heads, self.part_seed)

    def make_drafter(self):
        if self.eagle:
            target, params = self.target_model(), self.eagle_params()
            return EagleDrafter(target, params, feature_layers=self.feature_layers)
        if self.exit_layer:
            return EarlyExitDrafter(self.target_model(), self.exit_layer, self.exit_head())
        return HeadsDrafter(self.target_model(), self.heads())

    def draft_law(self, sampling: SamplingParams):
        target = self.target_model()
        if self.eagle:
            params, layers = self.eagle_params(), self.feature_layers
            return EagleProposals(target, params, sampling, feature_layers=layers)
        if self.exit_layer:
            return ExitRows(target, self.exit_layer, self.exit_head(), sampling)
        return HeadsProposals(target, self.heads(), sampling)


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
    target=SELF_TARGET,
    family="gpt2",
    own_exit_norm=False,
    feature_layers=None,
):
    return SelfDraftSetup(
        name,
        5,
        target,
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
        family=family,
        own_exit_norm=own_exit_norm,
        feature_layers=feature_layers,
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

# The Llama family's target (laws.tiny_llama's numbers): two blocks, 4 query heads sharing 2
# key/value heads, untied lm_head (tests/distribution/test_llama_self_drafting_law.py)
LLAMA_SELF_TARGET = (16, 2, 4, 0.6, 51)


def llama_self_setup(name, sampling, k, max_new_tokens, prompt, **kwargs) -> SelfDraftSetup:
    # self_setup on the Llama target (the drafters' stand-ins of the Llama kind)
    return self_setup(
        name, sampling, k, max_new_tokens, prompt, target=LLAMA_SELF_TARGET, family="llama",
        **kwargs,
    )  # fmt: skip

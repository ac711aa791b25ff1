"""Train an EAGLE drafter (reference/eagle.py) on the frozen bundled target.

    python -m specdec.training.train_eagle --out models/eagle [--variant eagle-1|eagle-3|both]
    python -m specdec.training.train_eagle --target DIR --out DIR2 --windows 64  (any family)

A Llama-family --target (llama, qwen2, mistral) gets a Llama decoder layer as its block
(eagle_llama.py), trained by the same `train` and `unroll` below on the target's states
computed by the NumPy reference (llama_states.py), and a shorter evaluation (`main_llama`).
What follows describes the GPT-2 target.

What is trained: a fusion layer and one transformer block (the target's width C), nothing
else. The drafter reads the target's own features and the token that followed them:

    g(t)     = [e(x(t+1)); feat(t)] W + b       e = the target's tied embedding (frozen)
    f^(t+1)  = Block(g(0..t))[t]                causal; no position embedding is added: the
                                                block reads fused rows only, their position
                                                is in the target's features
    q        = softmax(ln_f(f^(t+1)) @ wte^T)   the target's ln_f and output layer (frozen)

feat(t) is the target's residual stream at position t BEFORE ln_f (EAGLE-1: the top, after
all 6 blocks), or, for EAGLE-3, reduce([f_2(t); f_4(t); f_6(t)]), the residuals after
blocks 2, 4 and 6 (a low, a middle and the top layer) mapped to C by one more linear layer.
The target never changes: its residuals and log-probabilities are computed once, here, by a
torch copy of reference/model.py's forward (the same weights, the same layout), on windows
of the training split. (Hugging Face's last `hidden_states` entry is AFTER ln_f, which is
why this module runs the blocks itself rather than asking the HF model.)

Losses (p = the target's distribution at T = 1, q = the drafter's):

* EAGLE-1: one step, teacher-forced on true features: smooth-L1(f^(t+1), f(t+1)) +
  kl_weight * KL(p(t+1) || q(t+1)). The regression keeps f^ a feature the next draft step
  can read; the KL is what acceptance rewards (alpha = sum_x min(p, q)).
* EAGLE-3 ("training-time test"): the drafter unrolled `--unroll` steps on its own outputs;
  loss = mean over steps of KL (no feature regression: f^ is free to be whatever the next
  step reads best).

The unrolled steps and their attention (the scheme that equals drafting). Index chains by c,
the position of the last committed token x(c): the drafter has true-feature rows 0..c-1
(catch-up rows: row t reads x(t+1) and feat(t)) and drafts x(c+1), x(c+2), ...

    step 1, row t (all t):   token x(t+1), feature feat(t), causal over rows 0..t
                             -> f^(t+1); chain c's first draft reads row c-1
    step j >= 2, chain c:    token x(c+j-1) (the TRUE token: in a round the draft is judged
                             only where it equalled the target's), feature = chain c's
                             output of step j-1 (step 1: row c-1's);
                             attends to the step-1 rows 0..c-1 (the committed cache) and to
                             chain c's own rows of steps 2..j (the earlier draft rows), as a
                             draft row at inference attends to the catch-up rows and the
                             earlier drafts -- and to nothing else
                             -> f^(c+j-1), judged against p(c+j-1)

Keys and values of every step are kept, so step j costs one block over T rows attending to
j*T keys under that mask; gradients flow through all steps.

Evaluation (held-out files, the same for every drafter): for every chain c of a held-out
window, the target's own continuation y_1..y_k (k = 5) is computed by the same masked
scheme (the target extends each chain by one token per pass); the drafter runs as it drafts
(step 1 from true features, later steps from its own f^, tokens y_j);

* greedy: y = the target's argmax chain; alpha_j = P(argmax q_j = y_j | drafts 1..j-1
  accepted), the per-position acceptance of a greedy round;
* T = 0.8: y sampled from the target at T = 0.8; alpha_j = mean sum_x min(p_T, q_T) at
  position j of that chain (the acceptance probability of draft j when the context so far
  followed the target's own law).

The extra heads and the early exit (models/self_draft/) are measured by the same protocol
on the same chains: early exit reads the target's residual after 2 blocks at each chain
position (what it computes when its drafts are the chain's tokens), head i reads h at c-1.
The exported float16 weights are then checked with the NumPy drafter (reference.eagle) and
speculative_generate on held-out prompts. Weights ship in float16; metadata.json records
how both variants were made and what each measured.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from reference import speculative_generate
from reference.eagle import EagleDrafter
from reference.llama import Llama
from reference.sampling import SamplingParams
from reference.weights import load_gpt2, load_model, read_safetensors, write_safetensors
from specdec.training.corpus import load_corpus, sample_windows
from specdec.training.eagle_llama import (
    LlamaEagle,
    llama_variants,
    numpy_round_check,
    one_step_alpha,
)
from specdec.training.llama_states import check_state_room, corpus_tokens, llama_states

ROOT = Path(__file__).resolve().parents[2]
TARGET_DIR = ROOT / "models" / "target"
SELF_DRAFT_DIR = ROOT / "models" / "self_draft"
VARIANTS = {"eagle-1": (6,), "eagle-3": (2, 4, 6)}  # feature_layers for the bundled 6 blocks
BLOCK_PARTS = (  # one block's parameters, named as reference/model.py names block i
    "ln_1.weight",
    "ln_1.bias",
    "attn.c_attn.weight",
    "attn.c_attn.bias",
    "attn.c_proj.weight",
    "attn.c_proj.bias",
    "ln_2.weight",
    "ln_2.bias",
    "mlp.c_fc.weight",
    "mlp.c_fc.bias",
    "mlp.c_proj.weight",
    "mlp.c_proj.bias",
)


# ---------------------------------------------------------------- the forward, in torch


def torch_params(params: dict) -> dict[str, torch.Tensor]:
    # NumPy params (reference layout: y = x @ W + b) -> float32 tensors, frozen
    return {n: torch.from_numpy(np.asarray(v, np.float32)).clone() for n, v in params.items()}


def layer_norm(x: torch.Tensor, P: dict, name: str, eps: float) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], P[name + ".weight"], P[name + ".bias"], eps)


def block(x, P: dict, i: int, n_head: int, eps: float, mask, past=()):
    # x [B, T, C] -> (out [B, T, C], (k, v) [B, nh, T, hs]): reference/model.py's block.
    # past: the (k, v) of earlier passes, attended before these rows' own; mask [T, S + T]
    # bool, True = may attend (S = the past's keys). Pre-LN, tanh GELU, as GPT-2.
    h = f"h.{i}."
    B, T, C = x.shape
    qkv = (
        layer_norm(x, P, h + "ln_1", eps) @ P[h + "attn.c_attn.weight"] + P[h + "attn.c_attn.bias"]
    )
    q, k, v = (
        qkv[..., j * C : (j + 1) * C].reshape(B, T, n_head, C // n_head).transpose(1, 2)
        for j in range(3)
    )
    keys = torch.cat([kv[0] for kv in past] + [k], dim=2)
    values = torch.cat([kv[1] for kv in past] + [v], dim=2)
    a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
    a = a.transpose(1, 2).reshape(B, T, C)
    x = x + a @ P[h + "attn.c_proj.weight"] + P[h + "attn.c_proj.bias"]
    m = F.gelu(
        layer_norm(x, P, h + "ln_2", eps) @ P[h + "mlp.c_fc.weight"] + P[h + "mlp.c_fc.bias"],
        approximate="tanh",
    )
    return x + m @ P[h + "mlp.c_proj.weight"] + P[h + "mlp.c_proj.bias"], (k, v)


def causal(T: int) -> torch.Tensor:  # -> [T, T] bool: row t sees rows 0..t
    return torch.ones(T, T, dtype=torch.bool).tril()


def chain_mask(T: int, steps: int, last: int) -> torch.Tensor:
    # -> [T, steps * T] bool for chain c's row at pass `steps` >= 2: the first pass's rows
    # 0..c + last (last = 0 for the target, whose first pass holds x(0..c); -1 for the
    # drafter, whose catch-up rows end at c - 1) and chain c's own rows of passes 2..steps
    c = torch.arange(T)
    first = torch.arange(T)[None, :] <= (c + last)[:, None]
    own = torch.eye(T, dtype=torch.bool)
    return torch.cat([first] + [own] * (steps - 1), dim=1)


@torch.no_grad()
def target_states(P: dict, cfg, windows: np.ndarray, layers, batch: int = 16) -> dict:
    # windows [W, T] -> {"f{l}": [W, T, C] residual after l blocks (pre-ln_f for l = n_layer),
    # "logp": [W, T, V] the target's log-probabilities at T = 1}
    out = {f"f{l}": [] for l in layers} | {"logp": []}
    for i in range(0, len(windows), batch):
        x = torch.from_numpy(windows[i : i + batch].astype(np.int64))
        res, _ = target_pass(P, cfg, x, torch.arange(x.shape[1]), causal(x.shape[1]), None)
        for l in layers:
            out[f"f{l}"].append(res[l])
        out["logp"].append(target_logp(P, cfg, res[cfg.n_layer]))
    return {n: torch.cat(parts) for n, parts in out.items()}


def target_pass(P: dict, cfg, tokens, positions, mask, past):
    # tokens [B, T] at wpe rows `positions` [T] -> ({l: residual after l blocks [B, T, C]},
    # [(k, v) per block]); past: per block, the earlier passes' (k, v) list (None: none)
    x = P["wte.weight"][tokens] + P["wpe.weight"][positions]
    res, kvs = {0: x}, []
    for i in range(cfg.n_layer):
        x, kv = block(
            x, P, i, cfg.n_head, cfg.layer_norm_epsilon, mask, () if past is None else past[i]
        )
        res[i + 1] = x
        kvs.append(kv)
    return res, kvs


def target_logp(P: dict, cfg, f: torch.Tensor) -> torch.Tensor:
    # pre-ln_f residual [..., C] -> log p [..., V] at T = 1
    return F.log_softmax(layer_norm(f, P, "ln_f", cfg.layer_norm_epsilon) @ P["wte.weight"].T, -1)


@torch.no_grad()
def target_chain(P: dict, cfg, windows: np.ndarray, k: int, pick, batch: int = 8) -> dict:
    # windows [W, T] -> for every chain c (context x(0..c)) the target's own continuation:
    # {"y": [W, k, T] tokens, "logp": [W, k, T, V] p of each chain position given the
    # chain so far, "f2": [W, k, T, C] the residual after 2 blocks there (early exit's
    # input), "h": [W, T, C] the final hidden state ln_f(f) of the true positions (heads)}.
    # pick(logp [B, T, V]) -> tokens [B, T]: argmax (greedy) or a draw at T.
    out = {"y": [], "logp": [], "f2": [], "h": []}
    for i in range(0, len(windows), batch):
        x = torch.from_numpy(windows[i : i + batch].astype(np.int64))
        T = x.shape[1]
        res, kvs = target_pass(P, cfg, x, torch.arange(T), causal(T), None)
        past = [[kv] for kv in kvs]
        out["h"].append(layer_norm(res[cfg.n_layer], P, "ln_f", cfg.layer_norm_epsilon))
        logp = [target_logp(P, cfg, res[cfg.n_layer])]
        f2 = [res[2]]
        y = [pick(logp[-1])]
        for j in range(2, k + 1):  # chain c's j-th token sits at position c + j - 1
            res, kvs = target_pass(
                P, cfg, y[-1], torch.arange(T) + j - 1, chain_mask(T, j, 0), past
            )
            for layer, kv in zip(past, kvs, strict=True):
                layer.append(kv)
            logp.append(target_logp(P, cfg, res[cfg.n_layer]))
            f2.append(res[2])
            y.append(pick(logp[-1]))
        out["y"].append(torch.stack(y, 1))
        out["logp"].append(torch.stack(logp, 1))
        out["f2"].append(torch.stack(f2, 1))
    return {n: torch.cat(parts) for n, parts in out.items()}


# ---------------------------------------------------------------------------- the drafter


class Eagle(torch.nn.Module):
    """fc + one block (+ reduce for EAGLE-3) in reference/eagle.py's layout: y = x @ W + b."""

    def __init__(self, P: dict, cfg, feature_layers, gen: torch.Generator) -> None:
        super().__init__()
        C = cfg.n_embd
        self.cfg, self.feature_layers = cfg, tuple(feature_layers)
        self.frozen = {n: P[n] for n in ("wte.weight", "ln_f.weight", "ln_f.bias")}
        # fc starts as the identity on the feature half: g(t) = feat(t) + a little of e, so
        # the block starts on rows of the scale it will read
        w = torch.randn(2 * C, C, generator=gen) * 0.02
        w[C:] += torch.eye(C)
        self.fc_w, self.fc_b = torch.nn.Parameter(w), torch.nn.Parameter(torch.zeros(C))
        L = len(self.feature_layers)
        if L > 1:  # reduce starts as "take the top layer": the EAGLE-1 input, then learns
            r = torch.randn(L * C, C, generator=gen) * 0.02
            r[(L - 1) * C :] += torch.eye(C)
            self.reduce_w, self.reduce_b = torch.nn.Parameter(r), torch.nn.Parameter(torch.zeros(C))
        self.block = torch.nn.ParameterDict()
        for part in BLOCK_PARTS:  # GPT-2's init: N(0, 0.02), output projections scaled down
            shape = block_shape(part, C)
            if part.startswith("ln_") and part.endswith("weight"):
                value = torch.ones(shape)
            elif part.endswith("bias"):
                value = torch.zeros(shape)
            else:
                std = 0.02 / math.sqrt(2) if part.endswith("c_proj.weight") else 0.02
                value = torch.randn(shape, generator=gen) * std
            self.block[part.replace(".", "_")] = torch.nn.Parameter(value)

    def true_feature(self, feats: torch.Tensor) -> torch.Tensor:
        # feats [B, T, L * C] (the layers concatenated, top last) -> feat [B, T, C]
        if len(self.feature_layers) == 1:
            return feats
        return feats @ self.reduce_w + self.reduce_b

    def fuse(self, tokens: torch.Tensor, feat: torch.Tensor) -> torch.Tensor:
        # tokens [B, T] (x(t+1)), feat [B, T, C] (of t) -> g [B, T, C]
        return torch.cat([self.frozen["wte.weight"][tokens], feat], -1) @ self.fc_w + self.fc_b

    def run_block(self, g, mask, past=(), positions=None):
        # g [B, T, C] -> (f^ [B, T, C], (k, v)); no position embedding (reference/eagle.py):
        # the rows' positions are not read (a Llama layer's are: eagle_llama.py)
        P = {"h.0." + part: self.block[part.replace(".", "_")] for part in BLOCK_PARTS}
        return block(g, P, 0, self.cfg.n_head, self.cfg.layer_norm_epsilon, mask, past)

    def logq(self, f_hat: torch.Tensor) -> torch.Tensor:
        # f^ [..., C] -> log q [..., V] at T = 1: the target's ln_f and tied output layer
        h = layer_norm(f_hat, self.frozen, "ln_f", self.cfg.layer_norm_epsilon)
        return F.log_softmax(h @ self.frozen["wte.weight"].T, -1)

    def arrays(self) -> dict[str, torch.Tensor]:
        # the names and shapes reference/eagle.py reads (already x @ W: nothing transposed)
        out = {"fc.weight": self.fc_w, "fc.bias": self.fc_b}
        out |= {"h.0." + part: self.block[part.replace(".", "_")] for part in BLOCK_PARTS}
        if len(self.feature_layers) > 1:
            out |= {"reduce.weight": self.reduce_w, "reduce.bias": self.reduce_b}
        return out


def block_shape(part: str, C: int) -> tuple[int, ...]:
    shapes = {
        "attn.c_attn.weight": (C, 3 * C),
        "attn.c_attn.bias": (3 * C,),
        "attn.c_proj.weight": (C, C),
        "mlp.c_fc.weight": (C, 4 * C),
        "mlp.c_fc.bias": (4 * C,),
        "mlp.c_proj.weight": (4 * C, C),
    }
    return shapes.get(part, (C,))


def unroll(model: Eagle, tokens, feats, chain_tokens, chains=None) -> list[torch.Tensor]:
    # tokens [B, T] the window, feats [B, T, L * C] its true features, chain_tokens: for
    # steps 2..s, [B, T - 1] the token chain c reads at that step; chains: the chains c to
    # unroll (int64 [N], increasing; None = all T - 1) -> [f^ of step 1 by row t [B, T-1, C]
    # (predicts p(t+1)), then for steps j = 2..s f^ by chain [B, N, C] (predicts
    # p(c + j - 1))]. Chains never see each other (module docstring), so a subset is exact.
    T1 = tokens.shape[1] - 1
    chains = torch.arange(T1) if chains is None else chains
    # positions (read by a Llama layer's RoPE): step 1's row t sits at t; chain c's row of
    # step j at c + j - 2, the slot the NumPy drafter writes that draft row at
    out, kv = model.run_block(
        model.fuse(tokens[:, 1:], model.true_feature(feats[:, :-1])),
        causal(T1),
        (),
        torch.arange(T1),
    )
    outs, past = [out], [kv]
    first = torch.cat([out.new_zeros(out[:, :1].shape), out[:, :-1]], 1)  # chain c: row c-1's
    prev = first[:, chains]
    for j, toks in enumerate(chain_tokens, start=2):
        own = torch.eye(len(chains), dtype=torch.bool)  # chain c's rows of steps 2..j
        mask = torch.cat([chain_mask(T1, 1, -1)[chains]] + [own] * (j - 1), 1)
        prev, kv = model.run_block(model.fuse(toks[:, chains], prev), mask, past, chains + j - 2)
        outs.append(prev)
        past.append(kv)
    return outs


def true_chain_tokens(tokens: torch.Tensor, steps: int) -> list[torch.Tensor]:
    # tokens [B, T] -> for steps 2..steps: [B, T - 1], chain c's true token x(c + j - 1)
    # (0 past the window's end, where no loss is taken)
    B, T = tokens.shape
    pad = torch.cat([tokens, tokens.new_zeros(B, steps)], 1)
    return [pad[:, j - 1 : j - 1 + T - 1] for j in range(2, steps + 1)]


def kl_rows(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    # [..., V] x2 -> [...]: KL(p || q) = sum_x p(x) (log p(x) - log q(x))
    return (logp.exp() * (logp - logq)).sum(-1)


def losses(model: Eagle, tokens, feats, logp, variant: str, args, gen: torch.Generator):
    # one batch of windows -> (loss to minimise, {"kl": per step, "reg": ...} as floats).
    # EAGLE-3 unrolls args.chains random chains per window (all of them cost the same per
    # row as step 1 does; a sample keeps the unroll from tripling the step's time)
    T1 = tokens.shape[1] - 1
    n = 1 if variant == "eagle-1" else args.unroll
    # chains whose every unrolled step has a committed row before and p inside the window
    pool = torch.arange(1, min(T1, T1 - n + 2))
    chains = pool[torch.randperm(len(pool), generator=gen)[: args.chains]].sort().values
    outs = unroll(model, tokens, feats, true_chain_tokens(tokens, n), chains)
    kls = [kl_rows(logp[:, 1:], model.logq(outs[0].float())).mean()]
    for j, out in enumerate(outs[1:], start=2):
        kls.append(kl_rows(logp[:, chains + j - 1], model.logq(out.float())).mean())
    report = {"kl": [float(v.detach()) for v in kls]}
    if variant == "eagle-1":
        top = feats[..., -model.cfg.n_embd :]  # f(t+1), the top layer's (pre-ln_f) feature
        reg = F.smooth_l1_loss(outs[0].float(), top[:, 1:])
        report["reg"] = float(reg.detach())
        return reg + args.kl_weight * kls[0], report
    return torch.stack(kls).mean(), report


def features_of(states: dict, layers) -> torch.Tensor:
    # -> [W, T, L * C]: the layers concatenated in order (the top last), as observe_features
    return torch.cat([states[f"f{l}"] for l in layers], -1)


def train(model: Eagle, states: dict, args, variant: str) -> dict:
    # -> the training record; the model trained in place (AdamW, warm-up, cosine to 10 %,
    # bf16 autocast when args.bf16: the probe below says it is 3x faster on this CPU)
    feats, logp = features_of(states, model.feature_layers), states["logp"]
    tokens = states["tokens"]
    gen = torch.Generator().manual_seed(args.seed + (3 if variant == "eagle-3" else 1))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    started, curve, step = time.perf_counter(), [], 0
    report: dict = {}
    while step < args.steps:
        spent = max(step / args.steps, (time.perf_counter() - started) / 60 / args.minutes)
        if spent >= 1:
            break
        warm = min(1.0, (step + 1) / 50)
        for group in opt.param_groups:
            group["lr"] = args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * spent)))
        idx = torch.randint(0, len(tokens), (args.batch,), generator=gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss, report = losses(model, tokens[idx], feats[idx], logp[idx], variant, args, gen)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step % 25 == 0 or step == 1:
            curve.append({"step": step, "loss": round(float(loss.detach()), 4)} | rounded(report))
            print(f"  {variant} step {step}: {curve[-1]}", flush=True)
    return {
        "steps": step,
        "train_minutes": round((time.perf_counter() - started) / 60, 2),
        "final_loss": round(float(loss.detach()), 4),
        "final": rounded(report),
        "curve": curve,
    }


def rounded(report: dict) -> dict:
    return {
        n: [round(v, 4) for v in x] if isinstance(x, list) else round(x, 4)
        for n, x in report.items()
    }


# ---------------------------------------------------------------------------- evaluation


def greedy_pick(logp: torch.Tensor) -> torch.Tensor:
    return logp.argmax(-1)


def sampled_pick(temperature: float, gen: torch.Generator):
    def pick(logp: torch.Tensor) -> torch.Tensor:  # [B, T, V] -> [B, T] drawn from p_T
        probs = F.softmax(logp / temperature, -1)
        return torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=gen).reshape(
            probs.shape[:-1]
        )

    return pick


@torch.no_grad()
def eagle_chain_logq(model: Eagle, windows, feats, chain: dict) -> torch.Tensor:
    # -> log q [W, k, T - 1, V] by chain c: the drafter as it drafts (step 1 from true
    # features, then its own f^), fed the chain's tokens y_1..y_{k-1}
    x = torch.from_numpy(windows.astype(np.int64))
    k = chain["y"].shape[1]
    rows = []
    for i in range(0, len(x), 8):
        outs = unroll(
            model,
            x[i : i + 8],
            feats[i : i + 8],
            [chain["y"][i : i + 8, j - 2, :-1] for j in range(2, k + 1)],
        )
        first = torch.cat([outs[0][:, :1] * 0, outs[0][:, :-1]], 1)  # chain c: row c-1
        rows.append(torch.stack([model.logq(o) for o in [first] + outs[1:]], 1))
    return torch.cat(rows)


def position_alphas(logp, logq, y, temperature: float | None, valid) -> list[float]:
    # logp/logq [W, k, N, V] along the chains, y [W, k, N] the chain's tokens, valid [N]
    # -> alpha per draft position 1..k (greedy: conditional acceptance; else sum min(p_T, q_T))
    k = logp.shape[1]
    if temperature is None:
        hit = logq.argmax(-1) == y  # [W, k, N]
        alive = torch.cumprod(hit.float(), 1)[..., valid]  # drafts 1..j all accepted
        reached = torch.cat([torch.ones_like(alive[:, :1]), alive[:, :-1]], 1)
        return [float(alive[:, j].sum() / reached[:, j].sum()) for j in range(k)]
    p, q = F.softmax(logp / temperature, -1), F.softmax(logq / temperature, -1)
    overlap = torch.minimum(p, q).sum(-1)[..., valid]
    return [float(overlap[:, j].mean()) for j in range(k)]


def load_self_draft(directory: Path) -> dict:
    # -> {"exit": {...} (exit after 2 blocks), "heads": {...}} as tensors; {} when absent
    parts = {}
    if (directory / "exit-2.safetensors").is_file():
        parts["exit"] = torch_params(read_safetensors(directory / "exit-2.safetensors"))
    if (directory / "heads.safetensors").is_file():
        parts["heads"] = torch_params(read_safetensors(directory / "heads.safetensors"))
    return parts


def exit_logq(E: dict, wte: torch.Tensor, x2: torch.Tensor, eps: float) -> torch.Tensor:
    # the exit head (reference/early_exit.py): ln(x + x W + b) @ wte^T
    z = x2 + x2 @ E["exit.proj.weight"] + E["exit.proj.bias"]
    return F.log_softmax(layer_norm(z, E, "exit.ln", eps) @ wte.T, -1)


def heads_logq(H: dict, wte: torch.Tensor, h: torch.Tensor, k: int) -> torch.Tensor:
    # h [W, T, C] final hidden -> log q [W, k', T - 1, V] by chain c (head i reads h(c-1))
    prev = torch.cat([h[:, :1] * 0, h[:, :-2]], 1)  # chain c = 0..T-2 reads row c-1
    rows = []
    for i in range(min(k, len(H) // 2)):
        z = prev + F.silu(prev @ H[f"heads.{i}.weight"] + H[f"heads.{i}.bias"])
        rows.append(F.log_softmax(z @ wte.T, -1))
    return torch.stack(rows, 1)


@torch.no_grad()
def evaluate(models: dict, P, cfg, windows, states, args, self_draft: dict) -> dict:
    # -> {name: {"greedy": [alpha_1..k], "T0.8": [...]}} for each drafter, same chains
    T = windows.shape[1]
    valid = torch.arange(T - 1) >= 1  # chains with a committed row before them
    gen = torch.Generator().manual_seed(args.seed + 7)
    out: dict = {}
    for label, temperature, pick in (
        ("greedy", None, greedy_pick),
        (
            f"T{args.eval_temperature}",
            args.eval_temperature,
            sampled_pick(args.eval_temperature, gen),
        ),
    ):
        chain = target_chain(P, cfg, windows, args.k, pick)
        logp, y = chain["logp"][:, :, :-1], chain["y"][:, :, :-1]
        for name, model in models.items():
            logq = eagle_chain_logq(
                model, windows, features_of(states, model.feature_layers), chain
            )
            out.setdefault(name, {})[label] = position_alphas(logp, logq, y, temperature, valid)
        eps, wte = cfg.layer_norm_epsilon, P["wte.weight"]
        if "exit" in self_draft:
            logq = exit_logq(self_draft["exit"], wte, chain["f2"][:, :, :-1], eps)
            out.setdefault("early-exit (L'=2)", {})[label] = position_alphas(
                logp, logq, y, temperature, valid
            )
        if "heads" in self_draft:
            logq = heads_logq(self_draft["heads"], wte, chain["h"], args.k)
            n = logq.shape[1]
            out.setdefault("extra heads", {})[label] = position_alphas(
                logp[:, :n], logq, y[:, :n], temperature, valid
            )
    for row in out.values():
        for label in list(row):
            row[label] = [round(a, 4) for a in row[label]]
            row[f"mean_{label}"] = round(float(np.mean(row[label])), 4)
            # drafts accepted per round if each position's alpha held independently
            row[f"accepted_per_round_{label}"] = round(float(np.sum(np.cumprod(row[label]))), 3)
    return out


# ------------------------------------------------------------------ the NumPy check, export


def export_arrays(model: Eagle) -> dict[str, np.ndarray]:
    return {n: a.detach().float().numpy().astype(np.float16) for n, a in model.arrays().items()}


def eagle_from_arrays(P: dict, cfg, feature_layers, arrays: dict) -> Eagle:
    # the torch drafter holding exactly the exported (float16) weights, as float32
    model = Eagle(P, cfg, feature_layers, torch.Generator().manual_seed(0))
    with torch.no_grad():
        for name, value in model.arrays().items():
            value.copy_(torch.from_numpy(np.asarray(arrays[name], np.float32)))
    return model


def torch_q_of_round(model: Eagle, P, cfg, context: np.ndarray, drafts: np.ndarray, T: float):
    # the torch drafter's q rows [k, V] at temperature T for one round: context [n] (the
    # committed tokens), the round's drafts [k] as the chain's tokens
    n, k = len(context), len(drafts)
    windows = np.concatenate([context, [0]])[None]  # chain c = n - 1 must not be the last row
    states = target_states(P, cfg, windows, model.feature_layers)
    y = torch.zeros(1, k, n + 1, dtype=torch.int64)
    y[0, :, n - 1] = torch.from_numpy(np.asarray(drafts, np.int64))
    logq = eagle_chain_logq(model, windows, features_of(states, model.feature_layers), {"y": y})
    return F.softmax(logq[0, :, n - 1] / T, -1).numpy()


def numpy_check(
    target, arrays: dict, feature_layers, prompts, k: int, new_tokens: int, temperature: float
) -> dict:
    # the exported float16 weights through reference.eagle and speculative_generate, per
    # draft position over the rounds that reached it: greedy, the acceptance rate; T = 0.8,
    # the mean sum_x min(p, q) of the rows examined (the torch figures' counterparts). And
    # the same rounds redone by the torch drafter holding the same float16 weights: its q
    # rows at T against the NumPy drafter's (max |difference|), its argmax against the
    # greedy drafts (the fraction equal): the exported weights ARE the measured drafter
    params = {n: a.astype(np.float32) for n, a in arrays.items()}
    drafter = EagleDrafter(target, params, feature_layers=tuple(feature_layers))
    cfg, P = target.config, torch_params(target.params)
    model = eagle_from_arrays(P, cfg, feature_layers, arrays)
    out, q_diff, same, drafted = {}, 0.0, 0, 0
    runs = (("greedy", SamplingParams(0.0)), (f"T{temperature}", SamplingParams(temperature)))
    for label, sampling in runs:
        reached, accepted, overlap, tokens, rounds = np.zeros(k), np.zeros(k), np.zeros(k), 0, 0
        for i, prompt in enumerate(prompts):
            drafter.reset()
            r = speculative_generate(
                target,
                drafter,
                prompt,
                k=k,
                max_new_tokens=new_tokens,
                rng=np.random.default_rng(i),
                sampling=sampling,
                trace=True,
            )
            for rnd in r.trace:  # position j is examined when drafts 1..j-1 were accepted
                n = min(rnd.accepted + 1, len(rnd.draft_tokens))
                reached[:n] += 1
                accepted[: rnd.accepted] += 1
                overlap[:n] += np.minimum(rnd.p_rows[:n], rnd.q_rows[:n]).sum(-1)
                done = np.asarray(r.tokens[: rnd.context_len - len(prompt)], np.int64)
                context = np.concatenate([np.asarray(prompt, np.int64), done])
                if len(rnd.draft_tokens) == 0:
                    continue
                q = torch_q_of_round(model, P, cfg, context, rnd.draft_tokens, temperature)
                if sampling.temperature == 0:
                    same += int((q.argmax(-1) == rnd.draft_tokens).sum())
                    drafted += len(rnd.draft_tokens)
                else:
                    q_diff = max(q_diff, float(np.abs(q - rnd.q_rows).max()))
            tokens += len(r.tokens)
            rounds += len(r.trace)
        by_position = accepted if label == "greedy" else overlap
        rates = by_position / np.maximum(reached, 1)
        out[label] = [round(float(a), 4) for a in rates]
        out[f"tokens_per_round_{label}"] = round(tokens / max(rounds, 1), 3)
    return out | {
        "torch_vs_numpy_max_abs_q_difference": float(f"{q_diff:.2e}"),
        "torch_argmax_equals_numpy_greedy_draft": round(same / max(drafted, 1), 4),
        "prompts": len(prompts),
        "new_tokens_each": new_tokens,
        "k": k,
    }


def machine(threads: int) -> str:
    # "AMD EPYC, 2 cores, torch threads = 1": the CPU's model name where Linux tells it
    name = platform.processor() or platform.machine()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        names = (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
        name = next(names)
    except (OSError, StopIteration):
        pass
    return f"{name}, {os.cpu_count()} cores, torch threads = {threads}"


def relative(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("models/eagle"), help="(default: %(default)s)")
    ap.add_argument("--target", type=Path, default=TARGET_DIR, help="the frozen target")
    ap.add_argument("--variant", choices=("eagle-1", "eagle-3", "both"), default="both")
    ap.add_argument("--windows", type=int, default=768, help="training windows (%(default)s)")
    ap.add_argument("--length", type=int, default=256, help="tokens per window (%(default)s)")
    ap.add_argument("--held-windows", type=int, default=32, help="held-out windows (%(default)s)")
    ap.add_argument(
        "--steps", type=int, default=100_000, help="optimiser steps at most (%(default)s)"
    )
    ap.add_argument("--minutes", type=float, default=11.0, help="cap per variant (%(default)s)")
    ap.add_argument("--batch", type=int, default=8, help="windows per step (%(default)s)")
    ap.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (%(default)s)")
    ap.add_argument("--kl-weight", type=float, default=1.0, help="EAGLE-1's KL weight")
    ap.add_argument("--unroll", type=int, default=3, help="EAGLE-3's unrolled steps")
    ap.add_argument("--chains", type=int, default=64, help="EAGLE-3's chains unrolled per window")
    ap.add_argument("--k", type=int, default=5, help="draft positions evaluated (%(default)s)")
    ap.add_argument("--eval-temperature", type=float, default=0.8)
    ap.add_argument("--no-bf16", dest="bf16", action="store_false", help="train in float32")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (%(default)s)")
    ap.add_argument("--check-prompts", type=int, default=4, help="NumPy check prompts")
    ap.add_argument("--check-tokens", type=int, default=96, help="new tokens per check prompt")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument(
        "--recheck",
        action="store_true",
        help="train nothing: redo the NumPy check of the weights already in --out (the "
        "settings and held-out prompts of the run that wrote them) and update metadata.json",
    )
    return ap.parse_args(argv)


def held_out_windows(corpus, hp: dict) -> np.ndarray:
    # -> [held_windows, length]: the held-out windows of the run with hyperparameters hp
    # (the same generator draws: the training windows first)
    rng = np.random.default_rng(hp["seed"])
    sample_windows(corpus.train, hp["windows"], hp["length"] - 1, rng)
    return sample_windows(corpus.held_out, hp["held_windows"], hp["length"] - 1, rng)


def recheck(args) -> None:
    # the NumPy check of the weights in args.out, with the settings that made them
    meta_path, weights = args.out / "metadata.json", args.out / "eagle.safetensors"
    if not (meta_path.is_file() and weights.is_file()):
        raise FileNotFoundError(
            f"--recheck needs {weights} and {meta_path}; write them first with "
            f"`python -m specdec.training.train_eagle --out {args.out}`"
        )
    meta = json.loads(meta_path.read_text())
    hp, target = meta["hyperparameters"], load_gpt2(args.target)
    held = held_out_windows(load_corpus(), hp)
    prompts = [held[i, :48] for i in range(hp["check_prompts"])]
    arrays = read_safetensors(weights)  # float16 values, as float32
    meta["numpy_check"] = numpy_check(
        target,
        arrays,
        meta["feature_layers"],
        prompts,
        hp["k"],
        hp["check_tokens"],
        hp["eval_temperature"],
    )
    meta["numpy_check"]["command"] = "python -m specdec.training.train_eagle --recheck --out " + (
        relative(args.out)
    )
    print(f"NumPy check ({meta['variant']}): {meta['numpy_check']}", flush=True)
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    if args.recheck:
        return recheck(args)
    started = time.perf_counter()
    target = load_model(args.target)
    if isinstance(target, Llama):
        return main_llama(args, target, argv)
    cfg, P = target.config, torch_params(target.params)
    variants = ["eagle-1", "eagle-3"] if args.variant == "both" else [args.variant]
    for v in variants:
        if VARIANTS[v][-1] != cfg.n_layer or max(VARIANTS[v]) > cfg.n_layer:
            raise ValueError(f"{v} reads layers {VARIANTS[v]}; the target has {cfg.n_layer} blocks")
    layers = sorted({l for v in variants for l in VARIANTS[v]})

    corpus = load_corpus()
    rng = np.random.default_rng(args.seed)
    train_windows = sample_windows(corpus.train, args.windows, args.length - 1, rng)  # [W, T]
    held = sample_windows(corpus.held_out, args.held_windows, args.length - 1, rng)  # [W', T]
    states = target_states(P, cfg, train_windows, layers)
    states["tokens"] = torch.from_numpy(train_windows.astype(np.int64))
    held_states = target_states(P, cfg, held, layers)
    check_against_reference(target, P, cfg, held[0, :64])
    state_minutes = (time.perf_counter() - started) / 60
    print(
        f"target states: {train_windows.shape} train, {held.shape} held out, "
        f"{state_minutes:.1f} min",
        flush=True,
    )

    models, records = {}, {}
    for v in variants:
        gen = torch.Generator().manual_seed(args.seed)
        models[v] = Eagle(P, cfg, VARIANTS[v], gen)
        records[v] = train(models[v], states, args, v)
        print(
            f"{v}: {records[v]['steps']} steps, {records[v]['train_minutes']} min, "
            f"final {records[v]['final']}",
            flush=True,
        )
    self_draft = load_self_draft(SELF_DRAFT_DIR)
    alphas = evaluate(models, P, cfg, held, held_states, args, self_draft)
    for name, row in alphas.items():
        print(f"{name}: {row}", flush=True)
    label = f"T{args.eval_temperature}"
    score = {v: (alphas[v]["mean_greedy"] + alphas[v][f"mean_{label}"]) / 2 for v in variants}
    best = max(variants, key=score.get)

    arrays = export_arrays(models[best])
    prompts = [held[i, :48] for i in range(args.check_prompts)]
    check = numpy_check(
        target, arrays, VARIANTS[best], prompts, args.k, args.check_tokens, args.eval_temperature
    )
    print(f"NumPy check ({best}, float16 export): {check}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    write_safetensors(args.out / "eagle.safetensors", arrays)
    metadata = {
        "what": "EAGLE drafter for the bundled target: fc + one block (+ reduce for EAGLE-3)",
        "variant": best,
        "feature_layers": list(VARIANTS[best]),
        "target": args.target.name,
        "command": "python -m specdec.training.train_eagle "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "why_this_variant": f"higher mean alpha over draft positions 1..{args.k}, greedy and "
        f"T = {args.eval_temperature} averaged: "
        + ", ".join(f"{v} {s:.4f}" for v, s in score.items()),
        "held_out_alpha": alphas[best],
        "training": records[best],
        "compared": {
            v: {
                "held_out_alpha": alphas[v],
                "training": records[v],
                "feature_layers": list(VARIANTS[v]),
            }
            for v in variants
            if v != best
        },
        "baselines_same_protocol": {n: r for n, r in alphas.items() if n not in variants},
        "numpy_check": check,
        "evaluation": (
            f"{len(held)} held-out windows of {args.length} tokens, every chain c >= 1; the "
            f"target's continuation of each, k = {args.k}: greedy alpha_j = P(argmax q_j = "
            f"argmax p_j | drafts < j accepted) along the target's argmax chain; "
            f"T = {args.eval_temperature}: alpha_j = mean sum_x min(p_T, q_T) along a chain "
            f"sampled from the target at that temperature"
        ),
        "hyperparameters": {
            n: (relative(v) if isinstance(v, Path) else v) for n, v in vars(args).items()
        },
        "train_positions": int(train_windows.size),
        "target_states_minutes": round(state_minutes, 2),
        "minutes": round((time.perf_counter() - started) / 60, 2),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(args.threads),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "weights_dtype": "float16",
    }
    (args.out / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    print(f"wrote {args.out} ({best}) in {metadata['minutes']} min")


def main_llama(args, target: Llama, argv) -> None:
    # A Llama-family target (eagle_llama.py): the same training (`train`: `unroll`, the
    # losses), the target's states from the NumPy reference on its own tokens of the same
    # corpus, and a shorter evaluation: the first draft's agreement on held-out windows
    # (true features), then greedy rounds of the exported drafter in reference.eagle
    cfg = target.config
    started, by_variant = time.perf_counter(), llama_variants(cfg.n_layer)
    variants = list(by_variant) if args.variant == "both" else [args.variant]
    layers = sorted({l for v in variants for l in by_variant[v]})
    if args.length > cfg.n_ctx:
        raise ValueError(f"--length {args.length} exceeds the target's n_ctx {cfg.n_ctx}")
    check_state_room(args.windows + args.held_windows, args.length, target, layers)
    train_stream, held_stream = corpus_tokens(args.target, cfg.n_vocab)
    rng = np.random.default_rng(args.seed)
    train_windows = sample_windows(train_stream, args.windows, args.length - 1, rng)
    held = sample_windows(held_stream, args.held_windows, args.length - 1, rng)
    states, held_states = (
        llama_states(target, train_windows, layers),
        llama_states(target, held, layers),
    )
    print(f"target states: {train_windows.shape} train, {held.shape} held out", flush=True)
    models, records, alphas = {}, {}, {}
    for v in variants:
        models[v] = LlamaEagle(target, by_variant[v], torch.Generator().manual_seed(args.seed))
        records[v] = train(models[v], states, args, v)
        alphas[v] = one_step_alpha(models[v], held_states)
        print(f"{v}: {records[v]['steps']} steps, held out {alphas[v]}", flush=True)
    best = max(variants, key=lambda v: alphas[v]["first_draft_alpha_T1"])
    arrays = export_arrays(models[best])
    prompts = [held[i, : min(48, args.length)] for i in range(min(args.check_prompts, len(held)))]
    check = numpy_round_check(target, arrays, by_variant[best], prompts, args.k, args.check_tokens)
    print(f"NumPy check ({best}, float16 export): {check}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    write_safetensors(args.out / "eagle.safetensors", arrays)
    metadata = {
        "what": f"EAGLE drafter for a {cfg.model_type} target: fc + one Llama layer "
        "(+ reduce for EAGLE-3)",
        "variant": best,
        "feature_layers": list(by_variant[best]),
        "target": args.target.name,
        "command": "python -m specdec.training.train_eagle "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "held_out": alphas,
        "training": records[best],
        "numpy_check": check,
        "hyperparameters": {
            n: (relative(v) if isinstance(v, Path) else v) for n, v in vars(args).items()
        },
        "train_positions": int(train_windows.size),
        "minutes": round((time.perf_counter() - started) / 60, 2),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(args.threads),
        "torch": torch.__version__,
        "weights_dtype": "float16",
    }
    (args.out / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    print(f"wrote {args.out} ({best}) in {metadata['minutes']} min")


def check_against_reference(target, P, cfg, tokens: np.ndarray) -> None:
    # the torch forward must be the reference's: same residual, to float32 rounding
    ref = target.residual(tokens.astype(np.int64))
    x = torch.from_numpy(tokens.astype(np.int64))[None]
    res, _ = target_pass(P, cfg, x, torch.arange(len(tokens)), causal(len(tokens)), None)
    err = float((res[cfg.n_layer][0] - torch.from_numpy(ref)).abs().max())
    if err > 1e-3 * max(1.0, float(np.abs(ref).max())):
        raise RuntimeError(f"the torch forward differs from reference/model.py by {err}")


if __name__ == "__main__":
    main()

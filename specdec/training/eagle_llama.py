"""The EAGLE drafter for a Llama-family target, in torch: what train_eagle.py trains when
--target is a Llama-family folder (llama, qwen2, mistral; reference/llama.py).

The drafter is reference/eagle.py's for that family: the fusion g = [e(x(t+1)); feat(t)] W + b
(EAGLE-3: feat = the reduced layers), one Llama decoder layer (RMSNorm, RoPE, grouped-query
attention, SwiGLU, the target's shapes and attention biases), then the target's model.norm
and output layer, frozen. The layer here is written in torch from the same formulas as
reference/llama.py's block, with one thing the chain unroll needs: each row is rotated by its
own position (`positions`), since a draft step's rows are not consecutive (train_eagle.py's
`unroll`: step 1's row t sits at position t, chain c's row of step j at c + j - 2, the slot
the NumPy drafter writes it at).

`arrays()` gives the names and layouts reference/eagle.py reads (its `eagle_param_shapes`):
fc.* and reduce.* as y = x @ W + b, the layer as "model.layers.0.*" in Hugging Face's
[out, in] layout. The tests check that the NumPy drafter, given these arrays, proposes the q
rows this module computes (tests/unit/test_llama_trained_drafters.py).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from reference import speculative_generate
from reference.eagle import EagleDrafter, block_prefix, eagle_param_shapes, embedding_name
from reference.llama import Llama, rope_tables
from reference.sampling import SamplingParams
from specdec.training.llama_states import output_matrix, rms_norm


def llama_variants(n_layer: int) -> dict[str, tuple[int, ...]]:
    # feature layers by variant: EAGLE-1 reads the top; EAGLE-3 a low, a middle and the top
    # block count (for the bundled 6-block GPT-2: 2, 4, 6), fewer when the target is shallow
    low, mid = max(1, n_layer // 3), max(1, (2 * n_layer) // 3)
    return {"eagle-1": (n_layer,), "eagle-3": tuple(sorted({low, mid, n_layer}))}


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [B, nh, T, hs], cos/sin [T, hs/2] -> [B, nh, T, hs]: Hugging Face's "rotate half"
    # (feature j turns with feature j + hs/2 by the row's angle), as reference/llama.py
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def linear(x: torch.Tensor, P: dict, name: str) -> torch.Tensor:
    # x @ W.T (+ b), W [out, in] as Hugging Face stores it
    y = x @ P[name + ".weight"].T
    return y if name + ".bias" not in P else y + P[name + ".bias"]


def llama_layer(x, P: dict, cfg, cos, sin, mask, past=()):
    # x [B, T, C], cos/sin [T, hs/2] (each row's position) -> (out [B, T, C], (k, v)
    # [B, nkv, T, hs], keys rotated). past: the (k, v) of earlier passes, attended before
    # these rows' own; mask [T, S + T] bool, True = may attend. Query head h reads key/value
    # head h // (nh / nkv) (repeat_interleave: Hugging Face's repeat_kv order).
    h, a = "model.layers.0.", "model.layers.0.self_attn."
    B, T, _ = x.shape
    nh, nkv, hs = cfg.n_head, cfg.n_kv_head, cfg.head_size
    n = rms_norm(x, P[h + "input_layernorm.weight"], cfg.rms_norm_eps)
    q = linear(n, P, a + "q_proj").reshape(B, T, nh, hs).transpose(1, 2)
    k = linear(n, P, a + "k_proj").reshape(B, T, nkv, hs).transpose(1, 2)
    v = linear(n, P, a + "v_proj").reshape(B, T, nkv, hs).transpose(1, 2)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    keys = torch.cat([kv[0] for kv in past] + [k], dim=2).repeat_interleave(nh // nkv, 1)
    values = torch.cat([kv[1] for kv in past] + [v], dim=2).repeat_interleave(nh // nkv, 1)
    out = F.scaled_dot_product_attention(q, keys.to(q.dtype), values.to(q.dtype), attn_mask=mask)
    x = x + linear(out.transpose(1, 2).reshape(B, T, nh * hs), P, a + "o_proj")
    m = rms_norm(x, P[h + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
    gated = F.silu(linear(m, P, h + "mlp.gate_proj")) * linear(m, P, h + "mlp.up_proj")
    return x + linear(gated, P, h + "mlp.down_proj"), (k, v)


class LlamaEagle(torch.nn.Module):
    """fc + one Llama layer (+ reduce for EAGLE-3) for a Llama-family target; the same
    methods as train_eagle.Eagle (true_feature, fuse, run_block, logq, arrays)."""

    def __init__(self, target: Llama, feature_layers, gen: torch.Generator) -> None:
        super().__init__()
        cfg = target.config
        C = cfg.n_embd
        self.cfg, self.feature_layers = cfg, tuple(feature_layers)
        frozen = {"embedding": embedding_name(cfg), "norm": "model.norm.weight"}
        self.frozen = {k: tensor(target.params[n]) for k, n in frozen.items()}
        self.frozen["output"] = output_matrix(target)  # [V, C]
        cos, sin = rope_tables(cfg)  # [n_ctx, hs/2]: the reference's angles
        self.cos, self.sin = tensor(cos), tensor(sin)
        # fc starts as the identity on the feature half, reduce as "take the top layer"
        # (as train_eagle.Eagle: the layer starts on rows of the scale it will read)
        w = torch.randn(2 * C, C, generator=gen) * 0.02
        w[C:] += torch.eye(C)
        self.fc_w, self.fc_b = torch.nn.Parameter(w), torch.nn.Parameter(torch.zeros(C))
        L = len(self.feature_layers)
        if L > 1:
            r = torch.randn(L * C, C, generator=gen) * 0.02
            r[(L - 1) * C :] += torch.eye(C)
            self.reduce_w, self.reduce_b = torch.nn.Parameter(r), torch.nn.Parameter(torch.zeros(C))
        self.names = [
            n
            for n in eagle_param_shapes(cfg, self.feature_layers)
            if n.startswith(block_prefix(cfg))
        ]
        shapes = eagle_param_shapes(cfg, self.feature_layers)
        self.block = torch.nn.ParameterDict()
        for name in self.names:  # unit gains, zero biases, N(0, 0.02) (outputs scaled down)
            shape = shapes[name]
            if name.endswith("layernorm.weight"):
                value = torch.ones(shape)
            elif name.endswith(".bias"):
                value = torch.zeros(shape)
            else:
                std = (
                    0.02 / math.sqrt(2)
                    if name.endswith(("o_proj.weight", "down_proj.weight"))
                    else 0.02
                )
                value = torch.randn(shape, generator=gen) * std
            self.block[key(name)] = torch.nn.Parameter(value)

    def true_feature(self, feats: torch.Tensor) -> torch.Tensor:
        # feats [B, T, L * C] (the layers side by side, top last) -> feat [B, T, C]
        if len(self.feature_layers) == 1:
            return feats
        return feats @ self.reduce_w + self.reduce_b

    def fuse(self, tokens: torch.Tensor, feat: torch.Tensor) -> torch.Tensor:
        # tokens [B, T] (x(t+1)), feat [B, T, C] (of t) -> g [B, T, C]
        e = self.frozen["embedding"][tokens]
        return torch.cat([e, feat.to(e.dtype)], -1) @ self.fc_w + self.fc_b

    def run_block(self, g, mask, past=(), positions=None):
        # g [B, T, C], positions [T] (each row's, RoPE) -> (f^ [B, T, C], (k, v))
        if positions is None:
            raise ValueError("a Llama layer rotates by position: pass each row's positions")
        P = {name: self.block[key(name)] for name in self.names}
        return llama_layer(g, P, self.cfg, self.cos[positions], self.sin[positions], mask, past)

    def logq(self, f_hat: torch.Tensor) -> torch.Tensor:
        # f^ [..., C] -> log q [..., V] at T = 1: the target's model.norm and output layer
        h = rms_norm(f_hat, self.frozen["norm"], self.cfg.rms_norm_eps)
        return F.log_softmax(h @ self.frozen["output"].T, -1)

    def arrays(self) -> dict[str, torch.Tensor]:
        # the names and layouts reference/eagle.py reads for a Llama-family target
        out = {"fc.weight": self.fc_w, "fc.bias": self.fc_b}
        if len(self.feature_layers) > 1:
            out |= {"reduce.weight": self.reduce_w, "reduce.bias": self.reduce_b}
        return out | {name: self.block[key(name)] for name in self.names}


def key(name: str) -> str:  # a parameter name as a ParameterDict key (no dots allowed)
    return name.replace(".", "__")


def tensor(a) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, np.float32)).clone()


@torch.no_grad()
def one_step_alpha(model: LlamaEagle, states: dict) -> dict:
    # held-out windows -> the first draft's agreement with the target, fed true features
    # (step 1 of the unroll at every position): greedy agreement and alpha at T = 1
    feats = torch.cat([states[f"f{l}"] for l in model.feature_layers], -1)
    tokens, logp = states["tokens"], states["logp"][:, 1:]
    T1 = tokens.shape[1] - 1
    g = model.fuse(tokens[:, 1:], model.true_feature(feats[:, :-1]))
    out, _ = model.run_block(g, torch.ones(T1, T1, dtype=torch.bool).tril(), (), torch.arange(T1))
    logq = model.logq(out)
    return {
        "first_draft_alpha_T1": round(
            float(torch.minimum(logp.exp(), logq.exp()).sum(-1).mean()), 4
        ),
        "first_draft_greedy_agreement": round(
            float((logq.argmax(-1) == logp.argmax(-1)).float().mean()), 4
        ),
    }


def numpy_round_check(
    target: Llama, arrays: dict, feature_layers, prompts, k: int, new_tokens: int
) -> dict:
    # the exported (float16) weights through reference.eagle at greedy: the acceptance rate
    # of each draft position over the rounds that reached it, and tokens per round
    params = {n: np.asarray(a, np.float32) for n, a in arrays.items()}
    drafter = EagleDrafter(target, params, feature_layers=tuple(feature_layers))
    reached, accepted, tokens, rounds = np.zeros(k), np.zeros(k), 0, 0
    for i, prompt in enumerate(prompts):
        drafter.reset()
        r = speculative_generate(
            target, drafter, prompt, k=k, max_new_tokens=new_tokens,
            rng=np.random.default_rng(i), sampling=SamplingParams(0.0), trace=True,
        )  # fmt: skip
        for rnd in r.trace:
            n = min(rnd.accepted + 1, len(rnd.draft_tokens))
            reached[:n] += 1
            accepted[: rnd.accepted] += 1
        tokens, rounds = tokens + len(r.tokens), rounds + len(r.trace)
    return {
        "greedy_acceptance_by_position": [
            round(float(a), 4) for a in accepted / np.maximum(reached, 1)
        ],
        "tokens_per_round_greedy": round(tokens / max(rounds, 1), 3),
        "prompts": len(prompts),
        "new_tokens_each": new_tokens,
        "k": k,
    }

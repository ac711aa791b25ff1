"""EAGLE-style drafting: one small block extrapolates the target's features, the target's own
final norm and output layer turn them into q.

f(t) is the target's feature at position t: the residual stream after its last block,
BEFORE ln_f (what the output layer would read, once normed, to score token t+1). One draft
step fuses the embedding of the token just known with the feature of the position before it,
and one transformer block (its own weights, its own KV cache) predicts the next feature:

    g(t)      = [e(x(t+1)); f(t)] W + b          e = the target's tied embedding (wte), W [2C, C]
    f^(t+1)   = Block(g(0..t))[t]                causal, over the drafter's own cache
    q(. | x(..t+1)) = softmax(ln_f(f^(t+1)) @ wte^T)   (the target's ln_f and output layer,
                                                        then T / top-k / top-p as every q)

Alignment (context x(0..n-1), n committed tokens; the target has cached x(0..n-2) and handed
over their features f(0..n-2); x(n-1) was sampled from the row of f(n-2)):

    position t :     0        1       ...     n-2          n-1            n
    token in   :  e(x1)    e(x2)      ...   e(x(n-1))    e(d1)         e(d2)      (drafts d)
    feature in :  f(0)     f(1)       ...   f(n-2)       f^(n-1)       f^(n)      (f^: its own)
    block out  :  f^(1)    f^(2)      ...   f^(n-1)      f^(n)         f^(n+1)
                                              |-> q1 -> d1  |-> q2 -> d2   |-> q3 -> d3

Across a round's k steps the drafter feeds its own predicted features f^ (it has no better
ones). Cache discipline (as the draft model's, reference/drafters.py): the block's cache holds
one slot per position whose TRUE feature is known and whose next token is committed, i.e.
slots 0..n-2 after a round's catch-up; draft rows (positions n-1.. fed with f^) are temporary
slots, never committed -- the accepted positions' true features arrive after the round
(`observe_features`, the target's pre-norm rows of the kept positions) and are fed as next
round's catch-up, like the draft model's catch-up token. So `commit(n)` keeps exactly the
catch-up rows and `rollback()` drops every draft row; the committed slots always equal a
fresh prefill of the same (feature, token) history.

EAGLE-3 (`feature_layers`, more than one): the feature handed over for a position is the
target's residual stream after several of its blocks, side by side (GPT.layer_features; the
top, pre-ln_f, always last), and one more linear layer reduces it to C before the fusion:

    g_true(t) = [f_l1(t); f_l2(t); ...; f_top(t)] R + r     R [len(layers) C, C], r [C]
                                                             ("reduce.weight", "reduce.bias")

g_true(t) stands where f(t) stood above, for every position whose true features are known;
draft steps still feed the block's own output f^ (C wide). The reduction is applied once, as
the features arrive (`observe_features`): the drafter keeps C-wide rows, whichever variant.

A Llama-family target (reference/llama.py) gets a Llama block instead, as the EAGLE
repositories give their Llama drafters: RMSNorm, RoPE, grouped-query attention, SwiGLU, the
target's own shapes. It is the Llama class's block, run as a one-layer Llama, not a copy.
Two things change with it:

* positions: GPT-2's block adds no position embedding (the features carry theirs), but a
  Llama block rotates its queries and keys by position. The drafter's slot t holds the row
  that reads x(t+1) and f(t), so t is the position it is rotated by: a draft row at slot
  cache.end.., a tree node at length + depth (reference/tree/forward.py), as for any cache.
* the parameters (`eagle_param_shapes`): the fusion and the reduction keep this module's
  layout (y = x @ W + b: fc.weight [2C, C], reduce.weight [len(layers) C, C]); the block
  keeps the target family's Hugging Face names and [out, in] layout, as layer 0:
  "model.layers.0.input_layernorm.weight" [C], "...self_attn.q_proj.weight" [nh hs, C],
  k_proj / v_proj [nkv hs, C] (biases where the target's attention has them),
  o_proj [C, nh hs], post_attention_layernorm [C], mlp.gate_proj / up_proj [I, C],
  down_proj [C, I]. e is the target's token embedding (model.embed_tokens), the output
  layer its lm_head (or the tied embedding), ln_f its model.norm. (The EAGLE repositories
  drop layer 0's input_layernorm; this block keeps it, being the target's own block.)

q depends only on committed tokens (through the target's features) and the drafts before it:
the output law is the target's whatever the weights (untrained here: see init_eagle_params).
Trained weights: `reference.weights.load_eagle(folder, target)` (models/eagle/, written by
`python -m specdec.training.train_eagle`; the file I/O stays at the edge, in weights.py).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from reference.checks import as_token_array, check_generator, check_positive_int
from reference.config import GPTConfig, LlamaConfig
from reference.drafters import Draft, Drafter
from reference.llama import Llama, expected_llama_param_shapes
from reference.model import GPT, causal_placement, check_feature_layers, expected_param_shapes
from reference.sampling import SamplingParams, check_sampling, probabilities, sample_token

FUSE = ("fc.weight", "fc.bias")  # W [2C, C], b [C]: [e(x(t+1)); f(t)] -> the block's input
REDUCE = ("reduce.weight", "reduce.bias")  # R [len(layers) C, C], r [C]: EAGLE-3 only
FILES = ("eagle.safetensors", "metadata.json")  # what load_eagle reads from its folder
TRAIN_COMMAND = "python -m specdec.training.train_eagle"


def feature_layers_of(cfg: GPTConfig, feature_layers=None) -> tuple[int, ...]:
    # None -> (n_layer,) (EAGLE-1: the top feature only); else checked (check_feature_layers)
    return check_feature_layers(
        (cfg.n_layer,) if feature_layers is None else feature_layers, cfg.n_layer
    )


def eagle_param_shapes(cfg: GPTConfig, feature_layers=None) -> dict[str, tuple[int, ...]]:
    # the fusion layer and one block named as the target's block 0 (GPT-2: "h.0.ln_1.weight",
    # ...; the Llama family: "model.layers.0.input_layernorm.weight", ...), and with more
    # than one feature layer the reduction R, r (EAGLE-3)
    check_eagle_target(cfg)
    C = cfg.n_embd
    layers = feature_layers_of(cfg, feature_layers)
    one = replace(cfg, n_layer=1)
    if isinstance(cfg, LlamaConfig):
        shapes = expected_llama_param_shapes(one)
    else:
        shapes = expected_param_shapes(one)
    block = {n: s for n, s in shapes.items() if n.startswith(block_prefix(cfg))}
    reduce = {REDUCE[0]: (len(layers) * C, C), REDUCE[1]: (C,)} if len(layers) > 1 else {}
    return {FUSE[0]: (2 * C, C), FUSE[1]: (C,)} | reduce | block


def block_prefix(cfg) -> str:
    # how the block's parameter names start: the target family's block 0
    return "model.layers.0." if isinstance(cfg, LlamaConfig) else "h.0."


def embedding_name(cfg) -> str:
    # the target's token embedding, e in the fusion
    return "model.embed_tokens.weight" if isinstance(cfg, LlamaConfig) else "wte.weight"


def shared_names(cfg) -> tuple[str, ...]:
    # the target's arrays the one-block model is built with (never read by the block: it
    # reads fused rows) -- the names its class requires besides the block's
    if isinstance(cfg, LlamaConfig):
        untied = () if cfg.tie_word_embeddings else ("lm_head.weight",)
        return ("model.embed_tokens.weight", "model.norm.weight", *untied)
    return ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias")


def check_eagle_target(cfg) -> None:
    # the families this drafter has a block for
    if not isinstance(cfg, (GPTConfig, LlamaConfig)):
        raise ValueError(
            f"the EAGLE drafter needs a GPT-2 or Llama-family target's config, got "
            f"{type(cfg).__name__}"
        )


def init_eagle_params(
    cfg: GPTConfig, rng: np.random.Generator, std: float = 0.02, feature_layers=None
) -> dict:
    """Random EAGLE weights: N(0, std) matrices, unit norm gains, zero biases."""
    check_generator(rng)
    params = {}
    for name, shape in eagle_param_shapes(cfg, feature_layers).items():
        if name.endswith(("ln_1.weight", "ln_2.weight", "layernorm.weight")):
            params[name] = np.ones(shape, dtype=np.float32)
        elif name.endswith(".bias"):
            params[name] = np.zeros(shape, dtype=np.float32)
        else:
            params[name] = (rng.standard_normal(shape) * std).astype(np.float32)
    return params


def check_eagle_params(params, cfg: GPTConfig, feature_layers=None) -> dict[str, np.ndarray]:
    # -> the params as float32, every name and shape checked against the target's config and
    # the feature layers (reduce.* exactly when there are more than one)
    if not isinstance(params, dict):
        raise TypeError(f"EAGLE params are a dict of arrays, got {type(params).__name__}")
    layers = feature_layers_of(cfg, feature_layers)
    shapes = eagle_param_shapes(cfg, layers)
    check_weights_family(params, cfg)
    missing, unknown = sorted(set(shapes) - set(params)), sorted(set(params) - set(shapes))
    if missing or unknown:
        why = (
            f"; feature_layers={layers} needs reduce.* ([{len(layers)} x {cfg.n_embd}, "
            f"{cfg.n_embd}] and [{cfg.n_embd}])"
            if len(layers) > 1
            else f"; reduce.* belongs to EAGLE-3 only (more than one feature layer, here {layers})"
        )
        raise ValueError(
            f"EAGLE params need exactly {sorted(shapes)} (init_eagle_params makes them); "
            f"missing {missing}, unknown {unknown}"
            + (why if any(n in missing + unknown for n in REDUCE) else "")
        )
    out = {}
    for name, shape in shapes.items():
        value = np.asarray(params[name], dtype=np.float32)
        if value.shape != shape:
            raise ValueError(
                f"EAGLE parameter {name!r} has shape {value.shape}, the target (n_embd="
                f"{cfg.n_embd}) needs {shape}"
            )
        if not np.all(np.isfinite(value)):
            raise ValueError(f"EAGLE parameter {name!r} holds non-finite values")
        out[name] = value
    return out


def check_weights_family(params: dict, cfg) -> None:
    # weights whose block is of the other family (GPT-2's "h.0." for a Llama target, or the
    # reverse) were trained for another target: said in one line, before the name lists
    llama = isinstance(cfg, LlamaConfig)
    other = "h.0." if llama else "model.layers.0."
    if any(str(name).startswith(other) for name in params):
        family, block = ("GPT-2", "h.0.*") if llama else ("Llama-family", "model.layers.0.*")
        target = f"Llama-family ({cfg.model_type})" if llama else "GPT-2"
        raise ValueError(
            f"these EAGLE weights have a {family} block ({block}), but the target is "
            f"{target}: its drafter's block is named {block_prefix(cfg)}*; train one for "
            f"this target with `{TRAIN_COMMAND} --target DIR`"
        )


class EagleDrafter(Drafter):
    """Drafts by extrapolating the target's features with one block of its own."""

    library_checked = True  # q from `probabilities`, each token sampled from its row

    def __init__(self, target: GPT, params: dict[str, np.ndarray], feature_layers=None) -> None:
        # feature_layers: the target's block counts whose residual streams it reads (None:
        # (n_layer,), EAGLE-1); the loops ask it of the drafter and hand those over
        cfg = target.config
        self.feature_layers = feature_layers_of(cfg, feature_layers)
        params = check_eagle_params(params, cfg, self.feature_layers)
        self.target = target
        self.w, self.b = params[FUSE[0]], params[FUSE[1]]  # [2C, C], [C]
        # [len(layers) C, C], [C]: the EAGLE-3 reduction (None for one layer: f(t) as it is)
        self.reduce = (params[REDUCE[0]], params[REDUCE[1]]) if REDUCE[0] in params else None
        # the block as a one-block model of the target's class (GPT, or Llama: the same
        # block code as the target's). Its embeddings are the target's, never used: the
        # block reads fused rows (a GPT-2 block adds no position to them; a Llama block
        # rotates q and k by the slot's position, as every Llama pass does)
        shared = {n: target.params[n] for n in shared_names(cfg)}
        block = {n: w for n, w in params.items() if n.startswith(block_prefix(cfg))}
        model_class = Llama if isinstance(cfg, LlamaConfig) else GPT
        self.block_model = model_class(replace(cfg, n_layer=1), shared | block)
        self.embedding = target.params[embedding_name(cfg)]  # [V, C]: e in the fusion
        self.cache = self.block_model.new_cache()
        # f(0..n_known-1), the features fused with the tokens (EAGLE-3: g_true, reduced)
        self.features = np.zeros((cfg.n_ctx, cfg.n_embd), dtype=np.float32)
        self.n_known = 0  # positions whose true feature the target has handed over
        self._fed_context = 0  # catch-up rows fed this round (true features): the ones kept

    @property
    def n_vocab(self) -> int:
        return self.target.n_vocab

    @property
    def n_ctx(self) -> int:
        return self.target.config.n_ctx

    def reset(self) -> None:
        self.cache.reset()
        self.n_known = self._fed_context = 0

    def observe_features(self, x: np.ndarray) -> None:
        # x [m, len(feature_layers) * C]: the target's features of the next m positions, in
        # order, its layers side by side (GPT.layer_features) -> stored C wide: as they are
        # for one layer, g_true = x R + r for several (reduced once, here, as they arrive)
        x = np.asarray(x, dtype=np.float32)
        C = self.features.shape[1]
        F = len(self.feature_layers) * C
        if x.ndim != 2 or x.shape[1] != F:
            raise ValueError(
                f"features must have shape [m, {F}] ({len(self.feature_layers)} feature "
                f"layer(s) {self.feature_layers} of width {C}), got {x.shape}"
            )
        if self.n_known + len(x) > len(self.features):
            raise ValueError(
                f"{self.n_known} known + {len(x)} new features exceed n_ctx={len(self.features)}"
            )
        if self.reduce is not None:
            x = x @ self.reduce[0] + self.reduce[1]  # [m, C]: g_true
        self.features[self.n_known : self.n_known + len(x)] = x
        self.n_known += len(x)

    def fuse(self, tokens: np.ndarray, f: np.ndarray) -> np.ndarray:
        # tokens [T] (x(t+1)), f [T, C] (f(t)) -> g [T, C] = [e(x(t+1)); f(t)] W + b
        e = self.embedding[tokens]
        return np.concatenate([e, f], axis=1) @ self.w + self.b

    def step(self, g: np.ndarray) -> np.ndarray:
        # g [T, C] fused rows at slots cache.end.. -> f^ [T, C], written as temporary slots
        at = causal_placement(self.cache.end, len(g))
        out = self.block_model.blocks(g, self.cache, at, 0, 1)
        self.cache.mark_written(len(g))
        return out

    def q_row(self, f_hat: np.ndarray, sampling: SamplingParams) -> np.ndarray:
        # f^ [C] -> q [V]: the target's own ln_f and output layer, then the sampling transform
        h = self.target.norm(f_hat[None, :], "ln_f")
        return probabilities(self.target.logits(h)[0], sampling)

    def prefill(self, tokens) -> None:
        # tokens [n-1] (the prompt but its last token) -> cache g(0..n-3): every pair whose
        # token x(t+1) is among `tokens` and whose feature f(t) has been observed
        tokens = as_token_array(tokens, self.n_vocab, "tokens", allow_empty=True)
        if self.cache.length or self.cache.pending:
            raise ValueError(
                f"prefill starts a new context, but the drafter's cache already holds "
                f"{self.cache.length} committed and {self.cache.pending} temporary slots; "
                f"call reset() first"
            )
        m = min(len(tokens) - 1, self.n_known)
        if m > 0:
            self.step(self.fuse(tokens[1 : m + 1], self.features[:m]))
            self.cache.commit(m)

    def propose(
        self, context: np.ndarray, k: int, sampling: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        # context [n] -> Draft(tokens [k], q [k, V]); no draft before any feature is known
        context, k = self.proposal_inputs(context, k, sampling, rng)
        n = len(context)
        self.start_proposal()
        if k == 0 or n < 2:  # no feature yet (a one-token prompt): a plain target step
            return Draft(np.zeros(0, np.int64), np.zeros((0, self.n_vocab), np.float32))
        f_hat = self.catch_up(context)  # f^(n-1)
        tokens = np.zeros(k, dtype=np.int64)
        q = np.zeros((k, self.n_vocab), dtype=np.float32)
        for i in range(k):
            q[i] = self.q_row(f_hat, sampling)
            tokens[i] = sample_token(q[i], rng)  # d_{i+1} ~ q_{i+1}
            if i < k - 1:  # the next step reads the draft and the drafter's own feature
                f_hat = self.step(self.fuse(tokens[i : i + 1], f_hat[None, :]))[-1]
        return Draft(tokens, q)

    def proposal_inputs(self, context, k, sampling, rng) -> tuple[np.ndarray, int]:
        # -> (context [n], k) checked, for this drafter and its twin: the features known,
        # and room in its cache for the n - 1 catch-up rows and k - 1 draft rows
        context = as_token_array(context, self.n_vocab, "context")
        k = check_positive_int(k, "k", minimum=0)
        check_sampling(sampling)
        check_generator(rng)
        n = len(context)
        self.check_known(n)
        if k > 0 and n - 1 + k - 1 > self.cache.capacity:
            raise ValueError(
                f"drafting k={k} after {n} tokens needs {n + k - 2} slots of the drafter's "
                f"cache of {self.cache.capacity}; lower k or shorten the context"
            )
        return context, k

    def check_known(self, n: int) -> None:
        # a context of n tokens needs the target's features of its first n-1 positions
        if self.n_known != n - 1:
            raise ValueError(
                f"the drafter knows the target's features of {self.n_known} positions, but a "
                f"context of {n} tokens needs those of its first {n - 1} (the round hands them "
                f"over through observe_features; for a new prompt, call reset() first)"
            )

    def start_proposal(self) -> None:
        # a proposal never builds on an earlier, unverified one; until its catch-up, a
        # commit keeps nothing
        self.cache.rollback()
        self._fed_context = 0

    def catch_up(self, context: np.ndarray) -> np.ndarray:
        # context [n], n >= 2, after rollback -> f^(n-1) [C]: the catch-up rows, positions
        # t = length..n-2 each with its true feature f(t) (or g_true(t)) and x(t+1), fed as
        # temporary slots (the ones commit keeps); the last row's output scores x(n)
        t = np.arange(self.cache.length, len(context) - 1)
        self._fed_context = len(t)
        return self.step(self.fuse(context[t + 1], self.features[t]))[-1]

    def commit(self, n_accepted: int) -> None:
        # keep the catch-up rows only: draft rows were fed predicted features, and the
        # accepted positions' true ones arrive through observe_features (next catch-up)
        self.cache.commit(self._fed_context)

    def rollback(self) -> None:
        self.cache.rollback()

"""The twin's EAGLE drafter: the target's features extrapolated by one block, on the device.

What differs from reference/eagle.py, and why:
* The features the loops hand over (`observe_features`: the target's pre-norm rows of the
  kept positions, EAGLE-3's several layers side by side) are the twin target's device rows;
  they are reduced (EAGLE-3: one fused linear) and written into a device buffer, and never
  cross over. The fusion layer, the reduction and the block's weights are copied to the
  device once; the block is a one-block twin model of the target's family sharing the
  target's device arrays (its embeddings, final norm): a twin GPT's steps run the fused
  block (five launches for up to 16 rows), a twin Llama's its fused linears around the
  bodies (gpu/llama.py); the fusion [e(x); f] W + b is one fused linear after the
  concatenation.
* Drafting stays on the device, as the twin's draft model does (gpu/drafters.py): the k
  uniforms are drawn from the numpy Generator in one call and copied over, each q row is the
  target's ln_f and output layer on f^ (one fused launch) and each draft is drawn from it by
  the fused `pick` (its q row and its token in one launch), then fed straight into the next
  step as a device id. Nothing comes back to the host while it drafts: the round's one
  transfer covers it (its finiteness flag covers q, so no host check per step).
* Same draws: the k uniforms are the ones the reference's k `sample_token` calls take, in
  order, so a proposal is the reference's, token for token; the round's verification draws
  differ (gpu/speculative.py), so sampled runs are equal in law, greedy runs token for token.
* The trained drafter loads through gpu/weights.py's `load_eagle`: the reference's readers
  and checks (reference/weights.py), the twin's drafter built from what they read.
The alignment, the cache discipline (catch-up rows kept, draft rows dropped), the parameters'
names, shapes and checks, and every input check are the reference's.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpu.device.backend import on_device, to_device, xp
from gpu.device.fused import fused_linear
from gpu.drafters import register_twin
from gpu.llama import Llama
from gpu.model import GPT, as_twin_model
from gpu.sampling import pick, probabilities
from reference import eagle as reference_eagle
from reference.config import LlamaConfig
from reference.drafters import Draft
from reference.eagle import (
    FUSE,
    REDUCE,
    block_prefix,
    check_eagle_params,
    eagle_param_shapes,
    embedding_name,
    feature_layers_of,
    init_eagle_params,
    shared_names,
)
from reference.sampling import SamplingParams

__all__ = [
    "EagleDrafter",
    "check_eagle_params",
    "eagle_param_shapes",
    "init_eagle_params",
]


class EagleDrafter(reference_eagle.EagleDrafter):
    """The reference's EAGLE drafter with its weights, features and cache on the device."""

    library_checked = True  # q rows from the fused `pick`, each token drawn from its row

    def __init__(self, target: GPT, params: dict[str, np.ndarray], feature_layers=None) -> None:
        # target: a twin GPT, or a reference one (its twin: weights copied once); the params
        # are checked on the host by the reference, then copied over once
        target = as_twin_model(target)
        cfg = target.config
        self.feature_layers = feature_layers_of(cfg, feature_layers)
        params = check_eagle_params(params, cfg, self.feature_layers)
        self.target = target
        self.w, self.b = to_device(params[FUSE[0]]), to_device(params[FUSE[1]])  # [2C, C], [C]
        # [len(layers) C, C], [C]: the EAGLE-3 reduction (None for one layer)
        self.reduce = (
            (to_device(params[REDUCE[0]]), to_device(params[REDUCE[1]]))
            if REDUCE[0] in params
            else None
        )
        # the block as a one-block twin model of the target's family (GPT, or Llama: its
        # block rotates q and k by each slot's position): the target's embeddings and final
        # norm are its device arrays, shared, not copied (never read by the block: it reads
        # fused rows)
        shared = {n: target.params[n] for n in shared_names(cfg)}
        block = {n: w for n, w in params.items() if n.startswith(block_prefix(cfg))}
        model_class = Llama if isinstance(cfg, LlamaConfig) else GPT
        self.block_model = model_class(replace(cfg, n_layer=1), shared | block)
        self.embedding = target.params[embedding_name(cfg)]  # [V, C] on the device: e
        self.cache = self.block_model.new_cache()
        self.features = xp.zeros((cfg.n_ctx, cfg.n_embd), dtype=np.float32)  # f(0..n_known-1)
        self.n_known = 0  # positions whose true feature the target has handed over
        self._fed_context = 0  # catch-up rows fed this round (true features): the ones kept

    def observe_features(self, x) -> None:
        # x [m, len(feature_layers) * C] (the twin target's device rows, or host rows) ->
        # stored C wide in the device buffer: as they are for one layer, g_true = x R + r
        # (one fused linear) for several. The checks read only shapes: no transfer
        x = to_device(x, np.float32)
        C = self.features.shape[1]
        F = len(self.feature_layers) * C
        if x.ndim != 2 or x.shape[1] != F:
            raise ValueError(
                f"features must have shape [m, {F}] ({len(self.feature_layers)} feature "
                f"layer(s) {self.feature_layers} of width {C}), got {x.shape}"
            )
        m = x.shape[0]
        if self.n_known + m > self.features.shape[0]:
            raise ValueError(
                f"{self.n_known} known + {m} new features exceed n_ctx={self.features.shape[0]}"
            )
        if m == 0:
            return
        if self.reduce is not None:
            x = fused_linear(x, *self.reduce)  # [m, C]: g_true
        self.features[self.n_known : self.n_known + m] = x
        self.n_known += m

    def fuse(self, tokens, f):
        # tokens [T] (host or device ids, x(t+1)), f [T, C] on the device (f(t))
        # -> g [T, C] = [e(x(t+1)); f(t)] W + b: the concatenation, then one fused linear
        ids = tokens if on_device(tokens) else to_device(np.asarray(tokens, np.int64))
        e = self.embedding[ids]
        return fused_linear(xp.concatenate([e, f], axis=1), self.w, self.b)

    def q_row(self, f_hat, sampling: SamplingParams):
        # f^ [C] (device) -> q [V] on the device: the target's ln_f and output layer (one
        # fused launch), then the sampling transform
        return probabilities(self.target.output(f_hat[None, :]), sampling)[0]

    def catch_up(self, context: np.ndarray):
        # context [n] (host), n >= 2, after rollback -> f^(n-1) [C] on the device: positions
        # t = length..n-2, each with its true feature f(t) (a contiguous slice of the device
        # buffer: no index array) and x(t+1), fed as the temporary slots commit keeps
        first, n = self.cache.length, len(context)
        self._fed_context = n - 1 - first
        return self.step(self.fuse(context[first + 1 : n], self.features[first : n - 1]))[-1]

    def propose(
        self, context: np.ndarray, k: int, sampling: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        # context [n] (host) -> Draft(tokens [k], q [k, V]) on the device; nothing before
        # any feature is known (a one-token prompt: a plain target step)
        context, k = self.proposal_inputs(context, k, sampling, rng)  # the reference's checks
        n = len(context)
        self.start_proposal()  # rolls back an earlier, unverified proposal
        if k == 0 or n < 2:
            return Draft(xp.zeros(0, dtype=np.int64), xp.zeros((0, self.n_vocab), np.float32))
        u = to_device(rng.random(k))  # the uniforms of the reference's k draws, at once
        f_hat = self.catch_up(context)[None, :]  # [1, C]: f^(n-1), a view
        q = xp.empty((k, self.n_vocab), dtype=np.float32)  # filled row by row
        tokens = xp.empty(k, dtype=np.int64)
        for i in range(k):
            # q_i: the target's ln_f and output layer on f^ (one launch); q_i and d_i ~ q_i
            # written in place (one launch: gpu/sampling.py `pick`)
            logits = self.target.output(f_hat)  # [1, V]
            pick(logits, sampling, u[i : i + 1], probs=q[i : i + 1], tokens=tokens[i : i + 1])
            if i < k - 1:  # the next step reads the draft and the drafter's own feature
                f_hat = self.step(self.fuse(tokens[i : i + 1], f_hat))[-1:]
        return Draft(tokens, q)


def eagle_params_of(drafter: reference_eagle.EagleDrafter) -> dict[str, np.ndarray]:
    # a reference drafter -> its params as init_eagle_params names them: the fusion layer,
    # the reduction (EAGLE-3) and its block's weights
    params = {FUSE[0]: drafter.w, FUSE[1]: drafter.b}
    if drafter.reduce is not None:
        params |= dict(zip(REDUCE, drafter.reduce, strict=True))
    prefix = block_prefix(drafter.target.config)
    block = {n: w for n, w in drafter.block_model.params.items() if n.startswith(prefix)}
    return params | block


register_twin(
    reference_eagle.EagleDrafter,
    lambda d: EagleDrafter(d.target, eagle_params_of(d), d.feature_layers),
)

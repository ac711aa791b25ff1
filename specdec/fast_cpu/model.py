"""The opt-in CPU fast path: the same GPT, computed in ways OpenBLAS often runs faster.

(`FastLlama`, after FastGPT, is the same for the Llama family: FastGPT's plan, layouts and
tricks on the Llama block, with specdec/fast_cpu/llama.py's and llama_step.py's own.)

`FastGPT` is a `reference.model.GPT` whose block computations `linear`, `attend` and
`activation`, and its output layer `logits`, can be replaced by versions that give the same
numbers to float32 rounding but suit OpenBLAS and NumPy's call overhead on a CPU; where the
plan says so, `forward_unchecked` with a cache runs as one compiled call instead
(specdec/fast_cpu/step.py: the draft's step, a verification pass). The plain
model stays the one to read; docs/fast-path.md says why each trick exists and what it
measured, docs/benchmarks.md ("The CPU limit") how far a pass still is from its floor, and
tests/unit/test_fast_cpu.py holds it to the plain model's logits.

Which tricks pay depends on the machine: with OpenBLAS's SkylakeX kernels the blocked few-row
product makes an 8-row pass several times cheaper; with its Haswell kernels (AVX2 laptops) the
same product is slower than `x @ W`. So `fast(model)` measures before it chooses: whole passes
of the model, for every pass size it serves, under each configuration of tricks, plain
included, with the weights as cold as the loop leaves them; each pass size keeps its fastest
(`TrickPlan`, specdec/fast_cpu/plan.py, cached for the process per shape, kernel and thread
count). `fast(model, tricks="all")` forces every trick (the parity tests), `tricks="none"`
none; `describe_plan` prints what was chosen and why. Where the weights are 16-bit numbers
(the bundled pair's float16, a bf16 checkpoint's), the compiled passes may read 16-bit copies
of them instead ("stepwise16", "fused16": specdec/fast_cpu/sixteen.py), measured like the rest.

It can never go stale. Each linear weight is kept in two layouts: `params[name]`, the
checkpoint's [C_in, C_out] (what a one-row step and BLAS's own products read fastest), and its
transpose [C_out, C_in] (what the sliced product reads), and both are read-only, so editing a
weight in place (`params[name] *= 0.5`) is refused by NumPy ("assignment destination is
read-only") instead of leaving the other layout behind. Replacing one (`params[name] = w`) is
seen by the next call: the transposed layout is made again from the new array. The same
holds for the 16-bit copies; where the model keeps them, the output layer is read-only too.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from reference.config import GPTConfig, LlamaConfig
from reference.llama import Llama, grouped_attention, rope_tables, silu
from reference.model import GPT, attention, causal_mask, gelu, merge_heads, split_heads
from specdec.fast_cpu import compiled, llama_step, sixteen, step
from specdec.fast_cpu.llama import (
    rms_norm_rows,
    rotate_by_products,
    silu_by_products,
    whole_width,
)
from specdec.fast_cpu.plan import (
    COMPILED_CONFIGS,
    CONFIGS,
    FEW_ROWS,
    MANY_ROWS,
    SIXTEEN_BIT,
    TrickPlan,
    measure_plan,
)

# FEW_ROWS (16): from 2 up to this many rows a linear layer may take the sliced path
# (verification appends k+1 <= 9 rows for the k this project sweeps; prefill and one-row
# decode keep x @ w).


def slice_rows(C_out: int) -> int:
    # output features per small product: 32 (the AVX-512 kernels' width; 16, 64 and 128
    # measured no faster for 4-9 rows, docs/fast-path.md), or the whole matrix as one product
    # when C_out is no multiple of 32
    return 32 if C_out % 32 == 0 else C_out


def linear_few_rows(x: np.ndarray, w_t: np.ndarray, b: np.ndarray) -> np.ndarray:
    # [T, C_in], w_t = w.T [C_out, C_in] -> [T, C_out]: the same numbers as x @ w + b.
    # For a handful of rows OpenBLAS first copies ("packs") the whole weight matrix, so a
    # k+1-row verification pass costs several one-row steps. Cut into slices of B output
    # features, [B, C_in] @ [C_in, T] is small enough for its unpacked kernels, which read
    # every weight once for all T rows. The slices are a reshape of the stored w_t (a view,
    # nothing copied) and one batched matmul runs them all: one NumPy call, not C_out / B.
    C_out, T = w_t.shape[0], x.shape[0]
    B = slice_rows(C_out)
    y_t = np.matmul(w_t.reshape(C_out // B, B, -1), x.T)  # [C_out / B, B, T]
    # C order: a transposed result would make every later row-wise reduction stride
    return np.add(y_t.reshape(C_out, T).T, b, order="C")


def gelu_by_products(x: np.ndarray) -> np.ndarray:  # [...] -> [...]
    # GPT-2's gelu, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed in a single
    # temporary updated in place instead of a new array per operation, and with x * x * x
    # instead of x**3 (NumPy's float power is several times slower). x is left as it was.
    c = np.float32(math.sqrt(2.0 / math.pi))
    t = x * x
    t *= x
    t *= np.float32(0.044715)
    t += x
    t *= c
    np.tanh(t, out=t)
    t += np.float32(1.0)
    t *= x
    t *= np.float32(0.5)
    return t


def attention_keys_first(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None
) -> np.ndarray:
    # q [..., nh, T, hs], k/v [..., nkv, S, hs] -> [..., nh, T, hs]: `attention` (mask None =
    # causal, or a bool mask that broadcasts to the scores), computed in one scores array.
    # q k^T is computed as (k q^T)^T -- with the long side (S cached keys) as the rows of the
    # product OpenBLAS does not repack k -- then copied to C order, so that the softmax's
    # reductions run along contiguous rows; the scale, mask and softmax then work in place.
    # A causal pass masks only among the last T - 1 keys (every new row sees the history).
    # Grouped-query attention (nkv < nh, a Llama's): query head h reads key head h // g,
    # g = nh / nkv, so a group's g query heads are g T rows of one product with their key
    # head, each key read once per group, nothing broadcast or copied; nkv = nh is GPT-2's.
    T, S, nkv = q.shape[-2], k.shape[-2], k.shape[-3]
    rows = q.reshape(q.shape[:-3] + (nkv, -1, q.shape[-1]))  # [..., nkv, g T, hs]
    grouped = np.ascontiguousarray((k @ rows.swapaxes(-1, -2)).swapaxes(-1, -2))  # [.., g T, S]
    scores = grouped.reshape(q.shape[:-1] + (S,))  # [..., nh, T, S], a view: per query head
    scores *= np.float32(1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:  # a tree's or a batch's mask
        np.copyto(scores, np.float32(-1e10), where=~mask)
    elif T > 1:
        scores[..., S - T + 1 :][..., future_keys(T)] = np.float32(-1e10)
    scores -= scores.max(axis=-1, keepdims=True)  # softmax, as reference.model.softmax
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return (grouped @ v).reshape(q.shape)


@functools.cache
def future_keys(T: int) -> np.ndarray:  # -> [T, T - 1] bool, True = must not attend
    # among the last T - 1 keys (the new rows 1..T-1), new row i may not see rows after it:
    # key j of that slice is new row j + 1, hidden from row i when j + 1 > i. Built once per
    # T (every layer of every pass asks for it), read-only since it is shared.
    mask = ~causal_mask(T, T)[:, 1:]
    mask.flags.writeable = False
    return mask


def is_linear_weight(name: str, w: np.ndarray) -> bool:
    # a block's matrix: GPT-2's h.{i}.*, a Llama's model.layers.{i}.*
    return name.startswith(("h.", "model.layers.")) and w.ndim == 2


def logits_few_rows(h: np.ndarray, wte: np.ndarray) -> np.ndarray:
    # [T, C], wte [V, C] -> [T, V]: h @ wte^T computed as (wte @ h^T)^T, reading wte in its
    # stored order (it is already laid out like a w_t), copied to C order
    return np.ascontiguousarray((wte @ h.T).T)


class FastGPT(GPT):
    """`GPT` with the CPU fast path; same parameters, same logits to float32 rounding.

    `plan` says which trick computes which call (specdec/fast_cpu/plan.py); by default it is
    measured on this machine when the model is built."""

    # the compiled forward of this block (its CompiledWeights, compiled_forward)
    forward_module = step
    activation_name = "gelu"  # what the plan's description calls the "gelu" trick

    def __init__(
        self, config: GPTConfig, params: dict[str, np.ndarray], plan: TrickPlan | None = None
    ) -> None:
        super().__init__(config, params)
        self.transposed: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # name -> (w, w.T copy)
        for name, w in self.params.items():
            if is_linear_weight(name, w):
                self.params[name] = read_only(np.array(w, dtype=np.float32, order="C"))
                self.transposed_weight(name)
        self.compiled_weights = self.forward_module.CompiledWeights(config.n_layer)
        # the 16-bit copies the compiled passes may read instead (specdec/fast_cpu/sixteen.py):
        # only where the loops exist and every linear and output weight is a 16-bit number
        stored = [w for n, w in self.params.items() if is_linear_weight(n, w)]
        stored.append(self.params[self.output_name()])
        fmt = sixteen.format_of(stored) if compiled.AVAILABLE else None
        self.sixteen_copies = sixteen.SixteenBitCopies(fmt)
        if fmt is not None:  # the output layer gets a copy too: read-only, as the linears
            self.params[self.output_name()] = read_only(self.params[self.output_name()])
        self.compiled_weights16 = self.forward_module.CompiledWeights(config.n_layer, True)
        self.plan = measure_passes(self) if plan is None else plan

    def forward_unchecked(self, tokens: np.ndarray, cache=None) -> np.ndarray:
        # tokens [T] -> logits [T, V]: layer by layer, or as one compiled call where the plan
        # chose that for T rows (specdec/fast_cpu/step.py), the final norm and logits in it
        done = self.compiled(tokens, cache, logits=True)
        return super().forward_unchecked(tokens, cache) if done is None else done[1]

    def residual(self, tokens: np.ndarray, cache=None, at=None) -> np.ndarray:
        # tokens -> x [R, C] before the final norm (the verification pass reads this): the
        # same choice, for a sequence's pass (a tree's or a batch's runs layer by layer)
        done = self.compiled(tokens, cache, logits=False) if at is None else None
        return super().residual(tokens, cache, at) if done is None else done[0]

    def compiled(self, tokens: np.ndarray, cache, logits: bool):
        # (residual, logits) of one compiled call where the plan chose one for len(tokens) rows
        # with a cache: the rows one by one ("stepwise") or together ("fused"); else None
        whole = self.plan.whole_forward(len(tokens)) if cache is not None else None
        if whole is None or not compiled.AVAILABLE:
            return None
        group = 1 if SIXTEEN_BIT.get(whole, whole) == "stepwise" else len(tokens)
        weights = self.compiled_weights16 if whole in SIXTEEN_BIT else self.compiled_weights
        return self.forward_module.compiled_forward(
            self, weights, tokens, cache, group, logits
        )  # None: an array the compiled loops cannot read (or no 16-bit copy of one)

    def output_name(self) -> str:  # the output layer's weight [V, C] (GPT-2 ties it to wte)
        return "wte.weight"

    def sixteen_bit(self, name: str, transposed: bool = False) -> np.ndarray | None:
        # params[name] in the 16 bits it was stored in ([C_out, C_in] of a GPT-2 linear where
        # transposed, the layout transposed_weight has), None where it is not a 16-bit number
        return self.sixteen_copies.get(self.params[name], name, transposed)

    def transposed_weight(self, name: str) -> np.ndarray:
        # params[name] [C_in, C_out] -> its read-only [C_out, C_in] copy, made again when the
        # array under `name` was replaced (an identity test: one dict lookup a call)
        w = self.params[name]
        laid_out = self.transposed.get(name)
        if laid_out is None or laid_out[0] is not w:
            laid_out = (w, read_only(np.ascontiguousarray(w.T)))
            self.transposed[name] = laid_out
        return laid_out[1]

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        w, b = self.params[name + ".weight"], self.params[name + ".bias"]
        T = x.shape[0]
        if 1 < T <= FEW_ROWS and self.plan.uses("linear", w.shape, T):
            return linear_few_rows(x, self.transposed_weight(name + ".weight"), b)
        if 1 < T <= FEW_ROWS and self.plan.uses("compiled", w.shape, T):
            if compiled.fits(w.shape[1]):
                return compiled.few_rows_product(x, self.transposed_weight(name + ".weight"), b)
        return x @ w + b  # one row, a prefill, or where neither measured faster

    def norm(self, x: np.ndarray, name: str) -> np.ndarray:  # [..., C] -> [..., C]
        rows = x.shape[-2] if x.ndim > 1 else 1
        if self.plan.uses("compiled_norm", x.shape[-1:], rows) and compiled.AVAILABLE:
            P, eps = self.params, self.config.layer_norm_epsilon
            flat = x.reshape(-1, x.shape[-1])
            out = compiled.layer_norm_rows(flat, P[name + ".weight"], P[name + ".bias"], eps)
            return out.reshape(x.shape)
        return super().norm(x, name)

    def attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask=None) -> np.ndarray:
        # q [..., nh, T, hs]: the plan was measured on causal passes of T rows; a tree's or a
        # batch's pass of T new positions follows the same choice (same products, same sizes)
        if self.plan.uses("attention", (q.shape[-3], q.shape[-1]), q.shape[-2]):  # (nh, hs), T
            return attention_keys_first(q, k, v, mask)
        return attention(q, k, v, mask)

    def activation(self, x: np.ndarray) -> np.ndarray:
        if self.plan.uses("gelu", x.shape[-1:], x.shape[0] if x.ndim > 1 else 1):
            return gelu_by_products(x)
        return gelu(x)

    def logits(self, h: np.ndarray) -> np.ndarray:
        # [T, C] -> [T, V]: h @ wte^T; wte [V, C] is already laid out as a w_t
        wte = self.params["wte.weight"]
        T = h.shape[0]
        if 1 < T <= FEW_ROWS and self.plan.uses("logits", wte.shape, T):
            return logits_few_rows(h, wte)
        return h @ wte.T


class FastLlama(FastGPT, Llama):
    """`Llama` with the CPU fast path: FastGPT's plan, layouts and tricks, on the Llama block.

    The checkpoint stores a linear weight as torch does, W [C_out, C_in]: that is already the
    layout the few-row products read (FastGPT's w_t), so they read `params` itself; the copy
    FastGPT keeps in `transposed` is here W.T [C_in, C_out], what BLAS's x @ w reads fastest
    (OpenBLAS's Haswell kernels: 1.0-1.4x faster than x @ W.T for one row, 1.0-1.6x for 4-8;
    docs/fast-path.md), read by every product no trick replaces, the plan's "plain" included.
    RMSNorm, SiLU and RoPE have tricks of their own (specdec/fast_cpu/llama.py), under the
    plan's names "compiled_norm", "gelu" and "attention"; the whole forward as one compiled
    call is specdec/fast_cpu/llama_step.py."""

    forward_module = llama_step
    activation_name = "silu"

    def __init__(
        self, config: LlamaConfig, params: dict[str, np.ndarray], plan: TrickPlan | None = None
    ) -> None:
        # the rotation's tables as wide as a head (rotate_by_products), from the config alone;
        # made before FastGPT's init, which measures passes that read them
        cos, sin = rope_tables(config)
        self.rope_cos2, self.rope_sin2 = whole_width(cos, sin)  # [n_ctx, hs] each
        super().__init__(config, params, plan)

    def output_name(self) -> str:
        tied = self.config.tie_word_embeddings
        return "model.embed_tokens.weight" if tied else "lm_head.weight"

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:  # [T, C_in] -> [T, C_out]
        w = self.params[name + ".weight"]  # [C_out, C_in]: the few-row products' w_t
        b = self.params.get(name + ".bias")  # only Qwen2's q/k/v have one
        T, shape = x.shape[0], w.shape[::-1]  # the plan's shapes are [C_in, C_out]
        if 1 < T <= FEW_ROWS and self.plan.uses("linear", shape, T):
            return linear_few_rows(x, w, NO_BIAS if b is None else b)
        if 1 < T <= FEW_ROWS and self.plan.uses("compiled", shape, T):
            if compiled.fits(w.shape[0]):
                return compiled.few_rows_product(x, w, NO_BIAS if b is None else b)
        y = x @ self.transposed_weight(name + ".weight")  # [C_in, C_out]
        if b is not None:
            y += b
        return y

    def norm(self, x: np.ndarray, name: str) -> np.ndarray:  # [..., C] -> [..., C]
        rows = x.shape[-2] if x.ndim > 1 else 1
        if self.plan.uses("compiled_norm", x.shape[-1:], rows) and compiled.AVAILABLE:
            g = self.params[("model.norm" if name == "ln_f" else name) + ".weight"]
            flat = x.reshape(-1, x.shape[-1])
            return rms_norm_rows(flat, g, self.config.rms_norm_eps).reshape(x.shape)
        return Llama.norm(self, x, name)

    def rotary_attention(self, q, k, v, i: int, cache, at) -> np.ndarray:
        # q [R, nh*hs], k/v [R, nkv*hs] -> [R, nh*hs]: Llama.rotary_attention (which says why
        # keys are cached rotated), with the rotation by products where the plan chose the
        # attention trick (the two run on the same passes)
        cfg = self.config
        T = at.shape[-1]
        if not self.plan.uses("attention", (cfg.n_head, cfg.head_size), T):
            return Llama.rotary_attention(self, q, k, v, i, cache, at)
        q = split_heads(q.reshape(at.shape + (-1,)), cfg.n_head)  # [..., nh, T, hs]
        k = split_heads(k.reshape(at.shape + (-1,)), cfg.n_kv_head)  # [..., nkv, T, hs]
        v = split_heads(v.reshape(at.shape + (-1,)), cfg.n_kv_head)
        cos = self.rope_cos2[at.positions][..., None, :, :]  # [..., 1, T, hs]
        sin = self.rope_sin2[at.positions][..., None, :, :]
        q, k = rotate_by_products(q, cos, sin), rotate_by_products(k, cos, sin)
        if cache is not None:
            k, v = cache.write_at(i, at, k, v)  # [..., nkv, S, hs]
        out = merge_heads(self.attend(q, k, v, at.mask))  # [..., T, nh*hs]
        return out.reshape(-1, out.shape[-1])

    def attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask=None) -> np.ndarray:
        # q [..., nh, T, hs], k/v [..., nkv, S, hs]: keys first, each key head once per group
        if self.plan.uses("attention", (q.shape[-3], q.shape[-1]), q.shape[-2]):
            return attention_keys_first(q, k, v, mask)
        return grouped_attention(q, k, v, mask)

    def activation(self, x: np.ndarray) -> np.ndarray:  # [...] -> [...]
        if self.plan.uses("gelu", x.shape[-1:], x.shape[0] if x.ndim > 1 else 1):
            return silu_by_products(x)
        return silu(x)

    def logits(self, h: np.ndarray) -> np.ndarray:
        # [T, C] -> [T, V]: h @ W^T, W [V, C] (lm_head, or the tied embedding) already laid
        # out as a w_t
        tied = self.config.tie_word_embeddings
        w = self.params["model.embed_tokens.weight" if tied else "lm_head.weight"]
        T = h.shape[0]
        if 1 < T <= FEW_ROWS and self.plan.uses("logits", w.shape, T):
            return logits_few_rows(h, w)
        return h @ w.T


NO_BIAS = np.float32(0.0)  # what the few-row products add where a Llama linear has no bias


def read_only(w: np.ndarray) -> np.ndarray:
    w.flags.writeable = False
    return w


def measure_passes(model: FastGPT, repeats: int = 7) -> TrickPlan:
    """The model's plan: its whole passes timed on this machine under each configuration of
    tricks (specdec/fast_cpu/plan.py), after a cached context of half its window, with every
    weight read before each timed pass."""
    cfg = model.config
    S = min(cfg.n_ctx // 2, cfg.n_ctx - MANY_ROWS)  # a cache half full, room for a prefill
    rng = np.random.default_rng(0)
    context = rng.integers(0, cfg.n_vocab, size=max(S, 0))
    new = rng.integers(0, cfg.n_vocab, size=MANY_ROWS)
    plans = {config: TrickPlan.fixed(config) for config in CONFIGS}
    measured = getattr(model, "plan", None)  # None while the model is being built
    model.plan = plans["all"]
    cache = model.new_cache()
    if len(context):
        model.forward(context, cache)
        cache.commit(len(context))

    def run_pass(config: str, T: int) -> None:
        model.plan = plans[config]
        try:
            model.forward(new[: min(T, cache.capacity - len(context))], cache)
        finally:
            cache.rollback()

    def touch() -> float:  # reads every byte of every weight (and layout) of the model
        arrays = [*model.params.values(), *(t for _, t in model.transposed.values())]
        arrays += model.sixteen_copies.arrays()
        return sum(float(np.add.reduce(a, axis=None)) for a in arrays)

    configs = offered_configs(model)
    note = f"compiled loop for {compiled.compiled_for()}"
    key = (type(model).__name__, repr(cfg))
    try:
        plan = measure_plan(run_pass, touch, key, repeats, configs, note)
        return dataclasses.replace(plan, activation=model.activation_name)
    finally:
        if measured is not None:
            model.plan = measured


def offered_configs(model: FastGPT) -> tuple[str, ...]:
    """The configurations the plan may time for this model: the compiled ones only where
    numba is installed, the 16-bit ones only where the model has 16-bit weights, and of those
    what SPECDEC_FAST_16BIT allows ("off": none; "on": instead of their float32 twins)."""
    configs = [c for c in CONFIGS if c not in COMPILED_CONFIGS or compiled.AVAILABLE]
    setting = sixteen.choice()
    if model.sixteen_copies.fmt is None or setting == "off":
        return tuple(c for c in configs if c not in SIXTEEN_BIT)
    if setting == "on":
        return tuple(c for c in configs if c not in SIXTEEN_BIT.values())
    return tuple(configs)


TRICK_CHOICES = ("measure", "all", "none")


def fast(model: GPT, tricks: str = "measure") -> FastGPT:
    """The fast-path twin of a plain model (its weights laid out anew, the model untouched):
    a FastGPT, or a FastLlama for a Llama-family model.

    tricks: "measure" (each trick kept where it timed faster here, specdec/fast_cpu/plan.py),
    "all" (every trick, whatever it costs: the parity tests) or "none" (the plain
    computations, in the fast model's weight layout)."""
    if tricks not in TRICK_CHOICES:
        raise ValueError(f"tricks must be one of {TRICK_CHOICES}, got {tricks!r}")
    forced = {"all": TrickPlan.all_tricks(), "none": TrickPlan.no_tricks()}.get(tricks)
    # FastGPT copies the linear weights into its own read-only layouts; the rest is copied
    # here, so that the two models share nothing
    params = {n: w if is_linear_weight(n, w) else w.copy() for n, w in model.params.items()}
    kind = FastLlama if isinstance(model, Llama) else FastGPT
    return kind(model.config, params, forced)

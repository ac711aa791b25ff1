# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Why one-token decoding is slow
#
# *Article §1 and §7. Code: `lab/costs.py`, `reference/model.py`, `reference/kv_cache.py`,
# `lab/fast_cpu.py`, `lab/roofline.py`.*
#
# A language model writes one token per call. Each call pushes **one** new position through
# every weight matrix: the hidden state is a `[1, H]` row multiplied by an `[H, H]` matrix.
# Such a product reads all H² weights from memory to do a single multiply-add with each of
# them. The processor spends its time waiting for memory, not computing.
#
# Speculative decoding's bet: if we already had k plausible next tokens, the same weights
# could score all of them in **one** pass, a `[k, H] @ [H, H]` product that reads the weights
# once and does k times the work. This notebook measures that on this machine — where the bet
# holds only once the product is computed with care — then looks at what a whole forward pass
# of the bundled models costs, and at the KV cache that makes one-token steps cheap in the
# first place.
#
# (Letters: H is a width, k a number of rows; T, in §2, counts the new positions of one
# forward pass, as in `reference/config.py`. In notebooks 05–08, T = 0.8 is a *temperature*.)

# %%
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from IPython.display import Image, display

from lab.bundled import bundled_pair_available, load_bundled_pair
from lab.costs import measure_costs
from lab.fast_cpu import FEW_ROWS, fast, linear_few_rows
from lab.figures import plot_forward_costs, plot_matmul_times, plot_roofline
from lab.roofline import floor_seconds, machine_rates, pass_products
from lab.standins import random_pair
from reference.tokenizer import encode

# figures go to a scratch folder, or to docs/figures when notebooks/render.py renders them
FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))

if bundled_pair_available():
    target, draft = load_bundled_pair()
    print("bundled trained pair (models/target, models/draft)")
else:  # a checkout without models/: untrained stand-ins, the numbers still mean something
    target, draft = random_pair(seed=0)
    print("models/ not found: random stand-ins (python -m training.train_pair makes the pair)")
print("target:", target.config)
print("draft: ", draft.config)
print("BLAS threads:", os.environ.get("OPENBLAS_NUM_THREADS", "library default"))

# %% [markdown]
# ## 1. `[1, H] @ [H, H]` against `[k, H] @ [H, H]`
#
# We time the product alone, in float32, for several widths H and row counts k. Each figure
# is the fastest of several repeats: other work on the machine can only add time, so the
# minimum is the figure that least depends on what else was running. If the product were
# limited by arithmetic, time would grow in proportion to k; if it is limited by reading the
# weights, the first few extra rows should cost almost nothing. We time it twice: the plain
# `x @ W` that `reference/model.py` writes, and the blocked product of `lab/fast_cpu.py`
# (`linear_few_rows`, used for 2 to 16 rows), which gives the same numbers computed in a
# different order.


# %%
def best_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.min(times))


rng = np.random.default_rng(0)
times, blocked = {}, {}  # H -> k -> seconds: plain x @ W, and the blocked few-row product
for H in (256, 512, 1024, 2048):
    W = rng.standard_normal((H, H), dtype=np.float32)  # [H, H]
    W_t, b = np.ascontiguousarray(W.T), np.zeros(H, np.float32)  # the layout fast_cpu stores
    repeats = 15 if H < 2048 else 9
    times[H], blocked[H] = {}, {}
    for k in (1, 2, 4, 8, 16, 32, 64):
        x = rng.standard_normal((k, H), dtype=np.float32)  # [k, H]
        times[H][k] = best_seconds(lambda x=x, W=W: x @ W, repeats)
        if 1 < k <= FEW_ROWS:
            blocked[H][k] = best_seconds(
                lambda x=x, W_t=W_t, b=b: linear_few_rows(x, W_t, b), repeats
            )

for name, table in (("x @ W", times), ("blocked (k = 2..16)", blocked)):
    print(f"µs per product, {name} (rows = H, columns = k):")
    print("H     " + "".join(f"{k:>9}" for k in table[256]))
    for H, row in table.items():
        print(f"{H:<6}" + "".join(f"{t * 1e6:9.1f}" for t in row.values()))
    print()
for H in (1024, 2048):
    print(
        f"k rows / one row, H = {H}:  x @ W",
        {k: round(t / times[H][1], 2) for k, t in times[H].items() if k <= 16},
        "  blocked",
        {k: round(t / times[H][1], 2) for k, t in blocked[H].items()},
    )

# %% [markdown]
# Read the tables by rows.
#
# **The plain product breaks the premise.** From H = 1024 up, `x @ W` with two rows costs
# two to four times one row, not "almost nothing" more. NumPy hands the product to OpenBLAS,
# which serves one row with a matrix–vector kernel that streams W once, but for two rows or
# more switches to its matrix–matrix kernel, and that kernel first copies ("packs") W into a
# tiled layout: one extra pass over all the weights, plus writing the copy, before any
# arithmetic. Past that step, extra rows are cheap again — per row, 16 rows cost much less
# than 2 — but a verification pass of k + 1 ≈ 3–9 rows sits right in the expensive step.
#
# **The blocked product restores it.** `linear_few_rows` cuts W into blocks small enough for
# OpenBLAS's small-matrix kernels, which skip the packing; each weight is read once for all
# rows. At H ≥ 1024 a few rows then cost little more than one (the second table). At H = 256
# it is slower than `x @ W`: the matrix is tiny and the per-call cost of many small products
# dominates — the fast path is for widths like the bundled target's.
#
# Arithmetic intensity — multiply-adds per byte moved — says why the premise holds once the
# weights are read only once. For `[k, H] @ [H, H]` in float32 the work is 2kH² operations and
# the traffic at least 4(H² + 2kH) bytes, so the intensity is about k/2 for k ≪ H: with
# k = 1 the processor idles, with k = 8 it does eight times more useful work per byte read.
#
# **The jump between H = 512 and H = 1024.** W grows 4× (1 MiB to 4 MiB of float32), but
# the one-row time grows far more. This CPU has 2 MiB of L2 cache per core: a 512 × 512
# matrix timed over and over stays in L2, while a 1024 × 1024 one is fetched from the slower
# L3 each time. A small matrix in a timing loop flatters the hardware; the bundled target's
# 44 MB of weights never fit in L2, so every decode step runs at the slower rate.

# %%
# the claims above, checked on this run (a re-render where they fail stops here)
raw_2 = {H: times[H][2] / times[H][1] for H in (1024, 2048)}
assert all(2 <= r <= 4.5 for r in raw_2.values()), f"x @ W, 2 rows / 1 row: {raw_2}"
assert times[1024][16] / 16 < times[1024][2] / 2, "per row, 16 rows should beat 2"
for H in (1024, 2048):
    assert blocked[H][2] < 0.6 * times[H][2], f"H = {H}: the blocked product is no cheaper"
    assert blocked[H][4] < 1.6 * times[H][1], f"H = {H}: 4 blocked rows cost > 1.6 rows"
assert blocked[256][2] > times[256][2], "at H = 256 the blocked product should be slower"
jump = times[1024][1] / times[512][1]
assert jump > 6, f"one-row time 512 -> 1024 grew only {jump:.1f}x for 4x the weights"

# %%
path = plot_matmul_times(times, FIGURES / "matmul_rows.png", blocked=blocked)
display(Image(filename=str(path)))

# %% [markdown]
# (Timings depend on the machine and its load; the shape, not the digits, is the lesson. The
# rendered copy ran with one BLAS thread — `notebooks/render.py` sets it, to keep timings
# steady on a shared machine.)
#
# ## 2. The bundled models' per-token cost
#
# `lab.costs.measure_costs` times real forward passes with a warm KV cache: a
# one-token step of the target and of the draft, and a target pass that appends T new
# positions at once — exactly what verification of T − 1 drafts does. Two numbers come out:
#
# * **c** = draft step / target step: the price of one guess, in target steps;
# * **v(T)** = time of a T-position pass / time of a one-token pass. Leviathan et al. assume
#   v ≈ 1 (true on a GPU for small T); on a CPU it is larger, and this is what we measure.
#
# The plain model computes every linear layer as `x @ w`, so its v(T) inherits §1's packing
# step: each of the target's 24 weight matrices (384 wide, 0.6–2.4 MB) is packed once per
# pass with T ≥ 2, and v(2) is already well above 1.

# %%
context = encode("def fibonacci(n):\n    if n < 2:\n        return n\n" * 2)
profile = measure_costs(target, draft, context, max_T=8, repeats=9)
print(f"target one-token step: {profile.target_step * 1e3:.2f} ms")
print(f"draft one-token step:  {profile.draft_step * 1e3:.3f} ms  ->  c = {profile.c:.3f}")
print("v(T):", {T: round(profile.verify_cost(T), 2) for T in sorted(profile.target_append)})
assert profile.verify_cost(2) > 1.5, "the plain model's 2-position pass should show the packing"

# %%
path = plot_forward_costs(profile, FIGURES / "forward_costs.png")
display(Image(filename=str(path)))

# %% [markdown]
# ### The same models through the CPU fast path
#
# `reference/model.py` computes `x @ w + b` and plain attention, as the article writes them.
# On a CPU, OpenBLAS first copies ("packs") a whole weight matrix before a product with a few
# rows, so a pass over T = k + 1 positions costs several one-token passes — the v(T) above.
# `lab/fast_cpu.py` gives the same logits with products cut into blocks that OpenBLAS runs
# without packing (and a few cheaper NumPy calls for the draft's one-row steps); the bench
# and the demo use it. Same weights, same numbers, different speed:
#
# v(T) need not grow steadily with T. OpenBLAS's kernels work on a fixed number of rows at a
# time, so a T that leaves a part-filled group costs nearly what the next full group costs
# (the fast path cuts each weight into slices of 32 output features, `slice_rows` in
# `lab/fast_cpu.py`, whatever T is; the kernel for each slice still steps with T). The line
# printed below the table lists where v dipped in this run; with few repeats, timing noise
# adds dips of its own.

# %%
fast_profile = measure_costs(fast(target), fast(draft), context, max_T=8, repeats=9)
print("            c      " + "  ".join(f"v({T})" for T in sorted(profile.target_append)))
for name, prof in (("plain", profile), ("fast path", fast_profile)):
    print(
        f"{name:10s} {prof.c:.3f}  "
        + "  ".join(f"{prof.verify_cost(T):.2f}" for T in sorted(prof.target_append))
    )
for name, prof in (("plain", profile), ("fast path", fast_profile)):
    dips = [T + 1 for T in range(1, 8) if prof.verify_cost(T + 1) < prof.verify_cost(T)]
    print(f"{name}: v(T) lower than v(T - 1) at T = {dips}")
# the fast path's claim: multi-position passes cost fewer one-token steps than the plain
# model's (checked on v(2) and on the mean over T = 2..8, which timing noise moves less)
mean_v = {
    name: np.mean([prof.verify_cost(T) for T in range(2, 9)])
    for name, prof in (("plain", profile), ("fast path", fast_profile))
}
assert fast_profile.verify_cost(2) < profile.verify_cost(2)
assert mean_v["fast path"] < mean_v["plain"], mean_v

# %% [markdown]
# ### How fast could a pass be? The roofline
#
# A pass over T new positions must read every weight once (and the cached K/V), whatever T
# is, and does 2·T floating-point operations per weight. Two rates of this machine bound it:
# how fast one core can stream the weights (measured as one-row products over the target's
# own 24 matrices) and how fast it can compute (a large float32 product). Each product of
# the pass then costs at least max(bytes / bandwidth, FLOPs / FLOP rate) — the *roofline*;
# `lab/roofline.py` adds that up over the layers.
#
# For a few rows the bytes term wins by far, so the floor is **flat**: on this hardware a pass
# over 8 rows could cost what one row costs, v(8) = 1, exactly Leviathan's assumption. The
# measured fast path is nowhere near that for T > 2, and the plain model further still. What
# the gap is made of, product by product, and which changes to the fast path closed part of
# it: `python -m lab.roofline` and docs/benchmarks.md, "The CPU limit".

# %%
rates = machine_rates(target)
print(
    f"bandwidth {rates.bandwidth / 1e9:.1f} GB/s (one-row products over the target's weights), "
    f"FLOP rate {rates.flops / 1e9:.0f} GFLOP/s (a 1024^3 product), one BLAS thread"
)
S = len(context)
floors = {T: floor_seconds(target, T, S + T, rates) for T in range(1, 9)}
print("\nT   floor ms   fast path ms   v floor   v fast   v plain")
for T in range(1, 9):
    print(
        f"{T}   {floors[T] * 1e3:8.2f}   {fast_profile.target_append[T] * 1e3:12.2f}"
        f"   {floors[T] / floors[1]:7.2f}   {fast_profile.verify_cost(T):6.2f}"
        f"   {profile.verify_cost(T):7.2f}"
    )
print("\nper product at T = 8 (6 layers): MB read, MFLOP, floor in µs, bound by")
for product in pass_products(target, 8, S + 8):
    by_bytes = product.bytes / rates.bandwidth >= product.flops / rates.flops
    print(
        f"  {product.name:12s} {product.bytes / 1e6:6.2f} MB {product.flops / 1e6:7.1f} MFLOP"
        f" {product.floor(rates) * 1e6:7.0f} µs   {'bytes' if by_bytes else 'FLOPs'}"
    )
# the claims above, on this run: the floor is flat up to 8 rows, the fast path is not
assert floors[8] < 1.05 * floors[1], "the floor should be bytes-bound up to T = 8"
assert fast_profile.target_append[8] > 1.2 * floors[8]

# %%
curves = {"plain": profile.target_append, "fast path": fast_profile.target_append}
path = plot_roofline(curves, floors, FIGURES / "roofline_bundled_target.png")
display(Image(filename=str(path)))

# %% [markdown]
# ## 3. The KV cache: why a one-token step is one position, not the whole prefix
#
# Attention at a new position needs the keys and values of **every** earlier position.
# Without a cache, each step would recompute them from scratch: a forward over the whole
# prefix. The KV cache stores them once, so a decode step feeds only the newest token. The
# cache is cheap in memory next to the weights, but every step still has to *read* both —
# the weights and the cached history — which is the memory traffic of §1.

# %%
for n in (32, 128, 256):
    prefix = np.resize(context, n)  # [n] tokens
    uncached = best_seconds(lambda prefix=prefix: target.forward(prefix), repeats=3)
    cache = target.new_cache()
    target.forward(prefix[:-1], cache)
    cache.commit(n - 1)

    def step(cache=cache, last=prefix[-1:]):
        target.forward(last, cache)  # one new position, its K/V written as temporary
        cache.rollback()  # forget it again, so every repeat sees the same cache

    cached = best_seconds(step, repeats=9)
    print(
        f"context {n:3d}: recompute everything {uncached * 1e3:7.1f} ms   "
        f"cached step {cached * 1e3:5.2f} ms   ({uncached / cached:5.1f}x)"
    )
    assert uncached > 3 * cached, "a cached step should be far cheaper than recomputing"

cfg = target.config
weights = sum(w.nbytes for w in target.params.values())
per_token = 2 * cfg.n_layer * cfg.n_embd * 4  # K and V, every layer, float32
print(f"\ntarget weights: {weights / 1e6:.1f} MB read by every step")
print(
    f"KV cache: {per_token / 1e3:.1f} kB per cached token "
    f"({per_token * cfg.n_ctx / 1e6:.1f} MB at the full {cfg.n_ctx}-token context)"
)

# %% [markdown]
# **What to take away.** A one-token step is dominated by moving weights (and the cached
# history) rather than by arithmetic. Scoring several positions in one pass can share that
# movement — provided the product reads the weights once, which on this CPU takes the
# blocked product rather than a plain `x @ W`. Speculative decoding supplies those
# positions by guessing them with a cheap draft model (notebook 03) and checking all guesses
# in one target pass (notebook 04). It does not shrink the cache or the history — it cuts
# the number of sequential target calls.
#
# **Where it sits among KV-cache optimisations** (article §9). Grouped-query and latent
# attention (GQA, MLA) make each cached entry narrower; sliding windows and pruning keep
# fewer entries; speculative decoding leaves the cache as it is and reduces how many times
# the big model must be called one after another. The three act on different things, so they
# combine.

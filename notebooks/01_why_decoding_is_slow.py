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
# *Article §1 and §7. Code: `specdec/costs.py`, `reference/model.py`, `reference/kv_cache.py`,
# `specdec/fast_cpu/model.py`, `specdec/fast_cpu/plan.py`, `specdec/measure/session_costs.py`,
# `specdec/measure/roofline.py`, `specdec/machine.py`.*
#
# A language model writes one token per call. Each call pushes **one** new position through
# every weight matrix: the hidden state is a `[1, H]` row multiplied by an `[H, H]` matrix.
# Such a product reads all H² weights from memory to do a single multiply-add with each of
# them. The processor spends its time waiting for memory, not computing.
#
# Speculative decoding's bet: if we already had k plausible next tokens, the same weights
# could score all of them in **one** pass, a `[k, H] @ [H, H]` product that reads the weights
# once and does k times the work. This notebook measures that on the machine it runs on —
# on many CPUs the bet holds only once the product is computed with care — then looks at what
# a whole forward pass of the bundled models costs, and at the KV cache that makes one-token
# steps cheap in the first place.
#
# Every time below is a fact about one CPU, its BLAS library, the kernels that library picked
# and the number of threads; the first cell prints all four. The prose says what to look for;
# the numbers, and what they mean for this machine, are printed by the cells themselves.
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

from specdec.bundled import bundled_pair_available, load_bundled_pair
from specdec.fast_cpu import FEW_ROWS, fast, linear_few_rows
from specdec.fast_cpu.plan import describe_plan
from specdec.figures import plot_forward_costs, plot_matmul_times, plot_roofline
from specdec.machine import cache_sizes, describe_machine, mib, use_blas_threads
from specdec.measure.roofline import floor_seconds, machine_rates, pass_products
from specdec.measure.session_costs import session_costs
from specdec.standins import random_pair

use_blas_threads()  # the same BLAS threads in JupyterLab as in render.py (specdec/machine.py)
machine = describe_machine()
print(machine.line())
# figures go to a scratch folder, or to docs/figures when notebooks/render.py renders them
FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))

if bundled_pair_available():
    target, draft = load_bundled_pair()
    print("bundled trained pair (models/target, models/draft)")
else:  # a checkout without models/: untrained stand-ins, the numbers still mean something
    target, draft = random_pair(seed=0)
    print("models/ not found: random stand-ins (`python -m specdec.training.train_pair`)")
print("target:", target.config)
print("draft: ", draft.config)

# %% [markdown]
# ## 1. `[1, H] @ [H, H]` against `[k, H] @ [H, H]`
#
# We time the product alone, in float32, for several widths H and row counts k. Each figure
# is the fastest of several repeats: other work on the machine can only add time, so the
# minimum is the figure that least depends on what else was running. If the product were
# limited by arithmetic, time would grow in proportion to k; if it is limited by reading the
# weights, the first few extra rows should cost almost nothing. We time it twice: the plain
# `x @ W` that `reference/model.py` writes, and the blocked product of `specdec/fast_cpu/model.py`
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

# %% [markdown]
# Read the tables by rows, then the lines printed under them, which say what this run found.
#
# **Packing.** NumPy hands the product to its BLAS library. On many CPUs OpenBLAS serves one
# row with a matrix–vector kernel that streams W once, but for two rows or more switches to
# its matrix–matrix kernel, and that kernel first copies ("packs") W into a tiled layout: one
# extra pass over all the weights, plus writing the copy, before any arithmetic. Where that
# happens, two rows cost several times one row instead of "almost nothing" more, and the
# premise fails exactly where verification sits (k + 1 ≈ 3–9 rows). Past that step extra rows
# are cheap again: per row, 16 rows cost much less than 2, since W is read once for all 16.
#
# **Blocks.** `linear_few_rows` cuts W into slices of a few dozen output features, small
# enough for OpenBLAS's small-matrix kernels, which skip the packing; each weight is read once
# for all rows. Where packing was the cost and the small kernels are quick, a few rows come
# back close to one row's cost. But with other kernels (OpenBLAS's Haswell ones, which AVX2
# laptops run, for one), another thread count, or a W so small that the fixed cost of many
# small products dominates, the blocked product can be the slower of the two, packing or not.
# Which way it went here, width by width, is printed below; that it can go either way is why
# the fast path of §2 times each of its tricks on the machine before keeping it.
#
# Arithmetic intensity — floating-point operations (FLOPs) per byte moved, a multiply-add
# counting as two — says why the premise holds once the weights are read only once. For
# `[k, H] @ [H, H]` in float32 the work is 2kH² FLOPs and the traffic at least 4(H² + 2kH)
# bytes, so the intensity is about k/2 FLOPs per byte for k ≪ H: with k = 1 the processor
# idles, with k = 8 it does eight times more useful work per byte read.
#
# **Where W lives.** W grows 4× from one width to the next (at H = 512 it is 1 MiB of
# float32, at H = 1024 4 MiB). Timed over and over, a matrix that fits in a cache stays there,
# and one that does not is fetched from the next, slower level every time; so the one-row
# time grows about 4× between two widths served from the same level, and more where the step
# crosses a cache's size. The cache sizes the OS reports for this CPU, and where each W can
# stay, are printed below. A small matrix in a timing loop flatters the hardware; what the
# bundled target's weights are up against is printed too.

# %%
# what this run measured, said in words (printed, never asserted: another CPU, BLAS kernel
# or thread count gives other ratios, and the prose above is written for any of them)
for H in (1024, 2048):
    plain_x = [times[H][k] / times[H][1] for k in (2, 4, 8, 16)]
    blocked_x = [blocked[H][k] / times[H][1] for k in (2, 4, 8, 16)]
    print(f"H = {H}: 2, 4, 8, 16 rows cost " + ", ".join(f"{r:.1f}x" for r in plain_x)
          + " one row with x @ W; " + ", ".join(f"{r:.1f}x" for r in blocked_x) + " blocked")
for H in times:
    faster = [k for k in blocked[H] if blocked[H][k] < times[H][k]]
    print(f"H = {H:4d}: the blocked product beat x @ W at k = {faster or 'none'} "
          f"of {list(blocked[H])}")

caches = cache_sizes()  # {'L1d': bytes, 'L2': ..., 'L3': ...}, as the OS reports them
print("\ncaches of this CPU (the OS):", ", ".join(f"{n} {mib(b)}" for n, b in caches.items())
      or "not reported")
for H in times:
    W_bytes = H * H * 4
    home = next((n for n, b in caches.items() if W_bytes <= b), "none")  # smallest that holds W
    growth = "" if H == 256 else f", one row {times[H][1] / times[H // 2][1]:.1f}x H = {H // 2}'s"
    print(f"H = {H:4d}: W is {mib(W_bytes):>7}, smallest cache as large: {home:4s}{growth}")
target_bytes = sum(w.nbytes for w in target.params.values())
last = max(caches, key=caches.get) if caches else None
if last:
    where = "fit in" if target_bytes <= caches[last] else "are larger than"
    print(f"the bundled target's {target_bytes / 1e6:.1f} MB of weights {where} the "
          f"{last} cache ({mib(caches[last])})")

# facts that hold on any CPU (a product that reads W once for all rows)
per_row = {k: times[1024][k] / k for k in (2, 16)}
assert per_row[16] < per_row[2], (
    f"H = 1024: per row, 16 rows should cost less than 2 rows (W is read once for all rows); "
    f"measured {per_row[16] * 1e6:.1f} µs against {per_row[2] * 1e6:.1f} µs"
)
x = rng.standard_normal((4, 1024), dtype=np.float32)
W = rng.standard_normal((1024, 1024), dtype=np.float32)
got = linear_few_rows(x, np.ascontiguousarray(W.T), np.zeros(1024, np.float32))
assert np.allclose(got, x @ W, rtol=1e-4, atol=1e-3), (
    f"the blocked product should give x @ W's numbers; max |diff| {np.abs(got - x @ W).max():.2g}"
)

# %%
path = plot_matmul_times(times, FIGURES / "matmul_rows.png", blocked=blocked)
display(Image(filename=str(path)))

# %% [markdown]
# (Timings depend on the machine and its load; the shape, not the digits, is the lesson. The
# rendered copy ran on the machine its first cell names, with the BLAS threads it names —
# one unless `SPECDEC_BLAS_THREADS` says otherwise, to keep timings steady on a shared
# machine.)
#
# ## 2. The bundled models' per-token cost
#
# Real forward passes with a warm KV cache: a one-token step of the target and of the draft,
# and a target pass that appends T new positions at once — exactly what verification of
# T − 1 drafts does. Two numbers come out:
#
# * **c** = draft step / target step: the price of one guess, in target steps;
# * **v(T)** = time of a T-position pass / time of a one-token pass.
#   [Leviathan et al., 2023](../docs/references.md#leviathan2023) assume v ≈ 1 (true on a GPU
#   for small T); on a CPU it is often larger, and this is what we measure. Here the lab
#   departs from the paper: its cost model keeps v(T) as a measured number.
#
# Notebooks 07 and 08 need the same c and v, and a shared machine gives a different number
# each time it is asked. So they are measured once per session, by
# `specdec/measure/session_costs.py`: the first notebook that asks measures (the T's taken in turn,
# the fastest of 15 passes each, after a 128-token code context), and the others read the same
# numbers back — for an hour, on the same machine line, for the same weights. The line under the
# numbers says whether they were measured now or reused.
#
# The plain model computes every linear layer as `x @ w`, so its v(T) inherits §1's packing
# step wherever this CPU's BLAS packs: each of the target's 24 weight matrices (384 wide,
# 0.6–2.4 MB) is then packed once per pass with T ≥ 2.

# %%
plain_costs = session_costs(target, draft)  # specdec/measure/session_costs.py: once per session
profile, context = plain_costs.profile, plain_costs.context
print(f"plain model, {plain_costs.origin()}, after a {len(context)}-token context")
print(f"target one-token step: {profile.target_step * 1e3:.2f} ms")
print(f"draft one-token step:  {profile.draft_step * 1e3:.3f} ms  ->  c = {profile.c:.3f}")
print("v(T):", {T: round(profile.verify_cost(T), 2) for T in sorted(profile.target_append)})
print(f"on this machine a second position costs {profile.verify_cost(2) - 1:.0%} of a step "
      f"more, and 8 positions cost {profile.verify_cost(8):.1f} steps")

# %%
path = plot_forward_costs(profile, FIGURES / "forward_costs.png")
display(Image(filename=str(path)))

# %% [markdown]
# ### The same models through the CPU fast path
#
# `reference/model.py` computes `x @ w + b` and plain attention, as the article writes them.
# Where OpenBLAS packs a whole weight matrix before a product with a few rows, a pass over
# T = k + 1 positions costs several one-token passes. `specdec/fast_cpu/model.py` can compute the
# same logits in other ways: products cut into blocks that OpenBLAS runs without packing (§1), or a
# compiled loop (numba, where installed) that reads each weight once for every row while the next
# weights load, attention with the long side of the product first, GELU without temporaries, and the
# output layer in its stored layout; or the whole forward as one compiled call, its rows one by one
# (the draft's step: NumPy's per-call overhead was nearly all of it) or together (a verification
# pass); the bench and the demo use it. Same weights, same numbers (checked below, on a
# verification-shaped pass). Whether a trick also buys speed depends on the CPU, its kernels, the
# thread count, the shape, and where the weights are when it runs (a model larger than the CPU's
# cache streams them from memory at every pass), so `fast(model)` first times whole passes of the
# model, for every pass size it serves, under each configuration of tricks (plain among them), and
# keeps the fastest for each size (`specdec/fast_cpu/plan.py`). The cell prints what it kept on this
# machine, then what the whole passes cost.
#
# v(T) need not grow steadily with T. BLAS kernels work on a fixed number of rows at a time,
# so a T that leaves a part-filled group costs nearly what the next full group costs. The
# line printed below the table lists where v dipped in this run; timing noise adds dips of
# its own.

# %%
fast_target, fast_draft = fast(target), fast(draft)
# same numbers: a pass over 5 new positions after the context, as verifying 4 drafts does
logits = {}
for name, model in (("plain", target), ("fast path", fast_target)):
    cache = model.new_cache()
    model.forward(context[:-5], cache)
    logits[name] = model.forward(context[-5:], cache)  # [5, V]
diff = np.abs(logits["fast path"] - logits["plain"]).max()
assert diff < 1e-4, f"the fast path should give the plain logits to float32 rounding; {diff:.2g}"
print(f"fast path against plain, 5 new positions: max |logit difference| {diff:.1e}")

print("\ntarget:", describe_plan(fast_target.plan))
print("draft:", describe_plan(fast_draft.plan))
fast_costs = session_costs(fast_target, fast_draft)
fast_profile = fast_costs.profile
print(f"fast path, {fast_costs.origin()}\n")
print("            c      " + "  ".join(f"v({T})" for T in sorted(profile.target_append)))
for name, prof in (("plain", profile), ("fast path", fast_profile)):
    print(
        f"{name:10s} {prof.c:.3f}  "
        + "  ".join(f"{prof.verify_cost(T):.2f}" for T in sorted(prof.target_append))
    )
for name, prof in (("plain", profile), ("fast path", fast_profile)):
    dips = [T + 1 for T in range(1, 9) if prof.verify_cost(T + 1) < prof.verify_cost(T)]
    print(f"{name}: v(T) lower than v(T - 1) at T = {dips}")
# what the fast path bought here, over the passes verification uses (printed, not asserted:
# it depends on this CPU, its kernels and threads, and on the machine's load)
mean_v = {
    name: np.mean([prof.verify_cost(T) for T in range(2, 10)])
    for name, prof in (("plain", profile), ("fast path", fast_profile))
}
step_ratio = fast_profile.target_step / profile.target_step
print(f"on this machine the fast path's mean v over T = 2..9 is {mean_v['fast path']:.2f} "
      f"against the plain model's {mean_v['plain']:.2f}; its one-token step takes "
      f"{step_ratio:.2f}x the plain step's time")

# %% [markdown]
# ### How fast could a pass be? The roofline
#
# A pass over T new positions must read every weight once (and the cached K/V), whatever T
# is, and does 2·T floating-point operations per weight. Two rates of this machine bound it:
# how fast it can stream the weights (measured as one-row products over the target's own 24
# matrices) and how fast it can compute (a large float32 product), both on the BLAS threads
# of this run. Each product of the pass then costs at least max(bytes / bandwidth,
# FLOPs / FLOP rate) — the *roofline* of
# [Williams, Waterman & Patterson, 2009](../docs/references.md#roofline2009);
# `specdec/measure/roofline.py` adds that up over the layers, with the two rates measured here.
#
# A weight used by T rows gives T/2 FLOPs per byte read, and a CPU's FLOP rate is usually
# several times its bandwidth in bytes, so for a few rows the bytes term wins and the floor is
# **flat**: a pass over several rows could cost what one row costs, v = 1, exactly Leviathan's
# assumption. How far the floor stays flat on this machine, and how far the measured passes
# are from it, is printed under the table. (The two rates and the passes are timed at
# different moments; on a busy machine a pass can even come out below its floor.) What the
# gap is made of, product by product, and which changes to the fast path closed part of it:
# `python -m specdec.measure.roofline` and docs/benchmarks.md, "The CPU limit".

# %%
rates = machine_rates(target)
threads = f"{machine.threads} BLAS thread" + ("s" if machine.threads != 1 else "")
print(
    f"bandwidth {rates.bandwidth / 1e9:.1f} GB/s (one-row products over the target's weights), "
    f"FLOP rate {rates.flops / 1e9:.0f} GFLOP/s (a 1024^3 product), {threads}"
)
S = len(context)
floors = {T: floor_seconds(target, T, S + T, rates) for T in range(1, 10)}
print("\nT   floor ms   fast path ms   v floor   v fast   v plain")
for T in range(1, 10):
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
# the claims above, in this run's numbers
flat_to = max(T for T in floors if floors[T] <= 1.05 * floors[1])
print(f"\non this machine the floor stays within 5 % of one row's up to T = {flat_to}; "
      f"at T = 8 it allows v = {floors[8] / floors[1]:.2f}, the fast path measured "
      f"v(8) = {fast_profile.verify_cost(8):.2f} and the plain model {profile.verify_cost(8):.2f}")
print("measured pass / floor, fast path:",
      {T: round(fast_profile.target_append[T] / floors[T], 1) for T in (1, 2, 4, 8)})
# a law of the roofline model, on any machine: a T-row pass reads no less than a one-row
# pass and computes T times as much, so its floor can only grow with T
assert all(floors[T + 1] >= floors[T] for T in range(1, 9)), (
    f"the floor should not fall as T grows, got {floors}"
)

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
    if n == 256:  # on any CPU: 256 positions of arithmetic against one, the same weights read
        assert uncached > 2 * cached, (
            f"a cached step should cost far less than recomputing a {n}-token prefix; measured "
            f"{cached * 1e3:.2f} ms against {uncached * 1e3:.1f} ms"
        )

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
# movement — provided the product reads the weights once, which a plain `x @ W` does not do
# where the BLAS packs a few-row product, and which the blocked product restores only with
# kernels that suit it (§1 printed what this machine does).
# Speculative decoding supplies those positions by guessing them with a cheap draft model
# (notebook 03) and checking all guesses in one target pass (notebook 04). It does not
# shrink the cache or the history — it cuts the number of sequential target calls.
#
# **Where it sits among KV-cache optimisations** (article §9). Grouped-query and latent
# attention (GQA, MLA) make each cached entry narrower; sliding windows and pruning keep
# fewer entries; speculative decoding leaves the cache as it is and reduces how many times
# the big model must be called one after another. The three act on different things, so they
# combine.

# %% [markdown]
# ## Check yourself
#
# Answer from this notebook alone, then compare with a neighbour:
#
# 1. A one-token step multiplies a `[1, H]` row by an `[H, H]` matrix. Why is its time set
#    by reading memory rather than by arithmetic, and what does a `[k, H] @ [H, H]`
#    product change?
# 2. What is packing in OpenBLAS, and why can it make two rows cost several times one row,
#    right where verification sits?
# 3. Define c and v(T). Which of the two do Leviathan et al. take to be about 1, and why
#    is it often larger on a CPU?
# 4. The roofline bounds each product by max(bytes / bandwidth, FLOPs / FLOP rate). Why is
#    that floor flat for a pass over a few rows?
# 5. What does the KV cache save, and how does speculative decoding differ from GQA, MLA
#    or a sliding window (article §9)?
#
# (The answers are kept apart, for instructors: `specdec course DIR --instructor BUNDLE`
# writes them beside the students' copy; docs/teaching.md.)

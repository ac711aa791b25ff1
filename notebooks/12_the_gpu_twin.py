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
# # 12 · The GPU twin: the same loop, one host sync per round
#
# *Article §7 (why speculative decoding uses the hardware better) and §8. Code: `gpu/`
# (`gpu/device/backend.py`: `to_host`, `counting_transfers`; `gpu/verification.py`:
# `decide`; `gpu/speculative.py`: `settle`), `specdec/measure/gpu_bench.py`, `scripts/gpu_check.sh`.
# Tests: `tests/twin/`, `make oracle-gpu`. Text: `docs/gpu.md`.*
#
# `gpu/` is a second implementation of the core, written for a GPU with CuPy. It is a
# **twin**: the same public names with the same signatures as `reference/`, so a program
# switches by writing `import gpu` instead of `import reference`. `gpu.GPT(config, params)`
# takes a reference model's weights and copies them to the device once.
#
# The algorithm does not change; what changes is *where the host waits*. On a GPU the
# Python program and the device run side by side: Python queues kernels, the device runs
# them. Whenever Python needs a *value* — a token id to compare with EOS, a probability to
# compare with a uniform — it must stop, wait for the device to finish everything queued,
# and copy the value back. That stop is a **host sync**. The twin is arranged so that a
# whole speculative round needs one.
#
# Without a CUDA device (this render, CI) `gpu.device.backend.xp` is NumPy and the twin runs
# its own code paths on the host, so everything below that *counts* is exact here too.
# Nothing below that *times* is a GPU figure: those come from `scripts/gpu_check.sh` on a
# device (section 5).

# %%
import ast
import inspect
import json
import os
import sys
import tempfile
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image, display

import gpu
import reference
from gpu.device.backend import (
    backend_name,
    counting_launches,
    counting_transfers,
    to_device,
    to_host,
)
from gpu.verification import decide
from reference.sampling import GREEDY, SamplingParams
from reference.tokenizer import decode, encode
from specdec.bundled import bundled_pair_available, load_bundled_pair
from specdec.figures.style import colour_for, save
from specdec.machine import describe_machine, use_blas_threads
from specdec.measure.bench import CODE_PROMPTS, held_out_code_prompts
from specdec.measure.gpu_bench import launch_model, launch_rows
from specdec.standins import random_pair

use_blas_threads()  # the same BLAS threads in JupyterLab as in render.py (specdec/machine.py)
print(describe_machine().line())
FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))
ROOT = Path(gpu.__file__).resolve().parents[1]  # the repository, or site-packages if installed
target, draft = load_bundled_pair() if bundled_pair_available() else random_pair(seed=0)
twin_target = gpu.GPT(target.config, target.params)  # the weights, copied to the device
twin_drafter = gpu.ModelDrafter(gpu.GPT(draft.config, draft.params))
print("twin backend:", backend_name())

# %% [markdown]
# ## 1. The same names, and a file per difference
#
# Every public name of `reference` is in `gpu` with the same signature
# (`tests/twin/test_twin_interface.py` holds it to that). The host-side pieces — the config,
# `SamplingParams`, the result types, the input checks — are the reference's own objects,
# imported, not copied. Where the GPU changes the algorithm, a file of `gpu/` mirrors its
# reference counterpart and opens by saying what differs and why; what only a device needs
# (the array module, the kernels, the counting device) is in `gpu/device/`:

# %%
for path in sorted((ROOT / "gpu").glob("*.py")) + sorted((ROOT / "gpu" / "device").glob("*.py")):
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    name = path.relative_to(ROOT / "gpu").as_posix()
    print(f"gpu/{name:25s} {doc.splitlines()[0] if doc else ''}")
print("\nnot twinned yet:", sorted(set(reference.__all__) - set(gpu.__all__)) or "nothing")
print("the reference's own objects:",
      all(getattr(gpu, n) is getattr(reference, n)
          for n in ("GPTConfig", "SamplingParams", "Verification", "SpeculativeStats", "Draft")))

# %% [markdown]
# ## 2. Where the host waits
#
# ### In the reference's round
#
# The reference decides position by position in a Python loop: one fresh uniform, one
# comparison, and at the first rejection one residual sample.

# %%
print(inspect.getsource(reference.verification.verify_unchecked))

# %% [markdown]
# In NumPy this is free: array and Python share one memory. Ported to a GPU line for line,
# every place where Python reads a number out of an array becomes a host sync:
#
# * `accepts(p[i, x], q[i, x], rng)` turns two probabilities into Python floats to compare
#   them with a uniform — once per examined position;
# * `sample_token` ends in `int(...)`: each drafted token goes through Python before it is
#   fed to the next draft step, and so does the round's last token;
# * `check_finite` asks whether an array is free of NaN (`if not np.all(...)`): inside
#   `probabilities`, once per draft step and once for the target's rows, and once more when
#   the round checks the drafter's proposal (`check_draft`).
#
# We count those three calls in real rounds of the bundled pair with a profiler hook, which
# sees every Python call without changing any code. (The reference's other input checks
# read a few more values — row sums, signs — so the count is a floor.)

# %%
@contextmanager
def counting_calls(label):
    """Count Python function calls while inside: `label(frame)` names a call to count, or
    returns None to skip it. Yields a Counter that fills as calls happen."""
    counts = Counter()

    def hook(frame, event, arg):
        if event == "call" and (name := label(frame)) is not None:
            counts[name] += 1

    sys.setprofile(hook)
    try:
        yield counts
    finally:
        sys.setprofile(None)


HOST_READS = {  # where the reference reads a value back into Python
    reference.verification.accepts.__code__: "accepts (p, q -> floats)",
    reference.sampling.sample_token.__code__: "sample_token (int)",
    reference.checks.check_finite.__code__: "check_finite (bool)",
}


def reference_host_reads(prompt, k, sampling, max_new_tokens=64):
    # -> (Counter of host reads by kind, the run's SpeculativeResult)
    with counting_calls(lambda f: HOST_READS.get(f.f_code)) as reads:
        out = reference.speculative_generate(
            target, reference.ModelDrafter(draft), prompt, k=k, max_new_tokens=max_new_tokens,
            rng=np.random.default_rng(0), sampling=sampling)
    return reads, out


prompt = encode(CODE_PROMPTS[3])
k = 4
for sampling in (GREEDY, SamplingParams(temperature=0.8)):
    reads, out = reference_host_reads(prompt, k, sampling)
    rounds, tokens = out.stats.rounds, len(out.tokens)
    print(f"reference, k = {k}, {sampling.describe()}: {tokens} tokens in {rounds} rounds")
    for what, n in reads.items():
        print(f"    {what:26s} {n:4d}   {n / rounds:4.1f} per round")
    total = sum(reads.values())
    print(f"    {'all host reads':26s} {total:4d}   {total / rounds:4.1f} per round, "
          f"{total / tokens:.2f} per generated token")

# %% [markdown]
# Per round: k + 2 finiteness checks, k + 1 token ids (k drafts and the last token) and one
# accept decision per examined position — up to 3k + 3 reads, about 14 at k = 4. On a GPU
# each one drains the device's queue: the device sits idle while Python looks at the number
# and only then queues the next kernels.
#
# ### In the twin's round
#
# The twin keeps every one of those values on the device. A drafted token is
# `inverse_cdf(q_i, u_i)`, a device scalar fed straight into the next draft step; the
# uniforms were drawn from the same numpy Generator on the host, a round's worth at once,
# and copied over. The decision is `decide` (section 3). Then `settle` brings back, in
# **one** int64 array, exactly what the host needs to move the cache pointers and apply EOS
# and the length budget: the accepted count n, the new token, the k drafted ids, and a flag
# saying the rows were finite.

# %%
print(inspect.getsource(gpu.speculative.settle))

# %% [markdown]
# `to_host` is the only door back from the device, and it counts its calls (in NumPy mode
# too). `counting_transfers()` reads that count around a run.

# %%
def run_args():  # a fresh generator for every run, so that each run can be replayed
    return dict(max_new_tokens=64, rng=np.random.default_rng(0))


for sampling in (GREEDY, SamplingParams(temperature=0.8)):
    with counting_transfers() as log:
        out = gpu.speculative_generate(twin_target, twin_drafter, prompt, k=k,
                                       sampling=sampling, **run_args())
    print(f"twin speculative, k = {k}, {sampling.describe():6s}: {len(out.tokens)} tokens, "
          f"{out.stats.rounds} rounds, {log.count} transfers "
          f"({log.count / len(out.tokens):.2f} per token)")
with counting_transfers() as log:
    plain = gpu.generate(twin_target, prompt, sampling=GREEDY, **run_args())
print(f"twin autoregressive,   greedy: {len(plain)} tokens, {log.count} transfers "
      f"({log.count / len(plain):.2f} per token)")

# %% [markdown]
# One transfer per round, greedy or sampled; the autoregressive twin pays one per token,
# because the host must see each token to decide on EOS and feed it back. That is the floor
# speculative decoding divides: a round that emits 1 + n tokens costs one sync instead of
# 1 + n.
#
# The uniforms are the only thing the twin uses differently. Greedy has no randomness, so
# the twin and the reference must agree token for token; sampled runs use the Generator's
# numbers in another order (section 3), so they agree in law, not in text — which is what
# the oracle checks when it grades the twin (`make oracle-gpu`).

# %%
theirs = reference.speculative_generate(target, reference.ModelDrafter(draft), prompt, k=k,
                                        sampling=GREEDY, **run_args())
ours = gpu.speculative_generate(twin_target, twin_drafter, prompt, k=k, sampling=GREEDY,
                                **run_args())
print("greedy, twin == reference token for token:", ours.tokens == theirs.tokens)
print("same accepted count in every round:      ",
      ours.stats.accepted_per_round == theirs.stats.accepted_per_round)
print("the autoregressive twin gives the same text:", plain == theirs.tokens)
print(repr(decode(ours.tokens)))

# %% [markdown]
# ## 3. The decision, all positions at once
#
# `decide(p, q, drafts, u)` computes every position's verdict in one go, with k + 1 uniforms
# u_0 … u_k already on the device. The rule is the one of
# [Leviathan et al., 2023](../docs/references.md#leviathan2023) and
# [Chen et al., 2023](../docs/references.md#chen2023), unchanged; only its layout is new:
#
# * a_i = min(1, p_i(x_i) / q_i(x_i)) for every i < k — one gather;
# * rejected_i = (u_i ≥ a_i), with a stop appended at position k;
# * n = the first rejected position (an argmax), or k when all were accepted;
# * the last token is the inverse CDF, at u_k, of norm(max(0, p_n − q_n)) — with q_k taken
#   as 0, that is the bonus row p_k itself.
#
# Verdicts after the first rejection are computed and thrown away; that costs a few
# multiplications and saves k − 1 branches on the host.
#
# On the article's A/B example (k = 1: q = (0.8, 0.2), p = (0.6, 0.4), the draft proposed A,
# row 1 is the bonus row) we hand both rules the *same* uniforms. For the reference we use a
# numpy Generator that returns the numbers we chose, so its own `verify_unchecked` runs
# unchanged.

# %%
class ChosenUniforms(np.random.Generator):
    """A numpy Generator whose `random()` returns the given numbers, in order."""

    def __init__(self, uniforms):
        super().__init__(np.random.PCG64(0))
        self.uniforms = list(uniforms)

    def random(self, size=None, dtype=np.float64, out=None):
        return self.uniforms.pop(0)


P = np.array([[0.6, 0.4], [0.5, 0.5]])  # [k+1, V]: row 0 judges the draft, row 1 = bonus
Q = np.array([[0.8, 0.2]])  # [k, V]
x = np.array([0])  # the draft proposed A
names = "AB"
print("  u_0   u_1  | reference (n, token) | decide (n, token) | what happened")
for u in ([0.10, 0.30], [0.10, 0.70], [0.74, 0.20], [0.76, 0.20], [0.90, 0.95]):
    ref = reference.verification.verify_unchecked(P, Q, x, ChosenUniforms(u))
    n, token = (int(v) for v in to_host(decide(to_device(P), to_device(Q), to_device(x),
                                                   to_device(np.array(u)))))
    why = ("accepted (u_0 < 0.75), bonus from p_1" if n == 1
           else "rejected (u_0 >= 0.75), residual (0, 1)")
    print(f"  {u[0]:.2f}  {u[1]:.2f} |       ({ref.accepted}, {names[ref.token]})         |"
          f"      ({n}, {names[token]})       | {why}")
    assert (n, token) == (ref.accepted, ref.token), (
        f"u = {u}: expected decide to give the reference's {(ref.accepted, ref.token)}, "
        f"got {(n, token)}")

# %% [markdown]
# Identical, uniform by uniform. With k = 1 both rules use u_1 for the last token. For
# k > 1 they part ways after a rejection at a position n < k − 1: the reference draws its
# residual from the *next* number of the stream (u_{n+1}), `decide` from u_k; and the twin
# always takes k + 1 numbers per round for the decision, the reference only n + 2, so the
# next round starts elsewhere in the stream. Each final draw still uses a fresh uniform,
# independent of the verdicts, so the law is the same: `tests/twin/test_twin_loop.py`
# checks `decide` against the position-by-position rule (given the same uniforms) on 300
# random cases, and the oracle checks the law.
#
# And sampled, through the twin's public `verify` (one transfer per call), with draft
# tokens drawn from q: A comes out 60 % of the time, and the draft is accepted 80 % of the
# time, as notebook 05 derived by hand.

# %%
rng = np.random.default_rng(1)
n_runs = 10_000
first, n_accepted = np.zeros(2, dtype=np.int64), 0
for _ in range(n_runs):
    drafted = gpu.sample_token(Q[0], rng)
    v = gpu.verify(P, Q, [drafted], rng)
    first[drafted if v.accepted == 1 else v.token] += 1
    n_accepted += v.accepted
print(f"{n_runs} runs of gpu.verify: A {first[0] / n_runs:.3f}, B {first[1] / n_runs:.3f} "
      f"(target 0.6, 0.4); acceptance {n_accepted / n_runs:.3f} (exact 0.8)")

# %% [markdown]
# ## 4. Host syncs per generated token, against k
#
# The twin makes one sync per round, so its syncs per token are 1 / (tokens per round): the
# longer the accepted runs, the fewer. The autoregressive loop stays at 1. The reference's
# round, ported as it is, would pay its 3k + 3 or so reads per round: more than three per
# token at every k. Counted on real runs of the bundled pair, two code prompts of 64 new
# tokens each (the reference's line: the first prompt, greedy).

# %%
ks = [1, 2, 3, 4, 6, 8]
prompts = [encode(CODE_PROMPTS[i]) for i in (2, 3)]
settings = {"greedy": GREEDY, "T = 0.8": SamplingParams(temperature=0.8)}
syncs = {name: [] for name in settings}
reference_reads = []
for k_run in ks:
    for name, sampling in settings.items():
        count = tokens = 0
        for p_ids in prompts:
            with counting_transfers() as log:
                out = gpu.speculative_generate(twin_target, twin_drafter, p_ids, k=k_run,
                                               sampling=sampling, **run_args())
            count, tokens = count + log.count, tokens + len(out.tokens)
        syncs[name].append(count / tokens)
    reads, out = reference_host_reads(prompts[0], k_run, GREEDY)
    reference_reads.append(sum(reads.values()) / len(out.tokens))

with counting_transfers() as log:
    plain_run = gpu.generate(twin_target, prompts[0], sampling=GREEDY, **run_args())
ar_per_token = log.count / len(plain_run)
print("k:                        ", "  ".join(f"{k_run:5d}" for k_run in ks))
for name, values in syncs.items():
    print(f"twin speculative, {name:8s}", "  ".join(f"{v:5.2f}" for v in values))
print("reference round as is    ", "  ".join(f"{v:5.2f}" for v in reference_reads))
print(f"twin autoregressive: {ar_per_token:.2f} per token at every k")

# %%
fig, ax = plt.subplots(figsize=(6.4, 3.8))
ax.plot(ks, reference_reads, "s--", color="#888888",
        label="reference's round, ported as is (greedy)")
ax.axhline(ar_per_token, color="black", lw=1, label="autoregressive twin: one per token")
for name, values in syncs.items():
    ax.plot(ks, values, "o-", color=colour_for(settings[name].temperature),
            label=f"speculative twin, {name}: one per round")
ax.set_yscale("log")
ticks = [0.15, 0.2, 0.3, 0.5, 1, 2, 3, 4]
ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
ax.minorticks_off()
ax.set_xticks(ks)
ax.set_xlabel("draft length k")
ax.set_ylabel("host syncs per generated token")
ax.set_title("Device → host transfers per generated token (bundled pair, counted)", fontsize=10)
ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
path = save(fig, FIGURES / "gpu_syncs_per_token.png")
display(Image(filename=str(path)))

# %% [markdown]
# The red and blue curves are 1 / (mean tokens per round) — the same number notebook 08
# reads as "target calls per token". On a CPU a sync costs nothing, so this picture says
# nothing about speed there. On a GPU each sync is the device idling while Python reads a
# number and queues the next kernels. For a model this small we *expect* that idle time to
# be a large part of a step, which would make syncs per token one of the two figures that
# set the speed; but that is an expectation, not a measurement. No device run is recorded
# yet (section 5 says what is pending), so how much one sync costs, and how much of a step
# it is, remain open here.
#
# **A batch pays the same single sync for all its sequences.** The twin of the ragged batch
# (`gpu.speculative_generate_batch`, the twin of `reference/batch.py`, see `docs/batch.md`)
# verifies B sequences in one target pass per round and packs every row's outcome into one
# array: one transfer per batched round, however many sequences ride in it.

# %%
batch_prompts = [encode(text) for text in CODE_PROMPTS]
with counting_transfers() as log:
    results = gpu.speculative_generate_batch(
        twin_target, [gpu.ModelDrafter(twin_drafter.model) for _ in batch_prompts],
        batch_prompts, k=4, sampling=GREEDY, **run_args())
generated = sum(len(r.tokens) for r in results)
print(f"B = {len(results)} sequences, k = 4, greedy: {generated} tokens, rounds per sequence "
      f"{[r.stats.rounds for r in results]}, {log.count} transfers "
      f"({log.count / generated:.3f} per generated token)")

# %% [markdown]
# ## 5. On a GPU
#
# **Kernel launches, not FLOPs.** The arithmetic of one token is tiny for a GPU:

# %%
def n_params(model):
    return sum(int(np.prod(v.shape)) for v in model.params.values())


for name, model in (("target", target), ("draft", draft)):
    cfg = model.config
    print(f"{name}: {n_params(model) / 1e6:5.2f} M parameters, {cfg.n_layer} layers, "
          f"n_embd {cfg.n_embd}: about {2 * n_params(model) / 1e6:.0f} MFLOP per token")

# %% [markdown]
# A device built for trillions of operations per second finishes a few tens of millions in
# a sliver of the time it takes the host to *ask* for them: every `xp` operation of a
# forward pass (each matmul, each elementwise step of a LayerNorm, the softmax's max, exp,
# sum and division) launches at least one kernel, and a launch costs host time whatever
# the size of the array. So for this model we expect a forward pass to cost roughly its
# number of launches, which grows with the number of layers and not with the number of
# rows; if so, one pass over k + 1 positions would cost about what one position costs. That
# is a different reason from the article's §7, which is about memory bandwidth: there the
# k positions share one read of the weights, and a wider product has more arithmetic per
# byte read (the [roofline](../docs/references.md#roofline2009) of notebook 01, and the
# reason [Leviathan et al.](../docs/references.md#leviathan2023) take a pass over k + 1
# positions to cost one step). Here the rows would share the launches. Neither claim is
# measured on a device in this repository yet (section 5): until then, take this paragraph
# as a prediction.
# Counted here, exactly: forward calls per generated token, target and draft.

# %%
FORWARD = gpu.model.GPT.residual.__code__  # every forward pass runs it once
who = {id(twin_target): "target", id(twin_drafter.model): "draft"}


def forward_calls(run):
    # run() -> tokens; -> (forward calls by model, per generated token)
    with counting_calls(lambda f: who.get(id(f.f_locals.get("self")))
                        if f.f_code is FORWARD else None) as calls:
        tokens = run()
    return {name: calls[name] / len(tokens) for name in ("target", "draft")}


runs = {"autoregressive": lambda: gpu.generate(twin_target, prompt, sampling=GREEDY,
                                                **run_args())}
for k_run in (2, 4):
    runs[f"speculative k = {k_run}"] = lambda k_run=k_run: gpu.speculative_generate(
        twin_target, twin_drafter, prompt, k=k_run, sampling=GREEDY, **run_args()).tokens
L_t, L_d = target.config.n_layer, draft.config.n_layer
print("per generated token, greedy:  target calls  draft calls  layer passes")
for name, run in runs.items():
    c = forward_calls(run)
    print(f"  {name:26s} {c['target']:10.2f}  {c['draft']:11.2f}  "
          f"{c['target'] * L_t + c['draft'] * L_d:12.1f}")

# %% [markdown]
# "Layer passes" (target calls × the target's layers + draft calls × the draft's layers)
# stand in for launches: each layer issues the same kernels for one row or five.
# Speculation trades target layers for draft layers, and each target pass verifies several
# tokens at once. The real launch counts per token, measured with a profiler on a device,
# are pending.
#
# **Fused kernels, and CUDA graphs.** The cure for launch overhead is fewer launches. The
# twin fuses: `gpu/device/kernels.cu` holds six CUDA kernels, each doing a whole stretch of the
# block in one launch — a linear layer with the LayerNorm before it and the bias, GELU and
# residual add after it; the attention of every head with its cache write (over a long cache,
# each head's positions split into parts and combined, as
# [Flash-Decoding](../docs/references.md#flashdecoding2023) does); the draw; a
# round's whole verification (docs/gpu.md, "The fused kernels"). In NumPy mode each runs its
# *body*, the plain `xp` composition, so the numbers here are the unfused twin's.
#
# The next cure is a CUDA graph: record a stretch of kernels once and replay it with one
# launch. CuPy refuses to record the cuBLAS calls behind its matmuls (cupy/cupy#6290), but a
# pass of up to 16 rows now makes none (its linears are the fused kernels), so the draft's
# steps 2..k of a round are recorded whole, and so is the target's verification pass
# (gpu/device/graphs.py). A graph replays the same arguments, so the two kernels that need
# to know where a step sits in the cache read its slot from a small device array, which the
# host rewrites with one copy before each replay. No graph can span a host sync: the round's
# one transfer is where any graph ends. The stand-in below runs them as a device would: a
# replay counts as one launch.
#
# **Launches, counted without a device.** For a model this small, a GPU step is priced by
# its kernel launches (each costs microseconds, whatever its work), not by its FLOPs. The twin
# counts them on any machine: inside `gpu.device.backend.counting_launches()` its array module
# is a stand-in (`gpu/device/counting.py`) that computes with NumPy and counts every device
# operation, and every implicit conversion to a host value (a hidden sync). Two held-out
# prompts, 32 tokens each, greedy, batch 1; then what those counts would give if launches
# were all a GPU step cost, at 5 to 15 µs each — a model, not a measurement (docs/gpu.md):

# %%
launches = launch_rows(held_out_code_prompts(2), ks=[5], max_new_tokens=32)
print(f"{'loop':5s} {'launches/token':>15s} {'launches/round':>15s}   model: tokens/s at 15..5 µs")
for name, row in launches.items():
    per_token, per_round = row["launches"] / row["tokens"], row["launches"] / row["rounds"]
    slow, fast = launch_model(per_token)
    print(f"{name:5s} {per_token:15.0f} {per_round:15.0f}   {slow:6.0f} .. {fast:6.0f}")
ratio = launches["ar"]["launches"] / launches["ar"]["tokens"] / (
    launches["k=5"]["launches"] / launches["k=5"]["tokens"])
print(f"under the model, speculative / autoregressive = {ratio:.2f}x whatever a launch costs")
assert all(row["hidden_syncs"] == 0 for row in launches.values()), (
    f"the twin should make no implicit host conversion: {launches}")
assert launches["ar"]["rounds"] == launches["ar"]["tokens"], "one autoregressive step per token"

# %% [markdown]
# The speculative loop makes fewer launches per token than the autoregressive one. Without
# graphs it was not as many times fewer as the tokens a round emits: a round paid for k draft
# steps as well as one target pass, which makes about as many launches as one autoregressive
# step. With the draft's steps and the target's pass replayed as two graphs, a round is a
# few dozen launches (docs/gpu.md, "CUDA graph capture", has the counts both ways).
# Where one decode step's launches go, by kernel (one step, launched one by one):

# %%
with counting_launches():  # the stand-in for a device (its arrays are made inside)
    counted_target = gpu.GPT(target.config, target.params)
    step_cache = counted_target.new_cache()
    counted_target.forward(prompt[:8], step_cache)
    step_cache.commit(8)
    token = to_device(prompt[8:9])  # in a loop, the last draw: already on the device
    with counting_launches() as step:
        counted_target.forward(token, step_cache)
for name, n in step.by_name.most_common():
    print(f"{n:3d}  {name}")
print(f"{step.count:3d}  in all: {target.config.n_layer} blocks of "
      f"{step.by_name['fused fused_linear'] // target.config.n_layer} fused linears and one "
      "attention, the embedding, the output layer")
assert step.by_name["fused cached_attention"] == target.config.n_layer, (
    f"one fused attention per block expected: {dict(step.by_name)}")

# %% [markdown]
# Fusing took each loop's launches down about eightfold (docs/gpu.md has the counts before:
# 290 per autoregressive token, 199 per speculative one), but both loops alike, so their
# ratio hardly moved. The graphs moved it: the draft's five steps and the target's pass are
# two replays, and a round, prefill and the rounds that capture the graphs averaged in,
# costs about one autoregressive step's launches (the table above). Whether that is time
# saved on a real device (a replay is not free either) is for the device run.
#
# **What the device run records.** `scripts/gpu_check.sh` runs on a machine with an NVIDIA
# GPU: the device-only tests (`pytest -m gpu`: the fused GELU against the plain function),
# the twin's tests, the oracle grading the twin, and the bench `python -m
# specdec.measure.gpu_bench`: tokens/s of the twin's autoregressive and speculative loops, transfers
# per token, the reference on the CPU, transformers' assisted generation on the same GPU, and the
# batched twin's tokens/s at growing batch sizes. The bench writes its results as `gpu_bench.json`
# (under `$OUT` in the script; `--out docs/gpu-results` puts them in the repository). When
# `docs/gpu-results/gpu_bench.json` exists, the next cell prints and draws it with its date and
# backend; until then it says what is pending.

# %%
RESULTS = ROOT / "docs" / "gpu-results" / "gpu_bench.json"


def show_recorded(path: Path) -> None:
    """Print and draw the device bench recorded in `path` (specdec/measure/gpu_bench.py's JSON)."""
    result = json.loads(path.read_text())
    s = result["settings"]
    print(f"recorded {result['date']} on {result['backend']}")
    print(f"{s['prompts']} prompts x {s['max_new_tokens']} tokens, {s['sampling']}, "
          f"batch {s.get('batch', 1)}, medians of {s['repeats']} repeats")
    if result["backend"].startswith("numpy"):
        print("(NumPy mode: the script ran without a device; these are not GPU figures)")
    print(f"\n{'loop':8s} {'tokens/s':>9s} {'transfers/token':>16s} {'speedup vs AR':>14s}")
    for name, (rate, per_token, speedup) in result["table"].items():
        print(f"{name:8s} {rate:9.1f} {per_token:16.2f} {speedup:13.2f}x")
    for what, rate in result.get("extra", {}).items():
        print(f"- {what}: {'n/a' if rate is None else f'{rate:.1f}'}")
    batches = result.get("batches", {})  # B -> {"ar": [tok/s, transfers/token], "spec": ...}
    if batches:
        print(f"\n{'batch':>5s} {'AR tok/s':>9s} {'spec tok/s':>11s} {'transfers/token':>16s}")
        for B, row in batches.items():
            print(f"{B:>5s} {row['ar'][0]:9.1f} {row['spec'][0]:11.1f} {row['spec'][1]:16.3f}")
    names = list(result["table"])
    fig, axes = plt.subplots(1, 3 if batches else 2, figsize=(12.6 if batches else 8.4, 3.2))
    axes[0].bar(names, [result["table"][n][0] for n in names], color=colour_for(0.0))
    axes[0].set_ylabel("tokens/s (median)")
    axes[1].bar(names, [result["table"][n][1] for n in names], color="#888888")
    axes[1].set_ylabel("transfers per token")
    if batches:
        sizes = [int(B) for B in batches]
        for loop, style, label in (("ar", "s--", "autoregressive"), ("spec", "o-", "speculative")):
            axes[2].plot(sizes, [row[loop][0] for row in batches.values()], style, label=label)
        axes[2].set_xscale("log", base=2)
        axes[2].set_xticks(sizes, [str(B) for B in sizes])
        axes[2].minorticks_off()
        axes[2].set_xlabel("batch size B")
        axes[2].set_ylabel("tokens/s, all sequences")
        axes[2].legend(fontsize=8)
    fig.suptitle(f"Twin on {result['backend']}, {result['date']}", fontsize=9)
    fig.tight_layout()
    display(Image(filename=str(save(fig, FIGURES / "gpu_bench_recorded.png"))))


if RESULTS.is_file():
    show_recorded(RESULTS)
else:
    print("GPU figures: PENDING. No device run is recorded in this repository yet")
    print(f"({RESULTS.relative_to(ROOT)} does not exist). They come from")
    print("    bash scripts/gpu_check.sh preflight tests       # on a machine with an NVIDIA GPU:")
    print("    bash scripts/gpu_check.sh bench                 # each part fits one device call;")
    print("    bash scripts/gpu_check.sh oracle                # keep $OUT/gpu_bench.json")
    print("    python -m specdec.measure.gpu_bench --out docs/gpu-results  # the bench alone")
    print("Pending until then: tokens/s of the twin, batch scaling, what a launch and a host sync")
    print("cost there, CUDA graph capture, the twin vs transformers on the GPU.")

# %% [markdown]
# **What to remember**
#
# 1. The twin is the same algorithm with the same law; greedy runs equal the reference
#    token for token, sampled runs equal it in law (`make oracle-gpu`).
# 2. What a GPU changes is where the host waits. The reference's round reads about 3k
#    values back into Python; the twin's round reads one packed array.
# 3. What is counted holds on any machine: one sync per round divides the autoregressive
#    loop's sync per token by the tokens per round. What is expected is not yet measured:
#    that for a model this small a GPU step is priced in launches and syncs rather than
#    FLOPs, so that one pass over k + 1 rows costs about what one row costs. The device
#    figures that would test it are pending until `scripts/gpu_check.sh` runs on a GPU.

# %% [markdown]
# ## Check yourself
#
# Answer from this notebook alone, then compare with a neighbour:
#
# 1. What makes `gpu/` a twin of `reference/`, and how does a program switch between them?
# 2. Ported line for line to a GPU, the reference's round would read values back to the
#    host. Which ones, and about how many per round?
# 3. What does `decide(p, q, drafts, u)` compute, and why do sampled runs of the twin
#    agree with the reference in law but not in text?
# 4. What are the twin's host syncs per generated token, and the autoregressive loop's?
# 5. Which claims of the notebook are counted, and which are expectations that still wait
#    for a device run?
#
# (The answers are kept apart, for instructors: `specdec course DIR --instructor BUNDLE`
# writes them beside the students' copy; docs/teaching.md.)

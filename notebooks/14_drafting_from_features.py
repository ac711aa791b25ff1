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
# # 14 · Drafting from the target's own features (EAGLE)
#
# *Beyond the article's §10: the drafter the serving engines ship by default today. Code:
# `reference/eagle.py` (`EagleDrafter`), `reference/weights.py` (`load_eagle`),
# `reference/tree/eagle.py` (`EagleTreeDrafter`, EAGLE-2's dynamic tree),
# `reference/speculative.py` (`target_features`, `observe_features`),
# `specdec/training/train_eagle.py`. Tests: `tests/unit/test_eagle.py`,
# `tests/unit/test_eagle_tree.py`, `tests/distribution/test_self_drafting_law.py`. Text:
# `docs/algorithm.md`, "EAGLE";
# `docs/training.md`, "EAGLE".*
#
# Notebook 10 drafted with the target itself in two ways. Early exit runs the target's
# first blocks for every drafted token: its guesses are good, but each costs a third of a
# target step. Extra heads read the target's last hidden state and cost almost nothing, but
# head i guesses i + 1 tokens ahead from one state and never learns which token was drawn
# after it, so their rounds are short.
#
# EAGLE keeps the cheapness of the heads and fixes what they lack. Its one small block reads
# two things per position: the target's **feature** f(t) (the residual stream after the
# target's last block, before the final norm: what the output layer reads to score token
# t + 1) and the **embedding of the token that was actually drawn** at t + 1. From these it
# predicts the next feature f̂(t + 1), and the target's own final norm and output layer turn
# that into q. Across a round's k drafts it feeds its own predictions forward, one position
# at a time, like a tiny autoregressive model that lives in the target's feature space.
#
# 1. what the drafter reads, on one real context;
# 2. how it was trained (the shipped weights and their training curves);
# 3. α by draft position, against the extra heads and early exit;
# 4. one real round, and the features it hands back;
# 5. the dynamic tree (EAGLE-2) against a chain of the same size;
# 6. when it beats the independent draft model, and when not.

# %%
import json
import os
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image, display

import reference
from reference import (
    HeadsDrafter,
    SamplingParams,
    probabilities,
    speculative_generate,
)
from reference.sampling import GREEDY
from reference.speculative import prefill
from reference.tokenizer import decode
from reference.tree import EagleTreeDrafter, tree_speculative_generate
from specdec.bench import held_out_code_prompts
from specdec.bundled import (
    MODELS_DIR,
    load_bundled_pair,
    load_heads,
)
from specdec.costs import measure_costs
from specdec.drafting import make_drafter
from specdec.fast_cpu import fast
from specdec.figures.style import save
from specdec.machine import describe_machine, use_blas_threads

use_blas_threads()  # one BLAS thread unless $SPECDEC_BLAS_THREADS says otherwise
print(describe_machine().line())  # the timings of section 6 are facts about this machine
FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))
EAGLE_DIR = MODELS_DIR / "eagle"
target, draft = load_bundled_pair()
target, draft = fast(target), fast(draft)  # the CPU fast path, as `specdec bench` runs


def new_eagle():  # the shipped drafter, its block on the target's fast path (as the bench's)
    return make_drafter("eagle", reference, target, draft)


eagle = new_eagle()
meta = json.loads((EAGLE_DIR / "metadata.json").read_text())
C = target.config.n_embd
print(f"target: {target.config.n_layer} blocks, width {C}; EAGLE variant {meta['variant']}, "
      f"reads the features after blocks {list(eagle.feature_layers)}")
PROMPTS = held_out_code_prompts(3)  # code the pair never trained on
T08 = SamplingParams(temperature=0.8)

# %% [markdown]
# ## 1. What the drafter reads
#
# After the prompt's prefill the target has cached every prompt token but the last, and
# the round hands the drafter their features: f(0) … f(n − 2) for a prompt x(0) … x(n − 1).
# The drafter's row t fuses e(x(t + 1)) with f(t): the token at t + 1 is known because it
# was *drawn from the row f(t) scored*. That is the alignment the whole method rests on:
#
# | position t | 0 | 1 | … | n − 2 | n − 1 | n |
# |---|---|---|---|---|---|---|
# | token in | e(x1) | e(x2) | … | e(x(n−1)) | e(d1) | e(d2) |
# | feature in | f(0) | f(1) | … | f(n−2) | f̂(n−1) | f̂(n) |
# | block out | f̂(1) | f̂(2) | … | f̂(n−1) → q1 | f̂(n) → q2 | f̂(n+1) → q3 |
#
# The cell below prefills a real prompt, checks that the features handed over are the
# target's own (a plain forward, stopped before ln_f), and asks the drafter for its first
# guess next to the target's.

# %%
prompt = PROMPTS[0][:160]
cache = target.new_cache()
prefill(target, cache, eagle, prompt)
f_plain = target.layer_features(prompt[:-1], layers=eagle.feature_layers)  # [n-1, L*C]
if eagle.reduce is not None:  # EAGLE-3: the layers' features are reduced to C on arrival
    R, r = eagle.reduce
    f_plain = f_plain @ R + r
gap = np.abs(eagle.features[: eagle.n_known] - f_plain).max()
print(f"features handed over: {eagle.n_known} positions, each reduced to {C} numbers; "
      f"largest difference from a plain forward: {gap:.1e}")
d = eagle.propose(prompt, 1, SamplingParams(temperature=1.0), np.random.default_rng(0))
p_next = probabilities(target.forward(prompt)[-1], SamplingParams(temperature=1.0))
print(f"context ends: {decode(prompt[-40:])!r}")
for name, row in (("drafter's q", d.q[0]), ("target's p ", p_next)):
    top = np.argsort(-row)[:3]
    print(f"{name} at T = 1, its three likeliest next tokens: "
          + "  ".join(f"{decode([int(t)])!r} {row[t]:.2f}" for t in top))
eagle.rollback()

# %% [markdown]
# ## 2. How it was trained
#
# The target is frozen. `specdec/training/train_eagle.py` computes its features and
# probabilities once on windows of the training text, then fits only the fusion layer and
# the block (the final norm and the output layer stay the target's). Two recipes were
# trained for the same 11 minutes on one core and measured on held-out code; the better one
# ships:
#
# * **EAGLE-1**: the feature is the target's top one, f(t); the loss is the KL from the
#   target's distribution plus a regression of f̂(t + 1) onto the true f(t + 1).
# * **EAGLE-3**: the feature fuses three of the target's layers (after blocks 2, 4 and 6:
#   low, middle and top) through one more linear map, and training runs the drafter on its
#   own outputs for a few steps ("training-time test"), so it learns from the inputs it
#   will see when drafting position 2, 3, ... and not only from true features. No
#   regression: only the KL at each unrolled step.

# %%
print(f"shipped: {meta['variant']}  ({meta['why_this_variant']})")
runs = {meta["variant"]: meta} | meta["compared"]  # variant -> its training and held-out α
fig, ax = plt.subplots(figsize=(6.0, 3.2))
for name, run in runs.items():
    curve = run["training"]["curve"]
    steps = [point["step"] for point in curve]
    for j in range(len(curve[0]["kl"])):  # EAGLE-3 is unrolled: one KL per step of its own
        ax.plot(steps, [point["kl"][j] for point in curve], lw=1.5 if j == 0 else 0.8,
                ls="-" if j == 0 else "--", color="C0" if name == "eagle-1" else "C1",
                label=name if j == 0 else (f"{name}, unrolled steps 2-3" if j == 1 else None))
ax.set_xlabel("training step (one core, 11 minutes each)")
ax.set_ylabel("KL(p || q), training batch")
ax.set_yscale("log")
ax.legend(frameon=False)
ax.set_title("EAGLE on the frozen bundled target")
display(Image(save(fig, FIGURES / "eagle_training.png")))
print("held-out α by draft position (the training script's evaluation: "
      f"{meta['evaluation'].split(':')[0]}):")
rows = {name: run["held_out_alpha"] for name, run in runs.items()}
rows |= meta["baselines_same_protocol"]
for name, alpha in rows.items():
    print(f"  {name:18} greedy " + " ".join(f"{a:.2f}" for a in alpha["greedy"])
          + "   T = 0.8 " + " ".join(f"{a:.2f}" for a in alpha["T0.8"]))

# %% [markdown]
# EAGLE-1's training KL ends lower, yet EAGLE-3 is ahead from the second draft position on.
# The curves measure different things: EAGLE-1's KL is taken on true features only (teacher
# forcing), the situation of the first draft of a round; from the second draft on the
# drafter reads its own predicted features, which drift, and that is what EAGLE-3's unrolled
# steps train for (their KL is the dashed lines). The held-out table, where every drafter
# runs as it drafts, is the fair comparison.
#
# ## 3. α by draft position, against the extra heads and early exit
#
# Three drafters made of the target, each at k = 4 (the heads guess at most 4 ahead), on the
# same held-out prompts, at greedy and at T = 0.8, and the independent draft model beside
# them for section 6. The rate at position i is P(accepted | examined): position i is
# examined only when the drafts before it passed, so each drafter's rate is measured in the
# contexts its own rounds reach (the training script's table in section 2 is the paired
# comparison, on the same chains).

# %%
K = 4
heads = load_heads()
makers = {
    "EAGLE": lambda: new_eagle(),
    "extra heads": lambda: HeadsDrafter(target, heads),
    "early exit": lambda: make_drafter("early-exit", reference, target, draft),
    "draft model": lambda: make_drafter("model", reference, target, draft),
}
rates, per_round = {}, {}
for sampling, label in ((GREEDY, "greedy"), (T08, "T = 0.8")):
    for name, make in makers.items():
        runs = [speculative_generate(target, make(), p, k=K, max_new_tokens=64,
                                     rng=np.random.default_rng(i), sampling=sampling)
                for i, p in enumerate(PROMPTS)]
        reached = sum(r.stats.reached for r in runs)
        accepted = sum(r.stats.accepted_at for r in runs)
        rates[label, name] = accepted / np.maximum(reached, 1)
        per_round[label, name] = np.mean([r.stats.mean_tokens_per_round for r in runs])
        print(f"{label:8} {name:12} tokens/round {per_round[label, name]:.2f}  P(accept | "
              f"examined) by position: " + "  ".join(f"{a:.2f}" for a in rates[label, name]))

fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.2), sharey=True)
width = 0.2
for ax, label in zip(axes, ("greedy", "T = 0.8"), strict=True):
    for j, name in enumerate(makers):
        ax.bar(np.arange(1, K + 1) + (j - 1.5) * width, rates[label, name], width, label=name,
               hatch="//" if name == "draft model" else None, alpha=0.6 if name == "draft model"
               else 1.0)
    ax.set_xlabel("draft position i")
    ax.set_xticks(np.arange(1, K + 1))
    ax.set_title(label)
axes[0].set_ylabel("P(accepted | examined)")
axes[0].set_ylim(0, 1)
fig.legend(*axes[0].get_legend_handles_labels(), frameon=False, loc="upper center", ncol=4)
fig.subplots_adjust(top=0.78)
display(Image(save(fig, FIGURES / "eagle_per_position.png")))

# %% [markdown]
# ## 4. One real round
#
# A round with the trace on: the drafts, the drafter's q and the target's p for each, and
# where the round stopped. After the round the drafter is handed the features of the
# positions the round kept: the catch-up rows and the accepted drafts. Its own cache keeps
# only rows built from true features; the accepted drafts, which it fed with its own
# predictions, are fed again next round with the target's real ones.

# %%
res = speculative_generate(target, new_eagle(),
                           PROMPTS[1][:120], k=K, max_new_tokens=24,
                           rng=np.random.default_rng(3), sampling=T08, trace=True)
rnd = res.trace[2]
print(f"round 3: context {rnd.context_len} tokens, drafted {len(rnd.draft_tokens)}, "
      f"accepted {rnd.accepted}, then a {rnd.token_kind} {decode([rnd.token])!r}")
for i, tok in enumerate(rnd.draft_tokens):
    q, p = rnd.q_rows[i, tok], rnd.p_rows[i, tok]
    fate = "accepted" if i < rnd.accepted else ("rejected" if i == rnd.accepted else "unread")
    print(f"  d{i + 1} = {decode([int(tok)])!r:6}  q = {q:.3f}  p = {p:.3f}  "
          f"min(1, p/q) = {min(1.0, p / q):.3f}  {fate}")
print(f"target cache (before, written, after): {rnd.target_cache}; drafter's cache: "
      f"{rnd.draft_cache}")

# %% [markdown]
# ## 5. The dynamic tree (EAGLE-2)
#
# A chain bets on one guess per position. EAGLE-2 grows a tree instead, by the drafter's own
# confidence: it keeps expanding the nodes whose path probability (the product of q along
# the path) is largest, until a node budget is spent. Where the drafter is sure, the tree
# runs deep; where it hesitates, it spreads. Each node is a point mass, and
# `reference/tree`'s exact rule judges it, so the output law is still the target's.
# At equal nodes (8 candidates), which keeps more tokens per round?

# %%
NODES = 8
for sampling, label in ((GREEDY, "greedy"), (T08, "T = 0.8")):
    chain = [speculative_generate(target, new_eagle(), p, k=NODES,
                                  max_new_tokens=64, rng=np.random.default_rng(i),
                                  sampling=sampling) for i, p in enumerate(PROMPTS)]
    tree = [tree_speculative_generate(target, EagleTreeDrafter(new_eagle(), max_nodes=NODES,
                                                               depth=NODES),
                                      p, max_new_tokens=64, rng=np.random.default_rng(i),
                                      sampling=sampling)
            for i, p in enumerate(PROMPTS)]
    print(f"{label:8} {NODES} candidates per pass: chain "
          f"{np.mean([r.stats.mean_tokens_per_round for r in chain]):.2f} tokens/round, "
          f"dynamic tree {np.mean([r.stats.mean_tokens_per_round for r in tree]):.2f}")

# the shape of one dynamic tree: the drafter's first round on the first prompt
grower = EagleTreeDrafter(new_eagle(), max_nodes=NODES, depth=NODES)
prefill(target, target.new_cache(), grower, PROMPTS[0][:120])
for sampling, label in ((GREEDY, "greedy"), (T08, "T = 0.8")):
    one = grower.propose_tree(PROMPTS[0][:120], NODES, NODES + 1, sampling,
                              np.random.default_rng(0))
    grower.rollback()
    per_depth = np.bincount(one.depths[1:], minlength=one.depth + 1)[1:]
    print(f"one tree ({label}): {one.n_nodes - 1} candidates, per depth "
          + " ".join(str(n) for n in per_depth))

# %% [markdown]
# **How to read it.** Where the drafter is sure of its first choice, the tree spends its
# nodes on depth and is almost a chain; where it hesitates, it spreads (the tree printed
# last: four guesses for the first position, then one path down the likeliest). Two things
# pull the other way. On this pair the drafter's first choice is right most of the time
# (α ≈ 0.8–0.9 per position, section 3), so a chain of 8 reaches deeper than a tree that
# spends some of its 8 nodes on siblings; and the tree's candidates are point masses,
# accepted with probability p(x) under sampling, where the chain's sampled drafts pass with
# min(1, p/q) (notebook 10, section 2). Which effect wins on three short prompts is what the
# two lines above measured; the bench (six prompts, 128 tokens, five repeats;
# `docs/benchmarks.md`, "EAGLE in the method table") found the chain ahead at every node
# budget and both temperatures, in tokens per round and in speed. A tree pays where the
# first guess is often wrong and extra rows in the pass are nearly free: a GPU verifying a
# large target.

# %% [markdown]
# ## 6. When it beats the independent draft model, and when not
#
# Speed is tokens per round over what a round costs. Per drafted token, EAGLE runs one
# block at the **target's** width (384) plus the target's output layer; the independent
# draft model runs 2 blocks at width 128 plus its own output layer. Counting the weights
# each reads, and timing both, on this machine:

# %%
# the weight entries one drafted token multiplies: EAGLE's fusion W and its block, then the
# target's tied output layer; the draft model's blocks and its own output layer (the
# embedding lookups read one row each; EAGLE-3's reduce map runs once per position, on
# arrival of the true features, not per drafted token)
eagle_block = sum(w.size for n, w in eagle.block_model.params.items() if n.startswith("h."))
eagle_weights = eagle.w.size + eagle_block + target.params["wte.weight"].size
draft_weights = sum(w.size for n, w in draft.params.items() if n != "wpe.weight")
print(f"weights per drafted token: EAGLE {eagle_weights:,}, draft model {draft_weights:,} "
      f"({eagle_weights / draft_weights:.1f}x)")

costs = measure_costs(target, draft, np.concatenate([PROMPTS[0]] * 2)[:256], max_T=K + 1,
                      repeats=5)


def eagle_step_seconds(drafter, context, k, repeats=20):  # the fastest k-draft proposal / k
    cache = target.new_cache()
    prefill(target, cache, drafter, context)
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        drafter.propose(context, k, GREEDY, np.random.default_rng(0))
        best = min(best, time.perf_counter() - start)
        drafter.rollback()
    return best / k


c_eagle = eagle_step_seconds(new_eagle(),
                             PROMPTS[0][:200], K) / costs.target_step
print(f"c (one drafted token, in target steps): EAGLE {c_eagle:.3f}, draft model "
      f"{costs.c:.3f}; v({K + 1}) = {costs.verify_cost(K + 1):.2f}")


def predicted_speedup(tokens_per_round, k, c, v):  # Leviathan's E / (k c + v), E measured
    return tokens_per_round / (k * c + v)


v = costs.verify_cost(K + 1)
for label in ("greedy", "T = 0.8"):
    for name, c in (("EAGLE", c_eagle), ("draft model", costs.c)):
        E = per_round[label, name]
        print(f"{label:8} {name:12} k = {K}: {E:.2f} tokens/round (section 3), c = {c:.3f}, "
              f"v = {v:.2f} -> predicted {predicted_speedup(E, K, c, v):.2f}x")

# %% [markdown]
# **How to read it.** The counts of weights hold on any machine; the times are this run's.
# EAGLE's α beats the other two drafters made of the target because it sees the token drawn
# after each feature; its drafts cost more than the heads' (a whole block at the target's
# width) and less than early exit's (one block instead of two, and no second output layer).
# Against the independent draft model the trade is α against c: that model was trained on
# the same text for this target, keeps as many tokens per round here or more (section 3),
# and reads a fifth as many weights per drafted token, so its c is about half EAGLE's.
# On a CPU, where a drafted token costs what its weights cost to read, the independent
# model's smaller c can win even at a lower α; on a GPU, where a small block's cost is
# launches and latency rather than bytes, and where the target is large, the feature
# drafter's α is what counts. `docs/benchmarks.md` ("EAGLE in the method table") has the
# full measurement on this project's machine.

# %% [markdown]
# ## Exercise: aligning features and tokens
#
# [`notebooks/exercises/my_eagle_align.py`](exercises/my_eagle_align.py) asks for the catch-up
# rows of one round: which token goes with which feature, and which rows the drafter's cache
# already holds. Grade it in about a second:
#
# ```bash
# .venv/bin/specdec grade notebooks/exercises/my_eagle_align.py:catch_up_pairs
# ```

# %% [markdown]
# ## Check yourself
#
# Answer from this notebook alone, then compare with a neighbour:
#
# 1. Why does the drafter's row t read e(x(t + 1)) and not e(x(t))? What would it predict
#    with the other one?
# 2. The drafter's cache keeps only rows built from the target's true features. Why are the
#    accepted drafts fed a second time next round?
# 3. The drafter's weights are trained; would an untrained drafter make the output wrong?
# 4. Why can the extra heads not do what EAGLE does, though both read the target's last
#    state?
# 5. On which kind of machine does EAGLE's c matter less, and why?
#
# (The answers are kept apart, for instructors: `specdec course DIR --instructor BUNDLE`
# writes them beside the students' copy; docs/teaching.md.)

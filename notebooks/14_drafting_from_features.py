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
# *Beyond the article's §10: the drafter the serving engines ship by default today. Papers:
# [Li et al., 2024a](../docs/references.md#eagle2024) (EAGLE),
# [Li et al., 2024b](../docs/references.md#eagle2-2024) (EAGLE-2),
# [Li et al., 2025](../docs/references.md#eagle3-2025) (EAGLE-3). Code:
# `reference/eagle.py` (`EagleDrafter`), `reference/weights.py` (`load_eagle`),
# `reference/tree/eagle.py` (`EagleTreeDrafter`, EAGLE-2's dynamic tree),
# `reference/speculative.py` (`target_features`, `observe_features`),
# `specdec/training/train_eagle.py`. Tests: `tests/unit/test_eagle.py`,
# `tests/unit/test_eagle_tree.py`, `tests/distribution/test_self_drafting_law.py`. Text:
# `docs/algorithm.md`, "EAGLE"; `docs/training.md`, "EAGLE".*
#
# Notebook 10 drafted with the target itself in two ways. Early exit
# ([Zhang et al., 2024](../docs/references.md#draftverify2024);
# [Elhoushi et al., 2024](../docs/references.md#layerskip2024)) runs the target's first
# blocks for every drafted token. Extra heads
# ([Cai et al., 2024](../docs/references.md#medusa2024)) read the target's last hidden state
# and cost almost nothing, but head i guesses i + 1 tokens ahead from one state and never
# learns which tokens were drawn in between. EAGLE is a third way: one small block of its own
# that reads what the target computed for the committed text, and drafts one token at a time.
#
# ## The three papers
#
# **EAGLE** ([Li et al., 2024a](../docs/references.md#eagle2024)). The paper's starting
# point: the target's top hidden state, the one its output layer reads (the paper's
# *feature*), is a smoother thing to extrapolate than the token sequence, so draft by
# autoregression on features. One obstacle: under sampling, the next feature depends on
# which token was drawn from the current one, and a sequence of features alone cannot say
# which. So the drafter reads, at each position, the feature *and* the embedding of the token
# sampled one step ahead of it. Its parts: the target's embedding, one linear layer fusing
# the two inputs, one transformer layer, and the target's own output layer, frozen. Its
# training loss has two terms: a regression of its output onto the target's next feature
# (smooth L1), and a classification term for the next token against the target's
# distribution. Drafts go into a static tree.
#
# **EAGLE-2** ([Li et al., 2024b](../docs/references.md#eagle2-2024)). Same drafter, a
# different tree. Its observation: how likely a draft is to be accepted depends on the
# context, not only on its place in a fixed tree shape, and the drafter is *well calibrated*:
# of the drafts it gives probability q, a share of about q is accepted. So its own
# confidence, which costs nothing extra, can stand in for the acceptance rate. A node's value
# is the product of the drafter's probabilities along its path, an estimate of the chance
# that the target accepts the whole path. The tree grows in two phases. *Expansion*: at each
# depth, the few nodes of largest value are fed to the drafter (one pass for the level), and
# each offers its likeliest tokens as children. *Re-ranking*: when the expansion stops, every
# candidate of every depth is ranked by value and the best ones, up to a budget, go to the
# target. A child's value never exceeds its parent's, so the kept nodes form a tree.
#
# **EAGLE-3** ([Li et al., 2025](../docs/references.md#eagle3-2025)). Its observation: with
# the feature-regression term, more training data buys the drafter little; the term ties
# its output to the target's feature, a narrower job than the one acceptance rewards. So the
# regression is dropped: the drafter is trained on the token only, and its output is just a
# hidden state that its head reads. That breaks what made drafting by features work: from
# the second draft on, the drafter's input is its own output, which nothing trains to look
# like a feature. The fix is **training-time test**: during training the drafter is run on
# its own outputs for several steps, exactly as it drafts (true features at the first step,
# its own outputs after, each step attending to what a draft row would attend to), with a
# token loss at every step. It learns from the inputs it will really meet, including the
# gap between the true features and its own. Freed from predicting one layer's feature, it
# also reads more of the target: features from a low, a middle and a high layer,
# concatenated and mapped by one linear layer to the width of one. The released training
# code also trains the drafter's own final norm and output layer, over a reduced draft
# vocabulary (the training data's most frequent tokens), and unrolls 7 steps.
#
# ## This project's EAGLE: what it chose, and why
#
# `specdec/training/train_eagle.py` trains both recipes on the frozen bundled target and
# ships the better one on held-out code; the shipped one is EAGLE-3 (section 2). The choices
# below are this project's, not the papers':
#
# * **The feature is the residual stream before the target's final norm** (ln_f), and the
#   drafter's output goes through the target's own ln_f and output layer, as the target's
#   last block output does. One frozen readout then serves both; EAGLE-1's regression target
#   is the same stream; and layers 2, 4 and 6 are all taken at the same point of a block.
# * **The target's ln_f and tied output layer are reused**, frozen: no head of its own, no
#   reduced vocabulary. The bundled vocabulary is 257 byte tokens, so the output layer is a
#   small share of a drafted token's work (section 6 counts it) and a reduced vocabulary
#   would save little; the released code reduces it for vocabularies of 100,000 tokens and
#   more.
# * **Layers 2, 4 and 6 of the target's 6** (the paper: a low, a middle and a high layer of
#   dozens). The top one is included so that the reduction can start as "take the top layer"
#   (the EAGLE-1 input; the training script initialises it so) and learn from there.
# * **The fusion** is one linear map of a token's embedding and a feature, side by side, to
#   the target's width, then one GPT-2 block like the target's. Which token stands beside
#   which feature is the eagle_align exercise's question; what the block adds to its input,
#   and what it leaves out, the eagle_block exercise's.
# * **The losses**: the token term is KL(p ‖ q) to the target's distribution at T = 1; EAGLE-1
#   adds a smooth-L1 regression, weight 1 each; EAGLE-3 unrolls 3 steps.
# * **Tiny models on a CPU**: a 6-block target of width 384, two recipes of 11 minutes each
#   on one core. The papers' targets have billions of parameters and run on GPUs, so this
#   lab's ranking of drafters (section 6) is not theirs, and need not be:
#   [Why our numbers are not the papers'](../docs/our-numbers-and-the-papers.md).
#
# ## Exercises of this notebook: try each before the section named
#
# The notebook calls the reference code; these four ask you to write the parts yourself.
# Grade each from the repository root (`.venv/bin/specdec grade FILE:FUNCTION`):
#
# * before section 1: [`my_eagle_align.py`](exercises/my_eagle_align.py)`:catch_up_pairs`,
#   the catch-up rows of one round (which token goes with which feature);
# * before section 1: [`my_eagle_block.py`](exercises/my_eagle_block.py)`:eagle_block_forward`,
#   the fused block's forward (a token embedding and a feature in, the next hidden state out);
# * before section 2: [`my_eagle_ttt.py`](exercises/my_eagle_ttt.py)`:training_time_test_step`,
#   one training-time-test step of a tiny block (which inputs are true features and which its
#   own; the loss and its gradients);
# * before section 5: [`my_eagle_tree.py`](exercises/my_eagle_tree.py)`:grow_eagle_tree`,
#   EAGLE-2's growth (expand per level, re-rank, keep a budget).
#
# The papers above and the docstrings of the skeletons are enough to start. The sections:
#
# 1. what the drafter reads, on one real context;
# 2. how it was trained (the shipped weights and their training curves);
# 3. acceptance by draft position in real rounds;
# 4. one real round, and the features it hands back;
# 5. EAGLE-2: the drafter's confidence against acceptance, and the dynamic tree;
# 6. what a drafted token costs, against the independent draft model.

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
from reference import SamplingParams, probabilities, speculative_generate
from reference.sampling import GREEDY
from reference.speculative import prefill
from reference.tokenizer import decode
from reference.tree import EagleTreeDrafter, tree_speculative_generate
from specdec.bundled import MODELS_DIR, load_bundled_pair
from specdec.costs import measure_costs
from specdec.drafting import make_drafter
from specdec.fast_cpu import fast
from specdec.figures.style import save
from specdec.machine import describe_machine, use_blas_threads
from specdec.measure.bench import held_out_code_prompts

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
print(
    f"target: {target.config.n_layer} blocks, width {C}, {target.n_vocab} tokens; EAGLE "
    f"variant {meta['variant']}, reads the features after blocks {list(eagle.feature_layers)}"
)
PROMPTS = held_out_code_prompts(6)  # code the pair never trained on
T08 = SamplingParams(temperature=0.8)

# %% [markdown]
# ## 1. What the drafter reads
#
# *(Exercises `my_eagle_align` and `my_eagle_block` come before this section.)*
#
# After the prompt's prefill the target has cached every prompt token but the last, and
# the round hands the drafter their features: f(0) … f(n − 2) for a prompt x(0) … x(n − 1)
# (for EAGLE-3, each f(t) is the three layers' rows, reduced to one width on arrival). The
# drafter's row t reads f(t) with the token x(t + 1): the token at t + 1 is known because it
# was *drawn from the row f(t) scored*. That is the alignment the whole method rests on:
#
# | position t | 0 | 1 | … | n − 2 | n − 1 | n |
# |---|---|---|---|---|---|---|
# | token in | e(x1) | e(x2) | … | e(x(n−1)) | e(d1) | e(d2) |
# | feature in | f(0) | f(1) | … | f(n−2) | h(n−1) | h(n) |
# | block out | h(1) | h(2) | … | h(n−1) → q1 | h(n) → q2 | h(n+1) → q3 |
#
# h is the block's own output. In EAGLE-1 it is trained to be the next feature, so h(t + 1)
# is a prediction f̂(t + 1); in the shipped EAGLE-3 no loss ties it to any feature: it is the
# state the target's ln_f and output layer turn into q, and the state the next draft step
# reads where a true feature would stand (the code calls it `f_hat` either way).
#
# The cell below prefills a real prompt, checks that the features handed over are the
# target's own (a plain forward of the same layers, stopped before ln_f, handed to a fresh
# drafter), and asks the drafter for its first guess next to the target's.

# %%
prompt = PROMPTS[0][:160]
cache = target.new_cache()
prefill(target, cache, eagle, prompt)
fresh = new_eagle()  # the same layers' rows from a plain forward, handed over by hand
fresh.observe_features(target.layer_features(prompt[:-1], layers=eagle.feature_layers))
gap = np.abs(eagle.features[: eagle.n_known] - fresh.features[: fresh.n_known]).max()
print(
    f"features handed over: {eagle.n_known} positions (the prompt has {len(prompt)}), each "
    f"stored as {C} numbers; largest difference from a plain forward: {gap:.1e}"
)
assert eagle.n_known == len(prompt) - 1, f"{eagle.n_known} features for {len(prompt)} tokens"
d = eagle.propose(prompt, 1, SamplingParams(temperature=1.0), np.random.default_rng(0))
p_next = probabilities(target.forward(prompt)[-1], SamplingParams(temperature=1.0))
print(f"context ends: {decode(prompt[-40:])!r}")
for name, row in (("drafter's q", d.q[0]), ("target's p ", p_next)):
    top = np.argsort(-row)[:3]
    print(
        f"{name} at T = 1, its three likeliest next tokens: "
        + "  ".join(f"{decode([int(t)])!r} {row[t]:.2f}" for t in top)
    )
eagle.rollback()

# %% [markdown]
# ## 2. How it was trained
#
# *(Exercise `my_eagle_ttt` comes before this section.)*
#
# The target is frozen. `specdec/training/train_eagle.py` computes its features and
# probabilities once on windows of the training text, then fits only the fusion layer, the
# block and, for EAGLE-3, the reduction; ln_f and the output layer stay the target's. Both
# recipes of the papers, as this project runs them (`docs/training.md`, "EAGLE"):
#
# * **EAGLE-1**: the feature is the target's top one, f(t). One step, teacher-forced on true
#   features; loss = smooth-L1 of the block's output against f(t + 1) + KL(p ‖ q).
# * **EAGLE-3**: the feature fuses the target's layers 2, 4 and 6 through one more linear
#   map. Training-time test, 3 steps: step 1 reads true features; at step j ≥ 2 the row of a
#   chain reads the chain's true token and the block's own output of step j − 1, and attends
#   to the true-feature rows before the chain and to the chain's own earlier rows, as a draft
#   row does in a round. Loss = the mean over steps of KL(p ‖ q); no regression.
#
# The held-out table is the training script's: held-out windows, every position a chain,
# each drafter run as it drafts on the same chains (a paired comparison), the extra heads
# and early exit measured the same way.

# %%
print(f"shipped: {meta['variant']}  ({meta['why_this_variant']})")
recipes = {meta["variant"]: meta} | meta["compared"]  # variant -> its training and held-out α
fig, ax = plt.subplots(figsize=(6.0, 3.2))
for name, run in recipes.items():
    curve = run["training"]["curve"]
    steps = [point["step"] for point in curve]
    for j in range(len(curve[0]["kl"])):  # EAGLE-3 is unrolled: one KL per step of its own
        ax.plot(
            steps,
            [point["kl"][j] for point in curve],
            lw=1.5 if j == 0 else 0.8,
            ls="-" if j == 0 else "--",
            color="C0" if name == "eagle-1" else "C1",
            label=name if j == 0 else (f"{name}, unrolled steps 2-3" if j == 1 else None),
        )
ax.set_xlabel("training step (one core, 11 minutes each)")
ax.set_ylabel("KL(p || q), training batch")
ax.set_yscale("log")
ax.legend(frameon=False)
ax.set_title("EAGLE on the frozen bundled target")
display(Image(save(fig, FIGURES / "eagle_training.png")))
print(f"held-out α by draft position ({meta['evaluation'].split(':')[0]}):")
alpha = {name: run["held_out_alpha"] for name, run in recipes.items()}
alpha |= meta["baselines_same_protocol"]
for name, a in alpha.items():
    print(
        f"  {name:18} greedy "
        + " ".join(f"{x:.2f}" for x in a["greedy"])
        + "   T = 0.8 "
        + " ".join(f"{x:.2f}" for x in a["T0.8"])
    )

kl_1 = recipes["eagle-1"]["training"]["final"]["kl"]  # [step 1]
kl_3 = recipes["eagle-3"]["training"]["final"]["kl"]  # [step 1, step 2, step 3]
print(f"last batch, KL of the first step: EAGLE-1 {kl_1[0]:.3f}, EAGLE-3 {kl_3[0]:.3f}")
assert kl_1[0] < kl_3[0], "EAGLE-1's first-step KL should end below EAGLE-3's"
exit_name = next(n for n in alpha if n.startswith("early-exit"))
for temp in ("greedy", "T0.8"):
    e1, e3, ee = (np.array(alpha[n][temp]) for n in ("eagle-1", "eagle-3", exit_name))
    assert e1[0] > e3[0] and np.all(e3[1:] > e1[1:]), (
        f"{temp}: EAGLE-1 should lead at position 1 only, got {e1} against {e3}"
    )
    edge = e3 - ee  # EAGLE-3 over early exit, by position
    print(f"{temp:6}: EAGLE-3 minus early exit by position " + " ".join(f"{x:+.3f}" for x in edge))
    assert np.all(edge > 0), f"{temp}: EAGLE-3 should be above early exit at every position"
    assert edge[:2].mean() > edge[-1], (
        f"{temp}: the edge should be larger at positions 1-2 than at the last"
    )

# %% [markdown]
# **How to read it** (the comparisons are asserted in the cell above). EAGLE-1's first-step KL
# ends lower, and EAGLE-1 is ahead at draft position 1; from position 2 on EAGLE-3 is ahead,
# at both temperatures. This is what training-time test is for: EAGLE-1 was trained on true
# features only (the situation of a round's first draft), and from the second draft on it
# reads its own outputs, which it never saw in training. EAGLE-3's unrolled steps (the dashed
# curves) are trained on exactly those inputs.
#
# EAGLE-3 is above early exit at every position, and its edge is larger at the first two
# positions than at the last. Both drafters see each drafted token (early exit runs its
# first two blocks on it), so that is not the difference. What differs is what they read of
# the committed text: early exit, the target's first 2 of 6 blocks; EAGLE, the features the
# whole target computed (blocks 2, 4 and 6). The first draft rests most on the committed
# text; later drafts rest more on EAGLE's own outputs, and the edge narrows. The data fit
# this reading; they do not prove it.
#
# ## 3. Acceptance by draft position, in real rounds
#
# EAGLE, early exit and the independent draft model, each at k = 4, on the same held-out
# prompts, at greedy and at T = 0.8 (the extra heads are in notebook 10 and in the table
# above). The rate at position i is P(accepted | examined): position i is examined only when
# the drafts before it passed, so each drafter is measured in the contexts its own rounds
# reach, and the counts shrink with i. Unlike the table of section 2, this is not a paired
# comparison, and a rate at position 3 or 4 rests on the rounds counted beside it.

# %%
K = 4
makers = {
    "EAGLE": new_eagle,
    "early exit": lambda: make_drafter("early-exit", reference, target, draft),
    "draft model": lambda: make_drafter("model", reference, target, draft),
}
LIVE = PROMPTS[:3]
rates, per_round = {}, {}
for sampling, label in ((GREEDY, "greedy"), (T08, "T = 0.8")):
    for name, make in makers.items():
        runs = [
            speculative_generate(
                target,
                make(),
                p,
                k=K,
                max_new_tokens=64,
                rng=np.random.default_rng(i),
                sampling=sampling,
            )
            for i, p in enumerate(LIVE)
        ]
        reached = sum(r.stats.reached for r in runs)
        accepted = sum(r.stats.accepted_at for r in runs)
        rates[label, name] = accepted / np.maximum(reached, 1)
        per_round[label, name] = np.mean([r.stats.mean_tokens_per_round for r in runs])
        print(
            f"{label:8} {name:12} tokens/round {per_round[label, name]:.2f}  P(accept | "
            f"examined) by position (rounds): "
            + "  ".join(f"{a:.2f} ({n})" for a, n in zip(rates[label, name], reached, strict=True))
        )
print(f"({len(LIVE)} prompts, 64 new tokens each)")

fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.2), sharey=True)
width = 0.26
for ax, label in zip(axes, ("greedy", "T = 0.8"), strict=True):
    for j, name in enumerate(makers):
        ax.bar(
            np.arange(1, K + 1) + (j - 1) * width,
            rates[label, name],
            width,
            label=name,
            hatch="//" if name == "draft model" else None,
            alpha=0.6 if name == "draft model" else 1.0,
        )
    ax.set_xlabel("draft position i")
    ax.set_xticks(np.arange(1, K + 1))
    ax.set_title(label)
axes[0].set_ylabel("P(accepted | examined)")
axes[0].set_ylim(0, 1)
fig.legend(*axes[0].get_legend_handles_labels(), frameon=False, loc="upper center", ncol=3)
fig.subplots_adjust(top=0.78)
display(Image(save(fig, FIGURES / "eagle_per_position.png")))

# %% [markdown]
# Read these rates with their counts: a few prompts, each drafter in its own contexts. Where
# this run and the paired table of section 2 disagree on the order of two drafters at one
# position, trust the paired table (every position of its held-out windows is a chain). The
# tokens per round printed here are what section 6 prices.
#
# ## 4. One real round
#
# A round with the trace on: the drafts, the drafter's q and the target's p for each, and
# where the round stopped. After the round the drafter is handed the features of the
# positions the round kept: the catch-up rows and the accepted drafts. Its own cache keeps
# only rows built from true features; the accepted drafts, which it fed with its own
# outputs, are fed again next round with the target's real features.

# %%
res = speculative_generate(
    target,
    new_eagle(),
    PROMPTS[1][:120],
    k=K,
    max_new_tokens=24,
    rng=np.random.default_rng(3),
    sampling=T08,
    trace=True,
)
rnd = res.trace[2]
print(
    f"round 3: context {rnd.context_len} tokens, drafted {len(rnd.draft_tokens)}, "
    f"accepted {rnd.accepted}, then a {rnd.token_kind} {decode([rnd.token])!r}"
)
for i, tok in enumerate(rnd.draft_tokens):
    q, p = rnd.q_rows[i, tok], rnd.p_rows[i, tok]
    fate = "accepted" if i < rnd.accepted else ("rejected" if i == rnd.accepted else "unread")
    print(
        f"  d{i + 1} = {decode([int(tok)])!r:6}  q = {q:.3f}  p = {p:.3f}  "
        f"min(1, p/q) = {min(1.0, p / q):.3f}  {fate}"
    )
print(
    f"target cache (before, written, after): {rnd.target_cache}; drafter's cache: {rnd.draft_cache}"
)

# %% [markdown]
# ## 5. EAGLE-2: confidence, acceptance and the dynamic tree
#
# *(Exercise `my_eagle_tree` comes before this section.)*
#
# **Does the drafter's confidence track acceptance?** EAGLE-2 rests on it. The measurement
# is exact here, with no coin flips: a tree candidate x is a point mass, and the target's
# exact rule accepts it (once its parent is accepted) with probability p(x), the target's
# own probability of x; a whole path, with the product of p along it. So for every token the
# drafter drafted in real rounds at T = 1, compare its confidence q(x) with p(x), and the
# path products likewise, binned by confidence.

# %%
T1 = SamplingParams(temperature=1.0)
conf = {"one draft": ([], []), "a path (products)": ([], [])}  # name -> (drafter's q, target's p)
for i, p in enumerate(PROMPTS):
    run = speculative_generate(
        target,
        new_eagle(),
        p,
        k=K,
        max_new_tokens=64,
        rng=np.random.default_rng(i),
        sampling=T1,
        trace=True,
    )
    for r in run.trace:
        rows = np.arange(len(r.draft_tokens))
        q_d, p_d = r.q_rows[rows, r.draft_tokens], r.p_rows[rows, r.draft_tokens]
        conf["one draft"][0].extend(q_d)
        conf["one draft"][1].extend(p_d)
        conf["a path (products)"][0].extend(np.cumprod(q_d))  # path d1..di: the tree's node value
        conf["a path (products)"][1].extend(np.cumprod(p_d))  # the chance the target accepts it all
edges = np.linspace(0, 1, 6)
fig, ax = plt.subplots(figsize=(4.2, 3.6))
ax.plot([0, 1], [0, 1], color="0.7", lw=0.8, label="calibrated")
worst = 0.0
for name, (q_all, p_all) in conf.items():
    q_all, p_all = np.array(q_all), np.array(p_all)
    bins = np.clip(np.digitize(q_all, edges) - 1, 0, len(edges) - 2)
    full = [b for b in range(len(edges) - 1) if np.sum(bins == b) >= 20]  # bins of 20 or more
    mean_q = np.array([q_all[bins == b].mean() for b in full])
    mean_p = np.array([p_all[bins == b].mean() for b in full])
    counts = [int(np.sum(bins == b)) for b in full]
    print(
        f"{name}: {len(q_all)} values; confidence bins "
        + ", ".join(
            f"{edges[b]:.1f}-{edges[b + 1]:.1f}: mean q {mq:.2f}, mean p {mp:.2f} ({n})"
            for b, mq, mp, n in zip(full, mean_q, mean_p, counts, strict=True)
        )
    )
    assert np.all(np.diff(mean_p) > 0), f"{name}: acceptance should rise with confidence"
    worst = max(worst, float(np.abs(mean_p - mean_q).max()))
    ax.plot(mean_q, mean_p, "o-", label=name)
print(f"largest gap between a bin's mean confidence and its mean acceptance: {worst:.2f}")
assert worst < 0.15, f"the drafter should be calibrated to within 0.15, got {worst:.2f}"
ax.set_xlabel("drafter's confidence q (bin mean)")
ax.set_ylabel("acceptance p (bin mean)")
ax.set_title(f"EAGLE-3 at T = 1, {len(PROMPTS)} prompts")
ax.legend(frameon=False)
display(Image(save(fig, FIGURES / "eagle_confidence.png")))

# %% [markdown]
# Acceptance rises from each confidence bin to the next, for single drafts and for paths,
# and each bin's mean acceptance is within the gap printed of its mean confidence (the cell
# asserts under 0.15): on this pair, as in the paper, the drafter's confidence is a fair
# estimate of acceptance, and the product along a path a fair estimate for the path.
#
# **The tree in this code.** `EagleTreeDrafter(eagle, max_nodes, depth, top)` follows the
# paper's two phases. The catch-up row's output scores depth 1. At each level, every node
# chosen for expansion offers its `top` likeliest tokens as children, each valued at its
# parent's value times the drafter's probability of the token; of the new level, the `top`
# children of largest value are expanded next (one block pass for them all), unless no
# descendant of theirs could still make the budget. After `depth` levels, all candidates of
# all levels are re-ranked by value and the best `max_nodes` kept. The values use the
# drafter's distribution at **T = 1** whatever the round's temperature: at greedy the
# sampling transform is one-hot, so every child but the argmax would be worth 0 and the tree
# would be a chain; and T = 1 is where the drafter is trained against the target (KL at
# T = 1) and where its calibration was just measured. The tree is therefore the same at every
# temperature; only the verification differs. Every node is a point mass, judged by
# `reference/tree`'s exact rule (notebook 11), so the output law is the target's.
#
# At equal nodes (8 candidates per target pass), does the tree keep more tokens per round
# than a chain?

# %%
NODES = 8
tree_vs_chain = {}
for sampling, label in ((GREEDY, "greedy"), (T08, "T = 0.8")):
    chain = [
        speculative_generate(
            target,
            new_eagle(),
            p,
            k=NODES,
            max_new_tokens=64,
            rng=np.random.default_rng(i),
            sampling=sampling,
        )
        for i, p in enumerate(LIVE)
    ]
    tree = [
        tree_speculative_generate(
            target,
            EagleTreeDrafter(new_eagle(), max_nodes=NODES, depth=NODES),
            p,
            max_new_tokens=64,
            rng=np.random.default_rng(i),
            sampling=sampling,
        )
        for i, p in enumerate(LIVE)
    ]
    tree_vs_chain[label] = [
        np.mean([r.stats.mean_tokens_per_round for r in runs]) for runs in (chain, tree)
    ]
    c_tok, t_tok = tree_vs_chain[label]
    print(
        f"{label:8} {NODES} candidates per pass, {len(LIVE)} prompts: chain {c_tok:.2f} "
        f"tokens/round, dynamic tree {t_tok:.2f}: the "
        f"{'tree' if t_tok > c_tok else 'chain'} kept more"
    )

# the shape of one dynamic tree: the drafter's first round on the first prompt
grower = EagleTreeDrafter(new_eagle(), max_nodes=NODES, depth=NODES)
prefill(target, target.new_cache(), grower, PROMPTS[0][:120])
trees = {}
for sampling, label in ((GREEDY, "greedy"), (T08, "T = 0.8")):
    trees[label] = grower.propose_tree(
        PROMPTS[0][:120], NODES, NODES + 1, sampling, np.random.default_rng(0)
    )
    grower.rollback()
one = trees["greedy"]
first = {label: rates[label, "EAGLE"][0] for label in ("greedy", "T = 0.8")}
print(
    "EAGLE's first draft accepted (section 3): "
    + ", ".join(f"{k} {a:.2f}" for k, a in first.items())
)
assert min(first.values()) > 0.5, f"the drafter's first choice should be right mostly: {first}"
same = all(
    np.array_equal(getattr(one, f), getattr(trees["T = 0.8"], f)) for f in ("tokens", "parents")
)
assert same, "the tree is grown at T = 1 whatever the round's temperature: it should not change"
depths = one.depths
print(
    f"one tree (the same at greedy and T = 0.8: {same}): {one.n_nodes - 1} candidates; by "
    "depth: "
    + "   ".join(
        f"{dep}: "
        + " ".join(repr(decode([int(one.tokens[i])])) for i in np.flatnonzero(depths == dep))
        for dep in range(1, one.depth + 1)
    )
)

# %% [markdown]
# **How to read it.** The printed tree is the first round's, the same at both temperatures
# (asserted): where the drafter hesitates the tree spreads, where it is sure it runs deep,
# and the budget decides how far. Which of chain and tree kept more tokens per round is
# printed above, per temperature, on a few prompts. What decides it is depth against width.
# The drafter's first choice is right most of the time (the rates printed, from section 3),
# so siblings rescue few rounds, while a chain of 8 drafts 8 deep and a tree of 8 nodes that
# spends some on siblings stops shorter. Under sampling the first choice fails more often and
# siblings catch some of those failures; but a sibling is a point mass, accepted with
# probability p(x), where a chain's sampled draft passes with min(1, p/q) (notebook 11).
# A tree pays where the first guess is often wrong and extra rows in the target's pass are
# nearly free, which is a GPU verifying a large target: the papers' setting, not this lab's
# ([why](../docs/our-numbers-and-the-papers.md)). `docs/benchmarks.md` ("EAGLE in the method
# table") compares the two in speed, on more prompts.
#
# ## 6. What a drafted token costs, against the independent draft model
#
# Speed is tokens per round over what a round costs. Per drafted token, EAGLE runs one
# block at the **target's** width plus the target's output layer; the independent draft
# model runs 2 blocks at width 128 plus its own output layer. The cell counts the weights
# each multiplies, and times both drafters the same way: a k-draft proposal, fastest of 20,
# per drafted token, in units of a target step (c).

# %%
# the weight entries one drafted token multiplies: EAGLE's fusion W and its block, then the
# target's tied output layer; the draft model's blocks and its own output layer (the
# embedding lookups read one row each; EAGLE-3's reduce map runs once per position, on
# arrival of the true features, not per drafted token)
eagle_block = sum(w.size for n, w in eagle.block_model.params.items() if n.startswith("h."))
head = target.params["wte.weight"].size
eagle_weights = eagle.w.size + eagle_block + head
draft_weights = sum(w.size for n, w in draft.params.items() if n != "wpe.weight")
print(
    f"block width: EAGLE {C}, draft model {draft.config.n_embd}; weights per drafted token: "
    f"EAGLE {eagle_weights:,} (the output layer {head / eagle_weights:.0%} of them), draft "
    f"model {draft_weights:,}; ratio {eagle_weights / draft_weights:.1f}x"
)
assert head / eagle_weights < 0.1, "the reused output layer should be a small share here"

costs = measure_costs(
    target, draft, np.concatenate([PROMPTS[0]] * 2)[:256], max_T=K + 1, repeats=20
)


def step_seconds(drafter, context, k, repeats=20):  # the fastest k-draft proposal / k
    cache = target.new_cache()
    prefill(target, cache, drafter, context)
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        drafter.propose(context, k, GREEDY, np.random.default_rng(0))
        best = min(best, time.perf_counter() - start)
        drafter.rollback()
    return best / k


c = {
    name: step_seconds(makers[name](), PROMPTS[0][:200], K) / costs.target_step
    for name in ("EAGLE", "draft model")
}
v = costs.verify_cost(K + 1)
print(
    f"c (one drafted token, in target steps): EAGLE {c['EAGLE']:.3f}, draft model "
    f"{c['draft model']:.3f} ({c['EAGLE'] / c['draft model']:.1f}x); v({K + 1}) = {v:.2f}"
)
assert c["EAGLE"] > c["draft model"], "EAGLE's wide block should cost more per draft here"


def predicted_speedup(tokens_per_round, k, c, v):  # Leviathan's E / (k c + v), E measured
    return tokens_per_round / (k * c + v)


for label in ("greedy", "T = 0.8"):
    E = {name: per_round[label, name] for name in c}
    speed = {name: predicted_speedup(E[name], K, c[name], v) for name in c}
    for name in c:
        print(
            f"{label:8} {name:12} k = {K}: {E[name]:.2f} tokens/round (section 3), "
            f"c = {c[name]:.3f}, v = {v:.2f} -> predicted {speed[name]:.2f}x"
        )
    print(
        f"{'':9}predicted faster: {max(speed, key=speed.get)}; more tokens per round: "
        f"{max(E, key=E.get)}; cheaper drafts: {min(c, key=c.get)}"
    )

# %% [markdown]
# **How to read it.** The weight counts hold on any machine; the times are this run's. On
# this CPU a drafted token of EAGLE's costs more than one of the draft model's (asserted): its
# block is wider and it multiplies several times the draft model's weights (the ratio
# printed; the reused output layer is a small part of them). The last lines say which of the
# two the cost model puts ahead here, and on which term: tokens per round, or c.
#
# This ranking is physics of a tiny pair on a CPU, not a verdict on the method. The target is
# so small that a separate model a third of its width, trained on the same text, keeps many
# tokens per round (section 3), and the CPU charges a drafted token for the weights it reads.
# The papers measure targets of billions of parameters on GPUs, and there find EAGLE ahead of
# drafting with a separate small model; on a GPU one block at the target's width and two
# narrow blocks each cost a few kernel launches rather than their bytes. What this lab's
# cost model predicts for that regime, labelled as a prediction, is in
# [Why our numbers are not the papers'](../docs/our-numbers-and-the-papers.md);
# `docs/benchmarks.md` ("EAGLE in the method table") has the full measurement on this
# project's machine.

# %% [markdown]
# ## Exercises
#
# The four exercises of this notebook, each assigned before the section that uses it (the
# list at the top). Grade them from the repository root:
#
# ```bash
# .venv/bin/specdec grade notebooks/exercises/my_eagle_align.py:catch_up_pairs
# .venv/bin/specdec grade notebooks/exercises/my_eagle_block.py:eagle_block_forward
# .venv/bin/specdec grade notebooks/exercises/my_eagle_ttt.py:training_time_test_step
# .venv/bin/specdec grade notebooks/exercises/my_eagle_tree.py:grow_eagle_tree
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
# 4. EAGLE-3 has no feature-regression loss. What is its block's output then, and why must
#    its training run the block on its own outputs?
# 5. EAGLE-2's tree ranks its nodes by the drafter's distribution at T = 1, even in a greedy
#    round. Why not by the round's own q, and what does the ranking rely on to be a good
#    guess of acceptance?
#
# (The answers are kept apart, for instructors: `specdec course DIR --instructor BUNDLE`
# writes them beside the students' copy; docs/teaching.md.)

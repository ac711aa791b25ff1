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
# # 03 · Drafting: k cheap guesses, one after another
#
# *Article §2. Code: `reference/drafters.py` (`ModelDrafter`, `Draft`),
# `reference/sampling.py`. Tests: `tests/unit/test_model_drafter.py` (what this notebook
# shows: each row q_i, the samples, the one-hot greedy rows, the cache after a proposal),
# `tests/unit/test_drafter_prefill.py`, and the oracle's loop family.*
#
# The draft model q is a much smaller GPT over the **same vocabulary** as the target (here:
# bytes). It drafts like any language model — autoregressively — so its guesses are not k
# independent predictions: the second guess is conditioned on the first, and so on:
#
# x₁ ~ q(· | context),  x₂ ~ q(· | context, x₁),  …,  x_k ~ q(· | context, x₁ … x_{k−1}).
#
# A drafter hands back two things: the tokens **and** the exact distributions q_i they were
# drawn from. Verification (notebooks 04–05) needs those rows: min(1, p/q) is only correct
# with the q that really produced the token.

# %%
import os
import tempfile
from pathlib import Path

import numpy as np
from IPython.display import Image, display

from reference import GPT, GPTConfig, ModelDrafter, SamplingParams, init_params, probabilities
from reference.tokenizer import decode, encode
from specdec.bundled import bundled_pair_available, load_bundled_pair
from specdec.costs import time_append
from specdec.figures import plot_draft_rows
from specdec.machine import describe_machine, use_blas_threads
from specdec.report import quoted
from specdec.standins import random_pair

use_blas_threads()  # the same BLAS threads in JupyterLab as in render.py (specdec/machine.py)
print(describe_machine().line())
FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))
bundled = bundled_pair_available()
target, draft = load_bundled_pair() if bundled else random_pair(seed=0)
print("draft:", draft.config)
n_target = sum(w.size for w in target.params.values())
n_draft = sum(w.size for w in draft.params.values())
print(f"parameters: target {n_target / 1e6:.2f} M, draft {n_draft / 1e6:.2f} M "
      f"({n_target / n_draft:.0f}x smaller)")

# %% [markdown]
# ## 1. One proposal of k = 4 tokens
#
# `ModelDrafter.propose(context, k, sampling, rng)` feeds the context tokens its cache lacks,
# samples x₁ from the last row, feeds x₁, samples x₂, and so on. Sampling uses the processed
# distribution from `reference.sampling.probabilities` (temperature here), the same function
# the target will use. Every random choice comes from the generator we pass in.

# %%
context = encode("def fibonacci(n):\n    if n ")
sampling = SamplingParams(temperature=0.8)
drafter = ModelDrafter(draft)
proposal = drafter.propose(context, k=4, sampling=sampling, rng=np.random.default_rng(3))

print("context:", repr(decode(context)))
print("drafted:", repr(decode(proposal.tokens)), "  q rows:", proposal.q.shape)
for i, (x, row) in enumerate(zip(proposal.tokens, proposal.q, strict=True), start=1):
    top = np.argsort(-row)[:3]
    alternatives = ", ".join(f"{quoted(t)} {row[t]:.2f}" for t in top)
    print(f"  x{i} = {quoted(x):6} q_{i}(x{i}) = {row[x]:.3f}   top of q_{i}: {alternatives}")

# %%
path = plot_draft_rows(proposal.tokens, proposal.q, FIGURES / "draft_rows.png",
                       context_text=decode(context[-8:]).replace("\n", "↵"))
display(Image(filename=str(path)))

# %% [markdown]
# ## 2. Each row is conditioned on the drafts before it
#
# We recompute each q_i with a plain uncached forward of `context + x₁ … x_{i−1}` and compare.
# They match: the drafter's cache held exactly that history when it produced the row.

# %%
for i in range(len(proposal.tokens)):
    prefix = np.concatenate([context, proposal.tokens[:i]])
    q_again = probabilities(draft.forward(prefix)[-1], sampling)
    print(f"q_{i + 1}: max |cached - recomputed| = {np.abs(q_again - proposal.q[i]).max():.2e}")

# %% [markdown]
# ## 3. What the draft's cache holds now
#
# The drafter fed the context (all of it, in this first call: nobody called `prefill`) and
# x₁ … x_{k−1}; x_k was never fed — nobody needs q_{k+1}. All of it is **temporary** until the
# target has spoken: after verification, `drafter.commit(n_accepted)` keeps the context and
# the accepted drafts, and `drafter.rollback()` drops the rest (notebook 06 follows this over
# many rounds).

# %%
print(drafter.cache, f"  (context {len(context)} + drafts fed {len(proposal.tokens) - 1})")
drafter.commit(2)  # pretend the target accepted x1 and x2
print("after commit(2):", drafter.cache)
drafter.rollback()  # forget the drafts fed after them
print("after rollback():", drafter.cache)

# %% [markdown]
# ## 4. Greedy drafting gives one-hot rows
#
# With temperature 0 the "distribution" is a point mass on the argmax. The drafter reports
# exactly that: q_i(x_i) = 1. The acceptance rule then becomes "keep the draft if the target
# would have chosen it too" (notebook 05) — no special case in the code.

# %%
drafter.reset()
greedy = drafter.propose(context, k=4, sampling=SamplingParams(temperature=0.0),
                         rng=np.random.default_rng(3))
print("greedy draft:", repr(decode(greedy.tokens)))
print("q_i(x_i):", greedy.q[np.arange(4), greedy.tokens], "  row sums:", greedy.q.sum(axis=1))

# %% [markdown]
# **Cost.** k draft steps per round, each costing c target steps (notebook 01 measured c).
# Drafting is still sequential — but on a model small enough that k steps are cheap.
#
# How cheap? The draft has about 22 times fewer parameters than the target, but a step's time
# is not proportional to parameters. Every step makes the same sequence of NumPy calls per
# layer (layer norms, four products, attention over the cache, the activation), and each call
# costs some microseconds whatever its size. The draft has 2 layers to the target's 6, so it
# pays a third of the target's fixed cost, not a twenty-second, and on a quiet machine a draft
# step usually costs more than the parameter count alone would say. By how much depends on
# the machine — its memory, its BLAS kernels, NumPy's call overhead on this CPU, and what else
# is running — so the cell prints it. A model with the draft's shape but width 8 — almost no
# parameters — shows the fixed part:

# %%
context = encode("def fibonacci(n):\n    if n < 2:\n        return n\n" * 2)
tiny_cfg = GPTConfig(n_vocab=draft.config.n_vocab, n_ctx=draft.config.n_ctx, n_embd=8,
                     n_head=2, n_layer=draft.config.n_layer)
tiny = GPT(tiny_cfg, init_params(tiny_cfg, np.random.default_rng(0)))
step = {name: time_append(m, context, T=1, repeats=30)
        for name, m in (("target", target), ("draft", draft), ("width-8 draft", tiny))}
for name, seconds in step.items():
    print(f"{name:14s} one-token step {seconds * 1e3:6.3f} ms")
c = step["draft"] / step["target"]
print(f"on this machine: parameters {n_target / n_draft:.0f}x fewer, a draft step "
      f"{1 / c:.1f}x cheaper than a target step (c = {c:.3f}: "
      f"{'more' if c > n_draft / n_target else 'less'} than the parameter ratio says)")
print(f"the width-8 model's step costs {step['width-8 draft'] / step['draft']:.0%} of a draft "
      "step: the part of a step that does not depend on width")
# the counts above, facts about the bundled pair (the times are printed, not asserted: they
# belong to this CPU and its load)
if bundled:
    assert 18 < n_target / n_draft < 26, f"about 22x fewer parameters, got {n_target / n_draft:.1f}"
    layers = (target.config.n_layer, draft.config.n_layer)
    assert layers == (6, 2), f"the bundled target has 6 layers and the draft 2, got {layers}"

# %% [markdown]
#
# **Other ways to draft** (article §10). Anything that returns tokens plus the q they were
# drawn from can be a drafter (`reference.drafters.Drafter`). The reference ships these:
#
# * an independent small model — `ModelDrafter`, this notebook, the drafter of
#   [Leviathan et al., 2023](../docs/references.md#leviathan2023) and
#   [Chen et al., 2023](../docs/references.md#chen2023); simple, but a second model to load;
# * n-gram or prompt lookup — `LookupDrafter` copies a continuation seen earlier in the
#   prompt or the output, as [prompt lookup decoding](../docs/references.md#promptlookup2023)
#   does; no network at all, good on repetitive text; its q is one-hot (notebook 05 §4).
#   `HybridDrafter` uses lookup where the text has a match and the draft model elsewhere
#   (`reference/lookup.py`);
# * self-speculation — the target's own first blocks with an exit head (`EarlyExitDrafter`,
#   `reference/early_exit.py`; the idea of
#   [Draft & Verify](../docs/references.md#draftverify2024) and
#   [LayerSkip](../docs/references.md#layerskip2024)) or extra prediction heads on its last
#   hidden state (`HeadsDrafter`, `reference/heads.py`; [Medusa](../docs/references.md#medusa2024),
#   after [Stern et al., 2018](../docs/references.md#stern2018)); no second model, but the
#   target needs those parts trained (notebook 10);
# * the target's own features — one small block that reads them (`EagleDrafter`,
#   `reference/eagle.py`; [EAGLE](../docs/references.md#eagle2024) and
#   [EAGLE-3](../docs/references.md#eagle3-2025); notebook 14);
# * tree drafts — several branches at once, verified in one pass with a tree-shaped mask
#   (`ModelTreeDrafter`, `HeadsTreeDrafter`, `reference/tree/`; after
#   [SpecInfer](../docs/references.md#specinfer2024)); longer accepted runs, at the price of
#   more temporary cache slots and a compaction step (notebook 11).
#
# Not built here: [lookahead decoding](../docs/references.md#lookahead2024), where the
# target itself drafts n-grams by Jacobi iteration
# ([Santilli et al., 2023](../docs/references.md#jacobi2023)), paying with extra positions in
# every pass, which a CPU does not get for free (notebook 01's v(T)).
#
# The chain drafters hand their tokens and q rows to the same exact rule, `verify`
# (notebooks 04–05). Trees have several candidates per position, so they are checked by
# `verify_tree`, the same acceptance test tried child by child down the tree — exact as well.

# %% [markdown]
# ## Check yourself
#
# Answer from this notebook alone, then compare with a neighbour:
#
# 1. Why are the k drafts of one proposal not k independent predictions? Write the
#    distribution x₂ is drawn from.
# 2. A drafter hands back two things. Which, and why does verification need the second?
# 3. After a proposal of k tokens, which tokens has the draft's cache been fed? Why is x_k
#    not fed, and what happens to these slots after verification?
# 4. What does a greedy drafter report as q_i, and what does the acceptance rule become?
# 5. The draft has about 22 times fewer parameters than the target. Why does a draft step
#    cost more than a twenty-second of a target step?
#
# (The answers are kept apart, for instructors: `specdec course DIR --instructor BUNDLE`
# writes them beside the students' copy; docs/teaching.md.)

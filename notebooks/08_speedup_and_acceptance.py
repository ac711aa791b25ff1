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
# # 08 · How much faster? Acceptance, k and the speedup
#
# *Article §7 and §8. Code: `lab/costs.py` (Leviathan's formulas, `measure_costs`),
# `lab/bench.py` (`run_bench`, `CODE_PROMPTS`, `TEXT_PROMPTS`). The full measurement:
# `specdec bench`, reported in `docs/benchmarks.md`.*
#
# If each draft is accepted with probability α, independently (Leviathan et al.'s model), a
# round with k drafts emits on average
#
# E(α, k) = 1 + α + α² + … + α^k = (1 − α^{k+1}) / (1 − α)
#
# tokens for one target pass. It costs k draft steps (c target steps each) plus one target
# pass over k + 1 positions, which costs v(k+1) one-token steps (v ≈ 1 on a GPU; measured on
# this machine in notebook 01). So the expected speedup over plain decoding is
#
# speedup(α, k) = E(α, k) / (k·c + v(k+1)).
#
# A longer draft helps only while its extra tokens still tend to be accepted: a long draft
# whose first token is rejected wastes all the work spent on it.
#
# This notebook makes a **small, quick** measurement (few prompts, short generations, two
# repeats) — enough to see the shapes. Timing cells depend on the machine and its load.

# %%
import os
import tempfile
from pathlib import Path

import numpy as np
from IPython.display import Image, display

from lab.bench import CODE_PROMPTS, TEXT_PROMPTS, run_bench
from lab.bundled import bundled_pair_available, load_bundled_pair
from lab.costs import expected_tokens_per_round, measure_costs, predicted_speedup
from lab.fast_cpu import fast
from lab.figures import (
    plot_acceptance_vs_k,
    plot_per_position_acceptance,
    plot_speedup_theory,
    plot_speedup_vs_k,
)
from lab.standins import random_pair
from reference import ModelDrafter, SamplingParams, SpeculativeStats, speculative_generate
from reference.tokenizer import EOS, encode

FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))
target, draft = load_bundled_pair() if bundled_pair_available() else random_pair(seed=0)
target, draft = fast(target), fast(draft)  # the CPU fast path, as `specdec bench` runs

# %% [markdown]
# ## 1. What the formula predicts
#
# First the costs on this machine (c and v), then the predicted speedup for a few values of
# α. Note how the best k grows with α, and how a verification pass that is not free
# (right panel) pulls the optimum down.

# %%
ks = [1, 2, 3, 4, 6, 8]
code = [encode(t) for t in CODE_PROMPTS]
context = np.concatenate(code * 3)[: target.config.n_ctx // 4]
costs = measure_costs(target, draft, context, max_T=max(ks) + 1, repeats=7)
print(f"c = {costs.c:.3f};  v(k+1): "
      + ", ".join(f"v({T})={costs.verify_cost(T):.2f}" for T in sorted(costs.target_append)))

# %%
path = plot_speedup_theory(costs, [0.5, 0.7, 0.8, 0.9], FIGURES / "speedup_theory.png",
                           max_k=max(ks))
display(Image(filename=str(path)))

# %% [markdown]
# ## 2. Measured: α and tokens per round against k
#
# `run_bench` decodes each prompt autoregressively and then speculatively at every k, back to
# back, with the same seeds; α is pooled over runs as accepted / examined drafts. Speedups
# are over the decode phase (the prompt's prefill is the same work for both). Each loop also
# carries a `StageClock`, so the run reports what drafting (c) and verification (v) really
# cost inside the loop — the last column predicts the speedup from those.

# %%
report = run_bench(target, draft, code[:2], ks, temperatures=[0.0, 0.8], max_new_tokens=32,
                   repeats=2, costs=costs, seed=0)
print(" T    k   alpha  tokens/round  E(alpha,k)  speedup  c (run)  v (run)  predicted (run)")
for pt in report.points:
    print(f"{pt.temperature:3g} {pt.k:4d}  {pt.alpha:.3f}  {pt.tokens_per_round:9.2f}"
          f"  {pt.predicted_tokens_per_round:9.2f}  {pt.speedup:7.2f}x  {pt.c_loop:6.3f}"
          f"  {pt.v_loop:6.2f}  {pt.predicted_loop:8.2f}x")

# %%
path = plot_acceptance_vs_k(report, FIGURES / "acceptance_vs_k.png")
display(Image(filename=str(path)))

# %% [markdown]
# α barely moves with k: it describes how well the pair agrees, not how far we guess. The
# tokens per round follow E(α, k) from below — the last rounds of a run are cut short by
# `max_new_tokens`, and acceptances are not really independent (easy stretches of code are
# accepted in runs).
#
# ## 3. Measured: speedup against k, and its optimum

# %%
path = plot_speedup_vs_k(report, FIGURES / "speedup_vs_k.png")
display(Image(filename=str(path)))
for t in (0.0, 0.8):
    best = report.best(t)
    alpha = float(np.mean([pt.alpha for pt in report.points if pt.temperature == t]))
    theory = {k: predicted_speedup(alpha, k, costs.c, costs.verify_cost(k + 1)) for k in ks}
    print(f"T = {t:g}: measured best k = {best.k} ({best.speedup:.2f}x); "
          f"formula with measured c, v and α = {alpha:.2f} picks k = {max(theory, key=theory.get)}")

# %% [markdown]
# (Two repeats of two short prompts: the error bars are wide and the exact optimum can move
# between runs. `specdec bench` uses more prompts and repeats; `docs/benchmarks.md` has its
# numbers.)
#
# ## 4. Code against free text
#
# The article expects code and formatted text to be accepted in longer runs than open-ended
# prose, where the next token is genuinely uncertain and two models disagree more. We measure
# per-position acceptance on the two prompt sets of `lab.bench`. Keep in mind what our
# pair was trained on: Python source only — English prose is out of its domain.

# %%
sampling = SamplingParams(temperature=0.8)
drafter = ModelDrafter(draft)
by_kind = {}
for kind, texts in (("code prompts", CODE_PROMPTS), ("text prompts", TEXT_PROMPTS)):
    by_kind[kind] = [
        speculative_generate(target, drafter, encode(t), k=4, max_new_tokens=48,
                             rng=np.random.default_rng(j), sampling=sampling, eos_id=EOS).stats
        for j, t in enumerate(texts)
    ]
for kind, runs in by_kind.items():
    pooled = SpeculativeStats.pooled(runs)  # α = all accepted / all examined drafts
    alpha = pooled.alpha
    print(f"{kind}: {len(runs)} prompts, α = {alpha:.3f}, "
          f"{pooled.mean_tokens_per_round:.2f} tokens per round "
          f"(E(α, 4) = {expected_tokens_per_round(alpha, 4):.2f})")

# %%
path = plot_per_position_acceptance(by_kind, FIGURES / "acceptance_code_vs_text.png",
                                    title="Acceptance per draft position: code vs free text "
                                          "(k = 4, T = 0.8)")
display(Image(filename=str(path)))

# %% [markdown]
# **What decides the gain** (article §8): the acceptance α (how alike the two models are on
# this kind of text), the draft's relative cost c, and what a (k+1)-position pass really
# costs. Not counted here but real in a serving system: managing temporary cache slots and
# candidate trees, and batching requests whose drafts are accepted to different lengths.

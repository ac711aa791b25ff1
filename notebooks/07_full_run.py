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
# # 07 · A full run, round by round
#
# *Article §5 and §11. Code: `reference/speculative.py` (`speculative_generate`,
# `RoundTrace`, `SpeculativeStats`, `speculative_round`), `lab/report.py`. Tests:
# `tests/unit/test_stats_and_trace.py`, `tests/unit/test_greedy_equivalence.py`, the oracle.*
#
# One round of speculative decoding, end to end:
#
# 1. start from the **committed** context;
# 2. the draft model guesses k tokens, one after another (`drafter.propose`);
# 3. the target scores all of them in **one** pass (`verification_pass`);
# 4. the longest accepted prefix is kept; at the first rejection a **correction** token is
#    drawn from the residual (or, if nothing was rejected, a **bonus** token from the last
#    row) (`verify`);
# 5. the caches commit the K/V of what was kept and roll back the rest (`commit`, then
#    `rollback`, on both caches).
#
# `speculative_round` in `reference/speculative.py` is exactly these steps; the loop,
# `speculative_generate`, repeats it and applies the stop rules.
#
# A round emits between 1 and k + 1 tokens for a single target call. Drafts after a rejected
# one are thrown away unseen — they were built on a token the target refused.

# %%
import os
import tempfile
from pathlib import Path

import numpy as np
from IPython.display import Image, display

from lab.bench import CODE_PROMPTS, timed
from lab.bundled import bundled_pair_available, load_bundled_pair
from lab.figures import (
    plot_accepted_histogram,
    plot_per_position_acceptance,
    plot_pipeline,
    plot_token_fates,
)
from lab.report import render_tokens, stats_table
from lab.standins import random_pair
from reference import ModelDrafter, SamplingParams, generate, speculative_generate
from reference.tokenizer import EOS, encode

FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))
target, draft = load_bundled_pair() if bundled_pair_available() else random_pair(seed=0)

# %%
prompt_text = CODE_PROMPTS[2]  # a Python class, the kind of text the pair was trained on
prompt = encode(prompt_text)
sampling = SamplingParams(temperature=0.8)
k = 4
result, seconds = timed(speculative_generate, target, ModelDrafter(draft), prompt, k=k,
                        max_new_tokens=120, rng=np.random.default_rng(0), sampling=sampling,
                        eos_id=EOS, trace=True)
trace = result.trace
print(f"{len(result.tokens)} tokens in {result.stats.rounds} rounds, {seconds:.2f} s\n")
print(prompt_text + render_tokens(trace, colour=False))
print("\n(plain = accepted draft, [x] = correction, {x} = bonus)")

# %% [markdown]
# ## 1. The pipeline, drawn from three real rounds
#
# Each row is one round of the run above: the end of the committed context, the k drafts
# with the probability q gave each, the verdicts with their acceptance probabilities
# a = min(1, p/q), what the round emits, and the target cache slots it wrote — kept or
# rolled back.

# %%
kinds = [r.token_kind for r in trace]
start = next((i for i in range(1, len(trace) - 2)
              if {"correction", "bonus"} <= set(kinds[i:i + 3])), 1)
path = plot_pipeline(trace, prompt, FIGURES / "pipeline.png",
                     rounds=range(start, min(start + 3, len(trace))))
display(Image(filename=str(path)))

# %% [markdown]
# ## 2. Every generated token, coloured by how it was produced

# %%
path = plot_token_fates(trace, prompt, FIGURES / "token_fates.png")
display(Image(filename=str(path)))

# %% [markdown]
# ## 3. Statistics
#
# * **acceptance rate** = accepted / drafted;
# * **α** = accepted / examined: drafts after a rejection are never examined, so they are left
#   out. This is the per-token acceptance of Leviathan et al.'s analysis (notebook 08);
# * **mean tokens per round** = emitted / target calls — the factor by which the number of
#   sequential target calls shrank;
# * **per-position acceptance** P(accept x_i | x_i examined), and the histogram of accepted
#   drafts per round.

# %%
print(stats_table(result.stats))

# %%
path = plot_accepted_histogram(result.stats.accepted_histogram, FIGURES / "accepted_histogram.png",
                               f"Drafts accepted per round (k = {k}, T = 0.8, one run)")
display(Image(filename=str(path)))
path = plot_per_position_acceptance({"this run": result.stats},
                                    FIGURES / "per_position_acceptance.png")
display(Image(filename=str(path)))

# %% [markdown]
# ## 4. Against plain decoding, on this machine
#
# The autoregressive baseline makes one target call per token. Speculative decoding makes
# one target call per round plus k small draft calls. One run each, so the ratio is rough;
# notebook 08 and `specdec bench` measure properly.

# %%
plain, plain_seconds = timed(generate, target, prompt, max_new_tokens=120,
                             rng=np.random.default_rng(0), sampling=sampling, eos_id=EOS)
print(f"autoregressive: {len(plain)} tokens, {len(plain)} target calls, "
      f"{len(plain) / plain_seconds:.0f} tokens/s")
print(f"speculative:    {len(result.tokens)} tokens, {result.stats.rounds} target calls, "
      f"{len(result.tokens) / seconds:.0f} tokens/s")
print("(different samples: equal laws, not equal text — the random numbers are used differently)")

# %% [markdown]
# **The three things to remember** (the article's summary, in our terms):
#
# 1. the draft proposes, the target decides: the output law is the target's (notebook 05);
# 2. the target runs in parallel over the candidate *positions*, not over independent
#    tokens: each row is still conditioned on the drafts before it (notebook 04);
# 3. both caches take temporary writes, commit the accepted prefix and roll back the rest
#    with a pointer (notebook 06).

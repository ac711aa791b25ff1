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
# # 04 · Verifying k drafts in one target pass
#
# *Article §3. Code: `reference/speculative.py` (`verification_pass`), `reference/model.py`.
# Tests: `tests/unit/test_model.py` (cached append == uncached), the oracle's loop family
# (a row taken from the wrong position changes the output law).*
#
# The target receives the drafts **as input**: one forward call over the last committed
# token followed by x₁ … x_k. Because of the causal mask, the output row at each position
# depends only on what came before it, so the k + 1 rows are exactly the k + 1 conditional
# distributions the target would have produced one step at a time:
#
# | output row | computed at the position of | conditioned on | judges |
# |---|---|---|---|
# | p₁ | the last context token | context | x₁ |
# | p₂ | x₁ | context, x₁ | x₂ |
# | … | … | … | … |
# | p_k | x_{k−1} | context, x₁ … x_{k−1} | x_k |
# | p_{k+1} | x_k | context, x₁ … x_k | nothing: the **bonus** row |
#
# The row that judges x_i sits one position **to the left** of x_i. Getting this offset
# wrong — scoring x_i with the row computed *at* x_i — is the most common bug in
# hand-written verifiers.
#
# This pass is the one of [Leviathan et al., 2023](../docs/references.md#leviathan2023) and
# [Chen et al., 2023](../docs/references.md#chen2023), and the bonus row is how both papers
# end a round where every draft passed. What the notebook adds is the check the papers leave
# implicit: that the rows of one pass equal k + 1 steps (section 3). The papers also assume
# the pass costs about one step; on this CPU it does not (notebook 01's v(T)).

# %%
import os
import tempfile
from pathlib import Path

import numpy as np
from IPython.display import Image, display

from reference import ModelDrafter, SamplingParams, probabilities, speculative_generate
from reference.speculative import verification_pass
from reference.tokenizer import EOS, decode, encode
from specdec.bundled import bundled_pair_available, load_bundled_pair
from specdec.figures import plot_verification
from specdec.machine import describe_machine, use_blas_threads
from specdec.report import describe_round, quoted
from specdec.standins import random_pair

FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))
use_blas_threads()  # the same BLAS threads in JupyterLab as in render.py (specdec/machine.py)
print(describe_machine().line())
target, draft = load_bundled_pair() if bundled_pair_available() else random_pair(seed=0)

# %% [markdown]
# ## 1. A real run, and one of its rounds
#
# We run the loop with a trace and pick a round in which some drafts were accepted and one
# was rejected, so that every case shows.

# %%
prompt = encode("def fibonacci(n):\n    if n < 2:\n        return n\n    ")
sampling = SamplingParams(temperature=0.8)
result = speculative_generate(target, ModelDrafter(draft), prompt, k=4, max_new_tokens=60,
                              rng=np.random.default_rng(0), sampling=sampling, eos_id=EOS,
                              trace=True)
sequence = np.concatenate([prompt, result.tokens])
candidates = [i for i, r in enumerate(result.trace)  # a rejection after some acceptances,
              if i > 0 and 0 < r.accepted < len(r.draft_tokens)  # on distinct tokens
              and len(set(r.draft_tokens.tolist())) == len(r.draft_tokens)]
n = candidates[0] if candidates else min(1, len(result.trace) - 1)
rnd = result.trace[n]
print(describe_round(n + 1, rnd))
print("context:", repr(decode(sequence[: rnd.context_len])))

# %%
path = plot_verification(rnd, FIGURES / "verification_rows.png",
                         last_context_token=int(sequence[rnd.context_len - 1]))
display(Image(filename=str(path)))

# %% [markdown]
# The left panel is the offset: the red arrow from output row p_i lands on the input one
# column to the right. The right panel shows p_i(x_j) for every row/candidate pair; `verify`
# only ever reads the boxed diagonal. Reading the diagonal one step down (p_{i+1}(x_i)) would
# judge each draft by what the target expects *after* it.

# %% [markdown]
# ## 2. Rebuild that round's rows by hand
#
# We put the committed context (all but its last token, as the loop does) in a fresh target
# cache, then call `verification_pass` — the very function the round uses — with its drafts.
# One forward pass over the catch-up token (`catch_up_tokens`: the committed token the cache
# has not seen) and the k drafts; its last k + 1 rows, turned into probabilities, are
# p₁ … p_{k+1}.

# %%
context = sequence[: rnd.context_len]
cache = target.new_cache()
target.forward(context[:-1], cache)
cache.commit(len(context) - 1)
p_rows, n_fed, h_rows = verification_pass(target, cache, context, rnd.draft_tokens, sampling)
print(f"fed {n_fed} catch-up token + {len(rnd.draft_tokens)} drafts in one call -> p rows "
      f"{p_rows.shape} (and their hidden states {h_rows.shape}); cache {cache}")
print("max |p_rows - trace.p_rows| =", float(np.abs(p_rows - rnd.p_rows).max()))
assert n_fed == 1 and len(p_rows) == len(rnd.draft_tokens) + 1, (
    f"expected 1 catch-up token and k + 1 = {len(rnd.draft_tokens) + 1} rows, "
    f"got {n_fed} catch-up tokens and {len(p_rows)} rows")

# %% [markdown]
# **k + 1 rows, not k: a slip in the article.** The article's §3 writes the verification
# product as `[k,H]@[H,H] → [k,H]` with k = 4, and lists p₁ … p₄. The pass above fed k + 1
# rows, one catch-up token and the k drafts, and it has to. Its first input is the token
# the previous round ended with, the correction or the bonus. That token was *sampled* from
# a target row; it was never *fed* to the target, so no cache holds its K/V and no row
# conditioned on it exists yet. The article says so itself in §6: the replacement token's
# K/V is not in the committed prefix, and a later step has to compute it. The verification
# pass is that later step: it feeds the pending token first, and the row computed at its
# position is p₁, the row that judges x₁. (§3 allows that p₁ might be "reused" from the
# previous round; but the last row the previous pass computed sits one position earlier,
# and it was already spent choosing the pending token.) Feeding x₁ … x_k after it gives
# p₂ … p_{k+1}, the last one being the bonus row. So the product is `[k+1,H]@[H,H]`. In
# round 1 the prompt's last token plays the pending token's part: the prefill caches every
# prompt token but that one.
# The rest of §3 and §7 stands as written, with one row more per pass (notebook 01 times
# passes of 1 to 8 rows on this machine).

# %% [markdown]
# ## 3. One pass equals k + 1 one-token steps
#
# The same rows, computed the slow way: feed one token, read its row, commit, repeat. This is
# what autoregressive decoding would have done — k + 1 sequential target calls instead of one.

# %%
cache.rollback()
steps = []
for token in np.concatenate([context[-1:], rnd.draft_tokens]):
    steps.append(probabilities(target.forward([token], cache)[-1], sampling))
    cache.commit(1)
steps = np.stack(steps)
print("one pass vs", len(steps), "steps: max |difference| =",
      float(np.abs(steps - p_rows).max()))
assert np.abs(steps - p_rows).max() < 1e-5, (  # equal up to float32 rounding (below)
    f"expected the one-pass rows to equal the step-by-step rows to 1e-5, max difference "
    f"{np.abs(steps - p_rows).max():.1e}")

# %% [markdown]
# **Equal, up to float32 rounding.** Mathematically the rows are identical; numerically they
# differ in the 7th digit (a few 1e-7, the spacing of float32 numbers near 1 is 1.2e-7). A
# one-row product and a five-row product of the same weights add the same terms in a
# different order — BLAS splits and vectorises the sums differently for different shapes —
# and float32 addition is not associative. So "the same rows" means "the same distribution
# to float32 precision"; the oracle (notebook 09) measures that this never moves an output
# law, and the greedy runs of notebook 07 are token for token equal to `generate`.

# %% [markdown]
# ## 4. The offset, in numbers
#
# For each draft: the probability the right row gives it, and what a verifier that is off by
# one position would have used instead.

# %%
k = len(rnd.draft_tokens)
for i, x in enumerate(rnd.draft_tokens):
    right, wrong = p_rows[i, x], p_rows[i + 1, x]
    print(f"x{i + 1} = {quoted(x):6}  p_{i + 1}(x) = {right:.3f}  (right row)   "
          f"p_{i + 2}(x) = {wrong:.3f}  (off by one)   q_{i + 1}(x) = {rnd.q_rows[i, x]:.3f}")

# %% [markdown]
# **Parallel, but still causal.** The k + 1 positions are computed together, yet each row
# depends only on its own prefix. This is why the target can check a whole guessed
# continuation in one call — and why a draft after a rejected one is worthless: its row was
# conditioned on a token the target did not accept. That is notebook 05.

# %% [markdown]
# ## Check yourself
#
# Answer from this notebook alone, then compare with a neighbour:
#
# 1. Which output row judges draft x_i, and at which input position is it computed? What
#    is the most common bug here?
# 2. Why does the verification pass feed k + 1 tokens rather than k (the slip in the
#    article's §3)?
# 3. What is the bonus row, and when is it used?
# 4. The rows of one pass and of k + 1 one-token steps differ by a few 1e-7. Where does
#    the difference come from?
# 5. Why is a draft that comes after a rejected one worthless, although the pass computed
#    its row?
#
# (The answers are kept apart, for instructors: `specdec course DIR --instructor BUNDLE`
# writes them beside the students' copy; docs/teaching.md.)

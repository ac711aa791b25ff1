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
# # 02 · The transformer and its KV cache
#
# *Article §3 and §6 (the mechanics underneath). Code: `reference/model.py`
# (`GPT.forward`, `causal_mask`), `reference/kv_cache.py`. Tests: `tests/unit/test_model.py`,
# `tests/unit/test_kv_cache.py`.*
#
# Verification needs the target's distribution at **every** new position, not just the last
# one, and it needs them on top of a cache that already holds the committed context. (Scoring
# all k drafts in one pass is what makes speculative decoding pay, in
# [Leviathan et al., 2023](../docs/references.md#leviathan2023) and
# [Chen et al., 2023](../docs/references.md#chen2023); the papers take the cache for granted,
# and this notebook builds it: where they write to it and forget, we show each slot.) This
# notebook walks through the three calls the speculative loop makes — a prefill, a one-token
# decode step, a k-token append — and checks each against a plain forward pass with no cache.

# %%
import os
import tempfile
from pathlib import Path

import numpy as np
from IPython.display import Image, display

from reference.model import causal_mask
from reference.tokenizer import decode, encode
from specdec.bundled import bundled_pair_available, load_bundled_pair
from specdec.figures import plot_causal_mask
from specdec.machine import describe_machine, use_blas_threads
from specdec.report import quoted
from specdec.standins import random_pair

use_blas_threads()  # one BLAS thread unless $SPECDEC_BLAS_THREADS says otherwise
print("machine:", describe_machine().line())
FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))
target, _ = load_bundled_pair() if bundled_pair_available() else random_pair(seed=0)
print(target.config)

# %% [markdown]
# ## 1. A forward pass returns one row of logits per input position
#
# `GPT.forward(tokens)` maps `[T]` token ids to `[T, V]` logits. Row i is the model's opinion
# about the token that comes **after** `tokens[i]`. With no cache, every position attends to
# the positions before it inside this same call.

# %%
prompt = encode("def fibonacci(n):\n    if n < 2:\n        return n\n    ")
logits = target.forward(prompt)  # [T, V]
print("tokens", prompt.shape, "-> logits", logits.shape)
for i in (len(prompt) - 3, len(prompt) - 2, len(prompt) - 1):
    best = int(np.argmax(logits[i]))
    seen = decode(prompt[i - 11 : i + 1])
    print(f"row {i:2d}, after …{seen!r:18}: most likely next {quoted(best)}")

# %% [markdown]
# ## 2. Prefill: the prompt's K/V go into the cache
#
# A cache is created per model with preallocated slots. A forward call with a cache writes
# the K/V of its new positions after the last written slot and marks them **temporary**;
# `commit(n)` makes the first n of them permanent (in every layer at once — there is one
# pointer), `rollback()` forgets the rest. Nothing is ever copied.

# %%
cache = target.new_cache()
prefill = target.forward(prompt, cache)
print("after forward:", cache)
cache.commit(len(prompt))
print("after commit: ", cache)
print("prefill rows equal the uncached rows:", np.allclose(prefill, logits, atol=1e-4))

# %% [markdown]
# ## 3. One decode step: one new position, every old one read from the cache
#
# The next token is fed alone. Its query attends to the cached keys of the prompt plus its
# own key; the result must equal the last row of an uncached pass over prompt + token.

# %%
next_token = int(np.argmax(prefill[-1]))
step = target.forward([next_token], cache)  # [1, V]
cache.commit(1)
full = target.forward(np.append(prompt, next_token))  # no cache: recompute everything
print(f"fed {quoted(next_token)}; cache now {cache}")
print("max |cached - uncached| on that row:", float(np.abs(step[-1] - full[-1]).max()))

# %% [markdown]
# ## 4. A k-token append: the causal mask with an offset
#
# Verification appends several tokens in one call. They sit at absolute positions
# `start … start + T − 1`, where `start` is the number of cached slots. New position i may
# attend to every cached slot and to new positions 0 … i — so the mask is the usual lower
# triangle **shifted right by the cache length**. `causal_mask(T, S)` builds it with
# S = start + T. Forgetting the shift (using an un-offset `T × T` triangle) would let the
# first new token see no history at all — a classic off-by-one in cached implementations.

# %%
print(causal_mask(3, 7).astype(int))  # 4 cached slots, 3 new positions
path = plot_causal_mask(4, 12, FIGURES / "causal_mask_offset.png")
display(Image(filename=str(path)))

# %%
guess = encode("etur")  # four more tokens in one call, as verification appends drafts
committed = cache.length
rows = target.forward(guess, cache)  # [4, V], written as temporary slots
print("after the append:", cache)
reference_rows = target.forward(np.concatenate([prompt, [next_token], guess]))[-len(guess):]
print("max |append rows - uncached rows|:", float(np.abs(rows - reference_rows).max()))

# %% [markdown]
# ## 5. Commit part of it, roll back the rest — and check the invariant
#
# Say the first two appended tokens were accepted. `commit(2)` makes their slots permanent;
# the other two are still temporary until `rollback()` drops them by moving the pointer —
# exactly how every speculative round ends. The property every test of the project leans on:
# **the committed slots equal what a fresh prefill of the committed tokens produces.**

# %%
cache.commit(2)
print("after commit(2):", cache)
cache.rollback()
print("after rollback():", cache)
tokens_now = np.concatenate([prompt, [next_token], guess[:2]])
fresh = target.new_cache()
target.forward(tokens_now, fresh)
fresh.commit(len(tokens_now))
k_cached, v_cached = cache.committed()
k_fresh, v_fresh = fresh.committed()
print("committed tokens:", repr(decode(tokens_now)))
print("max |K - K_fresh|:", float(np.abs(k_cached - k_fresh).max()),
      " max |V - V_fresh|:", float(np.abs(v_cached - v_fresh).max()))
gap = float(np.abs(k_cached - k_fresh).max())
assert cache.length == committed + 2 and gap < 1e-4, (
    f"expected {committed + 2} committed slots whose keys equal a fresh prefill's; "
    f"got {cache.length} slots, largest key difference {gap:.2e}"
)

# %% [markdown]
# The differences are float32 rounding: the same numbers computed in a different grouping.
# `tests/unit/test_kv_cache.py` checks this invariant after every round of real runs and
# under random sequences of appends, commits and rollbacks.
#
# **Next:** notebook 03 uses a second, much smaller model with its own cache to propose
# the tokens we just appended by hand.

# %% [markdown]
# ## Exercise: a cache with a commit pointer
#
# Write the cache yourself: [`notebooks/exercises/my_cache.py`](exercises/my_cache.py) holds
# the contract of `SlotCache` (one layer: temporary writes past the committed rows,
# `commit(n)` keeps the first n of them, `rollback()` forgets the rest, and a refused write
# changes nothing). Grade it from the repository root, in about a second:
#
# ```bash
# .venv/bin/specdec grade notebooks/exercises/my_cache.py:SlotCache
# ```
#
# The grader drives your class through scripts of calls and names the first row that lands
# in the wrong slot. `specdec grade --list` shows every exercise of the course.

# %% [markdown]
# ## Check yourself
#
# Answer from this notebook alone, then compare with a neighbour:
#
# 1. `GPT.forward` maps `[T]` tokens to `[T, V]` logits. What does row i predict, and why
#    does verification need every row, not only the last?
# 2. What do `commit(n)` and `rollback()` do to a cache, and why is nothing copied?
# 3. A k-token append sits at positions start … start + T − 1. Which key slots may new
#    position i read, and what goes wrong with an un-offset `T × T` triangle?
# 4. State the invariant that every test of the project leans on.
# 5. Cached and uncached rows differ in the seventh digit. Why, and why is that not a bug?
#
# (The answers are kept apart, for instructors: `specdec course DIR --instructor BUNDLE`
# writes them beside the students' copy; docs/teaching.md.)

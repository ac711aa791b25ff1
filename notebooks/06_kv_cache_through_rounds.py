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
# # 06 · Two KV caches through many rounds: write, commit, roll back
#
# *Article §6. Code: `reference/kv_cache.py`, `reference/drafters.py` (`ModelDrafter`),
# `reference/speculative.py` (`speculative_round`). Tests: `tests/unit/test_kv_cache.py`
# (the invariant after every round, and a property test), the oracle's rollback-off-by-one
# variants. Text:
# `docs/kv-cache.md`.*
#
# A round writes K/V for positions that may not survive: the target writes the drafts while
# verifying them, the draft model writes its own guesses while making them. Nothing can be
# made permanent before the verdict. Each model therefore keeps **its own** cache (the
# parameters differ, so the K/V differ) with the same discipline:
#
# * new positions are written after the committed ones as **temporary** slots;
# * after the verdict, `commit(n)` keeps the first n temporary slots in every layer at once;
# * `rollback()` drops the rest by moving a pointer — nothing is copied or cleared;
#   `speculative_round` ends with these two calls on both caches;
# * the new token of the round (correction or bonus) has **no K/V anywhere yet**: the next
#   round feeds it first, to both models, in the pass it needs anyway.
#
# [Leviathan et al., 2023](../docs/references.md#leviathan2023) and
# [Chen et al., 2023](../docs/references.md#chen2023) state the round without its caches;
# this bookkeeping is the lab's own, written out because a pointer one slot off can go
# unnoticed in the text it writes (the oracle's cache variants are there to catch it).
#
# Every round of the trace records, for each cache, the triple
# (committed before, written end, committed after).

# %%
import os
import tempfile
from pathlib import Path

import numpy as np
from IPython.display import Image, display

from reference import ModelDrafter, SamplingParams, probabilities, speculative_generate
from reference.tokenizer import EOS, encode
from specdec.bundled import bundled_pair_available, load_bundled_pair
from specdec.explorer import explore_round, show_round
from specdec.figures import plot_cache_rounds
from specdec.machine import describe_machine, use_blas_threads
from specdec.report import describe_round
from specdec.standins import random_pair

use_blas_threads()  # the same BLAS threads in JupyterLab as in render.py (specdec/machine.py)
print(describe_machine().line())
FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))
target, draft = load_bundled_pair() if bundled_pair_available() else random_pair(seed=0)

# %%
prompt = encode("class Stack:\n    def push(self, item):\n        ")
sampling = SamplingParams(temperature=0.8)
drafter = ModelDrafter(draft)
result = speculative_generate(target, drafter, prompt, k=4, max_new_tokens=60,
                              rng=np.random.default_rng(7), sampling=sampling, eos_id=EOS,
                              trace=True)
trace = result.trace
sequence = np.concatenate([prompt, result.tokens])
for n, r in enumerate(trace[:4], start=1):
    print(describe_round(n, r))

# %% [markdown]
# ## 1. The picture
#
# One row per round, both caches. Grey: committed earlier. Green: written this round and
# kept. Red, hatched: written this round and rolled back. Orange dashed outline: positions
# whose token is already decided but whose K/V is not in this cache yet — the next round
# writes them first.

# %%
first = 1 if len(trace) > 9 else 0
path = plot_cache_rounds(trace, prompt, FIGURES / "kv_cache_rounds.png",
                         first_round=first, n_rounds=8)
display(Image(filename=str(path)))

# %% [markdown]
# ## 2. The bookkeeping, checked on every round
#
# With `c` = number of committed tokens before the round, `k_r` = drafts in the round and
# `n` = drafts accepted:
#
# | | committed before | written end | committed after |
# |---|---|---|---|
# | target | c − 1 (round 1 too: the prefill) | c + k_r | c + n |
# | draft | whatever it held | c + k_r − 1 (x_k is never fed) | c + min(n, k_r − 1) |
#
# Before round 1 the prefill cached the prompt minus its last token, so the target starts
# every round, the first included, at c − 1.
#
# The target's "after" is c + n: the last context token and the accepted drafts. The new
# token, at position c + n, is uncached. The draft keeps one token fewer when all drafts
# were accepted — it never fed its own x_k — so next round it feeds **two** tokens: x_k and
# the bonus. That is the *catch-up*; both models simply feed `catch_up_tokens(cache,
# context)`, the committed tokens their cache has not seen (`context[cache.length:]`).

# %%
catch_ups = 0
for r in trace:
    c, k_r, n = r.context_len, len(r.draft_tokens), r.accepted
    t_before, t_end, t_after = r.target_cache
    d_before, d_end, d_after = r.draft_cache
    assert (t_before, t_end, t_after) == (c - 1, c + k_r, c + n), (
        f"target cache: expected {(c - 1, c + k_r, c + n)}, got {(t_before, t_end, t_after)}")
    if k_r == 0:  # a last round with room for one token only: nothing drafted, draft untouched
        assert d_before == d_end == d_after, (
            f"expected an untouched draft cache, got {(d_before, d_end, d_after)}")
        continue
    assert (d_end, d_after) == (c + k_r - 1, c + min(n, k_r - 1)), (
        f"draft cache: expected end, after {(c + k_r - 1, c + min(n, k_r - 1))}, "
        f"got {(d_end, d_after)}")
    catch_ups += (c - d_before) == 2
print(f"{len(trace)} rounds: every pointer as in the table; the draft caught up two tokens "
      f"{catch_ups} times (after a round where all drafts were accepted)")

# %% [markdown]
# ## 3. Were the caches right? The rows say so
#
# If a cache held a wrong history — one slot too many after a rollback, say — the rows
# computed on top of it would differ from the model's true conditional distributions. So we
# recompute every round's p and q rows **without any cache**, from the committed tokens plus
# the drafts, and compare with what the loop used.

# %%
worst_p = worst_q = 0.0
for r in trace:
    k_r = len(r.draft_tokens)
    tokens = np.concatenate([sequence[: r.context_len], r.draft_tokens])
    p_true = probabilities(target.forward(tokens)[-(k_r + 1):], sampling)
    worst_p = max(worst_p, float(np.abs(p_true - r.p_rows).max()))
    if k_r:
        q_true = probabilities(draft.forward(tokens[:-1])[-k_r:], sampling)
        worst_q = max(worst_q, float(np.abs(q_true - r.q_rows).max()))
print(f"max |p_cached - p_uncached| over all rounds: {worst_p:.1e}")
print(f"max |q_cached - q_uncached| over all rounds: {worst_q:.1e}")

# %% [markdown]
# And the invariant itself, on the draft cache the loop leaves behind: its committed slots
# equal a fresh prefill of the tokens it claims to hold.

# %%
held = sequence[: drafter.cache.length]
fresh = draft.new_cache()
draft.forward(held, fresh)
fresh.commit(len(held))
k_loop, v_loop = drafter.cache.committed()
k_fresh, v_fresh = fresh.committed()
print(f"draft cache holds {len(held)} of {len(sequence)} committed tokens; "
      f"max |K diff| {np.abs(k_loop - k_fresh).max():.1e}, max |V diff| "
      f"{np.abs(v_loop - v_fresh).max():.1e}")

# %% [markdown]
# **Why a pointer, not a copy.** Rolling back is `pending = 0`; committing is
# `length += n`. The rejected slots still hold stale numbers, and they are harmless: attention
# reads slots `[0, end)` only, and the next write overwrites them. One pointer for all layers
# means the commit boundary cannot differ between layers. Tree drafts (several branches
# verified at once) need one more step: the accepted path's slots are scattered among its
# rejected siblings', so before the commit they are gathered into a contiguous run right
# after the committed slots. `compact` in `reference/tree/compaction.py` does that copy, in every
# layer at once; notebook 11 (§4) runs it on a real round. A chain, as here, never needs
# it: its accepted drafts already sit first among the temporary slots.

# %% [markdown]
# ## 4. One round, step by step
#
# The same run once more, its verify keeping a copy of the random generator's state as it
# starts: from that copy `specdec/explorer.py` draws the very uniforms u that verify drew
# (one per examined position, then one for the residual or bonus token), and refuses to go
# on unless they give the round's own verdict. Below is the run's first round that accepts
# some drafts and rejects one. **Next** drafts, verifies, settles each position (u against
# min(1, p/q)), draws the residual's token, then commits and rolls back both caches: watch
# the two pointers. In JupyterLab this is a widget (the `notebook` extra installs
# anywidget); elsewhere, as on the course website, the same page in a frame. The repository
# keeps it as a page of its own too, opened from disk: `docs/explorer/round.html`.

# %%
explored = explore_round(target, draft, "class Stack:\n    def push(self, item):\n        ",
                         k=4, seed=7, temperature=0.8, max_new_tokens=60)
n = explored["meta"]["round"]
r = trace[n - 1]  # the round as the run above traced it: the explorer shows the same one
shown = (explored["meta"]["accepted"], explored["meta"]["token"])
assert shown == (r.accepted, r.token), (
    f"the explorer's round {n} has (accepted, token) {shown}; the run traced "
    f"{(r.accepted, r.token)}")
print(describe_round(n, r))
show_round(explored)

# %% [markdown]
# ## Check yourself
#
# Answer from this notebook alone, then compare with a neighbour:
#
# 1. Why does each model keep a cache of its own, and why can nothing be made permanent
#    before the verdict?
# 2. With c committed tokens before a round, k_r drafts and n of them accepted: how long
#    is the target's committed prefix after the round, and the draft's? Why does the draft
#    keep one token fewer when every draft was accepted?
# 3. Which token is drawn with an orange dashed outline, and when does its K/V get
#    written?
# 4. How does the notebook check that the caches were right without reading the caches'
#    slots directly?
# 5. Rollback moves a pointer and leaves stale numbers in the slots. Why are they
#    harmless? What extra step do tree drafts need?
#
# (The answers are kept apart, for instructors: `specdec course DIR --instructor BUNDLE`
# writes them beside the students' copy; docs/teaching.md.)

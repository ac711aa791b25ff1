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
# # 13 · Ragged batches: B sequences, one verification pass per round
#
# *Article §8 (among what eats into the speedup: "the different candidate lengths of
# different requests under dynamic batching"). Code: `reference/batch.py`
# (`speculative_generate_batch`, `batched_round`, `batched_verification_pass`,
# `batched_forward`, `BatchKVCache`, `batch_attention_mask`), `specdec/figures/batch.py`.
# Tests: `tests/unit/test_batch.py`, `tests/distribution/test_batch_law.py`,
# `tests/twin/test_twin_batch.py`. Text: `docs/batch.md`.*
#
# A server decodes many requests at once: one target forward per round serves all of them.
# Speculative decoding makes that awkward, because the sequences of a batch stop agreeing
# on anything after the first round. Their prompts have different lengths; each round each
# sequence accepts its own number of drafts, so the committed lengths drift apart; near
# the length limit a sequence drafts fewer tokens; and one sequence ends (EOS, limit) while
# the others go on. The rows of one verification pass therefore start at different slots
# and hold different numbers of tokens: a **ragged** batch.
#
# Serving engines batch this way: [Orca](../docs/references.md#orca2022) schedules a batch
# one iteration at a time and handles attention per request, and
# [vLLM](../docs/references.md#vllm2023) keeps each request's cache in blocks; neither paper
# is about speculation, whose per-row accepted counts make the lengths drift every round.
# `reference/batch.py` keeps it plain: right-pad every row to the longest, give each row its
# own commit pointer, positions and mask (the lab's choice, the easiest to read; those
# engines avoid the padding, docs/batch.md says how). Here we run it on the bundled pair and look at
# what each row did, what one batched pass computes, what it costs on this machine, and
# that every sequence still gets exactly what it would get alone.

# %%
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from IPython.display import Image, display

from reference import ModelDrafter, SamplingParams, speculative_generate
from reference.batch import (
    batch_attention_mask,
    batched_forward,
    batched_prefill,
    batched_round,
    check_batch_inputs,
    new_batch_cache,
    pad_right,
    record_rounds,
    speculative_generate_batch,
)
from reference.sampling import GREEDY
from reference.speculative import Run, RunSetup
from reference.tokenizer import EOS, encode
from specdec.bundled import bundled_pair_available, load_bundled_pair
from specdec.figures import plot_batch_acceptance, plot_batch_pass
from specdec.machine import describe_machine, use_blas_threads
from specdec.measure.bench import CODE_PROMPTS
from specdec.report import quoted
from specdec.standins import random_pair

use_blas_threads()  # the same BLAS threads in JupyterLab as in render.py (specdec/machine.py)
print(describe_machine().line())
FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))
target, draft = load_bundled_pair() if bundled_pair_available() else random_pair(seed=0)

# %% [markdown]
# ## 1. A real batch, round by round
#
# Four code prompts of different lengths, T = 0.8, k = 4, 32 new tokens each. We run the
# loop `speculative_generate_batch` runs after its input checks, written out: a `Run` per
# sequence (the single loop's bookkeeping: its stop rules, statistics and trace) and the
# real `batched_round`, plus one line that writes down where each row's new positions
# began. Nothing the loop computes is altered.

# %%
K, MAX_NEW = 4, 32
PROMPTS = [encode(text) for text in CODE_PROMPTS]
ROWS = "ABCD"  # a name per sequence


def run_recorded(prompts, sampling, seed, max_new_tokens=MAX_NEW):
    """The loop of `speculative_generate_batch` (reference/batch.py), written out, each pass
    written down. -> (one SpeculativeResult per prompt, passes [(start [B], rounds [B])],
    the target's BatchKVCache as the loop left it)"""
    drafters = [ModelDrafter(draft) for _ in prompts]
    rng = np.random.default_rng(seed)
    asked = RunSetup(k=K, max_new_tokens=max_new_tokens, rng=rng, sampling=sampling,
                     eos_id=EOS)  # the loop's keywords, gathered as the loop gathers them
    checked, setup = check_batch_inputs(target, drafters, prompts, asked)
    cache = new_batch_cache(target, len(checked))
    batched_prefill(target, cache, drafters, checked)
    runs = [Run.of(prompt, setup) for prompt in checked]  # one per row
    passes = []
    while not all(run.finished for run in runs):
        k_rounds = [None if run.finished else run.next_k() for run in runs]
        start = cache.end.copy()  # [B]: the slot where each row's new positions begin
        rounds = batched_round(target, cache, drafters, [run.context for run in runs],
                               k_rounds, sampling, rng)
        passes.append((start, rounds))
        record_rounds(runs, rounds)
    return [run.result() for run in runs], passes, cache


results, passes, cache = run_recorded(PROMPTS, SamplingParams(temperature=0.8), seed=0)
print(f"{len(passes)} batched rounds (one target pass each); per row: drafts accepted / "
      f"drafted in each round, '·' once the row has finished\n")
print("row prompt  " + " ".join(f"{r + 1:>3d}" for r in range(len(passes)))
      + "   tokens rounds  stop")
for b, res in enumerate(results):
    s = res.stats
    cells = [f"{a}/{k}" if k != K else f"{a:>3d}"
             for a, k in zip(s.accepted_per_round, s.drafted_per_round, strict=True)]
    cells += ["  ·"] * (len(passes) - s.rounds)
    print(f"  {ROWS[b]}  {len(PROMPTS[b]):4d}   " + " ".join(f"{c:>3s}" for c in cells)
          + f"   {len(res.tokens):5d} {s.rounds:5d}   {s.stop_reason}")

# %% [markdown]
# Each row keeps its own count, and the rows finish at different rounds; a finished row
# rides along, feeding nothing, until the last one is done. (`a/k` marks a round where the
# row drafted fewer than 4 tokens: it had fewer than 5 tokens left to write.)
#
# The bookkeeping adds up, row by row: a round emits its accepted drafts plus one token
# (unless an EOS cuts it short); the loop made one pass per round, as many as its longest
# row needed, where four separate runs would have made one per row and round; and after
# the last round the target cache of each row holds every committed token but the last
# one, which, as in a single run, was sampled and never fed.

# %%
for b, res in enumerate(results):
    s = res.stats
    per_round = sum(a + 1 for a in s.accepted_per_round)
    cut_by_eos = s.stop_reason == "eos" and len(res.tokens) < per_round
    assert len(res.tokens) == per_round or cut_by_eos, (
        f"row {ROWS[b]}: expected accepted + 1 per round = {per_round} tokens, "
        f"got {len(res.tokens)} ({s.stop_reason})")
    recorded = [rounds[b].verification.accepted for _, rounds in passes if rounds[b] is not None]
    assert recorded == s.accepted_per_round, (
        f"row {ROWS[b]}: the passes recorded {recorded}, the statistics {s.accepted_per_round}")
    held = len(PROMPTS[b]) + len(res.tokens) - 1
    assert cache.length[b] == held and cache.pending[b] == 0, (
        f"row {ROWS[b]}: expected {held} committed slots and none temporary, got "
        f"{cache.length[b]} and {cache.pending[b]}")
n_rounds = [r.stats.rounds for r in results]
assert len(passes) == max(n_rounds), (
    f"expected one pass per round of the longest row ({max(n_rounds)}), got {len(passes)}")
print(f"target passes: {len(passes)} batched; {sum(n_rounds)} if each row ran alone "
      f"({' + '.join(map(str, n_rounds))})")
print(f"committed slots per row: {cache.length.tolist()} = prompt + tokens - 1 for each row")

# %% [markdown]
# And the slots are the right ones: row b's committed K/V equal a fresh prefill of row b's
# committed tokens alone (to float32 rounding, the only difference a batched product can
# make), the invariant of notebook 06, row by row.

# %%
worst = 0.0
for b, res in enumerate(results):
    tokens = np.concatenate([PROMPTS[b], res.tokens])[: cache.length[b]]
    fresh = target.new_cache()
    target.forward(tokens, fresh)
    fresh.commit(len(tokens))
    for mine, alone in zip(cache.row(b).committed(), fresh.committed(), strict=True):
        worst = max(worst, float(np.abs(mine - alone).max()))
print(f"max |K, V of the batch - K, V of a fresh single prefill| over all rows: {worst:.1e}")
assert worst < 1e-3, f"expected the batch's slots to equal single prefills, differ by {worst:.1e}"

# %%
labels = [f"{ROWS[b]} (prompt {len(p)})" for b, p in enumerate(PROMPTS)]
path = plot_batch_acceptance([r.stats.accepted_per_round for r in results],
                             [r.stats.drafted_per_round for r in results],
                             FIGURES / "batch_acceptance.png", row_labels=labels)
display(Image(filename=str(path)))

# %% [markdown]
# ## 2. One batched verification pass, row by row
#
# We pick the round whose rows differ most in how many tokens they feed (ties: the first).
# Each unfinished row feeds its catch-up token (the last round's correction or bonus, never
# fed before) and its k_b drafts: n_new = 1 + k_b. A finished row feeds nothing. The pass
# takes `tokens [B, T]`, right-padded to the longest row, and each row continues at its own
# slot `start[b]` (its committed length), with position ids start[b] + i.

# %%
def n_new_of(rounds):  # [B]: tokens each row fed to the pass (0: finished)
    return np.array([0 if r is None else r.n_catch_up + r.k for r in rounds])


chosen = max(range(len(passes)), key=lambda i: (len(set(n_new_of(passes[i][1]))), -i))
start, rounds = passes[chosen]
n_new = n_new_of(rounds)
T, S = int(n_new.max()), int((start + n_new).max())
print(f"round {chosen + 1}: tokens [B, T] = [{len(rounds)}, {T}], key slots S = {S}\n")
print("row  start  catch-up  drafts  n_new  fed (padded to T)                 positions")
for b, r in enumerate(rounds):
    if r is None:
        print(f"  {ROWS[b]}  {start[b]:5d}         –       –      0  "
              f"{'(finished: pad only)':33s} –")
        continue
    sequence = np.concatenate([PROMPTS[b], results[b].tokens])
    fed = np.concatenate([sequence[start[b] : start[b] + r.n_catch_up], r.draft.tokens])
    shown = [quoted(int(t)) for t in fed] + ["pad"] * (T - len(fed))
    positions = f"{start[b]}..{start[b] + n_new[b] - 1}"
    print(f"  {ROWS[b]}  {start[b]:5d}  {r.n_catch_up:8d}  {r.k:6d}  {n_new[b]:5d}  "
          f"{' '.join(shown):33s} {positions}")
    span = r.target_cache  # row b's target cache: committed before, written end, after
    assert (span.before, span.written) == (start[b], start[b] + n_new[b]), (
        f"row {ROWS[b]}: expected the pass to write slots {start[b]}..{start[b] + n_new[b]}, "
        f"the round says {span.before}..{span.written}")
    assert span.after == start[b] + r.n_catch_up + r.verification.accepted, (
        f"row {ROWS[b]}: expected to keep catch-up + {r.verification.accepted} accepted, "
        f"kept {span.after - start[b]}")

# %% [markdown]
# Each row's mask is the causal mask with that row's own offset, plus one more rule: only
# slots this row really wrote (`batch_attention_mask`). Position i of row b may read key
# slot j when j ≤ start[b] + i and j < start[b] + n_new[b]. The key dimension is S for
# every row, the longest history in the batch, finished rows included (here a finished row
# may well be the one that sets S): the columns a row never wrote are masked, but still
# multiplied.

# %%
mask = batch_attention_mask(start, n_new, T, S)  # [B, T, S], the pass's own mask
for b in range(len(rounds)):
    if n_new[b] == 0:
        print(f"  {ROWS[b]}: finished; its {T} padding positions read slots "
              f"{'0..' + str(start[b] - 1) if start[b] else 'none'} and are thrown away")
        continue
    for i in range(T):
        seen = np.flatnonzero(mask[b, i])
        kind = f"(position {start[b] + i})" if i < n_new[b] else "(padding)"
        print(f"  {ROWS[b]} i = {i} {kind:14s} reads slots 0..{seen.max()}, "
              f"masks {S - len(seen)} of the {S} columns")
        rule = np.arange(S) <= start[b] + min(i, n_new[b] - 1)
        assert np.array_equal(mask[b, i], rule), (
            f"row {ROWS[b]}, i = {i}: expected slots 0..{start[b] + min(i, n_new[b] - 1)}, "
            f"got {seen.min()}..{seen.max()}")

# %%
path = plot_batch_pass(start, n_new, FIGURES / "batch_pass.png",
                       row_labels=[f"row {name}" + (" (finished)" if n == 0 else "")
                                   for name, n in zip(ROWS, n_new, strict=True)])
display(Image(filename=str(path)))

# %% [markdown]
# ## 3. What one batched pass buys, and what it costs
#
# **The cost, counted.** The pass computes B × T positions, of which only Σ n_new are real,
# and its attention spans B × S key columns, of which an unfinished row b needs only
# start[b] + n_new[b] (a finished row needs none). Over the whole run of section 1:

# %%
def needed_columns(start_r, n):  # key columns that serve an unfinished row
    return int(((start_r + n) * (n > 0)).sum())


real = padded = needed = spanned = 0
for start_r, rounds_r in passes:
    n = n_new_of(rounds_r)
    T_r, S_r = int(n.max()), int((start_r + n).max())
    real, padded = real + int(n.sum()), padded + len(n) * T_r
    needed, spanned = needed + needed_columns(start_r, n), spanned + len(n) * S_r
print(f"chosen round:  {int(n_new.sum())} real positions of {len(n_new) * T} computed; "
      f"{needed_columns(start, n_new)} needed key columns of {len(n_new) * S}")
print(f"all {len(passes)} rounds: {real} real positions of {padded} computed "
      f"({real / padded:.0%}); {needed} needed key columns of {spanned} "
      f"({needed / spanned:.0%})")

# %% [markdown]
# **What it buys, timed on this machine.** One batched pass over B rows against B one-row
# passes (`target.forward` on each row's own cache), each row feeding 1 + k = 5 tokens
# after its own history (the contexts section 1 ended with, shortened to different
# lengths). Medians of repeated passes, taken in turns, each pass rolled back. The ratio is
# a fact about this CPU, this BLAS and its thread count (the first line of the notebook),
# not a law: on a GPU, where a pass is priced in launches rather than arithmetic, the
# balance is different (notebook 12).

# %%
histories = [np.concatenate([PROMPTS[b], r.tokens])[: 40 + 20 * b]
             for b, r in enumerate(results)]
new_rows = [np.concatenate([h[-1:], r.tokens[:K]]) for h, r in zip(histories, results,
                                                                    strict=True)]
REPEATS = 7
print(f"{'B':>2s}  {'one batched pass':>16s}  {'B one-row passes':>16s}  {'ratio':>6s}   "
      "max |logits difference|")
for B in (1, 2, 4, 8):
    rows_h = [histories[b % 4][:-1] for b in range(B)]
    rows_new = [new_rows[b % 4] for b in range(B)]
    batch_cache = new_batch_cache(target, B)
    h_tokens, h_n = pad_right(rows_h)
    batched_forward(target, h_tokens, h_n, batch_cache)
    batch_cache.commit(h_n)
    singles = []
    for h in rows_h:
        c = target.new_cache()
        target.forward(h, c)
        c.commit(len(h))
        singles.append(c)
    tokens_b, n_b = pad_right(rows_new)
    seconds = {"batched": [], "singles": []}
    for repeat in range(REPEATS + 1):  # the first turn warms up and is not counted
        t0 = time.perf_counter()
        logits_batch = batched_forward(target, tokens_b, n_b, batch_cache)
        t1 = time.perf_counter()
        logits_single = [target.forward(x, c) for x, c in zip(rows_new, singles, strict=True)]
        t2 = time.perf_counter()
        batch_cache.rollback()
        for c in singles:
            c.rollback()
        if repeat:
            seconds["batched"].append(t1 - t0)
            seconds["singles"].append(t2 - t1)
    batched_s, singles_s = (float(np.median(v)) for v in seconds.values())
    diff = max(float(np.abs(logits_batch[b, : n_b[b]] - logits_single[b]).max())
               for b in range(B))
    print(f"{B:2d}  {batched_s * 1e3:13.1f} ms  {singles_s * 1e3:13.1f} ms  "
          f"{batched_s / singles_s:6.2f}   {diff:.1e}")
    assert diff < 1e-3, f"B = {B}: expected the batched rows to equal one-row passes, {diff:.1e}"

# %% [markdown]
# Read the ratio column as "what one batched pass costs, in units of B separate passes":
# below 1, batching saved time on this machine. At B = 1 there is nothing to share, and the
# ratio is the batched code's own bookkeeping (or noise). For larger B, one matrix product
# over B × T rows can cost a CPU less than B products over T rows (notebook 01 times the
# same effect for the rows of one pass, v(T)), and the Python around each call is paid once.
# Against that stand the padding and the masked columns counted above, which grow with the
# spread of the rows' lengths. The numbers are this machine's and say little about a GPU
# server. What holds on any machine is the last column: batching changes the order of
# float32 additions, nothing else.
#
# ## 4. Every sequence gets what it would get alone
#
# Each row is judged by the rule of
# [Leviathan et al., 2023](../docs/references.md#leviathan2023) on its own rows of p and q,
# so each sequence keeps the target's law whatever the others do.
# Under greedy decoding everything is deterministic, so the batch must write, for each
# prompt, exactly the tokens of a single `speculative_generate` run, accepting the same
# number of drafts in every round. And a batch of one reads the random generator in the
# same order as a single run, so even sampled, it reproduces that run from the same seed.

# %%
greedy_batch = speculative_generate_batch(
    target, [ModelDrafter(draft) for _ in PROMPTS], PROMPTS, k=K, max_new_tokens=24,
    rng=np.random.default_rng(0), sampling=GREEDY, eos_id=EOS)
for b, (prompt, res) in enumerate(zip(PROMPTS, greedy_batch, strict=True)):
    alone = speculative_generate(target, ModelDrafter(draft), prompt, k=K, max_new_tokens=24,
                                 rng=np.random.default_rng(0), sampling=GREEDY, eos_id=EOS)
    print(f"row {ROWS[b]}: {len(res.tokens)} tokens in {res.stats.rounds} rounds; "
          f"== alone: {res.tokens == alone.tokens}; same accepted per round: "
          f"{res.stats.accepted_per_round == alone.stats.accepted_per_round}")
    assert res.tokens == alone.tokens, (
        f"row {ROWS[b]}: expected the batch's greedy tokens to equal a single run's")
    assert res.stats.accepted_per_round == alone.stats.accepted_per_round, (
        f"row {ROWS[b]}: accepted per round {res.stats.accepted_per_round} in the batch, "
        f"{alone.stats.accepted_per_round} alone")

sampled = SamplingParams(temperature=0.8)
one = speculative_generate_batch(target, [ModelDrafter(draft)], PROMPTS[:1], k=K,
                                 max_new_tokens=24, rng=np.random.default_rng(3),
                                 sampling=sampled, eos_id=EOS)[0]
single = speculative_generate(target, ModelDrafter(draft), PROMPTS[0], k=K, max_new_tokens=24,
                              rng=np.random.default_rng(3), sampling=sampled, eos_id=EOS)
print(f"\nT = 0.8, a batch of one vs a single run, same seed: equal tokens "
      f"{one.tokens == single.tokens}")
assert one.tokens == single.tokens, "expected a batch of one to reproduce the single run"

# %% [markdown]
# With B > 1 and sampling, the rows share one generator, so a row's text depends on its
# neighbours (they take uniforms out of the stream in between); its *law* does not: each
# decision still reads fresh uniforms and depends only on that row's p and q.
# `tests/distribution/test_batch_law.py` checks each row's law against the target's, and
# that two rows are independent.
#
# **What to remember**
#
# 1. A ragged batch is per-row bookkeeping around one shared pass: row b has its own start,
#    its own n_new, its own position ids, its own mask and its own commit count.
# 2. The padded layout pays for the raggedness: B × T positions for Σ n_new real ones, and
#    S key columns for every row, set by the longest history in the batch.
# 3. None of this touches exactness: each row's logits, cache slots and greedy tokens are
#    those of the row run alone. Serving engines remove the padding (continuous batching,
#    paged KV memory, packed variable-length attention: `docs/batch.md`) without changing
#    the bookkeeping.

# %% [markdown]
# ## Exercise: one ragged pass, laid out by hand
#
# [`notebooks/exercises/my_batch.py`](exercises/my_batch.py) asks for
# `ragged_pass(start, n_new, T)`: the position of every column, the `[B, T, S]` mask with
# its padding and idle rows, and the slots each row writes, exactly as section 2 laid them
# out. Three families are graded apart, on hand-made and random ragged batches, in about a
# second:
#
# ```bash
# .venv/bin/specdec grade notebooks/exercises/my_batch.py:ragged_pass
# ```

# %% [markdown]
# ## Check yourself
#
# Answer from this notebook alone, then compare with a neighbour:
#
# 1. What does each row b of a ragged batch keep of its own?
# 2. Write the mask rule for position i of row b over key slot j.
# 3. What does the padded layout pay for the raggedness? Count the positions and the key
#    columns.
# 4. What does a finished row feed, and when does the loop stop?
# 5. The rows share one random generator. Why does a row's text depend on its neighbours
#    while its law does not?
#
# (The answers are kept apart, for instructors: `specdec course DIR --instructor BUNDLE`
# writes them beside the students' copy; docs/teaching.md.)

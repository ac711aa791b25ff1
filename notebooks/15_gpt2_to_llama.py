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
# # 15 · From GPT-2 to Llama: what the cache holds and where positions go
#
# *Article §6 (the KV cache), on the architecture most models now share. Code:
# `reference/llama.py` (`Llama`, `rope_tables`, `rotate`, `grouped_attention`),
# `reference/config.py` (`LlamaConfig`), `reference/speculative.py` (`speculative_round`).
# Tests: `tests/unit/test_llama.py`. Text: `docs/kv-cache.md` (its section on the Llama
# family).*
#
# Llama 3, Qwen 2.5, Mistral and SmolLM2 are all built like Llama: RMSNorm instead of
# LayerNorm, a gated MLP (SwiGLU), rotary position embeddings (RoPE,
# [Su et al., 2021](../docs/references.md#su2021)) and grouped-query attention (GQA,
# [Ainslie et al., 2023](../docs/references.md#ainslie2023)). The first two act on each
# position alone and change nothing in a speculative round. The last two touch exactly
# what the article's cache section is about:
# **where a position enters the model** (GPT-2 adds a learned table row to the token's
# embedding; Llama turns every query and key by an angle set by its position) and **how
# many heads the cache stores** (GPT-2 one key/value head per query head; GQA one per group
# of query heads). This notebook runs one round on each family with tiny random models and
# then looks at those two differences, ending with what GQA saves on real models.

# %%
import os
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image, display

from reference import GPT, GPTConfig, ModelDrafter, SamplingParams, init_params
from reference.config import LlamaConfig
from reference.llama import Llama, init_llama_params, rotate
from reference.model import causal_placement, split_heads
from reference.speculative import prefill, speculative_round
from specdec.figures.style import save
from specdec.machine import describe_machine, use_blas_threads
from specdec.standins import noisy_copy

use_blas_threads()  # the same BLAS threads in JupyterLab as in render.py (specdec/machine.py)
print(describe_machine().line())
FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))

# %% [markdown]
# ## 1. The same round on both families
#
# Two tiny random pairs of about the same size: a GPT-2 target with 4 heads, and a Llama
# target with 4 query heads sharing 2 key/value heads (GQA 2:1). Each draft is its target
# plus noise (`noisy_copy`), so it agrees often but not always. Both pairs get the same
# prompt, the same k = 4 and the same seed, and both run the one `speculative_round` of
# `reference/speculative.py`, the round of
# [Leviathan et al., 2023](../docs/references.md#leviathan2023): nothing in it knows which
# family it is driving. We
# try seeds until both rounds accept some drafts and reject one, so that the round shows a
# commit and a rollback.

# %%
V, N_CTX, K = 64, 64, 4
gpt_cfg = GPTConfig(n_vocab=V, n_ctx=N_CTX, n_embd=32, n_head=4, n_layer=2)
llama_cfg = LlamaConfig(n_vocab=V, n_ctx=N_CTX, n_embd=32, n_head=4, n_kv_head=2, n_layer=2,
                        n_inner=64, tie_word_embeddings=True)
gpt = GPT(gpt_cfg, init_params(gpt_cfg, np.random.default_rng(0), std=0.3))
llama = Llama(llama_cfg, init_llama_params(llama_cfg, np.random.default_rng(0), std=0.3))
PAIRS = {"GPT-2": (gpt, noisy_copy(gpt, noise=0.1, seed=1)),
         "Llama": (llama, noisy_copy(llama, noise=0.1, seed=1))}
PROMPT = np.random.default_rng(5).integers(0, V, 10)
SAMPLING = SamplingParams(temperature=1.0)


def one_round(family, seed):
    """Prefill, then one speculative round: -> (round, target cache, drafter)."""
    target, draft = PAIRS[family]
    cache, drafter = target.new_cache(), ModelDrafter(draft)
    prefill(target, cache, drafter, PROMPT)
    rnd = speculative_round(target, cache, drafter, PROMPT, K, SAMPLING,
                            np.random.default_rng(seed))
    return rnd, cache, drafter


def shows_a_rollback(rnd):
    return 0 < rnd.verification.accepted < rnd.k


seed = next(s for s in range(200)
            if all(shows_a_rollback(one_round(f, s)[0]) for f in PAIRS))
rounds = {family: one_round(family, seed) for family in PAIRS}
n_params = {f: sum(w.size for w in PAIRS[f][0].params.values()) for f in PAIRS}
print(f"seed {seed}; prompt of {len(PROMPT)} tokens, k = {K}\n")
print(f"{'':28s}{'GPT-2':>22s}{'Llama':>22s}")
rows = {
    "target parameters": lambda f, r, c, d: f"{n_params[f]:,}",
    "drafts": lambda f, r, c, d: " ".join(map(str, r.draft.tokens)),
    "accepted, then token": lambda f, r, c, d: f"{r.verification.accepted}, "
                                               f"{r.verification.token}",
    "target cache (before, end, after)": lambda f, r, c, d: str(tuple(vars(r.target_cache)
                                                                       .values())),
    "draft cache (before, end, after)": lambda f, r, c, d: str(tuple(vars(r.draft_cache)
                                                                      .values())),
    "target cache k [L, heads, N, hs]": lambda f, r, c, d: str(list(c.k.shape)),
}
for name, cell in rows.items():
    print(f"{name:34s}" + "".join(f"{cell(f, *rounds[f]):>22s}" for f in PAIRS))

c = len(PROMPT)
for family, (rnd, _, _) in rounds.items():
    n = rnd.verification.accepted
    span = tuple(vars(rnd.target_cache).values())
    assert span == (c - 1, c + K, c + n), (
        f"{family}: expected the target span (c - 1, c + k, c + n) = {(c - 1, c + K, c + n)}, "
        f"got {span}")
assert rounds["GPT-2"][1].k.shape[1] == gpt_cfg.n_head, "expected GPT-2's cache to hold nh heads"
assert rounds["Llama"][1].k.shape[1] == llama_cfg.n_kv_head, (
    "expected the Llama cache to hold n_kv_head heads")
assert 2 * rounds["Llama"][1].k.nbytes == rounds["GPT-2"][1].k.nbytes, (
    "expected the Llama cache to take half the GPT-2 cache's bytes")
ratio = n_params["Llama"] / n_params["GPT-2"]
assert 0.5 < ratio < 2, f"expected targets of similar size, got a ratio of {ratio:.2f}"

# %% [markdown]
# What is the same: in both families the round drafted k tokens, fed the catch-up token and
# the drafts to the target in one pass, accepted a prefix and drew one more token; both
# target caches went from c − 1 committed slots to c + k written and back to c + n
# committed (c the context length, n the accepted drafts), the bookkeeping of notebook 06.
# What differs is the last row of the table: the Llama cache has 2 key/value heads where
# GPT-2's has 4, half the bytes for the same tokens (section 3 puts real models' numbers on
# it), and the round never noticed.
#
# The other difference is where positions go. Both models embed the new tokens of a pass
# with `embed(tokens, at)`, where the placement `at` carries their positions. GPT-2 adds
# row `pos` of its learned table `wpe` to each token's embedding; Llama adds nothing there.

# %%
tokens = rounds["GPT-2"][0].draft.tokens
at = causal_placement(c, len(tokens))  # the drafts' positions in a pass after c slots
added_gpt = gpt.embed(tokens, at) - gpt.params["wte.weight"][tokens]
added_llama = llama.embed(tokens, at) - llama.params["model.embed_tokens.weight"][tokens]
print(f"positions of the pass: {at.positions.tolist()}")
print(f"GPT-2: embedding minus token embedding == wpe rows {at.positions.tolist()}: "
      f"{np.allclose(added_gpt, gpt.params['wpe.weight'][at.positions])}")
print(f"Llama: max |embedding minus token embedding| = {np.abs(added_llama).max():.1f}")
assert np.allclose(added_gpt, gpt.params["wpe.weight"][at.positions]), (
    "expected GPT-2 to add the wpe rows of the pass's positions")
assert not np.abs(added_llama).any(), "expected Llama to add nothing to the token embedding"

# %% [markdown]
# In Llama the same positions are used one step later, inside every block: each query and
# key is rotated by its position's angles (`rotate`, the rows `rope_tables` keeps, read
# like `wpe` rows), and the keys are cached **after** their rotation. The next section
# checks what that means for the slots of a round.
#
# ## 2. RoPE's positions in an append and after a rollback
#
# **An append of k tokens.** Layer 0's key of a token depends on that token alone (its
# embedding, RMSNorm, k_proj), before the rotation. So we can compute the unrotated keys
# ourselves, rotate them by any positions we like, and compare with what the model wrote
# into the cache. Here a fresh cache holds the prompt, and the model appends 4 tokens (the
# GPT-2 round's drafts) at slots end..end + 3.

# %%
def unrotated_keys(model, tokens):
    # tokens [T] -> layer 0's keys before RoPE, [nkv, T, hs]
    a = "model.layers.0."
    h = model.norm(model.embed(tokens, None), a + "input_layernorm")
    return split_heads(model.linear(h, a + "self_attn.k_proj"), model.config.n_kv_head)


def rotated(keys, positions):  # [nkv, T, hs] rotated for positions [T]
    return rotate(keys, llama.rope_cos[positions][None], llama.rope_sin[positions][None])


cache = llama.new_cache()
llama.forward(PROMPT, cache)
cache.commit(len(PROMPT))
end = cache.end
llama.forward(tokens, cache)  # the k-token append: temporary slots end..end + k - 1
written = cache.k[0, :, end : end + K]  # [nkv, k, hs], as the cache holds them
raw = unrotated_keys(llama, tokens)
for label, positions in [(f"end..end + k - 1 = {end}..{end + K - 1}", np.arange(end, end + K)),
                         ("0..k - 1 (as if alone)", np.arange(K)),
                         ("none (unrotated)", None)]:
    mine = raw if positions is None else rotated(raw, positions)
    print(f"rotated by {label:34s} max |cache - mine| = {np.abs(written - mine).max():.1e}")
at_end = np.abs(written - rotated(raw, np.arange(end, end + K))).max()
assert at_end < 1e-5, f"expected the keys rotated for slots {end}.., differ by {at_end:.1e}"
assert np.abs(written - rotated(raw, np.arange(K))).max() > 1e-2, (
    "expected keys rotated for positions 0.. to differ from the cache's")

# %% [markdown]
# The cache's keys match only the rotation by their own slots' positions: the append was
# placed at end..end + 3, exactly the numbers GPT-2 would have read its `wpe` rows at.
#
# **A rollback, then a new append.** Keep 2 of the 4 drafts and roll back the other two, as
# a round that rejects draft 3 does, then append 3 other tokens. They land in slots
# end + 2.., two of which held the rejected drafts' keys. Each slot's position is its index,
# whoever writes it: the new keys are rotated for the same positions the old ones were, and
# the kept keys are not touched at all.

# %%
kept_before = cache.k[0, :, : end + 2].copy()
cache.commit(2)
cache.rollback()
others = np.random.default_rng(11).integers(0, V, 3)
start = cache.end  # end + 2: the first rolled-back slot
assert start == end + 2, f"expected the append to start at slot {end + 2}, got {start}"
llama.forward(others, cache)
new = cache.k[0, :, start : start + 3]
slot_positions = np.arange(start, start + 3)
differs = np.abs(new - rotated(unrotated_keys(llama, others), slot_positions)).max()
print(f"new tokens at slots {slot_positions.tolist()}: max |cache - keys rotated for those "
      f"slots| = {differs:.1e}")
moved = float(np.abs(cache.k[0, :, : end + 2] - kept_before).max())
print(f"the {end + 2} kept slots changed by {moved}")
assert differs < 1e-5, f"expected keys rotated for their slots, differ by {differs:.1e}"
assert np.array_equal(cache.k[0, :, : end + 2], kept_before), "expected the kept keys untouched"

# %% [markdown]
# So a rollback needs no re-rotation: a committed key's position never changes, and a
# rejected slot is simply overwritten by a key rotated for that slot.
#
# **Only the distance counts.** Why is it fine to cache keys rotated by their absolute
# position? Because rotations compose: a query turned by m and a key turned by n give
# the dot product of the query turned by 0 and the key turned by n − m. The table below
# takes one random query and key of head width 8 and puts them at distance d = m − n
# (query after the key), shifted along the sequence by s.

# %%
q, k = np.random.default_rng(3).standard_normal((2, 1, 1, llama_cfg.head_size))
q, k = q.astype(np.float32), k.astype(np.float32)


def rotated_dot(m, n):  # q at position m, k at position n
    qm = rotate(q, llama.rope_cos[[m]][None], llama.rope_sin[[m]][None])
    kn = rotate(k, llama.rope_cos[[n]][None], llama.rope_sin[[n]][None])
    return float((qm * kn).sum())


SHIFTS, DISTANCES = (0, 7, 20, 50), range(6)
table = np.array([[rotated_dot(s + d, s) for s in SHIFTS] for d in DISTANCES])
print("  d  " + "".join(f"   s = {s:<3d}" for s in SHIFTS) + "   spread over s")
for d, row in zip(DISTANCES, table, strict=True):
    print(f"{d:3d}  " + "".join(f"{x:10.4f}" for x in row) + f"   {row.max() - row.min():.1e}")
spread = float((table.max(axis=1) - table.min(axis=1)).max())
across = float(np.ptp(table[:, 0]))
assert spread < 1e-4, f"expected q.k to depend on the distance only, spread {spread:.1e}"
assert across > 1000 * spread, f"expected the distance to matter: {across:.1e} vs {spread:.1e}"

# %% [markdown]
# Each row is one number, whatever the shift (the spread is float32 rounding), while the
# rows differ from each other: attention sees how far apart two tokens are, never where
# they are. That is what lets a key keep the rotation it was cached with for as long as it
# stays in the cache, and why a tree node needs nothing new either: its position is the
# committed length plus its depth, as GPT-2's would be (`Llama.rotary_attention` says so).
#
# **The invariant.** After section 1's round, every cache, both families, target and draft,
# holds in its committed slots exactly what a fresh prefill of the tokens it has committed
# would write (notebook 06's invariant).

# %%
def committed_tokens(rnd, n_slots):
    # the context, then the accepted drafts, cut to the cache's committed length
    return np.concatenate([PROMPT, rnd.draft.tokens[: rnd.verification.accepted]])[:n_slots]


worst = {}
for family, (rnd, cache_r, drafter_r) in rounds.items():
    target, draft = PAIRS[family]
    for role, model, held in [("target", target, cache_r), ("draft", draft, drafter_r.cache)]:
        fresh = model.new_cache()
        model.forward(committed_tokens(rnd, held.length), fresh)
        fresh.commit(held.length)
        worst[family, role] = max(float(np.abs(a - b).max()) for a, b in
                                  zip(held.committed(), fresh.committed(), strict=True))
        print(f"{family:6s} {role:6s}: {held.length} committed slots, max |K, V - fresh "
              f"prefill| = {worst[family, role]:.1e}")
assert max(worst.values()) < 1e-4, f"expected every cache to equal a fresh prefill: {worst}"

# %% [markdown]
# ## 3. What the cache costs per token, with and without GQA
#
# Every layer stores a key and a value for each key/value head, head_dim numbers each. In
# bfloat16 (2 bytes, how these models are published and usually served):
#
#     bytes per token = 2 (K and V) × layers × kv_heads × head_dim × 2 bytes
#
# The shapes below are copied from each model's `config.json` on the Hugging Face hub
# (meta-llama/Meta-Llama-3-8B, Qwen/Qwen2.5-1.5B, openai-community/gpt2 and
# openai-community/gpt2-medium), under the names those files use; head_dim is hidden size /
# heads for all four. GPT-2 was published in float32 and never had GQA: we price it in
# bfloat16 too, so that only the shapes differ. "Without GQA" gives every query head its
# own keys and values.

# %%
CONFIGS = {  # from config.json on the Hugging Face hub
    "Llama-3-8B": dict(num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                       hidden_size=4096),
    "Qwen2.5-1.5B": dict(num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                         hidden_size=1536),
    "GPT-2 small": dict(n_layer=12, n_head=12, n_embd=768, n_positions=1024),
    "GPT-2 medium": dict(n_layer=24, n_head=16, n_embd=1024, n_positions=1024),
}
BF16 = 2  # bytes per number


def cache_shape(cfg):  # -> (layers, query heads, kv heads, head_dim), either naming
    if "n_layer" in cfg:  # GPT-2's names: every head has its own K and V
        return cfg["n_layer"], cfg["n_head"], cfg["n_head"], cfg["n_embd"] // cfg["n_head"]
    heads = cfg["num_attention_heads"]
    return (cfg["num_hidden_layers"], heads, cfg["num_key_value_heads"],
            cfg["hidden_size"] // heads)


def bytes_per_token(layers, kv_heads, head_dim):
    return 2 * layers * kv_heads * head_dim * BF16


KIB, GIB = 2**10, 2**30
per_token = {}
print(f"{'model':14s} {'L':>3s} {'nh':>3s} {'nkv':>4s} {'hs':>4s}  {'KiB/token':>10s} "
      f"{'no GQA':>7s}   {'4k ctx':>9s} {'32k ctx':>9s}  {'32k, no GQA':>11s}")
for name, cfg in CONFIGS.items():
    L, nh, nkv, hs = cache_shape(cfg)
    with_gqa, without = bytes_per_token(L, nkv, hs), bytes_per_token(L, nh, hs)
    per_token[name] = (with_gqa, without)
    print(f"{name:14s} {L:3d} {nh:3d} {nkv:4d} {hs:4d}  {with_gqa / KIB:10.0f} "
          f"{without / KIB:7.0f}   {4096 * with_gqa / GIB:7.2f} GiB {32768 * with_gqa / GIB:5.2f} "
          f"GiB {32768 * without / GIB:8.2f} GiB")
    assert without * nkv == with_gqa * nh, f"{name}: expected GQA to divide by nh / nkv"

llama3, qwen, gpt2_small = (per_token[n][0] for n in ("Llama-3-8B", "Qwen2.5-1.5B",
                                                       "GPT-2 small"))
print(f"\nLlama-3-8B's cache per token: {llama3 / gpt2_small:.1f}× GPT-2 small's; "
      f"Qwen2.5-1.5B's: {qwen / gpt2_small:.2f}× GPT-2 small's")
assert qwen < gpt2_small < llama3, "expected Qwen2.5-1.5B < GPT-2 small < Llama-3-8B per token"

# %%
fig, ax = plt.subplots(figsize=(6.4, 3.2))
names = list(per_token)
x = np.arange(len(names))
ax.bar(x - 0.2, [per_token[n][1] / KIB for n in names], 0.4, color="#cfcfcf",
       label="without GQA (a K/V head per query head)")
ax.bar(x + 0.2, [per_token[n][0] / KIB for n in names], 0.4, color="#4a90d9",
       label="as published")
for xi, n in zip(x, names, strict=True):
    ax.text(xi + 0.2, per_token[n][0] / KIB, f"{per_token[n][0] / KIB:.0f}", ha="center",
            va="bottom", fontsize=8)
ax.set_xticks(x, names)
ax.set_ylabel("KV cache, KiB per token (bfloat16)")
ax.legend(frameon=False, fontsize=8)
ax.set_title("what one token costs in the cache")
display(Image(save(fig, FIGURES / "kv_bytes_per_token.png")))

# %% [markdown]
# GQA divides the cache by n_head / n_kv_head: 4 for Llama-3-8B, 6 for Qwen2.5-1.5B. At
# a 32k context that is the difference printed in the last two columns, per sequence: a
# server holds one such cache per request in its batch (how much of a GPU's memory that
# takes is the starting point of [vLLM](../docs/references.md#vllm2023)), and every decoding
# step reads it all, so a smaller cache means more requests per GPU and faster steps. And
# Qwen2.5-1.5B, by far the larger model, stores fewer bytes per token than GPT-2 small.
# (GPT-2 reads at most `n_positions` = 1024 positions: its 4k and 32k columns only say
# what its shape would cost.)
#
# For speculative decoding the cache matters twice: the target's cache is read by every
# verification pass, and the draft model keeps a cache of its own (notebook 06). A rollback
# costs nothing in either family: it moves a pointer, and with RoPE, as section 2 showed,
# no kept key needs to change.

# %% [markdown]
# ## Check yourself
#
# Answer from this notebook alone, then compare with a neighbour:
#
# 1. Which parts of a speculative round are the same for GPT-2 and Llama, and which two
#    things differ in what the round writes into the cache?
# 2. A Llama model appends k = 4 tokens to a cache whose end is slot 10. By which positions
#    are their keys rotated, and how would you check it from the cache alone?
# 3. A round keeps 2 of its 4 drafts and rolls back the rest. Which cached keys must be
#    rotated again, and why?
# 4. Compute the KV cache of one token for a model with 24 layers, 16 query heads, 4
#    key/value heads and head_dim 64, in bfloat16. How much smaller is it than without GQA?
#
# (The answers are kept apart, for instructors: `specdec course DIR --instructor BUNDLE`
# writes them beside the students' copy; docs/teaching.md.)

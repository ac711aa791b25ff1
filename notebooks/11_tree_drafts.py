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
# # 11 · Tree drafts: several guesses per position, one target pass
#
# *Article §10 (tree drafts). Code: `reference/tree/` (`Tree`, `TreeShape`,
# `ModelTreeDrafter`, `HeadsTreeDrafter`, `tree_verification_pass`, `verify_tree`,
# `verify_tree_law`, `sibling_rows`, `kept_slots`, `compact`, `tree_round`,
# `tree_speculative_generate`, `ancestor_mask`, `position_ids`), `specdec/figures/trees.py`.
# Tests: `tests/unit/test_tree.py` (every node's row equals the plain forward of its path;
# both caches equal a fresh prefill after each round), `tests/distribution/test_tree_law.py`
# (the exact law of every small tree, and the broken rules it catches),
# `tests/plots/test_tree_figures.py`. Text: `docs/algorithm.md`, "Tree drafts".*
#
# A chain draft makes one guess per position. When the first guess is wrong, the round
# ends there, even if the draft model's second choice was the right one. A **tree** keeps
# several guesses per position (siblings) and, under each of them, guesses for what follows
# (children). The target judges every node in **one** pass. The round then walks down from
# the root: at each node it tries the children in order and goes down into the **first** one
# that passes, each later sibling being judged against what is left of p after the earlier
# ones were refused. This is the token tree of SpecInfer
# ([Miao et al., 2024](../docs/references.md#specinfer2024)): one pass over every node with a
# mask that lets each node see only its ancestors ("tree attention"), and a walk that keeps
# the output's law the target's (their multi-step speculative sampling; section 6 checks it
# exactly here). It does not pick the longest branch the target would accept: that is
# Medusa's rule ([Cai et al., 2024](../docs/references.md#medusa2024)), and it is not exact
# (section 7 shows a rule of that family drifting from the target's law). The trees here
# have a fixed shape; EAGLE-2 ([Li et al., 2024](../docs/references.md#eagle2-2024)) grows a
# different one each round from the drafter's confidence (notebook 14).
#
# Three things have to change compared with a chain, and this notebook shows each of them
# on one real round of the bundled pair:
#
# 1. the pass: a node must see its own ancestors and nothing else (section 2);
# 2. the acceptance: siblings are tried one after another, and each faces what is left of p
#    after the earlier ones were refused (section 3);
# 3. the cache: the accepted path's K/V are scattered over the tree's slots and have to be
#    gathered (section 4).
#
# Section 5 asks whether a tree beats a chain of the same size here; section 6 checks
# exactness; section 7 contrasts a lossy rule; section 8 explains why the papers' ranking of
# trees over chains does not hold on this CPU, and predicts where it returns.

# %%
import os
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image, display

from reference import HeadsDrafter, SamplingParams, generate, probabilities
from reference.sampling import GREEDY
from reference.speculative import ACCEPTED, REJECTED, prefill
from reference.tokenizer import decode, encode
from reference.tree import (
    POINT,
    WITHOUT_REPLACEMENT,
    HeadsTreeDrafter,
    ModelTreeDrafter,
    TreeShape,
    ancestor_mask,
    compact,
    kept_slots,
    position_ids,
    sibling_rows,
    target_room,
    tree_forward,
    tree_round,
    tree_speculative_generate,
    tree_verification_pass,
    verify_tree,
    verify_tree_law,
)
from reference.typical import MEDUSA_EPSILON, TypicalThreshold, typical_verify_tree_law
from reference.verification import residual_distribution
from reference.weights import read_eagle
from specdec.bundled import MODELS_DIR, bundled_pair_available, load_bundled_pair, load_heads
from specdec.costs import time_tree_pass
from specdec.fast_cpu import fast
from specdec.figures import plot_tree, plot_tree_mask
from specdec.figures.style import display_token, probability_text, save
from specdec.figures.trees import tree_fates
from specdec.machine import cache_sizes, describe_machine, mib, use_blas_threads
from specdec.measure.session_costs import session_costs
from specdec.measure.typical import FIGURE as TYPICAL_FIGURE
from specdec.measure.typical import small_case_tv
from specdec.standins import random_pair

use_blas_threads()  # one BLAS thread unless $SPECDEC_BLAS_THREADS says otherwise
print(describe_machine().line())  # the timing of section 5 is a fact about this machine
FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))
BUNDLED = bundled_pair_available()
target, draft = load_bundled_pair() if BUNDLED else random_pair(seed=0)
target, draft = fast(target), fast(draft)  # the CPU fast path, as `specdec bench` runs
prompt = encode("class Stack:\n    def push(self, item):\n        ")
sampling = SamplingParams(temperature=0.8)
SHAPE = TreeShape.of_widths((3, 2, 1))  # 3 guesses, 2 under each, 1 under those: 1+3+6+6
DEPTH = 3

# %% [markdown]
# ## 1. One round, step by step
#
# The draft model fills the shape level by level: 3 children of the root, drawn **without
# replacement** from its q (so the three differ), 2 under each of them, 1 under those. One
# draft forward per level. We then run the round's four steps by hand, with the same
# functions `tree_round` calls: draft, one verification pass, `verify_tree`, compaction.
#
# We use the first seed whose round refuses at least one child of the root before
# accepting another. That is the case a chain cannot handle, and it is chosen on purpose.
# The cell after the round checks that `tree_round` with the same seed does exactly the
# same.


# %%
def round_by_hand(seed):
    cache, drafter = target.new_cache(), ModelTreeDrafter(draft, SHAPE, WITHOUT_REPLACEMENT)
    prefill(target, cache, drafter, prompt)
    rng = np.random.default_rng(seed)
    tree = drafter.propose_tree(prompt, DEPTH, target_room(cache, prompt), sampling, rng)
    before = cache.length
    p, m, h = tree_verification_pass(target, cache, prompt, tree, sampling)  # ONE pass
    written = cache.end
    k_written = cache.k[:, :, before:written].copy()  # the temporary slots, in node order
    result = verify_tree(p, tree, rng)
    keep = kept_slots(m, result.path)
    compact(cache, keep)  # gather the path right after the committed slots
    cache.commit(len(keep))
    cache.rollback()
    drafter.commit_path(result.path)
    drafter.rollback()
    return dict(seed=seed, cache=cache, drafter=drafter, tree=tree, p=p, m=m, result=result,
                keep=keep, before=before, written=written, k_written=k_written)


for seed in range(50):
    rnd = round_by_hand(seed)
    path = rnd["result"].path
    if path and rnd["tree"].children(0).index(path[0]) > 0:
        break
tree, p, result, m = rnd["tree"], rnd["p"], rnd["result"], rnd["m"]
path = list(result.path)
fates = tree_fates(tree, path)
print(f"seed {seed}: a tree of {tree.n_nodes} nodes, depth {tree.depth}; accepted path "
      f"{path} = {decode(tree.path_tokens(path))!r}, then {decode([result.token])!r}")
print(f"emitted this round: {len(result.emitted(tree))} tokens for one target pass; nodes "
      f"accepted {fates.count(ACCEPTED)}, rejected {fates.count(REJECTED)}, never examined "
      f"{fates.count('never examined')}")

# %%
again_cache, again_drafter = target.new_cache(), ModelTreeDrafter(draft, SHAPE,
                                                                 WITHOUT_REPLACEMENT)
prefill(target, again_cache, again_drafter, prompt)
again = tree_round(target, again_cache, again_drafter, prompt, DEPTH, sampling,
                   np.random.default_rng(seed))
same_round = (np.array_equal(again.tree.tokens, tree.tokens) and again.result == result
              and np.array_equal(again_cache.committed()[0], rnd["cache"].committed()[0]))
print("tree_round with the same seed: same tree, same outcome, same committed cache:",
      same_round)

# %% [markdown]
# The tree, drawn. Each box is a node and holds its token; the small number is the node's
# index (breadth-first, the order in which the pass feeds them). Under each examined node,
# p is the target's probability for its token at the moment it was tried (after the
# updates of section 3), q is the draft's, and a = min(1, p/q) is the chance it had.

# %%
captions = {}
for node in [0, *path]:
    current = p[node].astype(np.float64)
    for child, q in sibling_rows(tree, node):
        x = int(tree.tokens[child])
        captions[child] = (f"p={probability_text(current[x])}\nq={probability_text(q[x])}\n"
                           f"a={probability_text(min(1.0, current[x] / q[x]))}")
        if child in path:
            break
        current = residual_distribution(current, q)
figure = plot_tree(tree, path, result.token, FIGURES / "tree_round.png", captions=captions)
display(Image(filename=str(figure)))

# %% [markdown]
# ## 2. The pass: position = depth, and a mask of ancestors
#
# The pass feeds the root (the last committed token, which no cache holds yet) and all the
# nodes after it, in node order. Two things differ from a chain pass:
#
# * **position id = depth.** The three children of the root are all "the next token". They
#   get the same position, root + 1, even though they sit in three different slots.
#   `position_ids(parents, length)` is length + depth.
# * **the mask.** Node i attends to every committed slot and to its ancestors (and itself),
#   never to a sibling or a cousin. `ancestor_mask(parents)` builds it: node i's row is its
#   parent's row plus itself. This is SpecInfer's tree attention (its topology-aware causal
#   mask), which Medusa's and EAGLE-2's trees use as well.
#
# So row i of the output is p(· | context, path to node i), as if the target had read only
# that path. We check it for every node against a plain, uncached forward of its path.

# %%
root_position = rnd["before"] + m - 1  # the root is the last of the m catch-up tokens
figure = plot_tree_mask(tree, root_position, FIGURES / "tree_mask.png", n_committed=3)
display(Image(filename=str(figure)))
positions = position_ids(tree.parents, root_position)
print("position ids of nodes 0..:", positions.tolist())
mask = ancestor_mask(tree.parents)
print(f"node {path[-1]} sees nodes {np.flatnonzero(mask[path[-1]]).tolist()} "
      f"(its path from the root), and {int(mask.sum(1).max())} tree slots at most")

worst_row = 0.0
for node in range(tree.n_nodes):
    chain = [node]
    while chain[-1] > 0:
        chain.append(int(tree.parents[chain[-1]]))
    tokens = np.concatenate([prompt[:-1], tree.tokens[chain[::-1]]])
    plain = probabilities(target.forward(tokens)[-1:], sampling)[0]
    worst_row = max(worst_row, float(np.abs(plain - p[node]).max()))
print(f"max |tree pass row - plain forward of the node's path| over {tree.n_nodes} nodes: "
      f"{worst_row:.1e}")

# %% [markdown]
# ## 3. Exact multi-candidate acceptance, on this round
#
# At a node with target row p, the children are tried in order. Child j was drawn from
# q_j, its law *given the earlier siblings*: here q minus the earlier siblings' tokens,
# renormalised (`sibling_rows` computes it). Then:
#
# * accept x_j with probability min(1, p(x_j) / q_j(x_j)), and go down into it;
# * if refused, p ← norm(max(0, p − q_j)): the next sibling faces the **residual**, the
#   part of p that q_j did not cover.
#
# If every child is refused (or the node is a leaf), one token is sampled from the current
# p. With one child per node this is the chain's rule; docs/algorithm.md proves the
# general case. The rule is the one SpecInfer verifies its token trees with; this notebook
# draws siblings without replacement, hence the renormalised q_j above. The table follows
# the walk of this round.

# %%
chances = {}  # node -> its chance a when it was tried
print("node  token  p(x) now  q_j(x)   a = min(1, p/q)  verdict   p(next sibling): before "
      "-> after the update")
for node in [0, *path]:
    current = p[node].astype(np.float64)
    rows = sibling_rows(tree, node)
    for j, (child, q) in enumerate(rows):
        x = int(tree.tokens[child])
        a = chances[child] = min(1.0, current[x] / q[x])
        line = (f"{child:4d}  {display_token(x)!r:5}  {current[x]:8.4f}  {q[x]:6.4f}   "
                f"{a:15.4f}  {fates[child]:8}")
        if child in path:
            print(line)
            break
        updated = residual_distribution(current, q)
        if j + 1 < len(rows):
            y = int(tree.tokens[rows[j + 1][0]])
            line += f"  {display_token(y)!r}: {current[y]:.4f} -> {updated[y]:.4f}"
        print(line)
        current = updated
print(f"then {display_token(result.token)!r}, sampled from the current row of node "
      f"{path[-1] if path else 0}")

# %% [markdown]
# Each refusal removes from p what the refused candidate's q covered, so probability moves
# to the tokens q under-proposed. That is why a later sibling can have a better chance than
# the first one had: in this round the accepted child's a is larger than the first child's.
# Without the update every sibling would be judged against the full p, a token's chances
# would add up over the siblings, and the output would no longer follow p. The oracle
# carries that broken rule ("residual not updated between siblings") and catches it
# (docs/oracle.md).
#
# ## 4. The accepted path and the KV compaction
#
# The pass wrote every node's K/V into the target cache as temporary slots, in node order:
# node a at slot root + a. Only the path survives, and its slots are not contiguous.
# Each of them was computed at the right position (depth) seeing the right context (its
# ancestors), so it is exactly what a prefill of the committed tokens would write there. It
# only has to be **moved**: `kept_slots(m, path)` lists the temporary slots to keep (the
# m catch-up tokens, root last, then node a at m − 1 + a), `compact` copies them to the
# first temporary slots, then `commit` and `rollback` work as in a chain round.

# %%
before, written, keep = rnd["before"], rnd["written"], rnd["keep"]
cache, drafter = rnd["cache"], rnd["drafter"]
print(f"target cache before the round: {before} committed slots (the prompt minus the root)")
print(f"the pass wrote slots {before}..{written - 1}: the root at {before + m - 1}, "
      f"node a at {before + m - 1} + a")
print(f"kept temporary slots {keep.tolist()} = absolute {(before + keep).tolist()} "
      f"-> gathered to {before}..{before + len(keep) - 1}")
print(f"after: {cache.length} committed (target), {written - cache.length} slots dropped; "
      f"draft cache {drafter.cache.length} committed (a leaf it never fed waits for the next "
      f"round)")
moved = cache.k[:, :, before : before + len(keep)]
print("the gathered K are the pass's K at the kept slots:",
      np.array_equal(moved, rnd["k_written"][:, :, keep]))

worst_kv = {}
committed = np.concatenate([prompt, tree.tokens[path]])  # prompt (root last), then the path
for name, model, c in (("target", target, cache), ("draft", draft, drafter.cache)):
    fresh = model.new_cache()
    model.forward(committed[: c.length], fresh)
    fresh.commit(c.length)
    worst_kv[name] = max(float(np.abs(a - b).max())
                         for a, b in zip(c.committed(), fresh.committed(), strict=True))
    print(f"{name} cache: max |committed K/V - fresh prefill of its {c.length} tokens| "
          f"= {worst_kv[name]:.1e}")

# %% [markdown]
# ## 5. A chain or a tree, at the same number of verified nodes?
#
# A tree spends its nodes on width; a chain spends them on depth. At 8 candidates (9 nodes
# with the root, so the same verification pass), we compare a chain of 8 with four tree
# shapes (`TreeShape.of_widths(widths).limited(depth, 9)`), on two prompts, 64 new tokens
# each, at T = 0.8 (siblings drawn without replacement) and at greedy (the draft's top-b as
# point masses; with b = 1 that is the plain greedy chain). For scale, a chain of depth 3
# (4 nodes) runs too: it is what the depth-3 trees add width to.

# %%
N_NODES = 9
SHAPES = {"chain 1x8": (1,) * 8, "2,1,1,1": (2, 1, 1, 1), "3,1,1": (3, 1, 1),
          "2,2,2": (2, 2, 2), "4,1": (4, 1), "chain 1x3": (1, 1, 1)}
prompts = [prompt, encode("def mean(values):\n    total = 0\n    for v in values:\n")]
per_round, n_nodes, alpha = {}, {}, {}
for name, widths in SHAPES.items():
    shape = TreeShape.of_widths(widths).limited(len(widths), N_NODES)
    n_nodes[name] = len(shape.parents)
    for label, params, draw in (("T=0.8", sampling, WITHOUT_REPLACEMENT),
                                ("greedy", GREEDY, POINT)):
        emitted, rounds, alphas = 0, 0, []
        for i, tokens in enumerate(prompts):
            res = tree_speculative_generate(
                target, ModelTreeDrafter(draft, shape, draw), tokens, max_new_tokens=64,
                rng=np.random.default_rng(i), sampling=params)
            emitted += len(res.tokens)
            rounds += res.stats.rounds
            alphas.append(res.stats.alpha)
        per_round[name, label], alpha[name, label] = emitted / rounds, float(np.mean(alphas))
    print(f"{name:10} {n_nodes[name]} nodes, depth {len(widths)}:  tokens per round  "
          f"T = 0.8 {per_round[name, 'T=0.8']:.2f}   greedy {per_round[name, 'greedy']:.2f}")
print(f"the long chain's α (acceptance per examined depth): "
      f"T = 0.8 {alpha['chain 1x8', 'T=0.8']:.2f}, greedy {alpha['chain 1x8', 'greedy']:.2f}")
nine = [name for name in SHAPES if n_nodes[name] == N_NODES]
for label in ("T=0.8", "greedy"):
    top = max(nine, key=lambda name, label=label: per_round[name, label])
    widths_at_3 = ", ".join(f"{name} {per_round[name, label]:.2f}" for name in ("3,1,1", "2,2,2"))
    print(f"{label:6}: most tokens per round among the {N_NODES}-node shapes: {top} "
          f"({per_round[top, label]:.2f}); at depth 3: {widths_at_3} against the 4-node "
          f"chain's {per_round['chain 1x3', label]:.2f}")

# %% [markdown]
# The price side. Trees were designed for GPUs. There one decode step of a large model is
# bound by reading its weights from memory, and the arithmetic for dozens of extra rows
# hides under that read: a pass over n nodes costs about one step (v(n) ≈ 1) for n up to
# dozens, so extra guesses are nearly free and only their acceptance matters. On a CPU the
# hardware floor is flat too for a few rows (notebook 01's roofline: a pass over up to 8
# new positions, n = 8 nodes here, is still bound by reading the weights; T, in this
# notebook, is only the temperature). Whether this NumPy/OpenBLAS implementation stays on
# that floor depends on the CPU, its BLAS kernels and the thread count (docs/benchmarks.md
# has the machines measured so far); the cell below measures this one. Median of 25 repeats,
# with the BLAS threads named at the top, on whatever else this machine is doing: read the
# trend, not the digits. v(n) = the time of one target pass over n tree nodes after the
# prompt, divided by the same pass over one node (one decode step). The sizes take turns,
# so that a busy spell slows them all alike.

# %%
NS = [1, 2, 4, 9, 16, 32]
timing_cache = target.new_cache()
target.forward(prompt[:-1], timing_cache)
timing_cache.commit(len(prompt) - 1)
seconds = {n: [] for n in NS}
for repeat in range(26):  # the sizes take turns; the first sweep only warms up
    for n in NS:
        parents = (np.arange(n) - 1) // 2  # a binary tree of n nodes (the cost depends on n)
        start = time.perf_counter()
        tree_forward(target, np.full(n, int(prompt[-1])), parents, timing_cache)
        if repeat:
            seconds[n].append(time.perf_counter() - start)
        timing_cache.rollback()
step = float(np.median(seconds[1]))
v = {n: float(np.median(seconds[n])) / step for n in NS}
print("n nodes  " + "  ".join(f"{n:5d}" for n in NS))
print("v(n)     " + "  ".join(f"{v[n]:5.2f}" for n in NS))
print(f"one step (n = 1): {step * 1e3:.2f} ms; on this machine a pass over 9 nodes costs "
      f"{v[9]:.2f} steps and one over 32 nodes {v[32]:.2f}")

fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.2))
names = list(SHAPES)
for j, label in enumerate(("T=0.8", "greedy")):
    left.bar(np.arange(len(names)) + (j - 0.5) * 0.38, [per_round[n, label] for n in names],
             0.38, label=label)
left.set_xticks(range(len(names)))
left.set_xticklabels(names, fontsize=7)
left.set_ylabel("tokens per round")
left.set_title(f"{N_NODES} nodes per pass (chain 1x3: {n_nodes['chain 1x3']})", fontsize=9)
left.legend(frameon=False, fontsize=8)
right.plot(NS, [v[n] for n in NS], "o-")
right.set_xlabel("nodes in one target pass (n)")
right.set_ylabel("v(n): time / one decode step")
right.set_title("verification cost, quick measurement", fontsize=9)
display(Image(save(fig, FIGURES / "tree_vs_chain.png")))

# %% [markdown]
# **How to read it.** The five 9-node shapes pay the same pass (v(9) above), so their
# tokens per round compare directly; the lines printed after the runs name the shape that
# emitted the most. The bundled draft agrees with the target often (the long chain's α,
# printed above), and with a high α a ninth node is worth more as one more level than as a
# second guess: every accepted level emits a token, and only the long chain has eight. A
# tree of depth D never emits more than D + 1 tokens per round, whatever its width.
#
# At a fixed *depth*, width is the only place for more nodes: compare the depth-3 trees
# with the 4-node chain of depth 3 (printed above). A depth-3 tree also costs the draft only 3
# forwards per round, where the long chain costs 8. The extra nodes are paid in the pass:
# with this implementation v(n) grows with n overall (unevenly: it is a quick measurement,
# and the fast path multiplies a few rows differently from one row), so here a wider tree
# is worth it only where its extra tokens per round outweigh the larger pass (v(9) against
# v(4) above). On a GPU, where v(n) ≈ 1 at these sizes, any gain in tokens per round
# would be a gain in speed.
#
# At greedy a sibling is a point mass and only the target's argmax can be accepted. The
# first branch of each of these trees is the chain of the draft's top-1 tokens, so at
# greedy a depth-3 tree reaches at least as far as the depth-3 chain from any context. A
# chain round that starts later never ends earlier, so starting every round at least as
# far ahead, the tree never needs more rounds for the same text: its tokens per round can
# only be equal or higher (the claims cell checks it). It is higher only where the draft's
# top-1 missed and a top-2 or top-3 the tree holds was the target's choice; how often that
# happened on these prompts is the difference printed above. A draft that matches the
# target less well is where trees should earn their keep. These runs are short (two
# prompts, one seed each), so read the ranking, not the second decimal.
#
# ## 6. Exactness
#
# *Greedy.* With one-hot p and point-mass siblings, the walk follows the target's argmax as
# far as the tree holds it. The output must be `generate`'s, token for token, whichever
# drafter built the trees: a draft model's top-b, or the extra heads (`HeadsTreeDrafter`:
# head d's top-b_d at depth d + 1, pruned by estimated path probability: the tree of Medusa's
# heads, [Cai et al., 2024](../docs/references.md#medusa2024)).

# %%
heads = load_heads() if BUNDLED else None
plain = generate(target, prompt, max_new_tokens=48, rng=np.random.default_rng(0),
                 sampling=GREEDY)
drafters = {"model (2,2,1) top-b": ModelTreeDrafter(draft, (2, 2, 1), POINT)}
if heads is not None:
    drafters["heads (3,2,2) <= 10"] = HeadsTreeDrafter(HeadsDrafter(target, heads), (3, 2, 2),
                                                       max_nodes=10)
greedy_equal = {}
for name, d in drafters.items():
    res = tree_speculative_generate(target, d, prompt, max_new_tokens=48,
                                    rng=np.random.default_rng(0), sampling=GREEDY)
    greedy_equal[name] = res.tokens == plain
    print(f"{name:22} == generate: {greedy_equal[name]}   tokens per round "
          f"{res.stats.mean_tokens_per_round:.2f}")

# %% [markdown]
# *Sampling, exactly.* `verify_tree_law(p, tree)` enumerates every outcome of the walk on
# a given tree, with its probability: {(path, token): probability}, in float64. For the
# law *given one tree* to be the target's, the tree must not depend on any random draw. We
# therefore take a tree of point masses: the draft's top-3, then top-2, filled at T = 0.8.
# (A sampled tree is exact only on average over the trees it could have drawn. The oracle
# enumerates every tree of small shapes on a tiny vocabulary for that.) Two checks:
#
# * the first emitted token (the accepted child's token, or the sample when all were
#   refused) has law p(· | context), the root's row;
# * given that the first token is child c, the second token has law p(· | context, x_c),
#   node c's row.

# %%
point_cache, point_drafter = target.new_cache(), ModelTreeDrafter(draft, (3, 2), POINT)
prefill(target, point_cache, point_drafter, prompt)
point_tree = point_drafter.propose_tree(prompt, 2, 64, sampling, np.random.default_rng(0))
point_p, _, _ = tree_verification_pass(target, point_cache, prompt, point_tree, sampling)
point_p = point_p.astype(np.float64)
point_p /= point_p.sum(axis=1, keepdims=True)  # float32 rows, made to sum to 1 in float64
law = verify_tree_law(point_p, point_tree)

first = np.zeros(target.n_vocab)
second = {c: np.zeros(target.n_vocab) for c in point_tree.children(0)}
for (walk, token), mass in law.items():
    emitted = [*point_tree.path_tokens(walk), token]
    first[emitted[0]] += mass
    if walk:
        second[walk[0]][emitted[1]] += mass
gap_first = float(np.abs(first - point_p[0]).max())
gap_second = max(float(np.abs(s / s.sum() - point_p[c]).max()) for c, s in second.items())
print(f"{len(law)} outcomes, total probability {sum(law.values()):.15f}")
print(f"max |law of the 1st token - p(. | context)|          = {gap_first:.1e}")
print(f"max |law of the 2nd token given child c - p(. | c)|  = {gap_second:.1e}")

# %% [markdown]
# ## 7. The lossy contrast: typical acceptance
#
# Medusa's default verifier ([Cai et al., 2024](../docs/references.md#medusa2024)) is not the
# walk above. *Typical acceptance* takes a candidate x
# at a node whose target row is p when p(x) > min(ε, δ · exp(−H(p))), with no coin and
# without looking at q; of the candidates that pass, Medusa keeps the longest accepted path
# (`reference/typical.py` takes the likeliest child at each node; on a chain the two
# coincide). An accepted token is then emitted with probability 1, not p(x), and nothing
# repairs the difference, so the output no longer follows p (docs/algorithm.md, "Typical
# acceptance"). We measure the drift on the tree of section 6, whose law we enumerated
# exactly: the total variation (TV) between the law of the first emitted token and the
# root's row p, for Medusa's ε = 0.09 (δ = √ε), against the exact walk. Then the law of 3
# tokens on the small random cases of `specdec/measure/typical.py` (V = 3, a top-2 × 2 tree, mean
# over 20 cases), for three bars. (A set of its own: the means docs/algorithm.md quotes come from
# the oracle's five cases of other shapes, and differ.)

# %%
def first_token_law(outcomes, tree):
    # {(path, token): probability} -> [V] the law of the first emitted token
    law = np.zeros(target.n_vocab)
    for (walk, token), mass in outcomes.items():
        law[[*tree.path_tokens(walk), token][0]] += mass
    return law


MEDUSA = TypicalThreshold(MEDUSA_EPSILON)  # ε = 0.09, δ = √ε = 0.3
typical = typical_verify_tree_law(point_p, point_tree, MEDUSA)
tv_first = {"exact walk": 0.5 * float(np.abs(first - point_p[0]).sum()),
            "typical, ε = 0.09": 0.5 * float(
                np.abs(first_token_law(typical, point_tree) - point_p[0]).sum())}
typical_walk = next(iter(typical))[0]  # the typical path is deterministic: one walk
print("the tree of section 6 (T = 0.8), the law of the 1st emitted token against p(. | context):")
if typical_walk:
    x = int(point_tree.tokens[typical_walk[0]])
    print(f"  typical accepts {display_token(x)!r} every time; the target emits it with "
          f"p = {point_p[0, x]:.3f}")
for rule, tv in tv_first.items():
    print(f"  TV, {rule:18} {tv:.3g}")
tv_small = {"exact walk": small_case_tv(None)}
for eps in (0.03, MEDUSA_EPSILON, 0.3):
    tv_small[f"typical, ε = {eps:g}"] = small_case_tv(TypicalThreshold(eps))
print("random tables, V = 3, a top-2 x 2 tree: the law of 3 tokens against the target's, "
      "mean TV of 20 cases:")
for rule, tv in tv_small.items():
    print(f"  TV, {rule:18} {tv:.3g}")
if TYPICAL_FIGURE.is_file():  # measured by `python -m specdec.measure.typical` (docs/benchmarks.md)
    display(Image(filename=str(TYPICAL_FIGURE)))

# %% [markdown]
# On the real tree the typical rule's first token is the accepted candidate every time,
# where the target would emit it with probability p(x): its TV is 1 − p(x) when a
# candidate passes (0 when none does and the token is sampled from p). The exact walk's TV
# is float64 rounding. The figure, measured by `python -m specdec.measure.typical` on the bundled
# pair (extra heads drafting a tree, T = 0.8; the machine it ran on is in docs/benchmarks.md), shows
# what the drift buys: longer accepted paths, hence speed, bought with distance from the target's
# law. The exact loop is its TV = 0 point.

# %% [markdown]
# ## What this notebook claims, checked on this run
#
# The cell below fails the render if any statement above stops being true. It checks only
# what holds on any machine: the hand-made round is `tree_round`'s; a sibling was refused
# before one was accepted; every node's row equals the plain forward of its path;
# compaction moves exactly the path's K/V and leaves both caches equal to a fresh prefill;
# a later sibling had a better chance than the first; the five shapes use the same 9-node
# pass; no round emits more than depth + 1 tokens; at greedy a depth-3 tree does at least
# as well as the depth-3 chain it contains; with this pair's high α the chain of 8 yields the
# most tokens per round of the 9-node shapes (counts, which every machine shares); a pass over
# 32 nodes costs more than one step (its arithmetic alone, at any speed this CPU class has
# shown, exceeds one step's read); greedy tree decoding is `generate`; the exact law is the
# target's, and typical acceptance's is not, by 1 − p(x) on the real tree. Which shape is
# fastest and the exact v(n) are measurements: they are printed above, not asserted.

# %%
assert same_round, "tree_round with the same seed should repeat the hand-made round exactly"
assert fates[path[0] - 1] == REJECTED and path[0] > 1, (
    f"the chosen round should refuse a child of the root before accepting a later one; "
    f"accepted path {path}, fates of the root's children "
    f"{[fates[c - 1] for c in tree.children(0)]}")
assert worst_row < 1e-4, (
    f"every node's row should equal the plain forward of its path (float32), worst {worst_row:.1e}")
assert np.array_equal(moved, rnd["k_written"][:, :, keep]), (
    "compaction should move the pass's K at the kept slots, unchanged")
assert cache.length == before + len(keep) == len(prompt) + len(path), (
    f"expected {len(prompt) + len(path)} committed slots (prompt + path), got {cache.length}")
assert max(worst_kv.values()) < 1e-5, (
    f"both caches should equal a fresh prefill to float32 rounding, got {worst_kv}")
assert chances[path[0]] > chances[tree.children(0)[0]], (
    f"the residual should have lifted the accepted sibling's chance above the first's: "
    f"{chances[path[0]]:.4f} vs {chances[tree.children(0)[0]]:.4f}")
assert [n for k, n in n_nodes.items() if k != "chain 1x3"] == [N_NODES] * 5, (
    f"the five shapes should all verify {N_NODES} nodes, got {n_nodes}")
for (name, label), tokens in per_round.items():  # a round emits 1 .. depth + 1 tokens
    assert 1.0 <= tokens <= len(SHAPES[name]) + 1, (
        f"{name} {label}: expected 1 .. {len(SHAPES[name]) + 1} tokens per round, got {tokens}")
for name in ("3,1,1", "2,2,2"):  # greedy: the tree holds the chain's path, so never fewer
    assert per_round[name, "greedy"] >= per_round["chain 1x3", "greedy"], (
        f"at greedy the {name} tree contains the depth-3 chain and cannot emit fewer tokens "
        f"per round: {per_round[name, 'greedy']:.2f} vs {per_round['chain 1x3', 'greedy']:.2f}")
assert all(greedy_equal.values()), f"greedy tree decoding should equal generate: {greedy_equal}"
assert gap_first < 1e-9 and gap_second < 1e-9, (
    f"the exact law should be the target's, got gaps {gap_first:.1e}, {gap_second:.1e}")
assert tv_first["exact walk"] < 1e-9 and tv_small["exact walk"] < 1e-9, (
    f"the exact walk's TV should be rounding only: {tv_first}, {tv_small}")
assert min(tv for rule, tv in tv_small.items() if rule != "exact walk") > 0.01, (
    f"typical acceptance should drift from the target's law: {tv_small}")
if typical_walk:  # a candidate passed: the typical rule emits it always, the target w.p. p(x)
    x = int(point_tree.tokens[typical_walk[0]])
    assert abs(tv_first["typical, ε = 0.09"] - (1 - point_p[0, x])) < 1e-9, (
        f"the typical rule's TV should be 1 - p(x) = {1 - point_p[0, x]:.3f}, got {tv_first}")
for label in ("T=0.8", "greedy"):  # counts: with a high α depth beats width at 9 nodes
    nine_nodes = {name: per_round[name, label] for name in SHAPES if n_nodes[name] == N_NODES}
    assert max(nine_nodes, key=nine_nodes.get) == "chain 1x8", (
        f"{label}: the chain of 8 should yield the most tokens per round: {nine_nodes}")
assert v[32] > 1.2, f"a pass over 32 nodes should cost more than one step, got v(32) = {v[32]:.2f}"
print("every statement above holds on this run's numbers")

# %% [markdown]
# ## 8. Why our numbers are not the papers'
#
# The papers this notebook follows rank the methods the other way round. SpecInfer's token
# trees ([Miao et al., 2024](../docs/references.md#specinfer2024)), Medusa's trees of head
# guesses ([Cai et al., 2024](../docs/references.md#medusa2024)) and EAGLE-2's dynamic trees
# ([Li et al., 2024](../docs/references.md#eagle2-2024)) report that verifying many
# candidates per pass as a tree gains over fewer, on GPUs; and EAGLE's drafter, one layer fed
# the target's own features ([Li et al., 2024](../docs/references.md#eagle2024), notebook
# 14), reports larger speedups than speculative sampling with an independent draft model.
# This lab's recorded runs of `specdec bench` on its CPU put a chain ahead of every tree and
# the independent draft model ahead of EAGLE
# ([docs/our-numbers-and-the-papers.md](../docs/our-numbers-and-the-papers.md) quotes them,
# with the machine); the cells below price section 5's shapes on this machine. Neither
# result is wrong. A ranking of drafters is set by what a round yields (tokens per round)
# and what it costs (k·c + v, notebook 08), and a tiny pair on a CPU sits far from the
# papers' setting on the costs. This section measures those costs on this machine, then
# uses the cost model to **predict** where the papers' ranking returns. Every line marked
# "prediction" is the model applied to numbers measured here, not a measurement.
#
# Three quantities decide it:
#
# * **the target's size against the CPU's cache.** A one-row step reads every weight once.
#   A model far larger than any cache (a 7-billion-parameter target is gigabytes) streams
#   its weights from memory at every step, and extra rows ride along on the same read, so
#   a wide pass costs about one step, v(n) ≈ 1, the regime the papers measure on GPUs;
# * **v(n) of a wide pass**, which prices a tree's extra nodes;
# * **the drafter's c**, which prices its depth: a tree of depth D pays D draft steps, a chain
#   of k pays k.

# %%
def megabytes(params):  # the weights one forward reads, once per pass
    return sum(w.nbytes for w in params.values()) / 1e6


sizes = {"target": megabytes(target.params), "draft model": megabytes(draft.params)}
EAGLE_DIR = MODELS_DIR / "eagle"
if BUNDLED and (EAGLE_DIR / "eagle.safetensors").is_file():
    eagle_params, _ = read_eagle(EAGLE_DIR, target.config.n_layer)
    # its own block and input layers, and the target's output layer, which it reuses
    sizes["EAGLE drafter"] = megabytes(eagle_params) + target.params["wte.weight"].nbytes / 1e6
l3 = cache_sizes().get("L3")
print("weights read per forward: " + ", ".join(f"{k} {v:.1f} MB" for k, v in sizes.items()))
if l3:
    print(f"the CPU's last-level cache (L3): {mib(l3)}; the target's weights are "
          f"{sizes['target'] * 1e6 / l3:.1f}x that")
one_block = sum(w.nbytes for n, w in target.params.items() if n.startswith("h.0.")) / 1e6
print(f"one of the target's {target.config.n_layer} blocks: {one_block:.1f} MB, "
      f"{one_block / sizes['target']:.0%} of the target")
shared = session_costs(target, draft)  # the fast path's c and v(T), as notebook 08 takes them
c = shared.profile.c
print(f"c of the draft model, measured ({shared.origin()}): {c:.3f}; by bytes read: "
      f"{sizes['draft model'] / sizes['target']:.3f}")
if "EAGLE drafter" in sizes:
    print(f"an EAGLE step reads {sizes['EAGLE drafter'] / sizes['draft model']:.1f}x the draft "
          f"model's bytes: c by bytes {sizes['EAGLE drafter'] / sizes['target']:.3f}")
    assert sizes["EAGLE drafter"] > 2 * sizes["draft model"], (
        f"the EAGLE drafter should read several times the draft model's bytes: {sizes}")
    rest = sizes["target"] - target.config.n_layer * one_block  # embeddings, final norm
    print("prediction, by bytes: an EAGLE step against a target of L blocks at this width: "
          + ", ".join(f"L = {L}: c ≈ {sizes['EAGLE drafter'] / (L * one_block + rest):.3f}"
                      for L in (6, 12, 32, 80)))
if BUNDLED:  # the bundled target has six blocks
    assert 0.1 < one_block / sizes["target"] < 0.2, (
        f"one block of six should be about a sixth of the target: "
        f"{one_block / sizes['target']:.2f}")

# %% [markdown]
# Next, the trees. Section 5 held the nodes fixed at 9; the papers' trees are as deep as a
# chain and wider. The cell below adds the chain of 8 with a second guess at its first
# position (widths 2, 1, 1, …: two chains of depth 8 from the root's two children, 17 nodes),
# where acceptance is weakest (notebook 08 found the first position accepted least). At
# greedy this tree holds the chain of 8, so it can only emit as many tokens per round or
# more (section 5's argument); its extra price is the pass over 17 nodes instead of 9, and
# a second row in each draft forward. The cell times one pass of each shape (the median of
# 27, the shapes taking turns), then predicts each shape's speedup,
# t / (D·c + v(nodes)) with t its tokens per round and D its depth, under three cost models:
# this machine's c and v; v = 1 (a pass of any of these sizes costs one step: the papers'
# regime, a prediction); and v = 1 with a drafter four times cheaper relative to its target
# (a prediction). c is charged once per level, the cost of a one-row draft step.

# %%
WIDE = "2 x chain 8"
widths = {name: SHAPES[name] for name in ("chain 1x3", "3,1,1", "2,2,2", "chain 1x8")}
widths[WIDE] = (2,) + (1,) * 7
parents_of = {name: TreeShape.of_widths(w).limited(len(w), N_NODES).parents
              for name, w in widths.items() if name != WIDE}
parents_of[WIDE] = TreeShape.of_widths(widths[WIDE]).parents  # all 17 nodes
t_round = {(name, label): per_round[name, label] for name in parents_of if name != WIDE
           for label in ("T=0.8", "greedy")}  # section 5's tokens per round
for label, params, draw in (("T=0.8", sampling, WITHOUT_REPLACEMENT), ("greedy", GREEDY, POINT)):
    emitted, rounds = 0, 0
    for i, tokens in enumerate(prompts):  # section 5's prompts and seeds
        res = tree_speculative_generate(
            target, ModelTreeDrafter(draft, TreeShape(parents_of[WIDE]), draw), tokens,
            max_new_tokens=64, rng=np.random.default_rng(i), sampling=params)
        emitted += len(res.tokens)
        rounds += res.stats.rounds
    t_round[WIDE, label] = emitted / rounds
passes = {name: [] for name in ["one node", *widths]}
for _ in range(3):  # the shapes take turns, so that a busy spell slows them all alike
    for name in passes:
        parents = [-1] if name == "one node" else parents_of[name]
        passes[name].append(time_tree_pass(target, prompt, parents, repeats=9))
v_shape = {name: float(np.median(passes[name]) / np.median(passes["one node"]))
           for name in widths}
ones = dict.fromkeys(widths, 1.0)
regimes = {"this machine": (c, v_shape), "v = 1 (prediction)": (c, ones),
           "v = 1, c / 4 (prediction)": (c / 4, ones)}
print(f"{'shape':12} nodes depth  v here   tokens per round T=0.8 / greedy")
for name, w in widths.items():
    print(f"{name:12} {len(parents_of[name]):5d} {len(w):5d}  {v_shape[name]:6.2f}   "
          f"{t_round[name, 'T=0.8']:13.2f} / {t_round[name, 'greedy']:.2f}")
predicted = {}
for label in ("T=0.8", "greedy"):
    print(f"\n{label}: predicted speedup t / (D·c + v)")
    for regime, (c_r, v_r) in regimes.items():
        row = predicted[label, regime] = {
            name: t_round[name, label] / (len(w) * c_r + v_r[name]) for name, w in widths.items()}
        print(f"  {regime:26} " + "  ".join(f"{n} {x:.2f}x" for n, x in row.items())
              + f"   best: {max(row, key=row.get)}")
    # what the wide tree's pass may cost here before the chain of 8 beats it
    gain = t_round[WIDE, label] / t_round["chain 1x8", label]
    v_even = gain * (8 * c + v_shape["chain 1x8"]) - 8 * c
    print(f"  the 17-node tree yields {gain:.2f}x the chain of 8's tokens per round: it wins here "
          f"only if its pass costs under {v_even:.2f} steps; measured {v_shape[WIDE]:.2f}")
# laws of these runs, on any machine: at greedy the wide tree holds the chain of 8, so it
# yields at least as many tokens per round, and with v = 1 (same depth, same c) it is
# predicted at least as fast; so are the depth-3 trees against the depth-3 chain
assert t_round[WIDE, "greedy"] >= t_round["chain 1x8", "greedy"], (
    f"at greedy the {WIDE} tree contains the chain of 8 and cannot emit fewer tokens per round: "
    f"{t_round[WIDE, 'greedy']:.2f} vs {t_round['chain 1x8', 'greedy']:.2f}")
for regime in ("v = 1 (prediction)", "v = 1, c / 4 (prediction)"):
    row = predicted["greedy", regime]
    assert row[WIDE] >= row["chain 1x8"], f"{regime}: the wide tree should not lose, got {row}"
    assert row["2,2,2"] >= row["chain 1x3"] and row["3,1,1"] >= row["chain 1x3"], (
        f"{regime}: at equal depth and v = 1 a tree holding the chain should not lose, got {row}")
for label in ("T=0.8", "greedy"):  # a cheaper drafter helps the deep shapes most
    cheaper = {name: predicted[label, "v = 1, c / 4 (prediction)"][name]
               / predicted[label, "v = 1 (prediction)"][name] for name in widths}
    assert cheaper["chain 1x8"] > cheaper["chain 1x3"], (
        f"{label}: a cheaper drafter should lift the chain of 8 more than the chain of 3: "
        f"{cheaper}")

# %% [markdown]
# **How to read it.** The three rows of each temperature differ only in the costs; the tokens
# per round are the same measured ones. At greedy the laws checked at the end of the cell
# hold on any machine: once a pass of any of these sizes costs one step, a tree that holds a
# chain of the same depth can only be predicted at least as fast, since it yields at least as
# many tokens for the same D·c + 1. On this machine each shape's pass costs the "v here"
# printed for it, and for the wide tree the cell sets that against the most its pass may
# cost before the chain of 8 beats it: that margin, not the tree, decides the ranking here.
# Why a wider pass costs more here: our target is about the size of this CPU's last-level
# cache (printed above), so a one-row step reads its weights at cache speed, and next to that
# read the arithmetic of each extra row, done by NumPy's small matrix products, is not
# negligible (docs/benchmarks.md, "The CPU limit", splits a pass into the two on one
# machine). A target many times larger than every cache reads its weights from memory at
# every step, and the extra rows ride along on that read: that is the first thing that
# would flip the ranking. Which shape each cost model puts first is printed as "best". A
# cheaper drafter (the last row) lifts the deep shapes more than the shallow ones (checked
# for the two chains), since it is paid once per level: that is why notebook 08's best k
# grows when c falls.
#
# The bundled pair also shrinks what width can buy: its draft is accepted at high rates
# (section 5's α), so the second guess at the first position adds only the printed ratio of
# tokens per round over the chain of 8. A target much stronger than its drafter, the papers'
# case, would miss more often at the first position, where width pays; that is a
# prediction this pair cannot test.
#
# **EAGLE against the independent draft model** turns on c and α rather than on v. EAGLE's
# drafter is one transformer block at the target's width (with layers that bring the target's
# features in). In the papers that is one layer of a target of dozens: a few percent of its
# weights. Here the target has six blocks, so one of them is a sixth of it, and an EAGLE step
# reads several times the bytes of our 2-layer, 128-wide draft model (both printed above, and
# checked). Bytes are what a one-row step on a CPU mostly pays for, so by bytes EAGLE's c is
# the larger here; notebook 14 times both. The acceptance side need not favour EAGLE either:
# our independent draft is trained on the same narrow code corpus as a target only six blocks
# deep, and is accepted at high rates (notebook 08), so the target's features have less to
# add than in the papers' setting, where a draft model cheap enough to pay is much weaker
# than its target. The first cell of this section also prints a prediction from bytes alone:
# with a target of L blocks at this width, an EAGLE step's share of a target step falls
# roughly as 1/L, which is how one layer becomes cheap in the papers. Notebook 14 measures
# both drafters' c and α on this machine.

# %% [markdown]
# ## Exercise: verify a tree
#
# [`notebooks/exercises/my_tree.py`](exercises/my_tree.py) asks for `verify_tree(p_rows,
# tree, rng)`: the walk above, siblings tried in order against the residual their earlier
# siblings left. The grader scores the law of the emitted tokens and the rule apart, so an
# exact walk that keeps fewer candidates is told so (its grading time: exercises/README.md):
#
# ```bash
# .venv/bin/specdec grade notebooks/exercises/my_tree.py:verify_tree
# ```

# %% [markdown]
# ## Exercise: the mask, the positions and the compaction
#
# [`notebooks/exercises/my_tree_mask.py`](exercises/my_tree_mask.py) asks for
# `tree_attention(parents, length, path)`: the bookkeeping of sections 2 and 4. It returns
# the mask [n, length + n] (every committed slot, then ancestors-or-self), the positions
# length + depth, and, for an accepted path, the slots kept (the root's, then the path's)
# with where each one moves. The grader holds each part against `ancestor_mask`,
# `position_ids` and `kept_slots` on fixed and random trees, and names the usual mistakes
# (a sibling seen, positions by slot, the root dropped; about 1 s):
#
# ```bash
# .venv/bin/specdec grade notebooks/exercises/my_tree_mask.py:tree_attention
# ```

# %% [markdown]
# ## Check yourself
#
# Answer from this notebook alone, then compare with a neighbour:
#
# 1. The root has three children. Which position id does each get, and which key slots may
#    node i attend to?
# 2. At a node, children are tried in order. Write the rule for child j, including the
#    update after a refusal. What goes wrong without the update, and why can a later
#    sibling have a better chance than the first one had?
# 3. Why does the accepted path need compaction before the commit, when a chain never
#    does?
# 4. A tree of depth D emits at most how many tokens per round? With the bundled pair's
#    high α, why does a chain of 8 use a ninth node better than a wider tree?
# 5. The papers rank trees above chains; section 8 ranks them the other way on this CPU.
#    Which measured cost makes the difference, what must it fall to for the 17-node tree to
#    win, and why would a target far larger than the CPU's cache get there?
#
# (The answers are kept apart, for instructors: `specdec course DIR --instructor BUNDLE`
# writes them beside the students' copy; docs/teaching.md.)

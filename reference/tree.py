"""Tree drafts: several candidate continuations, judged by ONE target pass.

A chain draft bets everything on one guess per position; a tree keeps several guesses per
position (siblings) and a guess for what follows each of them (children). Node 0, the
root, is the last committed token: the one neither model has cached yet, so the
verification pass feeds it first, exactly like the catch-up token of a chain round.

    node  = (token, parent, depth, q row, how it was drawn)
    depth = number of edges from the root; a node at depth d sits at absolute position
            root_position + d, whatever its index in the tree

One round, with `context` = the committed tokens (the root is context[-1]):

    1. draft              the drafter builds a Tree of depth <= k
    2. verification pass  ONE target forward over [catch-up tokens, root, nodes 1..n-1]:
                          position ids = depth, and a mask in which every node sees the
                          committed context and its own ancestors only; row i of the
                          result is p(. | path from the root to node i)
    3. verify_tree        at each node, try its children in order (exact multi-candidate
                          acceptance); descend into the accepted one; when all are rejected
                          or a leaf is reached, sample one more token from the current p
    4. compact, commit    the accepted path's K/V, scattered over the tree's temporary slots,
                          are gathered right after the committed ones; commit; roll back

Trees come from `ModelTreeDrafter` (a draft model filling a static shape: b children per
node, sampled, without replacement, or its top-b as point masses) and `HeadsTreeDrafter`
(the extra heads' favourites, pruned by estimated path probability). The loop is
`tree_speculative_generate`: speculative.run_rounds with `tree_round`.

Nodes are stored in breadth-first order (parents nondecreasing), so the children of a node
are contiguous, a node's parent comes before it, and cutting a tree at a depth or at a node
count keeps a tree. docs/algorithm.md ("Tree drafts") proves that the output law is the
target's, for every way of drawing the siblings listed below.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reference.checks import (
    as_token_array,
    check_clock,
    check_generator,
    check_positive_int,
    check_probability_rows,
)
from reference.drafters import Draft
from reference.kv_cache import KVCache, catch_up_tokens
from reference.model import GPT, check_cache_fits, merge_heads, softmax, split_heads
from reference.sampling import SamplingParams, check_sampling, probabilities, sample_token
from reference.speculative import (
    CacheSpan,
    Round,
    SpeculativeResult,
    check_loop_inputs,
    observe_target,
    run_rounds,
)
from reference.verification import ROW_SUM_ATOL, Verification, accepts, residual_distribution

# How a node's token was drawn, given its parent (one rule per group of siblings):
SAMPLED = "sampled"  # from its q row, independently of its siblings (with replacement)
WITHOUT_REPLACEMENT = "without replacement"  # from its q row minus its earlier siblings' tokens
POINT = "point mass"  # chosen deterministically (top-b, heads); its q row is one-hot
ROOT = "root"  # node 0: the last committed token, not a candidate (its q row is all zero)
DRAWS = (SAMPLED, WITHOUT_REPLACEMENT, POINT)


# ------------------------------------------------------------------------------------------
# 1. The tree
# ------------------------------------------------------------------------------------------


def depths_of(parents: np.ndarray) -> np.ndarray:  # [n] parents (-1 = none) -> [n] depths
    # depth(i) = depth(parent(i)) + 1, and 0 for a node without a parent; parents come first
    depth = np.zeros(len(parents), dtype=np.int64)
    for i, parent in enumerate(parents):
        depth[i] = 0 if parent < 0 else depth[parent] + 1
    return depth


def ancestor_mask(parents: np.ndarray) -> np.ndarray:  # [n] parents -> [n, n] bool
    # mask[i, j] = node j is node i or one of its ancestors: what node i may attend to.
    # Row i is its parent's row plus itself, so siblings never see each other.
    n = len(parents)
    mask = np.zeros((n, n), dtype=bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            mask[i] = mask[parent]
        mask[i, i] = True
    return mask


@dataclass(frozen=True)
class Tree:
    """Candidate continuations of the committed tokens, in breadth-first order."""

    tokens: np.ndarray  # [n] int; tokens[0] is the root (the last committed token)
    parents: np.ndarray  # [n] int; parents[0] = -1, parents[i] < i, nondecreasing
    q: np.ndarray  # [n, V]: row i is the distribution node i was drawn from (root: zeros)
    draws: tuple[str, ...]  # [n]: ROOT for node 0, else SAMPLED / WITHOUT_REPLACEMENT / POINT

    @property
    def n_nodes(self) -> int:  # n, the root included
        return len(self.tokens)

    @property
    def depths(self) -> np.ndarray:  # [n]
        return depths_of(self.parents)

    @property
    def depth(self) -> int:  # the longest path's number of candidates
        return int(self.depths.max())

    def children(self, node: int) -> list[int]:  # contiguous, in the order they are tried
        return [int(c) for c in np.flatnonzero(self.parents == node)]

    def path_tokens(self, path: Sequence[int]) -> list[int]:
        return [int(self.tokens[i]) for i in path]


def check_tree(tree: Tree, n_vocab: int) -> Tree:
    """Raise, saying what is wrong, unless `tree` is a tree that `verify_tree` can judge
    exactly: breadth-first, every q row a distribution that gives its token mass > 0, one
    drawing rule per group of siblings, point masses one-hot, no repeated token among
    siblings drawn without replacement (nor among point masses: a repeat is always rejected
    and only costs a row)."""
    if not isinstance(tree, Tree):
        raise TypeError(f"expected a reference.tree.Tree, got {type(tree).__name__}")
    tokens = as_token_array(tree.tokens, n_vocab, "tree.tokens")
    parents = np.asarray(tree.parents)
    n = len(tokens)
    if parents.shape != (n,) or not np.issubdtype(parents.dtype, np.integer):
        raise ValueError(f"tree.parents must be {n} ints (one per node), got {parents!r}")
    if parents[0] != -1 or np.any(parents[1:] < 0) or np.any(parents[1:] >= np.arange(1, n)):
        raise ValueError(
            f"tree.parents must start with -1 (the root) and give every other node an earlier "
            f"node as parent, got {parents.tolist()}"
        )
    if np.any(np.diff(parents) < 0):
        raise ValueError(
            f"tree nodes must be in breadth-first order (parents nondecreasing, so that the "
            f"children of a node are contiguous), got parents {parents.tolist()}"
        )
    q = check_probability_rows(np.asarray(tree.q), "tree.q", math.inf)
    if q.shape != (n, n_vocab):
        raise ValueError(f"tree.q must have shape {(n, n_vocab)}, got {q.shape}")
    draws = tuple(tree.draws)
    if len(draws) != n or draws[0] != ROOT or any(d not in DRAWS for d in draws[1:]):
        raise ValueError(
            f"tree.draws must be ROOT for node 0 then one of {DRAWS} per node, got {draws}"
        )
    if np.any(q[0] != 0):
        raise ValueError("the root's q row must be all zero: the root is committed, not drawn")
    if n > 1:
        sums = q[1:].sum(axis=-1, dtype=np.float64)
        if np.max(np.abs(sums - 1.0)) > ROW_SUM_ATOL:
            raise ValueError("every candidate's q row must sum to 1")
        if np.any(q[np.arange(1, n), tokens[1:]] <= 0):
            raise ValueError("a candidate has probability 0 under the q row it was drawn from")
    for node in range(n):
        check_siblings(tokens, q, draws, tree.children(node))
    return tree


def check_siblings(tokens: np.ndarray, q: np.ndarray, draws: tuple, children: list[int]) -> None:
    if not children:
        return
    kinds = {draws[c] for c in children}
    if len(kinds) != 1:
        raise ValueError(f"siblings {children} mix drawing rules {sorted(kinds)}; use one")
    kind = kinds.pop()
    picked = tokens[children]
    if kind == POINT and np.any(q[children, picked] != 1.0):
        raise ValueError(f"point-mass candidates {children} need one-hot q rows at their token")
    if kind in (POINT, WITHOUT_REPLACEMENT) and len(set(picked.tolist())) < len(children):
        raise ValueError(f"siblings {children} drawn as {kind!r} repeat a token")
    if kind == WITHOUT_REPLACEMENT and np.any(q[children] != q[children[0]]):
        raise ValueError(
            f"siblings {children} drawn without replacement must share one q row (the "
            f"distribution before any of them was removed)"
        )


@dataclass(frozen=True)
class TreeShape:
    """A tree's topology, without tokens: what a static tree drafter fills in."""

    parents: tuple[int, ...]  # [n]: -1 for the root, then breadth-first as in Tree

    @classmethod
    def of_widths(cls, widths: Sequence[int]) -> TreeShape:
        # (b_1, .., b_D) -> every node at depth d-1 gets b_d children; (2, 2) has 1+2+4 nodes
        parents, level = [-1], [0]
        for b in widths:
            b = check_positive_int(b, "a tree width")
            nxt = []
            for node in level:
                for _ in range(b):
                    parents.append(node)
                    nxt.append(len(parents) - 1)
            level = nxt
        return cls(tuple(parents))

    def __post_init__(self) -> None:
        p = np.asarray(self.parents, dtype=np.int64)
        n = len(p)
        ok = n >= 1 and p[0] == -1 and np.all(p[1:] >= 0) and np.all(p[1:] < np.arange(1, n))
        if not ok or np.any(np.diff(p) < 0):
            raise ValueError(
                f"a TreeShape is a list of parents in breadth-first order: -1 for the root, "
                f"then for each node an earlier node, nondecreasing; got {list(self.parents)}"
            )

    @property
    def depths(self) -> np.ndarray:  # [n]
        return depths_of(np.asarray(self.parents))

    def limited(self, max_depth: int, max_nodes: int) -> TreeShape:
        # the nodes of depth <= max_depth, then the first max_nodes of them (breadth-first
        # order makes both cuts keep a tree)
        keep = int(np.sum(self.depths <= max_depth))
        return TreeShape(self.parents[: max(1, min(keep, max_nodes))])


# ------------------------------------------------------------------------------------------
# 2. One forward pass over a tree: position ids = depth, ancestors-only mask
# ------------------------------------------------------------------------------------------


def position_ids(parents: np.ndarray, length: int) -> np.ndarray:  # [n] parents -> [n]
    # a slot at depth d of the temporary forest (d = 0: right after the committed tokens) is
    # the (d+1)-th token after them, wherever it is stored: position = length + depth (its
    # index is only a storage slot; positions by index would give siblings different ones)
    return length + depths_of(parents)


def tree_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray) -> np.ndarray:
    # q [nh, T, hs], k/v [nh, S, hs], mask [T, S] bool -> [nh, T, hs]:
    # softmax(q k^T / sqrt(hs) + mask) v, the causal mask replaced by the tree's
    scores = q @ k.transpose(0, 2, 1) / np.float32(math.sqrt(q.shape[-1]))  # [nh, T, S]
    scores = np.where(mask, scores, np.float32(-1e10))
    return softmax(scores) @ v


def tree_attention_block(
    model: GPT, x: np.ndarray, i: int, cache: KVCache | None, start: int, mask: np.ndarray
) -> np.ndarray:
    # [T, C] -> [T, C]: GPT.attention_block with the tree mask; K/V go to slots start..
    nh, h, C = model.config.n_head, f"h.{i}.attn.", x.shape[-1]
    qkv = model.linear(x, h + "c_attn")  # [T, 3C]
    q, k, v = (split_heads(qkv[:, j * C : (j + 1) * C], nh) for j in range(3))  # [nh, T, hs]
    if cache is not None:  # temporary write, in node order: slot = index, not position
        cache.write(i, start, k, v)
        stop = start + x.shape[0]
        k, v = cache.keys(i, stop), cache.values(i, stop)  # [nh, S, hs]
    return model.linear(merge_heads(tree_attention(q, k, v, mask)), h + "c_proj")


def tree_block(
    model: GPT, x: np.ndarray, i: int, cache: KVCache | None, start: int, mask: np.ndarray
) -> np.ndarray:
    # [T, C] -> [T, C]: GPT.block, the same pre-LayerNorm residual block, tree-masked
    h = f"h.{i}."
    x = x + tree_attention_block(model, model.norm(x, h + "ln_1"), i, cache, start, mask)
    m = model.activation(model.linear(model.norm(x, h + "ln_2"), h + "mlp.c_fc"))
    return x + model.linear(m, h + "mlp.c_proj")


def check_tree_forward(model: GPT, tokens, parents, cache: KVCache | None):
    # every check of tree_hidden, before anything is written -> (tokens [T], parents [P+T])
    tokens = as_token_array(tokens, model.n_vocab)
    pending = 0 if cache is None else cache.pending
    parents = np.asarray(parents)
    n = pending + len(tokens)
    if parents.shape != (n,) or not np.issubdtype(parents.dtype, np.integer):
        raise ValueError(
            f"parents must hold one int per temporary slot: the cache's {pending} pending "
            f"slots and then the {len(tokens)} new tokens, got shape {parents.shape}"
        )
    if np.any(parents < -1) or np.any(parents >= np.arange(n)):
        raise ValueError(
            f"parents[j] must be -1 (right after the committed tokens) or an earlier "
            f"temporary slot, got {parents.tolist()}"
        )
    length = 0 if cache is None else cache.length
    if length + int(depths_of(parents).max()) >= model.config.n_ctx:
        raise ValueError(f"the tree reaches past the model's n_ctx={model.config.n_ctx}")
    if cache is not None:
        check_cache_fits(cache, model.config)
        cache.check_room(len(tokens))
    return tokens, parents.astype(np.int64)


def tree_hidden(model: GPT, tokens, parents, cache: KVCache | None = None) -> np.ndarray:
    # tokens [T], parents [P+T] -> h [T, C], the final hidden states (after ln_f).
    # The cache's P pending slots and the T new tokens form a forest hanging off the
    # committed context: parents[j] is slot j's parent among them (counted from the first
    # temporary slot), -1 if it follows the committed tokens directly. Slot j sits at
    # position length + depth(j) and attends to the committed slots and its own ancestors.
    # A chain (parents -1, 0, 1, ..) is exactly GPT.forward.
    tokens, parents = check_tree_forward(model, tokens, parents, cache)
    length = 0 if cache is None else cache.length
    start = length if cache is None else cache.end  # where the new K/V are written
    new = slice(len(parents) - len(tokens), len(parents))
    positions = position_ids(parents, length)[new]  # [T]
    # [T, S]: every committed slot, then ancestors-or-self among the temporary slots
    mask = np.concatenate(
        [np.ones((len(tokens), length), dtype=bool), ancestor_mask(parents)[new]], axis=1
    )
    P = model.params
    x = P["wte.weight"][tokens] + P["wpe.weight"][positions]  # [T, C]
    for i in range(model.config.n_layer):
        x = tree_block(model, x, i, cache, start, mask)
    if cache is not None:
        cache.mark_written(len(tokens))
    return model.norm(x, "ln_f")


def tree_forward(model: GPT, tokens, parents, cache: KVCache | None = None) -> np.ndarray:
    # tokens [T], parents [P+T] -> logits [T, V]: row j is p(. | committed, path to node j)
    return model.logits(tree_hidden(model, tokens, parents, cache))


def chain_parents(m: int) -> np.ndarray:  # -> [m]: -1, 0, 1, .., m-2 (a plain sequence)
    return np.arange(m, dtype=np.int64) - 1


def tree_verification_pass(
    target: GPT, cache: KVCache, context: np.ndarray, tree: Tree, sampling: SamplingParams
) -> tuple[np.ndarray, int, np.ndarray]:
    # context [N] committed tokens, a tree of n nodes -> (p [n, V], m = the catch-up tokens
    # fed, the root included, h [n, C]).
    # ONE target forward over [catch-up tokens before the root, root, nodes 1..n-1]: the
    # catch-up chain is an ordinary sequence ending in the root; the nodes hang below it.
    if cache.pending:
        raise ValueError(f"the target cache has {cache.pending} temporary slots; roll back first")
    new = catch_up_tokens(cache, context)  # ends with the root, context[-1]
    if len(new) == 0 or int(new[-1]) != int(tree.tokens[0]):
        raise ValueError("the tree's root must be the last committed token, not yet cached")
    m = len(new)
    tokens = np.concatenate([new[:-1], tree.tokens])
    parents = np.concatenate([chain_parents(m), tree.parents[1:] + (m - 1)])
    h = tree_hidden(target, tokens, parents, cache)[m - 1 :]  # the root's row and the nodes'
    return probabilities(target.logits(h), sampling), m, h


# ------------------------------------------------------------------------------------------
# 3. Exact multi-candidate acceptance
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeVerification:
    path: tuple[int, ...]  # accepted node ids from depth 1 down (the root excluded)
    token: int  # the sample after the path: residual after rejections, or from a leaf's row

    def emitted(self, tree: Tree) -> list[int]:
        """The path's tokens + [token]."""
        return tree.path_tokens(self.path) + [int(self.token)]


def without_tokens(q: np.ndarray, tokens: Sequence[int]) -> np.ndarray:
    # [V] -> [V] float64: q with `tokens` removed, renormalised; the law of the next sibling
    # drawn without replacement (zeros if nothing is left)
    r = q.astype(np.float64).copy()
    r[list(tokens)] = 0.0
    total = r.sum()
    return r / total if total > 0 else r


def sibling_rows(tree: Tree, node: int) -> list[tuple[int, np.ndarray]]:
    # -> [(child, q_j [V])]: for each child of `node`, in order, the law it was drawn from
    # GIVEN its earlier siblings: its own row for SAMPLED / POINT (drawn independently of
    # them), its row minus the earlier siblings' tokens for WITHOUT_REPLACEMENT
    out, earlier = [], []
    for child in tree.children(node):
        q = tree.q[child]
        if tree.draws[child] == WITHOUT_REPLACEMENT:
            q = without_tokens(q, earlier)
        out.append((child, q))
        earlier.append(int(tree.tokens[child]))
    return out


def verify_tree(p_rows, tree: Tree, rng: np.random.Generator) -> TreeVerification:
    # p_rows [n, V] (row i = target after the path to node i), tree -> TreeVerification
    check_generator(rng)
    check_tree(tree, np.asarray(p_rows).shape[-1])
    p_rows = check_probability_rows(p_rows, "p_rows", ROW_SUM_ATOL)
    if p_rows.shape != tree.q.shape:
        raise ValueError(
            f"p_rows must have shape {tree.q.shape} (one row per node), got {p_rows.shape}"
        )
    return verify_tree_unchecked(p_rows, tree, rng)


def verify_tree_unchecked(p_rows: np.ndarray, tree: Tree, rng) -> TreeVerification:
    # At node s with target row p = p(. | s): for each child x_j in order, drawn from q_j,
    #   accept x_j with probability min(1, p(x_j) / q_j(x_j))  -> descend into x_j
    #   else                        p <- norm(max(0, p - q_j))  (the next sibling faces it)
    # no child accepted (or a leaf): emit a sample of the current p
    node, path = 0, []
    while True:
        p = p_rows[node].astype(np.float64)
        for child, q in sibling_rows(tree, node):
            x = int(tree.tokens[child])
            if accepts(p[x], q[x], rng):
                path.append(child)
                node = child
                break
            p = residual_distribution(p, q)
        else:
            return TreeVerification(tuple(path), sample_token(p, rng))


def verify_tree_law(p_rows: np.ndarray, tree: Tree) -> dict[tuple[tuple[int, ...], int], float]:
    """Exact law of verify_tree's output for a *given* tree: {(path, token): probability}.

    float64 enumeration of the same decisions (the oracle compares it with the target's
    own law in tests/distribution/test_tree_law.py)."""
    law: dict[tuple[tuple[int, ...], int], float] = {}
    p64 = np.asarray(p_rows, dtype=np.float64)

    def walk(node: int, path: tuple[int, ...], reach: float) -> None:
        p = p64[node]
        for child, q in sibling_rows(tree, node):
            x = int(tree.tokens[child])
            a = min(1.0, p[x] / q[x])
            if reach * a > 0:
                walk(child, path + (child,), reach * a)
            reach *= 1.0 - a
            if reach <= 0:
                return
            p = residual_distribution(p, q)
        for y in np.flatnonzero(p > 0):
            law[(path, int(y))] = law.get((path, int(y)), 0.0) + reach * float(p[y])

    walk(0, (), 1.0)
    return law


# ------------------------------------------------------------------------------------------
# 4. KV compaction
# ------------------------------------------------------------------------------------------


def compact(cache: KVCache, slots) -> None:
    # slots [r], increasing temporary-slot indices (0 = the first slot after the committed
    # ones) -> their K/V copied, in every layer, to temporary slots 0..r-1. A node's K/V
    # were computed at position length + depth seeing only its ancestors: once the path
    # sits contiguously, each entry is what a prefill of the path would have written.
    slots = np.asarray(slots, dtype=np.int64)
    if len(slots) and (np.any(np.diff(slots) <= 0) or slots[0] < 0 or slots[-1] >= cache.pending):
        raise ValueError(
            f"compact: slots must be increasing indices of the {cache.pending} temporary "
            f"slots, got {slots.tolist()}"
        )
    src = cache.length + slots
    for layer in range(cache.k.shape[0]):  # gather (a copy), then one temporary write
        cache.write(layer, cache.length, cache.k[layer][:, src], cache.v[layer][:, src])


def kept_slots(n_catch_up: int, path: Sequence[int]) -> np.ndarray:
    # -> the target's temporary slots to keep: the catch-up chain 0..m-1 (the root is m-1),
    # then node a at slot m-1+a
    return np.concatenate([np.arange(n_catch_up), n_catch_up - 1 + np.asarray(path, np.int64)])


# ------------------------------------------------------------------------------------------
# Drafters that build trees
# ------------------------------------------------------------------------------------------


def choose_children(
    logits: np.ndarray, b: int, draw: str, sampling: SamplingParams, rng: np.random.Generator
) -> tuple[list[int], list[np.ndarray]]:
    # logits [V], b children -> (tokens [<= b], their q rows)
    q = probabilities(logits, sampling)  # [V]: the draft's distribution at the parent
    if draw == POINT:  # the draft's b favourites, each a point mass
        top = np.argsort(-logits, kind="stable")[:b]
        return [int(t) for t in top], [np.eye(len(q), dtype=q.dtype)[t] for t in top]
    tokens: list[int] = []
    for _ in range(b):
        if draw == SAMPLED:  # x_j ~ q, independently of x_1..x_{j-1}
            tokens.append(sample_token(q, rng))
        else:  # x_j ~ q without x_1..x_{j-1}, renormalised
            rest = without_tokens(q, tokens)
            if rest.sum() == 0:  # q's support is used up: fewer children
                break
            tokens.append(sample_token(rest, rng))
    return tokens, [q] * len(tokens)


class ModelTreeDrafter:
    """A small GPT that fills a tree shape: b children per node, sampled or its top-b.

    draw = SAMPLED (siblings i.i.d. from q), WITHOUT_REPLACEMENT, or POINT (the top-b tokens
    by the draft's logits, deterministic). The tree grows level by level, one draft forward
    per level (tree_forward over that level's nodes, which see their ancestors' cached
    K/V). Cache discipline: the catch-up tokens and the fed nodes are temporary slots; after
    the round, commit_path keeps the catch-up tokens and the accepted path's fed nodes
    (compacted), and rollback drops the rest; a path's last node is fed next round if its
    K/V were never computed (a leaf: nobody needed its row).
    """

    def __init__(self, model: GPT, shape: TreeShape | Sequence[int], draw: str = SAMPLED):
        if draw not in DRAWS:
            raise ValueError(f"draw must be one of {DRAWS}, got {draw!r}")
        self.model = model
        self.shape = shape if isinstance(shape, TreeShape) else TreeShape.of_widths(shape)
        self.draw = draw
        self.cache = model.new_cache()
        self._n_catch_up = 0
        self._slot_of: dict[int, int] = {}  # tree node -> temporary slot, for fed nodes

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    @property
    def n_ctx(self) -> int:
        return self.model.config.n_ctx

    @property
    def depth(self) -> int:
        return int(self.shape.depths.max())

    def reset(self) -> None:
        self.cache.reset()
        self._n_catch_up, self._slot_of = 0, {}

    def prefill(self, tokens) -> None:
        tokens = as_token_array(tokens, self.n_vocab, "tokens", allow_empty=True)
        if len(tokens):
            self.model.forward(tokens, self.cache)
            self.cache.commit(len(tokens))

    def propose_tree(
        self,
        context: np.ndarray,
        max_depth: int,
        max_nodes: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
    ) -> Tree:
        # context [n] -> Tree of depth <= max_depth with <= max_nodes nodes (root included)
        context = as_token_array(context, self.n_vocab, "context")
        check_sampling(sampling)
        check_generator(rng)
        # room in this cache too: the catch-up tokens and every fed node take a slot
        shape = self.shape.limited(max_depth, min(max_nodes, target_room(self.cache, context)))
        self.cache.rollback()  # a proposal never builds on an earlier, unverified one
        new = catch_up_tokens(self.cache, context)
        V = self.n_vocab
        tokens, parents, q, draws = [int(context[-1])], [-1], [np.zeros(V, np.float32)], [ROOT]
        # the catch-up chain first; the root is its last slot
        slot_parents = list(chain_parents(len(new)))
        logits = {0: tree_forward(self.model, new, slot_parents, self.cache)[-1]}
        self._n_catch_up, self._slot_of = len(new), {0: len(new) - 1}
        node_of = {0: 0}  # shape node -> tree node (a shape node may stay empty)
        shape_parents = np.asarray(shape.parents)
        for d in range(1, int(shape.depths.max()) + 1):
            level = []
            for sp in np.unique(shape_parents[shape.depths == d]):
                if int(sp) not in node_of:
                    continue
                kids = np.flatnonzero(shape_parents == sp)
                parent = node_of[int(sp)]
                picked, rows = choose_children(logits[parent], len(kids), self.draw, sampling, rng)
                for s, t, row in zip(kids, picked, rows, strict=False):
                    node_of[int(s)] = len(tokens)
                    level.append((int(s), len(tokens)))
                    tokens.append(t)
                    parents.append(parent)
                    q.append(row)
                    draws.append(self.draw)
            fed = [(s, n) for s, n in level if np.any(shape_parents == s)]  # rows needed
            if fed:
                for _, n in fed:
                    slot_parents.append(self._slot_of[parents[n]])
                    self._slot_of[n] = len(slot_parents) - 1
                rows = tree_forward(
                    self.model, [tokens[n] for _, n in fed], slot_parents, self.cache
                )
                for (_, n), row in zip(fed, rows, strict=True):
                    logits[n] = row
        return Tree(
            np.asarray(tokens, np.int64),
            np.asarray(parents, np.int64),
            np.stack(q).astype(np.float32),
            tuple(draws),
        )

    def commit_path(self, path: Sequence[int]) -> None:
        # keep the catch-up tokens and the accepted path's fed nodes, contiguously
        slots = list(range(self._n_catch_up))
        for node in path:
            if node not in self._slot_of:
                break  # a leaf never fed: it is caught up next round
            slots.append(self._slot_of[node])
        compact(self.cache, slots)
        self.cache.commit(len(slots))

    def rollback(self) -> None:
        self.cache.rollback()


def heads_candidates(
    probs: np.ndarray, widths: Sequence[int], budget: int
) -> tuple[list[int], list[int]]:
    # probs [D, V] (head d's estimate for depth d+1), widths [D], budget -> (tokens, parents)
    # of the candidate nodes 1.. in breadth-first order: the Cartesian tree of every head's
    # top-b_d tokens, pruned to the `budget` nodes of largest estimated path probability
    #     P(path) = prod_d probs[d, x_d]     (a child never beats its parent: closed under parents)
    tokens, parents, score, level = [], [], [], [(0, 1.0)]  # level: (node, path probability)
    for d, b in enumerate(widths):
        top = np.argsort(-probs[d], kind="stable")[:b]
        nxt = []
        for node, w in level:
            for t in top:
                tokens.append(int(t))
                parents.append(node)
                score.append(w * float(probs[d, t]))
                nxt.append((len(tokens), score[-1]))
        level = nxt
    # ties go to the earlier (shallower) node, so a kept node's parent is always kept
    order = sorted(range(len(tokens)), key=lambda i: (-score[i], i))[:budget]
    kept = sorted(order)
    new_id = {0: 0} | {old + 1: new + 1 for new, old in enumerate(kept)}
    return [tokens[i] for i in kept], [new_id[parents[i]] for i in kept]


class HeadsTreeDrafter:
    """Extra heads (reference/heads.py) drafting a tree: head d's top-b_d tokens at depth d+1,
    every combination, pruned to `max_nodes` candidates by estimated path probability.

    Every candidate is a point mass chosen from the target's committed state (its last
    hidden state h), so verify_tree judges it with a one-hot q: the output law is the
    target's whatever the heads are. No cache: nothing to commit or roll back."""

    def __init__(self, heads_drafter, widths: Sequence[int], max_nodes: int | None = None):
        # heads_drafter: a reference.heads.HeadsDrafter (its heads and observed state)
        self.heads = heads_drafter
        self.widths = tuple(check_positive_int(b, "a tree width") for b in widths)
        if len(self.widths) > heads_drafter.n_heads:
            raise ValueError(
                f"{len(self.widths)} widths but only {heads_drafter.n_heads} heads: head d "
                f"proposes depth d+1"
            )
        self.max_nodes = None if max_nodes is None else check_positive_int(max_nodes, "max_nodes")

    n_vocab = property(lambda self: self.heads.n_vocab)
    n_ctx = property(lambda self: self.heads.n_ctx)
    depth = property(lambda self: len(self.widths))

    def reset(self) -> None:
        self.heads.reset()

    def prefill(self, tokens) -> None:
        self.heads.prefill(tokens)

    def observe(self, h: np.ndarray) -> None:
        self.heads.observe(h)

    def propose_tree(
        self,
        context: np.ndarray,
        max_depth: int,
        max_nodes: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
    ) -> Tree:
        # context [n] -> Tree of point masses (only the root before the first observe)
        context = as_token_array(context, self.n_vocab, "context")
        check_sampling(sampling)
        check_generator(rng)
        V, root = self.n_vocab, int(context[-1])
        widths = self.widths[:max_depth] if self.heads.h is not None else ()
        budget = max_nodes - 1 if self.max_nodes is None else min(max_nodes - 1, self.max_nodes)
        if widths:
            logits = self.heads.head_logits(self.heads.h, len(widths))  # [D, V]
            # the heads' own estimate at temperature 1 ranks and prunes (the choice is free:
            # point masses stay exact whatever chose them)
            tokens, parents = heads_candidates(softmax(logits), widths, budget)
        else:
            tokens, parents = [], []
        q = np.zeros((1 + len(tokens), V), dtype=np.float32)
        q[np.arange(1, 1 + len(tokens)), tokens] = 1.0
        return Tree(
            np.asarray([root, *tokens], np.int64),
            np.asarray([-1, *parents], np.int64),
            q,
            (ROOT,) + (POINT,) * len(tokens),
        )

    def commit_path(self, path: Sequence[int]) -> None:
        pass

    def rollback(self) -> None:
        pass


# ------------------------------------------------------------------------------------------
# 5. One tree round, and the loop (speculative.run_rounds, shared with the chain)
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeRound:
    """What one tree round did. The loop reads `draft`, `verification` and the statistics'
    three counts: `k` (the depth drafted), `nodes` (the candidates verified) and `examined`
    (the depths the walk judged); the accepted path's length is verification.accepted."""

    tree: Tree
    p: np.ndarray  # [n, V] the verification pass's rows, one per node
    result: TreeVerification
    n_catch_up: int  # committed tokens the target cache lacked (the root included)
    max_depth: int  # the depth asked for (the loop's k for this round)
    target_cache: CacheSpan
    draft_cache: CacheSpan | None

    @property
    def k(self) -> int:  # positions drafted: the tree's depth (a chain round's k_round)
        return self.tree.depth

    @property
    def nodes(self) -> int:  # candidates verified: every node but the root
        return self.tree.n_nodes - 1

    @property
    def examined(self) -> int:  # depths judged along the walk: the accepted ones, and the
        # one below where it stopped if that node had children (all of them rejected)
        path = self.result.path
        stopped_at = path[-1] if path else 0
        return len(path) + int(bool(self.tree.children(stopped_at)))

    @property
    def draft(self) -> Draft:  # the accepted path, as the chain loop sees a draft
        path = list(self.result.path)
        return Draft(self.tree.tokens[path], self.tree.q[path])

    @property
    def verification(self) -> Verification:
        return Verification(len(self.result.path), self.result.token)

    def as_chain_round(self) -> Round:
        # The round as the chain trace can show it: the accepted path, then -- when the
        # walk stopped at a node with children, all rejected -- its first child as the
        # rejected draft (its other siblings are not shown). p: the target rows of those
        # nodes plus the row after the last one, as a chain Round has them.
        path = list(self.result.path)
        kids = self.tree.children(path[-1] if path else 0)
        shown = path + kids[:1]
        draft = Draft(self.tree.tokens[shown], self.tree.q[shown])
        return Round(
            draft,
            self.p[[0, *shown]],
            self.verification,
            self.n_catch_up,
            self.target_cache,
            self.draft_cache,
        )


def target_room(cache: KVCache, context: np.ndarray) -> int:
    # the most tree nodes (root included) that one verification pass can write
    return cache.capacity - len(context) + 1


def tree_round(
    target: GPT,
    cache: KVCache,
    drafter,
    context: np.ndarray,
    k: int,
    sampling: SamplingParams,
    rng: np.random.Generator,
    verify_fn=None,
    clock=None,
) -> TreeRound:
    # context [n] -> TreeRound: draft a tree of depth <= k, verify it in one pass, compact
    # and commit the accepted path in both caches, roll back the rest. `verify_fn`
    # (p [n, V], tree, rng) -> TreeVerification replaces the exact rule (the library's lossy
    # contrast, reference/typical.py, is the one user); None is verify_tree's.
    clock = check_clock(clock)
    draft_cache = getattr(drafter, "cache", None)
    t_before = cache.length
    d_before = draft_cache.length if draft_cache is not None else 0

    tree = drafter.propose_tree(context, k, target_room(cache, context), sampling, rng)  # 1.
    check_tree(tree, target.n_vocab)
    if tree.depth > k or tree.n_nodes > target_room(cache, context):
        raise ValueError(f"the drafter's tree exceeds depth {k} or the cache's room")
    clock.mark("draft")
    p, m, h = tree_verification_pass(target, cache, context, tree, sampling)  # 2.
    clock.mark("target")
    t_written = cache.end
    d_written = draft_cache.end if draft_cache is not None else 0
    decide = verify_tree_unchecked if verify_fn is None else verify_fn
    result = decide(p, tree, rng)  # 3.
    clock.mark("verify")

    keep = kept_slots(m, result.path)  # 4. the path, gathered after the committed slots
    compact(cache, keep)
    cache.commit(len(keep))
    cache.rollback()
    drafter.commit_path(result.path)
    drafter.rollback()
    observe_target(drafter, h[result.path[-1] if result.path else 0])
    return TreeRound(
        tree=tree,
        p=p,
        result=result,
        n_catch_up=m,
        max_depth=k,
        target_cache=CacheSpan(t_before, t_written, cache.length),
        draft_cache=(
            CacheSpan(d_before, d_written, draft_cache.length) if draft_cache is not None else None
        ),
    )


def tree_speculative_generate(
    target: GPT,
    drafter,
    prompt,
    *,
    max_new_tokens: int,
    rng: np.random.Generator,
    k: int | None = None,
    sampling: SamplingParams = SamplingParams(),
    eos_id: int | None = None,
    trace: bool = False,
    clock=None,
    verify_fn=None,
) -> SpeculativeResult:
    # prompt [n] -> SpeculativeResult; k = the depth the trees are cut at (default and at
    # most: the drafter's own depth, so the statistics never count depths no tree has);
    # verify_fn: another tree rule for every round (tree_round), None = the exact one.
    # The loop is speculative.run_rounds with tree_round: the same prefill, stop rules,
    # statistics (per depth, as a chain's per position, plus the nodes verified: see
    # SpeculativeStats) and trace (the accepted path of each round).
    k = drafter.depth if k is None else k
    prompt, k, max_new_tokens, eos_id, clock = check_loop_inputs(
        target, drafter, prompt, k, max_new_tokens, rng, sampling, eos_id, verify_fn, clock
    )
    k = min(k, drafter.depth)
    return run_rounds(
        target,
        drafter,
        prompt,
        k,
        max_new_tokens,
        rng,
        sampling,
        eos_id,
        trace,
        verify_fn,
        clock,
        round_fn=tree_round,
        traced=TreeRound.as_chain_round,
    )


__all__ = [
    "POINT",
    "SAMPLED",
    "WITHOUT_REPLACEMENT",
    "HeadsTreeDrafter",
    "ModelTreeDrafter",
    "Tree",
    "TreeRound",
    "TreeShape",
    "TreeVerification",
    "ancestor_mask",
    "check_tree",
    "compact",
    "tree_forward",
    "tree_hidden",
    "tree_round",
    "tree_speculative_generate",
    "tree_verification_pass",
    "verify_tree",
    "verify_tree_law",
]

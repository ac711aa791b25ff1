"""Drafters that build trees: a draft model filling a static shape, and extra heads.

`ModelTreeDrafter` fills b children per node (sampled, without replacement, or its top-b as
point masses), one draft forward per level; `HeadsTreeDrafter` takes every head's favourites
and keeps the most probable paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from reference.checks import as_token_array, check_generator, check_positive_int
from reference.drafters import DrafterParts
from reference.kv_cache import catch_up_tokens
from reference.model import GPT, softmax
from reference.sampling import SamplingParams, check_sampling, probabilities, sample_token
from reference.tree.compaction import compact
from reference.tree.forward import chain_parents, target_room, tree_forward
from reference.tree.rule import without_tokens
from reference.tree.shape import DRAWS, POINT, ROOT, SAMPLED, Tree, TreeShape


class TreeDrafter(DrafterParts, Protocol):
    """What the tree loop asks of a drafter (the optional parts as for a chain drafter)."""

    n_vocab: int
    n_ctx: int
    depth: int  # the deepest tree it builds

    def reset(self) -> None: ...

    def prefill(self, tokens: np.ndarray) -> None: ...

    def propose_tree(
        self, context: np.ndarray, max_depth: int, max_nodes: int, sampling, rng
    ) -> Tree: ...

    def commit_path(self, path: Sequence[int]) -> None: ...

    def rollback(self) -> None: ...


TREE_PARTS = ("n_vocab", "n_ctx", "depth", "reset", "prefill", "propose_tree", "commit_path")
TREE_PARTS += ("rollback",)


def choose_children(
    logits: np.ndarray, b: int, draw: str, sampling: SamplingParams, rng: np.random.Generator
) -> tuple[list[int], list[np.ndarray]]:
    # logits [V], b children -> (tokens [<= b], their q rows)
    q = probabilities(logits, sampling)  # [V]: the draft's distribution at the parent
    if draw == POINT:  # the draft's b favourites, each a point mass
        top = np.argsort(-logits, kind="stable")[:b]
        return [int(t) for t in top], [point_mass(int(t), q) for t in top]
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


def point_mass(token: int, like: np.ndarray) -> np.ndarray:  # -> [V], one-hot at token
    # built directly: np.eye(V)[t] would make a V x V matrix per child (GBs at GPT-2's V)
    row = np.zeros_like(like)
    row[token] = 1
    return row


class ModelTreeDrafter(TreeDrafter):
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


class HeadsTreeDrafter(TreeDrafter):
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

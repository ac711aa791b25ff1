"""EAGLE-2: an EAGLE drafter growing its tree by its own confidence (a dynamic tree).

A static tree (ModelTreeDrafter) spends its nodes on a fixed shape whatever the drafter
thinks; EAGLE-2 spends them where the drafter is confident. The drafter's confidence in a
node is the product of its probabilities along the path from the root,

    score(node) = prod over the path's nodes x_d of  c_d(x_d)      (score(root) = 1)

c_d the drafter's distribution at the node's parent: softmax of its logits at temperature 1
(as HeadsTreeDrafter ranks: the sampling transform of a greedy round is one-hot, so every
node but the argmax would score 0 and the tree would be a chain). A child never scores more
than its parent. Level by level:

    1. every node chosen for expansion offers its `top` likeliest tokens as children
    2. the `top` children of the level with the largest scores are expanded next: ONE block
       pass over them (a tree pass over the drafter's own cache: each row attends to the
       committed slots, the catch-up rows and its own ancestors), unless no descendant of
       theirs could still enter the budget
    3. at the end (depth levels, or nothing left to expand), the `max_nodes` candidates of
       largest score are the tree, in breadth-first order (closed under parents: a parent
       scores at least as much as its child, and ties go to the earlier node)

Every candidate is a point mass (draws POINT, q one-hot): reference/tree's exact rule keeps
the target's law whatever chose the tokens. The block's input at a node is the fusion of its
token with its parent's output, as a chain step's (reference/eagle.py); the root's is the
last catch-up row, whose output scores depth 1.

Cache discipline (the chain EagleDrafter's): the catch-up rows -- true features -- are the
first temporary slots, the expanded nodes after them; commit_path keeps the catch-up rows
only (the nodes were fed predicted features; the accepted path's true ones arrive through
observe_features, as next round's catch-up), rollback drops the rest. So the committed slots
always equal a fresh prefill of the same (feature, token) history.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from reference.checks import as_token_array, check_generator, check_positive_int
from reference.eagle import EagleDrafter
from reference.model import softmax
from reference.sampling import SamplingParams, check_sampling
from reference.tree.drafters import TreeDrafter
from reference.tree.forward import chain_parents, tree_forward_rows
from reference.tree.shape import POINT, ROOT, Tree


def offered_children(confidence: np.ndarray, top: int) -> np.ndarray:
    # confidence [V] -> the `top` likeliest tokens, best first (ties: the smaller id), only
    # tokens of positive confidence (a token scored 0 could never be worth a node)
    order = np.argsort(-confidence, kind="stable")[:top]
    return order[confidence[order] > 0]


def worth_expanding(scores: list[float], node: int, budget: int) -> bool:
    # A descendant of `node` scores at most score[node] and comes later, so it ranks below
    # every candidate ranked above `node` and below `node` itself: it can enter the `budget`
    # best only if fewer than budget - 1 candidates rank above `node` (later candidates
    # only push it further down).
    s = scores[node]
    above = sum(1 for i, t in enumerate(scores[1:], 1) if t > s or (t == s and i < node))
    return above < budget - 1


def best_candidates(scores: list[float], budget: int) -> list[int]:
    # -> the ids (>= 1) of the `budget` candidates of largest score, in id order (breadth
    # first); ties go to the earlier node, so a kept node's parent is kept
    ranked = sorted(range(1, len(scores)), key=lambda i: (-scores[i], i))[:budget]
    return sorted(ranked)


class EagleTreeDrafter(TreeDrafter):
    """An EagleDrafter (reference/eagle.py) drafting an EAGLE-2 dynamic tree: the nodes of
    largest path confidence, each expanded node offering its `top` likeliest tokens, at most
    `max_nodes` candidates (the root not counted) and `depth` levels."""

    def __init__(
        self, eagle: EagleDrafter, max_nodes: int = 16, depth: int = 6, top: int = 4
    ) -> None:
        if not isinstance(eagle, EagleDrafter):
            raise TypeError(
                f"EagleTreeDrafter grows an EagleDrafter's tree, got {type(eagle).__name__}"
            )
        self.eagle = eagle
        self.max_nodes = check_positive_int(max_nodes, "max_nodes")
        self.depth = check_positive_int(depth, "depth")
        self.top = check_positive_int(top, "top")

    n_vocab = property(lambda self: self.eagle.n_vocab)
    n_ctx = property(lambda self: self.eagle.n_ctx)
    cache = property(lambda self: self.eagle.cache)  # the loop reports its spans
    feature_layers = property(lambda self: self.eagle.feature_layers)  # what the loop hands over

    def reset(self) -> None:
        self.eagle.reset()

    def prefill(self, tokens) -> None:
        self.eagle.prefill(tokens)

    def observe_features(self, x: np.ndarray) -> None:
        # x [m, len(feature_layers) * C]: the kept positions' features, as the chain's
        self.eagle.observe_features(x)

    def confidence(self, f_hat: np.ndarray) -> np.ndarray:
        # f^ [r, C] -> [r, V]: the drafter's distribution at temperature 1 (what ranks nodes)
        t = self.eagle.target
        return softmax(t.logits(t.norm(f_hat, "ln_f")))

    def propose_tree(
        self,
        context: np.ndarray,
        max_depth: int,
        max_nodes: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
    ) -> Tree:
        # context [n] -> Tree of point masses, depth <= max_depth, <= max_nodes nodes (root
        # included); only the root before the target's first feature (a one-token prompt)
        context = as_token_array(context, self.n_vocab, "context")
        check_sampling(sampling)
        check_generator(rng)
        eagle, n = self.eagle, len(context)
        eagle.check_known(n)
        eagle.start_proposal()  # rolls back an earlier, unverified proposal
        tokens, parents, scores = [int(context[-1])], [-1], [1.0]
        budget = min(self.max_nodes, max_nodes - 1)
        levels = min(self.depth, max_depth)
        room = eagle.cache.capacity - (n - 1)  # the drafter's slots left after the catch-up
        if n >= 2 and budget > 0 and levels > 0:
            self.grow(context, levels, budget, room, tokens, parents, scores)
        keep = best_candidates(scores, budget)
        return point_tree(tokens, parents, keep, self.n_vocab)

    def grow(self, context, levels, budget, room, tokens, parents, scores) -> None:
        # the catch-up, then `levels` levels of candidates appended to tokens, parents and
        # scores (node ids in creation order: level by level, children grouped by parent)
        eagle = self.eagle
        f_root = eagle.catch_up(context)  # [C]: f^(n-1), the root's output
        slot_parents = list(chain_parents(eagle.cache.pending))  # its temporary slots so far
        slot_of = {0: len(slot_parents) - 1}  # tree node -> its temporary slot (fed nodes)
        f_hat = {0: f_root}  # fed node -> its block output
        conf = {0: self.confidence(f_root[None])[0]}  # fed node -> [V] its children's c
        expand = [0]
        for d in range(1, levels + 1):
            level = []
            for node in expand:  # in id order, so the parents stay nondecreasing
                for t in offered_children(conf[node], self.top):
                    tokens.append(int(t))
                    parents.append(node)
                    scores.append(scores[node] * float(conf[node][t]))
                    level.append(len(tokens) - 1)
            if d == levels or not level:
                return
            best = sorted(level, key=lambda i: (-scores[i], i))[: min(self.top, room)]
            expand = sorted(i for i in best if worth_expanding(scores, i, budget))
            if not expand:
                return
            room -= len(expand)
            # one block pass over the level: fused [e(token); f^(parent)] rows
            g = eagle.fuse(
                np.array([tokens[i] for i in expand]),
                np.stack([f_hat[parents[i]] for i in expand]),
            )
            for i in expand:
                slot_parents.append(slot_of[parents[i]])
                slot_of[i] = len(slot_parents) - 1
            out = tree_forward_rows(eagle.block_model, g, slot_parents, eagle.cache)  # [r, C]
            rows = self.confidence(out)
            for j, i in enumerate(expand):
                f_hat[i], conf[i] = out[j], rows[j]

    def commit_path(self, path: Sequence[int]) -> None:
        # keep the catch-up rows only (true features); the path's arrive as features
        self.eagle.commit(len(path))

    def rollback(self) -> None:
        self.eagle.rollback()


def point_tree(tokens: list[int], parents: list[int], keep: list[int], n_vocab: int) -> Tree:
    # the root and the candidates `keep` (ids in creation order) -> a Tree of point masses,
    # renumbered breadth-first (keep is closed under parents and in creation order)
    new_id = {0: 0} | {old: new for new, old in enumerate(keep, 1)}
    q = np.zeros((1 + len(keep), n_vocab), dtype=np.float32)
    q[np.arange(1, 1 + len(keep)), [tokens[i] for i in keep]] = 1.0
    return Tree(
        np.asarray([tokens[0], *(tokens[i] for i in keep)], np.int64),
        np.asarray([-1, *(new_id[parents[i]] for i in keep)], np.int64),
        q,
        (ROOT,) + (POINT,) * len(keep),
    )

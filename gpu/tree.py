"""The twin's tree drafts: one target pass over the tree on the device, the walk on the host.

What differs from reference/tree/, and why:
* The pass is the reference's own (`tree_pass_rows`: the model's one forward over a tree's
  placement); the twin model copies the tree's positions and ancestor mask to the device
  once per pass and runs its own kernels. p [n, V] and h [n, C] come out on the device.
* The acceptance walk (`verify_tree_unchecked`) stays on the host, and is the reference's.
  It is sequential -- at each node the children are tried one after another, each against
  the residual its earlier siblings left -- and cheap: a few entries of a few rows and a
  handful of uniforms. On the device it would be a chain of tiny dependent steps with a
  sync per node. So the round brings the pass's p rows back in ONE transfer and walks there
  (a tree, with its q rows, is a host object here too, as it must be for the walk), then
  checks the copy for NaN at no cost. That copy is also what the round and its trace keep.
* KV compaction is the reference's `compact`; the twin's cache gathers the accepted path's
  slots with an index array on the device (`KVCache.gather`): no slot crosses over.
* The drafters draft on the device, and bring back what the host tree needs:
  - ModelTreeDrafter grows the tree a level at a time with the twin's draft model: every
    parent of a level gets its children at once on the device (the top-b by a stable
    argsort; sampled: `inverse_cdf` of one host draw of uniforms per level; without
    replacement: b steps, each removing the tokens already drawn), and ONE transfer per
    level brings back the level's tokens (and, for sampled draws, the parents' q rows the
    walk reads; point masses are one-hot, built on the host). The next level's pass needs
    those tokens on the host: its mask and positions are built from the tree there.
  - HeadsTreeDrafter computes the heads' rows on the device and brings back each depth's
    top-b tokens and estimates in ONE transfer; the pruning is the reference's.
  - EagleTreeDrafter (EAGLE-2) grows its tree as the reference's does, with the twin's
    EagleDrafter: the catch-up and each level's block pass (the fused block, over a tree
    placement of the drafter's own cache) run on the device, and ONE transfer per pass
    brings back each expanded node's `top` likeliest children and their confidences, all
    the growth reads (`confidence`: zero elsewhere, so its ranking and scores are the
    reference's); the choice of nodes, the budget and the tree are the reference's, on the
    host.
  Transfers per round: ModelTreeDrafter one per tree level plus one; HeadsTreeDrafter two;
  EagleTreeDrafter one per block pass (the catch-up, then each expanded level) plus one.
* The pass hands a drafter that reads the target's features (EAGLE's `feature_layers`) the
  kept positions' features, gathered on the device from the pass's rows (catch-up, then
  the accepted path), as the reference's loop does.
* Uniforms are drawn a level at a time, one host call, in the reference's order (parent by
  parent, b each), and the walk draws as the reference's: sampled and point-mass trees give
  the reference's tokens from the same seed. Without replacement, b are drawn per parent
  even when the draft's support runs out (the reference stops drawing): the same law, not
  the same stream. Greedy runs equal the reference's token for token.
The tree, its checks, the rule, the kept slots, the round's record (`TreeRound`, with the
host copy of p, so a trace costs nothing more) and the loop (a `Run` per sequence) are
the reference's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from gpu.device.backend import to_device, to_host, xp
from gpu.drafters import as_twin_drafter, register_twin
from gpu.kv_cache import KVCache
from gpu.model import GPT, as_twin_model, softmax
from gpu.sampling import STABLE, inverse_cdf, probabilities
from gpu.speculative import check_rows_finite, scored_rows
from reference.checks import as_token_array, check_clock, check_generator
from reference.drafters import drafter_feature_layers
from reference.kv_cache import catch_up_tokens
from reference.records import CacheSpan, SpeculativeResult
from reference.sampling import SamplingParams, check_sampling
from reference.speculative import RunSetup, check_loop_inputs, run_keywords, start_run
from reference.tree import (
    POINT,
    ROOT,
    SAMPLED,
    TREE_PARTS,
    Tree,
    TreeRound,
    TreeShape,
    chain_parents,
    check_tree,
    compact,
    heads_candidates,
    kept_slots,
    target_room,
    tree_forward,
    tree_pass_features,
    tree_pass_rows,
    verify_tree_unchecked,
)
from reference.tree import drafters as reference_tree_drafters
from reference.tree import eagle as reference_tree_eagle
from reference.tree.drafters import point_mass

__all__ = [
    "EagleTreeDrafter",
    "HeadsTreeDrafter",
    "ModelTreeDrafter",
    "compact",
    "tree_round",
    "tree_speculative_generate",
    "tree_verification_pass",
]


def tree_verification_pass(
    target: GPT, cache: KVCache, context: np.ndarray, tree: Tree, sampling: SamplingParams
):
    # context [N] committed tokens (host), a tree of n nodes (host) -> (p [n, V], m, h [n, C]),
    # p and h on the device: the reference's pass rows, with the twin's `probabilities`
    h, m = tree_pass_rows(target, cache, context, tree)
    return probabilities(target.logits(h), sampling), m, h


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
    # context [n] -> TreeRound (p: the host copy): the reference's round, with the pass on
    # the device and ONE transfer of its p rows for the walk (plus the drafter's own)
    clock = check_clock(clock)
    draft_cache = drafter.cache
    t_before = cache.length
    d_before = draft_cache.length if draft_cache is not None else 0

    tree = drafter.propose_tree(context, k, target_room(cache, context), sampling, rng)  # 1.
    check_tree(tree, target.n_vocab)
    if tree.depth > k or tree.n_nodes > target_room(cache, context):
        raise ValueError(f"the drafter's tree exceeds depth {k} or the cache's room")
    clock.mark("draft")
    # 2. the verification pass (tree_verification_pass) in the reference's two halves: the
    # target's features of every row it feeds (the layers an EAGLE drafter reads), then p, h
    layers = drafter_feature_layers(drafter)
    x, m = tree_pass_features(target, cache, context, tree, layers)  # [m-1+n, F] on the device
    p, h = scored_rows(target, x, tree.n_nodes - 1, sampling)  # [n, V], [n, C]: one per node
    clock.mark("target")
    t_written = cache.end
    d_written = draft_cache.end if draft_cache is not None else 0
    p = to_host(p)  # the round's transfer back: the walk reads p on the host
    check_rows_finite(bool(np.all(np.isfinite(p))))
    if verify_fn is None:  # 3. walk down the accepted children, then one more token
        result = verify_tree_unchecked(p, tree, rng)
    else:  # another tree rule (typical acceptance, reference/typical.py)
        result = verify_fn(p, tree, rng)
    clock.mark("verify")

    keep = kept_slots(m, result.path)  # 4. the path, gathered after the committed slots
    compact(cache, keep)
    cache.commit(len(keep))
    cache.rollback()
    drafter.commit_path(result.path)
    drafter.rollback()
    drafter.observe(h[result.path[-1] if result.path else 0])  # a device row
    if layers is not None:  # the kept positions' features, gathered on the device
        drafter.observe_features(x[to_device(keep)])  # [m + len(path), F]: the new slots
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


@run_keywords(required=("max_new_tokens", "rng"))
def tree_speculative_generate(target: GPT, drafter, prompt, setup: RunSetup) -> SpeculativeResult:
    # prompt [n] -> SpeculativeResult, with the reference's keywords (RunSetup's fields):
    # the reference's checks and loop (a `Run` per sequence) around the twin's tree round. A
    # reference GPT or tree drafter is accepted too (its twin is built once and remembered),
    # so the oracle can hand the twin its own.
    target, drafter = as_twin_model(target), as_twin_drafter(drafter)
    setup = replace(setup, k=drafter.depth) if setup.k is None else setup
    prompt, setup = check_loop_inputs(target, drafter, prompt, setup, required=TREE_PARTS)
    setup = replace(setup, k=min(setup.k, drafter.depth))
    cache, run = start_run(target, drafter, prompt, setup)
    sampling, rng, verify_fn, clock = setup.sampling, setup.rng, setup.verify_fn, setup.clock
    while not run.finished:  # the reference's loop, with the twin's tree round
        rnd = tree_round(
            target, cache, drafter, run.context, run.next_k(), sampling, rng, verify_fn, clock
        )
        run.record(rnd, traced=TreeRound.as_chain_round)
        clock.mark("other")
    return run.result()


# ---------------------------------------------------------------- the drafters


def choose_children(logits, widths: Sequence[int], draw: str, sampling, rng):
    # logits [P, V] on the device (one level's parents), widths [P] children each
    # -> (P lists of <= b_i token ids, q [P, V] on the host or None for point masses):
    # every parent's children at once on the device, then ONE transfer for the level
    P, b = len(widths), max(widths)
    if draw == POINT:  # the draft's favourites by its logits, as the reference ranks them
        ids = to_host(xp.argsort(-logits, axis=-1, **STABLE)[:, :b])
        return [ids[i, :w].tolist() for i, w in enumerate(widths)], None
    q = probabilities(logits, sampling)  # [P, V]: the draft's distribution at each parent
    u = to_device(rng.random((P, b)))  # one host draw for the level
    if draw == SAMPLED:  # x_j ~ q, independently: every (parent, j) in one inverse CDF
        ids, valid = inverse_cdf(q[:, None, :], u), xp.ones((P, b), dtype=bool)
    else:  # without replacement: x_j ~ q without x_1..x_{j-1}; none once q's support is used
        ids, valid = draw_without_replacement(q, u)
    packed = xp.concatenate(  # float64 holds the ids, the flags and the float32 rows exactly
        [ids.astype(np.float64).ravel(), valid.astype(np.float64).ravel(), q.ravel()]
    )
    host = to_host(packed)  # the level's one transfer
    ids_h = host[: P * b].reshape(P, b).astype(np.int64)
    valid_h = host[P * b : 2 * P * b].reshape(P, b) > 0
    q_h = host[2 * P * b :].reshape(P, -1).astype(np.float32)
    kept = [
        [int(t) for t, ok in zip(ids_h[i, :w], valid_h[i, :w], strict=True) if ok]
        for i, w in enumerate(widths)
    ]
    return kept, q_h


def draw_without_replacement(q, u):
    # q [P, V], u [P, b] on the device -> (ids [P, b], valid [P, b]): column j is drawn from
    # q with columns 0..j-1's tokens removed (unnormalised: `inverse_cdf` scales by the
    # total); valid is False once nothing is left (fewer children, as in the reference)
    rest = q.astype(np.float64)
    vocab = xp.arange(q.shape[-1])
    ids, valid = [], []
    for j in range(u.shape[-1]):
        valid.append(rest.sum(axis=-1) > 0)
        ids.append(inverse_cdf(rest, u[:, j]))
        rest = xp.where(vocab == ids[-1][:, None], 0.0, rest)
    return xp.stack(ids, axis=-1), xp.stack(valid, axis=-1)


class ModelTreeDrafter(reference_tree_drafters.ModelTreeDrafter):
    """The reference's tree drafter on the device: a draft GPT fills the shape a level at a
    time, one draft forward and one transfer per level."""

    def __init__(self, model: GPT, shape: TreeShape | Sequence[int], draw: str = SAMPLED):
        # model: a twin GPT, or a reference one (its twin: weights copied once)
        super().__init__(as_twin_model(model), shape, draw)

    def propose_tree(
        self,
        context: np.ndarray,
        max_depth: int,
        max_nodes: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
    ) -> Tree:
        # context [n] (host) -> a host Tree of depth <= max_depth with <= max_nodes nodes
        context = as_token_array(context, self.n_vocab, "context")
        check_sampling(sampling)
        check_generator(rng)
        shape = self.shape.limited(max_depth, min(max_nodes, target_room(self.cache, context)))
        self.cache.rollback()  # a proposal never builds on an earlier, unverified one
        new = catch_up_tokens(self.cache, context)
        V = self.n_vocab
        tokens, parents, q, draws = [int(context[-1])], [-1], [np.zeros(V, np.float32)], [ROOT]
        slot_parents = list(chain_parents(len(new)))  # the catch-up chain; the root is last
        logits = {0: tree_forward(self.model, new, slot_parents, self.cache)[-1]}  # device rows
        self._n_catch_up, self._slot_of = len(new), {0: len(new) - 1}
        node_of = {0: 0}  # shape node -> tree node (a shape node may stay empty)
        shape_parents = np.asarray(shape.parents)
        for d in range(1, int(shape.depths.max()) + 1):
            groups = [  # (tree parent, its shape children) for the parents the tree has
                (node_of[int(sp)], np.flatnonzero(shape_parents == sp))
                for sp in np.unique(shape_parents[shape.depths == d])
                if int(sp) in node_of
            ]
            if not groups:
                break
            level_logits = xp.stack([logits[parent] for parent, _ in groups])
            picked, rows = choose_children(
                level_logits, [len(kids) for _, kids in groups], self.draw, sampling, rng
            )
            level = []
            for g, ((parent, kids), chosen) in enumerate(zip(groups, picked, strict=True)):
                for s, t in zip(kids, chosen, strict=False):  # fewer: the support ran out
                    node_of[int(s)] = len(tokens)
                    level.append((int(s), len(tokens)))
                    tokens.append(t)
                    parents.append(parent)
                    q.append(point_mass(t, q[0]) if rows is None else rows[g])  # q[0]: zeros [V]
                    draws.append(self.draw)
            fed = [(s, n) for s, n in level if np.any(shape_parents == s)]  # rows needed
            if fed:
                for _, n in fed:
                    slot_parents.append(self._slot_of[parents[n]])
                    self._slot_of[n] = len(slot_parents) - 1
                rows_fed = tree_forward(
                    self.model, [tokens[n] for _, n in fed], slot_parents, self.cache
                )  # [F, V] on the device
                for i, (_, n) in enumerate(fed):
                    logits[n] = rows_fed[i]
        return Tree(
            np.asarray(tokens, np.int64),
            np.asarray(parents, np.int64),
            np.stack(q).astype(np.float32),
            tuple(draws),
        )


def heads_estimates(heads, widths: Sequence[int]) -> np.ndarray:
    # the heads' state h -> [D, V] on the host: head d's estimate (softmax at temperature 1)
    # of its top-b_d tokens, zero elsewhere, brought back in ONE transfer (the b most likely
    # of D rows, not the rows): the zeros rank last, so the reference's pruning
    # (heads_candidates) picks and scores exactly what it would from the full rows
    D, b = len(widths), max(widths)
    probs = softmax(heads.head_logits(heads.h, D))  # [D, V] on the device
    top = xp.argsort(-probs, axis=-1, **STABLE)[:, :b]  # [D, b]
    chosen = xp.take_along_axis(probs, top, axis=-1)
    host = to_host(xp.concatenate([top.astype(np.float64), chosen.astype(np.float64)], axis=-1))
    estimates = np.zeros((D, probs.shape[-1]), dtype=np.float64)
    np.put_along_axis(estimates, host[:, :b].astype(np.int64), host[:, b:], axis=-1)
    return estimates


class HeadsTreeDrafter(reference_tree_drafters.HeadsTreeDrafter):
    """The reference's heads tree on the device: the heads' rows computed there, each
    depth's favourites brought back in one transfer, the tree pruned on the host."""

    def __init__(self, heads_drafter, widths: Sequence[int], max_nodes: int | None = None):
        # heads_drafter: a gpu.HeadsDrafter, or a reference one (its twin, built once)
        super().__init__(as_twin_drafter(heads_drafter), widths, max_nodes)

    def propose_tree(
        self,
        context: np.ndarray,
        max_depth: int,
        max_nodes: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
    ) -> Tree:
        # context [n] (host) -> a host Tree of point masses (only the root before the first
        # observe), as the reference's
        context = as_token_array(context, self.n_vocab, "context")
        check_sampling(sampling)
        check_generator(rng)
        V, root = self.n_vocab, int(context[-1])
        widths = self.widths[:max_depth] if self.heads.h is not None else ()
        budget = max_nodes - 1 if self.max_nodes is None else min(max_nodes - 1, self.max_nodes)
        tokens, parents = [], []
        if widths:
            tokens, parents = heads_candidates(heads_estimates(self.heads, widths), widths, budget)
        q = np.zeros((1 + len(tokens), V), dtype=np.float32)
        q[np.arange(1, 1 + len(tokens)), tokens] = 1.0
        return Tree(
            np.asarray([root, *tokens], np.int64),
            np.asarray([-1, *parents], np.int64),
            q,
            (ROOT,) + (POINT,) * len(tokens),
        )


AT_ONE = SamplingParams(1.0)  # the drafter's own distribution: what ranks a dynamic tree


class EagleTreeDrafter(reference_tree_eagle.EagleTreeDrafter):
    """The reference's EAGLE-2 dynamic tree on the device: the twin's EagleDrafter catches
    up and runs each level's block pass there; each pass's `top` likeliest children per
    node and their confidences come back in one transfer, and the tree grows on the host."""

    def __init__(self, eagle, max_nodes: int = 16, depth: int = 6, top: int = 4) -> None:
        # eagle: a gpu.EagleDrafter, or a reference one (its twin, built once)
        super().__init__(as_twin_drafter(eagle), max_nodes, depth, top)

    def confidence(self, f_hat) -> np.ndarray:
        # f^ [r, C] (device) -> [r, V] on the host: the drafter's distribution at temperature
        # 1 at each row's `top` likeliest tokens, zero elsewhere, in ONE transfer (the top of r
        # rows, not the rows). The zeros rank last and every kept value is the row's own, so
        # the reference's growth (offered_children, the scores) picks and scores exactly
        # what it would from the full rows
        # [r, V]: ln_f and the output layer (one launch), softmax at temperature 1 (one: the
        # fused pick's distribution, the reference's softmax step for step)
        rows = probabilities(self.eagle.target.output(f_hat), AT_ONE)
        top = xp.argsort(-rows, axis=-1, **STABLE)[:, : self.top]  # [r, top], ties: smaller id
        chosen = xp.take_along_axis(rows, top, axis=-1)
        packed = to_host(xp.concatenate([top.astype(np.float64), chosen.astype(np.float64)], -1))
        dense = np.zeros(rows.shape, dtype=np.float32)
        b = top.shape[-1]
        np.put_along_axis(dense, packed[:, :b].astype(np.int64), packed[:, b:], axis=-1)
        return dense


register_twin(
    reference_tree_eagle.EagleTreeDrafter,
    lambda d: EagleTreeDrafter(as_twin_drafter(d.eagle), d.max_nodes, d.depth, d.top),
)
register_twin(
    reference_tree_drafters.ModelTreeDrafter,
    lambda d: ModelTreeDrafter(d.model, d.shape, d.draw),
)
register_twin(
    reference_tree_drafters.HeadsTreeDrafter,
    lambda d: HeadsTreeDrafter(as_twin_drafter(d.heads), d.widths, d.max_nodes),
)

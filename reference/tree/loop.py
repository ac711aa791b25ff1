"""One tree round, and the loop: the chain's loop (a `Run` per sequence) with `tree_round`.

1. draft              the drafter builds a Tree of depth <= k
2. verification pass  ONE target forward over [catch-up tokens, root, nodes 1..n-1]
3. verify_tree        walk down the accepted children; one more token at the end
4. compact, commit    the accepted path gathered after the committed slots; roll back;
                      a drafter that reads the target's features (its `feature_layers`:
                      EAGLE) gets those of the kept positions, catch-up then path, in order
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from reference.checks import check_clock
from reference.drafters import Draft, drafter_feature_layers
from reference.kv_cache import KVCache
from reference.model import GPT
from reference.records import CacheSpan, Round, SpeculativeResult
from reference.sampling import SamplingParams
from reference.speculative import (
    RunSetup,
    check_loop_inputs,
    run_keywords,
    scored_rows,
    start_run,
)
from reference.tree.compaction import compact, kept_slots
from reference.tree.drafters import TREE_PARTS
from reference.tree.forward import target_room, tree_pass_features
from reference.tree.rule import TreeVerification, verify_tree_unchecked
from reference.tree.shape import Tree, check_tree
from reference.verification import Verification


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
    draft_cache = drafter.cache
    t_before = cache.length
    d_before = draft_cache.length if draft_cache is not None else 0

    tree = drafter.propose_tree(context, k, target_room(cache, context), sampling, rng)  # 1.
    check_tree(tree, target.n_vocab)
    if tree.depth > k or tree.n_nodes > target_room(cache, context):
        raise ValueError(f"the drafter's tree exceeds depth {k} or the cache's room")
    clock.mark("draft")
    # 2. the verification pass (tree_verification_pass) in its two halves: the target's
    # features of every row it feeds (the layers an EAGLE drafter reads), then the rows p, h
    layers = drafter_feature_layers(drafter)
    x, m = tree_pass_features(target, cache, context, tree, layers)  # [m-1+n, F]
    p, h = scored_rows(target, x, tree.n_nodes - 1, sampling)  # [n, V], [n, C]: one per node
    clock.mark("target")
    t_written = cache.end
    d_written = draft_cache.end if draft_cache is not None else 0
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
    drafter.observe(h[result.path[-1] if result.path else 0])  # the row of the last token
    if layers is not None:  # the kept positions' features, gathered out of tree order
        drafter.observe_features(x[keep])  # [m + len(path), F]: the target cache's new slots
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
    # prompt [n] -> SpeculativeResult, called with the chain's keywords (RunSetup's fields);
    # k = the depth the trees are cut at (default and at most: the drafter's own depth, so
    # the statistics never count depths no tree has); verify_fn: another tree rule for
    # every round (tree_round), None = the exact one.
    # The chain's loop with tree_round: the same prefill, stop rules, statistics (per
    # depth, as a chain's per position, plus the nodes verified: see SpeculativeStats) and
    # trace (the accepted path of each round), all kept by `Run`.
    setup = replace(setup, k=drafter.depth) if setup.k is None else setup
    prompt, setup = check_loop_inputs(target, drafter, prompt, setup, required=TREE_PARTS)
    setup = replace(setup, k=min(setup.k, drafter.depth))
    cache, run = start_run(target, drafter, prompt, setup)
    sampling, rng, verify_fn, clock = setup.sampling, setup.rng, setup.verify_fn, setup.clock
    while not run.finished:
        rnd = tree_round(
            target, cache, drafter, run.context, run.next_k(), sampling, rng, verify_fn, clock
        )
        run.record(rnd, traced=TreeRound.as_chain_round)
        clock.mark("other")
    return run.result()

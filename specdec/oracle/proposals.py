"""Each drafter's own proposals, held against a law written here from its model's rows.

Verification is exact only if what the drafter hands it is true: every q row is the law its
token was drawn from, and each tree node's label says how it was drawn -- SAMPLED:
independently from its row; WITHOUT_REPLACEMENT: from its row minus its earlier siblings'
tokens; POINT: chosen, a fixed function of the context, with a one-hot row. The loop laws see
a false claim only through the output law or the acceptance, and only for the drafters
their setups run (the tree laws, for instance, on the oracle's own table drafters). Here
every shipped drafter is asked for n proposals from one context, after the loop's own
prefill, and they are held against the law of proposals computed for that drafter:

    chain  key = (x_1, .., x_m)        P(key) = prod_i q_i(x_i),  q_i = row(context + x_<i)
           (a chosen token -- lookup, a hybrid's lookup rounds -- has a one-hot row)
    tree   key = (tokens, parents, draws)
           P(key) = prod over the groups of siblings of
               SAMPLED               prod_j q(x_j)
               WITHOUT_REPLACEMENT   prod_j q(x_j) / (1 - q(x_1) - .. - q(x_{j-1}))
               POINT                 1 for the rule's choice, 0 for any other
           the rules: a static shape's top-b by logit; the heads' most probable paths;
           EAGLE-2's most confident nodes

A proposal's outcome is its key when every q row it hands over equals the oracle's row for
that key (to ROW_ATOL, float32 against float64), and an impossible outcome otherwise (a key
the law gives probability 0 -- a label or a point mass that is not the rule's -- or a row
off). So one chi-square per setup tests the law of the draws and, exactly, the rows and the
labels. The rows come from uncached forwards of the models (the draft model; the
self-drafters as self_drafting.py defines them), made into distributions by a transform
written here (`independent_transform`), never by reference.sampling, which the drafters
use; the rules that choose point masses are written here again.

The twin's drafters (gpu/) answer the same calls with device arrays: `backend="gpu"` builds
each setup's twin (gpu.drafters.as_twin_drafter) and reads its proposals back to the host.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from reference.drafters import ModelDrafter
from reference.eagle import EagleDrafter
from reference.early_exit import EarlyExitDrafter
from reference.heads import HeadsDrafter
from reference.lookup import HybridDrafter, LookupDrafter
from reference.model import GPT
from reference.sampling import SamplingParams
from reference.speculative import prefill, speculative_round
from reference.tree import (
    POINT,
    ROOT,
    SAMPLED,
    WITHOUT_REPLACEMENT,
    EagleTreeDrafter,
    HeadsTreeDrafter,
    ModelTreeDrafter,
    TreeShape,
    tree_round,
    verify_tree_law,
)
from specdec.oracle import optional
from specdec.oracle.laws import (
    CheckResult,
    HybridProposals,
    LookupProposals,
    chi_square_test,
    draft_outcomes,
    tiny_gpt,
)
from specdec.oracle.self_drafting import (
    SELF_TARGET,
    EagleProposals,
    ExitRows,
    HeadsProposals,
    self_setup,
)
from specdec.standins import random_heads

ROW_ATOL = 1e-5  # a handed-over q row (float32, cached) against the oracle's (float64, uncached)

Key = tuple  # a chain: (x_1..x_m); a tree: (tokens, parents, draws)


def independent_transform(logits: np.ndarray, sampling: SamplingParams) -> np.ndarray:
    """[V] logits -> [V] float64: the row a drafter must draw from, written here on its own
    (reference.sampling's `probabilities` is what the drafters use):
        T = 0:  one-hot at argmax z (ties: the smaller id)
        T > 0:  softmax(z / T) over the top_k largest logits (all: None), then the nucleus:
                from the likeliest down, each id whose predecessors hold less than top_p"""
    z = np.asarray(logits, dtype=np.float64)
    if sampling.greedy:
        return one_hot(int(np.argmax(z)), len(z))
    z = (z - z.max()) / sampling.temperature
    if sampling.top_k is not None and sampling.top_k < len(z):
        z = np.where(z >= np.sort(z)[-sampling.top_k], z, -np.inf)
    row = np.exp(z) / np.exp(z).sum()
    if sampling.top_p < 1.0:
        kept, before = np.zeros_like(row), 0.0
        for x in ranked(row, len(row)):
            if before >= sampling.top_p:
                break
            kept[x], before = row[x], before + row[x]
        row = kept / kept.sum()
    return row


AT_ONE = SamplingParams(1.0)  # the drafters' own confidence (heads' and EAGLE-2's ranking)


def ranked(scores: np.ndarray, b: int) -> list[int]:
    # [V] -> the b ids of largest score, best first, ties to the smaller id
    return sorted(range(len(scores)), key=lambda t: (-float(scores[t]), t))[:b]


def one_hot(token: int, V: int) -> np.ndarray:
    row = np.zeros(V)
    row[token] = 1.0
    return row


# --------------------------------------------------------------------------------------------
# Rows: the draft model's, from its uncached forward
# --------------------------------------------------------------------------------------------


class DraftRows:
    """q(. | context) of a draft GPT: the last row of its uncached forward, in float64,
    through the independent transform; `logits` for a rule that ranks by them (top-b)."""

    def __init__(self, model: GPT, sampling: SamplingParams) -> None:
        self.model, self.sampling, self.n_vocab = model, sampling, model.n_vocab
        self._logits: dict[tuple, np.ndarray] = {}

    def logits(self, context: tuple) -> np.ndarray:  # -> [V] float64
        if context not in self._logits:
            z = self.model.forward(np.asarray(context, dtype=np.int64))[-1]
            self._logits[context] = z.astype(np.float64)
        return self._logits[context]

    def __call__(self, context: tuple) -> np.ndarray:  # -> [V]
        return independent_transform(self.logits(context), self.sampling)


# --------------------------------------------------------------------------------------------
# Laws of proposals: outcomes(context) -> (key, Q [n, V], probability)
# --------------------------------------------------------------------------------------------


class ChainLaw:
    """Every chain draft of m <= k tokens at a context: draft_outcomes of the drafter's rows
    (x_i ~ row(context + x_<i)) or of its proposer object (lookup, hybrid, heads, EAGLE)."""

    kind = "chain"

    def __init__(self, rows, k: int) -> None:
        self.rows, self.k = rows, k

    def outcomes(self, context: tuple, limit: int) -> Iterator[tuple[Key, np.ndarray, float]]:
        # limit: a tree's node limit, unused by a chain
        for drafts, Q, w in draft_outcomes(self.rows, context, self.k):
            yield tuple(int(x) for x in drafts), np.asarray(Q, dtype=np.float64), w


class BatchLaw:
    """ROWS rows drafting from one context together (a batch's drafting step), each a chain
    of the draft model: the law of (row 0's drafts, row 1's drafts) is the product of their
    chain laws -- the rows' draws are independent -- and every row's q rows are the chain
    law's (row 2 onwards are held to their rows only)."""

    kind = "batch"

    def __init__(self, chain: ChainLaw) -> None:
        self.chain = chain

    def outcomes(self, context: tuple, limit: int) -> Iterator[tuple[Key, np.ndarray, float]]:
        rows = list(self.chain.outcomes(context, limit))
        for (d0, Q0, w0), (d1, Q1, w1) in itertools.product(rows, repeat=2):
            yield (d0, d1), np.stack([Q0, Q1]), w0 * w1


def sibling_draws(row: np.ndarray, logits: np.ndarray, b: int, draw: str):
    # -> [(tokens, their q rows, probability)] of b siblings under one rule, at one parent
    V = len(row)
    if draw == POINT:  # the draft's b largest logits, each a point mass
        top = ranked(logits, b)
        yield tuple(top), [one_hot(t, V) for t in top], 1.0
    elif draw == SAMPLED:  # i.i.d. from the row
        support = [int(t) for t in np.flatnonzero(row > 0)]
        for tokens in itertools.product(support, repeat=b):
            yield tokens, [row] * b, math.prod(float(row[t]) for t in tokens)
    else:  # sequentially without replacement; fewer once the row's support is used up
        yield from without_replacement(row, b, (), 1.0)


def without_replacement(row: np.ndarray, b: int, tokens: tuple, w: float):
    left = [int(t) for t in np.flatnonzero(row > 0) if int(t) not in tokens]
    if len(tokens) == b or not left:
        yield tokens, [row] * len(tokens), w
        return
    used = math.fsum(float(row[t]) for t in tokens)
    for t in left:  # x_j ~ row(t) / (1 - used)
        yield from without_replacement(row, b, tokens + (t,), w * float(row[t]) / (1.0 - used))


class StaticTreeLaw:
    """ModelTreeDrafter's trees: a static shape filled parent by parent, breadth-first, b
    children each, SAMPLED / WITHOUT_REPLACEMENT from the draft's row at the parent, or its
    top-b logits as POINT masses. A shape node left empty (its siblings used up the row's
    support) has no children."""

    kind = "tree"

    def __init__(self, rows: DraftRows, widths: tuple[int, ...], draw: str) -> None:
        self.rows, self.draw = rows, draw
        self.widths = widths
        self.margin = math.inf  # the top-b cuts' distance from a tie, in logits

    def outcomes(self, context: tuple, limit: int) -> Iterator[tuple[Key, np.ndarray, float]]:
        # the shape's first `limit` nodes (a breadth-first prefix is a tree); its parents in
        # breadth-first order, each with its children: the order the drafter fills them in
        shape = TreeShape.of_widths(self.widths).parents[: max(1, limit)]
        groups = [
            (sp, [i for i, p in enumerate(shape) if p == sp]) for sp in sorted(set(shape[1:]))
        ]
        yield from self.fill(context, groups, [context[-1]], [-1], [None], {0: 0}, 1.0)

    def fill(self, context, groups, tokens, parents, rows, node_of, w):
        # groups: the shape's parents left to fill; node_of: shape node -> tree node
        V = self.rows.n_vocab
        if not groups:
            Q = np.stack([np.zeros(V), *rows[1:]])
            draws = (ROOT,) + (self.draw,) * (len(tokens) - 1)
            yield (tuple(tokens), tuple(parents), draws), Q, w
            return
        (shape_parent, kids), rest = groups[0], groups[1:]
        if shape_parent not in node_of:  # an empty node: nothing below it
            yield from self.fill(context, rest, tokens, parents, rows, node_of, w)
            return
        parent = node_of[shape_parent]
        at = context + path_of(tokens, parents, parent)
        row, logits = self.rows(at), self.rows.logits(at)
        if self.draw == POINT:
            self.margin = min(self.margin, cut_gap(logits, len(kids), relative=False))
        for picked, kid_rows, wk in sibling_draws(row, logits, len(kids), self.draw):
            mapped = dict(node_of) | {s: len(tokens) + j for j, s in enumerate(kids[: len(picked)])}
            yield from self.fill(
                context,
                rest,
                tokens + list(picked),
                parents + [parent] * len(picked),
                rows + kid_rows,
                mapped,
                w * wk,
            )


def path_of(tokens: list, parents: list, node: int) -> tuple:
    # the tokens from the root (excluded) down to `node` (included)
    out = []
    while node > 0:
        out.append(int(tokens[node]))
        node = parents[node]
    return tuple(out[::-1])


def point_tree(tokens: list, parents: list, keep: list[int], V: int):
    # the root and the candidates `keep` (creation ids, closed under parents) -> (key, Q)
    # renumbered in creation order: a breadth-first tree of point masses
    new = {0: 0} | {old: i + 1 for i, old in enumerate(keep)}
    key_tokens = (int(tokens[0]),) + tuple(int(tokens[i]) for i in keep)
    key_parents = (-1,) + tuple(new[parents[i]] for i in keep)
    Q = np.stack([np.zeros(V)] + [one_hot(int(tokens[i]), V) for i in keep])
    return (key_tokens, key_parents, (ROOT,) + (POINT,) * len(keep)), Q


def best_nodes(scores: list[float], budget: int) -> list[int]:
    # the `budget` candidates (ids >= 1) of largest score, ties to the earlier, in id order
    return sorted(sorted(range(1, len(scores)), key=lambda i: (-scores[i], i))[:budget])


class HeadsTreeLaw:
    """HeadsTreeDrafter's one tree: head d's top-b_d tokens (by its softmax at T = 1) at depth
    d + 1, every combination, the `budget` most probable paths (prod of the heads' estimates
    along the path) kept; point masses. Only the root before the target's first row."""

    kind = "tree"

    def __init__(self, heads: HeadsProposals, widths, max_nodes: int | None) -> None:
        self.heads, self.widths, self.max_nodes = heads, tuple(widths), max_nodes
        self.margin = math.inf

    def outcomes(self, context: tuple, limit: int):
        budget = limit - 1 if self.max_nodes is None else min(limit - 1, self.max_nodes)
        V = self.heads.n_vocab
        tokens, parents, scores = [context[-1]], [-1], [1.0]
        if len(context) >= 2:
            est = self.heads.rows(context, len(self.widths))  # [D, V] at T = 1
            level = [0]
            for d, b in enumerate(self.widths):
                top = ranked(est[d], b)
                self.margin = min(self.margin, cut_gap(est[d], b))
                nxt = []
                for node in level:
                    for t in top:
                        tokens.append(t)
                        parents.append(node)
                        scores.append(scores[node] * float(est[d, t]))
                        nxt.append(len(tokens) - 1)
                level = nxt
        self.margin = min(self.margin, score_gap(scores))
        key, Q = point_tree(tokens, parents, best_nodes(scores, budget), V)
        yield key, Q, 1.0


class Eagle2TreeLaw:
    """EagleTreeDrafter's one tree (EAGLE-2), grown from rows computed here: the root's
    confidence c_0 = softmax at T = 1 of the EAGLE block's last output over the fused rows
    [e(x(t+1)); f(t)] W + b of the context (true features f from an uncached forward of the
    target); a node's, of the block run over those rows and its ancestors' [e(token);
    f^(parent)]. Level by level: every expanded node offers its `top` likeliest tokens
    (confidence > 0, ties to the smaller id) with score = score(parent) c_parent(token); the
    `top` best children of the level (fewer if the drafter's cache has no room) are expanded
    next, each only if fewer than budget - 1 candidates rank above it; at the end the
    `budget` best candidates, point masses, in creation order."""

    kind = "tree"

    def __init__(self, eagle: EagleProposals, max_nodes: int, depth: int, top: int) -> None:
        self.eagle, self.max_nodes, self.top, self.depth = eagle, max_nodes, top, depth
        self.capacity = eagle.target.config.n_ctx  # the drafter's cache: the target's n_ctx
        self.margin = math.inf

    def outcomes(self, context: tuple, limit: int):
        tokens, parents, scores = [context[-1]], [-1], [1.0]
        budget = min(self.max_nodes, limit - 1)
        if len(context) >= 2 and budget > 0 and self.depth > 0:
            self.grow(context, budget, tokens, parents, scores)
        self.margin = min(self.margin, score_gap(scores))
        key, Q = point_tree(tokens, parents, best_nodes(scores, budget), self.eagle.n_vocab)
        yield key, Q, 1.0

    def grow(self, context, budget, tokens, parents, scores) -> None:
        eagle, n = self.eagle, len(context)
        fused = {0: eagle.start(context)}  # node -> rows: the catch-up's g(0..n-2) (EAGLE-3's
        # reduced features too)
        conf, f_hat = {}, {}
        conf[0], f_hat[0] = eagle.row(fused[0])
        room, expand = self.capacity - (n - 1), [0]
        for d in range(1, self.depth + 1):
            level = []
            for node in expand:
                self.margin = min(self.margin, cut_gap(conf[node], self.top))
                for t in ranked(conf[node], self.top):
                    if conf[node][t] > 0:
                        tokens.append(t)
                        parents.append(node)
                        scores.append(scores[node] * float(conf[node][t]))
                        level.append(len(tokens) - 1)
            if d == self.depth or not level:
                return
            best = sorted(level, key=lambda i: (-scores[i], i))[: min(self.top, room)]
            expand = sorted(i for i in best if self.ranks_above(scores, i) < budget - 1)
            if not expand:
                return
            room -= len(expand)
            for i in expand:
                fused[i] = fused[parents[i]] + [eagle.fused(tokens[i], f_hat[parents[i]])]
                conf[i], f_hat[i] = eagle.row(fused[i])

    @staticmethod
    def ranks_above(scores: list[float], node: int) -> int:
        # candidates ranked above `node`: a larger score, or the same and created earlier
        s = scores[node]
        above = [i for i in range(1, len(scores)) if scores[i] > s or (scores[i] == s and i < node)]
        return len(above)


def cut_gap(row: np.ndarray, b: int, relative: bool = True) -> float:
    # how far a top-b cut is from a tie: the b-th largest minus the (b+1)-th (relative to
    # the largest, for probabilities; as it is, for logits)
    z = np.sort(np.asarray(row, dtype=np.float64))[::-1]
    if b >= len(z):
        return math.inf
    return float(z[b - 1] - z[b]) / (max(float(z[0]), 1e-300) if relative else 1.0)


def score_gap(scores: list[float]) -> float:
    # how far the ranking of the candidates' scores is from a tie, relative
    s = np.sort(np.asarray(scores[1:], dtype=np.float64))
    gaps = np.diff(s) / np.maximum(s[1:], 1e-300)
    return float(gaps.min()) if len(gaps) else math.inf


# --------------------------------------------------------------------------------------------
# Setups: a drafter, its law, a context, a sampling transform and a sample size
# --------------------------------------------------------------------------------------------

# the models: tiny_gpt's (n_embd, n_layer, n_head, std, seed) at V = 5, n_ctx = 16 (a target,
# and an independent draft); the tree family's pair at V = 3 ((V, n_ctx, ...) in full)
CHAIN_TARGET, CHAIN_DRAFT = (16, 1, 2, 0.9, 11), (16, 1, 2, 0.9, 12)
TREE_TARGET, TREE_DRAFT = (3, 16, 12, 2, 2, 0.8, 21), (3, 16, 8, 1, 2, 0.8, 22)
LOOKUP_RULE = (2, 2, "longest")  # (max_ngram, min_ngram, prefer) of the lookup and the hybrid
EAGLE2 = (6, 3, 3)  # EAGLE-2's (max_nodes, depth, top): a budget that prunes, three levels
HEADS_TREE_NODES = 6  # the heads tree's node budget (it prunes 3 + 6 + 12 candidates)
BATCH_ROWS = 3  # rows of the batched-drafting setup, all drafting from one context


@dataclass(frozen=True)
class ProposalSetup:
    """One drafter proposing from one context: how to build it and its law."""

    name: str
    drafter: str  # which shipped drafter (see `make_parts`)
    prompt: tuple[int, ...]
    k: int  # a chain's draft length; a tree's depth limit
    sampling: SamplingParams
    n: int  # proposals of the sampled check
    seed: int
    widths: tuple[int, ...] = ()  # a static or heads tree's widths
    draw: str = SAMPLED  # a static tree's rule
    twin: bool = True  # the twin (gpu/) has this drafter

    def at(self, sampling: SamplingParams, n: int) -> ProposalSetup:
        return replace(self, sampling=sampling, n=n)

    @cached_property
    def parts(self):
        return make_parts(self)


def make_parts(setup: ProposalSetup) -> tuple[GPT, Callable, Callable]:
    """-> (target, a fresh reference drafter, law(sampling)) of the setup's drafter."""
    name, k = setup.drafter, setup.k
    if name in ("model", "fast-model", "lookup", "hybrid"):
        return draft_model_parts(name, k)
    if name == "batch-model":
        target, make, law = draft_model_parts("model", k)
        return target, lambda: [make() for _ in range(BATCH_ROWS)], lambda s: BatchLaw(law(s))
    if name == "tree":
        draft, target = tiny_gpt(*TREE_DRAFT), tiny_gpt(*TREE_TARGET)
        return (
            target,
            lambda: ModelTreeDrafter(draft, setup.widths, setup.draw),
            lambda s: StaticTreeLaw(DraftRows(draft, s), setup.widths, setup.draw),
        )
    return self_drafting_parts(name, k, setup.widths)


def draft_model_parts(name: str, k: int):
    # the loop family's pair (V = 5): a draft model, the compiled draw, lookup, hybrid
    V, rule = 5, LOOKUP_RULE
    target, draft = tiny_gpt(V, 16, *CHAIN_TARGET), tiny_gpt(V, 16, *CHAIN_DRAFT)
    if name == "lookup":
        return (
            target,
            lambda: LookupDrafter(V, 16, *rule),
            lambda s: ChainLaw(LookupProposals(V, *rule), k),
        )
    if name == "hybrid":
        return (
            target,
            lambda: HybridDrafter(LookupDrafter(V, 16, *rule), ModelDrafter(draft)),
            lambda s: ChainLaw(HybridProposals(LookupProposals(V, *rule), DraftRows(draft, s)), k),
        )
    if name == "fast-model":
        FastModelDrafter = optional.compiled_draw().FastModelDrafter

        return target, lambda: FastModelDrafter(draft), lambda s: ChainLaw(DraftRows(draft, s), k)
    return target, lambda: ModelDrafter(draft), lambda s: ChainLaw(DraftRows(draft, s), k)


def self_drafting_parts(name: str, k: int, widths: tuple[int, ...]):
    # the self-drafting family's two-block target (V = 5) and its stand-ins (part seed 2)
    kw = {"early-exit": {"exit_layer": 1}, "heads": {"n_heads": 2}}.get(name, {"eagle": True})
    parts = self_setup("parts", AT_ONE, 2, 4, (3, 0), part_seed=2, **kw)
    target = parts.target_model()
    T = independent_transform
    if name == "early-exit":
        head = parts.exit_head()
        return (
            target,
            lambda: EarlyExitDrafter(target, 1, head),
            lambda s: ChainLaw(ExitRows(target, 1, head, s, T), k),
        )
    if name == "heads":
        heads = parts.heads()
        return (
            target,
            lambda: HeadsDrafter(target, heads),
            lambda s: ChainLaw(HeadsProposals(target, heads, s, T), k),
        )
    if name == "tree-heads":
        heads = random_heads(SELF_TARGET[0], len(widths), seed=5)
        return (
            target,
            lambda: HeadsTreeDrafter(HeadsDrafter(target, heads), widths, HEADS_TREE_NODES),
            lambda s: HeadsTreeLaw(
                HeadsProposals(target, heads, AT_ONE, T), widths, HEADS_TREE_NODES
            ),
        )
    eagle = parts.eagle_params()
    if name == "eagle":
        return (
            target,
            lambda: EagleDrafter(target, eagle),
            lambda s: ChainLaw(EagleProposals(target, eagle, s, T), k),
        )
    return (  # eagle-tree
        target,
        lambda: EagleTreeDrafter(EagleDrafter(target, eagle), *EAGLE2),
        lambda s: Eagle2TreeLaw(EagleProposals(target, eagle, AT_ONE, T), *EAGLE2),
    )


GREEDY_N = 50  # proposals of a point-mass law (T = 0, or a deterministic drafter)
S = SamplingParams
# One setup per drafter (two for the hybrid: a context the lookup matches, and one it does
# not), each checked at its T > 0 and at T = 0 (GREEDY_N proposals). Prompts were picked
# among a few so that the T > 0 laws are spread (8-39 cells at n = 2 000) and each rule's
# choices sit away from ties (test_proposal_laws.py checks the margins). A deterministic
# drafter's law is one proposal at any T: GREEDY_N proposals show it, any other is impossible.
PROPOSAL_SETUPS: dict[str, ProposalSetup] = {
    s.name: s
    for s in [
        ProposalSetup("model", "model", (1, 0, 2), 2, S(1.3), 2_000, 601),
        ProposalSetup("fast-model", "fast-model", (1, 0, 2), 2, S(1.3), 2_000, 603, twin=False),
        ProposalSetup("lookup", "lookup", (4, 2, 2, 0, 4, 2), 2, S(1.3), GREEDY_N, 604),
        ProposalSetup("hybrid-lookup", "hybrid", (4, 2, 2, 0, 4, 2), 2, S(1.3), GREEDY_N, 605),
        # its draws are its fallback's, ModelDrafter.draw (held at full n in "model"); its
        # own part -- who proposes, what rows -- is exact: a few proposals show it
        ProposalSetup("hybrid-fallback", "hybrid", (1, 0, 2), 2, S(1.3), GREEDY_N, 606),
        ProposalSetup("early-exit", "early-exit", (3, 0), 2, S(1.3), 2_000, 607),
        ProposalSetup("heads", "heads", (0, 2), 2, S(1.3), 2_000, 608),
        ProposalSetup("eagle", "eagle", (1, 0, 2), 2, S(1.3), 2_000, 609),
        ProposalSetup("tree-sampled", "tree", (0, 2), 2, S(1.3), 2_000, 610, (2, 1), SAMPLED),
        ProposalSetup(
            "tree-without", "tree", (0, 2), 2, S(1.3), 2_000, 611, (2, 1), WITHOUT_REPLACEMENT
        ),
        ProposalSetup("tree-top-b", "tree", (1, 0, 2), 3, S(1.3), GREEDY_N, 612, (2, 1, 1), POINT),
        ProposalSetup("tree-heads", "tree-heads", (1, 3), 3, S(1.3), GREEDY_N, 613, (3, 2, 2)),
        ProposalSetup("eagle-tree", "eagle-tree", (3, 0), 3, S(0.8), GREEDY_N, 614),
        # a batch's drafting step: the reference's rows one after another from one rng, the
        # twin's BatchModelDrafter (one pass per step for every row)
        ProposalSetup("batch-model", "batch-model", (1, 0, 2), 2, S(1.3), 2_000, 615),
    ]
}


# --------------------------------------------------------------------------------------------
# Sampling the real drafter, and the checks
# --------------------------------------------------------------------------------------------

N_CTX = 16  # every setup's models' context (and so every cache's capacity)


def node_limit(context: tuple) -> int:
    # the nodes (root included) one verification pass can hold after `context`: what the
    # tree loop asks a drafter for (reference.tree.target_room)
    return N_CTX - len(context) + 1


def on_backend(target: GPT, drafter, backend: str):
    # -> (target, drafter) of the backend: the reference's, or the twin's of both
    if backend == "reference":
        return target, drafter
    gpu = optional.twin()

    return gpu.model.as_twin_model(target), gpu.drafters.as_twin_drafter(drafter)


def host(array) -> np.ndarray:
    # a proposal's array on the host (the twin's are device arrays)
    if isinstance(array, np.ndarray):
        return array
    gpu = optional.twin()

    return gpu.device.backend.to_host(array)


def started(setup: ProposalSetup, backend: str, drafter=None):
    # -> (target, its cache, drafter) on the backend, after the loop's own prefill of the
    # setup's prompt; `drafter`: a (broken) reference drafter instead of the setup's
    target, make, _ = setup.parts
    drafter = make() if drafter is None else drafter
    if setup.drafter == "batch-model":
        return target, None, batch_drafting(drafter, backend, setup.prompt)
    target, drafter = on_backend(target, drafter, backend)
    cache = target.new_cache()
    prefill(target, cache, drafter, np.asarray(setup.prompt, dtype=np.int64))
    return target, cache, drafter


def batch_drafting(drafters: list, backend: str, prompt: tuple):
    # the rows' drafting step of each backend's batch, prefilled on one prompt per row:
    # the reference's drafters, proposing one after another (reference/batch.py); the
    # twin's BatchModelDrafter, every row in one pass (gpu/device/batch_drafting.py)
    prompts = [np.asarray(prompt, dtype=np.int64)] * len(drafters)
    if backend == "reference":
        for drafter in drafters:
            drafter.reset()
            drafter.prefill(prompts[0][:-1])
        return drafters
    gpu = optional.twin()

    twins = [gpu.drafters.as_twin_drafter(d) for d in drafters]
    drafting = gpu.batch.batch_drafting(twins)  # a BatchModelDrafter: one draft model, 3 rows
    drafting.prefill(prompts, None, None)  # (the target's rows are not read by a draft model)
    return drafting


def propose(drafter, kind: str, context: tuple, k: int, sampling, rng) -> tuple[Key, np.ndarray]:
    # one proposal from `context`, on the host -> (key, q rows [m or n, V] float64)
    tokens = np.asarray(context, dtype=np.int64)
    if kind == "batch":
        return propose_batch(drafter, tokens, k, sampling, rng)
    if kind == "chain":
        draft = drafter.propose(tokens, k, sampling, rng)
        key = tuple(int(x) for x in host(draft.tokens))
        return key, host(draft.q).astype(np.float64)
    tree = drafter.propose_tree(tokens, k, node_limit(context), sampling, rng)
    return tree_key(tree), np.asarray(tree.q, dtype=np.float64)


def propose_batch(drafting, context: np.ndarray, k: int, sampling, rng):
    # -> ((row 0's drafts, row 1's drafts, ...), q rows [B, k, V]): one drafting step of the
    # batch, every row from `context`
    if isinstance(drafting, list):  # the reference's rows, in order, from one rng
        drafts = [d.propose(context, k, sampling, rng) for d in drafting]
        tokens = [tuple(int(x) for x in d.tokens) for d in drafts]
        return tuple(tokens), np.stack([d.q for d in drafts]).astype(np.float64)
    B = len(drafting.drafters)
    batch = drafting.propose([context] * B, [k] * B, sampling, rng, drafting.model.n_vocab)
    tokens = host(batch.tokens)
    return tuple(tuple(int(x) for x in row) for row in tokens), host(batch.q).astype(np.float64)


def tree_key(tree) -> Key:
    return (
        tuple(int(t) for t in tree.tokens),
        tuple(int(p) for p in tree.parents),
        tuple(tree.draws),
    )


def outcome_of(key: Key, q: np.ndarray, rows: dict[Key, np.ndarray]) -> tuple:
    """The key when the law has it and every handed-over row is the law's; else an outcome
    the law gives probability 0, naming what was wrong. A batch's key (every row's drafts)
    is read as its first two rows' (the law's), every row's q held to its own drafts'."""
    if q.ndim == 3:  # a batch: [B, k, V]
        single = {d: Q[0] for (d, _), Q in rows.items()}
        for b, (drafts, q_b) in enumerate(zip(key, q, strict=True)):
            if outcome_of(drafts, q_b, single) != drafts:
                return (f"row {b}: " + outcome_of(drafts, q_b, single)[0], key)
        key, q = key[:2], q[:2]
    if key not in rows:
        return ("not a proposal of the rule", key)
    expected = rows[key]
    if q.shape != expected.shape:
        return (f"q of shape {q.shape}, the law's {expected.shape}", key)
    off = float(np.max(np.abs(q - expected), initial=0.0))
    return key if off <= ROW_ATOL else (f"q rows off by {off:.3g}", key)


def law_at(law_obj, context: tuple) -> tuple[dict[Key, float], dict[Key, np.ndarray]]:
    # -> ({key: probability}, {key: Q}) of the proposals at `context`
    law: dict[Key, float] = {}
    rows: dict[Key, np.ndarray] = {}
    for key, Q, w in law_obj.outcomes(context, node_limit(context)):
        if w > 0:
            law[key] = law.get(key, 0.0) + w
            rows[key] = Q
    return law, rows


def proposal_law(setup: ProposalSetup):
    # -> ({key: probability}, {key: Q}, the law object) at the setup's prompt and sampling
    law_obj = setup.parts[2](setup.sampling)
    return (*law_at(law_obj, tuple(setup.prompt)), law_obj)


def sample_proposals(
    setup: ProposalSetup, backend: str, n: int | None = None, drafter=None
) -> Counter:
    """n proposals of the setup's drafter (or `drafter`, a broken one) from its prompt, each
    reduced to its outcome (outcome_of). Every drafter's propose starts by rolling back an
    earlier, unverified proposal, so each starts from the state prefill left."""
    _, rows, law_obj = proposal_law(setup)
    _, _, ready = started(setup, backend, drafter)
    rng = np.random.default_rng(setup.seed)
    counts: Counter = Counter()
    for _ in range(setup.n if n is None else n):
        key, q = propose(ready, law_obj.kind, setup.prompt, setup.k, setup.sampling, rng)
        counts[outcome_of(key, q, rows)] += 1
    return counts


def proposal_check(
    setup: ProposalSetup, backend: str, n: int | None = None, drafter=None
) -> CheckResult:
    """The chi-square of the drafter's proposals against the law of proposals (exact rows
    and labels inside: a proposal that is not true is an impossible outcome)."""
    law, _, _ = proposal_law(setup)
    name = f"{setup.name}:{'T=0' if setup.sampling.greedy else 'T>0'}"
    return chi_square_test(sample_proposals(setup, backend, n, drafter), law, name)


def greedy(setup: ProposalSetup) -> ProposalSetup:
    return setup.at(SamplingParams(0.0), GREEDY_N)


def round_function(kind: str, backend: str) -> Callable:
    # the backend's own round: (target, cache, drafter, context, k, sampling, rng) -> a round
    if backend == "reference":
        return speculative_round if kind == "chain" else tree_round
    gpu = optional.twin()

    return gpu.speculative.speculative_round if kind == "chain" else gpu.tree.tree_round


def proposed_and_emitted(rnd, kind: str) -> tuple[Key, np.ndarray, tuple]:
    # a round -> (its proposal's key, its q rows on the host, the tokens it emitted)
    if kind == "chain":
        tokens = tuple(int(x) for x in host(rnd.draft.tokens))
        v = rnd.verification
        return tokens, host(rnd.draft.q).astype(np.float64), tokens[: v.accepted] + (v.token,)
    tree, result = rnd.tree, rnd.result
    emitted = tuple(tree.path_tokens(result.path)) + (int(result.token),)
    return tree_key(tree), np.asarray(tree.q, dtype=np.float64), emitted


def proposals_along_rounds(
    setup: ProposalSetup, backend: str, runs: int = 2, rounds: int = 3, drafter=None
) -> list[tuple]:
    """Real rounds of the backend's loop (prefill, then `rounds` rounds, `runs` times), each
    round's proposal held against the law at its own context: the outcomes that are not
    true (empty for a drafter whose caches, catch-ups and commits keep it on its law).
    What the fixed-context check cannot see: a drafter right after prefill but wrong after
    a round that kept or rejected its drafts."""
    law_obj = setup.parts[2](setup.sampling)
    step = round_function(law_obj.kind, backend)
    rng = np.random.default_rng(setup.seed)
    wrong = []
    for _ in range(runs):
        target, cache, ready = started(setup, backend, drafter)
        context = tuple(setup.prompt)
        for _ in range(rounds):
            if node_limit(context) < 2:
                break
            k = setup.k if law_obj.kind == "tree" else min(setup.k, node_limit(context) - 1)
            rnd = step(target, cache, ready, np.asarray(context), k, setup.sampling, rng)
            key, q, emitted = proposed_and_emitted(rnd, law_obj.kind)
            _, rows = law_at(law_obj, context)
            outcome = outcome_of(key, q, rows)
            if outcome != key:
                wrong.append((context, outcome))
            context += emitted
    return wrong


def tree_output_law(p_rows, prompt: tuple, tree, length: int) -> dict:
    """The law of the first `length` tokens when the verifier is handed `tree` (a fixed,
    deterministic tree) at `prompt`: verify_tree_law of the tree, its rows p_rows along each
    node's path, then the target's own rows. For a tree that tells the truth about how its
    nodes were drawn, this is the target's law (test_tree_law.py); a chosen node labelled
    sampled is judged as if drawn, and the law moves."""
    parents = [int(x) for x in tree.parents]
    p = np.stack([p_rows(prompt + path_of(tree.tokens, parents, i)) for i in range(tree.n_nodes)])
    law: dict = {}

    def extend(out: tuple, w: float) -> None:
        if len(out) == length:
            law[out] = law.get(out, 0.0) + w
            return
        row = p_rows(prompt + out)
        for y in np.flatnonzero(row > 0):
            extend(out + (int(y),), w * float(row[y]))

    for (path, token), m in verify_tree_law(p, tree).items():
        if m > 0:
            extend(tuple(tree.path_tokens(path)) + (int(token),), m)
    return law

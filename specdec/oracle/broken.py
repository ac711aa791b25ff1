"""A catalogue of broken speculative samplers: the oracle must reject every one of them.

Each entry is one small, realistic mistake, written as a function with the signature of
`reference.verification.verify` (the first six) or of `reference.speculative.speculative_generate`
(most of the rest); the last three break what only the newer laws see: a drafter's own
proposal, the compiled draw, the twin's batched drafting. Some of them change the output
law; the cache bugs of the draft model do not (the draft's q is still the law its tokens
came from, so verification stays exact) and show only in the law of the accepted count, and
neither do two of the three EAGLE bugs (a feature one position off, predicted features kept
in the cache: the drafter reads the wrong thing, but only ever committed tokens and its own
drafts). test_power.py runs each through the same checks and thresholds as the real oracle
and asserts that it is rejected; for the EAGLE drafters it also holds their q rows against
the oracle's, row by row (exact).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache, partial
from unittest import mock

import numpy as np

import reference.speculative as speculative
from reference.config import LlamaConfig
from reference.drafters import Draft, ModelDrafter
from reference.eagle import EagleDrafter, block_prefix
from reference.early_exit import EarlyExitDrafter
from reference.heads import HeadsDrafter
from reference.kv_cache import KVCache
from reference.lookup import HybridDrafter, LookupDrafter, lookup_continuation, point_mass_rows
from reference.model import GPT, causal_placement
from reference.sampling import SamplingParams, probabilities, sample_token
from reference.speculative import speculative_generate
from reference.tree import ROOT, SAMPLED, EagleTreeDrafter, Tree
from reference.tree.eagle import best_candidates
from reference.verification import Verification
from specdec.oracle import optional

# --------------------------------------------------------------------------------------------
# Broken `verify`s: (p_target [k+1, V], q_draft [k, V], draft_tokens [k], rng) -> Verification
# --------------------------------------------------------------------------------------------


def normalised(r: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    return r / r.sum() if r.sum() > 0 else fallback / fallback.sum()


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:  # the correct norm(max(0, p - q))
    return normalised(np.maximum(p - q, 0.0), p)


def swapped_ratio(p_target, q_draft, draft_tokens, rng) -> Verification:
    """Accepts with min(1, q(x)/p(x)): DeepMind's letters (q = target) read with ours."""
    for i, x in enumerate(draft_tokens):
        ratio = q_draft[i, x] / p_target[i, x] if p_target[i, x] > 0 else np.inf
        if rng.random() >= min(1.0, ratio):
            return Verification(i, sample_token(residual(p_target[i], q_draft[i]), rng))
    return Verification(len(draft_tokens), sample_token(p_target[-1], rng))


def unnormalised_residual(p_target, q_draft, draft_tokens, rng) -> Verification:
    """Samples the residual max(0, p - q) with an inverse CDF that assumes it sums to 1:
    u ~ U[0, 1) falls past the total mass 1 - sum min(p, q) most of the time, and every such
    u lands on the last token id."""
    for i, x in enumerate(draft_tokens):
        if rng.random() >= min(1.0, p_target[i, x] / q_draft[i, x]):
            cdf = np.cumsum(np.maximum(p_target[i] - q_draft[i], 0.0))
            token = min(int(np.searchsorted(cdf, rng.random(), side="right")), len(cdf) - 1)
            return Verification(i, token)
    return Verification(len(draft_tokens), sample_token(p_target[-1], rng))


def abs_residual(p_target, q_draft, draft_tokens, rng) -> Verification:
    """Resamples from norm(|p - q|) instead of norm(max(0, p - q))."""
    for i, x in enumerate(draft_tokens):
        if rng.random() >= min(1.0, p_target[i, x] / q_draft[i, x]):
            r = normalised(np.abs(p_target[i] - q_draft[i]), p_target[i])
            return Verification(i, sample_token(r, rng))
    return Verification(len(draft_tokens), sample_token(p_target[-1], rng))


def residual_from_wrong_row(p_target, q_draft, draft_tokens, rng) -> Verification:
    """After rejecting x_i, resamples from norm(max(0, p_{i+1} - q_i)): the target row one
    position later (an off-by-one in the row index)."""
    for i, x in enumerate(draft_tokens):
        if rng.random() >= min(1.0, p_target[i, x] / q_draft[i, x]):
            return Verification(i, sample_token(residual(p_target[i + 1], q_draft[i]), rng))
    return Verification(len(draft_tokens), sample_token(p_target[-1], rng))


def bonus_from_wrong_row(p_target, q_draft, draft_tokens, rng) -> Verification:
    """When all k drafts are accepted, samples the bonus token from row k-1 instead of k."""
    for i, x in enumerate(draft_tokens):
        if rng.random() >= min(1.0, p_target[i, x] / q_draft[i, x]):
            return Verification(i, sample_token(residual(p_target[i], q_draft[i]), rng))
    k = len(draft_tokens)
    return Verification(k, sample_token(p_target[max(k - 1, 0)], rng))


def one_uniform_reused(p_target, q_draft, draft_tokens, rng) -> Verification:
    """Draws one uniform per round and compares it with every position's acceptance
    probability: the decisions become correlated (all-or-nothing)."""
    u = rng.random()
    for i, x in enumerate(draft_tokens):
        if u >= min(1.0, p_target[i, x] / q_draft[i, x]):
            return Verification(i, sample_token(residual(p_target[i], q_draft[i]), rng))
    return Verification(len(draft_tokens), sample_token(p_target[-1], rng))


# --------------------------------------------------------------------------------------------
# Broken caches
# --------------------------------------------------------------------------------------------


class CommitsOneMoreKVCache(KVCache):
    """commit(n) keeps n + 1 temporary slots (when there are that many): the slot of the
    first rejected draft is kept as if it held the correction token."""

    def commit(self, n: int) -> None:
        super().commit(min(n + 1, self.pending))


class KeepsRejectedSlotKVCache(KVCache):
    """After a rejection, the first rejected slot stays in the attended history (and shifts
    every later position by one), while `length` still counts only the accepted slots, so
    the loop, which reads `length` to decide what to feed, does not notice."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stale = 0  # rejected slots left behind the committed ones

    @property
    def end(self) -> int:  # where the next forward writes, and the position it starts at
        return self.length + self.stale + self.pending

    def commit(self, n: int) -> None:
        left_behind = int(n < self.pending)
        super().commit(n)
        self.stale += left_behind

    def reset(self) -> None:
        super().reset()
        self.stale = 0


def cache_like(cache: KVCache, cls: type[KVCache]) -> KVCache:
    L, nh, N, hs = cache.k.shape
    return cls(L, nh, hs, N)


class TargetWithCache(GPT):
    """The same target model, whose `new_cache` returns a broken cache class."""

    cache_class: type[KVCache] = KVCache

    def new_cache(self, capacity: int | None = None) -> KVCache:
        return cache_like(super().new_cache(capacity), self.cache_class)


@cache
def target_with_cache(target: GPT, cls: type[KVCache]) -> GPT:
    broken = type(f"TargetWith{cls.__name__}", (TargetWithCache,), {"cache_class": cls})
    return broken(target.config, target.params)


class DrafterWithCache(ModelDrafter):
    def __init__(self, model: GPT, cls: type[KVCache]) -> None:
        super().__init__(model)
        self.cache = cache_like(self.cache, cls)


# --------------------------------------------------------------------------------------------
# Broken drafters
# --------------------------------------------------------------------------------------------


class DraftQWithoutTemperature(ModelDrafter):
    """Samples its tokens with the temperature but reports q computed without it."""

    def propose(self, context, k, sampling, rng) -> Draft:
        draft = super().propose(context, k, sampling, rng)
        if k == 0:
            return draft
        logits = self.model.forward(np.concatenate([context, draft.tokens[:-1]]))[-k:]
        return Draft(draft.tokens, probabilities(logits, replace(sampling, temperature=1.0)))


class ArgmaxDraftSoftQ(ModelDrafter):
    """Proposes the draft's argmax tokens but reports the soft q ("argmax drafts judged with
    soft q", a bug seen in real projects): q is no longer the law the tokens came from."""

    def propose(self, context, k, sampling, rng) -> Draft:
        draft = super().propose(context, k, SamplingParams(0.0), rng)
        if k == 0:
            return draft
        logits = self.model.forward(np.concatenate([context, draft.tokens[:-1]]))[-k:]
        return Draft(draft.tokens, probabilities(logits, sampling))


class DrafterSkipsCatchUp(ModelDrafter):
    """Feeds only the last context token each round, as if its cache held everything else:
    after a round where all k drafts were accepted it never sees x_k (the catch-up)."""

    def propose(self, context, k, sampling, rng) -> Draft:
        n = self.cache.length
        if 0 < n < len(context) - 1:
            context = np.concatenate([context[:n], context[-1:]])  # what this drafter feeds
        return super().propose(context, k, sampling, rng)


class LookupJudgedWithSoftQ(HybridDrafter):
    """A point-mass draft judged with a soft q: the hybrid copies its drafts by prompt lookup
    (chosen, not drawn) but reports the draft model's soft q rows for those tokens, so verify
    accepts x with min(1, p(x)/q_model(x)) instead of p(x)."""

    def propose(self, context, k, sampling, rng) -> Draft:
        draft = super().propose(context, k, sampling, rng)
        m = len(draft.tokens)
        if self.proposer is not self.lookup or m == 0:
            return draft
        logits = self.fallback.model.forward(np.concatenate([context, draft.tokens[:-1]]))[-m:]
        return Draft(draft.tokens, probabilities(logits, sampling))


class LookupKeepsRejectedDrafts(LookupDrafter):
    """Lookup reading tokens that were drafted but never committed: it keeps its own copy of
    the text it searches and writes each round's drafts into it; commit(n) keeps the n
    accepted ones, but rollback forgets to drop the rest, so later rounds also match (and
    copy) rejected drafts."""

    def reset(self) -> None:
        self.text: list[int] = []  # what it searches: meant to be the committed tokens
        self.seen = 0  # context tokens copied into self.text so far

    def prefill(self, tokens) -> None:
        self.reset()

    def propose(self, context, k, sampling, rng) -> Draft:
        self.text += [int(t) for t in context[self.seen :]]
        self.seen = len(context)
        text = np.asarray(self.text, dtype=np.int64)
        tokens = lookup_continuation(text, k, self.max_ngram, self.min_ngram, self.prefer)
        self.text += [int(t) for t in tokens]  # written as it proposes them
        return Draft(tokens, point_mass_rows(tokens, self.n_vocab))

    def commit(self, n_accepted: int) -> None:
        self.seen += n_accepted  # the accepted drafts are in the text already

    def rollback(self) -> None:
        pass  # the bug: the drafts that were not accepted stay in self.text


class HeadsJudgedWithAnotherHeadsQ(HeadsDrafter):
    """Extra heads whose q rows are handed over in the wrong order: draft i was drawn from
    head i, but verify judges it with the row of another head (the rows reversed)."""

    def propose(self, context, k, sampling, rng) -> Draft:
        draft = super().propose(context, k, sampling, rng)
        return Draft(draft.tokens, draft.q[::-1].copy())


class EarlyExitKeepsRejectedKV(EarlyExitDrafter):
    """Early exit whose lower-layer cache keeps the first rejected draft's slot in its
    history (the KeepsRejectedSlotKVCache bug): the rows it shares, and the K/V the
    verification pass copies from it, then carry a rejected draft into the target cache."""

    def __init__(self, target: GPT, n_layer: int, head=None) -> None:
        super().__init__(target, n_layer, head)
        self.cache = cache_like(self.cache, KeepsRejectedSlotKVCache)


# Three EAGLE bugs (reference/eagle.py). Only (b) moves the output law: the other two still
# draft from rows that depend on committed tokens and earlier drafts alone, and report the very
# q each draft was drawn from, so verification keeps the target's law whatever they read. What
# they change is q itself, and so the acceptance: the oracle sees them in the law of the
# accepted counts (whose exact law EagleProposals computes from the right alignment), and
# exactly in its row check (self_drafting.eagle_row_deviation).


class EagleTokensNotShifted(EagleDrafter):
    """(a) The feature one position off, the way ports of EAGLE get it wrong: the feature
    stream and the token stream zipped at the same index, [e(x(t)); f(t)], i.e. e(x(t+1))
    fused with f(t+1) instead of f(t) (the other off-by-one, f(t-1), is rarer: it needs a
    shift too many, where this one is a shift forgotten). EAGLE's own drafter drops the first
    input id before fusing, because f(t) already encodes x(t): the token it must be told is
    x(t+1), the one sampled from f(t)'s row, which no feature yet knows. Zipped, each row
    repeats what its feature knows and every q misses the token just before it (q1 the last
    committed token, q2 the first draft): the drafter is back to what extra heads see.
    The output law stays the target's (q depends only on committed tokens and earlier
    drafts, and is the law each draft was drawn from), so no token law can see this bug; the
    acceptance can: the oracle's exact law of round 1's accepted count assumes the aligned
    drafter, and so does its row check (q against EagleProposals' rows, which fuse f(t)
    from a plain forward of the target with x(t+1)). Fix: fuse context[t + 1] with f(t)."""

    def prefill(self, tokens) -> None:
        self._behind = int(tokens[0]) if len(tokens) else 0  # the token one behind
        super().prefill(tokens)

    def propose(self, context, k, sampling, rng) -> Draft:
        # the catch-up starts at the first uncached position: it feeds x(t) there, not x(t+1)
        self._behind = int(context[min(self.cache.length, len(context) - 1)])
        return super().propose(context, k, sampling, rng)

    def fuse(self, tokens: np.ndarray, f: np.ndarray) -> np.ndarray:
        # tokens [T] (meant: x(t+1)) -> the bug feeds x(t): every token one step late
        late = np.concatenate([[self._behind], tokens[:-1]]).astype(np.int64)
        self._behind = int(tokens[-1])
        return super().fuse(late, f)


class EagleQAtTemperatureOne(EagleDrafter):
    """(b) q computed at T = 1 while the tokens are drafted at T: each draft is drawn from
    softmax(logits / T) (with top-k / top-p) but the row handed to verify is softmax(logits)
    with the same top-k / top-p, as when a drafter keeps the plain softmax it uses to rank
    its candidates. verify's min(1, p/q) then corrects the wrong q, and the output law is
    biased: the first emitted token already follows neither p nor q. q must be the law the
    draft was drawn from: the rows of `probabilities(logits, sampling)` it sampled, never
    recomputed with other settings. (At T = 1 the two coincide and the bug is invisible.)"""

    def propose(self, context, k, sampling, rng) -> Draft:
        self._f_hat: list[np.ndarray] = []  # each row's predicted feature, in order
        draft = super().propose(context, k, sampling, rng)
        if not self._f_hat:
            return draft
        plain = replace(sampling, temperature=1.0)
        q = np.stack([EagleDrafter.q_row(self, f, plain) for f in self._f_hat])
        return Draft(draft.tokens, q.astype(np.float32))

    def q_row(self, f_hat: np.ndarray, sampling: SamplingParams) -> np.ndarray:
        self._f_hat.append(f_hat.copy())  # the draft is drawn from this row (at T) ...
        return super().q_row(f_hat, sampling)  # ... and the one reported is recomputed at 1


class EagleKeepsDraftFeatures(EagleDrafter):
    """(c) Features not rolled back: commit(n) keeps the accepted drafts' rows in the
    drafter's cache, as a draft model's cache rightly does. But an EAGLE draft row was fed
    the drafter's own predicted feature f^, not the target's f; those slots must be dropped
    with the rejected ones and rebuilt from the true features that arrive after the round
    (observe_features), as EAGLE does by keeping its stable cache from before the draft
    steps. Kept, they stay in every later row's attention and the true features of those
    positions are never fed. Silent for the output law (q is still the law each draft was
    drawn from, and depends on committed tokens and earlier drafts only), loud in the
    acceptance after a round that kept a draft: the oracle's exact law of round 2's
    accepted count, and its row check from round 2 on. It breaks the drafter's KV invariant:
    the committed slots must equal a fresh prefill of the same (true feature, token)
    history. (Keeping the rejected drafts' rows as well would not stay silent: the next
    catch-up finds nothing left to feed and raises.)"""

    def commit(self, n_accepted: int) -> None:
        # the bug: the catch-up rows and the accepted drafts' rows (fed predicted features)
        self.cache.commit(min(self._fed_context + n_accepted, self.cache.pending))


# Two mistakes of the Llama family (reference/llama.py), in drafters made of the target: each
# keeps the output law (q is still the row each draft was drawn from) and moves q, which the
# row check of the loop sees exactly (self_drafting.loop_row_deviation, on the Llama
# setups of tests/distribution/test_llama_self_drafting_law.py, LLAMA_DRAFTERS below).


class EagleRotatedFromZero(EagleDrafter):
    """EAGLE's Llama block rotated at the positions of the rows it is handed (0, 1, ...),
    as an uncached pass would be, while it writes them at its cache's slots cache.end..: a
    port that builds RoPE's angles from the call instead of the slots. GPT-2's block reads no
    position, so the same code is right there; a Llama block's queries and keys then turn by
    the wrong angles. The first catch-up, from an empty cache, is right by luck; every draft
    step after it is rotated as position 0 against keys at their true positions, and from
    round 2 on so are the catch-up rows. Fix: rotate slot t by t (causal_placement at
    cache.end, as `step` does)."""

    def step(self, g: np.ndarray) -> np.ndarray:
        at = causal_placement(self.cache.end, len(g))
        wrong = replace(at, positions=at.positions - self.cache.end)  # the bug: from 0
        out = self.block_model.blocks(g, self.cache, wrong, 0, 1)
        self.cache.mark_written(len(g))
        return out


class ExitNormedAsGPT2(EarlyExitDrafter):
    """Early exit on a Llama-family target whose exit head runs GPT-2's norm kind: a
    LayerNorm (the row centred on its mean) with the RMSNorm's gain and no bias, as when an
    exit head written for GPT-2 is handed a Llama's trained gain (or its model.norm). The
    rows it drafts from are no longer the head's; q is still what each draft was drawn from,
    so only the acceptance moves. Fix: the family's own norm, the cut model's `norm`."""

    def exit_logits(self, x: np.ndarray) -> np.ndarray:
        if self.adapter is not None:
            w, b = self.adapter
            x = x + x @ w + b
        g, eps = self.model.params["model.norm.weight"], self.model.config.rms_norm_eps
        centred = x - x.mean(axis=-1, keepdims=True)  # the bug: LayerNorm's centring
        z = g * centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)
        return self.model.logits(z)


# Three mistakes only the proposal, draw and batch laws see (specdec/oracle/proposals.py,
# fat_tails.py, tests/distribution/test_batch_law.py): each keeps every loop law of the
# oracle's own setups, because those setups never run the code they break.


class EagleTreeLabelsChosenAsSampled(EagleTreeDrafter):
    """An EAGLE-2 tree whose chosen nodes claim to be SAMPLED from the drafter's confidence
    rows: the tree's tokens are the same (each expanded node's likeliest children, the
    budget's most confident nodes), but each node is handed over with draws SAMPLED and q
    = its parent's confidence row (softmax at T = 1), as if the children had been drawn
    from it, instead of POINT with a one-hot q. They were chosen, not drawn: verify_tree
    then accepts x with min(1, p(x)/c(x)) and corrects from the residual of a law the
    token never followed, and the output law moves at T > 0 (at T = 0 a one-hot p decides
    alone). Every tree law of the oracle passed it: they run on the oracle's own table
    drafters, never on this drafter's proposals. Caught by the proposal law
    (`eagle-tree`): a label that is not the rule's is an impossible proposal. Fix: label a
    node POINT, with a one-hot q, whenever the drafter chose it."""

    def confidence(self, f_hat: np.ndarray) -> np.ndarray:
        rows = super().confidence(f_hat)
        self._rows_seen.extend(np.asarray(rows))  # in the order grow computes them
        return rows

    def grow(self, context, levels, budget, room, tokens, parents, scores) -> None:
        self._rows_seen: list[np.ndarray] = []
        super().grow(context, levels, budget, room, tokens, parents, scores)
        # the nodes grow computed a confidence row for are the root and the expanded ones,
        # in id order: exactly the parents of some candidate
        row_of = dict(zip(sorted(set(parents[1:])), self._rows_seen, strict=True))
        self._claimed = [row_of[parents[i]] for i in best_candidates(scores, budget)]

    def propose_tree(self, context, max_depth, max_nodes, sampling, rng) -> Tree:
        self._claimed = []
        tree = super().propose_tree(context, max_depth, max_nodes, sampling, rng)
        if tree.n_nodes == 1:
            return tree
        q = np.stack([np.zeros_like(self._claimed[0]), *self._claimed]).astype(np.float32)
        return Tree(tree.tokens, tree.parents, q, (ROOT,) + (SAMPLED,) * (tree.n_nodes - 1))


def eagle_tree_like(cls: type[EagleTreeDrafter], drafter: EagleTreeDrafter) -> EagleTreeDrafter:
    # a broken EAGLE-2 tree drafter around the same EAGLE drafter, budget, depth and top
    return cls(drafter.eagle, drafter.max_nodes, drafter.depth, drafter.top)


TAIL_FLOOR = 1e-3  # the broken draw below never returns an id less likely than this


def compiled_draw_skips_tail(z, temperature, rng, out, floor: float = TAIL_FLOOR) -> int:
    """The compiled draw with its tail cut off: out = q is the compiled row, every id kept,
    but the inverse CDF runs over the ids of q >= 1e-3 only (a loop that skips the long
    tail of tiny probabilities to save time, renormalising over the rest). The q handed to
    verify keeps the skipped ids, so min(1, p/q) and the residual assume mass the draw
    never delivers: exactness is off by the skipped mass, about 1 % on the bundled draft's
    rows at T = 1.3. The draw's own law test passed it (its six-logit row holds almost
    nothing below 1e-3), and so did the loop laws (their drafters never use the compiled
    draw). Caught by the fat-tail law (`bundled prose`): the ids below 1e-3 are cells of
    their own, by decade, and come out empty. Fix: draw over every id of the row."""
    sampled_draw = optional.compiled_draw().sampled_draw

    sampled_draw(z, np.float64(temperature), 0.0, out)  # out = q, every id
    kept = np.where(out >= floor, out, 0.0).astype(np.float64)
    cdf = np.cumsum(kept)
    return min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), len(z) - 1)


class SameUniforms:
    """A generator stand-in for one drafting step: every row asking for k uniforms gets
    the first k of ONE draw, so rows with the same context draft the same tokens."""

    def __init__(self, u: np.ndarray) -> None:
        self.u = u

    def random(self, size=None):
        return self.u[:size].copy() if size is not None else float(self.u[0])


def twin_batch_shares_draft_uniforms(target, drafters, prompts, **kwargs):
    """The twin's batched drafting (gpu/device/batch_drafting.py, BatchModelDrafter) with
    one set of drafting uniforms for the whole batch: each round draws K uniforms once and
    hands row b the first k_b of them, instead of k_b fresh ones per row in row order.
    Every row's drafts still follow its own q (its marginal law is exact, and so is each
    row's output), but rows that draft from the same rows draft the same tokens: the rows'
    randomness is coupled, and the batch's sequences are no longer independent. The twin's
    batch laws passed it: their rows are close to point masses, where shared uniforms
    change nothing visible. Caught by the spread batch's independence laws
    (`spread:first01`: three rows with one prompt, at T = 1.5). Fix: draw each row's
    uniforms afresh (u[b, :k_b] = rng.random(k_b), rows in order)."""
    gpu = optional.twin()

    twin_batch = gpu.batch
    real = twin_batch.batch_drafting

    def drafting(rows, from_rows=twin_batch.BATCHED_FROM_ROWS):
        chosen = real(rows, from_rows)
        if type(chosen) is twin_batch.BatchModelDrafter:  # rows drafting together
            return shared_uniforms_drafter()(chosen.drafters, chosen.cache)
        return chosen

    with mock.patch.object(twin_batch, "batch_drafting", drafting):
        return twin_batch.speculative_generate_batch(target, drafters, prompts, **kwargs)


@cache
def shared_uniforms_drafter() -> type:
    gpu = optional.twin()

    class SharedDraftUniforms(gpu.device.batch_drafting.BatchModelDrafter):
        def propose(self, contexts, k_rounds, sampling, rng, n_vocab: int):
            K = max((k or 0) for k in k_rounds)  # the bug: K uniforms for every row
            shared = SameUniforms(rng.random(K))
            return super().propose(contexts, k_rounds, sampling, shared, n_vocab)

    return SharedDraftUniforms


# --------------------------------------------------------------------------------------------
# Broken loops: the signature of speculative_generate
# --------------------------------------------------------------------------------------------


@cache
def drafter_of(cls: type[ModelDrafter], model: GPT, *args) -> ModelDrafter:
    return cls(model, *args)


def with_drafter(cls: type[ModelDrafter], *args) -> Callable:
    def generate(target, drafter, prompt, **kwargs):
        return speculative_generate(target, drafter_of(cls, drafter.model, *args), prompt, **kwargs)

    return generate


def with_lookup(cls: type[LookupDrafter]) -> Callable:
    # the setup's LookupDrafter replaced by a broken one with the same rule
    def generate(target, drafter, prompt, **kwargs):
        rule = (drafter.max_ngram, drafter.min_ngram, drafter.prefer)
        broken = cls(drafter.n_vocab, drafter.n_ctx, *rule)
        return speculative_generate(target, broken, prompt, **kwargs)

    return generate


def with_hybrid(cls: type[HybridDrafter]) -> Callable:
    # the setup's HybridDrafter replaced by a broken one around the same two drafters
    def generate(target, drafter, prompt, **kwargs):
        return speculative_generate(target, cls(drafter.lookup, drafter.fallback), prompt, **kwargs)

    return generate


def eagle_like(cls: type[EagleDrafter], drafter: EagleDrafter) -> EagleDrafter:
    # a broken EAGLE drafter with the parts of `drafter`: its fusion layer, its block and,
    # for EAGLE-3, its feature layers and their reduction
    params = {"fc.weight": drafter.w, "fc.bias": drafter.b}
    block = block_prefix(drafter.target.config)  # GPT-2's "h.0.", a Llama's "model.layers.0."
    params |= {n: w for n, w in drafter.block_model.params.items() if n.startswith(block)}
    reduce = getattr(drafter, "reduce", None)
    if reduce is not None:
        params |= {"reduce.weight": reduce[0], "reduce.bias": reduce[1]}
    layers = getattr(drafter, "feature_layers", None)
    return cls(drafter.target, params, **({} if layers is None else {"feature_layers": layers}))


def with_self_drafter(cls: type) -> Callable:
    # the setup's early-exit, heads or EAGLE drafter replaced by a broken one with its parts
    def generate(target, drafter, prompt, **kwargs):
        if isinstance(drafter, EagleDrafter):
            broken = eagle_like(cls, drafter)
        elif isinstance(drafter, EarlyExitDrafter):
            head = exit_norm_of(drafter)
            if drafter.adapter is not None:
                head |= {
                    "exit.proj.weight": drafter.adapter[0],
                    "exit.proj.bias": drafter.adapter[1],
                }
            broken = cls(drafter.target, drafter.n_layer, head)
        else:
            heads = {}
            for i in range(drafter.n_heads):
                heads |= {
                    f"heads.{i}.weight": drafter.head_weight(i),
                    f"heads.{i}.bias": drafter.b[i],
                }
            broken = cls(drafter.target, heads)
        return speculative_generate(target, broken, prompt, **kwargs)

    return generate


def exit_norm_of(drafter: EarlyExitDrafter) -> dict:
    # the exit norm the drafter's cut model reads, as an exit head of its family names it
    P = drafter.model.params
    if isinstance(drafter.target.config, LlamaConfig):
        return {"exit.norm.weight": P["model.norm.weight"]}
    return {"exit.ln.weight": P["ln_f.weight"], "exit.ln.bias": P["ln_f.bias"]}


def with_target_cache(cls: type[KVCache]) -> Callable:
    def generate(target, drafter, prompt, **kwargs):
        return speculative_generate(target_with_cache(target, cls), drafter, prompt, **kwargs)

    return generate


def patched(name: str, replacement: Callable) -> Callable:
    """speculative_generate with one helper of reference.speculative replaced."""

    def generate(target, drafter, prompt, **kwargs):
        with mock.patch.object(speculative, name, replacement):
            return speculative_generate(target, drafter, prompt, **kwargs)

    return generate


def target_probabilities_without(field: str, value) -> Callable:
    # the target side's `probabilities` with one sampling field reset (the draft keeps it)
    def target_probabilities(logits, params: SamplingParams):
        return probabilities(logits, replace(params, **{field: value}))

    return target_probabilities


def emitted_tokens_without_eos_cut(verification, draft, eos_id, remaining) -> list[int]:
    return verification.emitted(draft.tokens)[:remaining]  # forgets to cut after EOS


# --------------------------------------------------------------------------------------------
# The catalogue: each variant, the check that must catch it, and the sample size used
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    name: str
    doc: str
    # what `implementation` is: "verify" or "loop" (the signatures above); "proposal" (drafter
    # -> the broken drafter made of its parts); "draw" (the compiled draw's signature,
    # fat_tails.Draw); "batch" (speculative_generate_batch's signature)
    kind: str
    implementation: Callable
    # the real check that must reject it, "<setup>:<law>": a VERIFY_SETUPS or ALL_LOOP_SETUPS
    # entry; for the new kinds a PROPOSAL_SETUPS entry, a fat_tails row, BATCH_SPREAD_SETUPS
    check: str
    n: int  # samples in the power test (at most half the real check's)

    @property
    def setup(self) -> str:  # the VERIFY_SETUPS / ALL_LOOP_SETUPS entry of the check
        return self.check.split(":")[0]


def broken_verify(fn: Callable, check: str, n: int) -> Variant:
    return Variant(fn.__name__, fn.__doc__, "verify", fn, check, n)


def broken_loop(name: str, doc: str, generate: Callable, check: str, n: int) -> Variant:
    return Variant(name, doc, "loop", generate, check, n)


CATALOGUE = [
    broken_verify(swapped_ratio, "ab:output", 2000),
    broken_verify(unnormalised_residual, "fixed_k3:joint", 2000),
    broken_verify(abs_residual, "fixed_k3:joint", 2000),
    broken_verify(residual_from_wrong_row, "fixed_k3:joint", 2000),
    broken_verify(bonus_from_wrong_row, "fixed_k3:joint", 8000),
    broken_verify(one_uniform_reused, "fixed_k3:joint", 2000),
    broken_loop(
        "temperature_on_draft_side_only",
        "The target's rows are computed without the temperature; the draft applies it.",
        patched("probabilities", target_probabilities_without("temperature", 1.0)),
        "topk_k3_eos:tokens",
        1000,
    ),
    broken_loop(
        "top_k_on_draft_side_only",
        "The target's rows are computed without top-k; the draft applies it.",
        patched("probabilities", target_probabilities_without("top_k", None)),
        "topk_k3_eos:tokens",
        1000,
    ),
    broken_loop(
        "draft_q_without_temperature",
        DraftQWithoutTemperature.__doc__,
        with_drafter(DraftQWithoutTemperature),
        "topk_k3_eos:tokens",
        2500,
    ),
    broken_loop(
        "argmax_draft_soft_q",
        ArgmaxDraftSoftQ.__doc__,
        with_drafter(ArgmaxDraftSoftQ),
        "t1_k2:tokens",
        1000,
    ),
    broken_loop(
        "tokens_after_eos_kept",
        "emitted_tokens forgets to cut after EOS (it cuts at the length budget only).",
        patched("emitted_tokens", emitted_tokens_without_eos_cut),
        "topp_k2_eos:tokens",
        1000,
    ),
    broken_loop(
        "target_cache_commits_one_more",
        "Target cache: " + CommitsOneMoreKVCache.__doc__,
        with_target_cache(CommitsOneMoreKVCache),
        "t1_k2:tokens",
        1000,
    ),
    broken_loop(
        "target_cache_keeps_rejected_slot",
        "Target cache: " + KeepsRejectedSlotKVCache.__doc__,
        with_target_cache(KeepsRejectedSlotKVCache),
        "t1_k2:tokens",
        1000,
    ),
    broken_loop(
        "draft_cache_commits_one_more",
        "Draft cache: " + CommitsOneMoreKVCache.__doc__,
        with_drafter(DrafterWithCache, CommitsOneMoreKVCache),
        "t1_k2:round2",
        1000,
    ),
    broken_loop(
        "draft_cache_keeps_rejected_slot",
        "Draft cache: " + KeepsRejectedSlotKVCache.__doc__,
        with_drafter(DrafterWithCache, KeepsRejectedSlotKVCache),
        "t1_k2:round2",
        2500,
    ),
    broken_loop(
        "draft_skips_catch_up",
        DrafterSkipsCatchUp.__doc__,
        with_drafter(DrafterSkipsCatchUp),
        "t1_k2:round2",
        1000,
    ),
    broken_loop(
        "lookup_point_mass_judged_with_soft_q",
        LookupJudgedWithSoftQ.__doc__,
        with_hybrid(LookupJudgedWithSoftQ),
        "hybrid_t1_k2:tokens",
        1000,
    ),
    broken_loop(
        "lookup_reads_rejected_drafts",
        LookupKeepsRejectedDrafts.__doc__,
        with_lookup(LookupKeepsRejectedDrafts),
        "lookup_topk_k3_eos:round2",
        1000,
    ),
]

CATALOGUE += [
    broken_loop(
        "heads_judged_with_another_heads_q",
        HeadsJudgedWithAnotherHeadsQ.__doc__,
        with_self_drafter(HeadsJudgedWithAnotherHeadsQ),
        "heads_t1_k3:tokens",
        2000,
    ),
    broken_loop(
        "early_exit_keeps_rejected_kv",
        EarlyExitKeepsRejectedKV.__doc__,
        with_self_drafter(EarlyExitKeepsRejectedKV),
        "exit_t1_k2:tokens",
        2000,
    ),
    # EAGLE: (b) moves the token law; (a) and (c) keep it and move the acceptance only, so
    # they are caught by the accepted-count laws, as the draft model's silent cache bugs are
    broken_loop(
        "eagle_feature_one_position_off",
        EagleTokensNotShifted.__doc__,
        with_self_drafter(EagleTokensNotShifted),
        "eagle_t1_k3:round1",
        1000,
    ),
    broken_loop(
        "eagle_q_at_temperature_one",
        EagleQAtTemperatureOne.__doc__,
        with_self_drafter(EagleQAtTemperatureOne),
        "eagle_topk_k2_eos:tokens",
        2000,
    ),
    broken_loop(
        "eagle_keeps_draft_features",
        EagleKeepsDraftFeatures.__doc__,
        with_self_drafter(EagleKeepsDraftFeatures),
        "eagle_t1_k3:round2",
        1000,
    ),
]

# Where the loop laws are thin (issue 51): a drafter's own proposal, the compiled draw on a
# fat tail, rows of a batch coupled on the draft side. Each passed every check above.
CATALOGUE += [
    Variant(
        "eagle_tree_labels_chosen_nodes_sampled",
        EagleTreeLabelsChosenAsSampled.__doc__,
        "proposal",
        partial(eagle_tree_like, EagleTreeLabelsChosenAsSampled),
        "eagle-tree:T>0",
        10,
    ),
    Variant(
        "compiled_draw_skips_tail",
        compiled_draw_skips_tail.__doc__,
        "draw",
        compiled_draw_skips_tail,
        "bundled prose:tail",
        10_000,
    ),
    Variant(
        "twin_batch_shares_draft_uniforms",
        twin_batch_shares_draft_uniforms.__doc__,
        "batch",
        twin_batch_shares_draft_uniforms,
        "spread:first01",
        500,
    ),
]

VARIANTS: dict[str, Variant] = {variant.name: variant for variant in CATALOGUE}
# the broken EAGLE drafters by catalogue name: test_power.py also holds their q rows against
# the oracle's (self_drafting.eagle_row_deviation), the check that sees every one of them
EAGLE_DRAFTERS: dict[str, type[EagleDrafter]] = {
    "eagle_feature_one_position_off": EagleTokensNotShifted,
    "eagle_q_at_temperature_one": EagleQAtTemperatureOne,
    "eagle_keeps_draft_features": EagleKeepsDraftFeatures,
}
# The broken self-drafters the Llama row check must see (tests/distribution/
# test_llama_self_drafting_law.py): the two Llama mistakes and the catalogue's own, by name
LLAMA_DRAFTERS: dict[str, type] = {
    "eagle_rotated_from_zero": EagleRotatedFromZero,
    "exit_normed_as_gpt2": ExitNormedAsGPT2,
    "early_exit_keeps_rejected_kv": EarlyExitKeepsRejectedKV,
    "heads_judged_with_another_heads_q": HeadsJudgedWithAnotherHeadsQ,
} | EAGLE_DRAFTERS

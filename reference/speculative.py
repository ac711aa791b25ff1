"""Speculative decoding: one named round, and the loop that repeats it.

Before the first round both models prefill every prompt token but the last. One round
(`speculative_round`), with `context` = the committed tokens, whose last token neither
model has cached yet:

    1. draft              the drafter proposes x_1..x_k and the rows q_1..q_k they came from
    2. verification pass  ONE target forward over [catch-up tokens, x_1..x_k]; its last k+1
                          rows are p_1..p_{k+1}: row i is the target's distribution *after*
                          x_1..x_{i-1}, so it scores x_i, and row k+1 is the bonus row
    3. verify             accept a prefix of n drafts and sample one more token (the
                          residual after a rejection, the bonus after k acceptances)
    4. commit, rollback   both caches keep the catch-up tokens and x_1..x_n, and drop the
                          rest of what they wrote this round; the new token's K/V is
                          computed next round

`speculative_generate` is prefill + rounds + the stop rules (EOS, length); it records the
statistics and the trace from what each round returns. The law of the emitted sequence
equals the target's own autoregressive law, for any k, drafter and sampling transform;
`pytest -m distribution` checks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from reference.autoregressive import check_eos, check_length_budget
from reference.checks import (
    as_token_array,
    check_clock,
    check_generator,
    check_positive_int,
    check_probability_rows,
)
from reference.drafters import (
    CHAIN_PARTS,
    Draft,
    Drafter,
    SharedLayers,
    check_drafter,
    proposals_checked,
)
from reference.kv_cache import KVCache, catch_up_tokens
from reference.model import GPT
from reference.sampling import SamplingParams, check_sampling, probabilities
from reference.verification import ROW_SUM_ATOL, Verification, verify_unchecked

ACCEPTED, REJECTED, NEVER_EXAMINED = "accepted", "rejected", "never examined"


@dataclass(frozen=True)
class CacheSpan:
    """One cache through one round: committed slots before, slots written, committed after."""

    before: int
    written: int
    after: int


@dataclass(frozen=True)
class Round:
    """What one round did."""

    draft: Draft  # tokens [k_round] and q [k_round, V]
    p: np.ndarray  # [k_round + 1, V] the verification pass's rows (last = bonus row)
    verification: Verification  # accepted drafts and the token after them
    n_catch_up: int  # committed tokens the target cache had not seen, fed before the drafts
    target_cache: CacheSpan
    draft_cache: CacheSpan | None  # None for a drafter without a cache

    @property
    def k(self) -> int:  # drafts proposed this round
        return len(self.draft.tokens)

    @property
    def nodes(self) -> int:  # candidates the verification pass judged: a chain's k drafts
        return self.k

    @property
    def examined(self) -> int:  # positions judged: the accepted ones and the one rejected
        return min(self.verification.accepted + 1, self.k)


@dataclass
class SpeculativeStats:
    """What a run did, counted by draft position. A chain drafts one token per position; a
    tree (reference/tree.py) drafts one or more sibling nodes per position (= depth), and its
    accepted path takes at most one of them. So `drafted` and `accepted` count positions
    for both, and `nodes` counts the candidates verified (a chain: its drafts)."""

    k: int  # draft length asked for (a tree: its depth)
    rounds: int = 0  # target forward passes (one verification each)
    drafted: int = 0  # draft positions sent to verification (a tree: its depth per round)
    accepted: int = 0  # draft tokens accepted (a tree: the accepted paths' lengths)
    rejections: int = 0  # rounds that ended on a rejection (a tree: every child rejected)
    emitted: int = 0  # tokens returned (after the EOS / length cut)
    nodes: int = 0  # candidate tokens verified (a tree: every node but the root)
    accepted_per_round: list[int] = field(default_factory=list)
    drafted_per_round: list[int] = field(default_factory=list)  # k, or fewer near the end
    nodes_per_round: list[int] = field(default_factory=list)
    reached: np.ndarray = None  # [positions] how often draft position i was examined
    accepted_at: np.ndarray = None  # [positions] how often draft position i was accepted
    stop_reason: str = ""  # "eos" or "length"
    positions: int = None  # draft positions counted: k, or fewer when no round can draft k

    def __post_init__(self) -> None:
        # A round never drafts more than max_new_tokens - 1 tokens, so a run sizes its
        # counters by min(k, max_new_tokens): a huge k allocates nothing huge.
        if self.positions is None:
            self.positions = self.k
        if self.reached is None:
            self.reached = np.zeros(self.positions, dtype=np.int64)
        if self.accepted_at is None:
            self.accepted_at = np.zeros(self.positions, dtype=np.int64)

    @classmethod
    def pooled(cls, runs) -> SpeculativeStats:
        """Several runs with the same k as one: counts added, so every rate is pooled
        (e.g. alpha = all accepted / all examined, not a mean of per-run alphas)."""
        runs = list(runs)
        ks = {s.k for s in runs}
        if len(ks) != 1:
            raise ValueError(f"pooled needs runs with one k, got k values {sorted(ks)}")
        total = cls(k=ks.pop(), positions=max(s.positions for s in runs))
        for s in runs:
            for name in ("rounds", "drafted", "accepted", "rejections", "emitted", "nodes"):
                setattr(total, name, getattr(total, name) + getattr(s, name))
            total.accepted_per_round += s.accepted_per_round
            total.drafted_per_round += s.drafted_per_round
            total.nodes_per_round += s.nodes_per_round
            total.reached[: s.positions] += s.reached
            total.accepted_at[: s.positions] += s.accepted_at
        return total

    @property
    def acceptance_rate(self) -> float:
        """Fraction of drafted tokens that were accepted: accepted / drafted."""
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def alpha(self) -> float:
        """Per-position acceptance alpha (Leviathan et al.): accepted / examined positions.

        A position is examined when all drafts before it were accepted; drafts after a
        rejection are never judged, so they are left out. Under the paper's i.i.d. model
        this is the maximum-likelihood estimate of alpha = E[sum_x min(p(x), q(x))]. A tree
        is counted the same way along its walked path: a depth is examined when the walk
        reached its parent and the parent had children, and accepted when one of them was
        (docs/algorithm.md, "Tree drafts").
        """
        examined = self.accepted + self.rejections
        return self.accepted / examined if examined else float("nan")

    @property
    def mean_tokens_per_round(self) -> float:
        return self.emitted / self.rounds if self.rounds else float("nan")

    @property
    def mean_accepted_per_round(self) -> float:  # a tree: the mean accepted path length
        return self.accepted / self.rounds if self.rounds else float("nan")

    @property
    def mean_nodes_per_round(self) -> float:  # candidates verified per round
        return self.nodes / self.rounds if self.rounds else float("nan")

    @property
    def per_position_acceptance(self) -> np.ndarray:  # [positions]: P(accept x_i | examined)
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = self.accepted_at / np.maximum(self.reached, 1)
        return np.where(self.reached > 0, rate, np.nan)

    @property
    def accepted_histogram(self) -> np.ndarray:  # [positions+1]: full rounds by drafts accepted
        """Counts over rounds that drafted the full k. The last rounds of a run may draft
        fewer (never more than could be emitted); counting them would put a bonus-only round
        in the "0 accepted" bin although nothing was rejected."""
        rounds = zip(self.accepted_per_round, self.drafted_per_round, strict=True)
        full = [a for a, d in rounds if d == self.k]
        return np.bincount(np.asarray(full, dtype=np.int64), minlength=self.positions + 1)

    def record(
        self, k_round: int, accepted: int, examined: int | None = None, nodes: int | None = None
    ) -> None:
        # examined: positions judged (default, a chain's: the accepted ones and the rejected
        # one, if any); nodes: candidates verified (default, a chain's: k_round)
        examined = min(accepted + 1, k_round) if examined is None else examined
        nodes = k_round if nodes is None else nodes
        self.rounds += 1
        self.drafted += k_round
        self.accepted += accepted
        self.rejections += int(examined > accepted)
        self.nodes += nodes
        self.accepted_per_round.append(accepted)
        self.drafted_per_round.append(k_round)
        self.nodes_per_round.append(nodes)
        self.reached[:examined] += 1
        self.accepted_at[:accepted] += 1


@dataclass
class RoundTrace:
    """Everything one round did, for the demo's account and the plots."""

    context_len: int  # committed tokens before the round
    draft_tokens: np.ndarray  # [k_round]
    q_rows: np.ndarray  # [k_round, V] draft distributions
    p_rows: np.ndarray  # [k_round+1, V] target distributions (last = bonus row)
    accepted: int  # drafts accepted
    token: int  # correction (after a rejection) or bonus token
    token_kind: str  # "correction" or "bonus"
    emitted: list[int]  # what the round added to the output (after EOS / length cut)
    target_cache: tuple[int, int, int]  # (committed before, written end, committed after)
    draft_cache: tuple[int, int, int] | None  # the same for the drafter's cache, if it has one

    @classmethod
    def of(cls, rnd: Round, context_len: int, emitted: list[int]) -> RoundTrace:
        v, spans = rnd.verification, (rnd.target_cache, rnd.draft_cache)
        target_span, draft_span = ((s.before, s.written, s.after) if s else None for s in spans)
        return cls(
            context_len=context_len,
            draft_tokens=rnd.draft.tokens.copy(),
            q_rows=rnd.draft.q.copy(),
            p_rows=rnd.p.copy(),
            accepted=v.accepted,
            token=v.token,
            token_kind="bonus" if v.accepted == rnd.k else "correction",
            emitted=emitted,
            target_cache=target_span,
            draft_cache=draft_span,
        )

    @property
    def draft_fates(self) -> list[str]:  # [k_round]: ACCEPTED, REJECTED or NEVER_EXAMINED
        """Draft i is accepted (i < accepted), the one rejected (i == accepted), or never
        examined (after the rejection: its row was conditioned on a rejected token)."""
        a = self.accepted
        return [
            ACCEPTED if i < a else REJECTED if i == a else NEVER_EXAMINED
            for i in range(len(self.draft_tokens))
        ]

    @property
    def p_of_drafts(self) -> np.ndarray:  # [k_round]: p_i(x_i)
        return self.p_rows[np.arange(len(self.draft_tokens)), self.draft_tokens]

    @property
    def q_of_drafts(self) -> np.ndarray:  # [k_round]: q_i(x_i)
        return self.q_rows[np.arange(len(self.draft_tokens)), self.draft_tokens]

    @property
    def acceptance_probabilities(self) -> np.ndarray:  # [k_round]: min(1, p/q)
        return np.minimum(1.0, self.p_of_drafts / self.q_of_drafts)


@dataclass
class SpeculativeResult:
    tokens: list[int]  # the generated tokens (prompt excluded)
    stats: SpeculativeStats
    trace: list[RoundTrace] | None = None


def check_pair(target: GPT, drafter: Drafter) -> None:
    if target.n_vocab != drafter.n_vocab:
        raise ValueError(
            f"draft and target must share one vocabulary: target has {target.n_vocab} ids, "
            f"drafter has {drafter.n_vocab}"
        )


def round_draft_length(k: int, remaining: int) -> int:
    # A round emits at most k_round + 1 tokens: never draft what could not be emitted.
    return min(k, remaining - 1)


def check_draft(draft: Draft, k_round: int, n_vocab: int) -> None:
    # A drafter is plugged in from outside: its proposal is checked once, here, before
    # the target reads it (the library's own rows are trusted from here on).
    if not isinstance(draft, Draft):
        raise TypeError(f"the drafter's propose must return a Draft, got {type(draft).__name__}")
    n = len(draft.tokens)
    if n > k_round:
        raise ValueError(
            f"the drafter proposed {n} tokens but was asked for at most {k_round}; a round "
            f"must never draft more than it can emit"
        )
    tokens = as_token_array(draft.tokens, n_vocab, "the drafter's tokens", allow_empty=True)
    q = check_probability_rows(draft.q, "the drafter's q", ROW_SUM_ATOL)
    if q.shape != (n, n_vocab):
        raise ValueError(f"the drafter's q must have shape {(n, n_vocab)}, got {q.shape}")
    if np.any(q[np.arange(n), tokens] <= 0):
        raise ValueError("the drafter proposed a token its own q gives probability 0")


def verification_pass(
    target: GPT,
    cache: KVCache,
    context: np.ndarray,
    draft_tokens: np.ndarray,
    sampling,
    shared: SharedLayers | None = None,
) -> tuple[np.ndarray, int, np.ndarray]:
    # -> (p [k+1, V], number of catch-up tokens fed, h [k+1, C]). ONE target forward over
    # the committed tokens its cache lacks plus the k drafts, written as temporary cache
    # entries; its last k+1 rows score x_1..x_k and the bonus position. h are those rows'
    # final hidden states (what extra heads draft from). With `shared` (an early-exit
    # drafter's rows), the rows it already ran through blocks 0..L'-1 start at block L'.
    new = catch_up_tokens(cache, context)
    tokens = np.concatenate([new, draft_tokens])
    if shared is None:
        x = target.residual_unchecked(tokens, cache)
    else:  # an early-exit drafter's rows continue at its exit layer
        x = shared.continue_in(target, cache, tokens)
    k = len(draft_tokens)
    h = target.norm(x[-(k + 1) :], "ln_f")  # [k+1, C]
    return probabilities(target.logits(h), sampling), len(new), h


def check_shared(shared: SharedLayers | None, target: GPT) -> None:
    # Rows computed by some other model would silently change p: only the target's own.
    if shared is not None and shared.target is not target:
        raise ValueError(
            "the drafter shares lower-layer rows of another model; an early-exit drafter "
            "must be built from the very target it drafts for"
        )


def cache_span_start(cache: KVCache | None) -> tuple[int, int]:
    return (cache.length, cache.end) if cache is not None else (0, 0)


def speculative_round(
    target: GPT,
    cache: KVCache,
    drafter: Drafter,
    context: np.ndarray,
    k: int,
    sampling: SamplingParams,
    rng: np.random.Generator,
    verify_fn: Callable[..., Verification] | None = None,
    clock=None,
) -> Round:
    # context [n] committed tokens -> Round: draft, verification pass, verify, commit and
    # rollback of both caches. `verify_fn` None is the reference's verify on rows the
    # round has already checked; `clock` is charged "draft", "target" and "verify".
    clock = check_clock(clock)
    draft_cache = drafter.cache
    t_before, d_before = cache.length, cache_span_start(draft_cache)[0]

    draft = drafter.propose(context, k, sampling, rng)  # 1. draft
    if not proposals_checked(drafter):  # a drafter from outside: checked before the target reads
        check_draft(draft, k, target.n_vocab)  # it may stop early, never draft more
    check_shared(draft.shared, target)
    clock.mark("draft")
    p, n_catch_up, h = verification_pass(  # 2.
        target, cache, context, draft.tokens, sampling, draft.shared
    )
    clock.mark("target")
    t_written, d_written = cache.end, cache_span_start(draft_cache)[1]
    decide = verify_unchecked if verify_fn is None else verify_fn
    v = decide(p, draft.q, draft.tokens, rng)  # 3. accept a prefix, then one more token
    if verify_fn is not None:  # a plug-in's answer is checked before either cache moves
        v = Verification.from_plugin(v, len(draft.tokens), target.n_vocab, verify_fn)
    clock.mark("verify")

    cache.commit(n_catch_up + v.accepted)  # 4. keep the catch-up tokens and accepted drafts
    cache.rollback()  # ... and drop the rejected drafts' slots
    drafter.commit(v.accepted)
    drafter.rollback()
    drafter.observe(h[v.accepted])  # the target's row that scored the round's last token
    return Round(
        draft=draft,
        p=p,
        verification=v,
        n_catch_up=n_catch_up,
        target_cache=CacheSpan(t_before, t_written, cache.length),
        draft_cache=CacheSpan(d_before, d_written, draft_cache.length) if draft_cache else None,
    )


def emitted_tokens(
    verification: Verification, draft: Draft, eos_id: int | None, remaining: int
) -> list[int]:
    # x_1..x_n + [token], cut just after the first EOS and at the length budget
    out = verification.emitted(draft.tokens)
    if eos_id is not None and eos_id in out:
        out = out[: out.index(eos_id) + 1]
    return out[:remaining]


def prefill(target: GPT, cache: KVCache, drafter: Drafter, prompt: np.ndarray) -> None:
    # Both models cache every prompt token but the last, which (like every round's last
    # emitted token) is fed together with the next drafts.
    drafter.reset()
    if len(prompt) > 1:
        h = target.hidden_unchecked(prompt[:-1], cache)  # [n-1, C]
        cache.commit(len(prompt) - 1)
        drafter.observe(h[-1])  # the target's row that scored the prompt's last token
    drafter.prefill(prompt[:-1])


def speculative_generate(
    target: GPT,
    drafter: Drafter,
    prompt,
    *,
    k: int,
    max_new_tokens: int,
    rng: np.random.Generator,
    sampling: SamplingParams = SamplingParams(),
    eos_id: int | None = None,
    trace: bool = False,
    verify_fn: Callable[..., Verification] | None = None,
    clock=None,
) -> SpeculativeResult:
    # prompt [n] -> SpeculativeResult(tokens [<= max_new_tokens], stats, trace)
    # verify_fn: another implementation of `verify` to run inside the loop (the oracle's
    # plug-in point); None is the reference's. `clock` (e.g. specdec.timing.StageClock) is
    # charged "prefill", then per round "draft", "target", "verify" and "other".
    prompt, k, max_new_tokens, eos_id, clock = check_loop_inputs(
        target, drafter, prompt, k, max_new_tokens, rng, sampling, eos_id, verify_fn, clock
    )
    setup = RunSetup(target, drafter, sampling, rng, verify_fn, clock, speculative_round)
    return run_rounds(setup, prompt, k, max_new_tokens, eos_id, trace)


def check_loop_inputs(
    target,
    drafter,
    prompt,
    k,
    max_new_tokens,
    rng,
    sampling,
    eos_id,
    verify_fn,
    clock,
    required=CHAIN_PARTS,
):
    # every check of `speculative_generate`, before anything is written
    # -> (prompt [n] int64, k, max_new_tokens, eos_id, clock); required: the drafter's parts
    # the loop calls (a chain drafter's; a tree drafter's TREE_PARTS)
    check_drafter(drafter, required)
    check_pair(target, drafter)
    prompt = as_token_array(prompt, target.n_vocab, "prompt")
    k = check_positive_int(k, "k")
    max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens")
    check_generator(rng)
    check_sampling(sampling)
    eos_id = check_eos(eos_id, target.n_vocab)
    check_length_budget(len(prompt), max_new_tokens, target.config.n_ctx, "target")
    check_length_budget(len(prompt), max_new_tokens, drafter.n_ctx, "drafter")
    if verify_fn is not None and not callable(verify_fn):
        raise TypeError(f"verify_fn must be callable or None, got {type(verify_fn).__name__}")
    return prompt, k, max_new_tokens, eos_id, check_clock(clock)


@dataclass(frozen=True)
class RunSetup:
    """What every round of one run shares, in one place: who drafts and who verifies, how
    tokens are drawn, the verify rule, the clock, and which round is played.

    `round` is called as round(target, cache, drafter, context, k, sampling, rng,
    verify_fn, clock): `speculative_round` (a chain), reference.tree's `tree_round`, or the
    GPU twin's round. `traced` turns a round into what a trace keeps (a tree round: its
    accepted path as a chain round); None keeps it as it is."""

    target: GPT
    drafter: Drafter
    sampling: SamplingParams
    rng: np.random.Generator
    verify_fn: Callable[..., object] | None  # None: the library's exact rule
    clock: object  # a StageClock-like timer, or the no-op one (checks.check_clock)
    round: Callable[..., Round]
    traced: Callable[[Round], Round] | None = None

    def play(self, cache: KVCache, context: np.ndarray, k: int) -> Round:
        # one round of this run: draft up to k tokens after `context`, verify, commit
        return self.round(
            self.target,
            cache,
            self.drafter,
            context,
            k,
            self.sampling,
            self.rng,
            self.verify_fn,
            self.clock,
        )


def run_rounds(
    setup: RunSetup, prompt: np.ndarray, k: int, max_new_tokens: int, eos_id, trace: bool
) -> SpeculativeResult:
    # The loop itself, on checked inputs: prefill, rounds (setup.play) until EOS or the
    # length limit, statistics and the trace recorded outside each round. Chains, trees and
    # the GPU twin run this same loop; only setup.round differs.
    target, drafter, clock = setup.target, setup.drafter, setup.clock
    clock.restart()
    cache = target.new_cache()
    prefill(target, cache, drafter, prompt)
    clock.mark("prefill")
    context = prompt.copy()
    out: list[int] = []
    stats = SpeculativeStats(k=k, positions=min(k, max_new_tokens))
    rounds: list[RoundTrace] | None = [] if trace else None

    while True:
        remaining = max_new_tokens - len(out)
        k_round = round_draft_length(k, remaining)
        rnd = setup.play(cache, context, k_round)
        emitted = emitted_tokens(rnd.verification, rnd.draft, eos_id, remaining)
        stats.record(rnd.k, rnd.verification.accepted, rnd.examined, rnd.nodes)
        if rounds is not None:
            kept = setup.traced(rnd) if setup.traced else rnd
            rounds.append(RoundTrace.of(kept, len(context), emitted))
        out.extend(emitted)
        context = np.concatenate([context, np.asarray(emitted, dtype=np.int64)])
        clock.mark("other")
        if eos_id is not None and emitted and emitted[-1] == eos_id:
            stats.stop_reason = "eos"
            break
        if len(out) >= max_new_tokens:
            stats.stop_reason = "length"
            break

    stats.emitted = len(out)
    return SpeculativeResult(tokens=out, stats=stats, trace=rounds)

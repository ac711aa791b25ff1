"""The speculative decoding loop: draft k, verify once, accept a prefix, commit, repeat.

Before the first round both models prefill every prompt token but the last. One round,
with `context` = the committed tokens (its last token is cached by neither model yet):

    1. draft      the drafter proposes x_1..x_k and the rows q_1..q_k they came from
    2. verify     ONE target forward over [uncached context tokens, x_1..x_k]; its last
                  k+1 rows are p_1..p_{k+1}: row i is the target's distribution *after*
                  x_1..x_{i-1}, so it scores x_i, and row k+1 is the bonus row
    3. decide     `verify` accepts a prefix of n drafts and samples one more token
    4. commit     target cache: the uncached context tokens + x_1..x_n (the new token's K/V
                  is computed next round); the rest of the temporary slots are rolled back
    5. emit       x_1..x_n + [token], cut after EOS and at max_new_tokens

The law of the emitted sequence equals the target's own autoregressive law, for any k,
drafter and sampling transform; `pytest -m distribution` checks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from reference.autoregressive import check_eos, check_length_budget
from reference.checks import as_token_array, check_generator, check_positive_int
from reference.drafters import Draft, Drafter
from reference.kv_cache import KVCache
from reference.model import GPT
from reference.sampling import SamplingParams, check_sampling, probabilities
from reference.timing import StageClock, check_clock
from reference.verification import Verification, verify


@dataclass
class SpeculativeStats:
    k: int  # draft length asked for
    rounds: int = 0  # target forward passes (one verification each)
    drafted: int = 0  # draft tokens sent to verification
    accepted: int = 0  # draft tokens accepted
    rejections: int = 0  # rounds that ended on a rejected draft
    emitted: int = 0  # tokens returned (after the EOS / length cut)
    accepted_per_round: list[int] = field(default_factory=list)
    drafted_per_round: list[int] = field(default_factory=list)  # k, or fewer near the end
    reached: np.ndarray = None  # [k] how often draft position i was examined
    accepted_at: np.ndarray = None  # [k] how often draft position i was accepted
    stop_reason: str = ""  # "eos" or "length"

    def __post_init__(self) -> None:
        self.reached = np.zeros(self.k, dtype=np.int64)
        self.accepted_at = np.zeros(self.k, dtype=np.int64)

    @property
    def acceptance_rate(self) -> float:
        """Fraction of drafted tokens that were accepted: accepted / drafted."""
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def alpha(self) -> float:
        """Per-token acceptance alpha (Leviathan et al.): accepted / examined positions.

        A position is examined when all drafts before it were accepted; drafts after a
        rejection are never judged, so they are left out. Under the paper's i.i.d. model
        this is the maximum-likelihood estimate of alpha = E[sum_x min(p(x), q(x))].
        """
        examined = self.accepted + self.rejections
        return self.accepted / examined if examined else float("nan")

    @property
    def mean_tokens_per_round(self) -> float:
        return self.emitted / self.rounds if self.rounds else float("nan")

    @property
    def per_position_acceptance(self) -> np.ndarray:  # [k]: P(accept x_i | x_i examined)
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = self.accepted_at / np.maximum(self.reached, 1)
        return np.where(self.reached > 0, rate, np.nan)

    @property
    def accepted_histogram(self) -> np.ndarray:  # [k+1]: full rounds that accepted 0..k drafts
        """Counts over rounds that drafted the full k. The last rounds of a run may draft
        fewer (never more than could be emitted); counting them would put a bonus-only round
        in the "0 accepted" bin although nothing was rejected."""
        rounds = zip(self.accepted_per_round, self.drafted_per_round, strict=True)
        full = [a for a, d in rounds if d == self.k]
        return np.bincount(np.asarray(full, dtype=np.int64), minlength=self.k + 1)

    def record(self, k_round: int, accepted: int) -> None:
        self.rounds += 1
        self.drafted += k_round
        self.accepted += accepted
        self.rejections += int(accepted < k_round)
        self.accepted_per_round.append(accepted)
        self.drafted_per_round.append(k_round)
        examined = min(accepted + 1, k_round)
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


def check_draft_length(draft: Draft, k_round: int) -> int:
    # -> the number of drafts actually proposed, 0..k_round
    n = len(draft.tokens)
    if n > k_round:
        raise ValueError(
            f"the drafter proposed {n} tokens but was asked for at most {k_round}; a round "
            f"must never draft more than it can emit"
        )
    return n


def target_rows(
    target: GPT, cache: KVCache, context: np.ndarray, draft: Draft, sampling: SamplingParams
) -> tuple[np.ndarray, int]:
    # -> (p [k+1, V], number of context tokens fed). One forward over the tokens the target
    # cache lacks plus the drafts; its last k+1 rows score x_1..x_k and the bonus position.
    new = context[cache.length :]
    logits = target.forward(np.concatenate([new, draft.tokens]), cache)
    k = len(draft.tokens)
    return probabilities(logits[-(k + 1) :], sampling), len(new)


def emitted_tokens(
    verification: Verification, draft: Draft, eos_id: int | None, remaining: int
) -> list[int]:
    # x_1..x_n + [token], cut just after the first EOS and at the length budget
    out = verification.emitted(draft.tokens)
    if eos_id is not None and eos_id in out:
        out = out[: out.index(eos_id) + 1]
    return out[:remaining]


def cache_span(cache) -> tuple[int, int]:
    return (cache.length, cache.end) if cache is not None else (0, 0)


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
    verify_fn: Callable[..., Verification] = verify,
    clock: StageClock | None = None,
) -> SpeculativeResult:
    # prompt [n] -> SpeculativeResult(tokens [<= max_new_tokens], stats, trace)
    # `clock`, if given, is charged "prefill", then per round "draft", "target" (the pass
    # and its k+1 distributions), "verify" and "other" (commit, emit, bookkeeping).
    check_pair(target, drafter)
    prompt = as_token_array(prompt, target.n_vocab, "prompt")
    k = check_positive_int(k, "k")
    max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens")
    check_generator(rng)
    check_sampling(sampling)
    eos_id = check_eos(eos_id, target.n_vocab)
    check_length_budget(len(prompt), max_new_tokens, target.config.n_ctx, "target")
    check_length_budget(len(prompt), max_new_tokens, drafter.n_ctx, "drafter")
    clock = check_clock(clock)
    clock.restart()

    # Prefill: both models cache every prompt token but the last, which (like every round's
    # last emitted token) is fed together with the next drafts.
    cache = target.new_cache()
    if len(prompt) > 1:
        target.forward(prompt[:-1], cache)
        cache.commit(len(prompt) - 1)
    drafter.reset()
    drafter.prefill(prompt[:-1])
    clock.mark("prefill")
    context = prompt.copy()
    out: list[int] = []
    stats = SpeculativeStats(k=k)
    rounds: list[RoundTrace] | None = [] if trace else None
    draft_cache = getattr(drafter, "cache", None)

    while True:
        remaining = max_new_tokens - len(out)
        k_round = round_draft_length(k, remaining)
        t_before, d_before = cache.length, cache_span(draft_cache)[0]

        draft = drafter.propose(context, k_round, sampling, rng)  # 1. draft
        k_round = check_draft_length(draft, k_round)  # a drafter may stop early
        clock.mark("draft")
        p, n_new = target_rows(target, cache, context, draft, sampling)  # 2. one target pass
        clock.mark("target")
        t_end, d_end = cache.end, cache_span(draft_cache)[1]
        v = verify_fn(p, draft.q, draft.tokens, rng)  # 3. accept / correct
        clock.mark("verify")
        cache.commit(n_new + v.accepted)  # 4. commit
        drafter.commit(v.accepted)
        emitted = emitted_tokens(v, draft, eos_id, remaining)  # 5. emit

        stats.record(k_round, v.accepted)
        out.extend(emitted)
        context = np.concatenate([context, np.asarray(emitted, dtype=np.int64)])
        if rounds is not None:
            rounds.append(
                RoundTrace(
                    context_len=len(context) - len(emitted),
                    draft_tokens=draft.tokens.copy(),
                    q_rows=draft.q.copy(),
                    p_rows=p.copy(),
                    accepted=v.accepted,
                    token=v.token,
                    token_kind="bonus" if v.accepted == k_round else "correction",
                    emitted=emitted,
                    target_cache=(t_before, t_end, cache.length),
                    draft_cache=(d_before, d_end, draft_cache.length) if draft_cache else None,
                )
            )
        clock.mark("other")
        if eos_id is not None and emitted and emitted[-1] == eos_id:
            stats.stop_reason = "eos"
            break
        if len(out) >= max_new_tokens:
            stats.stop_reason = "length"
            break

    stats.emitted = len(out)
    return SpeculativeResult(tokens=out, stats=stats, trace=rounds)
